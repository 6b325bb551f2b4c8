"""Normalization, padding/resizing and detection operators (issue 22 part C) against MXNet 1.9.1 references
(tests/data/ops_extra_c, made by its gen.py with MXNet's native kernels), forward and gradients, plus Gluon blocks
exported from MXNet (symbol JSON + .params: a MobileNetV3 block, a style-transfer block, a detection head) and
shape/attribute errors.

The op cases are compiled per family (normalization, resizing, detection), each family in one training build (a
poisoning build: memory nothing wrote reads as NaN) with its cases side by side (node names prefixed `c<i>_`),
inputs with MXNet's grad_req. Checked per case: the inference forward (forward(is_train=False)), the training
forward and, where MXNet has a gradient, the gradients after backward(head_grad:*). Acceptance as the references'
README: max|got - ref| <= 1e-5 * max|ref| (MXNet's two kernel libraries disagree by up to 3e-6 on op gradients);
index outputs (argmax, topk indices, argsort, masks) must be equal, ties broken as MXNet's CPU kernel
(libstdc++'s std::sort/partial_sort for topk and sort, the first index for argmax/argmin). The cases are small, so
a second build tiles every batch-independent case along its first axis until each kernel takes its OpenMP path:
outputs and gradients must be MXNet's tiled (parameters' gradients K times MXNet's). The Gluon blocks: the
inference forward (2e-5, whole networks) and the gradient of the inference function (1e-4: a few layers of
float32 sums). A gradient that is zero in exact arithmetic (a convolution bias before InstanceNorm, InstanceNorm
of one value per instance) is rounding noise in both: compared on the scale of the case's largest gradient.
"""
import json
from dataclasses import replace

import numpy as np
import pytest

from mxcc import sym
from mxcc.errors import AttrError, ShapeError
from mxcc.graph import load_json
from mxcc.graph.ir import Graph
from mxcc.ops import REGISTRY
from mxcc_testing import DATA, SGD0, compile_for_gradients, needs_gcc, rel_err

HERE = DATA / "ops_extra_c"
MANIFEST = json.loads((HERE / "manifest.json").read_text())["cases"]
OP_CASES = [n for n in MANIFEST if not n.startswith("e2e_")]
FAMILY = {"LayerNorm": "norm", "GroupNorm": "norm", "InstanceNorm": "norm", "L2Normalization": "norm",
          "Pad": "resize", "_contrib_AdaptiveAvgPooling2D": "resize", "_contrib_BilinearResize2D": "resize",
          "UpSampling": "resize", "Crop": "resize"}
GROUPS: dict[str, list[str]] = {}       # family -> its cases, compiled together (detection: everything else)
for _n in OP_CASES:
    GROUPS.setdefault(FAMILY.get(MANIFEST[_n]["op"], "detection"), []).append(_n)
E2E_CASES = [n for n in MANIFEST if n.startswith("e2e_")]
INDEX_OPS = {"argmax", "argmin", "argsort"}


def _merged(names: list[str]) -> Graph:
    """The cases' graphs side by side in one graph, every node name prefixed with `c<i>_`."""
    nodes, heads, attrs = [], [], ()
    for i, name in enumerate(names):
        g = load_json(HERE / MANIFEST[name]["files"]["symbol"])
        base, pre = len(nodes), f"c{i}_"
        nodes += [replace(n, id=base + n.id, name=pre + n.name,
                          inputs=tuple(replace(r, node=base + r.node) for r in n.inputs)) for n in g.nodes]
        heads += [replace(h, node=base + h.node) for h in g.heads]
        attrs = g.attrs
    return Graph(nodes=tuple(nodes), heads=tuple(heads), attrs=attrs)


def _head_grads(exe, heads: dict) -> list:
    """The head gradients mxcc's backward takes, in its order: those of the outputs whose gradient it reads
    (MXNet takes one for every output, then ignores e.g. LayerNorm's mean/std ones; mxcc drops those inputs)."""
    return [heads[s["output"]] for s in exe._head_grads]


def _exact(name: str, i: int) -> bool:
    """Output i of a case is an index or a mask: it must be equal, not close."""
    case = MANIFEST[name]
    if case["op"] in INDEX_OPS:
        return True
    if case["op"] == "topk":
        kind = case["attrs_given"].get("ret_typ", "indices")
        return kind in ("indices", "mask") or (kind == "both" and i == 1)
    return False


def _check_output(name, i, got, ref):
    if _exact(name, i):
        np.testing.assert_array_equal(got, ref, err_msg=f"{name} output {i}")
    else:
        assert got.shape == ref.shape, (name, i, got.shape, ref.shape)
        assert rel_err(got, ref) <= 1e-5, f"{name} output {i}: {rel_err(got, ref):.3g}"


_RESULTS: dict = {}


def _family(name: str) -> str:
    return FAMILY.get(MANIFEST[name]["op"], "detection")


def _case_result(name: str) -> dict:
    family = _family(name)
    if name not in _RESULTS:
        try:
            _RESULTS.update(_run_group(family, GROUPS[family]))
        except Exception as e:              # every case of the group reports the failure
            _RESULTS.update({n: e for n in GROUPS[family]})
    r = _RESULTS[name]
    if isinstance(r, Exception):
        raise r
    return r


def _run_group(family: str, names: list[str]) -> dict:
    """Compile the cases once (training, poisoning build); per case: inference outputs, training outputs,
    gradients."""
    results = {}
    shapes, params, inputs, heads, arrays, grad_req = {}, {}, {}, {}, {}, {}
    for i, name in enumerate(names):
        case, pre = MANIFEST[name], f"c{i}_"
        a = arrays[name] = np.load(HERE / case["files"]["arrays"])
        for k, v in case["arguments"].items():
            if k in case["inputs"]:
                shapes[pre + k] = tuple(v)
                inputs[pre + k] = a[f"arg:{k}"]
            else:
                params[pre + k] = a[f"arg:{k}"]
        grad_req.update({pre + k: v for k, v in (case["grad_req"] or {}).items()})
        grad_req.update({pre + k: "null" for k in case["arguments"] if not case["grad_req"]})
        heads.update({pre + out: a[f"head_grad:{j}"] for j, out in enumerate(case["outputs"])
                      if f"head_grad:{j}" in a.files})
    exe = compile_for_gradients(_merged(names), shapes, params, optimizer=SGD0(), grad_req=grad_req,
                                name=f"ops_{family}")
    infer = [o.copy() for o in exe.forward(is_train=False, **inputs)]
    train = [o.copy() for o in exe.forward(is_train=True, **inputs)]
    exe.backward(_head_grads(exe, heads))
    k = 0
    for i, name in enumerate(names):
        a, n_out = arrays[name], len(MANIFEST[name]["outputs"])
        results[name] = dict(arrays=a, infer=infer[k:k + n_out], train=train[k:k + n_out],
                              grads={v: exe.grad_dict[f"c{i}_{v}"].copy() for v, r in
                                     (MANIFEST[name]["grad_req"] or {}).items() if r == "write"},
                              nulls=[v for v in MANIFEST[name]["arguments"] if f"c{i}_{v}" in exe.grad_dict
                                     and (MANIFEST[name]["grad_req"] or {}).get(v, "null") == "null"])
        k += n_out
    return results


@needs_gcc
@pytest.mark.parametrize("name", OP_CASES)
def test_op_case_matches_mxnet(name):
    r = _case_result(name)
    a = r["arrays"]
    for mode in ("infer", "train"):
        for i, out in enumerate(r[mode]):
            _check_output(name, i, out, a[f"out:{i}"])
    _check_grads(r["grads"], a, 1e-5)
    assert not r["nulls"], f"gradients for arguments with grad_req 'null': {r['nulls']}"


def _check_grads(grads: dict, a, tol: float) -> None:
    """Each gradient within tol of MXNet's (relative to its largest value); one that is zero in exact arithmetic
    (InstanceNorm of one value per instance; a bias before an InstanceNorm) is rounding noise in both: it is
    compared on the scale of the case's largest gradient instead."""
    scale = max(float(np.abs(a[f"grad:{v}"]).max()) for v in grads) if grads else 0.0
    for var, got in grads.items():
        ref = a[f"grad:{var}"]
        assert got.shape == ref.shape, (var, got.shape, ref.shape)
        if np.abs(ref).max() <= 1e-5 * scale:
            assert np.abs(got).max() <= 1e-5 * scale, f"gradient of {var}: not zero"
        else:
            assert rel_err(got, ref) <= tol, f"gradient of {var}: {rel_err(got, ref):.3g}"


# -- the parallel loops: every batch-independent case tiled along its first axis ------------------------------
# Tiled K times (K large enough that each kernel takes its OpenMP path), the case's outputs and data gradients are
# MXNet's tiled, and the gradients of parameters (and of the feature map under ROI boxes, which are what gets
# tiled there) K times MXNet's.
NOT_TILEABLE = {"LayerNorm_axis0", "topk_mask_axis0", "topk_flat_value", "sort_axis0_descend", "sort_ties_flat",
                "argmax_global", "argmin_global"}    # the op mixes the first axis (or flattens it)
TILED = [n for n in OP_CASES if n not in NOT_TILEABLE]


def _tiled_inputs(name: str) -> list[str]:
    """The inputs tiled: the boxes of ROI ops (the feature map stays), else every data input."""
    case = MANIFEST[name]
    return ["rois"] if "rois" in case["inputs"] else list(case["inputs"])


def _tile_factor(name: str) -> int:
    a = np.load(HERE / MANIFEST[name]["files"]["arrays"])
    small = min(a[f"out:{i}"].size for i in range(len(MANIFEST[name]["outputs"])))
    target = 5000 if "rois" in MANIFEST[name]["inputs"] else 40000    # detection.py / the others' thresholds
    return -(-target // small)


def _tile(x: np.ndarray, k: int) -> np.ndarray:
    return np.concatenate([x] * k, axis=0)


_TILED_RESULTS: dict = {}


def _run_tiled() -> dict:
    if _TILED_RESULTS:
        return _TILED_RESULTS
    names = TILED
    shapes, params, inputs, heads, arrays, grad_req = {}, {}, {}, {}, {}, {}
    for i, name in enumerate(names):
        case, pre, k = MANIFEST[name], f"c{i}_", _tile_factor(name)
        a = arrays[name] = np.load(HERE / case["files"]["arrays"])
        tiled = _tiled_inputs(name)
        for v in case["arguments"]:
            x = a[f"arg:{v}"]
            if v in case["inputs"]:
                inputs[pre + v] = _tile(x, k) if v in tiled else x
                shapes[pre + v] = inputs[pre + v].shape
            else:
                params[pre + v] = x
        grad_req.update({pre + v: r for v, r in (case["grad_req"] or {v: "null" for v in case["arguments"]}).items()})
        heads.update({pre + out: _tile(a[f"head_grad:{j}"], k) for j, out in enumerate(case["outputs"])
                      if f"head_grad:{j}" in a.files})
    exe = compile_for_gradients(_merged(names), shapes, params, optimizer=SGD0(), grad_req=grad_req, name="tiled")
    outs = [o.copy() for o in exe.forward(is_train=True, **inputs)]
    exe.backward(_head_grads(exe, heads))
    j = 0
    for i, name in enumerate(names):
        n_out = len(MANIFEST[name]["outputs"])
        written = [v for v, r in (MANIFEST[name]["grad_req"] or {}).items() if r == "write"]
        _TILED_RESULTS[name] = dict(outs=outs[j:j + n_out],
                                    grads={v: exe.grad_dict[f"c{i}_{v}"].copy() for v in written})
        j += n_out
    return _TILED_RESULTS


@needs_gcc
@pytest.mark.parametrize("name", TILED)
def test_parallel_paths_match_tiled_references(name):
    r, a, k = _run_tiled()[name], np.load(HERE / MANIFEST[name]["files"]["arrays"]), _tile_factor(name)
    for i, out in enumerate(r["outs"]):
        _check_output(name, i, out, _tile(a[f"out:{i}"], k))
    tiled = _tiled_inputs(name)
    refs = {v: _tile(a[f"grad:{v}"], k) if v in tiled else k * a[f"grad:{v}"].astype(np.float64) for v in r["grads"]}
    _check_grads(r["grads"], {f"grad:{v}": g for v, g in refs.items()}, 1e-5)


# -- end-to-end Gluon blocks: symbol JSON + .params exported by MXNet --------------------------------------
E2E_INDEX_OUTPUTS = {"e2e_detection_head": (1, 3), "e2e_detection_head_masked": (1, 3)}   # argmax, topk indices


def test_references_gradients_are_derivatives():
    """The references' own evidence (gen.py): MXNet's gradient against a central difference of its forward
    (float64 where MXNet has the kernel, else float32 with a coarser step), recorded for every case with a
    smooth gradient."""
    checked = 0
    for name, case in MANIFEST.items():
        fd = case["fd_check"]
        if "skipped" in fd:
            assert not case["grad_req"] or "tied" in fd["skipped"], name
            continue
        tol = 1e-3 if fd["forward_dtype"] == "float64" else 2e-2
        assert abs(fd["finite_difference"] - fd["reference"]) <= tol * max(1.0, abs(fd["finite_difference"])), name
        checked += 1
    assert checked >= 60


@needs_gcc
@pytest.mark.parametrize("name", E2E_CASES)
def test_gluon_block_matches_mxnet(name):
    """Inference forward and the gradient of the inference function (data inputs and parameters)."""
    case = MANIFEST[name]
    missing = sorted(op for op in case["ops_in_json"] if op not in REGISTRY)
    if missing:
        pytest.skip(f"operators not registered yet: {missing}")
    a = np.load(HERE / case["files"]["arrays"])
    inputs = {k: a[f"arg:{k}"] for k in case["inputs"]}
    grad_req = {k: r for k, r in case["grad_req"].items()}
    exe = compile_for_gradients(HERE / case["files"]["symbol"], {k: v.shape for k, v in inputs.items()},
                                HERE / case["files"]["params"], optimizer=SGD0(), grad_req=grad_req)
    outs = exe.forward(is_train=False, **inputs)
    exact = E2E_INDEX_OUTPUTS.get(name, ())
    for i, out in enumerate(outs):
        ref = a[f"out:{i}"]
        if i in exact:
            np.testing.assert_array_equal(out, ref, err_msg=f"output {i}")
        else:
            assert rel_err(out, ref) <= 2e-5, f"output {i}: {rel_err(out, ref):.3g}"
    heads = {out: a[f"head_grad:{j}"] for j, out in enumerate(case["outputs"])}
    exe.backward(_head_grads(exe, heads))
    _check_grads({v: exe.grad_dict[v] for v, r in grad_req.items() if r == "write"}, a, 1e-4)


# -- attribute and shape errors name the node (and the input at fault) -------------------------------------
def _infer_error(net, **shapes):
    with pytest.raises(ShapeError) as e:
        net.infer_shape(**shapes)
    return e.value


@pytest.mark.parametrize("build, shapes, node, inp, words", [
    (lambda d: sym.LayerNorm(d, axis=3, name="ln"), {"data": (2, 3)}, "ln", "data", "axis 3"),
    (lambda d: sym.GroupNorm(d, num_groups=3, name="gn"), {"data": (2, 4, 5)}, "gn", "data", "divisible"),
    (lambda d: sym.InstanceNorm(d, name="inorm"), {"data": (2, 4)}, "inorm", "data", "at least 3"),
    (lambda d: sym.L2Normalization(d, mode="channel", name="l2"), {"data": (2, 4)}, "l2", "data", "at least 3"),
    (lambda d: sym.Pad(d, mode="edge", pad_width=(0, 0, 0, 0, 1, 1), name="pad"), {"data": (2, 3, 4)}, "pad",
     "data", "4-D and 5-D"),
    (lambda d: sym.Pad(d, mode="edge", pad_width=(0, 1, 0, 0, 1, 1, 1, 1), name="pad"), {"data": (2, 3, 4, 4)},
     "pad", "data", "first two axes"),
    (lambda d: sym.Pad(d, mode="reflect", pad_width=(0, 0, 0, 0, 4, 0, 0, 0), name="pad"), {"data": (1, 1, 4, 4)},
     "pad", "data", "smaller than"),
    (lambda d: sym.Crop(d, h_w=(3, 3), offset=(2, 0), name="crop"), {"data": (1, 1, 4, 4)}, "crop", "arg0",
     "outside"),
    (lambda d: sym.Crop(d, sym.var("like"), name="crop"), {"data": (1, 1, 4, 4), "like": (1, 1, 5, 2)}, "crop",
     "arg1", "larger"),
    (lambda d: sym.UpSampling(d, scale=2, sample_type="bilinear", num_filter=4, name="up"), {"data": (1, 3, 4, 4)},
     "up", "data", "num_filter=4"),
    (lambda d: sym.UpSampling(d, sym.var("w"), scale=2, sample_type="bilinear", num_filter=3, name="up"),
     {"data": (1, 3, 4, 4), "w": (3, 1, 3, 3)}, "up", "weight", "(3, 1, 4, 4)"),
    (lambda d: sym._contrib_ROIAlign(d, sym.var("rois"), pooled_size=(2, 2), spatial_scale=1.0, name="ra"),
     {"data": (1, 3, 8, 8), "rois": (4, 4)}, "ra", "rois", "(num_rois, 5)"),
    (lambda d: sym._contrib_ROIAlign(d, sym.var("rois"), pooled_size=(2, 2), spatial_scale=1.0,
                                     position_sensitive=True, name="ra"),
     {"data": (1, 6, 8, 8), "rois": (4, 5)}, "ra", "data", "divisible"),
    (lambda d: sym.topk(d, k=6, name="tk"), {"data": (2, 5)}, "tk", "data", "k=6"),
    (lambda d: sym.argmax(d, axis=2, name="am"), {"data": (2, 5)}, "am", "data", "axis 2"),
    (lambda d: sym.BilinearSampler(d, sym.var("grid"), name="bs"), {"data": (2, 1, 4, 4), "grid": (1, 2, 3, 3)},
     "bs", "grid", "expected (2, 2, OH, OW)"),
    (lambda d: sym.GridGenerator(d, transform_type="affine", name="gg"), {"data": (2, 6)}, "gg", "data",
     "target_shape"),
])
def test_shape_errors_name_the_node_and_input(build, shapes, node, inp, words):
    e = _infer_error(build(sym.var("data")), **shapes)
    assert e.node == node and e.input == inp and words in str(e), str(e)


@pytest.mark.parametrize("build, words", [
    (lambda d: sym.topk(d, dtype="int32", name="op"), "float32 tensors only"),
    (lambda d: sym._contrib_BilinearResize2D(d, scale_height=2.0, name="op"), "scale_width"),
    (lambda d: sym._contrib_BilinearResize2D(d, height=0, name="op"), "[1, 10000]"),
    (lambda d: sym.ROIPooling(d, sym.var("rois"), pooled_size=(2, 2), spatial_scale=2.0, name="op"), "[0, 1]"),
    (lambda d: sym.Pad(d, mode="wrap", pad_width=(0,) * 8, name="op"), "'constant', 'edge', 'reflect'"),
    (lambda d: sym.Crop(d, sym.var("a"), sym.var("b"), name="op"), "num_args"),
])
def test_attribute_errors_name_the_node(build, words):
    with pytest.raises(AttrError) as e:
        build(sym.var("data"))
    assert e.value.node == "op" and words in str(e.value), str(e.value)


def test_output_names_and_counts_follow_mxnet():
    """MXNet's hidden outputs keep their places (node_row_ptr) and names: output0 for a visible first output
    of a two-output op; mean/std only with output_mean_var."""
    d = sym.var("data")
    assert sym.topk(d, ret_typ="value", name="t").list_outputs() == ["t_output0"]
    assert sym.topk(d, ret_typ="both", name="t").list_outputs() == ["t_output0", "t_output1"]
    assert sym.sort(d, name="s").list_outputs() == ["s_output0"]
    assert sym.LayerNorm(d, output_mean_var=True, name="ln").list_outputs() == ["ln_output", "ln_mean", "ln_std"]
    assert sym.InstanceNorm(d, name="i").list_outputs() == ["i_output"]
    assert sym.ROIPooling(d, sym.var("r"), pooled_size=(1, 1), spatial_scale=1.0, name="p").list_outputs() == \
        ["p_output"]
    assert sym.UpSampling(d, scale=2, sample_type="bilinear", num_filter=3, name="u").list_arguments() == \
        ["data", "u_weight"]
