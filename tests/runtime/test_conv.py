"""runtime_c/conv/: im2col, col2im (im2col_f32.c) and the depthwise kernel (depthwise_*.c) against their reference twins and against
numpy, on an edge matrix (1-D/2-D/3-D, stride > kernel, pad > kernel, dilation, 1-pixel images), with 1 and
2 threads; and a sanitizer build of a C driver (tests/runtime/conv_sanity.c) on random geometries.

Tolerances. im2col copies values: exact. col2im sums at most prod(kernel) columns per pixel in a fixed
order in both versions: the fast one equals the reference bit for bit; against numpy (float64) 1e-6 of
the scale. The depthwise kernel sums KH*KW products (FMA-contracted or not): 1e-6 * sqrt(K) of max|ref|.
Its backward sums at most KH*KW products per data-gradient element and N*OH*OW per weight-gradient element
(float rows summed in double): 1e-6 * sqrt(terms) of the scale, against numpy and against the reference twin.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mxcc_testing import (assert_in_runtime, build_sanitized_driver, conv_geom as _geom, float_buf as _f, im2col_np,
                          runtime_objects_for)

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime_c"
CC = os.environ.get("CC", "gcc")
CFLAGS = ["-O3", "-march=native", "-fopenmp", "-g", "-fno-omit-frame-pointer", "-std=gnu11"]
# under test: im2col/col2im, the depthwise kernels (forward: driver, rows, flat; backward), the channel-plane
# epilogue, and the scalar epilogue they share with the GEMM (runtime_c/gemm/epilogue_f32.c); the builds link
# mxcc's runtime objects, which hold them
SOURCES = [RUNTIME / "conv" / name for name in ("im2col_f32.c", "depthwise_f32.c", "depthwise_rows_f32.c",
                                                "depthwise_flat_f32.c", "depthwise_cblock_f32.c",
                                                "depthwise_backward_f32.c", "conv_epilogue_f32.c")]
SOURCES += [RUNTIME / "gemm" / "epilogue_f32.c", RUNTIME / "pool" / "pool.c"]


def _cdef() -> str:
    """The types of mxcc_gemm.h the conv API uses, and mxcc_conv.h's declarations (no inline helper)."""
    gemm = (RUNTIME / "gemm" / "mxcc_gemm.h").read_text()
    types = re.findall(r"typedef (?:enum|struct) \w+ \{.*?\} \w+;", gemm, re.S)
    conv = (RUNTIME / "conv" / "mxcc_conv.h").read_text()
    conv = re.sub(r"/\*.*?\*/", "", conv, flags=re.S)
    conv = re.sub(r"static inline.*?\n\}\n", "", conv, flags=re.S)
    # the packed-weight, direct and pointwise convolutions link the GEMM or have their own tests (test_conv_packed.py,
    # test_conv_direct.py, test_conv1x1.py)
    conv = re.sub(r"\n[^\n;]*mxcc_conv(?:_packed|_direct|1x1)\w*\([^;]*;", "", conv)
    decls = [ln for ln in conv.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
             and "extern" not in ln and ln.strip() != "}"]
    return "\n".join(types) + "\n" + "\n".join(decls) + "\nvoid omp_set_num_threads(int);\nint omp_get_max_threads(void);\n"


def _build(tmp_path_factory, march: str):
    if shutil.which(CC) is None:
        pytest.skip(f"no C compiler ({CC}) on PATH")
    cffi = pytest.importorskip("cffi")
    import importlib.util
    name = "_mxcc_conv_test_" + march.replace("-", "_")
    ffi = cffi.FFI()
    ffi.cdef(_cdef())
    assert_in_runtime(SOURCES)
    ffi.set_source(name, '#include <omp.h>\n#include "conv/mxcc_conv.h"\n',
                   extra_objects=[str(p) for p in runtime_objects_for(march)], include_dirs=[str(RUNTIME)],
                   extra_compile_args=[f if f != "-march=native" else f"-march={march}" for f in CFLAGS],
                   extra_link_args=["-fopenmp"], libraries=["m"])
    so = ffi.compile(tmpdir=str(tmp_path_factory.mktemp(f"conv_build_{march}")))
    spec = importlib.util.spec_from_file_location(name, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ffi, mod.lib


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    return _build(tmp_path_factory, "native")


# The ISA paths of the depthwise kernel (chosen at compile time): AVX-512 on this machine (native), AVX2+FMA
# (x86-64-v3), plain C (x86-64). Every path must be tested wherever the tests run.
@pytest.fixture(scope="module", params=["native", "x86-64-v3", "x86-64"])
def conv_isa(request, tmp_path_factory):
    return _build(tmp_path_factory, request.param)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request, conv):
    _, lib = conv
    before = lib.omp_get_max_threads()
    lib.omp_set_num_threads(request.param)
    yield request.param
    lib.omp_set_num_threads(before)


# (channels, size, kernel, stride, pad, dilate): 1-D, 2-D, 3-D; stride > kernel; pad > kernel; 1-pixel input
GEOMETRIES = [
    (3, (7, 9), (3, 3), (1, 1), (1, 1), (1, 1)),
    (2, (8, 8), (3, 3), (2, 2), (1, 1), (1, 1)),
    (2, (9, 7), (5, 3), (3, 2), (2, 0), (1, 2)),
    (1, (5, 6), (2, 2), (3, 3), (0, 0), (1, 1)),       # stride > kernel: skipped pixels
    (2, (4, 5), (3, 3), (1, 2), (4, 4), (1, 1)),       # pad > kernel: rows entirely in the padding
    (1, (1, 1), (1, 1), (1, 1), (0, 0), (1, 1)),
    (3, (6, 6), (3, 3), (1, 1), (2, 2), (2, 2)),
    (2, (11,), (3,), (2,), (1,), (1,)),
    (1, (4, 5, 5), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    (2, (3, 6, 7), (2, 3, 1), (2, 1, 3), (0, 2, 1), (1, 2, 1)),
]


@pytest.mark.parametrize("geo", GEOMETRIES, ids=lambda g: f"c{g[0]}_{'x'.join(map(str, g[1]))}_k{g[2]}s{g[3]}p{g[4]}d{g[5]}")
def test_im2col_and_col2im(conv, threads, geo):
    ffi, lib = conv
    c, size, k, s, p, d = geo
    g, out = _geom(ffi, c, size, k, s, p, d)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((c, *size)).astype(np.float32)
    want = im2col_np(x.astype(np.float64), k, s, p, d, out)
    for fn in (lib.mxcc_im2col_f32, lib.mxcc_im2col_f32_ref):
        col = np.full(want.shape, np.nan, np.float32)         # every element must be written
        fn(g, _f(ffi, x), _f(ffi, col), 1)
        np.testing.assert_array_equal(col, want.astype(np.float32), err_msg=str(fn))
    # col2im is the adjoint of im2col: <im2col(x), cols> == <x, col2im(cols)>
    cols = rng.standard_normal(want.shape).astype(np.float32)
    ys = []
    for fn in (lib.mxcc_col2im_f32, lib.mxcc_col2im_f32_ref):
        y = np.full(x.shape, np.nan, np.float32)              # overwritten, not accumulated into
        fn(g, _f(ffi, cols), _f(ffi, y), 1)
        ys.append(y)
    np.testing.assert_array_equal(ys[0], ys[1])
    lhs = float(np.sum(want * cols.astype(np.float64)))
    rhs = float(np.sum(x.astype(np.float64) * ys[0].astype(np.float64)))
    assert abs(lhs - rhs) <= 1e-6 * np.sum(np.abs(want) * np.abs(cols)) + 1e-12


@pytest.mark.parametrize("geo", GEOMETRIES, ids=lambda g: f"c{g[0]}_{'x'.join(map(str, g[1]))}_k{g[2]}s{g[3]}p{g[4]}d{g[5]}")
def test_blocks_of_columns(conv, threads, geo):
    """im2col of a block [j0, j0 + nj) is those columns of the whole matrix (exact); col2im of consecutive
    blocks added into a zeroed image is the whole col2im up to the order of each pixel's sum (at most
    prod(kernel) terms: 1e-6 of the scale), and the fast blocked sum equals the reference's bit for bit. Blocks of 1, 3, 7 columns and a
    random cut: they start and end inside output rows, and 1-column blocks hit every edge case."""
    ffi, lib = conv
    c, size, k, s, p, d = geo
    g, out = _geom(ffi, c, size, k, s, p, d)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((c, *size)).astype(np.float32)
    want = im2col_np(x.astype(np.float64), k, s, p, d, out).astype(np.float32)
    rows, n = want.shape
    cols = rng.standard_normal(want.shape).astype(np.float32)
    whole = np.full(x.shape, np.nan, np.float32)
    lib.mxcc_col2im_f32_ref(g, _f(ffi, cols), _f(ffi, whole), 1)
    cuts = [list(range(0, n, w)) + [n] for w in (1, 3, 7)] + [sorted({0, n, *rng.integers(0, n, 3).tolist()})]
    for edges in cuts:
        sums = []
        for im2col, col2im in ((lib.mxcc_im2col_block_f32, lib.mxcc_col2im_block_acc_f32),
                               (lib.mxcc_im2col_block_f32_ref, lib.mxcc_col2im_block_acc_f32_ref)):
            acc = np.zeros(x.shape, np.float32)
            for j0, j1 in zip(edges[:-1], edges[1:]):
                blk = np.full((rows, j1 - j0), np.nan, np.float32)
                im2col(g, _f(ffi, x), j0, j1 - j0, _f(ffi, blk), 1)
                np.testing.assert_array_equal(blk, want[:, j0:j1], err_msg=f"{im2col} [{j0}, {j1})")
                col2im(g, _f(ffi, np.ascontiguousarray(cols[:, j0:j1])), j0, j1 - j0, _f(ffi, acc), 1)
            assert np.max(np.abs(acc - whole)) <= 1e-6 * np.prod(k) * np.max(np.abs(cols))
            sums.append(acc)
        np.testing.assert_array_equal(sums[0], sums[1])


ACT = {"NONE": lambda v: v, "RELU": lambda v: np.maximum(v, 0), "SIGMOID": lambda v: 1 / (1 + np.exp(-v)),
       "TANH": np.tanh, "SOFTRELU": lambda v: np.log1p(np.exp(v)), "SOFTSIGN": lambda v: v / (1 + np.abs(v)),
       "LEAKY": lambda v: np.where(v > 0, v, 0.1 * v), "CLIP": lambda v: np.clip(v, -0.5, 0.5)}


# Wide rows for the vector paths: unrolled vectors, single vectors, then the rest; the last two planes
# are too large for the padded-plane path (depthwise_plane_flat), so the row path runs
DEPTHWISE_WIDE = [
    (3, (5, 83), (3, 3), (1, 1), (1, 1), (1, 1)),
    (2, (6, 90), (3, 3), (2, 2), (1, 1), (1, 1)),
    (2, (4, 75), (5, 5), (2, 2), (2, 2), (1, 1)),
    (2, (5, 70), (3, 3), (1, 1), (2, 2), (2, 2)),
    (1, (3, 40), (1, 3), (1, 1), (0, 0), (1, 1)),
    (2, (7, 33), (3, 3), (2, 2), (0, 0), (1, 1)),   # stride 2, no pad: the last column's load ends the row
    (1, (2, 37), (2, 4), (2, 3), (1, 2), (1, 1)),   # stride 3: the portable plane
    (1, (70, 130), (3, 3), (1, 1), (1, 1), (1, 1)),
    (1, (66, 141), (3, 3), (2, 2), (1, 1), (1, 1)),
]


@pytest.mark.parametrize("geo", [g for g in GEOMETRIES if len(g[1]) <= 2] + DEPTHWISE_WIDE,
                         ids=lambda g: f"c{g[0]}_{'x'.join(map(str, g[1]))}_k{g[2]}s{g[3]}p{g[4]}d{g[5]}")
def test_depthwise_isa_paths(conv_isa, geo):
    """Every ISA path of the depthwise kernel (one epilogue: the epilogue code has no ISA variants)."""
    test_depthwise_against_numpy_and_reference(conv_isa, 1, geo, "TANH", ("scale", "shift", "bias"))


@pytest.mark.parametrize("geo", [g for g in GEOMETRIES if len(g[1]) <= 2] + DEPTHWISE_WIDE[:-2],
                         ids=lambda g: f"c{g[0]}_{'x'.join(map(str, g[1]))}_k{g[2]}s{g[3]}p{g[4]}d{g[5]}")
@pytest.mark.parametrize("act, parts", [("NONE", ()), ("RELU", ("bias",)), ("TANH", ("scale", "shift", "bias")),
                                        ("LEAKY", ("shift",)), ("CLIP", ("scale",)), ("SOFTRELU", ("bias",))])
def test_depthwise_against_numpy_and_reference(conv, threads, geo, act, parts):
    ffi, lib = conv
    c, size, k, s, p, d = geo
    g, out = _geom(ffi, c, size, k, s, p, d)
    rng = np.random.default_rng(4)
    batch = 2
    x = rng.standard_normal((batch, c, *size)).astype(np.float32)
    w = rng.standard_normal((c, *k)).astype(np.float32)
    vec = {name: rng.standard_normal(c).astype(np.float32) for name in ("scale", "shift", "bias")}
    ref = np.stack([np.stack([(im2col_np(x[n, ci:ci + 1].astype(np.float64), k, s, p, d, out).T @
                               w[ci].reshape(-1).astype(np.float64)).reshape(out) for ci in range(c)])
                    for n in range(batch)])
    shape = (1, c) + (1,) * len(size)
    for name in ("scale", "shift", "bias"):          # the epilogue order of mxcc_gemm.h
        if name in parts:
            ref = ref * vec[name].reshape(shape) if name == "scale" else ref + vec[name].reshape(shape)
    ref = ACT[act](ref)
    ep = ffi.new("mxcc_epilogue *", dict(per_row=1, act=getattr(lib, f"MXCC_ACT_{act}"), alpha=0.1, lo=-0.5, hi=0.5,
                                         **{n: _f(ffi, vec[n]) for n in parts}))
    outs = []
    for fn in (lib.mxcc_conv_depthwise_f32, lib.mxcc_conv_depthwise_f32_ref):
        y = np.full(ref.shape, np.nan, np.float32)
        fn(g, batch, _f(ffi, x), _f(ffi, w), ep if (parts or act != "NONE") else ffi.NULL, _f(ffi, y), 1)
        scale = max(float(np.max(np.abs(ref))), 1e-30)
        assert np.max(np.abs(y - ref)) <= 1e-6 * np.sqrt(np.prod(k)) * scale + 1e-7, str(fn)
        outs.append(y)
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=1e-6)


def depthwise_backward_np(x, w, dy, k, s, p, d, out):
    """(dx, dw) of the depthwise convolution in float64, from the im2col view: for each channel,
    dw = dy . cols^T and dx = the adjoint of im2col applied to w^T . dy."""
    batch, c = x.shape[:2]
    dx, dw = np.zeros(x.shape), np.zeros(w.shape)
    size = x.shape[2:]
    for n in range(batch):
        for ci in range(c):
            cols = im2col_np(x[n, ci:ci + 1], k, s, p, d, out)            # (K, OHW)
            g = dy[n, ci].reshape(-1)
            dw[ci] += (cols @ g).reshape(w.shape[1:])
            dcols = np.outer(w[ci].reshape(-1), g)                          # (K, OHW)
            # adjoint of im2col: <im2col(e_j), dcols> for every input pixel j
            for j in range(int(np.prod(size))):
                e = np.zeros((1,) + size)
                e.reshape(-1)[j] = 1.0
                dx[n, ci].reshape(-1)[j] = np.sum(im2col_np(e, k, s, p, d, out) * dcols)
    return dx, dw


@pytest.mark.parametrize("geo", [g for g in GEOMETRIES if len(g[1]) <= 2][:6] + [GEOMETRIES[7]],
                         ids=lambda g: f"c{g[0]}_{'x'.join(map(str, g[1]))}_k{g[2]}s{g[3]}p{g[4]}d{g[5]}")
def test_depthwise_backward_against_numpy_and_reference(conv, threads, geo):
    ffi, lib = conv
    c, size, k, s, p, d = geo
    g, out = _geom(ffi, c, size, k, s, p, d)
    rng = np.random.default_rng(5)
    batch = 2
    x = rng.standard_normal((batch, c, *size)).astype(np.float32)
    w = rng.standard_normal((c, *k)).astype(np.float32)
    dy = rng.standard_normal((batch, c, *out)).astype(np.float32)
    want_dx, want_dw = depthwise_backward_np(x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64),
                                             k, s, p, d, out)
    got = []
    for fn in (lib.mxcc_conv_depthwise_backward_f32, lib.mxcc_conv_depthwise_backward_f32_ref):
        dx = np.full(x.shape, np.nan, np.float32)           # overwritten, not accumulated into
        dw = np.full(w.shape, np.nan, np.float32)
        fn(g, batch, _f(ffi, x), _f(ffi, w), _f(ffi, dy), _f(ffi, dx), _f(ffi, dw), 1)
        for what, a, ref, terms in (("dx", dx, want_dx, np.prod(k)), ("dw", dw, want_dw, batch * np.prod(out))):
            scale = max(float(np.max(np.abs(ref))), 1e-30)
            assert np.max(np.abs(a - ref)) <= 1e-6 * np.sqrt(terms) * scale + 1e-7, (str(fn), what)
        got.append((dx, dw))
        dw2 = np.full(w.shape, np.nan, np.float32)          # no data gradient wanted: dx = NULL
        fn(g, batch, _f(ffi, x), _f(ffi, w), _f(ffi, dy), ffi.NULL, _f(ffi, dw2), 1)
        np.testing.assert_array_equal(dw2, dw)
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0][1], got[1][1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("march, problems", [("native", 250), ("x86-64-v3", 100)])
def test_conv_runtime_under_address_and_undefined_sanitizers(tmp_path, march, problems):
    exe = build_sanitized_driver(tmp_path, march, Path(__file__).with_name("conv_sanity.c"), RUNTIME)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1",
               OMP_NUM_THREADS="2")
    run = subprocess.run([str(exe), str(problems)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


# The depthwise kernel's paths by geometry (runtime_c/conv/depthwise_*.c): the register-blocked rows for
# square 3x3 / 5x5 kernels with equal strides 1 or 2 (unmasked blocks in the middle of wide rows, masked
# vectors at the edges and for narrow rows, blocks of rows that run past the output's last row), the flat
# path for small same-size stride-1 planes and small stride-2 planes (read as their four phases), the
# generic vector path for everything else (1x1, dilation, unequal strides), the portable plane for strides
# > 2. Widths 1..20 cross every vector-width boundary of both vector ISAs (16 and 8 lanes); 33..40 and 70
# add unmasked blocks. Every activation and epilogue part is cycled through the geometries; the oracle is
# the reference twin (and numpy for a sample).
DW_ACTS = ["NONE", "RELU", "SIGMOID", "TANH", "SOFTRELU", "SOFTSIGN", "LEAKY", "CLIP"]
DW_PARTS = [(), ("scale",), ("shift",), ("bias",), ("scale", "shift"), ("scale", "shift", "bias"), ("bias", "residual"),
            ("scale", "shift", "residual")]


def _dw_matrix():
    """(c, (H, W), (KH, KW), (sh, sw), (ph, pw), (dh, dw)) covering the kernel's paths."""
    out = []
    for k, s, p in [(3, 1, 1), (3, 2, 1), (3, 1, 0), (3, 2, 0), (3, 1, 2), (3, 2, 2), (5, 1, 2), (5, 2, 2),
                    (5, 1, 0), (5, 2, 1), (1, 1, 0), (1, 2, 0), (1, 1, 1)]:
        for wdt in list(range(1, 21)) + [33, 40, 70]:
            hgt = (1, 5, 9, 6)[wdt % 4] if wdt <= 20 else 11   # 1 row; blocks of rows past the last row
            if wdt + 2 * p >= k and hgt + 2 * p >= k:
                out.append((2, (hgt, wdt), (k, k), (s, s), (p, p), (1, 1)))
    # the flat path's planes and their non-flat neighbours; dilation; unequal strides; stride 3
    out += [(3, (n, n), (3, 3), (1, 1), (1, 1), (1, 1)) for n in (2, 3, 7, 8, 9, 11)]
    out += [(2, (n, n), (5, 5), (1, 1), (2, 2), (1, 1)) for n in (4, 7, 8)]
    # the flat path's stride-2 planes (phases): square and odd sizes, tall planes, 5x5; AVX2's (OW <= 4) too
    out += [(3, (n, n), (3, 3), (2, 2), (1, 1), (1, 1)) for n in (12, 13, 14, 15, 16)]
    out += [(2, (27, 13), (3, 3), (2, 2), (1, 1), (1, 1)), (2, (31, 14), (3, 3), (2, 2), (1, 1), (1, 1)),
            (2, (11, 7), (3, 3), (2, 2), (1, 1), (1, 1)), (2, (15, 8), (3, 3), (2, 2), (1, 1), (1, 1)),
            (2, (14, 14), (5, 5), (2, 2), (2, 2), (1, 1)), (2, (13, 11), (5, 5), (2, 2), (2, 2), (1, 1))]
    # 16 planes on their side (AVX-512, depthwise_cblock_f32.c: 3x3 where the flat path fits, >= 16 planes):
    # groups across the two images, a short last group, strides 1 and 2, pads 0-2
    out += [(20, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1)), (37, (8, 8), (3, 3), (1, 1), (1, 1), (1, 1)),
            (17, (14, 14), (3, 3), (2, 2), (1, 1), (1, 1)), (33, (13, 13), (3, 3), (2, 2), (1, 1), (1, 1)),
            (24, (15, 9), (3, 3), (2, 2), (1, 1), (1, 1)), (16, (5, 5), (3, 3), (1, 1), (1, 1), (1, 1)),
            (18, (16, 16), (3, 3), (2, 2), (1, 1), (1, 1)), (9, (6, 6), (3, 3), (1, 1), (1, 1), (1, 1))]
    out += [(2, (6, 6), (3, 3), (1, 1), (2, 2), (2, 2)), (2, (9, 30), (3, 3), (2, 2), (2, 2), (2, 2)),
            (2, (9, 21), (3, 3), (1, 2), (1, 1), (1, 1)), (2, (8, 19), (3, 3), (2, 1), (1, 1), (1, 1)),
            (2, (7, 17), (3, 5), (1, 1), (1, 2), (1, 1)), (2, (9, 25), (3, 3), (3, 3), (1, 1), (1, 1))]
    return out


DW_MATRIX = _dw_matrix()


def _dw_case(ffi, lib, geo, i, rng):
    """Inputs, epilogue and reference output of case i of the matrix (batch 1 when a residual is fused:
    its rows are one image's channels)."""
    c, size, k, s, p, d = geo
    g, out = _geom(ffi, c, size, k, s, p, d)
    act, parts = DW_ACTS[i % len(DW_ACTS)], DW_PARTS[(i // len(DW_ACTS) + i) % len(DW_PARTS)]
    batch = 1 if "residual" in parts else 2
    x = rng.standard_normal((batch, c, *size)).astype(np.float32)
    w = rng.standard_normal((c, *k)).astype(np.float32)
    vec = {n: rng.standard_normal(c).astype(np.float32) for n in ("scale", "shift", "bias")}
    res = rng.standard_normal((c, *out)).astype(np.float32)
    ep = ffi.new("mxcc_epilogue *", dict(per_row=1, act=getattr(lib, f"MXCC_ACT_{act}"), alpha=0.1, lo=-0.5, hi=0.5,
                                         **{n: _f(ffi, vec[n]) for n in parts if n != "residual"}))
    if "residual" in parts:
        ep.residual, ep.ld_residual = _f(ffi, res), int(np.prod(out))
    keep = (x, w, vec, res)   # the epilogue points into these
    return g, out, act, parts, batch, x, w, vec, res, (ep if parts or act != "NONE" else ffi.NULL), keep


def test_depthwise_edge_matrix_against_reference(conv_isa):
    """Every geometry of DW_MATRIX on every ISA build, against the reference twin; the
    output buffer starts as NaN (every element must be written) and has a NaN guard after it (nothing
    written past the end)."""
    ffi, lib = conv_isa
    rng = np.random.default_rng(11)
    for i, geo in enumerate(DW_MATRIX):
        g, out, act, parts, batch, x, w, _, _, ep, _keep = _dw_case(ffi, lib, geo, i, rng)
        n = batch * geo[0] * int(np.prod(out))
        got, want = np.full(n + 16, np.nan, np.float32), np.full(n, np.nan, np.float32)
        lib.mxcc_conv_depthwise_f32(g, batch, _f(ffi, x), _f(ffi, w), ep, _f(ffi, got), 1)
        lib.mxcc_conv_depthwise_f32_ref(g, batch, _f(ffi, x), _f(ffi, w), ep, _f(ffi, want), 0)
        assert np.all(np.isnan(got[n:])), (geo, "wrote past the output")
        scale = max(float(np.max(np.abs(want))), 1.0)
        assert np.max(np.abs(got[:n] - want)) <= 1e-6 * np.sqrt(np.prod(geo[2])) * 4 * scale, (geo, act, parts)


def test_depthwise_edge_matrix_against_numpy(conv, threads):
    """A sample of DW_MATRIX with every epilogue part and activation, native build, 1 and 2 threads,
    against numpy in float64."""
    ffi, lib = conv
    rng = np.random.default_rng(12)
    for i, geo in enumerate(DW_MATRIX):
        if i % 3:
            continue
        g, out, act, parts, batch, x, w, vec, res, ep, _keep = _dw_case(ffi, lib, geo, i, rng)
        c, size, k, s, p, d = geo
        ref = np.stack([np.stack([(im2col_np(x[n, ci:ci + 1].astype(np.float64), k, s, p, d, out).T @
                                   w[ci].reshape(-1).astype(np.float64)).reshape(out) for ci in range(c)])
                        for n in range(batch)])
        shape = (1, c) + (1,) * len(size)
        for name in ("scale", "shift", "bias"):
            if name in parts:
                ref = ref * vec[name].reshape(shape) if name == "scale" else ref + vec[name].reshape(shape)
        if "residual" in parts:
            ref = ref + res[None]
        ref = ACT[act](ref)
        got = np.full(ref.shape, np.nan, np.float32)
        lib.mxcc_conv_depthwise_f32(g, batch, _f(ffi, x), _f(ffi, w), ep, _f(ffi, got), 1)
        scale = max(float(np.max(np.abs(ref))), 1.0)
        assert np.max(np.abs(got - ref)) <= 1e-6 * np.sqrt(np.prod(k)) * 4 * scale, (geo, act, parts)


def test_depthwise_plane_kernels_give_the_auto_choice_bits(conv_isa):
    """MXCC_DW_PLANES (a tuned build's depthwise_flat: never 16 channels at a time) and MXCC_DW_CBLOCK (16 at a
    time wherever they fit, on any CPU: AUTO leaves them on AMD family 25) against MXCC_DW_AUTO on every geometry
    of DW_MATRIX (its 16-channel cases included) and every ISA build: the same bits (every kernel sums an output's
    taps in one order), every output written and nothing past them, and the reference twin's result within
    rounding."""
    ffi, lib = conv_isa
    rng = np.random.default_rng(14)
    for i, geo in enumerate(DW_MATRIX):
        g, out, act, parts, batch, x, w, _, _, ep, _keep = _dw_case(ffi, lib, geo, i, rng)
        n = batch * geo[0] * int(np.prod(out))
        got = {}
        for kernel in (lib.MXCC_DW_AUTO, lib.MXCC_DW_PLANES, lib.MXCC_DW_CBLOCK):
            y = np.full(n + 16, np.nan, np.float32)
            lib.mxcc_conv_depthwise_kernel_f32(g, batch, _f(ffi, x), _f(ffi, w), ep, _f(ffi, y), 1, kernel)
            assert np.all(np.isnan(y[n:])) and not np.any(np.isnan(y[:n])), geo
            got[kernel] = y[:n]
        np.testing.assert_array_equal(got[lib.MXCC_DW_AUTO], got[lib.MXCC_DW_PLANES], err_msg=str((geo, act, parts)))
        np.testing.assert_array_equal(got[lib.MXCC_DW_CBLOCK], got[lib.MXCC_DW_PLANES], err_msg=str((geo, act, parts)))
        want = np.full(n, np.nan, np.float32)   # and the plain loops' result, as the AUTO kernel's tests check
        lib.mxcc_conv_depthwise_f32_ref(g, batch, _f(ffi, x), _f(ffi, w), ep, _f(ffi, want), 0)
        scale = max(float(np.max(np.abs(want))), 1.0)
        assert np.max(np.abs(got[lib.MXCC_DW_PLANES] - want)) <= 1e-6 * np.sqrt(np.prod(geo[2])) * 4 * scale, geo


def test_depthwise_output_planes_apart(conv_isa):
    """mxcc_conv_geom.y_plane (the planes a pointwise layer after reads aligned): every geometry of DW_MATRIX
    without a residual, on every ISA build, through both kernel choices and the reference twin, on 2 threads:
    each plane the bits of the dense output, the floats between planes never written."""
    ffi, lib = conv_isa
    rng = np.random.default_rng(15)
    before = lib.omp_get_max_threads()
    lib.omp_set_num_threads(2)
    try:
        for i, geo in enumerate(DW_MATRIX):
            g, out, act, parts, batch, x, w, _, _, ep, _keep = _dw_case(ffi, lib, geo, i, rng)
            if "residual" in parts:
                continue
            planes, ohw = batch * geo[0], int(np.prod(out))
            ys = -(-ohw // 16) * 16 + 16   # a gap after every plane, whatever ohw
            runs = [lambda y: lib.mxcc_conv_depthwise_kernel_f32(g, batch, _f(ffi, x), _f(ffi, w), ep, _f(ffi, y), 1, kernel)
                    for kernel in (lib.MXCC_DW_AUTO, lib.MXCC_DW_PLANES, lib.MXCC_DW_CBLOCK)]
            runs.append(lambda y: lib.mxcc_conv_depthwise_f32_ref(g, batch, _f(ffi, x), _f(ffi, w), ep, _f(ffi, y), 0))
            for run in runs:
                g.y_plane = 0
                dense = np.full(planes * ohw, np.nan, np.float32)
                run(dense)
                g.y_plane = ys
                apart = np.full((planes, ys), np.nan, np.float32)
                run(apart)
                np.testing.assert_array_equal(apart[:, :ohw], dense.reshape(planes, ohw), err_msg=str(geo))
                assert np.all(np.isnan(apart[:, ohw:])), geo
    finally:
        lib.omp_set_num_threads(before)


def test_depthwise_bits_do_not_depend_on_threads(conv):
    """The planes split over the threads, each computed the same way: 1 and 2 threads give the same bits on
    every geometry of DW_MATRIX (its epilogues included)."""
    ffi, lib = conv
    before = lib.omp_get_max_threads()
    try:
        rng = np.random.default_rng(13)
        for i, geo in enumerate(DW_MATRIX):
            g, out, act, parts, batch, x, w, _, _, ep, _keep = _dw_case(ffi, lib, geo, i, rng)
            got = []
            for t in (1, 2):
                lib.omp_set_num_threads(t)
                y = np.full(batch * geo[0] * int(np.prod(out)), np.nan, np.float32)
                lib.mxcc_conv_depthwise_f32(g, batch, _f(ffi, x), _f(ffi, w), ep, _f(ffi, y), 1)
                got.append(y)
            np.testing.assert_array_equal(got[0], got[1], err_msg=str((geo, act, parts)))
    finally:
        lib.omp_set_num_threads(before)
