"""Deconvolution compiled to C against a float64 numpy reference written here (every input pixel scatters
weight * value onto a canvas at i * stride + k * dilate, which is then cropped by pad; adj/target_shape as
MXNet documents them), over stride, pad, adj, target_shape, groups, dilation, 1x1, 1-D, bias on/off
(MXNet's default is no bias), fused residual add and relu, batch 1 and 3. Shape rules against MXNet's own cases.

Tolerance: each output sums at most K = C/groups * prod(kernel) float32 products (GEMM, then col2im
adds the kernel taps), so as for Convolution 1e-6 * sqrt(K) of max|ref|.
"""
import json
import re

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import ShapeError
from mxcc_testing import DATA, needs_gcc, rel_err

# name -> (input, attrs, fused relu, direct 1x1 path)
CASES = {
    "k4s2p1": ("data", dict(kernel=(4, 4), stride=(2, 2), pad=(1, 1), num_filter=3), False, False),
    "k3p1_bias_relu": ("data", dict(kernel=(3, 3), pad=(1, 1), num_filter=2, no_bias=False), True, False),
    "k3s2p1_adj1": ("data", dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1), adj=(1, 1), num_filter=2), False, False),
    "k2s2_bias": ("data", dict(kernel=(2, 2), stride=(2, 2), num_filter=4, no_bias=False), False, False),
    "k3s2_g2": ("data", dict(kernel=(3, 3), stride=(2, 2), num_group=2, num_filter=4, no_bias=False), True, False),
    "k3d2": ("data", dict(kernel=(3, 3), dilate=(2, 2), num_filter=2), False, False),
    "target_exact": ("data", dict(kernel=(3, 3), stride=(2, 2), target_shape=(11, 13), num_filter=2), False, False),
    "target_odd": ("data", dict(kernel=(3, 3), stride=(2, 2), target_shape=(10, 12), num_filter=2), False, False),
    "k1_relu": ("data", dict(kernel=(1, 1), num_filter=5, no_bias=False), True, True),
    "k1_g2": ("data", dict(kernel=(1, 1), num_group=2, num_filter=4), False, True),
    "d1_k3s2p1": ("data1d", dict(kernel=(3,), stride=(2,), pad=(1,), num_filter=2, no_bias=False), False, False),
}
SHAPES = {"data": (4, 5, 6), "data1d": (3, 7)}
RESIDUAL = {"k3p1_bias_relu", "k1_relu", "k3s2_g2"}     # deconv + elemwise_add (+ relu), fused


def deconv_ref(x, w, b, stride, pad, adj, dilate, groups, target=()):
    nsp = x.ndim - 2
    n, c = x.shape[:2]
    og, k = w.shape[1], w.shape[2:]
    cg = c // groups
    full = [stride[i] * (x.shape[2 + i] - 1) + dilate[i] * (k[i] - 1) + 1 for i in range(nsp)]
    if any(target):            # MXNet: pad and adj chosen so that the output is the target
        tot = [full[i] - target[i] for i in range(nsp)]
        pad, adj = [(t + 1) // 2 for t in tot], [t % 2 for t in tot]
    out_sp = [full[i] - 2 * pad[i] + adj[i] for i in range(nsp)]
    canvas = np.zeros((n, og * groups, *[max(full[i], pad[i] + out_sp[i]) for i in range(nsp)]))
    for g in range(groups):
        xg = x[:, g * cg:(g + 1) * cg]
        for off in np.ndindex(*k):
            win = tuple(slice(off[i] * dilate[i], off[i] * dilate[i] + (x.shape[2 + i] - 1) * stride[i] + 1, stride[i])
                        for i in range(nsp))
            wk = w[(slice(g * cg, (g + 1) * cg), slice(None)) + off]          # (cg, og)
            canvas[(slice(None), slice(g * og, (g + 1) * og)) + win] += np.einsum("nc...,co->no...", xg, wk)
    out = canvas[(slice(None), slice(None)) + tuple(slice(pad[i], pad[i] + out_sp[i]) for i in range(nsp))]
    if b is not None:
        out = out + b.reshape((1, -1) + (1,) * nsp)
    return out


def _network():
    ins = {name: sym.var(name) for name in SHAPES}
    outs = []
    for name, (inp, at, relu, _) in CASES.items():
        y = sym.Deconvolution(ins[inp], name=name, **at)
        if name in RESIDUAL:
            y = y + sym.var(f"{name}_res")
        outs.append(sym.Activation(y, act_type="relu", name=f"{name}_act") if relu else y)
    return sym.Group(outs)


@needs_gcc
@pytest.mark.parametrize("batch, fuse", [(1, False), (3, True)])
def test_deconvolutions_match_numpy(batch, fuse, rng, tmp_path):
    xs = {name: rng.standard_normal((batch, *s)).astype(np.float32) for name, s in SHAPES.items()}
    params, refs = {}, {}
    for name, (inp, at, relu, _) in CASES.items():
        x = xs[inp]
        g, nsp = at.get("num_group", 1), len(at["kernel"])
        wshape = (x.shape[1], at["num_filter"] // g, *at["kernel"])
        w = rng.standard_normal(wshape).astype(np.float32)
        params[f"{name}_weight"] = w
        b = None
        if not at.get("no_bias", True):
            b = rng.standard_normal(at["num_filter"]).astype(np.float32)
            params[f"{name}_bias"] = b
        ref = deconv_ref(x.astype(np.float64), w.astype(np.float64), b, at.get("stride", (1,) * nsp),
                         list(at.get("pad", (0,) * nsp)), list(at.get("adj", (0,) * nsp)),
                         at.get("dilate", (1,) * nsp), g, at.get("target_shape", ()))
        if name in RESIDUAL:
            xs[f"{name}_res"] = rng.standard_normal(ref.shape).astype(np.float32)
            ref = ref + xs[f"{name}_res"]
        refs[name] = (np.maximum(ref, 0) if relu else ref, x.shape[1] // g * int(np.prod(at["kernel"])))
    m = mxcc.compile(_network(), {k: v.shape for k, v in xs.items()}, params, fuse=fuse, out_dir=tmp_path)
    for (name, (ref, k)), out in zip(refs.items(), m.forward(**xs)):
        assert out.shape == ref.shape, name
        assert rel_err(out, ref) <= 1e-6 * np.sqrt(k) + 1e-7, name
    bodies = dict(re.findall(r"static MXCC_NOINLINE void net_(\w+)\(mxcc_ctx \*ctx\)\n\{(.*?)\n\}\n",
                             (tmp_path / "net.c").read_text(), re.S))
    for name, (_, _, _, direct) in CASES.items():
        assert ("mxcc_col2im_f32(" in bodies[name]) == (not direct), name
        assert ("residual + (long)n * " in bodies[name]) == (fuse and name in RESIDUAL), name


MANIFEST = json.loads((DATA / "ops" / "manifest.json").read_text())["cases"]


@pytest.mark.parametrize("case", [c for c, v in MANIFEST.items() if v["op"] == "Deconvolution"])
def test_shape_rule_answers_what_mxnet_answered(case):
    info = MANIFEST[case]
    net = sym.load(str(DATA / "ops" / "cases" / f"{case}-symbol.json"))
    args, outs, _ = net.infer_shape(data=tuple(info["arguments"]["data"]))
    assert dict(zip(net.list_arguments(), map(list, args))) == info["arguments"]
    assert [list(s) for s in outs] == list(info["outputs"].values())


def test_defaults_and_errors():
    d = sym.var("data")
    net = sym.Deconvolution(d, kernel=(3, 3), num_filter=2, name="dc")
    assert net.list_arguments() == ["data", "dc_weight"]          # no_bias defaults to True (MXNet 1.x)
    with pytest.raises(ShapeError, match="target_shape=.* is too big"):
        sym.Deconvolution(d, kernel=(3, 3), stride=(2, 2), target_shape=(12, 12), num_filter=2,
                          name="dc").infer_shape(data=(1, 3, 4, 4))
    with pytest.raises(ShapeError, match="not a multiple of num_group=2"):
        sym.Deconvolution(d, kernel=(3, 3), num_group=2, num_filter=2, name="dc").infer_shape(data=(1, 3, 4, 4))
