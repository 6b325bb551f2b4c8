"""runtime_c/rng/mxcc_rng.h: the counter-based RNG of training Dropout and rrelu, against a numpy twin.

The twin below is written from the published SplitMix64 (Steele, Lea & Flood 2014), not from the C file: the
C functions must return the same bits for keys built from edge-case seeds, steps and streams (0, 1, 2^64-1)
and counters (0, 1, 2^32, 2^64-1). The statistics of the uniform draws (mean, variance, a 64-bin chi-square,
independence of neighbouring streams, steps and seeds) are checked on a million draws of the twin, which is
bit-identical to the C code.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
CC = os.environ.get("CC", "gcc")
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


@pytest.fixture(scope="module")
def rng_c(tmp_path_factory):
    if shutil.which(CC) is None:
        pytest.skip(f"no C compiler ({CC}) on PATH")
    cffi = pytest.importorskip("cffi")
    ffi = cffi.FFI()
    ffi.cdef("uint64_t mxcc_rng_mix(uint64_t z); uint64_t mxcc_rng_key(uint64_t seed, uint64_t step, uint64_t stream);"
             "uint64_t mxcc_rng_bits(uint64_t key, uint64_t i); float mxcc_rng_uniform(uint64_t key, uint64_t i);")
    ffi.set_source("_mxcc_rng_test", '#include "rng/mxcc_rng.h"', include_dirs=[str(RUNTIME)],
                   extra_compile_args=["-O2", "-march=native"])
    so = ffi.compile(tmpdir=str(tmp_path_factory.mktemp("rng_build")))
    spec = importlib.util.spec_from_file_location("_mxcc_rng_test", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.lib


# -- the numpy twin (uint64 arithmetic wraps modulo 2^64) -----------------------------------------------------
def mix(z):
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def key(seed, step, stream):
    with np.errstate(over="ignore"):
        k = mix(np.uint64(seed) + np.uint64(GOLDEN))
        k = mix(k ^ np.uint64(stream))
        return mix(k + (np.uint64(step) + np.uint64(1)) * np.uint64(GOLDEN))


def bits(k, i):
    with np.errstate(over="ignore"):
        return mix(np.uint64(k) + (np.asarray(i, dtype=np.uint64) + np.uint64(1)) * np.uint64(GOLDEN))


def uniform(k, i):
    return (bits(k, i) >> np.uint64(40)).astype(np.float64) / float(1 << 24)


EDGES = [0, 1, 2, 12345, 1 << 32, M64]


def test_c_matches_the_numpy_twin(rng_c):
    for seed in EDGES:
        for step in EDGES[:4] + [M64]:
            for stream in (0, 0x1F2E3D4C5B6A7988, M64):
                k = int(key(seed, step, stream))
                assert rng_c.mxcc_rng_key(seed, step, stream) == k
                for i in EDGES:
                    assert rng_c.mxcc_rng_bits(k, i) == int(bits(k, i))
                    assert rng_c.mxcc_rng_uniform(k, i) == np.float32(uniform(k, i))
    # SplitMix64's published first output from state 0 (the bits of counter 0 under key 0)
    assert rng_c.mxcc_rng_bits(0, 0) == 0xE220A8397B1DCDAF


def test_uniform_statistics():
    n = 1 << 20
    u = uniform(key(1, 0, 7), np.arange(n))
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 5 * np.sqrt(1 / 12 / n)
    assert abs(u.var() - 1 / 12) < 5 * np.sqrt(1 / 180 / n)          # var of (u - 1/2)^2 is 1/180
    counts = np.bincount((u * 64).astype(int), minlength=64)
    chi2 = float(((counts - n / 64) ** 2 / (n / 64)).sum())
    assert chi2 < 120                                                # 63 dof: p ~ 1e-5


@pytest.mark.parametrize("other", [(1, 0, 8), (1, 1, 7), (2, 0, 7)], ids=["stream", "step", "seed"])
def test_neighbouring_keys_are_independent(other):
    n = 1 << 18
    a = uniform(key(1, 0, 7), np.arange(n))
    b = uniform(key(*other), np.arange(n))
    assert abs(np.corrcoef(a, b)[0, 1]) < 5 / np.sqrt(n)
    assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < 5 / np.sqrt(n)   # neighbouring counters too
