"""Flatten: (N, d1, d2, ...) -> (N, d1*d2*...). A view of its input: no kernel, no copy."""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from mxcc.ops import register
from mxcc.ops.base import Fusion, OpDef


@dataclass(frozen=True)
class NoAttrs:
    pass


def _flatten_infer(a, s):
    x = s.known("data")
    if len(x) == 0:
        s.fail("cannot flatten a 0-d tensor", input="data")
    return [(x[0], prod(x[1:]))]


FLATTEN = register(OpDef(
    name="Flatten", aliases=("flatten",), attrs=NoAttrs, inputs=lambda a: ("data",),
    infer=_flatten_infer, fusion=Fusion.INJECTIVE, view=True, doc=__doc__))
