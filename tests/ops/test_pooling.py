"""Pooling compiled to C against a float64 numpy reference written here from MXNet's documented semantics
(tests/data README): valid/full output sizes, windows clipped to [-p, x+p) then to the input, avg dividing
by the first (count_include_pad) or second size, global_pool ignoring kernel/stride/pad; max, avg, sum,
lp (p=2), 1-D and 2-D, odd sizes. Also MXNet's output counting (a hidden workspace output for max pooling
in node_row_ptr), the shapes MXNet reported for its cases, and the errors.

Tolerance: max pooling is exact (it returns one of the float32 inputs). avg/sum/lp add at most 25 float32
terms (rounding <= 25 u |x|max ~ 1.5e-6 relative); we allow 2e-6 of max|ref|.
"""
import json

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import AttrError, ShapeError
from mxcc_testing import DATA, needs_gcc, rel_err

CASES = {
    "max_k2s2": ("data", dict(pool_type="max", kernel=(2, 2), stride=(2, 2))),
    "max_k2s2_full": ("data", dict(pool_type="max", kernel=(2, 2), stride=(2, 2), pooling_convention="full")),
    "max_k3s2p1": ("data", dict(pool_type="max", kernel=(3, 3), stride=(2, 2), pad=(1, 1))),
    "max_k3s1p1": ("data", dict(kernel=(3, 3), pad=(1, 1))),                  # pool_type defaults to max
    "max_k32_s21": ("data", dict(pool_type="max", kernel=(3, 2), stride=(2, 1))),
    "avg_k2s2_full": ("data", dict(pool_type="avg", kernel=(2, 2), stride=(2, 2), pooling_convention="full")),
    "avg_k3s2p1_incl": ("data", dict(pool_type="avg", kernel=(3, 3), stride=(2, 2), pad=(1, 1))),
    "avg_k3s1p1_excl": ("data", dict(pool_type="avg", kernel=(3, 3), pad=(1, 1), count_include_pad=False)),
    "avg_k3s2_full_excl": ("data", dict(pool_type="avg", kernel=(3, 3), stride=(2, 2), pooling_convention="full",
                                        count_include_pad=False)),
    "avg_k3s2p1_full_incl": ("data", dict(pool_type="avg", kernel=(3, 3), stride=(2, 2), pad=(1, 1),
                                          pooling_convention="full")),
    "avg_k5s3": ("data", dict(pool_type="avg", kernel=(5, 5), stride=(3, 3))),
    "sum_k3s1p1": ("data", dict(pool_type="sum", kernel=(3, 3), pad=(1, 1))),
    "lp2_k2s2": ("data", dict(pool_type="lp", p_value=2, kernel=(2, 2), stride=(2, 2))),
    "global_max": ("data", dict(pool_type="max", global_pool=True)),
    "global_avg": ("data", dict(pool_type="avg", global_pool=True, kernel=(3, 3), stride=(2, 2))),
    "global_sum": ("data", dict(pool_type="sum", global_pool=True, kernel=(1, 1), pooling_convention="full")),
    "d1_max_k3s2": ("data1d", dict(pool_type="max", kernel=(3,), stride=(2,))),
    "d1_avg_k3s2p1_full_excl": ("data1d", dict(pool_type="avg", kernel=(3,), stride=(2,), pad=(1,),
                                               pooling_convention="full", count_include_pad=False)),
}
SHAPES = {"data": (3, 7, 9), "data1d": (2, 11)}


def pool_ref(x, pool_type="max", kernel=(), stride=(), pad=(), pooling_convention="valid", count_include_pad=True,
             global_pool=False, p_value=2):
    nsp = x.ndim - 2
    size = x.shape[2:]
    k, s, p = (size, (1,) * nsp, (0,) * nsp) if global_pool else (kernel, stride or (1,) * nsp, pad or (0,) * nsp)
    full = pooling_convention == "full" and not global_pool
    out = [1 + (-(-(size[i] + 2 * p[i] - k[i]) // s[i]) if full else (size[i] + 2 * p[i] - k[i]) // s[i])
           for i in range(nsp)]
    y = np.zeros(x.shape[:2] + tuple(out))
    for o in np.ndindex(*out):
        lo = [o[i] * s[i] - p[i] for i in range(nsp)]
        hi = [min(lo[i] + k[i], size[i] + p[i]) for i in range(nsp)]
        n_pad = np.prod([hi[i] - lo[i] for i in range(nsp)])
        lo, hi = [max(v, 0) for v in lo], [min(hi[i], size[i]) for i in range(nsp)]
        win = x[(Ellipsis,) + tuple(slice(lo[i], hi[i]) for i in range(nsp))].reshape(*x.shape[:2], -1)
        y[(Ellipsis,) + o] = {
            "max": lambda: win.max(-1),
            "sum": lambda: win.sum(-1),
            "avg": lambda: win.sum(-1) / (n_pad if count_include_pad else win.shape[-1]),
            "lp": lambda: np.sqrt((win ** 2).sum(-1)),
        }[pool_type]()
    return y


@needs_gcc
def test_poolings_match_numpy(rng):
    xs = {name: rng.standard_normal((2, *s)).astype(np.float32) for name, s in SHAPES.items()}
    ins = {name: sym.var(name) for name in SHAPES}
    net = sym.Group([sym.Pooling(ins[inp], name=name, **at) for name, (inp, at) in CASES.items()])
    m = mxcc.compile(net, {k: v.shape for k, v in xs.items()})
    for (name, (inp, at)), out in zip(CASES.items(), m.forward(**xs)):
        at = {k: v for k, v in at.items() if k != "p_value"}
        ref = pool_ref(xs[inp].astype(np.float64), **at)
        assert out.shape == ref.shape, name
        if at.get("pool_type", "max") == "max":
            np.testing.assert_array_equal(out, ref.astype(np.float32), err_msg=name)
        else:
            assert rel_err(out, ref) <= 2e-6, name


def test_max_pooling_lists_a_hidden_workspace_output_as_mxnet_does():
    d = sym.var("data")
    for at, rows in ((dict(pool_type="max", kernel=(2, 2)), 2), (dict(pool_type="avg", kernel=(2, 2)), 1),
                     (dict(pool_type="sum", kernel=(2, 2)), 1), (dict(pool_type="max", global_pool=True), 1),
                     (dict(pool_type="max", kernel=(3,)), 2)):
        p = sym.Pooling(d, name="p", **at)
        assert p.list_outputs() == ["p_output"]
        row_ptr = json.loads(p.tojson())["node_row_ptr"]
        assert row_ptr[-1] - row_ptr[-2] == rows, at


MANIFEST = json.loads((DATA / "ops" / "manifest.json").read_text())["cases"]


@pytest.mark.parametrize("case", [c for c, v in MANIFEST.items() if v["op"] == "Pooling"])
def test_shape_rule_answers_what_mxnet_answered(case):
    info = MANIFEST[case]
    net = sym.load(str(DATA / "ops" / "cases" / f"{case}-symbol.json"))
    args, outs, _ = net.infer_shape(data=tuple(info["arguments"]["data"]))
    assert [list(s) for s in outs] == list(info["outputs"].values())


def test_errors():
    d = sym.var("data")
    with pytest.raises(AttrError, match="pooling_convention='same' is not supported .*MXNet 1.9.1 itself fails"):
        sym.Pooling(d, kernel=(3,), pooling_convention="same")
    with pytest.raises(AttrError, match="p_value=2 only"):
        sym.Pooling(d, kernel=(2, 2), pool_type="lp", p_value=3)
    with pytest.raises(AttrError, match="layout='NHWC' is not supported"):
        sym.Pooling(d, kernel=(2, 2), layout="NHWC")
    with pytest.raises(AttrError, match="3-D pooling is not supported"):
        sym.Pooling(d, kernel=(2, 2, 2))
    with pytest.raises(AttrError, match="kernel is required"):
        sym.Pooling(d, pool_type="avg")
    with pytest.raises(ShapeError, match=r"p \(Pooling\): kernel \(5, 5\) is larger than the padded input 4"):
        sym.Pooling(d, kernel=(5, 5), name="p").infer_shape(data=(1, 2, 4, 8))
    with pytest.raises(ShapeError, match="needs 3-D .* or 4-D"):
        sym.Pooling(d, global_pool=True, name="p").infer_shape(data=(1, 2, 4, 4, 4))


# -- the forward's specialised paths (kernels/pool2d.c.j2: split interior/border, stride-2 vector blocks, flat
# global reduction) against the same numpy reference, on every ISA path the template selects with #if --------
FAST = {   # name: (data shape, attrs); shapes mix interior and border rows/columns, odd sizes, short and long rows
    "stem_max_s2p1": ((1, 3, 37, 41), dict(pool_type="max", kernel=(3, 3), stride=(2, 2), pad=(1, 1))),
    "max_s2_big": ((2, 8, 40, 40), dict(pool_type="max", kernel=(3, 3), stride=(2, 2), pad=(1, 1))),   # parallel
    "max_k2s2_short": ((3, 2, 9, 9), dict(pool_type="max", kernel=(2, 2), stride=(2, 2))),             # 4 outputs
    "max_s1p2": ((1, 2, 11, 23), dict(pool_type="max", kernel=(5, 3), stride=(1, 1), pad=(2, 1))),
    "max_s3_full": ((1, 2, 20, 35), dict(pool_type="max", kernel=(3, 3), stride=(3, 3), pooling_convention="full")),
    "avg_s1p1_incl": ((1, 3, 17, 19), dict(pool_type="avg", kernel=(3, 3), stride=(1, 1), pad=(1, 1))),
    "avg_s2p2_excl": ((1, 3, 17, 39), dict(pool_type="avg", kernel=(3, 3), stride=(2, 2), pad=(2, 2),
                                           count_include_pad=False)),
    "avg_s2p1_full_incl": ((1, 2, 18, 36), dict(pool_type="avg", kernel=(3, 3), stride=(2, 2), pad=(1, 1),
                                                pooling_convention="full")),
    "sum_s2": ((1, 2, 7, 33), dict(pool_type="sum", kernel=(2, 3), stride=(2, 2))),
    "lp_s2p1": ((1, 2, 9, 34), dict(pool_type="lp", p_value=2, kernel=(3, 3), stride=(2, 2), pad=(1, 1))),
    "global_avg": ((2, 5, 7, 7), dict(pool_type="avg", global_pool=True)),
    "global_max": ((1, 3, 5, 13), dict(pool_type="max", global_pool=True)),
    "global_lp": ((1, 2, 3, 3), dict(pool_type="lp", p_value=2, global_pool=True)),
}


@needs_gcc
@pytest.mark.parametrize("isa", ["native", "x86-64-v3", "x86-64"])
def test_fast_paths_match_numpy_on_every_isa(rng, isa):
    from benchmarks._build_gemm import predefined_macros
    from mxcc.ops.pooling import _pool_vars, PoolAttrs
    if {"__AVX2__", "__FMA__"} - predefined_macros("native") and isa == "x86-64-v3":
        pytest.skip("this CPU cannot run -march=x86-64-v3 code")
    paths = {_pool_vars(PoolAttrs(**at), s)["path"] for s, at in FAST.values()}
    assert {"split", "flat"} <= paths
    xs = {name: rng.standard_normal(s).astype(np.float32) for name, (s, _) in FAST.items()}
    xs["stem_max_s2p1"][0, 0, 3, 5:9] = np.nan      # max skips NaN (it never wins over -FLT_MAX)
    xs["stem_max_s2p1"][0, 1, 6:9, 10:13] = np.nan  # a whole window of NaN: the lowest float
    xs["global_avg"][1, 2, 3, 3] = np.nan           # sums propagate it
    net = sym.Group([sym.Pooling(sym.var(name), name=name, **at) for name, (_, at) in FAST.items()])
    m = mxcc.compile(net, {k: v.shape for k, v in xs.items()}, isa=isa)
    for (name, (_, at)), out in zip(FAST.items(), m.forward(**xs)):
        at = {k: v for k, v in at.items() if k != "p_value"}
        x = xs[name].astype(np.float64)
        if at["pool_type"] == "max":   # numpy's max returns NaN: replace NaN by the lowest float, as C does
            x = np.where(np.isnan(x), np.finfo(np.float32).min, x)
        ref = pool_ref(x, **at)
        assert out.shape == ref.shape, name
        if at["pool_type"] == "max":
            np.testing.assert_array_equal(out, ref.astype(np.float32), err_msg=name)
        else:
            assert np.array_equal(np.isnan(out), np.isnan(ref)), name
            fin = ~np.isnan(ref)
            assert rel_err(out[fin], ref[fin]) <= 2e-6, name


def test_fast_path_choice():
    """Which outputs need no clipping, and when each path is taken (the lowering's arithmetic)."""
    from mxcc.ops.pooling import _interior, _pool_vars, PoolAttrs
    assert _interior(112, 56, 3, 2, 1) == (1, 56)       # ResNet stem: only output 0 reads the pad
    assert _interior(9, 5, 2, 2, 0) == (0, 4)           # 'full': the last window runs past the input
    assert _interior(3, 3, 3, 1, 1) == (1, 2)
    assert _interior(2, 2, 3, 1, 1) == (1, 1)           # every window clipped: no interior
    v = _pool_vars(PoolAttrs(kernel=(3, 3), stride=(2, 2), pad=(1, 1)), (1, 64, 112, 112))
    assert (v["path"], v["oh0"], v["oh1"], v["c0"], v["tw"], v["parallel"]) == ("split", 1, 56, 1, 111, True)
    assert _pool_vars(PoolAttrs(kernel=(3, 3), pad=(1, 1)), (1, 1, 2, 2))["path"] == "generic"
    assert _pool_vars(PoolAttrs(pool_type="avg", global_pool=True), (1, 512, 7, 7))["path"] == "flat"
    assert not _pool_vars(PoolAttrs(kernel=(2, 2), stride=(2, 2)), (1, 1, 8, 8))["parallel"]


@needs_gcc
def test_fast_paths_under_sanitizers(tmp_path):
    """The split path's stack rows (t, u: the vector blocks read past the interior) under ASan + UBSan."""
    import os
    import subprocess
    net = sym.Group([sym.Pooling(sym.var(name), name=name, **at) for name, (_, at) in FAST.items()])
    out = mxcc.compile(net, {name: s for name, (s, _) in FAST.items()}, sanitize=True, out_dir=tmp_path / "p",
                       name="pools")
    r = subprocess.run([str(out / "pools_bench"), "--iters", "2", "--warmup", "1", "--threads", "2"],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"))
    assert r.returncode == 0 and "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr, r.stderr
