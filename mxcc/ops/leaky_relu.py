"""LeakyReLU(act_type): leaky, prelu, elu, selu, gelu and rrelu (inference), MXNet 1.9 semantics.

- leaky: x > 0 ? x : slope * x. ELEMWISE; also a GEMM epilogue step (MXCC_ACT_LEAKY) after an ANCHOR.
- elu: x > 0 ? x : slope * expm1(x); selu: lambda * (x > 0 ? x : alpha * expm1(x)); gelu: the erf form
  0.5 x (1 + erf(x / sqrt 2)). ELEMWISE (helpers in runtime_c/mxcc_math.h).
- prelu: x > 0 ? x : gamma * x with a learned gamma of shape (1,) (one slope) or (C,) (per channel, axis 1).
  BROADCAST: a loop nest reading gamma with stride 0 outside the channel axis.
- rrelu at inference: leaky with slope (lower_bound + upper_bound) / 2. It has MXNet's two outputs,
  `output` and `mask`; MXNet leaves the mask uninitialised at inference, mxcc fills it with that slope.
Gradients: `_backward_LeakyReLU` (elementwise) from the output for leaky (slope >= 0), elu and selu, from
the input for gelu and a negative leaky slope; prelu's are `_backward_prelu`: the data gradient (a broadcast
loop) and gamma's (summed over everything but gamma's axis). selu's is the true derivative (MXNet 1.9.1's is
wrong for x < 0). rrelu: a training graph runs `_train_LeakyReLU` (passes/train_mode.py): a slope per element
drawn from U(lower_bound, upper_bound) with the context's RNG (as Dropout's mask), kept in the `mask` output
for the backward; the plain op's gradient is the inference one (the mean slope).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

from mxcc.ops import register
from mxcc.ops._util import broadcast_strides, elementwise_loop, loops_vars, reduce_to_vars, rng_stream, strides
from mxcc.ops.base import EpilogueStep, Fusion, NoAttrs, OpDef, c_float, elementwise_flops


@dataclass(frozen=True)
class LeakyReLUAttrs:
    act_type: Literal["elu", "gelu", "leaky", "prelu", "rrelu", "selu"] = "leaky"
    slope: float = 0.25
    lower_bound: float = 0.125
    upper_bound: float = 0.334


# act_type -> (C expression of x and the attrs, FLOPs per element)
EXPRS = {
    "leaky": (lambda x, a: f"mxcc_leaky({x}, {c_float(a.slope)})", 2),
    "elu": (lambda x, a: f"mxcc_elu({x}, {c_float(a.slope)})", 5),
    "selu": (lambda x, a: f"mxcc_selu({x})", 6),
    "gelu": (lambda x, a: f"mxcc_gelu({x})", 10),
    "prelu": (None, 2),
    "rrelu": (None, 2),
}


def _rrelu_slope(a: LeakyReLUAttrs) -> float:
    return (a.lower_bound + a.upper_bound) / 2


def _fusion(a: LeakyReLUAttrs) -> Fusion:
    return {"prelu": Fusion.BROADCAST, "rrelu": Fusion.OPAQUE}.get(a.act_type, Fusion.ELEMWISE)


def _infer(a: LeakyReLUAttrs, s):
    x = s.known("data")
    if a.act_type == "prelu":
        g = s.maybe("gamma")
        if g is None:
            if len(x) < 2:
                s.fail(f"prelu needs data with a channel axis to infer gamma's shape, got {x}", input="data")
            s.expect("gamma", (x[1],), "(one slope per channel of axis 1)")
        elif prod(g) != 1 and (len(x) < 2 or tuple(g) != (x[1],)):
            s.fail(f"input 'gamma' has shape {tuple(g)}, expected (1,) or ({x[1] if len(x) > 1 else 'C'},) "
                   f"for data {x}", input="gamma", got=tuple(g))
    return [x, x] if a.act_type == "rrelu" else [x]


def _lower(a: LeakyReLUAttrs, ctx):
    x = ctx.in_type("data").shape
    if a.act_type == "prelu":
        g = ctx.in_type("gamma").shape
        g_strides = (0,) * len(x) if prod(g) == 1 else broadcast_strides((1, x[1]) + (1,) * (len(x) - 2), x)
        return "kernels/loops.c.j2", elementwise_loop(
            f"prelu: out = data > 0 ? data : gamma * data, gamma{list(g)} per {'tensor' if prod(g) == 1 else 'channel'}",
            x, [("data", strides(x)), ("gamma", g_strides)], lambda xs: f"mxcc_leaky({xs[0]}, {xs[1]})")
    s = c_float(_rrelu_slope(a))             # rrelu: the output and the constant "mask" of slopes
    n = prod(x)
    return "kernels/loops.c.j2", loops_vars(
        f"rrelu at inference: out0 = leaky(data, slope {s}); out1 (mask) = slope", (n,),
        lambda v: [f"out0[{v[0]}] = mxcc_leaky(data[{v[0]}], {s})", f"out1[{v[0]}] = {s}"])


def _epilogue(a: LeakyReLUAttrs):
    return EpilogueStep(act="MXCC_ACT_LEAKY", alpha=a.slope) if a.act_type == "leaky" else None


# act_type -> (forward value the derivative reads, C expression of dy, that value v and the attrs)
GRADIENTS = {
    "leaky": (lambda a: "output" if a.slope >= 0 else "data", lambda dy, v, a: f"mxcc_leaky_grad({dy}, {v}, {c_float(a.slope)})"),
    "elu": (lambda a: "output", lambda dy, v, a: f"mxcc_elu_grad({dy}, {v}, {c_float(a.slope)})"),
    "selu": (lambda a: "output", lambda dy, v, a: f"mxcc_selu_grad({dy}, {v})"),
    "gelu": (lambda a: "data", lambda dy, v, a: f"mxcc_gelu_grad({dy}, {v})"),
}


def _grad(a: LeakyReLUAttrs, g):
    if a.act_type == "rrelu":         # inference mode: leaky with the mean slope
        a = LeakyReLUAttrs(act_type="leaky", slope=_rrelu_slope(a))
    if a.act_type == "prelu":
        x, gamma = g.type_of(g.input("data")).shape, g.type_of(g.input("gamma")).shape
        ins = [g.ograd(), g.input("data"), g.input("gamma")]
        return {side: g.emit("_backward_prelu", ins, side=side, data_shape=x, gamma_shape=gamma,
                             name=f"{g.node.name}_backward_{side}")[0] for side in ("data", "gamma") if g.needs(side)}
    reads = GRADIENTS[a.act_type][0](a)
    other = g.output() if reads == "output" else g.input("data")
    attrs = {k: getattr(a, k) for k in ("act_type", "slope", "lower_bound", "upper_bound")}
    return {"data": g.emit("_backward_LeakyReLU", [g.ograd(), other], **attrs)[0]}


LEAKY_RELU_BACKWARD = register(OpDef(
    name="_backward_LeakyReLU", attrs=LeakyReLUAttrs, inputs=lambda a: ("ograd", GRADIENTS[a.act_type][0](a)),
    infer=lambda a, s: [s.known("ograd")], fusion=Fusion.ELEMWISE, flops=elementwise_flops(3), inplace=True,
    c_expr=lambda a, xs: GRADIENTS[a.act_type][1](xs[0], xs[1], a)))


@dataclass(frozen=True)
class PReLUBackwardAttrs:
    side: str                      # data | gamma: whose gradient
    data_shape: tuple[int, ...]
    gamma_shape: tuple[int, ...]


def _prelu_bwd_lower(a: PReLUBackwardAttrs, ctx):
    x, gshape = tuple(a.data_shape), tuple(a.gamma_shape)
    per_channel = prod(gshape) != 1
    target = (1, x[1]) + (1,) * (len(x) - 2) if per_channel else (1,) * len(x)
    g_strides = broadcast_strides(target, x)
    ops = [("ograd", strides(x)), ("data", strides(x)), ("gamma", g_strides)]
    if a.side == "data":
        return "kernels/loops.c.j2", elementwise_loop(
            f"prelu backward: out = data > 0 ? ograd : gamma * ograd, gamma{list(gshape)}", x, ops,
            lambda v: f"({v[1]} > 0.0f ? {v[0]} : {v[2]} * {v[0]})")
    return "kernels/reduce.c.j2", reduce_to_vars(
        f"prelu backward: gamma{list(gshape)} = sum of (data > 0 ? 0 : data) * ograd over data{list(x)}",
        x, target, ops[:2], lambda v: f"({v[1]} > 0.0f ? 0.0f : {v[1]} * {v[0]})")


PRELU_BACKWARD = register(OpDef(
    name="_backward_prelu", attrs=PReLUBackwardAttrs, inputs=lambda a: ("ograd", "data", "gamma"),
    infer=lambda a, s: [tuple(a.data_shape if a.side == "data" else a.gamma_shape)],
    fusion=lambda a: Fusion.BROADCAST if a.side == "data" else Fusion.REDUCE,
    flops=lambda a, ins, outs: 2 * prod(ins[0].shape), lower=_prelu_bwd_lower))


def _rrelu_train_lower(a: LeakyReLUAttrs, ctx):
    n = prod(ctx.in_type("data").shape)
    lo, width = c_float(a.lower_bound), c_float(a.upper_bound - a.lower_bound)

    def body(v):
        i = v[0]
        return [f"const float s = {lo} + {width} * mxcc_rng_uniform(key, {i})", f"out1[{i}] = s",
                f"out0[{i}] = data[{i}] > 0.0f ? data[{i}] : s * data[{i}]"]
    return "kernels/random_loops.c.j2", dict(stream=rng_stream(ctx.node), **loops_vars(
        f"rrelu in training: slope (out1, the mask) ~ U({a.lower_bound}, {a.upper_bound}) per element, "
        f"out0 = data > 0 ? data : slope * data", (n,), body))


TRAIN_LEAKY_RELU = register(OpDef(
    name="_train_LeakyReLU", attrs=LeakyReLUAttrs, inputs=lambda a: ("data",), infer=_infer,
    output_names=lambda a: ("output", "mask"), fusion=Fusion.OPAQUE, lower=_rrelu_train_lower, random=True,
    flops=lambda a, ins, outs: 3 * prod(outs[0].shape),
    grad=lambda a, g: {"data": g.emit("_backward_rrelu", [g.ograd(), g.input("data"), g.output(1)])[0]},
    doc=__doc__))



RRELU_BACKWARD = register(OpDef(
    name="_backward_rrelu", attrs=NoAttrs, inputs=lambda a: ("ograd", "data", "mask"),
    infer=lambda a, s: [s.known("ograd")], fusion=Fusion.ELEMWISE, flops=elementwise_flops(2), inplace=True,
    c_expr=lambda a, xs: f"({xs[1]} > 0.0f ? {xs[0]} : {xs[2]} * {xs[0]})"))


LEAKY_RELU = register(OpDef(
    name="LeakyReLU", attrs=LeakyReLUAttrs,
    inputs=lambda a: ("data", "gamma") if a.act_type == "prelu" else ("data",),
    output_names=lambda a: ("output", "mask") if a.act_type == "rrelu" else ("output",),
    infer=_infer, fusion=_fusion, lower=_lower, epilogue=_epilogue,
    c_expr=lambda a, xs: EXPRS[a.act_type][0](xs[0], a),
    flops=lambda a, ins, outs: EXPRS[a.act_type][1] * prod(outs[0].shape),
    inplace=True, grad=_grad, train_op=lambda a: "_train_LeakyReLU" if a.act_type == "rrelu" else None,
    doc=__doc__))
