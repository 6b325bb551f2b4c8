"""Reference cases made by the real Apache MXNet 1.9.1 (numpy 1.23.5, CPU pip build) for mxcc issue 22 part C:
normalization (LayerNorm, GroupNorm, InstanceNorm, L2Normalization), padding and resizing (Pad,
_contrib_AdaptiveAvgPooling2D, UpSampling bilinear, _contrib_BilinearResize2D, Crop), detection and ordering
(_contrib_ROIAlign, ROIPooling, topk, sort, argsort, argmax, argmin, BilinearSampler, GridGenerator) and three
end-to-end Gluon blocks (MobileNetV3 block, style-transfer block, detection head). For every case

  cases/<case>-symbol.json   the symbol as MXNet wrote it (Symbol.tojson(); Gluon blocks: HybridBlock.export)
  cases/<case>-0000.params   Gluon blocks only: the parameters as HybridBlock.export wrote them (arg:/aux:)
  cases/<case>.npz           arg:<name>       every argument fed to the executor (aux:<name> auxiliary states)
                             out:<i>          forward output i (order of Symbol.list_outputs())
                             head_grad:<i>    head gradient given for output i (cases with a backward)
                             grad:<name>      MXNet's gradient of every argument with grad_req 'write'
  and manifest.json, one record per case: the op, the attributes given, the outputs, the argument shapes, which
  arguments are data inputs (`inputs`; the rest are parameters), grad_req, is_train and `fd_check`: a float64
  finite difference of MXNet's own float64 forward along a random direction against <grad, direction>
  (evidence that the gradient is the derivative of the forward), or why there is none.

Protocol: MXNET_MKLDNN_ENABLED=0 (MXNet's native kernels: where oneDNN and the native kernels disagree mxcc
follows the native ones); ex = sym.simple_bind(mx.cpu(), grad_req=..., **shapes); set args (and aux);
outs = ex.forward(is_train=IS_TRAIN); ex.backward(out_grads=[head_grad:<i>...], is_train=IS_TRAIN). Op cases use
is_train=True (no op here depends on the mode); the Gluon blocks (BatchNorm) use is_train=False: inference outputs
and the gradient of the inference function (as shared/mxnet-ref's -grad-infer files).

Run with MXNet's own interpreter from the repository root (mxcc's tests never import mxnet):

    /tmp/mxvenv/bin/python tests/data/ops_extra_c/gen.py
"""
import json
import os
import sys
import tempfile
import zlib
import logging

os.environ["MXNET_MKLDNN_ENABLED"] = "0"
os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")
logging.getLogger().setLevel(logging.ERROR)

import numpy as np  # noqa: E402
import mxnet as mx  # noqa: E402
from mxnet import gluon  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CASES_DIR = os.path.join(HERE, "cases")
S = mx.sym
MANIFEST = {"generator": "tests/data/ops_extra_c/gen.py", "environment": None, "protocol": __doc__, "cases": {}}


def rng_for(name, base=0):
    return np.random.RandomState((zlib.crc32(name.encode("utf-8")) + base) % (2 ** 31))


def env_info():
    return {"mxnet_version": mx.__version__, "numpy_version": np.__version__, "python": sys.version.split()[0],
            "features_enabled": sorted(k for k, v in mx.runtime.Features().items() if v.enabled),
            "env": {k: os.environ.get(k) for k in ["OMP_NUM_THREADS", "MXNET_MKLDNN_ENABLED"]}}


def json_ops(sym_json):
    counts = {}
    for n in json.loads(sym_json)["nodes"]:
        if n["op"] != "null":
            counts[n["op"]] = counts.get(n["op"], 0) + 1
    return dict(sorted(counts.items()))


def bind(sym, args, aux, grad_req, dtype=np.float32):
    ex = sym.simple_bind(mx.cpu(), grad_req=grad_req, type_dict={k: dtype for k in args},
                         **{k: v.shape for k, v in args.items()})
    for k, v in args.items():
        ex.arg_dict[k][:] = v.astype(dtype)
    for k, v in (aux or {}).items():
        ex.aux_dict[k][:] = v.astype(dtype)
    return ex


def run(sym, args, aux, grad_req, heads, is_train):
    ex = bind(sym, args, aux, grad_req)
    outs = [o.asnumpy().copy() for o in ex.forward(is_train=is_train)]
    grads = {}
    if heads is not None:
        ex.backward(out_grads=[mx.nd.array(h) for h in heads], is_train=is_train)
        mx.nd.waitall()
        grads = {k: ex.grad_dict[k].asnumpy().copy() for k, r in grad_req.items() if r == "write"}
    return outs, grads


def fd_check(sym, args, aux, grad_req, heads, grads, is_train, name, eps=1e-5, outputs=None):
    """<grad, v> vs the central difference of sum_i <head_i, out_i> (MXNet's forward in float64) over the
    first `outputs` outputs (all by default)."""
    heads = heads[:outputs]
    rng = rng_for(name, 13)
    wrt = [k for k, r in grad_req.items() if r == "write"]
    v = {k: rng.normal(0, 1, size=args[k].shape) for k in wrt}
    dtype, tol = np.float64, 1e-3
    try:
        ex = bind(sym, args, aux, {k: "null" for k in args}, dtype)
    except (mx.base.MXNetError, RuntimeError):      # no float64 kernel: a coarser float32 difference
        dtype, eps, tol = np.float32, 1e-4, 2e-2
        ex = bind(sym, args, aux, {k: "null" for k in args}, dtype)

    def f(sign):
        for k, a in args.items():
            ex.arg_dict[k][:] = (a.astype(np.float64) + (sign * eps * v[k] if k in v else 0)).astype(dtype)
        outs = ex.forward(is_train=is_train)
        return sum(float((o.asnumpy().astype(np.float64) * h).sum()) for o, h in zip(outs, heads))
    fd = (f(1) - f(-1)) / (2 * eps)
    an = float(sum((grads[k].astype(np.float64) * v[k]).sum() for k in wrt))
    assert abs(fd - an) <= tol * max(1.0, abs(fd)), (name, fd, an)
    return {"finite_difference": fd, "reference": an, "forward_dtype": np.dtype(dtype).name}


def save(name, sym_json, arrays, **record):
    os.makedirs(CASES_DIR, exist_ok=True)
    with open(os.path.join(CASES_DIR, name + "-symbol.json"), "w") as f:
        f.write(sym_json)
    np.savez_compressed(os.path.join(CASES_DIR, name + ".npz"),
                        **{k: np.ascontiguousarray(v) for k, v in arrays.items()})
    files = {"symbol": "cases/%s-symbol.json" % name, "arrays": "cases/%s.npz" % name}
    files.update(record.pop("extra_files", {}))
    MANIFEST["cases"][name] = dict(ops_in_json=json_ops(sym_json), **record, files=files)
    print("ok", name)


def normal(r, s):
    return r.normal(0, 1, size=s)


def ties(levels):
    return lambda r, s: r.randint(0, levels, size=s).astype(np.float64)


def case(name, op, attrs, inputs, shapes, values=None, no_grad=(), backward=True, note="", fd=True,
         fd_outputs=None, grad_attrs=None):
    """One op node named `op` on variables `inputs` (data inputs: `shapes`; its parameters are named op_<p>).
    `grad_attrs`: where MXNet's backward fails for `attrs`, the gradient is MXNet's for these (same forward)."""
    build = getattr(S, op, None) if not op.startswith("_contrib_") else getattr(S.contrib, op[len("_contrib_"):])
    node = build(*[S.var(i) for i in inputs], name="op", **attrs)
    arg_shapes, out_shapes, _ = node.infer_shape(**shapes)
    rng = rng_for(name, 7)
    values = values or {}
    args = {k: np.asarray(values.get(k, normal)(rng, s), dtype=np.float64).astype(np.float32)
            for k, s in zip(node.list_arguments(), arg_shapes)}
    grad_req = {k: "null" if k in no_grad or not backward else "write" for k in args}
    heads = [rng_for(name, 11).normal(0, 1, size=s).astype(np.float32) for s in out_shapes] if backward else None
    extra = {}
    if grad_attrs is None:
        outs, grads = run(node, args, None, grad_req, heads, True)
    else:
        outs = run(node, args, None, {k: "null" for k in args}, None, True)[0]   # binding for a backward fails
        twin = build(*[S.var(i) for i in inputs], name="op", **grad_attrs)
        twin_outs, grads = run(twin, args, None, grad_req, heads, True)
        assert all(np.array_equal(a, b) for a, b in zip(outs, twin_outs))
        extra = {"grad_reference": "MXNet's gradient of the same op with attributes %s (the same forward)" % grad_attrs}
    fd = fd_check(node, args, None, grad_req, heads, grads, True, name, outputs=fd_outputs) if backward and fd else \
        {"skipped": "tied values: the gradient is a subgradient (MXNet's choice among the ties)" if backward
         else "no gradient (MXNet's is zero or the op has none)"}
    a = {"arg:" + k: v for k, v in args.items()}
    a.update({"out:%d" % i: o for i, o in enumerate(outs)})
    a.update({"head_grad:%d" % i: h for i, h in enumerate(heads or [])})
    a.update({"grad:" + k: g for k, g in grads.items()})
    save(name, node.tojson(), a, op=op, attrs_given={k: str(v) for k, v in attrs.items()},
         outputs=node.list_outputs(), arguments={k: list(v.shape) for k, v in args.items()},
         inputs=list(shapes), grad_req=grad_req if backward else None, is_train=True, fd_check=fd, note=note,
         **extra)


# -- normalization -----------------------------------------------------------------------------------------
def norm_cases():
    case("LayerNorm_last", "LayerNorm", {}, ["data"], {"data": (2, 3, 5)})
    case("LayerNorm_axis1_mean_var", "LayerNorm", {"axis": 1, "eps": 1e-3, "output_mean_var": True}, ["data"],
         {"data": (2, 4, 3, 2)}, fd_outputs=1,
         note="mean/std are outputs; MXNet's backward ignores their head gradients (fd_check: output 0 only)")
    case("LayerNorm_axis0", "LayerNorm", {"axis": 0}, ["data"], {"data": (6, 4)})
    case("GroupNorm_3groups", "GroupNorm", {"num_groups": 3}, ["data"], {"data": (2, 6, 3, 3)},
         note="gamma/beta have one value per group (num_groups,), as MXNet 1.9.1 defines them")
    case("GroupNorm_3d_mean_var", "GroupNorm", {"num_groups": 2, "eps": 1e-2, "output_mean_var": True}, ["data"],
         {"data": (2, 4, 5)}, fd_outputs=1,
         note="mean/std are outputs; MXNet's backward ignores their head gradients (fd_check: output 0 only)")
    case("GroupNorm_1group", "GroupNorm", {}, ["data"], {"data": (3, 2, 2, 3)})
    case("InstanceNorm_4d", "InstanceNorm", {}, ["data"], {"data": (2, 3, 4, 5)})
    case("InstanceNorm_3d_eps", "InstanceNorm", {"eps": 1e-5}, ["data"], {"data": (2, 3, 7)})
    case("InstanceNorm_5d", "InstanceNorm", {}, ["data"], {"data": (1, 2, 3, 2, 2)})
    case("L2Normalization_instance", "L2Normalization", {}, ["data"], {"data": (2, 3, 4)})
    case("L2Normalization_instance_2d", "L2Normalization", {"eps": 1e-3}, ["data"], {"data": (3, 5)})
    case("L2Normalization_channel", "L2Normalization", {"mode": "channel"}, ["data"], {"data": (2, 3, 4, 2)})
    case("L2Normalization_spatial", "L2Normalization", {"mode": "spatial", "eps": 0.5}, ["data"],
         {"data": (2, 3, 4, 2)})
    case("InstanceNorm_1x1", "InstanceNorm", {}, ["data"], {"data": (2, 3, 1, 1)},
         note="one value per instance: variance 0, output beta, data gradient 0")
    case("LayerNorm_axis_of_1", "LayerNorm", {"axis": 1}, ["data"], {"data": (3, 1, 2)})


# -- padding, resizing, cropping --------------------------------------------------------------------------
def resize_cases():
    for mode in ("constant", "edge", "reflect"):
        extra = {"constant_value": 1.5} if mode == "constant" else {}
        case("Pad_%s_4d" % mode, "Pad", dict(mode=mode, pad_width=(0, 0, 0, 0, 1, 2, 3, 1), **extra), ["data"],
             {"data": (2, 3, 4, 5)})
        case("Pad_%s_5d" % mode, "Pad", dict(mode=mode, pad_width=(0, 0, 0, 0, 2, 1, 0, 3, 1, 2)), ["data"],
             {"data": (1, 2, 3, 4, 5)})
    case("Pad_reflect_widest", "Pad", dict(mode="reflect", pad_width=(0, 0, 0, 0, 3, 3, 4, 4)), ["data"],
         {"data": (1, 2, 4, 5)}, note="the widest reflection MXNet allows: pad = size - 1")
    case("Pad_edge_wide", "Pad", dict(mode="edge", pad_width=(0, 0, 0, 0, 5, 0, 0, 6)), ["data"],
         {"data": (1, 2, 2, 3)})
    for oname, osize, shape in (("global", None, (2, 3, 7, 5)), ("3", 3, (2, 2, 7, 5)), ("2x4", (2, 4), (1, 3, 5, 9)),
                                ("same", (4, 4), (1, 2, 4, 4)), ("up5x3", (5, 3), (1, 2, 3, 2)),
                                ("7x6", (7, 6), (1, 1, 13, 11))):
        case("AdaptiveAvgPooling2D_" + oname, "_contrib_AdaptiveAvgPooling2D",
             {} if osize is None else {"output_size": osize}, ["data"], {"data": shape})
    rs = "_contrib_BilinearResize2D"
    case("BilinearResize2D_up", rs, {"height": 5, "width": 7}, ["data"], {"data": (2, 3, 3, 5)})
    case("BilinearResize2D_up_no_align", rs, {"height": 7, "width": 3, "align_corners": False}, ["data"],
         {"data": (1, 2, 4, 4)})
    case("BilinearResize2D_down", rs, {"height": 3, "width": 4}, ["data"], {"data": (1, 2, 8, 6)})
    case("BilinearResize2D_down_no_align", rs, {"height": 3, "width": 5, "align_corners": False}, ["data"],
         {"data": (1, 2, 8, 11)})
    case("BilinearResize2D_scale", rs, {"scale_height": 1.5, "scale_width": 2.3}, ["data"], {"data": (1, 2, 5, 3)},
         note="mode 'size' with scales: out = int(scale * in) in float32")
    case("BilinearResize2D_odd_scale", rs, {"scale_height": 2.0, "scale_width": 0.5, "mode": "odd_scale"}, ["data"],
         {"data": (1, 2, 5, 6)})
    case("BilinearResize2D_like", rs, {"mode": "like"}, ["data", "like"], {"data": (1, 2, 4, 3), "like": (1, 1, 6, 5)},
         no_grad=("like",))
    for mode, shape in (("to_even_down", (1, 2, 5, 4)), ("to_even_up", (1, 2, 5, 4)), ("to_odd_down", (1, 2, 5, 4)),
                        ("to_odd_up", (1, 2, 5, 4))):
        case("BilinearResize2D_" + mode, rs, {"mode": mode, "align_corners": mode.endswith("up")}, ["data"],
             {"data": shape})
    case("BilinearResize2D_same", rs, {"height": 4, "width": 3}, ["data"], {"data": (1, 2, 4, 3)},
         note="same size: MXNet copies")
    case("BilinearResize2D_to_1", rs, {"height": 1, "width": 4}, ["data"], {"data": (1, 2, 3, 3)},
         note="an output of height 1: scale 0, every row samples input row 0")
    case("AdaptiveAvgPooling2D_from_1x1", "_contrib_AdaptiveAvgPooling2D", {"output_size": (3, 2)}, ["data"],
         {"data": (1, 2, 1, 1)})
    case("BilinearResize2D_from_1x1", rs, {"height": 3, "width": 4}, ["data"], {"data": (1, 2, 1, 1)})
    case("UpSampling_bilinear_x2", "UpSampling", {"scale": 2, "sample_type": "bilinear", "num_filter": 3}, ["data"],
         {"data": (2, 3, 3, 4)}, note="a depthwise Deconvolution (kernel 4, stride 2, pad 1) with weight op_weight")
    case("UpSampling_bilinear_x3_named_weight", "UpSampling",
         {"scale": 3, "sample_type": "bilinear", "num_filter": 2, "num_args": 2}, ["data", "w"],
         {"data": (1, 2, 3, 2)}, note="weight given as a second input (num_args=2): kernel 5, stride 3, pad 1")
    case("Crop_h_w_offset", "Crop", {"h_w": (2, 3), "offset": (1, 2)}, ["data"], {"data": (2, 3, 5, 6)})
    case("Crop_center", "Crop", {"h_w": (3, 2), "center_crop": True}, ["data"], {"data": (1, 2, 6, 7)})
    case("Crop_like", "Crop", {"num_args": 2, "offset": (2, 1)}, ["data", "like"],
         {"data": (1, 2, 6, 7), "like": (1, 1, 3, 4)}, no_grad=("like",))
    case("Crop_like_center", "Crop", {"num_args": 2, "center_crop": True}, ["data", "like"],
         {"data": (2, 2, 7, 8), "like": (1, 5, 4, 3)}, no_grad=("like",))


# -- detection, ordering, sampling ------------------------------------------------------------------------
def rois(batch, height, width, fixed=()):
    """(R, 5) boxes [batch, x1, y1, x2, y2] in image coordinates, some reaching outside the image."""
    def make(r, s):
        out = np.zeros(s)
        for i in range(s[0]):
            x1, y1 = r.uniform(-3, width - 2), r.uniform(-3, height - 2)
            out[i] = [r.randint(0, batch), x1, y1, x1 + r.uniform(0.5, width * 0.8), y1 + r.uniform(0.5, height * 0.8)]
        for i, box in enumerate(fixed):
            out[i] = box
        return out
    return make


def detection_cases():
    ra = "_contrib_ROIAlign"
    boxes = rois(2, 32, 24, fixed=[(1, 4.0, 6.0, 19.5, 30.0), (0, -4.0, -2.0, 6.0, 5.0), (1, 10.0, 10.0, 10.5, 10.2)])
    case("ROIAlign_adaptive", ra, {"pooled_size": (2, 3), "spatial_scale": 0.5}, ["data", "rois"],
         {"data": (2, 3, 16, 12), "rois": (6, 5)}, {"rois": boxes}, no_grad=("rois",),
         note="sample_ratio -1: ceil(roi size / pooled size) samples per bin side")
    case("ROIAlign_ratio2_aligned", ra, {"pooled_size": (3, 3), "spatial_scale": 0.5, "sample_ratio": 2,
                                         "aligned": True}, ["data", "rois"],
         {"data": (2, 2, 16, 12), "rois": (5, 5)}, {"rois": boxes}, no_grad=("rois",))
    case("ROIAlign_position_sensitive", ra, {"pooled_size": (2, 2), "spatial_scale": 0.25, "sample_ratio": 1,
                                             "position_sensitive": True}, ["data", "rois"],
         {"data": (2, 8, 8, 6), "rois": (4, 5)}, {"rois": boxes}, no_grad=("rois",))
    rp_boxes = rois(2, 32, 24, fixed=[(0, 0, 0, 23, 31), (1, 3, 4, 3, 4), (1, 20, 28, 40, 50)])
    case("ROIPooling_half", "ROIPooling", {"pooled_size": (3, 2), "spatial_scale": 0.5}, ["data", "rois"],
         {"data": (2, 3, 16, 12), "rois": (6, 5)}, {"rois": rp_boxes}, no_grad=("rois",))
    case("ROIPooling_one", "ROIPooling", {"pooled_size": (2, 2), "spatial_scale": 1.0}, ["data", "rois"],
         {"data": (2, 2, 7, 7), "rois": (3, 5)},
         {"rois": lambda r, s: np.array([[0, 0, 0, 4, 4], [1, 1, 2, 6, 5], [0, 5, 5, 9, 9]])}, no_grad=("rois",),
         note="the last box reaches past the map: its bins are clipped (an empty bin gives 0)")

    # topk / sort / argsort: ties broken as libstdc++'s std::sort / std::partial_sort do (MXNet's CPU kernel)
    for name, attrs, shape, vals, grad in (
            ("topk_indices_default", {}, (3, 7), normal, False),
            ("topk_value_k3", {"k": 3, "ret_typ": "value"}, (2, 4, 6), normal, True),
            ("topk_both_axis1_ascend", {"k": 2, "axis": 1, "ret_typ": "both", "is_ascend": True}, (2, 5, 3), normal,
             True),
            ("topk_mask_axis0", {"k": 2, "axis": 0, "ret_typ": "mask"}, (4, 3), normal, False),
            ("topk_flat_value", {"k": 4, "axis": None, "ret_typ": "value"}, (3, 5), normal, True),
            ("topk_ties_indices_partial", {"k": 5, "ret_typ": "indices"}, (4, 100), ties(4), False),
            ("topk_ties_indices_full", {"k": 20, "ret_typ": "indices", "is_ascend": True}, (3, 60), ties(3), False),
            ("topk_ties_value_grad", {"k": 6, "ret_typ": "value"}, (2, 300), ties(5), True),
            ("topk_ties_both_all", {"k": 0, "ret_typ": "both"}, (3, 40), ties(3), False),
            ("topk_ties_mask_small", {"k": 3, "ret_typ": "mask"}, (5, 9), ties(2), False)):
        case(name, "topk", attrs, ["data"], {"data": shape}, {"data": vals}, backward=grad, fd=vals is normal,
             note="integer data: many ties" if vals is not normal else "")
    case("topk_row_of_1", "topk", {"k": 1, "ret_typ": "both"}, ["data"], {"data": (3, 1)}, fd=False)
    case("sort_default", "sort", {}, ["data"], {"data": (3, 6)}, grad_attrs={"axis": -1},
         note="MXNet 1.9.1's backward of sort without an axis attribute fails (its gradient node gets axis=''): "
              "the reference gradient is sort(axis=-1)'s")
    case("sort_axis0_descend", "sort", {"axis": 0, "is_ascend": False}, ["data"], {"data": (5, 2, 3)})
    case("sort_ties_flat", "sort", {"axis": None}, ["data"], {"data": (4, 20)}, {"data": ties(6)}, fd=False)
    case("argsort_ties", "argsort", {}, ["data"], {"data": (3, 50)}, {"data": ties(3)}, backward=False)
    case("argsort_axis1_descend_ties", "argsort", {"axis": 1, "is_ascend": False}, ["data"], {"data": (2, 33, 2)},
         {"data": ties(4)}, backward=False)
    for op in ("argmax", "argmin"):
        case(op + "_axis1", op, {"axis": 1}, ["data"], {"data": (2, 5, 3)}, {"data": ties(3)}, backward=False,
             note="ties: the first index")
        case(op + "_keepdims_last", op, {"axis": -1, "keepdims": True}, ["data"], {"data": (3, 4)}, backward=False)
        case(op + "_global", op, {}, ["data"], {"data": (3, 4, 2)}, backward=False, note="axis None: shape (1,)")
    case("argmax_nan", "argmax", {"axis": 1}, ["data"], {"data": (3, 4)},
         {"data": lambda r, s: np.array([[1, np.nan, 3, 3], [np.nan, 2, np.nan, 1], [-np.inf, -np.inf, -7, -np.inf]])},
         backward=False, note="a NaN wins (the first one); all equal: index 0")

    grid = lambda r, s: r.uniform(-1.2, 1.2, size=s)  # noqa: E731  (some samples fall outside the image)
    case("BilinearSampler", "BilinearSampler", {}, ["data", "grid"], {"data": (2, 3, 5, 6), "grid": (2, 2, 4, 7)},
         {"grid": grid})
    case("BilinearSampler_1x1_map", "BilinearSampler", {}, ["data", "grid"],
         {"data": (1, 2, 1, 1), "grid": (1, 2, 2, 3)}, {"grid": grid},
         note="a 1x1 map: every sample reads pixel 0 with weight 1")
    case("ROIAlign_1x1_map", ra, {"pooled_size": (2, 2), "spatial_scale": 1.0}, ["data", "rois"],
         {"data": (1, 2, 1, 1), "rois": (2, 5)},
         {"rois": lambda r, s: np.array([[0, -0.5, -0.5, 0.7, 0.9], [0, 0.23, 0.17, 3.1, 2.45]])}, no_grad=("rois",))
    case("GridGenerator_affine", "GridGenerator", {"transform_type": "affine", "target_shape": (4, 5)}, ["data"],
         {"data": (2, 6)})
    case("GridGenerator_warp", "GridGenerator", {"transform_type": "warp"}, ["data"], {"data": (2, 2, 3, 5)})
    # a spatial transformer: GridGenerator (affine) -> BilinearSampler, gradients for data and theta
    name = "SpatialTransformer_affine"
    d, th = S.var("data"), S.var("theta")
    net = S.BilinearSampler(d, S.GridGenerator(th, transform_type="affine", target_shape=(5, 4), name="grid"),
                            name="op")
    rng = rng_for(name, 7)
    args = {"data": rng.normal(0, 1, (2, 2, 6, 5)).astype(np.float32),
            "theta": (np.array([[0.9, 0.2, 0.1, -0.15, 1.1, -0.05]] * 2)
                      + rng.normal(0, 0.1, (2, 6))).astype(np.float32)}
    greq = {"data": "write", "theta": "write"}
    heads = [rng_for(name, 11).normal(0, 1, (2, 2, 5, 4)).astype(np.float32)]
    outs, grads = run(net, args, None, greq, heads, True)
    a = {"arg:" + k: v for k, v in args.items()}
    a.update({"out:0": outs[0], "head_grad:0": heads[0], **{"grad:" + k: g for k, g in grads.items()}})
    save(name, net.tojson(), a, op="BilinearSampler", attrs_given={}, outputs=net.list_outputs(),
         arguments={k: list(v.shape) for k, v in args.items()}, inputs=["data", "theta"], grad_req=greq, is_train=True,
         fd_check=fd_check(net, args, None, greq, heads, grads, True, name),
         note="GridGenerator(affine) feeding BilinearSampler")


# -- end-to-end Gluon blocks --------------------------------------------------------------------------------
class HardSigmoid(gluon.HybridBlock):
    """GluonCV's (mobilenetv3.py): ReLU6(x + 3) / 6, ReLU6 = clip(x, 0, 6); with `op`, the same function as
    MXNet's hard_sigmoid operator (alpha 1/6, beta 0.5)."""

    def __init__(self, op=False, **kw):
        super().__init__(**kw)
        self.op = op

    def hybrid_forward(self, F, x):
        if self.op:
            return F.hard_sigmoid(x, alpha=1.0 / 6, beta=0.5)
        return F.clip(x + 3.0, 0, 6, name="relu6") / 6.0


class HardSwish(gluon.HybridBlock):
    def __init__(self, op=False, **kw):
        super().__init__(**kw)
        with self.name_scope():
            self.act = HardSigmoid(op)

    def hybrid_forward(self, F, x):
        return x * self.act(x)


class MobileNetV3Block(gluon.HybridBlock):
    """GluonCV's inverted residual (expand 1x1 + BN + hard-swish, depthwise 3x3 + BN, squeeze-excite, project
    1x1 + BN, residual add), with the squeeze's pooling written as AdaptiveAvgPooling2D(1)."""

    def __init__(self, channels=8, expand=16, se=4, op=False, **kw):
        super().__init__(**kw)
        nn = gluon.nn
        with self.name_scope():
            self.expand = nn.Conv2D(expand, 1, use_bias=False, in_channels=channels)
            self.bn1 = nn.BatchNorm(in_channels=expand)
            self.act1 = HardSwish(op)
            self.dw = nn.Conv2D(expand, 3, padding=1, groups=expand, use_bias=False, in_channels=expand)
            self.bn2 = nn.BatchNorm(in_channels=expand)
            self.act2 = HardSwish(op)
            self.se_fc1 = nn.Conv2D(se, 1, in_channels=expand)
            self.se_fc2 = nn.Conv2D(expand, 1, in_channels=se)
            self.se_act = HardSigmoid(op)
            self.project = nn.Conv2D(channels, 1, use_bias=False, in_channels=expand)
            self.bn3 = nn.BatchNorm(in_channels=channels)

    def hybrid_forward(self, F, x):
        h = self.act1(self.bn1(self.expand(x)))
        h = self.act2(self.bn2(self.dw(h)))
        s = F.contrib.AdaptiveAvgPooling2D(h, output_size=1)
        s = self.se_act(self.se_fc2(F.relu(self.se_fc1(s))))
        h = F.broadcast_mul(h, s)
        return x + self.bn3(self.project(h))


class StyleBlock(gluon.HybridBlock):
    """A fast-style-transfer block: ReflectionPad2D + Conv + InstanceNorm + relu, then an upsampling
    Conv2DTranspose + InstanceNorm + relu."""

    def __init__(self, **kw):
        super().__init__(**kw)
        nn = gluon.nn
        with self.name_scope():
            self.pad = nn.ReflectionPad2D(2)
            self.conv = nn.Conv2D(6, 5, in_channels=3)
            self.in1 = nn.InstanceNorm(in_channels=6)
            self.up = nn.Conv2DTranspose(4, 3, strides=2, padding=1, output_padding=1, in_channels=6)
            self.in2 = nn.InstanceNorm(in_channels=4, epsilon=1e-5, center=True, scale=True)

    def hybrid_forward(self, F, x):
        h = F.relu(self.in1(self.conv(self.pad(x))))
        return F.relu(self.in2(self.up(h)))


class DetectionHead(gluon.HybridBlock):
    """ROIAlign features -> Dense class scores -> softmax; per box its best class (argmax) and score, the
    top-3 boxes by that score (topk both), with where/broadcast_to when `masked`: scores below the mean set to 0."""

    def __init__(self, classes=5, masked=False, **kw):
        super().__init__(**kw)
        self.masked = masked
        with self.name_scope():
            self.fc = gluon.nn.Dense(classes, in_units=4 * 3 * 3)

    def hybrid_forward(self, F, feat, rois):
        pooled = F.contrib.ROIAlign(feat, rois, pooled_size=(3, 3), spatial_scale=0.25, sample_ratio=2)
        prob = F.softmax(self.fc(pooled), axis=-1)
        cls = F.argmax(prob, axis=1)
        score = F.max(prob, axis=1)
        if self.masked:
            mean = F.broadcast_to(F.mean(score, axis=0, keepdims=True), shape=(6,))
            score = F.where(F.relu(score - mean), score, score * 0)
        top = F.topk(score, k=3, ret_typ="both")
        return prob, cls, top[0], top[1]


def gluon_case(name, block, inputs, note, grad_inputs, values=None):
    mx.random.seed(zlib.crc32(name.encode("utf-8")) % (2 ** 31))     # Xavier draws from MXNet's generator
    block.initialize(mx.init.Xavier())
    rng = rng_for(name, 3)
    for p in block.collect_params().values():            # biases and BatchNorm statistics far from trivial
        if p.name.endswith(("bias", "beta", "running_mean")):
            p.set_data(mx.nd.array(rng.normal(0, 0.3, p.shape)))
        elif p.name.endswith(("gamma", "running_var")):
            p.set_data(mx.nd.array(rng.uniform(0.5, 1.5, p.shape)))
    rng = rng_for(name, 7)
    data = {k: np.asarray((values or {}).get(k, normal)(rng, s), dtype=np.float64).astype(np.float32)
            for k, s in inputs.items()}
    block.hybridize()
    block(*[mx.nd.array(v) for v in data.values()])
    with tempfile.TemporaryDirectory() as d:
        block.export(os.path.join(d, name))
        sym_json = open(os.path.join(d, name + "-symbol.json")).read()
        params = mx.nd.load(os.path.join(d, name + "-0000.params"))
        os.makedirs(CASES_DIR, exist_ok=True)
        with open(os.path.join(d, name + "-0000.params"), "rb") as f, \
                open(os.path.join(CASES_DIR, name + "-0000.params"), "wb") as g:
            g.write(f.read())
    sym = mx.sym.load_json(sym_json)
    names = ["data"] if len(inputs) == 1 else ["data%d" % i for i in range(len(inputs))]   # Gluon's export names
    grad_inputs = [names[list(inputs).index(k)] for k in grad_inputs]
    args = dict(zip(names, data.values()))
    args.update({k[4:]: v.asnumpy() for k, v in params.items() if k.startswith("arg:")})
    aux = {k[4:]: v.asnumpy() for k, v in params.items() if k.startswith("aux:")}
    out_shapes = sym.infer_shape(**{k: v.shape for k, v in args.items()})[1]
    heads = [rng_for(name, 11).normal(0, 1, s).astype(np.float32) for s in out_shapes]
    greq = {k: ("write" if (k not in names or k in grad_inputs) else "null") for k in args}
    outs, grads = run(sym, args, aux, greq, heads, False)
    ref = block(*[mx.nd.array(v) for v in data.values()])
    ref = ref if isinstance(ref, (list, tuple)) else [ref]
    assert all(np.allclose(o, r.asnumpy(), atol=1e-5) for o, r in zip(outs, ref))
    a = {"arg:" + k: v for k, v in args.items()}
    a.update({"aux:" + k: v for k, v in aux.items()})
    a.update({"out:%d" % i: o for i, o in enumerate(outs)})
    a.update({"head_grad:%d" % i: h for i, h in enumerate(heads)})
    a.update({"grad:" + k: g for k, g in grads.items()})
    save(name, sym_json, a, op=None, attrs_given=None, outputs=sym.list_outputs(),
         arguments={k: list(v.shape) for k, v in args.items()}, aux={k: list(v.shape) for k, v in aux.items()},
         inputs=names, grad_req=greq, is_train=False,
         fd_check=fd_check(sym, args, aux, greq, heads, grads, False, name), note=note,
         extra_files={"params": "cases/%s-0000.params" % name})


def e2e_cases():
    gluon_case("e2e_mobilenetv3_block", MobileNetV3Block(prefix="mbv3_"), {"data": (2, 8, 7, 7)},
               "GluonCV-style MobileNetV3 inverted residual: hard-swish as x * clip(x + 3, 0, 6) / 6 (GluonCV's "
               "HardSwish/HardSigmoid/ReLU6), squeeze-excite with _contrib_AdaptiveAvgPooling2D(output_size=1), "
               "broadcast_mul, residual add; inference BatchNorm", grad_inputs=("data",))
    gluon_case("e2e_mobilenetv3_block_hard_sigmoid", MobileNetV3Block(op=True, prefix="mbv3h_"), {"data": (2, 8, 7, 7)},
               "the same block with hard_sigmoid(alpha=1/6, beta=0.5) for GluonCV's ReLU6(x + 3) / 6",
               grad_inputs=("data",))
    gluon_case("e2e_style_block", StyleBlock(prefix="style_"), {"data": (1, 3, 9, 8)},
               "fast style transfer: ReflectionPad2D(2) (Pad reflect), Conv 5x5, InstanceNorm, relu, "
               "Conv2DTranspose 3x3 stride 2 (adj 1), InstanceNorm, relu", grad_inputs=("data",))
    det_values = {"rois": rois(2, 32, 24, fixed=[(0, 2, 2, 20, 28), (1, 0, 0, 24, 32)])}
    gluon_case("e2e_detection_head", DetectionHead(prefix="det_"), {"data": (2, 4, 8, 6), "rois": (6, 5)},
               "ROIAlign -> Dense -> softmax, argmax and max over classes, topk (both) over boxes",
               grad_inputs=("data",), values=det_values)
    gluon_case("e2e_detection_head_masked", DetectionHead(masked=True, prefix="detm_"),
               {"data": (2, 4, 8, 6), "rois": (6, 5)},
               "as e2e_detection_head, scores below their mean zeroed with broadcast_to + where",
               grad_inputs=("data",), values=det_values)


if __name__ == "__main__":
    MANIFEST["environment"] = env_info()
    norm_cases()
    resize_cases()
    detection_cases()
    e2e_cases()
    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(MANIFEST, f, indent=1)
        f.write("\n")
