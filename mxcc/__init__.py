"""mxcc: compile MXNet-style networks to fast, self-contained C.

Public API (re-exports only): `compile`, `load`, `Module`, `sym`, `profiler`, and the error types.
"""
__version__ = "0.1.0"

from mxcc.errors import (AttrError, BuildError, GraphError, MxccError, ParamsError, ShapeError,  # noqa: E402
                         UnsupportedOpError)
from mxcc.compiler import compile  # noqa: E402
from mxcc.module import Module, load  # noqa: E402
from mxcc import symbol as sym  # noqa: E402
from mxcc import callback, initializer, io, lr_scheduler, metric, model, optimizer  # noqa: E402,F401
from mxcc.executor import Executor  # noqa: E402
from mxcc.model import load_checkpoint, save_checkpoint  # noqa: E402
from mxcc import profiler  # noqa: E402

__all__ = ["AttrError", "BuildError", "Executor", "GraphError", "Module", "callback", "initializer", "io",
           "load_checkpoint", "lr_scheduler", "metric", "model", "optimizer", "save_checkpoint", "MxccError", "ParamsError", "ShapeError",
           "UnsupportedOpError", "compile", "load", "profiler", "sym"]
