"""The errors mxcc raises, one family rooted at MxccError.

Each error carries the node it is about (when there is one), the input or attribute, what was expected and
what was found, so that the message reads like
`fc1 (FullyConnected): input 'weight' has shape (500, 784), expected (500, 800)`.
The CLI prints `str(err)` as one line; a traceback only with --debug.
"""
from __future__ import annotations

from typing import Iterable

NAME_LIST_LIMIT = 8


def name_list(names: Iterable, limit: int = NAME_LIST_LIMIT) -> str:
    """Names for a message, at most `limit` of them: `a, b, c`, or past the limit
    `a, b, c, d, e, f, g, h, … (102 in all)`. The raise site passes the full list as `names=` (err.names)."""
    names = [str(n) for n in names]
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", … ({len(names)} in all)"


class MxccError(Exception):
    """Base class: a user-facing error with an optional node context. `names`: the full list of names a
    message shortened with name_list (missing params, unknown inputs, supported ops ...), else ()."""

    def __init__(self, message: str, *, node: str | None = None, op: str | None = None,
                 input: str | None = None, expected=None, got=None, names: Iterable = ()):
        self.node, self.op, self.input = node, op, input
        self.expected, self.got = expected, got
        self.names = tuple(names)
        where = ""
        if node is not None:
            where = f"{node} ({op}): " if op else f"{node}: "
        super().__init__(where + message)


class GraphError(MxccError):
    """The graph itself is malformed (JSON syntax, dangling references, cycles, bad heads)."""


class AttrError(MxccError):
    """An operator attribute is missing, unknown or cannot be parsed."""


class ShapeError(MxccError):
    """Shapes or dtypes do not fit together (in the graph, in params, or at the forward boundary)."""


class IncompleteShapeError(ShapeError):
    """A shape needed for inference is not known (no --shape given for an input)."""


class UnsupportedOpError(MxccError):
    """The graph uses an operator mxcc does not implement."""


class ParamsError(MxccError):
    """A params file is malformed, or params are missing, unexpected or mis-shaped."""


class BuildError(MxccError):
    """The C compiler is missing or failed."""
