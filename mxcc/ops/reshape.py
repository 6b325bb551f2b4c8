"""Flatten: (N, d1, d2, ...) -> (N, d1*d2*...), and `_reshape_to` (the gradient's way back).

Both are views of their input: no kernel, no copy (a view that is a graph output becomes a copy).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from mxcc.ops import register
from mxcc.ops.base import Fusion, NoAttrs, OpDef



@dataclass(frozen=True)
class ReshapeToAttrs:
    shape: tuple[int, ...]


def _flatten_infer(a, s):
    x = s.known("data")
    if len(x) == 0:
        s.fail("cannot flatten a 0-d tensor", input="data")
    return [(x[0], prod(x[1:]))]


def view_grad(a, g):
    """The gradient of a view (Flatten, Reshape, expand_dims, squeeze, identity): the output gradient
    viewed in the input's shape (no copy)."""
    shape = g.type_of(g.input("data")).shape
    return {"data": g.emit("_reshape_to", [g.ograd()], shape=shape)[0]}


def _reshape_to_infer(a: ReshapeToAttrs, s):
    x = s.known("data")
    if prod(x) != prod(a.shape):
        s.fail(f"cannot view {x} as {a.shape}: sizes differ", input="data")
    return [a.shape]


FLATTEN = register(OpDef(
    name="Flatten", aliases=("flatten",), attrs=NoAttrs, inputs=lambda a: ("data",),
    infer=_flatten_infer, fusion=Fusion.INJECTIVE, view=True, grad=view_grad, doc=__doc__))

RESHAPE_TO = register(OpDef(
    name="_reshape_to", attrs=ReshapeToAttrs, inputs=lambda a: ("data",), infer=_reshape_to_infer,
    fusion=Fusion.INJECTIVE, view=True, grad=view_grad))
