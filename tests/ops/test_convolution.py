"""Convolution compiled to C against a float64 numpy reference (written here: padded input, one einsum per
kernel offset and group), over every path the lowering picks (im2col + GEMM, 1x1 GEMM, depthwise direct,
grouped), 1-D/2-D/3-D, odd sizes, strides, pads (also wider than half the kernel), dilation, no_bias,
fused activations and residual adds, batch 1 and 3. Shape rules are checked against the shapes MXNet 1.9.1 reported for
its own cases (tests/data/ops/manifest.json).

Tolerance: each output is a float32 sum of K = C/groups * prod(kernel) products (FMA-contracted, blocked),
so the error is ~sqrt(K) * u * (sum |w||x|); we allow 1e-6 * sqrt(K) of max|ref| (u = 6e-8, and |w||x|
sums stay within a few max|ref| for these random, 1/sqrt(K)-scaled weights). An indexing bug is O(1).
"""
import json
import re

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import AttrError, ShapeError
from mxcc.ops.convolution import DIRECT_FIRST_MAX_C, POINTWISE_MIN_PIXELS, WINOGRAD_MIN_PIXELS
from mxcc_testing import DATA, needs_gcc, rel_err

# name -> (input, attrs, activation or None, path the lowering must choose); RESIDUAL: + another tensor
CASES = {
    "c3p1_relu": ("data", dict(kernel=(3, 3), pad=(1, 1), num_filter=8), "relu", "im2col"),
    "c3s2_nobias": ("data", dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=5, no_bias=True), None, "im2col"),
    "c3d2p2": ("data", dict(kernel=(3, 3), dilate=(2, 2), pad=(2, 2), num_filter=4), None, "im2col"),
    "c5s2p2": ("data", dict(kernel=(5, 5), stride=(2, 2), pad=(2, 2), num_filter=3), "tanh", "im2col"),
    "c31_s21": ("data", dict(kernel=(3, 1), stride=(2, 1), pad=(1, 0), num_filter=4), None, "im2col"),
    "c3p3_widepad": ("data", dict(kernel=(3, 3), pad=(3, 3), num_filter=2), None, "im2col"),
    "c_whole": ("data", dict(kernel=(9, 11), num_filter=3), None, "im2col"),
    "c1_relu": ("data", dict(kernel=(1, 1), num_filter=7), "relu", "gemm"),
    "c1s2": ("data", dict(kernel=(1, 1), stride=(2, 2), num_filter=4, no_bias=True), None, "im2col"),
    "g2_relu": ("data", dict(kernel=(3, 3), pad=(1, 1), num_group=2, num_filter=4), "relu", "im2col"),
    "g3_1x1": ("data", dict(kernel=(1, 1), num_group=3, num_filter=6), "sigmoid", "gemm"),
    "dw3_relu": ("data", dict(kernel=(3, 3), pad=(1, 1), num_group=6, num_filter=6), "relu", "depthwise"),
    "dw3s2_nobias": ("data", dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_group=6, num_filter=6,
                                  no_bias=True), "softrelu", "depthwise"),
    "dw5d2": ("data", dict(kernel=(5, 5), dilate=(2, 2), pad=(4, 4), num_group=6, num_filter=6), None, "depthwise"),
    "dw_mult2": ("data", dict(kernel=(3, 3), pad=(1, 1), num_group=6, num_filter=12), None, "im2col"),
    "c1d_k3s2": ("data1d", dict(kernel=(3,), stride=(2,), pad=(1,), num_filter=5), None, "im2col"),
    "c1d_k1": ("data1d", dict(kernel=(1,), num_filter=3), "relu", "gemm"),
    "c1d_dw5": ("data1d", dict(kernel=(5,), pad=(2,), num_group=4, num_filter=4), "relu", "depthwise"),
    "c3d_k3p1": ("data3d", dict(kernel=(3, 3, 3), pad=(1, 1, 1), num_filter=3), None, "im2col"),
    "c3d_g2s2": ("data3d", dict(kernel=(1, 3, 3), stride=(1, 2, 2), num_group=2, num_filter=4), "relu", "im2col"),
    # 3x3 stride 1 with >= WINOGRAD_MIN_PIXELS output pixels: Winograd when the weight is a param (c3p3_widepad too)
    "w3p1_res": ("dataw", dict(kernel=(3, 3), pad=(1, 1), num_filter=33), "relu", "im2col"),
    "w3p0_nobias": ("dataw", dict(kernel=(3, 3), num_filter=5, no_bias=True), None, "im2col"),
    # 1x1 stride 1 with more than 64 input channels: packed when the weight is a param (<= 64: gemm)
    "k1_wide": ("datak", dict(kernel=(1, 1), num_filter=9), "relu", "gemm"),
    # <= 4 input channels (first layers): direct when the weight is a param (as the 6-channel 'data' cases)
    "s3s2_stem": ("datas", dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=11), "relu", "im2col"),
    "s5_res": ("datas", dict(kernel=(5, 5), num_filter=20), None, "im2col"),
}
SHAPES = {"data": (6, 9, 11), "data1d": (4, 13), "data3d": (2, 4, 5, 5), "dataw": (7, 18, 16), "datak": (70, 5, 6), "datas": (3, 13, 37)}
RESIDUAL = {"c3p1_relu", "g3_1x1", "dw3_relu", "c1d_k3s2", "w3p1_res", "s5_res"}     # conv + elemwise_add (+ act), fused
ACTS = {"relu": lambda v: np.maximum(v, 0), "tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "softrelu": lambda v: np.log1p(np.exp(v))}


def conv_ref(x, w, b, stride, pad, dilate, groups):
    """float64 cross-correlation, NC + spatial, MXNet's weight layout (O, C/groups, *kernel)."""
    nsp = x.ndim - 2
    n, c = x.shape[:2]
    o, k = w.shape[0], w.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    out_sp = [(xp.shape[2 + i] - dilate[i] * (k[i] - 1) - 1) // stride[i] + 1 for i in range(nsp)]
    out = np.zeros((n, o, *out_sp))
    cg, og = c // groups, o // groups
    for g in range(groups):
        for off in np.ndindex(*k):
            win = tuple(slice(off[i] * dilate[i], off[i] * dilate[i] + (out_sp[i] - 1) * stride[i] + 1, stride[i])
                        for i in range(nsp))
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + win]
            wk = w[(slice(g * og, (g + 1) * og), slice(None)) + off]
            out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", patch, wk)
    if b is not None:
        out += b.reshape((1, o) + (1,) * nsp)
    return out


def _network():
    ins = {name: sym.var(name) for name in SHAPES}
    outs = []
    for name, (inp, at, act, _) in CASES.items():
        y = sym.Convolution(ins[inp], name=name, **at)
        if name in RESIDUAL:
            y = y + sym.var(f"{name}_res")
        outs.append(sym.Activation(y, act_type=act, name=f"{name}_act") if act else y)
    return sym.Group(outs)


def _params(rng, batch):
    params, refs = {}, {}
    xs = {name: rng.standard_normal((batch, *s)).astype(np.float32) for name, s in SHAPES.items()}
    for name, (inp, at, act, _) in CASES.items():
        x = xs[inp]
        g = at.get("num_group", 1)
        kshape = (at["num_filter"], x.shape[1] // g, *at["kernel"])
        w = (rng.standard_normal(kshape) / np.sqrt(np.prod(kshape[1:]))).astype(np.float32)
        params[f"{name}_weight"] = w
        b = None
        if not at.get("no_bias", False):
            b = rng.standard_normal(at["num_filter"]).astype(np.float32)
            params[f"{name}_bias"] = b
        nsp = len(at["kernel"])
        ref = conv_ref(x.astype(np.float64), w.astype(np.float64), None if b is None else b.astype(np.float64),
                       at.get("stride", (1,) * nsp), at.get("pad", (0,) * nsp), at.get("dilate", (1,) * nsp), g)
        if name in RESIDUAL:
            xs[f"{name}_res"] = rng.standard_normal(ref.shape).astype(np.float32)
            ref = ref + xs[f"{name}_res"]
        refs[name] = (ACTS[act](ref) if act else ref, int(np.prod(kshape[1:])))
    return xs, params, refs


@needs_gcc
@pytest.mark.parametrize("batch, fuse, weights_in", [(1, False, False), (3, True, False), (3, True, True)])
def test_convolutions_match_numpy(batch, fuse, weights_in, rng, tmp_path):
    """Params: one-group convolutions take the packed path (weights packed at bind time). Weights given as
    inputs (not fixed at bind time): the paths of CASES, which training uses too."""
    xs, params, refs = _params(rng, batch)
    weights = {k: v for k, v in params.items() if k.endswith("_weight")} if weights_in else {}
    params = {k: v for k, v in params.items() if k not in weights}
    m = mxcc.compile(_network(), {k: v.shape for k, v in {**xs, **weights}.items()}, params, fuse=fuse,
                     out_dir=tmp_path)
    outs = m.forward(**xs, **weights)
    for (name, (ref, k)), out in zip(refs.items(), outs):
        assert out.shape == ref.shape, name
        assert rel_err(out, ref) <= 1e-6 * np.sqrt(k) + 1e-7, name
    if fuse:
        _check_paths((tmp_path / "net.c").read_text(), packed=not weights_in)


@needs_gcc
def test_im2col_in_many_blocks_forward_and_backward(rng, tmp_path, monkeypatch):
    """Blocks of 5 output pixels (the 9x11 images have 99 per image, so blocks straddle output rows and the
    last one is short): the forward (with a fused residual and grouped GEMMs, whose epilogue pointers move
    with the block) and both gradients of the blocked backward. The loss sum(out * head) is linear in the
    weight and in the data, so <grad, v> is exactly sum(conv(v) * head) in float64: no finite differences."""
    from mxcc.ops import convolution
    monkeypatch.setattr(convolution, "COL_BLOCK_BYTES", 1)
    monkeypatch.setattr(convolution, "COL_BLOCK_MIN", 5)
    assert convolution.col_block(54, 99) == 5
    names = ["c3p1_relu", "c3s2_nobias", "g2_relu", "c1s2", "c3d_g2s2"]
    xs, params, refs = _params(rng, 2)
    m = mxcc.compile(_network(), {k: v.shape for k, v in xs.items()}, params, out_dir=tmp_path / "fwd")
    for (name, (ref, k)), out in zip(refs.items(), m.forward(**xs)):
        assert rel_err(out, ref) <= 1e-6 * np.sqrt(k) + 1e-7, name
    assert "in blocks of 5 columns" in (tmp_path / "fwd" / "net.c").read_text()

    class SGD0:   # a zero learning rate: the gradients are under test, not the update
        kind, state_names = "sgd", ()

        def step_hyper(self, t):
            return {"lr": 0.0, "rescale_grad": 1.0, "clip_gradient": -1.0}

        def multipliers(self, graph, names):
            return {}, {}

    d = sym.var("data")
    at = {n: CASES[n][1] for n in names if CASES[n][0] == "data"}
    net = sym.Group([sym.Convolution(d, name=n, **a) for n, a in at.items()])
    x = rng.standard_normal(SHAPES["data"], dtype=np.float32)[None].repeat(2, 0)
    exe = mxcc.compile(net, {"data": x.shape}, train=True, optimizer=SGD0(), inputs_need_grad=True,
                       out_dir=tmp_path / "bwd")
    ps = {k: (rng.standard_normal(s) * 0.5).astype(np.float32) for k, s in exe.param_shapes.items()}
    exe.set_params(ps)
    outs = exe.forward(is_train=True, data=x)
    heads = [rng.standard_normal(o.shape).astype(np.float32) for o in outs]
    exe.backward(heads)
    grads = exe.grad_dict

    def conv_of(n, xv, wv):
        a = at[n]
        nsp = len(a["kernel"])
        return conv_ref(xv, wv, None, a.get("stride", (1,) * nsp), a.get("pad", (0,) * nsp),
                        a.get("dilate", (1,) * nsp), a.get("num_group", 1))

    x64 = x.astype(np.float64)
    v = rng.standard_normal(x.shape)
    want = sum(float((conv_of(n, v, ps[f"{n}_weight"].astype(np.float64)) * h).sum()) for n, h in zip(at, heads))
    g = grads["data"].astype(np.float64)
    assert abs(float((g * v).sum()) - want) <= 1e-5 * np.linalg.norm(g) * np.linalg.norm(v), "data"
    for n, h in zip(at, heads):
        gw = grads[f"{n}_weight"].astype(np.float64)
        vw = rng.standard_normal(gw.shape)
        want = float((conv_of(n, x64, vw) * h).sum())
        assert abs(float((gw * vw).sum()) - want) <= 1e-5 * np.linalg.norm(gw) * np.linalg.norm(vw), n


def _winograd_shape(name: str) -> bool:
    """3x3, stride 1, no dilation, one group, more than DIRECT_FIRST_MAX_C channels and at least
    WINOGRAD_MIN_PIXELS output pixels (the batches here are below WINOGRAD_MIN_BATCH)."""
    inp, at, _, _ = CASES[name]
    c, *size = SHAPES[inp]
    pad = at.get("pad", (0, 0))
    out = [n + 2 * p - 2 for n, p in zip(size, pad)]
    return (at["kernel"] == (3, 3) and at.get("stride", (1, 1)) == (1, 1) and at.get("dilate", (1, 1)) == (1, 1)
            and at.get("num_group", 1) == 1 and c > DIRECT_FIRST_MAX_C and out[0] * out[1] >= WINOGRAD_MIN_PIXELS)


def _check_paths(c_text: str, packed: bool):
    """Each layer's C function calls the kernels of the path its shape calls for (and the residual add and
    the activation run in the epilogue: no separate kernels for them when fused). `packed`: the weights are
    params, so every one-group convolution reads them packed at bind time."""
    bodies = dict(re.findall(r"static MXCC_NOINLINE void net_(\w+)\(mxcc_ctx \*ctx\)\n\{(.*?)\n\}\n", c_text, re.S))
    for name, (_, at, act, path) in CASES.items():
        body = bodies[name]
        wide = SHAPES[CASES[name][0]][0] > 64
        pixels = int(np.prod(SHAPES[CASES[name][0]][1:]))   # 1x1 stride 1: the output's too
        if packed and path == "gemm" and at.get("num_group", 1) == 1 and pixels >= POINTWISE_MIN_PIXELS:
            path = "pointwise"
        if packed and path != "depthwise" and at.get("num_group", 1) == 1 and (path != "gemm" or wide) \
                and path != "pointwise":
            few = SHAPES[CASES[name][0]][0] <= 20 and len(at["kernel"]) <= 2 and path != "gemm"
            path = "winograd" if _winograd_shape(name) else "direct" if few else "packed"
        assert ("mxcc_conv_depthwise_f32(" in body) == (path == "depthwise"), name
        assert ("mxcc_im2col_block_f32(" in body) == (path == "im2col"), name
        assert ("mxcc_gemm_f32(" in body) == (path in ("im2col", "gemm")), name
        assert ("mxcc_conv_packed_f32(" in body) == (path == "packed"), name
        assert ("mxcc_winograd_f43_f32(" in body) == (path == "winograd"), name
        assert ("mxcc_conv_direct_f32(" in body) == (path == "direct"), name
        assert ("mxcc_conv1x1_f32(" in body) == (path == "pointwise"), name
        transformed = ("packed", "winograd", "direct", "pointwise")    # weights prepared at bind time
        assert (f"net_{name}_pack_weight(ctx)" in c_text) == (path in transformed), name
        if act:
            assert f"MXCC_ACT_{act.upper()}" in body and f"{name}_act" not in bodies, name
        per_image = ".residual = residual + (long)n * " in body
        assert per_image == (name in RESIDUAL and path not in transformed), name
        assert (".residual = residual" in body) == (name in RESIDUAL), name


# ---- shape rules ------------------------------------------------------------------------------------------

MANIFEST = json.loads((DATA / "ops" / "manifest.json").read_text())["cases"]


@pytest.mark.parametrize("case", [c for c, v in MANIFEST.items() if v["op"] == "Convolution"])
def test_shape_rule_answers_what_mxnet_answered(case):
    info = MANIFEST[case]
    net = sym.load(str(DATA / "ops" / "cases" / f"{case}-symbol.json"))
    args, outs, _ = net.infer_shape(data=tuple(info["arguments"]["data"]))
    assert dict(zip(net.list_arguments(), map(list, args))) == info["arguments"]
    assert [list(s) for s in outs] == list(info["outputs"].values())


def test_shape_and_attribute_errors():
    d = sym.var("data")
    with pytest.raises(ShapeError, match=r"c \(Convolution\): input 'data' has 7 channels, not a multiple of num_group=2"):
        sym.Convolution(d, kernel=(3, 3), num_filter=4, num_group=2, name="c").infer_shape(data=(1, 7, 5, 5))
    with pytest.raises(ShapeError, match="larger than the padded input 3"):
        sym.Convolution(d, kernel=(5, 5), num_filter=4, name="c").infer_shape(data=(1, 2, 3, 8))
    with pytest.raises(ShapeError, match="needs 4-D data"):
        sym.Convolution(d, kernel=(3, 3), num_filter=4, name="c").infer_shape(data=(1, 2, 8))
    with pytest.raises(ShapeError, match=r"input 'weight' has shape \(4, 2, 3, 3\), expected \(4, 3, 3, 3\)"):
        sym.Convolution(d, kernel=(3, 3), num_filter=4, name="c").infer_shape(data=(1, 3, 8, 8), c_weight=(4, 2, 3, 3))
    with pytest.raises(AttrError, match="layout='NHWC' is not supported"):
        sym.Convolution(d, kernel=(3, 3), num_filter=4, layout="NHWC")
    with pytest.raises(AttrError, match="multiple of num_group"):
        sym.Convolution(d, kernel=(3, 3), num_filter=5, num_group=2)
    with pytest.raises(AttrError, match="stride=.* has 1 dimensions, the kernel has 2"):
        sym.Convolution(d, kernel=(3, 3), num_filter=4, stride=(2,))
    with pytest.raises(AttrError, match="required attribute 'num_filter'"):
        sym.Convolution(d, kernel=(3, 3))
    # accepted and irrelevant on a CPU: cuDNN/workspace tuning, the default layout
    net = sym.Convolution(d, kernel=(3, 3), num_filter=4, workspace=512, cudnn_tune="fastest", cudnn_off=True,
                          layout="NCHW", name="c")
    assert net.infer_shape(data=(2, 3, 8, 8))[1] == [(2, 4, 6, 6)]


@needs_gcc
def test_im2col_path_on_the_pool(tmp_path):
    """A grouped 3x3 convolution takes the im2col path, whose copies are pool jobs (im2col_f32.c): the network
    selects mxcc's pool, 1, 2 and 5 threads give the same bits, against the numpy reference."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 32, 30, 30)).astype(np.float32)
    w = (rng.standard_normal((64, 8, 3, 3)) * 0.2).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    net = sym.Convolution(sym.var("data"), sym.var("w"), sym.var("b"), kernel=(3, 3), pad=(1, 1), num_filter=64,
                          num_group=4, name="conv")
    m = mxcc.compile(net, {"data": x.shape}, {"w": w, "b": b}, out_dir=tmp_path / "g", name="net")
    c = (tmp_path / "g" / "net.c").read_text()
    assert "mxcc_im2col_block_f32(" in c and "mxcc_pool_select(1)" in c
    outs = {}
    for t in (1, 2, 5):
        m.set_num_threads(t)
        outs[t] = m.forward(data=x)[0].copy()
        np.testing.assert_array_equal(outs[1], outs[t], err_msg=f"{t} threads")
    assert rel_err(outs[1], conv_ref(x, w, b, (1, 1), (1, 1), (1, 1), 4)) <= 1e-5


@needs_gcc
@pytest.mark.parametrize("batch", [1, 3, 40])
def test_dense_path_for_one_pixel_images(tmp_path, batch):
    """A 1x1 convolution of 1-pixel images (a classifier after global pooling) runs as FullyConnected's GEMM: the
    small-M path at batch 1 and 3, the prepacked one at 40; bias, a folded BatchNorm and relu fused; against the
    numpy reference."""
    rng = np.random.default_rng(batch)
    x = rng.standard_normal((batch, 96, 1, 1)).astype(np.float32)
    w = (rng.standard_normal((70, 96, 1, 1)) * 0.2).astype(np.float32)
    b = rng.standard_normal(70).astype(np.float32)
    bn = {k: rng.uniform(0.5, 1.5, 70).astype(np.float32) for k in ("gamma", "beta", "moving_mean", "moving_var")}
    conv = sym.Convolution(sym.var("data"), sym.var("w"), sym.var("b"), kernel=(1, 1), num_filter=70, name="conv")
    net = sym.relu(sym.BatchNorm(conv, name="bn", fix_gamma=False, eps=1e-3))
    params = {"w": w, "b": b, **{f"bn_{k}": v for k, v in bn.items()}}
    m = mxcc.compile(net, {"data": x.shape}, params, out_dir=tmp_path / "d", name="net")
    assert "1x1 convolution of 1-pixel images as FullyConnected" in (tmp_path / "d" / "net.c").read_text()
    y = conv_ref(x, w, b, (1, 1), (0, 0), (1, 1), 1)
    sh = (1, 70, 1, 1)
    want = np.maximum((y - bn["moving_mean"].reshape(sh)) / np.sqrt(bn["moving_var"].reshape(sh) + 1e-3)
                      * bn["gamma"].reshape(sh) + bn["beta"].reshape(sh), 0)
    assert rel_err(m.forward(data=x)[0], want) <= 1e-5
