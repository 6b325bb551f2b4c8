"""The operator registry: MXNet op name or alias -> OpDef. The only place op names are looked up."""
from __future__ import annotations

import difflib

from mxcc.errors import UnsupportedOpError, name_list
from mxcc.ops.base import EpilogueStep, Fusion, OpDef, ShapeCtx

REGISTRY: dict[str, OpDef] = {}

# ops the compiler itself adds (gradients, training forms, views and zeros of autodiff), never written in a
# user's graph: MXNet's `_backward_<op>` and mxcc's `_train_<op>` conventions, and two of mxcc's own
# (tests/golden/test_mxnet_extra.py checks every other name against MXNet 1.9.1's operator list)
INTERNAL_PREFIXES = ("_backward_", "_train_")
INTERNAL_OPS = frozenset({"_reshape_to", "_zeros_like"})


def register(op: OpDef) -> OpDef:
    for name in (op.name, *op.aliases):
        if name in REGISTRY:
            raise ValueError(f"operator {name!r} registered twice")
        REGISTRY[name] = op
    return op


def is_internal(name: str) -> bool:
    """An op only the compiler adds (a gradient, a training form ...): not part of MXNet's public op set."""
    return name.startswith(INTERNAL_PREFIXES) or name in INTERNAL_OPS


def supported_ops(aliases: bool = False) -> list[str]:
    """The MXNet operators a graph may use, sorted: canonical names, or with aliases=True every accepted
    spelling (`_Plus`, `elemwise_add`, ...). Ops the compiler adds internally are not listed."""
    names = set(REGISTRY) if aliases else {op.name for op in REGISTRY.values()}
    return sorted(n for n in names if not is_internal(n))


def get_op(name: str, node: str = "?") -> OpDef:
    op = REGISTRY.get(name)
    if op is None:
        public = supported_ops()
        close = difflib.get_close_matches(name, supported_ops(aliases=True), n=3, cutoff=0.75)
        hint = f"did you mean {' or '.join(map(repr, close))}? " if close else ""
        raise UnsupportedOpError(
            f"operator {name!r} is not supported by mxcc ({hint}supported: {name_list(public)}; "
            "mxcc.ops.supported_ops() lists them)", node=node, op=name, names=public)
    return op


def _import_all() -> None:
    """Importing an op module registers its ops: every module of this package is one (sorted: deterministic)."""
    import importlib
    import pkgutil
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name not in ("base", "attrs") and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


_import_all()

__all__ = ["REGISTRY", "EpilogueStep", "Fusion", "OpDef", "ShapeCtx", "get_op", "is_internal", "register",
           "supported_ops"]
