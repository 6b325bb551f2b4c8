"""runtime_c/conv/conv_packed_f32.c: the convolution as one GEMM with pixels as rows and prepacked weights,
against a float64 numpy convolution (im2col in numpy, then a matrix product and the epilogue), on an edge
matrix (1-D/2-D/3-D, kernels 1..7, stride 1..3, pad 0..3, dilation, 1-pixel images, pixel counts and
channel counts that do not fill the register tile, batch 1 and 3), every epilogue part, 1 vs 2 threads
(identical bits), the native / x86-64-v3 / x86-64 builds (each ISA's micro-kernel and panel geometry), the
scratch size (a NaN guard after it must survive) and an ASan/UBSan build of a C driver
(tests/runtime/conv_packed_sanity.c) against a naive im2col + the reference GEMM.

Tolerance as in tests/runtime/test_gemm.py: GEMM_RTOL * sqrt(K) * (|cols^T| . |W^T|) per output, plus the
same bound scaled through the epilogue (|scale|, then the residual's own magnitude rounding).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mxcc_testing import (EPILOGUE_CASES, build_isa_libs, check_same_bits_on_threads, check_within, conv_kernel_cdef,
                          conv_reference, epilogue_reference, load_isa_lib, run_guarded, run_sanitizer_driver,
                          conv_geom as _geom, float_buf as _f)

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime_c"
GEMM_RTOL = 1e-6
# the packed convolution needs the GEMM's packing, micro-kernels and epilogue (not the im2col or depthwise files)
SOURCES = [RUNTIME / "conv" / "conv_packed_f32.c", *sorted((RUNTIME / "gemm").glob("*.c")), RUNTIME / "pool" / "pool.c"]
# "native-kc": the K-sliced loop (CONV_PACKED_KC, off by default) with slices of 100 (uneven: K = 576 runs
# as 6 x 96), so that path stays correct if someone turns it on
MARCHES = ["native", "x86-64-v3", "x86-64", "native-kc"]
EXTRA = {"native-kc": ["-DCONV_PACKED_KC=100"]}


def _cdef() -> str:
    return conv_kernel_cdef(RUNTIME, "mxcc_conv_packed", 2, extra="""\
void mxcc_gemm_pack_b_f32(int trans_b, int K, int N, const float *B, int ldb, float *Bp);
long mxcc_gemm_packed_b_floats(int K, int N);
""")


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """{march: shared library path} for every runnable target (mxcc's runtime; native-kc compiled here);
    loaded with cffi in ABI mode (no extension module)."""
    return build_isa_libs(tmp_path_factory.mktemp("conv_packed_build"), "convpacked", SOURCES, MARCHES, RUNTIME,
                          flags=EXTRA, base=lambda m: m.split("-kc")[0])


@pytest.fixture(scope="module", params=MARCHES)
def isa(request, builds):
    return load_isa_lib(builds, request.param, _cdef())


class Conv:
    """One random problem: inputs, packed weight, epilogue, and the float64 reference with its bound."""

    def __init__(self, ffi, lib, batch, c, size, k, s, p, d, O, ep=(), act="NONE", seed=0):
        rng = np.random.default_rng(seed)
        self.ffi, self.lib = ffi, lib
        self.g, out = _geom(ffi, c, size, k, s, p, d)
        self.batch, self.O, self.P, self.K = batch, O, int(np.prod(out)), c * int(np.prod(k))
        self.x = rng.standard_normal((batch, c, *size)).astype(np.float32)
        self.w = rng.standard_normal((O, self.K)).astype(np.float32)
        self.wp = np.full(lib.mxcc_gemm_packed_b_floats(self.K, O), np.nan, np.float32)
        lib.mxcc_gemm_pack_b_f32(1, self.K, O, _f(ffi, self.w), self.K, _f(ffi, self.wp))
        acc, bound = conv_reference(self.x, self.w, k, s, p, d, out, GEMM_RTOL)
        self.keep = []
        self.ep, self.want, self.bound = epilogue_reference(ffi, lib, rng, acc, bound, ep, act, self.keep)

    def run(self, parallel=1, threads=None):
        ffi, lib = self.ffi, self.lib
        return run_guarded(lib, threads, lambda: lib.mxcc_conv_packed_scratch_floats(self.g, self.batch, self.O, 0),
                           (self.batch, self.O, self.P),
                           lambda y, scratch: lib.mxcc_conv_packed_f32(self.g, self.batch, self.O, _f(ffi, self.x),
                                                                       _f(ffi, self.wp), self.ep, _f(ffi, y),
                                                                       _f(ffi, scratch), parallel),
                           "mxcc_conv_packed_scratch_floats")

    def check(self, y):
        check_within(y, self.want, self.bound)


# (batch, channels, size, kernel, stride, pad, dilate, O)
GEOMETRIES = [
    (1, 3, (9, 11), (3, 3), (1, 1), (1, 1), (1, 1), 20),
    (3, 4, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1), 64),       # P = 49: panels span images
    (1, 3, (17, 15), (7, 7), (2, 2), (3, 3), (1, 1), 50),     # the ResNet stem's shape in small
    (2, 5, (12, 12), (5, 5), (1, 1), (0, 0), (1, 1), 33),     # LeNet conv2 in small
    (1, 6, (8, 9), (1, 1), (2, 2), (0, 0), (1, 1), 40),       # 1x1 stride 2 downsample
    (1, 2, (10, 10), (3, 3), (3, 3), (1, 1), (1, 1), 1),      # stride > 1, one output channel
    (1, 2, (9, 8), (3, 3), (1, 2), (2, 2), (2, 2), 17),       # dilation 2
    (2, 2, (4, 5), (3, 3), (1, 2), (3, 3), (1, 1), 5),        # pad 3 > kernel reach: rows of padding
    (3, 2, (1, 1), (1, 1), (1, 1), (0, 0), (1, 1), 7),        # 1-pixel images
    (1, 3, (1, 1), (3, 3), (1, 1), (1, 1), (1, 1), 9),        # 1-pixel image, 3x3 pad 1
    (2, 3, (23,), (5,), (2,), (2,), (1,), 16),                # 1-D
    (1, 2, (4, 5, 6), (3, 3, 3), (1, 2, 1), (1, 1, 0), (1, 1, 2), 12),   # 3-D
    (1, 64, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1), 96),      # K = 576: several NR panels
    (1, 2, (40,), (17,), (2,), (8,), (1,), 5),                # kernel wider than gather's cached ranges
    (1, 2, (15, 16), (12, 12), (1, 1), (2, 2), (1, 1), 3),    # 144 taps: past the per-piece tap table
    (1, 704, (5, 5), (3, 3), (1, 1), (1, 1), (1, 1), 40),     # K = 6336: K in slices (CONV_PACKED_SLICE_FLOATS)
]


def _id(g):
    return f"n{g[0]}c{g[1]}_{'x'.join(map(str, g[2]))}_k{'x'.join(map(str, g[3]))}s{g[4][0]}p{g[5][0]}d{g[6][-1]}_o{g[7]}"


@pytest.mark.parametrize("geo", GEOMETRIES, ids=_id)
def test_packed_conv_matches_numpy(isa, geo):
    ffi, lib = isa
    prob = Conv(ffi, lib, *geo)
    prob.check(prob.run(parallel=0))


@pytest.mark.parametrize("ep,act", EPILOGUE_CASES, ids=lambda v: "+".join(v) if isinstance(v, tuple) else v)
def test_packed_conv_epilogue(isa, ep, act):
    ffi, lib = isa
    # batch 2 with P = 25 (not a multiple of MR): the residual's rows span images inside a tile
    prob = Conv(ffi, lib, 2, 3, (5, 5), (3, 3), (1, 1), (1, 1), (1, 1), 37, ep=ep, act=act, seed=5)
    prob.check(prob.run(parallel=1, threads=2))


@pytest.mark.parametrize("geo", [
    (1, 8, (14, 14), (3, 3), (1, 1), (1, 1), (1, 1), 64),    # many pixel panels: split by pixels
    (1, 16, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1), 128),    # 4 panels: split by weight panels
    (3, 4, (9, 9), (3, 3), (2, 2), (1, 1), (1, 1), 50),
    (1, 16, (14, 14), (3, 3), (2, 2), (1, 1), (1, 1), 256),   # few pixel panels and 8-16 weight panels: a grid
    (1, 704, (5, 5), (3, 3), (1, 1), (1, 1), (1, 1), 40),     # K sliced: the same slices on any thread count
    (1, 64, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1), 512),    # 16 threads: weight panels, the block gathered once
    (1, 4, (7, 7), (5, 5), (1, 1), (2, 2), (1, 1), 512),     # the same with fewer channels than threads to gather
], ids=_id)
def test_packed_conv_threads_give_identical_bits(isa, geo):
    ffi, lib = isa
    check_same_bits_on_threads(Conv(ffi, lib, *geo, ep=("scale", "shift", "residual"), act="RELU", seed=2))


# native: the AVX-512 gather/store (ASan does not see inside masked loads/stores, but sees the tile, scratch
# and residual indexing around them); x86-64: the plain C loops, every access checked
@pytest.mark.parametrize("march", ["native", "x86-64"])
def test_packed_conv_under_address_and_undefined_sanitizers(tmp_path, march):
    run_sanitizer_driver(tmp_path, march, Path(__file__).with_name("conv_packed_sanity.c"), RUNTIME, 40)
