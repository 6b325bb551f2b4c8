"""runtime_c/conv/conv1x1_f32.c: the pointwise convolution y[n] (O, P) = W (O, C) . x[n] (C, P) + epilogue,
written straight into NCHW (and its strided form, mxcc_conv1x1_strided_f32: the bits of the dense call on the
subsampled image), against a float64 numpy product: pixel counts, channel counts and output
channels that do not fill the register tile (AVX-512 12 x 32, AVX2 6 x 16, plain C 4 x 16), 1-pixel images,
batch 1 and 3, every epilogue part incl. a residual, 1 vs 2 threads (identical bits, both thread splits),
the native / x86-64-v3 / x86-64 builds, the scratch and packed-weight sizes (NaN guards after them must
survive), an ASan/UBSan build of a C driver (tests/runtime/conv1x1_sanity.c) against a naive loop, and the
grid split's part boundaries against the model's (tests/runtime/conv1x1_grid.c).

Tolerance as in tests/runtime/test_gemm.py: GEMM_RTOL * sqrt(C) * (|W| . |x|) per output, scaled through the
epilogue, plus a few ulp of the epilogue's own roundings.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mxcc.ops._pack import conv1x1_weight
from mxcc_testing import (CC, EPILOGUE_CASES, build_isa_libs, check_same_bits_on_threads, check_within,
                          conv_kernel_cdef, epilogue_reference, load_isa_lib, needs_gcc, run_guarded,
                          run_sanitizer_driver, float_buf as _f)

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime_c"
GEMM_RTOL = 1e-6
SOURCES = [RUNTIME / "conv" / "conv1x1_f32.c", RUNTIME / "gemm" / "epilogue_f32.c", RUNTIME / "pool" / "pool.c"]
MARCHES = ["native", "x86-64-v3", "x86-64"]


def _cdef() -> str:
    return conv_kernel_cdef(RUNTIME, "mxcc_conv1x1", 7, geom=False)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """{march: shared library} for every target this CPU runs; cffi ABI mode."""
    return build_isa_libs(tmp_path_factory.mktemp("conv1x1_build"), "conv1x1", SOURCES, MARCHES, RUNTIME)


@pytest.fixture(scope="module", params=MARCHES)
def isa(request, builds):
    return load_isa_lib(builds, request.param, _cdef())


class Pointwise:
    """One random problem: inputs, packed weight, epilogue, and the float64 reference with its bound."""

    def __init__(self, ffi, lib, batch, C, P, O, ep=(), act="NONE", seed=0):
        rng = np.random.default_rng(seed)
        self.ffi, self.lib, self.batch, self.C, self.P, self.O = ffi, lib, batch, C, P, O
        self.x = rng.standard_normal((batch, C, P)).astype(np.float32)
        self.w = rng.standard_normal((O, C)).astype(np.float32)
        n = lib.mxcc_conv1x1_packed_w_floats(C, O)
        assert n <= conv1x1_weight(O, C)[1]   # MXCC_CONV1X1_PACKED_W_FLOATS_MAX: the compiler's buffer size
        self.wp = np.full(n + 64, np.nan, np.float32)
        lib.mxcc_conv1x1_pack_w_f32(O, C, _f(ffi, self.w), _f(ffi, self.wp))
        assert np.isnan(self.wp[n:]).all() and not np.isnan(self.wp[:n]).any()
        val = np.einsum("oc,ncp->nop", self.w.astype(np.float64), self.x)
        bound = GEMM_RTOL * np.sqrt(C) * np.einsum("oc,ncp->nop", np.abs(self.w), np.abs(self.x)) + 1e-30
        self.keep = []
        self.ep, self.want, self.bound = epilogue_reference(ffi, lib, rng, val, bound, ep, act, self.keep)

    def run(self, parallel=1, threads=None):
        ffi, lib = self.ffi, self.lib
        return run_guarded(lib, threads, lambda: lib.mxcc_conv1x1_scratch_floats(self.C, 0),
                           (self.batch, self.O, self.P),
                           lambda y, scratch: lib.mxcc_conv1x1_f32(self.batch, self.C, self.P, self.O,
                                                                   _f(ffi, self.x), _f(ffi, self.wp), self.ep,
                                                                   _f(ffi, y), _f(ffi, scratch), parallel),
                           "mxcc_conv1x1_scratch_floats")

    def check(self, y):
        check_within(y, self.want, self.bound)


# (batch, C, P, O): tails of every tile dimension; P = 1, a half-width last panel, 7x7, 14x14; column tiles
# of 1..4 pixels with C not a multiple of their split (COL_SPLIT)
SHAPES = [(1, 1, 1, 1), (3, 5, 1, 13), (1, 19, 33, 29), (3, 7, 49, 12), (1, 32, 196, 64), (2, 3, 47, 5),
          (1, 64, 100, 25), (1, 130, 17, 7), (3, 2, 65, 40),
          (1, 7, 34, 13), (2, 9, 35, 14),   # column tiles of 2 and 3 pixels, odd C: the split sums' last channel
          (2, 300, 300, 20),   # 6 panels per block (PW_BLOCK_FLOATS), 10 per image: 2 blocks per image
          # ride columns (AVX-512): an 8-lane tile + 1 (P = 9), 16 + 8 + 1 (25), 16 + 4 (20); an image's last
          # 4 pixels with a 4-row weight panel (O = 3: no ride instance, row and column tiles on its rows)
          (1, 5, 9, 20), (1, 6, 25, 16), (1, 5, 20, 24), (2, 9, 36, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "n{}c{}p{}o{}".format(*s))
def test_conv1x1_matches_numpy(isa, shape):
    prob = Pointwise(*isa, *shape)
    prob.check(prob.run(parallel=0))


@pytest.mark.parametrize("P", [37, 36, 52])
@pytest.mark.parametrize("ep,act", EPILOGUE_CASES, ids=lambda v: "+".join(v) if isinstance(v, tuple) else v)
def test_conv1x1_epilogue(isa, ep, act, P):
    # batch 2, O = 14 (a partial weight panel on every ISA); P = 37: a full and a partial panel per image (a
    # column tile of 5 on AVX-512); 36: one panel of 32 + 4 ride columns (AVX-512); 52: a full panel and a
    # 16-pixel row tile with 4 ride columns
    prob = Pointwise(*isa, 2, 9, P, 14, ep=ep, act=act, seed=5)
    prob.check(prob.run(parallel=1, threads=2))


@pytest.mark.parametrize("ep", [("scale", "shift"), ("bias",), ()], ids=lambda v: "+".join(v) or "none")
@pytest.mark.parametrize("act", ["NONE", "RELU", "CLIP"])
def test_conv1x1_straight_line_epilogues(isa, ep, act):
    # full tiles (P = 64: two panels of 32; O = 24 and 144: whole weight panels on every ISA): the epilogues
    # stored by straight-line code, each activation; P = 196 with 12 weight panels copies its pixel panels
    # (rows not 64-byte aligned, PW_COPY_MIN_NB)
    for P, O in ((64, 24), (196, 144)):
        prob = Pointwise(*isa, 1, 20, P, O, ep=ep, act=act, seed=7)
        prob.check(prob.run(parallel=0))


@pytest.mark.parametrize("shape", [(1, 48, 400, 40),    # 13 pixel panels: split by pixels
                                   (1, 64, 49, 128),    # 2 panels, 11+ weight panels: split by weights
                                   (3, 16, 70, 50),
                                   (1, 64, 400, 64),    # 13 x 6 panels: a grid on 5 threads (AVX-512)
                                   (1, 256, 196, 64)],  # 6 x 6 panels: 2 x 2 blocks on 5 threads, 2 x 6 on 16
                         ids=lambda s: "n{}c{}p{}o{}".format(*s))
def test_conv1x1_threads_give_identical_bits(isa, shape):
    check_same_bits_on_threads(Pointwise(*isa, *shape, ep=("scale", "shift", "residual"), act="RELU", seed=2))


@pytest.mark.parametrize("shape", [(1, 32, 196, 64, 208),   # 14x14: 5 full panels and one of 36 (ride, AVX-512)
                                   (2, 24, 49, 40, 64),      # 7x7: a full panel and a short one of 17
                                   (1, 16, 36, 20, 48),      # one panel with 4 ride columns
                                   (1, 40, 196, 300, 224)],  # weight-split on 2 threads
                         ids=lambda s: "n{}c{}p{}o{}ld{}".format(*s))
@pytest.mark.parametrize("threads", [1, 2])
def test_conv1x1_planes_apart(isa, shape, threads):
    """mxcc_conv1x1_planes_f32: x's planes ldx apart, NaN between them (never read into an output): the bits of
    the dense call."""
    batch, C, P, O, ldx = shape
    prob = Pointwise(*isa, batch, C, P, O, ep=("scale", "shift", "residual"), act="RELU", seed=3)
    ffi, lib = prob.ffi, prob.lib
    dense = prob.run(parallel=1, threads=threads)
    prob.check(dense)
    raw = np.full(batch * C * ldx + 16, np.nan, np.float32)   # on a cache line, as the arena's buffers are
    off = (-raw.ctypes.data % 64) // 4
    xs = raw[off:off + batch * C * ldx].reshape(batch, C, ldx)
    xs[:, :, :P] = prob.x
    apart = run_guarded(lib, threads, lambda: lib.mxcc_conv1x1_scratch_floats(C, 0), (batch, O, P),
                        lambda y, scratch: lib.mxcc_conv1x1_planes_f32(batch, C, P, ldx, O, _f(ffi, xs),
                                                                       _f(ffi, prob.wp), prob.ep, _f(ffi, y),
                                                                       _f(ffi, scratch), 1),
                        "mxcc_conv1x1_scratch_floats")
    np.testing.assert_array_equal(apart, dense)


@pytest.mark.parametrize("shape", [(1, 16, 56, 56, 2, 2, 40),   # ResNet's downsampling: 28x28 outputs, 25 panels
                                   (2, 9, 13, 27, 2, 2, 14),    # odd sizes: runs of 14 within the panels
                                   (1, 40, 14, 14, 2, 2, 300),  # 7x7 outputs: one panel of 32 + 17, weight split
                                   (1, 5, 23, 27, 3, 4, 13),    # strides 3 and 4 (the scalar gather)
                                   (3, 7, 9, 40, 1, 2, 20),     # a column stride only: runs of 20
                                   (1, 300, 30, 30, 2, 2, 20),  # several blocks of panels per image
                                   (1, 3, 2, 1, 2, 2, 5)],      # one pixel
                         ids=lambda s: "n{}c{}h{}w{}s{}x{}o{}".format(*s))
@pytest.mark.parametrize("threads", [1, 2])
def test_conv1x1_strided_is_the_subsampled_image(isa, shape, threads):
    """mxcc_conv1x1_strided_f32: output pixel (oh, ow) from input (oh * sh, ow * sw), the bits of the dense call on
    the subsampled image. The pixels the stride skips are NaN: none may reach an output."""
    batch, C, H, W, sh, sw, O = shape
    OH, OW = (H - 1) // sh + 1, (W - 1) // sw + 1
    prob = Pointwise(*isa, batch, C, OH * OW, O, ep=("scale", "shift", "residual"), act="RELU", seed=4)
    ffi, lib = prob.ffi, prob.lib
    dense = prob.run(parallel=1, threads=threads)
    prob.check(dense)
    x = np.full((batch, C, H, W), np.nan, np.float32)
    x[:, :, ::sh, ::sw] = prob.x.reshape(batch, C, OH, OW)
    strided = run_guarded(lib, threads, lambda: lib.mxcc_conv1x1_scratch_floats(C, 0), (batch, O, OH * OW),
                          lambda y, scratch: lib.mxcc_conv1x1_strided_f32(batch, C, H, W, sh, sw, O, _f(ffi, x),
                                                                          _f(ffi, prob.wp), prob.ep, _f(ffi, y),
                                                                          _f(ffi, scratch), 1),
                          "mxcc_conv1x1_scratch_floats")
    np.testing.assert_array_equal(strided, dense)


# native: the AVX-512 tile (ASan does not see inside masked stores, but sees the indexing around them);
# x86-64: the plain C tile, every access checked
@pytest.mark.parametrize("march", ["native", "x86-64"])
def test_conv1x1_under_address_and_undefined_sanitizers(tmp_path, march):
    run_sanitizer_driver(tmp_path, march, Path(__file__).with_name("conv1x1_sanity.c"), RUNTIME, 40)


@pytest.mark.parametrize("o,c", [(1, 1), (13, 5), (64, 32), (30, 7)])
def test_conv1x1_scaled_packed_weight_is_the_packed_scaled_weight(isa, o, c):
    """mxcc_conv1x1_scale_packed_w_f32 (an inference BatchNorm's scale folded at bind time) gives the bits of
    packing W * scale[o] (a product per element either way); the padding rows stay zero."""
    ffi, lib = isa
    rng = np.random.default_rng(o * 100 + c)
    w = rng.standard_normal((o, c)).astype(np.float32)
    scale = rng.uniform(0.25, 4.0, o).astype(np.float32)
    n = lib.mxcc_conv1x1_packed_w_floats(c, o)
    got, want = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    lib.mxcc_conv1x1_pack_w_f32(o, c, _f(ffi, w), _f(ffi, got))
    lib.mxcc_conv1x1_scale_packed_w_f32(o, c, _f(ffi, got), _f(ffi, scale))
    lib.mxcc_conv1x1_pack_w_f32(o, c, _f(ffi, np.ascontiguousarray(w * scale[:, None])), _f(ffi, want))
    assert np.array_equal(got, want)


@needs_gcc
def test_grid_split_matches_the_model(tmp_path):
    """conv1x1_f32.c's grid split (a part takes whole pixel units at once; the search stops at the largest cap
    the choice could take) against codegen/splits.py's, which fills tile by tile: the same cap and the same
    part boundaries on random geometries, several images (a short last panel each) included."""
    import random
    import subprocess
    from mxcc.codegen import splits
    exe = tmp_path / "conv1x1_grid"
    build = subprocess.run([CC, "-O2", f"-I{RUNTIME}", f"-I{RUNTIME / 'conv'}",
                            str(Path(__file__).with_name("conv1x1_grid.c")), str(RUNTIME / "gemm" / "epilogue_f32.c"),
                            str(RUNTIME / "pool" / "pool.c"), "-lpthread", "-lm", "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    rng = random.Random(5)
    cases = []
    for _ in range(1500):
        panels, images = rng.randint(1, 120), rng.randint(1, 3)
        units, nb, tail, parts = panels * images, rng.randint(1, 90), rng.randint(1, 30), rng.randint(2, 64)
        read_unit = rng.choice([splits._READ_UNIT, splits._READ_GATHER])   # a strided layer gathers its units
        lo, at = splits._pw_grid_split(units, nb, panels, tail, parts, read_unit)
        most = rng.choice([1 << 40, lo, lo - 1, lo + rng.randint(0, 50), max(1, lo - rng.randint(1, 50))])
        cases.append((units, nb, panels, tail, read_unit, parts, most, lo, at))
    text = "".join(f"{u} {nb} {p} {t} {r} {parts} {most}\n" for u, nb, p, t, r, parts, most, _, _ in cases)
    out = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == len(cases)
    for line, (units, nb, panels, tail, read_unit, parts, most, lo, at) in zip(out, cases):
        got = list(map(int, line.split()))
        want = [lo, *at] if lo <= most else [most + 1]
        assert got == want, (units, nb, panels, tail, read_unit, parts, most)
