"""An inference BatchNorm after a layer whose weight is packed at bind time: its scale is multiplied into the
packed weight by <net>_prepare (codegen/lower.py LowerCtx.packed_input) and the kernel's epilogue adds the
shift only. Every packed-weight path against numpy float64, before and after set_params (the weight repacked
and rescaled); the 1x1 path has its own test in test_pointwise.py."""
import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc_testing import conv_reference, needs_gcc, rel_err

SCALE_CALL = {"packed": "mxcc_gemm_scale_packed_b_f32(", "winograd": "mxcc_winograd_f43_scale_weight_f32(",
              "direct": "mxcc_conv_direct_scale_packed_f32(", "fc": "mxcc_gemm_scale_packed_b_f32("}


def _bn_params(rng, n, prefix):
    f = np.float32
    return {f"{prefix}_gamma": rng.uniform(0.5, 1.5, n).astype(f), f"{prefix}_beta": rng.standard_normal(n).astype(f),
            f"{prefix}_moving_mean": rng.standard_normal(n).astype(f),
            f"{prefix}_moving_var": rng.uniform(0.5, 2, n).astype(f)}


def _bn_ref(y, p, prefix, axis_shape):
    col = lambda v: v.reshape(axis_shape).astype(np.float64)   # noqa: E731
    return np.maximum((y - col(p[f"{prefix}_moving_mean"])) / np.sqrt(col(p[f"{prefix}_moving_var"]) + 1e-3)
                      * col(p[f"{prefix}_gamma"]) + col(p[f"{prefix}_beta"]), 0)


def _conv_ref(x, w, b, stride, pad):
    """The convolution in float64 (mxcc_testing.conv_reference: im2col in numpy), plus the bias."""
    k = w.shape[2:]
    out = tuple((n + 2 * pad - kk) // stride + 1 for n, kk in zip(x.shape[2:], k))
    acc, _ = conv_reference(x, w.reshape(w.shape[0], -1), k, (stride, stride), (pad, pad), (1, 1), out, 0.0)
    return acc.reshape(x.shape[0], w.shape[0], *out) + b.reshape(1, -1, 1, 1)


# (path, data shape, channels out, kernel, stride, pad): the path the layer takes (mxcc/ops/convolution.py)
CONV_CASES = [("packed", (2, 24, 9, 9), 20, 3, 2, 1), ("winograd", (1, 24, 15, 15), 20, 3, 1, 1),
              ("direct", (2, 3, 17, 17), 13, 3, 2, 1)]


@needs_gcc
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: c[0])
def test_conv_batch_norm_fold_matches_numpy(case, rng, tmp_path):
    kind, shape, o, k, s, p = case
    with sym.NameManager():
        net = sym.relu(sym.BatchNorm(sym.Convolution(sym.var("data"), kernel=(k, k), stride=(s, s), pad=(p, p),
                                                     num_filter=o, name="c"), fix_gamma=False, eps=1e-3, name="bn"))

    def params():
        return {"c_weight": (rng.standard_normal((o, shape[1], k, k)) / np.sqrt(shape[1] * k * k)).astype(np.float32),
                "c_bias": rng.standard_normal(o).astype(np.float32), **_bn_params(rng, o, "bn")}

    x = rng.standard_normal(shape).astype(np.float32)
    p1, p2 = params(), params()
    mod = mxcc.compile(net, {"data": shape}, p1, out_dir=tmp_path / "m", name="net")
    src = (tmp_path / "m" / "net.c").read_text()
    assert src.count(SCALE_CALL[kind]) == 1 and ".scale = bn_scale" not in src and ".bias = bn_shift" in src
    for prm in (p1, p2):
        if prm is p2:
            mod.set_params(p2)
        want = _bn_ref(_conv_ref(x, prm["c_weight"], prm["c_bias"], s, p), prm, "bn", (1, -1, 1, 1))
        # float32 sums of up to 216 products (Winograd: ~10x the rounding), through the BatchNorm
        assert rel_err(mod.forward(data=x)[0], want) <= 3e-5


@needs_gcc
@pytest.mark.parametrize("batch", [1, 3])
def test_fully_connected_batch_norm_fold_matches_numpy(batch, rng, tmp_path):
    with sym.NameManager():
        net = sym.relu(sym.BatchNorm(sym.FullyConnected(sym.var("data"), num_hidden=37, name="fc"),
                                     fix_gamma=False, eps=1e-3, name="bn"))
    p = {"fc_weight": (rng.standard_normal((37, 50)) / 7).astype(np.float32),
         "fc_bias": rng.standard_normal(37).astype(np.float32), **_bn_params(rng, 37, "bn")}
    x = rng.standard_normal((batch, 50)).astype(np.float32)
    mod = mxcc.compile(net, {"data": (batch, 50)}, p, out_dir=tmp_path / "m", name="net")
    src = (tmp_path / "m" / "net.c").read_text()
    folded = SCALE_CALL["fc"] in src
    # the weight is packed (and the scale folded) only where packing pays (fully_connected.prepack_pays)
    assert folded == ("mxcc_gemm_pack_b_f32(" in src) and (".scale = bn_scale" in src) != folded
    want = _bn_ref(x.astype(np.float64) @ p["fc_weight"].T.astype(np.float64) + p["fc_bias"], p, "bn", (1, -1))
    assert rel_err(mod.forward(data=x)[0], want) <= 1e-5
