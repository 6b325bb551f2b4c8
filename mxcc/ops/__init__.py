"""The operator registry: MXNet op name or alias -> OpDef. The only place op names are looked up."""
from __future__ import annotations

from mxcc.errors import UnsupportedOpError
from mxcc.ops.base import EpilogueStep, Fusion, OpDef, ShapeCtx

REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    for name in (op.name, *op.aliases):
        if name in REGISTRY:
            raise ValueError(f"operator {name!r} registered twice")
        REGISTRY[name] = op
    return op


def supported_ops() -> list[str]:
    """Canonical op names (aliases such as _Plus are accepted too)."""
    return sorted({op.name for op in REGISTRY.values()})


def get_op(name: str, node: str = "?") -> OpDef:
    op = REGISTRY.get(name)
    if op is None:
        raise UnsupportedOpError(
            f"operator {name!r} is not supported by mxcc (supported: {', '.join(supported_ops())})",
            node=node, op=name)
    return op


# Importing the op modules registers them.
from mxcc.ops import activation, dropout, elemwise, fully_connected, reshape, softmax  # noqa: E402,F401

__all__ = ["REGISTRY", "EpilogueStep", "Fusion", "OpDef", "ShapeCtx", "get_op", "register", "supported_ops"]
