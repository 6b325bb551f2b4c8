"""mxcc: compile MXNet-style networks to fast, self-contained C.

Public API (re-exports only): `compile`, `load`, `Module`, `sym`, and the error types.
"""
__version__ = "0.1.0"

from mxcc.errors import (AttrError, BuildError, GraphError, MxccError, ParamsError, ShapeError,  # noqa: E402
                         UnsupportedOpError)
from mxcc.compiler import compile  # noqa: E402
from mxcc.module import Module, load  # noqa: E402
from mxcc import symbol as sym  # noqa: E402

__all__ = ["AttrError", "BuildError", "GraphError", "Module", "MxccError", "ParamsError", "ShapeError",
           "UnsupportedOpError", "compile", "load", "sym"]
