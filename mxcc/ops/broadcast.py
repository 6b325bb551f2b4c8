"""broadcast_add/sub/mul/div/maximum/minimum: binary ops with numpy-style broadcasting, one table row each.

Shapes align on the right and a dimension of 1 in either operand stretches (MXNet's BinaryBroadcastShape).
Lowering resolves each operand's strides against the output shape in Python (0 along stretched
dimensions), merges dimensions where both operands are contiguous, and prints one loop nest
(`kernels/loops.c.j2`). maximum/minimum follow mshadow_op: a NaN in the left operand propagates.
"""
from __future__ import annotations

from dataclasses import dataclass

from mxcc.ops import register
from mxcc.ops._util import broadcast_shape, broadcast_strides, elementwise_loop
from mxcc.ops.base import Fusion, OpDef, elementwise_flops


@dataclass(frozen=True)
class NoAttrs:
    pass


# name -> (aliases, C expression of a and b)
BROADCAST = {
    "broadcast_add": (("broadcast_plus",), "({a} + {b})"),
    "broadcast_sub": (("broadcast_minus",), "({a} - {b})"),
    "broadcast_mul": ((), "({a} * {b})"),
    "broadcast_div": ((), "({a} / {b})"),
    "broadcast_maximum": ((), "({a} != {a} || {a} > {b} ? {a} : {b})"),
    "broadcast_minimum": ((), "({a} != {a} || {a} < {b} ? {a} : {b})"),
}


def _infer(a, s):
    lhs, rhs = s.known("lhs"), s.known("rhs")
    out = broadcast_shape(lhs, rhs)
    if out is None:
        s.fail(f"operands could not be broadcast together with shapes {lhs} {rhs}", input="rhs", got=rhs)
    return [out]


def _lower(expr: str):
    def lower(a, k):
        lhs, rhs = k.in_type("lhs").shape, k.in_type("rhs").shape
        out = k.out_type().shape
        what = f"out{list(out)} = " + expr.format(a=f"lhs{list(lhs)}", b=f"rhs{list(rhs)}") + ", broadcast"
        return "kernels/loops.c.j2", elementwise_loop(
            what, out, [("lhs", broadcast_strides(lhs, out)), ("rhs", broadcast_strides(rhs, out))],
            lambda xs: expr.format(a=xs[0], b=xs[1]))
    return lower


OPS = {}
for _name, (_aliases, _expr) in BROADCAST.items():
    OPS[_name] = register(OpDef(
        name=_name, aliases=_aliases, attrs=NoAttrs, inputs=lambda a: ("lhs", "rhs"), infer=_infer,
        fusion=Fusion.BROADCAST, flops=elementwise_flops(1), lower=_lower(_expr), doc=__doc__))
