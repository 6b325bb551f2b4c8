"""runtime_c/conv/conv_direct_f32.c: the direct convolution for few input channels, against a float64 numpy
convolution (im2col in numpy, then a matrix product and the epilogue), on an edge matrix (C_in 1..4, 16, 20, kernels
1..7, stride 1..3, pad 0..3, dilation, widths that are not multiples of the vector, 1-pixel outputs, 1-D,
batch 1 and 3, channel counts that do not fill the register tile), every epilogue part, 1 vs 2 threads
(identical bits), the native / x86-64-v3 / x86-64 builds (each ISA's vector width and register tile), the
scratch size (a NaN guard after it must survive) and an ASan/UBSan build of a C driver
(tests/runtime/conv_direct_sanity.c) against a naive convolution.

Tolerance: float32 sums of K = C*KH*KW products in tap order: 1e-6 * sqrt(K) * sum |w||x| per output (as
tests/runtime/test_conv_packed.py), the same bound scaled through the epilogue, plus a few ulp of the result.
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
RTOL = 1e-6
# the epilogue's scalar activations live in runtime_c/gemm/epilogue_f32.c
SOURCES = [RUNTIME / "conv" / "conv_direct_f32.c", RUNTIME / "gemm" / "epilogue_f32.c", RUNTIME / "pool" / "pool.c"]
MARCHES = ["native", "x86-64-v3", "x86-64"]


def _cdef() -> str:
    return conv_kernel_cdef(RUNTIME, "mxcc_conv_direct", 4)


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """{march: shared library} for every runnable target, loaded with cffi in ABI mode."""
    return build_isa_libs(tmp_path_factory.mktemp("conv_direct_build"), "convdirect", SOURCES, MARCHES, RUNTIME)


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
        self.out = out
        self.x = rng.standard_normal((batch, c, *size)).astype(np.float32)
        self.w = rng.standard_normal((O, self.K)).astype(np.float32)
        op = -(-O // 8) * 8
        self.wp = np.full(self.K * op + 16, np.nan, np.float32)   # a NaN guard after the packed weight
        lib.mxcc_conv_direct_pack_f32(self.K, O, _f(ffi, self.w), _f(ffi, self.wp))
        assert np.isnan(self.wp[self.K * op:]).all() and not np.isnan(self.wp[:self.K * op]).any()
        acc, bound = conv_reference(self.x, self.w, k, s, p, d, out, RTOL)
        self.keep = []
        self.ep, self.want, self.bound = epilogue_reference(ffi, lib, rng, acc, bound, ep, act, self.keep)

    def run(self, parallel=1, threads=None):
        ffi, lib = self.ffi, self.lib
        return run_guarded(lib, threads, lambda: lib.mxcc_conv_direct_scratch_floats(self.g, self.batch, self.O, 0),
                           (self.batch, self.O, self.P),
                           lambda y, scratch: lib.mxcc_conv_direct_f32(self.g, self.batch, self.O, _f(ffi, self.x),
                                                                       _f(ffi, self.wp), self.ep, _f(ffi, y),
                                                                       _f(ffi, scratch), parallel),
                           "mxcc_conv_direct_scratch_floats")

    def check(self, y):
        check_within(y, self.want, self.bound)


# (batch, channels, size, kernel, stride, pad, dilate, O)
GEOMETRIES = [
    (1, 3, (23, 37), (3, 3), (2, 2), (1, 1), (1, 1), 32),     # MobileNet's conv0 in small: OW = 19
    (1, 3, (29, 31), (7, 7), (2, 2), (3, 3), (1, 1), 20),     # the ResNet stem's shape in small
    (3, 1, (12, 28), (5, 5), (1, 1), (0, 0), (1, 1), 20),     # LeNet conv1 in small: OW = 24, 20 channels
    (1, 2, (9, 50), (1, 1), (1, 1), (0, 0), (1, 1), 9),       # 1x1: K = 2, a pixel vector past the row end
    (1, 4, (10, 17), (3, 3), (3, 3), (2, 2), (1, 1), 1),      # stride 3, one output channel
    (1, 3, (9, 33), (3, 5), (1, 2), (3, 1), (2, 1), 13),      # dilation 2 in rows, stride 2 in columns
    (2, 2, (4, 5), (3, 3), (1, 2), (3, 3), (1, 1), 5),        # pad 3 > kernel reach: rows of padding
    (3, 2, (1, 1), (1, 1), (1, 1), (0, 0), (1, 1), 7),        # 1-pixel images
    (1, 3, (1, 1), (3, 3), (1, 1), (1, 1), (1, 1), 9),        # 1-pixel image, 3x3 pad 1
    (1, 1, (7, 7), (7, 7), (1, 1), (0, 0), (1, 1), 16),       # the kernel covers the image: 1 output pixel
    (2, 3, (41,), (5,), (2,), (2,), (1,), 16),                # 1-D
    (1, 4, (70, 8), (3, 3), (1, 1), (1, 1), (1, 1), 24),      # tall: many row blocks
    (1, 2, (6, 130), (4, 6), (3, 2), (2, 3), (1, 2), 11),     # wide, even kernel, dilation 2 in columns
    (2, 20, (12, 12), (5, 5), (1, 1), (0, 0), (1, 1), 50),    # LeNet conv2 (DIRECT_MAX_C = 20 channels)
    (1, 16, (15, 14), (3, 3), (2, 2), (1, 1), (1, 1), 24),    # 16 channels, stride 2
]


def _id(g):
    return f"n{g[0]}c{g[1]}_{'x'.join(map(str, g[2]))}_k{'x'.join(map(str, g[3]))}s{g[4][-1]}p{g[5][-1]}d{g[6][-1]}_o{g[7]}"


@pytest.mark.parametrize("geo", GEOMETRIES, ids=_id)
def test_direct_conv_matches_numpy(isa, geo):
    ffi, lib = isa
    prob = Conv(ffi, lib, *geo)
    prob.check(prob.run(parallel=0))


@pytest.mark.parametrize("ep,act", EPILOGUE_CASES, ids=lambda v: "+".join(v) if isinstance(v, tuple) else v)
def test_direct_conv_epilogue(isa, ep, act):
    ffi, lib = isa
    # batch 2, OW = 9 (a partial vector), 13 channels (a partial channel block)
    prob = Conv(ffi, lib, 2, 3, (11, 19), (3, 3), (2, 2), (1, 1), (1, 1), 13, ep=ep, act=act, seed=5)
    prob.check(prob.run(parallel=1, threads=2))


@pytest.mark.parametrize("ep,act", [(("scale", "shift"), "RELU"), (("scale", "shift"), "NONE"), (("bias",), "RELU"),
                                    (("bias",), "NONE")], ids=lambda v: "+".join(v) if isinstance(v, tuple) else v)
def test_direct_conv_full_tile_epilogues(isa, ep, act):
    ffi, lib = isa
    # the straight-line epilogue of full tiles: OW = 32 (whole vectors on every build), 13 channels (full
    # channel blocks, then a partial one through the general epilogue)
    prob = Conv(ffi, lib, 1, 3, (9, 64), (3, 3), (2, 2), (1, 1), (1, 1), 13, ep=ep, act=act, seed=7)
    prob.check(prob.run(parallel=1, threads=2))


@pytest.mark.parametrize("geo", [
    (1, 3, (64, 64), (3, 3), (2, 2), (1, 1), (1, 1), 32),
    (3, 1, (28, 28), (5, 5), (1, 1), (0, 0), (1, 1), 20),
    (1, 3, (40, 40), (7, 7), (2, 2), (3, 3), (1, 1), 64),
], ids=_id)
def test_direct_conv_threads_give_identical_bits(isa, geo):
    ffi, lib = isa
    check_same_bits_on_threads(Conv(ffi, lib, *geo, ep=("scale", "shift", "residual"), act="RELU", seed=2))


# native: the AVX-512 loads/stores (ASan does not see inside masked ones, but sees the staging, the tap
# table and the residual indexing around them); x86-64: the plain C loops, every access checked
@pytest.mark.parametrize("march", ["native", "x86-64"])
def test_direct_conv_under_address_and_undefined_sanitizers(tmp_path, march):
    run_sanitizer_driver(tmp_path, march, Path(__file__).with_name("conv_direct_sanity.c"), RUNTIME, 60)


@pytest.mark.parametrize("k,o", [(1, 1), (27, 32), (75, 13)])
def test_direct_scaled_packed_weight_is_the_packed_scaled_weight(isa, k, o):
    """mxcc_conv_direct_scale_packed_f32 gives the bits of packing W * scale[o]; the padding stays zero."""
    ffi, lib = isa
    rng = np.random.default_rng(k * 100 + o)
    w = rng.standard_normal((o, k)).astype(np.float32)
    scale = rng.uniform(0.25, 4.0, o).astype(np.float32)
    n = k * -(-o // 8) * 8
    got, want = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    lib.mxcc_conv_direct_pack_f32(k, o, _f(ffi, w), _f(ffi, got))
    lib.mxcc_conv_direct_scale_packed_f32(k, o, _f(ffi, got), _f(ffi, scale))
    lib.mxcc_conv_direct_pack_f32(k, o, _f(ffi, np.ascontiguousarray(w * scale[:, None])), _f(ffi, want))
    assert np.array_equal(got, want)
