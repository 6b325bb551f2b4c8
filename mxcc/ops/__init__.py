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


def _import_all() -> None:
    """Importing an op module registers its ops: every module of this package is one (sorted: deterministic)."""
    import importlib
    import pkgutil
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name not in ("base", "attrs") and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_import_all()

__all__ = ["REGISTRY", "EpilogueStep", "Fusion", "OpDef", "ShapeCtx", "get_op", "register", "supported_ops"]
