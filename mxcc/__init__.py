"""mxcc: compile MXNet-style networks to fast, self-contained C.

Public API (re-exports only): `compile`, `load`, `Module`, `Executor`, `sym`, `profiler`, the error types, and
MXNet's training modules under MXNet's names (`mxcc.optimizer`, `mxcc.lr_scheduler`, `mxcc.initializer`,
`mxcc.metric`, `mxcc.callback`, `mxcc.model`, `mxcc.io`), which live in mxcc/train/.
"""
import sys as _sys

from mxcc._version import __version__
from mxcc.errors import (AttrError, BuildError, GraphError, MxccError, ParamsError, ShapeError,
                         UnsupportedOpError)
from mxcc.compiler.driver import compile
from mxcc.runtime.module import Module, load
from mxcc.runtime.executor import Executor
from mxcc import symbol as sym
from mxcc import profiler
from mxcc.train import callback, initializer, io, lr_scheduler, metric, model, optimizer
from mxcc.train.model import load_checkpoint, save_checkpoint

# `import mxcc.optimizer`, `from mxcc.metric import Accuracy`: MXNet's module names, as users write them
for _m in (callback, initializer, io, lr_scheduler, metric, model, optimizer):
    _sys.modules[f"{__name__}.{_m.__name__.rsplit('.', 1)[1]}"] = _m

__all__ = ["AttrError", "BuildError", "Executor", "GraphError", "Module", "MxccError", "ParamsError", "ShapeError",
           "UnsupportedOpError", "__version__", "callback", "compile", "initializer", "io", "load",
           "load_checkpoint", "lr_scheduler", "metric", "model", "optimizer", "profiler", "save_checkpoint", "sym"]
