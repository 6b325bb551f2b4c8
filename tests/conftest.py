"""Shared fixtures: a private compile cache per test session and a seeded rng (helpers: mxcc_testing.py)."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

# One cache per session so tests never depend on (or pollute) the user's cache; set before mxcc builds.
if "MXCC_TEST_KEEP_CACHE" not in os.environ:
    os.environ["MXCC_CACHE_DIR"] = tempfile.mkdtemp(prefix="mxcc-test-cache-")


@pytest.fixture
def rng():
    return np.random.default_rng(0)
