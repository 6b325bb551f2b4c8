"""Fixtures for the runtime tests: the GEMM sources built once per session into a cffi extension.

The build helper is shared with benchmarks/gemm.py (benchmarks/_build_gemm.py), so the tests check the
very code the benchmark times, compiled with the same flags. Skips, with the reason, when gcc or cffi
is missing.
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


@pytest.fixture(scope="session")
def gemm(tmp_path_factory):
    """(ffi, lib) of runtime_c/gemm/ compiled with -O3 -march=native -fopenmp."""
    if shutil.which(CC) is None:
        pytest.skip(f"no C compiler ({CC}) on PATH: the GEMM runtime cannot be built")
    pytest.importorskip("cffi", reason="cffi is needed to load the GEMM runtime")
    from benchmarks._build_gemm import build_gemm

    return build_gemm(tmp_path_factory.mktemp("gemm_build"))


@pytest.fixture(scope="session")
def gemm_ws(gemm):
    """One workspace with two slots (this machine has 2 cores; tests run 1 or 2 threads)."""
    ffi, lib = gemm
    ws = lib.mxcc_gemm_ws_create(2)
    assert ws != ffi.NULL
    yield ws
    lib.mxcc_gemm_ws_free(ws)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request, gemm):
    """Runs the test with OpenMP set to 1, then 2 threads (restored afterwards)."""
    _, lib = gemm
    before = lib.omp_get_max_threads()
    lib.omp_set_num_threads(request.param)
    yield request.param
    lib.omp_set_num_threads(before)
