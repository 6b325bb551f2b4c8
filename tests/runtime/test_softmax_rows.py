"""runtime_c/nn/softmax_f32.c: softmax and log-softmax over contiguous rows, in each ISA build (AVX-512F,
AVX2+FMA, plain C), against float64 numpy: row lengths around the vector width (tails), temperature, in place,
-inf entries (masked attention), rows of huge spread (exp underflow gives 0), NaN rows."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mxcc_testing import build_isa_libs, needs_gcc

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
MARCHES = ["native", "x86-64-v3", "x86-64"]

pytestmark = needs_gcc


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    cffi = pytest.importorskip("cffi")
    built = build_isa_libs(tmp_path_factory.mktemp("softmax"), "softmax", [RUNTIME / "nn" / "softmax_f32.c", RUNTIME / "pool" / "pool.c"],
                           MARCHES, RUNTIME)
    ffi = cffi.FFI()
    ffi.cdef("void mxcc_softmax_rows_f32(const float *x, float *y, long rows, long n, float t, int log, "
             "int parallel);")
    return ffi, {m: ffi.dlopen(str(p)) for m, p in built.items()}


def _run(libs, march, x, t=1.0, log=False, inplace=False):
    ffi, lib = libs[0], libs[1].get(march)
    if lib is None:
        pytest.skip(f"this CPU cannot run -march={march} code")
    x = np.ascontiguousarray(x, np.float32)
    y = x if inplace else np.empty_like(x)
    lib.mxcc_softmax_rows_f32(ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y), x.shape[0], x.shape[1],
                              t, int(log), 1)
    return y


def _ref(x, t=1.0, log=False):
    z = (x.astype(np.float64) - x.max(axis=1, keepdims=True)) / t
    lse = np.log(np.exp(z).sum(axis=1, keepdims=True))
    return z - lse if log else np.exp(z - lse)


@pytest.mark.parametrize("march", MARCHES)
@pytest.mark.parametrize("n", [1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 128, 1000])
@pytest.mark.parametrize("log", [False, True])
def test_rows_against_numpy(libs, march, n, log):
    x = np.random.default_rng(n).standard_normal((5, n)).astype(np.float32) * 4
    for t in (1.0, 0.7):
        got = _run(libs, march, x, t, log)
        np.testing.assert_allclose(got, _ref(x, t, log), rtol=2e-6, atol=1e-7 if not log else 2e-6)


@pytest.mark.parametrize("march", MARCHES)
def test_in_place_masked_and_underflow(libs, march):
    x = np.random.default_rng(0).standard_normal((4, 37)).astype(np.float32)
    x[0, 5:] = -np.inf                      # a masked attention row
    x[1, 0] = 200.0                         # the rest underflow: exactly 0, as expf gives (or subnormals)
    x[2, :] = -1e30
    want = _ref(x)
    got = _run(libs, march, x.copy(), inplace=True)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-30)
    assert (got[0, 5:] == 0).all() and (got[1, 1:] == 0).all()
    assert abs(got[0, :5].sum() - 1) < 1e-6


@pytest.mark.parametrize("march", MARCHES)
def test_nan_rows_are_nan(libs, march):
    x = np.random.default_rng(1).standard_normal((3, 20)).astype(np.float32)
    x[1, 7] = np.nan
    for log in (False, True):
        got = _run(libs, march, x, log=log)
        assert np.isnan(got[1]).all() and np.isfinite(got[[0, 2]]).all()
