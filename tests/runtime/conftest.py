"""Fixtures for the runtime tests: the GEMM as a cffi extension, once per session and target ISA.

The module is benchmarks/_build_gemm.py's (the cdef the benchmark uses) linked against mxcc's own runtime
objects for that -march (mxcc_testing.runtime_objects_for: the flags of generated code, shared with every
other test of that ISA), so the tests check the very objects generated code links. Skips, with the reason,
when gcc or cffi is missing or this CPU cannot run the ISA.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    # NOTE: `python -m pytest` from the repo root has it already; plain `pytest` may not.
    sys.path.insert(0, str(ROOT))

CC = os.environ.get("CC", "gcc")
# -march=native (on an AVX-512 machine: the 14x32 AVX-512F kernel), x86-64-v3 (AVX2 + FMA: the 6x16 kernel),
# x86-64 (plain C: the reference kernels)
MARCHES = ["native", "x86-64-v3", "x86-64"]


@pytest.fixture(scope="session", params=MARCHES)
def march(request):
    if shutil.which(CC) is None:
        pytest.skip(f"no C compiler ({CC}) on PATH: the GEMM runtime cannot be built")
    from benchmarks._build_gemm import predefined_macros
    from mxcc_testing import ISA_MACROS
    missing = (predefined_macros(request.param) - predefined_macros("native")) & ISA_MACROS
    if missing:
        pytest.skip(f"this CPU cannot run -march={request.param} code (lacks {sorted(missing)})")
    return request.param


@pytest.fixture(scope="session")
def gemm(march, tmp_path_factory):
    """(ffi, lib): the GEMM's cdef over mxcc's runtime objects for -march=<march>."""
    pytest.importorskip("cffi", reason="cffi is needed to load the GEMM runtime")
    from benchmarks._build_gemm import build_gemm
    from mxcc_testing import runtime_objects_for
    return build_gemm(tmp_path_factory.mktemp(f"gemm_build_{march}"), march=march,
                      objects=runtime_objects_for(march))


@pytest.fixture(scope="session")
def gemm_ws(gemm):
    """One workspace with two slots (this machine has 2 cores; tests run 1 or 2 threads)."""
    ffi, lib = gemm
    ws = lib.mxcc_gemm_ws_create(2)
    assert ws != ffi.NULL
    yield ws
    lib.mxcc_gemm_ws_free(ws)


@pytest.fixture(scope="session")
def omp():
    """OpenMP's thread-count setters (one libgomp per process: what every build here runs on)."""
    if shutil.which(CC) is None:
        pytest.skip(f"no C compiler ({CC}) on PATH")
    cffi = pytest.importorskip("cffi")
    from mxcc_testing import runtime_library
    ffi = cffi.FFI()
    ffi.cdef("void omp_set_num_threads(int);\nint omp_get_max_threads(void);")
    return ffi.dlopen(str(runtime_library("native")))


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request, omp):
    """Runs the test with OpenMP set to 1, then 2 threads (restored afterwards)."""
    before = omp.omp_get_max_threads()
    omp.omp_set_num_threads(request.param)
    yield request.param
    omp.omp_set_num_threads(before)
