"""runtime_c/conv/winograd_f32.c (Winograd F(4x4,3x3)) against a float64 numpy direct convolution.

Builds: native (AVX-512 transforms and the 14x32 micro-kernel on this machine), x86-64-v3 (AVX2 + FMA, 6x16),
x86-64 (plain C, 6x16): every path the build can pick. Each run checks that the weight, the scratch and the
output get no write past their sizes or before y (sentinel guards), and that every output element is
written (y starts as NaN).

Tolerance. Winograd adds error in the transforms (B^T d B sums values up to 5x larger than the input
pixels; A^T M A multiplies by up to 8), so the error is measured against a scale, not against |y|: the sum
|w| |x| of the absolute products a direct convolution adds for an output, maximized over the output's 4x4
tile (the output transform mixes the tile: a pixel whose window lies in the padding gets its neighbours'
rounding noise): err / scale. Measured on
realistic data (weights ~ N(0, 2/(9C)), inputs relu(N(0, 1))), ResNet-18's shapes, all three builds: max
err / scale 1.1e-6 .. 2.4e-6 (a float32 direct convolution: 0.5e-7 .. 1.4e-7), max err / max |y| 0.5e-5 ..
1.1e-5, rms err / rms y 1.5e-6 .. 2.9e-6 (float32 direct: 2.5e-7); on the small N(0, 1) problems below up to
4e-6 (AVX builds) and 9e-6 (plain C, no FMA). float32's unit roundoff is 6e-8: ~20-150 ulps of the scale.
The tests bound it by TOL = 3e-5; a wrong transform coefficient or a lost tile gives errors of order 1e-1..1.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime_c"
CC = os.environ.get("CC", "gcc")
TOL = 3e-5
GUARD = 64  # sentinel floats around each buffer
SENTINEL = np.float32(-7.25e7)


def _build(tmp_path_factory, march):
    if shutil.which(CC) is None:
        pytest.skip(f"no C compiler ({CC}) on PATH")
    pytest.importorskip("cffi")
    from benchmarks.winograd import build_winograd
    from mxcc_testing import runtime_objects_for
    # mxcc's runtime objects (the ones generated code links); one directory for the session: the module's name
    # hashes sources, flags and objects, so each build's module is made once
    return build_winograd(tmp_path_factory.getbasetemp() / "winograd_build", march,
                          objects=runtime_objects_for(march))


@pytest.fixture(scope="module")
def wg(tmp_path_factory):
    return _build(tmp_path_factory, "native")


@pytest.fixture(scope="module", params=["native", "x86-64-v3", "x86-64"])
def wg_isa(request, tmp_path_factory):
    return _build(tmp_path_factory, request.param)


@pytest.fixture(scope="module")
def wg_small_blocks(tmp_path_factory):
    """The native build with the smallest blocks (one panel of tiles, NR output channels): every problem
    past 14 tiles crosses block boundaries inside tile rows and images."""
    if shutil.which(CC) is None:
        pytest.skip(f"no C compiler ({CC}) on PATH")
    from benchmarks.winograd import build_winograd
    return build_winograd(tmp_path_factory.getbasetemp() / "winograd_build", "native",
                          ("V_BYTES=1", "M_BYTES=1", "MIN_TB_PANELS=1"))


def _guarded(n, fill, align=True):
    """(whole, inner): inner = n floats inside sentinels; 64-byte aligned (the arena's alignment)."""
    raw = np.full(n + 2 * GUARD + 16, SENTINEL, np.float32)
    start = GUARD + (-(raw[GUARD:].ctypes.data // 4) % 16 if align else 0)
    inner = raw[start:start + n]
    inner[...] = fill
    return raw, inner


def _untouched(raw, inner):
    start = (inner.ctypes.data - raw.ctypes.data) // 4
    return (raw[:start] == SENTINEL).all() and (raw[start + inner.size:] == SENTINEL).all()


def reference(x, w, pad):
    """(y, scale) in float64: the direct convolution, and sum |w| |x| per output maximized over the output's
    4x4 tile (the transforms mix the tile's pixels: an output whose window lies in the padding gets the
    rounding noise of its neighbours)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # (N, C, OH, OW, 3, 3)
    w = w.astype(np.float64)
    mag = np.einsum("nchwij,ocij->nohw", np.abs(win), np.abs(w), optimize=True)
    n, o, oh, ow = mag.shape
    th, tw = -(-oh // 4), -(-ow // 4)
    tiles = np.pad(mag, ((0, 0), (0, 0), (0, 4 * th - oh), (0, 4 * tw - ow))).reshape(n, o, th, 4, tw, 4).max(axis=(3, 5))
    scale = np.repeat(np.repeat(tiles, 4, axis=2), 4, axis=3)[:, :, :oh, :ow]
    return np.einsum("nchwij,ocij->nohw", win, w, optimize=True), scale


def run(ffi, lib, x, w, pad, ep=None, threads=1, parallel=None):
    """y of mxcc_winograd_f43_f32 with guarded buffers; asserts nothing was written outside them."""
    batch, c, h, wd = x.shape
    o = w.shape[0]
    f = lambda a: ffi.from_buffer("float[]", a)  # noqa: E731
    g = ffi.new("mxcc_conv_geom *", {"channels": c, "in": (1, h, wd), "out": (1, h + 2 * pad - 2, wd + 2 * pad - 2),
                                     "k": (1, 3, 3), "stride": (1, 1, 1), "pad": (0, pad, pad), "dilate": (1, 1, 1)})
    u_raw, u = _guarded(lib.mxcc_winograd_f43_weight_floats(o, c), np.nan)
    lib.mxcc_winograd_f43_weight_f32(o, c, f(np.ascontiguousarray(w)), f(u))
    assert not np.isnan(u).any() and _untouched(u_raw, u), "weight transform: a float unwritten or one past the end"
    s_raw, s = _guarded(lib.mxcc_winograd_f43_scratch_floats(g, batch, o, threads), np.nan)
    y_raw, y = _guarded(batch * o * (h + 2 * pad - 2) * (wd + 2 * pad - 2), np.nan)
    before = lib.omp_get_max_threads()
    lib.omp_set_num_threads(threads)
    try:
        lib.mxcc_winograd_f43_f32(g, batch, o, f(x), f(u), ep if ep is not None else ffi.NULL, f(y), f(s),
                                  int(threads > 1) if parallel is None else parallel)
    finally:
        lib.omp_set_num_threads(before)
    assert _untouched(s_raw, s), "scratch: a write outside mxcc_winograd_f43_scratch_floats"
    assert _untouched(y_raw, y), "y: a write outside the output"
    y = y.reshape(batch, o, h + 2 * pad - 2, wd + 2 * pad - 2)
    assert not np.isnan(y).any(), "an output element was not written"
    return y


def realistic(rng, batch, c, o, h, w):
    """He-initialized weights and relu'd unit-normal inputs: the data a ResNet layer sees."""
    x = np.maximum(rng.standard_normal((batch, c, h, w)), 0).astype(np.float32)
    wt = (rng.standard_normal((o, c, 3, 3)) * np.sqrt(2 / (9 * c))).astype(np.float32)
    return x, wt


def _random_problems(seed, n):
    """C, O in 1..70 (not multiples of MR or NR), H, W in 1..20 (not multiples of 4), pad 0..2, batch 1..2."""
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < n:
        c, o, h, w = (int(v) for v in rng.integers(1, 71, 2).tolist() + rng.integers(1, 21, 2).tolist())
        pad, batch = int(rng.integers(0, 3)), int(rng.integers(1, 3))
        if h + 2 * pad - 2 >= 1 and w + 2 * pad - 2 >= 1:
            out.append((batch, c, o, h, w, pad))
    return out


# the edges by hand: 1x1 outputs, outputs narrower than a tile, pads wider than the kernel reach (pad 2 on
# a 1-pixel image: the whole window in the padding), a tile row longer than a 16-tile vector group
EDGES = [(1, 1, 1, 3, 3, 0), (2, 3, 5, 1, 1, 1), (1, 2, 3, 1, 1, 2), (1, 4, 33, 5, 6, 0), (2, 5, 17, 2, 70, 1),
         (1, 15, 29, 9, 67, 1), (2, 1, 1, 1, 20, 2)]


@pytest.mark.parametrize("problem", EDGES + _random_problems(0, 14), ids=lambda p: "b{}_c{}_o{}_{}x{}_p{}".format(*p))
def test_random_shapes_against_numpy(wg_isa, problem):
    ffi, lib = wg_isa
    batch, c, o, h, w, pad = problem
    rng = np.random.default_rng(hash(problem) % 2**32)
    x = rng.standard_normal((batch, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    y = run(ffi, lib, x, wt, pad)
    ref, scale = reference(x, wt, pad)
    assert np.max(np.abs(y - ref) / scale) <= TOL


@pytest.mark.parametrize("problem", EDGES[3:] + _random_problems(1, 6) + [(2, 7, 40, 28, 28, 1), (3, 5, 9, 9, 30, 0)],
                         ids=lambda p: "b{}_c{}_o{}_{}x{}_p{}".format(*p))
def test_small_blocks_against_numpy(wg_small_blocks, problem):
    ffi, lib = wg_small_blocks
    batch, c, o, h, w, pad = problem
    rng = np.random.default_rng(hash(problem) % 2**32)
    x = rng.standard_normal((batch, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    ref, scale = reference(x, wt, pad)
    y = run(ffi, lib, x, wt, pad, threads=2)
    assert np.max(np.abs(y - ref) / scale) <= TOL
    np.testing.assert_array_equal(y, run(ffi, lib, x, wt, pad, threads=1))


# ResNet-18's 3x3 stride-1 layers (C = O, H = W, pad 1) at small batches, and C past the micro-kernel's KC
# (512 on AVX-512, 384 AVX2, 256 plain C): the k split of the 36 GEMMs
RESNET = [(1, 64, 64, 56, 56, 1), (2, 128, 128, 28, 28, 1), (2, 256, 256, 14, 14, 1), (2, 512, 512, 7, 7, 1),
          (1, 600, 40, 6, 9, 1)]


@pytest.mark.parametrize("problem", RESNET, ids=lambda p: "b{}_c{}_o{}_{}x{}_p{}".format(*p))
def test_resnet_shapes_realistic_error(wg, problem):
    """The error measured on realistic data: err / scale, and err / max|y| for the record."""
    ffi, lib = wg
    batch, c, o, h, w, pad = problem
    x, wt = realistic(np.random.default_rng(c), batch, c, o, h, w)
    y = run(ffi, lib, x, wt, pad, threads=2)
    ref, scale = reference(x, wt, pad)
    err = np.abs(y - ref)
    print(f"max err/scale {np.max(err / scale):.2e}, max err/max|y| {np.max(err) / np.max(np.abs(ref)):.2e}")
    assert np.max(err / scale) <= TOL


@pytest.mark.parametrize("problem", [(1, 70, 70, 7, 7, 1), (2, 64, 96, 28, 28, 1), (3, 17, 45, 13, 11, 2),
                                     (1, 512, 64, 7, 7, 1), (1, 64, 64, 56, 56, 1), (8, 16, 24, 14, 14, 1)],
                         ids=lambda p: "b{}_c{}_o{}_{}x{}_p{}".format(*p))
def test_thread_count_gives_identical_bits(wg, problem):
    """1, 2, 5 and 16 threads, and parallel = 0: the same bits (threads split tiles and output channels, never
    a sum). 7x7 at batch 1 has 4 tiles: the 2-thread run splits the output channels; 56x56 on 16 threads
    takes smaller tile blocks than the cache-sized ones (choose_units); 8 images of 14x14 (128 tiles) are one
    thread's 70 + 58 and several threads' even 64 + 64 (block_grain)."""
    ffi, lib = wg
    batch, c, o, h, w, pad = problem
    x, wt = realistic(np.random.default_rng(7), batch, c, o, h, w)
    one = run(ffi, lib, x, wt, pad, threads=1)
    np.testing.assert_array_equal(one, run(ffi, lib, x, wt, pad, threads=2))
    np.testing.assert_array_equal(one, run(ffi, lib, x, wt, pad, threads=2, parallel=0))
    for t in (5, 16):
        np.testing.assert_array_equal(one, run(ffi, lib, x, wt, pad, threads=t), err_msg=f"{t} threads")


@pytest.mark.parametrize("problem", [(1, 64, 256, 13, 13, 1), (1, 48, 192, 13, 13, 1), (1, 256, 256, 14, 14, 1),
                                     (1, 128, 128, 28, 28, 1), (2, 256, 256, 14, 14, 1)],
                         ids=lambda p: "b{}_c{}_o{}_{}x{}_p{}".format(*p))
def test_small_plane_many_threads_same_bits_within_the_scratch(wg_isa, problem):
    """SqueezeNet's 13x13 layers and ResNet's 14x14 (16 tiles) and 28x28 (49) on up to 32 threads, every ISA:
    choose_units takes tile blocks smaller than plan_of's, whose output-channel blocks are then cut back to the
    scratch sized for plan_of's (the AVX2 build's 64 -> 256 on 32 threads), and blocks that share the tiles
    evenly (block_grain: 16 tiles as 8 + 8 on AVX-512 from 4 threads, 49 as 24 + 25 on AVX2 at 16, two 14x14
    images as 2 x 4 tile rows on AVX-512 at 16); `run` checks nothing is written outside the scratch. Same bits
    as one thread, and numpy's result."""
    ffi, lib = wg_isa
    batch, c, o, h, w, pad = problem
    x, wt = realistic(np.random.default_rng(13), batch, c, o, h, w)
    one = run(ffi, lib, x, wt, pad, threads=1)
    ref, scale = reference(x, wt, pad)
    assert np.max(np.abs(one - ref) / scale) <= TOL
    for t in (2, 4, 8, 16, 32):
        np.testing.assert_array_equal(one, run(ffi, lib, x, wt, pad, threads=t), err_msg=f"{t} threads")


ACT = {"NONE": lambda v: v, "RELU": lambda v: np.maximum(v, 0), "SIGMOID": lambda v: 1 / (1 + np.exp(-v)),
       "TANH": np.tanh, "SOFTRELU": lambda v: np.log1p(np.exp(v)), "SOFTSIGN": lambda v: v / (1 + np.abs(v)),
       "LEAKY": lambda v: np.where(v > 0, v, 0.1 * v), "CLIP": lambda v: np.clip(v, -0.5, 0.5)}


@pytest.mark.parametrize("act, parts", [("NONE", ("scale",)), ("NONE", ("shift",)), ("NONE", ("bias",)),
                                        ("NONE", ("residual",)), ("RELU", ()), ("RELU", ("scale", "shift", "residual")),
                                        ("SIGMOID", ("bias",)), ("TANH", ("scale", "bias")), ("SOFTRELU", ("shift",)),
                                        ("SOFTSIGN", ("residual",)), ("LEAKY", ("bias", "residual")),
                                        ("CLIP", ("scale", "shift", "bias", "residual"))])
def test_epilogue(wg_isa, act, parts):
    """Each part of the epilogue, per output channel (per_row deliberately 0: ignored), the residual with
    its own leading dimension (ld_residual > OH * OW), batch 2 so that its per-image offset counts. Every
    build: the vector output transforms apply scale/shift/bias/residual/relu in registers (other
    activations, and the plain-C build, in a pass over the rows)."""
    ffi, lib = wg_isa
    batch, c, o, h, w, pad = 2, 19, 37, 10, 13, 1
    rng = np.random.default_rng(11)
    x = rng.standard_normal((batch, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((o, c, 3, 3)) * 0.2).astype(np.float32)
    vec = {n: rng.standard_normal(o).astype(np.float32) for n in ("scale", "shift", "bias")}
    ld = h * w + 5
    res = rng.standard_normal((batch, o, ld)).astype(np.float32)
    ref, scale = reference(x, wt, pad)
    if "scale" in parts:
        ref, scale = ref * vec["scale"][:, None, None], scale * np.abs(vec["scale"])[:, None, None]
    for n in ("shift", "bias"):
        if n in parts:
            ref = ref + vec[n][:, None, None]
    if "residual" in parts:
        ref = ref + res[:, :, :h * w].reshape(ref.shape)
    ref = ACT[act](ref)
    keep = [vec, res]  # noqa: F841 - the epilogue points into these
    ep = ffi.new("mxcc_epilogue *", dict(per_row=0, act=getattr(lib, f"MXCC_ACT_{act}"), alpha=0.1, lo=-0.5, hi=0.5,
                                         **{n: ffi.from_buffer("float[]", vec[n]) for n in parts if n != "residual"}))
    if "residual" in parts:
        ep.residual, ep.ld_residual = ffi.from_buffer("float[]", res), ld
    y = run(ffi, lib, x, wt, pad, ep=ep, threads=2)
    # every activation is at most 1-Lipschitz, so the convolution's bound carries over, plus the epilogue's
    # own float32 roundings (a few ulps of the result)
    assert np.max(np.abs(y - ref) - TOL * scale - 1e-6 * np.abs(ref)) <= 0


# the plain-C build (x86-64): ASan instruments every access of its transforms and of the driver, blocking
# and epilogue code all builds share; the vector paths' intrinsics it would not see (their writes are checked
# by the sentinel guards of every test above, on every build)
@pytest.mark.parametrize("march", ["x86-64"])
def test_winograd_under_address_and_undefined_sanitizers(tmp_path, march):
    """tests/runtime/winograd_sanity.c (random geometries against a direct convolution in double, each buffer
    its own exact-size heap block) built with -fsanitize=address,undefined, 2 threads."""
    from mxcc_testing import build_sanitized_driver
    exe = build_sanitized_driver(tmp_path, march, Path(__file__).with_name("winograd_sanity.c"), RUNTIME)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1",
               OMP_NUM_THREADS="2")
    r = subprocess.run([str(exe), "30"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "runtime error" not in r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("act", ["NONE", "RELU"])
def test_epilogue_same_bits_as_applied_afterwards(wg_isa, act):
    """The epilogue (in registers on the vector builds, in a pass over the rows on the plain-C one) gives
    the bits of the convolution without epilogue followed by the epilogue's float32 operations in
    mxcc_gemm.h's order: x * scale, + shift, + bias, + residual, activation."""
    ffi, lib = wg_isa
    batch, c, o, h, w, pad = 2, 9, 21, 11, 7, 1
    rng = np.random.default_rng(5)
    x = rng.standard_normal((batch, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    vec = {n: rng.standard_normal(o).astype(np.float32) for n in ("scale", "shift", "bias")}
    res = rng.standard_normal((batch, o, h * w)).astype(np.float32)
    ep = ffi.new("mxcc_epilogue *", dict(per_row=1, act=getattr(lib, f"MXCC_ACT_{act}"), ld_residual=h * w,
                                         residual=ffi.from_buffer("float[]", res),
                                         **{n: ffi.from_buffer("float[]", v) for n, v in vec.items()}))
    plain = run(ffi, lib, x, wt, pad)
    want = plain * vec["scale"][:, None, None]
    want = want + vec["shift"][:, None, None]
    want = want + vec["bias"][:, None, None]
    want = want + res.reshape(plain.shape)
    if act == "RELU":
        want = np.where(want > 0, want, np.float32(0))
    np.testing.assert_array_equal(run(ffi, lib, x, wt, pad, ep=ep), want)


@pytest.mark.parametrize("o,c", [(1, 1), (40, 3), (64, 17)])
def test_winograd_scaled_weight_is_the_transformed_scaled_weight(wg_isa, o, c):
    """mxcc_winograd_f43_scale_weight_f32 (an inference BatchNorm's scale folded in at bind time) gives the
    transform of W * scale[o] up to rounding (the transform is linear in each (o, c) kernel; its sums cancel,
    so the bound is relative to the largest element); the padding columns stay zero."""
    ffi, lib = wg_isa
    rng = np.random.default_rng(o * 100 + c)
    w = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    scale = rng.uniform(0.25, 4.0, o).astype(np.float32)
    f = lambda a: ffi.from_buffer("float[]", a)  # noqa: E731
    n = lib.mxcc_winograd_f43_weight_floats(o, c)
    got, want = np.empty(n, np.float32), np.empty(n, np.float32)
    lib.mxcc_winograd_f43_weight_f32(o, c, f(w), f(got))
    lib.mxcc_winograd_f43_scale_weight_f32(o, c, f(got), f(scale))
    lib.mxcc_winograd_f43_weight_f32(o, c, f(np.ascontiguousarray(w * scale[:, None, None, None])), f(want))
    assert np.array_equal(got == 0, want == 0)
    np.testing.assert_allclose(got, want, rtol=2.5e-7, atol=2.5e-7 * np.abs(want).max())
