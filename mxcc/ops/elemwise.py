"""The trivial elementwise operators, one table row each (tinygrad's `code_for_op`).

Unary: out = f(data). Binary (elemwise_*): lhs and rhs of the same shape. Scalar: data op scalar.
Every row gives the C expression (runtime_c/mxcc_math.h helpers where it is not a plain operator) and the
FLOPs per element. Lone nodes and chains of them are lowered by the fused elementwise loop (codegen).
"""
from __future__ import annotations

from dataclasses import dataclass

from mxcc.ops import register
from mxcc.ops.base import EpilogueStep, Fusion, OpDef, c_float, elementwise_flops


@dataclass(frozen=True)
class NoAttrs:
    pass


@dataclass(frozen=True)
class ScalarAttrs:
    scalar: float = 1.0
    is_int: bool = False      # MXNet 1.9 records whether the Python scalar was an int; the math is float32


def _same_shape(a, s):
    return [s.known("data")]


def _binary_infer(a, s):
    lhs, rhs = s.maybe("lhs"), s.maybe("rhs")
    if lhs is None and rhs is None:
        s.known("lhs")
    shape = lhs if lhs is not None else rhs
    s.expect("lhs", shape, "(elementwise operands must have the same shape)")
    s.expect("rhs", shape, "(elementwise operands must have the same shape)")
    return [shape]


# name -> (aliases, C expression of x, FLOPs per element)
UNARY = {
    "relu": ((), "mxcc_relu({x})", 1),
    "sigmoid": ((), "mxcc_sigmoid({x})", 4),
    "tanh": ((), "mxcc_tanh({x})", 4),
    "softsign": ((), "mxcc_softsign({x})", 3),
    "abs": ((), "fabsf({x})", 1),
    "exp": ((), "expf({x})", 4),
    "log": ((), "logf({x})", 4),
    "sqrt": ((), "sqrtf({x})", 1),
    "square": ((), "({x} * {x})", 1),
    "negative": ((), "(-{x})", 1),
}

# name -> (aliases, C expression of a and b, FLOPs per element)
BINARY = {
    "elemwise_add": (("_Plus", "_plus", "_add"), "({a} + {b})", 1),
    "elemwise_sub": (("_Minus", "_minus", "_sub"), "({a} - {b})", 1),
    "elemwise_mul": (("_Mul", "_mul"), "({a} * {b})", 1),
    "elemwise_div": (("_Div", "_div"), "({a} / {b})", 1),
}

# name -> (aliases, C expression of x and scalar s)
SCALAR = {
    "_plus_scalar": (("_PlusScalar",), "({x} + {s})"),
    "_minus_scalar": (("_MinusScalar",), "({x} - {s})"),
    "_rminus_scalar": (("_RMinusScalar",), "({s} - {x})"),
    "_mul_scalar": (("_MulScalar",), "({x} * {s})"),
    "_div_scalar": (("_DivScalar",), "({x} / {s})"),
    "_rdiv_scalar": (("_RDivScalar",), "({s} / {x})"),
}

# unary ops a GEMM epilogue can apply (runtime_c/gemm/mxcc_gemm.h)
EPILOGUE = {"relu": "MXCC_ACT_RELU", "sigmoid": "MXCC_ACT_SIGMOID", "tanh": "MXCC_ACT_TANH",
            "softsign": "MXCC_ACT_SOFTSIGN"}

OPS = {}
for _name, (_aliases, _expr, _fl) in UNARY.items():
    OPS[_name] = register(OpDef(
        name=_name, aliases=_aliases, attrs=NoAttrs, inputs=lambda a: ("data",), infer=_same_shape,
        fusion=Fusion.ELEMWISE, flops=elementwise_flops(_fl), inplace=True,
        epilogue=(lambda a, act=EPILOGUE[_name]: EpilogueStep(act=act)) if _name in EPILOGUE else None,
        c_expr=lambda a, xs, e=_expr: e.format(x=xs[0])))

for _name, (_aliases, _expr, _fl) in BINARY.items():
    OPS[_name] = register(OpDef(
        name=_name, aliases=_aliases, attrs=NoAttrs, inputs=lambda a: ("lhs", "rhs"), infer=_binary_infer,
        fusion=Fusion.ELEMWISE, flops=elementwise_flops(_fl), inplace=True,
        epilogue=(lambda a: EpilogueStep(residual=True)) if _name == "elemwise_add" else None,
        c_expr=lambda a, xs, e=_expr: e.format(a=xs[0], b=xs[1])))

for _name, (_aliases, _expr) in SCALAR.items():
    OPS[_name] = register(OpDef(
        name=_name, aliases=_aliases, attrs=ScalarAttrs, inputs=lambda a: ("data",), infer=_same_shape,
        fusion=Fusion.ELEMWISE, flops=elementwise_flops(1), inplace=True,
        c_expr=lambda a, xs, e=_expr: e.format(x=xs[0], s=c_float(a.scalar))))
