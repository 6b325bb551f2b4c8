"""runtime_c/mxcc_math.h: mxcc_erf (the rational fit GELU uses, so that its loops vectorize) against float64
erf, compiled for each ISA build and called over an array (the loop gcc vectorizes), and GELU from it."""
from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mxcc_testing import CC, needs_gcc, runnable_marches

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
SRC = r"""
#include "mxcc_math.h"
void erf_all(const float *restrict x, float *restrict y, long n) { for (long i = 0; i < n; i++) y[i] = mxcc_erf(x[i]); }
void gelu_all(const float *restrict x, float *restrict y, long n) { for (long i = 0; i < n; i++) y[i] = mxcc_gelu(x[i]); }
"""

pytestmark = needs_gcc


@pytest.fixture(scope="module", params=["native", "x86-64-v3", "x86-64"])
def lib(request, tmp_path_factory):
    cffi = pytest.importorskip("cffi")
    march = request.param
    if march not in runnable_marches([march]):
        pytest.skip(f"this CPU cannot run -march={march} code")
    d = tmp_path_factory.mktemp(f"erf-{march}")
    (d / "erf.c").write_text(SRC)
    subprocess.run([CC, "-O3", f"-march={march}", "-shared", "-fPIC", f"-I{RUNTIME}", str(d / "erf.c"), "-o",
                    str(d / "erf.so"), "-lm"], check=True)
    ffi = cffi.FFI()
    ffi.cdef("void erf_all(const float *x, float *y, long n); void gelu_all(const float *x, float *y, long n);")
    return ffi, ffi.dlopen(str(d / "erf.so"))


def _call(lib, fn, x):
    ffi, so = lib
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    getattr(so, fn)(ffi.from_buffer("float[]", x), ffi.from_buffer("float[]", y), x.size)
    return y


def test_erf_within_4e7_of_float64(lib):
    x = np.concatenate([np.linspace(-6, 6, 120001), [0.0, -0.0, 1e-30, -1e-30, 3.925, 3.93, 100.0]]).astype(np.float32)
    got = _call(lib, "erf_all", x).astype(np.float64)
    ref = np.array([math.erf(float(v)) for v in x])
    assert np.abs(got - ref).max() <= 4e-7
    assert np.all(np.abs(got) <= 1.0) and (np.sign(got) == np.sign(ref)).all()
    special = _call(lib, "erf_all", np.array([np.inf, -np.inf, np.nan], np.float32))
    assert special[0] == 1.0 and special[1] == -1.0 and np.isnan(special[2])


def test_gelu_against_float64(lib):
    x = np.linspace(-10, 10, 20001).astype(np.float32)
    ref = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    got = _call(lib, "gelu_all", x).astype(np.float64)
    assert np.abs(got - ref).max() <= 4e-7 * np.abs(x).max()      # 0.5 |x| times erf's error, plus rounding
