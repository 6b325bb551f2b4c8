"""One parser from MXNet's attribute strings to an op's typed, frozen attrs dataclass.

MXNet stores every attribute as the Python `str()` of the kwarg: "128", "True", "(5, 5)", "(3,)", "()",
"[1, 2]", "None", "1e-05", "relu". The dataclass field annotations say what each should be; `Literal[...]`
fields list the allowed words. Hidden keys (`__shape__`, `__lr_mult__`, ...) are not op attributes and are
skipped; keys listed in the class's `IGNORED` tuple are accepted and dropped (e.g. `workspace`,
`cudnn_tune`). Fields listed in its `INTERNAL` tuple are the compiler's own (a convolution's tuned path) and
cannot be set from strings. Anything else is an AttrError naming the node, the attribute and the accepted names.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import typing
from typing import Any, Literal, get_args, get_origin

from mxcc.errors import AttrError

_TRUE = {"true", "1"}
_FALSE = {"false", "0"}


@functools.lru_cache(maxsize=None)
def _schema(cls: type) -> tuple[dict, dict]:
    """(field type hints, fields) of an attrs class: resolved once per class, not once per node."""
    return typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}


def parse(cls: type, raw: dict[str, str] | tuple, *, node: str = "?", op: str = "?") -> Any:
    """Build `cls` (a frozen dataclass) from raw MXNet attribute strings."""
    raw = dict(raw)
    hints, fields = _schema(cls)
    ignored = set(getattr(cls, "IGNORED", ()))
    internal = set(getattr(cls, "INTERNAL", ()))
    values = {}
    for key, text in raw.items():
        if key.startswith("__") and key.endswith("__") or key in ignored:
            continue
        if key not in fields or key in internal:
            known = ", ".join(sorted(set(fields) - internal)) or "none"
            raise AttrError(f"unknown attribute {key!r}={text!r} (accepted: {known})", node=node, op=op)
        try:
            values[key] = _convert(hints[key], text)
        except (ValueError, SyntaxError, TypeError, OverflowError) as e:
            raise AttrError(f"attribute {key!r}={text!r}: {e}", node=node, op=op) from None
    for name, f in fields.items():
        if name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise AttrError(f"required attribute {name!r} is missing", node=node, op=op)
    try:
        obj = cls(**values)
    except (ValueError, TypeError) as e:     # __post_init__ range checks
        raise AttrError(str(e), node=node, op=op) from None
    return obj


def _convert(tp: Any, text: str) -> Any:
    origin = get_origin(tp)
    if origin is typing.Union:                       # Optional[X]
        args = [a for a in get_args(tp) if a is not type(None)]
        if text.strip() == "None":
            return None
        return _convert(args[0], text)
    if origin is Literal:
        choices = get_args(tp)
        if text not in choices:
            raise ValueError(f"expected one of {', '.join(map(repr, choices))}")
        return text
    if tp is bool:
        t = text.strip().lower()
        if t in _TRUE:
            return True
        if t in _FALSE:
            return False
        raise ValueError("expected True or False")
    if tp is int:
        v = float(text) if any(c in text for c in ".eE") and not text.strip().lstrip("-").isdigit() else int(text)
        if v in (float("inf"), float("-inf")) or v != int(v):     # "1e400" is inf; nan != nan
            raise ValueError("expected an integer")
        return int(v)
    if tp is float:
        return float(text)
    if tp is str:
        return text
    if origin is tuple:
        elem = get_args(tp)[0]
        v = literal(text)
        if isinstance(v, (int, float)):
            v = (v,)
        if not isinstance(v, (tuple, list)):
            raise ValueError("expected a tuple like (1, 2)")
        return tuple(_convert(elem, str(x)) for x in v)
    raise TypeError(f"attrs parser has no rule for {tp!r}")


def literal(text: str) -> Any:
    """ast.literal_eval of an attribute string, every failure a ValueError or SyntaxError (deep nesting
    such as "-" * 10**5 + "1" makes Python's parser raise RecursionError or MemoryError)."""
    return _literal(text.strip())


@functools.lru_cache(maxsize=4096)
def _literal(text: str) -> Any:
    """Attribute strings repeat across nodes ("(3, 3)", "True"): each is parsed once. The values are
    immutable (tuples, numbers, strings), so sharing them is safe."""
    try:
        return ast.literal_eval(text)
    except (RecursionError, MemoryError):
        raise ValueError("nested too deeply to be a value") from None


def format_value(v: Any) -> str:
    """The inverse: the string MXNet would store for a Python kwarg (`str(v)`, as mx.sym does)."""
    if isinstance(v, list):
        v = tuple(v)
    return str(v)
