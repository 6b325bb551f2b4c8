"""More math operators, MXNet 1.9.1 semantics: unary functions, powers, maximum/minimum, where and Cast.

- Unary (one table row each, as ops/elemwise.py): sign, reciprocal, log1p, expm1, erf, floor, ceil, round
  (half away from zero: C's roundf), rsqrt; and hard_sigmoid(alpha, beta) = clip(alpha * x + beta, 0, 1),
  NaN passing through as in MXNet. ELEMWISE: plain math.h expressions in the fused elementwise loop.
- _power, _maximum, _minimum (same shapes, ELEMWISE) and their _scalar forms, with _rpower_scalar
  (scalar ** x). maximum/minimum propagate a NaN from either operand (mshadow_op: isnan(a) ? a : a > b ? a : b).
- broadcast_power: numpy broadcasting as ops/broadcast.py (its maximum/minimum live there), one loop nest.
- where(condition, x, y): condition != 0 picks x (NaN is nonzero); condition has x's shape, or is 1-D with
  x.shape[0] entries and picks whole rows (MXNet's WhereOpShape). BROADCAST: one loop nest.
- Cast(dtype): values stay float32, holding what MXNet's output dtype holds (the comment above CAST says how).
Gradients, as MXNet's backward kernels compute them (from the input x, or the output y; dy the head
gradient): reciprocal -dy/x^2, log1p dy/(1+x), expm1 dy*e^x, erf dy*2/sqrt(pi)*e^(-x^2), rsqrt
-dy/(2 x sqrt x), hard_sigmoid dy*alpha where 0 < alpha*x+beta < 1 (strictly), power lhs dy*b*a^(b-1) and rhs
dy*a^b*ln(a), rpower_scalar dy*y*ln(s); maximum sends dy to lhs where lhs >= rhs and to rhs where lhs < rhs
(ties to the left; minimum: <= and >), the scalar forms where x >= s (x <= s). sign, floor, ceil and round
have zero gradients (MXNet's MakeZeroGradNodes); where's condition none (zero); Cast's is the head gradient
cast to the same dtype (MXNet casts it back through each Cast's input dtype: the same values on a float32
graph).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

import numpy as np

from mxcc.ops import register
from mxcc.ops._util import (PARALLEL_MIN_ELEMENTS, broadcast_shape, broadcast_strides, elementwise_loop,
                            reduce_to_vars, strides)
from mxcc.ops.base import Fusion, NoAttrs, OpDef, c_float, elementwise_flops



@dataclass(frozen=True)
class ScalarAttrs:
    scalar: float = 1.0
    is_int: bool = True       # MXNet 1.9 records whether the Python scalar was an int; the math is float32


def _same_shape(a, s):
    return [s.known("data")]


def _same_shapes(*names: str):
    def infer(a, s):
        known = [s.maybe(n) for n in names]
        shape = next((k for k in known if k is not None), None)
        if shape is None:
            s.known(names[0])
        for n in names:
            s.expect(n, shape, "(elementwise operands must have the same shape)")
        return [tuple(shape)]
    return infer


def _grad_infer(a, s):
    dy = s.known("ograd")
    for name in s.names[1:]:
        s.expect(name, dy, "(the forward value has the gradient's shape)")
    return [dy]


# -- unary ------------------------------------------------------------------------------------------------
# name -> (C expression of x, FLOPs per element, gradient: None = zero (MakeZeroGradNodes), or (which forward
# value it reads: "data" | "output", C expression of dy and that value v))
UNARY = {
    "sign": ("mxcc_sign({x})", 1, None),
    "reciprocal": ("(1.0f / {x})", 1, ("data", "(-{dy} / ({v} * {v}))")),
    "log1p": ("log1pf({x})", 4, ("data", "({dy} / (1.0f + {v}))")),
    "expm1": ("expm1f({x})", 4, ("data", "({dy} * expf({v}))")),
    "erf": ("erff({x})", 4, ("data", "({dy} * 1.12837916709551257f * expf(-{v} * {v}))")),   # 2 / sqrt(pi)
    "floor": ("floorf({x})", 1, None),
    "ceil": ("ceilf({x})", 1, None),
    "round": ("roundf({x})", 1, None),
    "rsqrt": ("(1.0f / sqrtf({x}))", 2, ("data", "(-{dy} / (2.0f * {v} * sqrtf({v})))")),
}


def _unary_grad(name: str):
    rule = UNARY[name][2]
    if rule is None:
        return lambda a, g: {}                       # zero: autodiff fills the input's gradient with zeros

    def grad(a, g):
        v = g.output() if rule[0] == "output" else g.input("data")
        return {"data": g.emit(f"_backward_{name}", [g.ograd(), v])[0]}
    return grad


OPS = {}
for _name, (_expr, _fl, _rule) in UNARY.items():
    OPS[_name] = register(OpDef(
        name=_name, attrs=NoAttrs, inputs=lambda a: ("data",), infer=_same_shape, fusion=Fusion.ELEMWISE,
        flops=elementwise_flops(_fl), inplace=True, grad=_unary_grad(_name),
        c_expr=lambda a, xs, e=_expr: e.format(x=xs[0]), doc=__doc__))
    if _rule is not None:
        register(OpDef(
            name=f"_backward_{_name}", attrs=NoAttrs, inputs=lambda a, r=_rule[0]: ("ograd", r), infer=_grad_infer,
            fusion=Fusion.ELEMWISE, flops=elementwise_flops(_fl + 1), inplace=True,
            c_expr=lambda a, xs, e=_rule[1]: e.format(dy=xs[0], v=xs[1])))


@dataclass(frozen=True)
class HardSigmoidAttrs:
    alpha: float = 0.2
    beta: float = 0.5


def _hard_sigmoid_arg(a: HardSigmoidAttrs, x: str) -> str:
    return f"{c_float(a.alpha)} * {x} + {c_float(a.beta)}"


HARD_SIGMOID = register(OpDef(
    name="hard_sigmoid", attrs=HardSigmoidAttrs, inputs=lambda a: ("data",), infer=_same_shape,
    fusion=Fusion.ELEMWISE, flops=elementwise_flops(4), inplace=True,
    c_expr=lambda a, xs: f"mxcc_clip({_hard_sigmoid_arg(a, xs[0])}, 0.0f, 1.0f)",
    grad=lambda a, g: {"data": g.emit("_backward_hard_sigmoid", [g.ograd(), g.input("data")],
                                      alpha=a.alpha, beta=a.beta)[0]}, doc=__doc__))
register(OpDef(
    name="_backward_hard_sigmoid", attrs=HardSigmoidAttrs, inputs=lambda a: ("ograd", "data"), infer=_grad_infer,
    fusion=Fusion.ELEMWISE, flops=elementwise_flops(6), inplace=True,
    c_expr=lambda a, xs: (f"({_hard_sigmoid_arg(a, xs[1])} > 0.0f && {_hard_sigmoid_arg(a, xs[1])} < 1.0f "
                          f"? {xs[0]} * {c_float(a.alpha)} : 0.0f)")))

# -- binary (same shapes) and scalar ---------------------------------------------------------------------
# name -> (aliases, C expression of a and b, FLOPs per element, (lhs, rhs) gradient of dy, a, b)
BINARY = {
    "_power": (("_Power",), "powf({a}, {b})", 4,
               ("({dy} * powf({a}, {b} - 1.0f) * {b})", "({dy} * powf({a}, {b}) * logf({a}))")),
    "_maximum": (("_Maximum",), "mxcc_maxf({b}, {a})", 1, ("({a} >= {b} ? {dy} : 0.0f)", "({a} < {b} ? {dy} : 0.0f)")),
    "_minimum": (("_Minimum",), "mxcc_minf({b}, {a})", 1, ("({a} <= {b} ? {dy} : 0.0f)", "({a} > {b} ? {dy} : 0.0f)")),
}


@dataclass(frozen=True)
class SideAttrs:
    side: Literal["lhs", "rhs"]       # whose gradient


def _binary_grad(name: str):
    def grad(a, g):
        ins = [g.ograd(), g.input("lhs"), g.input("rhs")]
        return {side: g.emit(f"_backward{name}", ins, side=side, name=f"{g.node.name}_backward_{side}")[0]
                for side in ("lhs", "rhs") if g.needs(side)}
    return grad


for _name, (_aliases, _expr, _fl, _grads) in BINARY.items():
    OPS[_name] = register(OpDef(
        name=_name, aliases=_aliases, attrs=NoAttrs, inputs=lambda a: ("lhs", "rhs"), infer=_same_shapes("lhs", "rhs"),
        fusion=Fusion.ELEMWISE, flops=elementwise_flops(_fl), inplace=True, grad=_binary_grad(_name),
        c_expr=lambda a, xs, e=_expr: e.format(a=xs[0], b=xs[1]), doc=__doc__))
    register(OpDef(
        name=f"_backward{_name}", attrs=SideAttrs, inputs=lambda a: ("ograd", "lhs", "rhs"),
        infer=_grad_infer, fusion=Fusion.ELEMWISE, flops=elementwise_flops(_fl + 1), inplace=True,
        c_expr=lambda a, xs, gs=_grads: gs[a.side == "rhs"].format(dy=xs[0], a=xs[1], b=xs[2])))

# name -> (aliases, C expression of x and s, FLOPs per element, gradient: (reads, C expression of dy, v, s))
SCALAR = {
    "_power_scalar": (("_PowerScalar",), "powf({x}, {s})", 4, ("data", "({dy} * powf({v}, {s} - 1.0f) * {s})")),
    "_rpower_scalar": (("_RPowerScalar",), "powf({s}, {x})", 4, ("output", "({dy} * {v} * logf({s}))")),
    "_maximum_scalar": (("_MaximumScalar",), "mxcc_maxf({s}, {x})", 1, ("data", "({v} >= {s} ? {dy} : 0.0f)")),
    "_minimum_scalar": (("_MinimumScalar",), "mxcc_minf({s}, {x})", 1, ("data", "({v} <= {s} ? {dy} : 0.0f)")),
}


def _scalar_grad(name: str):
    reads = SCALAR[name][3][0]

    def grad(a, g):
        v = g.output() if reads == "output" else g.input("data")
        return {"data": g.emit(f"_backward{name}", [g.ograd(), v], scalar=a.scalar, is_int=a.is_int)[0]}
    return grad


for _name, (_aliases, _expr, _fl, (_reads, _gexpr)) in SCALAR.items():
    OPS[_name] = register(OpDef(
        name=_name, aliases=_aliases, attrs=ScalarAttrs, inputs=lambda a: ("data",), infer=_same_shape,
        fusion=Fusion.ELEMWISE, flops=elementwise_flops(_fl), inplace=True, grad=_scalar_grad(_name),
        c_expr=lambda a, xs, e=_expr: e.format(x=xs[0], s=c_float(a.scalar)), doc=__doc__))
    register(OpDef(
        name=f"_backward{_name}", attrs=ScalarAttrs, inputs=lambda a, r=_reads: ("ograd", r), infer=_grad_infer,
        fusion=Fusion.ELEMWISE, flops=elementwise_flops(_fl + 1), inplace=True,
        c_expr=lambda a, xs, e=_gexpr: e.format(dy=xs[0], v=xs[1], s=c_float(a.scalar))))

# -- broadcast_power ----------------------------------------------------------------------------------------
_BPOW = "powf({a}, {b})"
_BPOW_GRAD = {"lhs": "{dy} * powf({a}, {b} - 1.0f) * {b}", "rhs": "{dy} * powf({a}, {b}) * logf({a})"}


def _bpow_infer(a, s):
    lhs, rhs = s.known("lhs"), s.known("rhs")
    out = broadcast_shape(lhs, rhs)
    if out is None:
        s.fail(f"operands could not be broadcast together with shapes {lhs} {rhs}", input="rhs", got=rhs)
    return [out]


def _bpow_lower(a, ctx):
    lhs, rhs, out = ctx.in_type("lhs").shape, ctx.in_type("rhs").shape, ctx.out_type().shape
    return "kernels/loops.c.j2", elementwise_loop(
        f"out{list(out)} = powf(lhs{list(lhs)}, rhs{list(rhs)}), broadcast", out,
        [("lhs", broadcast_strides(lhs, out)), ("rhs", broadcast_strides(rhs, out))],
        lambda xs: _BPOW.format(a=xs[0], b=xs[1]))


def _bpow_grad(a, g):
    shapes = dict(lhs_shape=g.type_of(g.input("lhs")).shape, rhs_shape=g.type_of(g.input("rhs")).shape)
    ins = [g.ograd(), g.input("lhs"), g.input("rhs")]
    return {side: g.emit("_backward_broadcast_power", ins, side=side, **shapes,
                         name=f"{g.node.name}_backward_{side}")[0]
            for side in ("lhs", "rhs") if g.needs(side)}


BROADCAST_POWER = register(OpDef(
    name="broadcast_power", attrs=NoAttrs, inputs=lambda a: ("lhs", "rhs"), infer=_bpow_infer,
    fusion=Fusion.BROADCAST, flops=elementwise_flops(4), lower=_bpow_lower, grad=_bpow_grad, doc=__doc__))


@dataclass(frozen=True)
class BroadcastPowerBackwardAttrs:
    side: Literal["lhs", "rhs"]
    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]


def _bpow_bwd_lower(a: BroadcastPowerBackwardAttrs, ctx):
    out = ctx.in_type("ograd").shape
    operands = [("ograd", strides(out)), ("lhs", broadcast_strides(a.lhs_shape, out)),
                ("rhs", broadcast_strides(a.rhs_shape, out))]
    target = a.lhs_shape if a.side == "lhs" else a.rhs_shape
    expr = _BPOW_GRAD[a.side]
    return "kernels/reduce.c.j2", reduce_to_vars(
        f"broadcast_power backward, {a.side}{list(target)} = sum over its broadcast of "
        + expr.format(dy="ograd", a="lhs", b="rhs") + f" (ograd{list(out)})",
        out, target, operands, lambda xs: expr.format(dy=xs[0], a=xs[1], b=xs[2]))


register(OpDef(
    name="_backward_broadcast_power", attrs=BroadcastPowerBackwardAttrs, inputs=lambda a: ("ograd", "lhs", "rhs"),
    infer=lambda a, s: [tuple(a.lhs_shape if a.side == "lhs" else a.rhs_shape)], fusion=Fusion.REDUCE,
    flops=lambda a, ins, outs: 6 * prod(ins[0].shape), lower=_bpow_bwd_lower))

# -- where -----------------------------------------------------------------------------------------------------


def _where_infer(a, s):
    x = _same_shapes("x", "y")(a, s)[0]
    c = s.known("condition")
    if tuple(c) != tuple(x) and not (len(c) == 1 and c[0] == x[0]):
        s.fail(f"condition has shape {tuple(c)}, expected x's shape {tuple(x)} or ({x[0]},) (one per row)",
               input="condition", got=tuple(c))
    return [x]


def _condition_strides(c: tuple, x: tuple) -> tuple[int, ...]:
    """The condition read at every index of x: elementwise, or one per row (1-D, stride 0 inside a row)."""
    return strides(x) if tuple(c) == tuple(x) else (1,) + (0,) * (len(x) - 1)


def _where_lower(a, ctx):
    c, x = ctx.in_type("condition").shape, ctx.out_type().shape
    per = "elementwise" if tuple(c) == tuple(x) else "one per row"
    return "kernels/loops.c.j2", elementwise_loop(
        f"out{list(x)} = condition{list(c)} != 0 ? x : y ({per})", x,
        [("condition", _condition_strides(c, x)), ("x", strides(x)), ("y", strides(x))],
        lambda xs: f"({xs[0]} != 0.0f ? {xs[1]} : {xs[2]})")


def _where_grad(a, g):
    ins = [g.ograd(), g.input("condition")]
    return {side: g.emit("_backward_where", ins, side=side, name=f"{g.node.name}_backward_{side}")[0]
            for side in ("x", "y") if g.needs(side)}


WHERE = register(OpDef(
    name="where", attrs=NoAttrs, inputs=lambda a: ("condition", "x", "y"), infer=_where_infer,
    fusion=Fusion.BROADCAST, lower=_where_lower, grad=_where_grad, doc=__doc__))


_WHERE_GRAD = {"x": "({c} != 0.0f ? {dy} : 0.0f)", "y": "({c} != 0.0f ? 0.0f : {dy})"}


@dataclass(frozen=True)
class WhereBackwardAttrs:
    side: Literal["x", "y"]


def _where_bwd_lower(a: WhereBackwardAttrs, ctx):
    c, x = ctx.in_type("condition").shape, ctx.in_type("ograd").shape
    expr = _WHERE_GRAD[a.side]
    return "kernels/loops.c.j2", elementwise_loop(
        f"where backward: {a.side}_grad = " + expr.format(c="condition", dy="ograd"), x,
        [("ograd", strides(x)), ("condition", _condition_strides(c, x))],
        lambda xs: expr.format(dy=xs[0], c=xs[1]))


register(OpDef(
    name="_backward_where", attrs=WhereBackwardAttrs, inputs=lambda a: ("ograd", "condition"),
    infer=lambda a, s: [s.known("ograd")], fusion=Fusion.BROADCAST, lower=_where_bwd_lower))

# -- Cast --------------------------------------------------------------------------------------------------------
# What MXNet's output dtype holds, as float32 values (x86 semantics of MXNet's static_cast, checked with MXNet
# 1.9.1): integers truncate toward zero; int32/int64 give the type's minimum for NaN and values out of range;
# int8/uint8 keep the low 8 bits of the int32 conversion (wrapping: 300 -> 44, -1 -> 255 as uint8); bool is
# x != 0 (NaN: 1); float16 rounds to nearest even (beyond 65504: inf); bfloat16 truncates the low 16 bits of
# the float (mshadow's bf16 conversion). float32/float64 keep the value. Integers beyond 2^24 are rounded to
# float32 by mxcc's float32 output (MXNet's int output holds them exactly).
CAST_DTYPES = Literal["bfloat16", "bool", "float16", "float32", "float64", "int32", "int64", "int8", "uint8"]
_ELEMWISE_CASTS = {"float32": "{x}", "float64": "{x}", "bool": "({x} != 0.0f ? 1.0f : 0.0f)"}
_INT_RANGE = {"int32": 2.0 ** 31, "int64": 2.0 ** 63}


@dataclass(frozen=True)
class CastAttrs:
    dtype: CAST_DTYPES


def cast_value(v: float, dtype: str) -> float:
    """A Python twin of the kernel's conversion, for constants (one_hot's on/off values): the float32 value
    a `dtype` holds after MXNet's static_cast from float32."""
    x = np.float32(v)
    if dtype in ("float32", "float64"):
        return float(x)
    if dtype == "bool":
        return float(x != 0)
    if dtype == "float16":
        with np.errstate(over="ignore"):                 # beyond 65504: inf, as the kernel
            return float(np.float32(np.float16(x)))
    if dtype == "bfloat16":
        bits = np.array([x], np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
        return float(x) if x != x else float(bits.view(np.float32)[0])
    lim = _INT_RANGE.get(dtype, 2.0 ** 31)
    t = int(x) if -lim <= x < lim else -int(lim)        # NaN fails both comparisons
    if dtype == "uint8":
        return float(t & 0xFF)
    if dtype == "int8":
        return float((t & 0xFF) - 256 if t & 0x80 else t & 0xFF)
    return float(np.float32(t))


def _cast_fusion(a: CastAttrs) -> Fusion:
    return Fusion.ELEMWISE if a.dtype in _ELEMWISE_CASTS else Fusion.INJECTIVE


def _cast_lower(a: CastAttrs, ctx):
    n = prod(ctx.out_type().shape)
    lim = _INT_RANGE.get(a.dtype, 2.0 ** 31)
    kind = "int" if a.dtype in _INT_RANGE else "byte" if a.dtype in ("int8", "uint8") else a.dtype
    return "kernels/math_cast.c.j2", dict(
        n=n, dtype=a.dtype, kind=kind,
        lo=c_float(-lim), hi=c_float(lim), signed=a.dtype == "int8", parallel=n >= PARALLEL_MIN_ELEMENTS)


def _cast_grad(a: CastAttrs, g):
    if a.dtype in ("float32", "float64"):
        return {"data": g.ograd()}
    return {"data": g.emit("Cast", [g.ograd()], dtype=a.dtype)[0]}


# a Cast to float32 or float64 changes nothing (mxcc computes in float32): a view, no kernel
CAST = register(OpDef(
    name="Cast", aliases=("cast",), attrs=CastAttrs, inputs=lambda a: ("data",), infer=_same_shape,
    fusion=_cast_fusion, view=lambda a: a.dtype in ("float32", "float64"), inplace=True, lower=_cast_lower,
    grad=_cast_grad,
    flops=lambda a, ins, outs: 0 if a.dtype in ("float32", "float64") else prod(outs[0].shape),
    c_expr=lambda a, xs: _ELEMWISE_CASTS[a.dtype].format(x=xs[0]),
    doc="Cast(dtype): float32 values holding what MXNet's dtype holds (integers truncated, float16 rounded)."))
