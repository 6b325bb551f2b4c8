"""Fixtures of the C library tests: networks compiled with out_dir once per session (lib<net>.a, lib<net>.so,
include/)."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import mxcc
from capi_helpers import CC, HERE, MODELS
from mxcc_testing import DATA, ROOT


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(str(item.fspath)).parents and shutil.which(CC) is None:
            item.add_marker(pytest.mark.skip(reason=f"no C compiler ({CC})"))


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """name -> the directory of that reference network compiled for its MXNet reference input (batch 2)."""
    root = tmp_path_factory.mktemp("capi_nets")
    out = {}
    for name, shape in MODELS.items():
        d = DATA / "models" / name
        mxcc.compile(d / f"{name}-symbol.json", {"data": shape}, d / f"{name}-0000.params", out_dir=root / name)
        out[name] = root / name
    return out


@pytest.fixture(scope="session")
def reference():
    """name -> (symbol path, params path, MXNet's input, MXNet's output)."""
    out = {}
    for name in MODELS:
        d = DATA / "models" / name
        io = np.load(d / f"{name}-io.npz")
        out[name] = (d / f"{name}-symbol.json", d / f"{name}-0000.params", io["input"].astype(np.float32),
                     io["output"])
    return out


@pytest.fixture(scope="session")
def mlp_dir(tmp_path_factory):
    """The MNIST MLP of examples/data/mlp (MXNet's cpp-package network), batch 100, with the library."""
    out = tmp_path_factory.mktemp("capi_mlp") / "mlp"
    mxcc.compile(ROOT / "examples/data/mlp/mlp-symbol.json", {"X": (100, 784)}, out_dir=out)
    return out
