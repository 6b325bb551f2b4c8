"""broadcast_add/sub/mul/div/maximum/minimum: binary ops with numpy-style broadcasting, one table row each.

Shapes align on the right and a dimension of 1 in either operand stretches (MXNet's BinaryBroadcastShape).
Lowering resolves each operand's strides against the output shape in Python (0 along stretched
dimensions), merges dimensions where both operands are contiguous, and prints one loop nest
(`kernels/loops.c.j2`). maximum/minimum follow mshadow_op: a NaN in the left operand propagates.
Gradients: `_backward_broadcast`, one node per operand that needs one: the operand's partial derivative times
the output gradient, summed over the dimensions the operand was stretched along (kernels/reduce.c.j2).
maximum/minimum send the gradient to the left operand where lhs >= rhs (<= for minimum), else to the right,
as MXNet's BinaryBroadcastBackwardUseIn<ge, lt>.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from mxcc.ops import register
from mxcc.ops._util import broadcast_shape, broadcast_strides, elementwise_loop, reduce_to_vars
from mxcc.ops.base import Fusion, NoAttrs, OpDef, elementwise_flops



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
    def lower(a, ctx):
        lhs, rhs = ctx.in_type("lhs").shape, ctx.in_type("rhs").shape
        out = ctx.out_type().shape
        what = f"out{list(out)} = " + expr.format(a=f"lhs{list(lhs)}", b=f"rhs{list(rhs)}") + ", broadcast"
        return "kernels/loops.c.j2", elementwise_loop(
            what, out, [("lhs", broadcast_strides(lhs, out)), ("rhs", broadcast_strides(rhs, out))],
            lambda xs: expr.format(a=xs[0], b=xs[1]))
    return lower


# forward op -> C expressions of the partial derivatives times the gradient, of (dy, a = lhs, b = rhs)
GRADIENTS = {
    "broadcast_add": ("{dy}", "{dy}"),
    "broadcast_sub": ("{dy}", "(-{dy})"),
    "broadcast_mul": ("{dy} * {b}", "{dy} * {a}"),
    "broadcast_div": ("{dy} / {b}", "(-{dy} * {a} / ({b} * {b}))"),
    "broadcast_maximum": ("({a} >= {b} ? {dy} : 0.0f)", "({a} < {b} ? {dy} : 0.0f)"),
    "broadcast_minimum": ("({a} <= {b} ? {dy} : 0.0f)", "({a} > {b} ? {dy} : 0.0f)"),
}


def _reads_operands(fn: str) -> bool:
    return fn not in ("broadcast_add", "broadcast_sub")


def _grad(name: str):
    def grad(a, g):
        shapes = dict(lhs_shape=g.type_of(g.input("lhs")).shape, rhs_shape=g.type_of(g.input("rhs")).shape)
        ins = [g.ograd()] + ([g.input("lhs"), g.input("rhs")] if _reads_operands(name) else [])
        return {side: g.emit("_backward_broadcast", ins, fn=name, side=side, **shapes, name=f"{g.node.name}_backward_{side}")[0]
                for side in ("lhs", "rhs") if g.needs(side)}
    return grad


OPS = {}
for _name, (_aliases, _expr) in BROADCAST.items():
    OPS[_name] = register(OpDef(
        name=_name, aliases=_aliases, attrs=NoAttrs, inputs=lambda a: ("lhs", "rhs"), infer=_infer,
        fusion=Fusion.BROADCAST, flops=elementwise_flops(1), lower=_lower(_expr), grad=_grad(_name), doc=__doc__))


@dataclass(frozen=True)
class BroadcastBackwardAttrs:
    fn: str                          # the forward op
    side: str                        # lhs | rhs: whose gradient
    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]


def _bwd_lower(a: BroadcastBackwardAttrs, ctx):
    out = ctx.in_type("ograd").shape
    operands = [("ograd", broadcast_strides(out, out))]
    if _reads_operands(a.fn):
        operands += [("lhs", broadcast_strides(a.lhs_shape, out)), ("rhs", broadcast_strides(a.rhs_shape, out))]
    target = a.lhs_shape if a.side == "lhs" else a.rhs_shape
    expr = GRADIENTS[a.fn][a.side == "rhs"]
    return "kernels/reduce.c.j2", reduce_to_vars(
        f"{a.fn} backward, {a.side}{list(target)} = sum over its broadcast of "
        + expr.format(dy="ograd", a="lhs", b="rhs") + f" (ograd{list(out)})",
        out, target, operands, lambda xs: expr.format(dy=xs[0], a=xs[1] if len(xs) > 1 else "", b=xs[2] if len(xs) > 2 else ""))


BROADCAST_BACKWARD = register(OpDef(
    name="_backward_broadcast", attrs=BroadcastBackwardAttrs,
    inputs=lambda a: ("ograd", "lhs", "rhs") if _reads_operands(a.fn) else ("ograd",),
    infer=lambda a, s: [tuple(a.lhs_shape if a.side == "lhs" else a.rhs_shape)], fusion=Fusion.REDUCE,
    flops=lambda a, ins, outs: 2 * prod(ins[0].shape), lower=_bwd_lower))
