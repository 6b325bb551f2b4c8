"""Shared fixtures: a private compile cache per test session, paths to the reference data, a seeded rng."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

# One cache per session so tests never depend on (or pollute) the user's cache; set before mxcc builds.
if "MXCC_TEST_KEEP_CACHE" not in os.environ:
    os.environ["MXCC_CACHE_DIR"] = tempfile.mkdtemp(prefix="mxcc-test-cache-")

needs_gcc = pytest.mark.skipif(shutil.which(os.environ.get("CC", "gcc")) is None, reason="no C compiler (gcc)")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """max|got - ref| / max|ref|: MXNet's README's acceptance measure (safe for outputs crossing zero)."""
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64) - ref))) / scale
