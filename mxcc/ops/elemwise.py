"""The trivial elementwise operators, one table row each (tinygrad's `code_for_op`).

Unary: out = f(data). Binary (elemwise_*): lhs and rhs of the same shape. Scalar: data op scalar.
Also clip(a_min, a_max) (a GEMM epilogue step too: relu6 after a convolution is free) and add_n /
ElementWiseSum (num_args inputs of one shape, summed left to right as MXNet does). Every row gives the C expression (runtime_c/mxcc_math.h helpers where it is not a plain operator) and the
FLOPs per element. Lone nodes and chains of them are lowered by the fused elementwise loop (codegen).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from mxcc.ops import register
from mxcc.ops.base import EpilogueStep, Fusion, NoAttrs, OpDef, c_float, check_arity, elementwise_flops



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

# -- gradients ------------------------------------------------------------------------------------------
# unary op -> (which forward value its derivative reads: "data" | "output" | None, C expression of dy and v)
UNARY_GRAD = {
    "relu": ("output", "mxcc_relu_grad({dy}, {v})"),
    "sigmoid": ("output", "mxcc_sigmoid_grad({dy}, {v})"),
    "tanh": ("output", "mxcc_tanh_grad({dy}, {v})"),
    "softsign": ("data", "mxcc_softsign_grad({dy}, {v})"),
    "abs": ("data", "({dy} * mxcc_sign({v}))"),
    "exp": ("output", "({dy} * {v})"),
    "log": ("data", "({dy} / {v})"),
    "sqrt": ("output", "({dy} * 0.5f / {v})"),
    "square": ("data", "(2.0f * {v} * {dy})"),
    "negative": (None, "(-{dy})"),
}


def _grad_infer(a, s):
    dy = s.known("ograd")
    for name in s.names[1:]:
        s.expect(name, dy, "(the forward value has the gradient's shape)")
    return [dy]


for _name, (_reads, _expr) in UNARY_GRAD.items():
    register(OpDef(
        name=f"_backward_{_name}", attrs=NoAttrs,
        inputs=lambda a, r=_reads: ("ograd",) if r is None else ("ograd", r), infer=_grad_infer,
        fusion=Fusion.ELEMWISE, flops=elementwise_flops(2), inplace=True,
        c_expr=lambda a, xs, e=_expr: e.format(dy=xs[0], v=xs[1] if len(xs) > 1 else "")))

# d(a/b)/db = -dy * a / b^2 and d(s/x)/dx = -dy * s / x^2, as single elementwise ops
register(OpDef(
    name="_backward_div_rhs", attrs=NoAttrs, inputs=lambda a: ("ograd", "lhs", "rhs"), infer=_grad_infer,
    fusion=Fusion.ELEMWISE, flops=elementwise_flops(4), inplace=True,
    c_expr=lambda a, xs: f"(-{xs[0]} * {xs[1]} / ({xs[2]} * {xs[2]}))"))
register(OpDef(
    name="_backward_rdiv_scalar", attrs=ScalarAttrs, inputs=lambda a: ("ograd", "data"), infer=_grad_infer,
    fusion=Fusion.ELEMWISE, flops=elementwise_flops(4), inplace=True,
    c_expr=lambda a, xs: f"(-{xs[0]} * {c_float(a.scalar)} / ({xs[1]} * {xs[1]}))"))
register(OpDef(
    name="_zeros_like", attrs=NoAttrs, inputs=lambda a: ("data",), infer=_same_shape,
    fusion=Fusion.ELEMWISE, c_expr=lambda a, xs: "0.0f"))


def _unary_grad(name):
    def grad(a, g):
        reads = UNARY_GRAD[name][0]
        ins = [g.ograd()] + ([] if reads is None else [g.output() if reads == "output" else g.input("data")])
        return {"data": g.emit(f"_backward_{name}", ins)[0]}
    return grad


def _binary_grad(name):
    def grad(a, g):
        dy, lhs, rhs = g.ograd(), g.input("lhs"), g.input("rhs")
        out = {}
        if name in ("elemwise_add", "elemwise_sub"):
            out["lhs"] = dy
            out["rhs"] = dy if name == "elemwise_add" else (g.emit("negative", [dy])[0] if g.needs("rhs") else None)
        elif name == "elemwise_mul":
            out["lhs"] = g.emit("elemwise_mul", [dy, rhs])[0] if g.needs("lhs") else None
            out["rhs"] = g.emit("elemwise_mul", [dy, lhs])[0] if g.needs("rhs") else None
        else:
            out["lhs"] = g.emit("elemwise_div", [dy, rhs])[0] if g.needs("lhs") else None
            out["rhs"] = g.emit("_backward_div_rhs", [dy, lhs, rhs])[0] if g.needs("rhs") else None
        return out
    return grad


def _scalar_grad(name):
    def grad(a, g):
        dy = g.ograd()
        if name in ("_plus_scalar", "_minus_scalar"):
            return {"data": dy}
        if name == "_rminus_scalar":
            return {"data": g.emit("negative", [dy])[0]}
        if name in ("_mul_scalar", "_div_scalar"):
            return {"data": g.emit(name, [dy], scalar=a.scalar)[0]}
        return {"data": g.emit("_backward_rdiv_scalar", [dy, g.input("data")], scalar=a.scalar)[0]}
    return grad


OPS = {}
for _name, (_aliases, _expr, _fl) in UNARY.items():
    OPS[_name] = register(OpDef(
        name=_name, aliases=_aliases, attrs=NoAttrs, inputs=lambda a: ("data",), infer=_same_shape,
        fusion=Fusion.ELEMWISE, flops=elementwise_flops(_fl), inplace=True,
        epilogue=(lambda a, act=EPILOGUE[_name]: EpilogueStep(act=act)) if _name in EPILOGUE else None,
        grad=_unary_grad(_name) if _name in UNARY_GRAD else None,
        c_expr=lambda a, xs, e=_expr: e.format(x=xs[0])))

for _name, (_aliases, _expr, _fl) in BINARY.items():
    OPS[_name] = register(OpDef(
        name=_name, aliases=_aliases, attrs=NoAttrs, inputs=lambda a: ("lhs", "rhs"), infer=_binary_infer,
        fusion=Fusion.ELEMWISE, flops=elementwise_flops(_fl), inplace=True,
        epilogue=(lambda a: EpilogueStep(residual=True)) if _name == "elemwise_add" else None,
        grad=_binary_grad(_name), c_expr=lambda a, xs, e=_expr: e.format(a=xs[0], b=xs[1])))

for _name, (_aliases, _expr) in SCALAR.items():
    OPS[_name] = register(OpDef(
        name=_name, aliases=_aliases, attrs=ScalarAttrs, inputs=lambda a: ("data",), infer=_same_shape,
        fusion=Fusion.ELEMWISE, flops=elementwise_flops(1), inplace=True,
        grad=_scalar_grad(_name), c_expr=lambda a, xs, e=_expr: e.format(x=xs[0], s=c_float(a.scalar))))


@dataclass(frozen=True)
class ClipAttrs:
    a_min: float
    a_max: float


CLIP = register(OpDef(
    name="clip", attrs=ClipAttrs, inputs=lambda a: ("data",), infer=_same_shape, fusion=Fusion.ELEMWISE,
    flops=elementwise_flops(2), inplace=True,
    c_expr=lambda a, xs: f"mxcc_clip({xs[0]}, {c_float(a.a_min)}, {c_float(a.a_max)})",
    epilogue=lambda a: EpilogueStep(act="MXCC_ACT_CLIP", lo=a.a_min, hi=a.a_max),
    grad=lambda a, g: {"data": g.emit("_backward_clip", [g.ograd(), g.input("data")], a_min=a.a_min,
                                      a_max=a.a_max)[0]}))
# MXNet's clip gradient: ograd inside [a_min, a_max] (bounds included), 0 outside
register(OpDef(
    name="_backward_clip", attrs=ClipAttrs, inputs=lambda a: ("ograd", "data"), infer=_grad_infer,
    fusion=Fusion.ELEMWISE, flops=elementwise_flops(2), inplace=True,
    c_expr=lambda a, xs: f"({xs[1]} < {c_float(a.a_min)} || {xs[1]} > {c_float(a.a_max)} ? 0.0f : {xs[0]})"))


@dataclass(frozen=True)
class AddNAttrs:
    num_args: int

    def __post_init__(self):
        check_arity("num_args", self.num_args)


def _add_n_inputs(a: AddNAttrs) -> tuple[str, ...]:
    return tuple(f"arg{i}" for i in range(a.num_args))


def _add_n_infer(a: AddNAttrs, s):
    names = _add_n_inputs(a)
    known = [s.maybe(n) for n in names]
    shape = next((k for k in known if k is not None), None)
    if shape is None:
        s.known(names[0])
    for n in names:
        s.expect(n, shape, "(add_n operands must have the same shape)")
    return [tuple(shape)]


ADD_N = register(OpDef(
    name="add_n", aliases=("ElementWiseSum",), attrs=AddNAttrs, inputs=_add_n_inputs, infer=_add_n_infer,
    fusion=Fusion.ELEMWISE, flops=lambda a, ins, outs: (a.num_args - 1) * prod(outs[0].shape), inplace=True,
    grad=lambda a, g: {n: g.ograd() for n in _add_n_inputs(a)},
    c_expr=lambda a, xs: "(" + " + ".join(xs) + ")"))
