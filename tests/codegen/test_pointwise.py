"""The 'pointwise' convolution path (mxcc/ops/convolution.py: 1x1 stride-1 layers with a constant weight and
POINTWISE_MIN_PIXELS pixels, and strided 2-D 1x1 layers from STRIDED_POINTWISE_MIN_PIXELS output pixels,
runtime_c/conv/conv1x1_f32.c) end to end: which layers take it, a network with
a bias + relu layer and a residual + BatchNorm + relu layer (the BatchNorm's scale folded into the packed
weight) against numpy float64, the same after set_params (the weight repacked and rescaled by <net>_prepare). The kernel under ASan/UBSan: tests/runtime/test_conv1x1.py."""
import numpy as np

import mxcc
from mxcc import sym
from mxcc.ops.convolution import POINTWISE_MIN_PIXELS, STRIDED_POINTWISE_MIN_PIXELS, ConvAttrs, candidates, path
import pytest

from mxcc_testing import needs_gcc, rel_err


def test_path_choice():
    a = ConvAttrs(kernel=(1, 1), num_filter=64)
    w = frozenset({"weight"})
    assert path(a, (1, 32, 112, 112), w) == "pointwise"
    assert path(a, (1, 512, 7, 7), w) == "pointwise"
    assert path(a, (1, 512, 6, 6), w) == "packed"                 # smaller images: not measured, unchanged
    assert path(a, (1, 32, 112, 112)) == "gemm"                   # a weight the forward computes (training)
    assert path(ConvAttrs(kernel=(1, 1), num_filter=64, num_group=2), (1, 32, 56, 56), w) == "gemm"
    s2 = ConvAttrs(kernel=(1, 1), num_filter=64, stride=(2, 2))
    assert path(s2, (1, 32, 56, 56), w) == "pointwise"            # ResNet's downsampling at 28x28 outputs
    assert path(s2, (1, 32, 28, 28), w) == "packed"               # 14x14 outputs: the two tie, unchanged
    assert candidates(s2, (1, 32, 28, 28), w) == ("pointwise", "packed")   # the tuner's choice
    assert path(ConvAttrs(kernel=(1, 1), num_filter=64, stride=(2, 2), pad=(1, 1)), (1, 32, 56, 56), w) == "packed"
    assert path(ConvAttrs(kernel=(1,), num_filter=64, stride=(2,)), (1, 32, 3000), w) == "packed"   # 1-D
    assert path(s2, (1, 32, 56, 56)) == "im2col"                  # a weight the forward computes
    assert 6 * 6 < POINTWISE_MIN_PIXELS <= 7 * 7 and 14 * 14 < STRIDED_POINTWISE_MIN_PIXELS <= 28 * 28


def _net():
    """c1: 1x1 19 -> 29 + bias, relu; c2: 1x1 29 -> 29, BatchNorm, + c1's output, relu (a residual epilogue)."""
    with sym.NameManager():
        h = sym.relu(sym.Convolution(sym.var("data"), kernel=(1, 1), num_filter=29, name="c1"))
        c2 = sym.BatchNorm(sym.Convolution(h, kernel=(1, 1), num_filter=29, no_bias=True, name="c2"),
                           fix_gamma=False, eps=1e-3, name="bn2")
        return sym.relu(c2 + h)


def _params(rng):
    f = np.float32
    return {"c1_weight": rng.standard_normal((29, 19, 1, 1)).astype(f), "c1_bias": rng.standard_normal(29).astype(f),
            "c2_weight": rng.standard_normal((29, 29, 1, 1)).astype(f) / 5, "bn2_gamma": rng.uniform(0.5, 1.5, 29).astype(f),
            "bn2_beta": rng.standard_normal(29).astype(f), "bn2_moving_mean": rng.standard_normal(29).astype(f),
            "bn2_moving_var": rng.uniform(0.5, 2, 29).astype(f)}


def _ref(p, x):
    f = lambda w, v: np.einsum("oc,nc...->no...", w[:, :, 0, 0].astype(np.float64), v)   # noqa: E731
    col = lambda v: v[None, :, None, None].astype(np.float64)                          # noqa: E731
    h = np.maximum(f(p["c1_weight"], x.astype(np.float64)) + col(p["c1_bias"]), 0)
    bn = (f(p["c2_weight"], h) - col(p["bn2_moving_mean"])) / np.sqrt(col(p["bn2_moving_var"]) + 1e-3)
    return np.maximum(bn * col(p["bn2_gamma"]) + col(p["bn2_beta"]) + h, 0)


@needs_gcc
def test_pointwise_network_matches_numpy(rng, tmp_path):
    # 17 x 19 = 323 pixels: 10 panels of 32 and a 3-pixel tail; 29 channels: a partial last weight panel
    p1, p2 = _params(rng), _params(rng)
    for shape in ((3, 19, 17, 19), (1, 19, 16, 16)):
        x = rng.standard_normal(shape).astype(np.float32)
        mod = mxcc.compile(_net(), {"data": shape}, p1, out_dir=tmp_path / f"n{shape[0]}", name="net")
        src = (tmp_path / f"n{shape[0]}" / "net.c").read_text()
        assert src.count("mxcc_conv1x1_f32(") == 2 and src.count("mxcc_conv1x1_pack_w_f32(") == 2
        # c2's BatchNorm scale is folded into its packed weight at bind time: its epilogue only adds bn_shift
        assert src.count("mxcc_conv1x1_scale_packed_w_f32(29, 29, packed, bn_scale);") == 1
        assert "{ .bias = bn_shift, .per_row = 1, .residual = residual" in src and ".scale = bn_scale" not in src
        # float32 sums of 19 and 29 products of N(0, 1) values, through BN and a residual: 1e-5 of the magnitude
        assert rel_err(mod.forward(data=x)[0], _ref(p1, x)) <= 1e-5
        mod.set_params(p2)
        assert rel_err(mod.forward(data=x)[0], _ref(p2, x)) <= 1e-5



def _strided_net():
    """ResNet v1's downsampling: d = 1x1 stride-2 conv + BatchNorm of the input, b = 1x1 stride-2 conv + bias + relu,
    then relu(d + b) (a residual epilogue on the second strided layer)."""
    with sym.NameManager():
        x = sym.var("data")
        d = sym.BatchNorm(sym.Convolution(x, kernel=(1, 1), stride=(2, 2), num_filter=29, no_bias=True, name="c2"),
                          fix_gamma=False, eps=1e-3, name="bn2")
        b = sym.relu(sym.Convolution(x, kernel=(1, 1), stride=(2, 2), num_filter=29, name="c1"))
        return sym.relu(d + b)


@needs_gcc
@pytest.mark.parametrize("isa", ["native", "x86-64-v3", "x86-64"])
def test_strided_pointwise_network_matches_numpy(rng, tmp_path, isa):
    """Two strided layers on the pointwise kernel (its gather: AVX-512 masked loads, AVX2 groups of 8, scalar)
    against numpy, on every ISA path; 57 x 58 inputs: 29 x 29 outputs, runs of 29 within the panels."""
    from benchmarks._build_gemm import predefined_macros
    if isa == "x86-64-v3" and {"__AVX2__", "__FMA__"} - predefined_macros("native"):
        pytest.skip("this CPU cannot run -march=x86-64-v3 code")
    p = {**_params(rng)}
    p["c2_weight"] = rng.standard_normal((29, 19, 1, 1)).astype(np.float32) / 5
    x = rng.standard_normal((2, 19, 57, 58)).astype(np.float32)
    mod = mxcc.compile(_strided_net(), {"data": x.shape}, p, out_dir=tmp_path, name="net", isa=isa)
    src = (tmp_path / "net.c").read_text()
    assert src.count("mxcc_conv1x1_strided_f32(2, 19, 57, 58, 2, 2, 29,") == 2
    xs = x[:, :, ::2, ::2].astype(np.float64)
    f = lambda w, v: np.einsum("oc,nc...->no...", w[:, :, 0, 0].astype(np.float64), v)   # noqa: E731
    col = lambda v: v[None, :, None, None].astype(np.float64)                          # noqa: E731
    b = np.maximum(f(p["c1_weight"], xs) + col(p["c1_bias"]), 0)
    d = (f(p["c2_weight"], xs) - col(p["bn2_moving_mean"])) / np.sqrt(col(p["bn2_moving_var"]) + 1e-3)
    want = np.maximum(d * col(p["bn2_gamma"]) + col(p["bn2_beta"]) + b, 0)
    assert rel_err(mod.forward(data=x)[0], want) <= 1e-5
