"""Shared fixtures: a private compile cache per test session and a seeded rng (helpers: mxcc_testing.py)."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import numpy as np
import pytest

# One cache per session so tests never depend on (or pollute) the user's cache; set before mxcc builds, removed
# at exit (a whole run leaves several GB of builds).
if "MXCC_TEST_KEEP_CACHE" not in os.environ:
    os.environ["MXCC_CACHE_DIR"] = tempfile.mkdtemp(prefix="mxcc-test-cache-")
    atexit.register(shutil.rmtree, os.environ["MXCC_CACHE_DIR"], ignore_errors=True)


# The property tests use database=None (no examples kept), but hypothesis still caches (source constants,
# unicode tables) in .hypothesis/ under the working directory: send that to a temporary folder removed at exit.
try:
    from hypothesis.configuration import set_hypothesis_home_dir
except ImportError:         # the tests that need hypothesis skip
    pass
else:
    _HYPOTHESIS_HOME = tempfile.TemporaryDirectory(prefix="mxcc-hypothesis-")
    set_hypothesis_home_dir(_HYPOTHESIS_HOME.name)


@pytest.fixture
def rng():
    return np.random.default_rng(0)
