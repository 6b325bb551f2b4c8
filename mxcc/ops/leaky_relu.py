"""LeakyReLU(act_type): leaky, prelu, elu, selu, gelu and rrelu (inference), MXNet 1.9 semantics.

- leaky: x > 0 ? x : slope * x. ELEMWISE; also a GEMM epilogue step (MXCC_ACT_LEAKY) after an ANCHOR.
- elu: x > 0 ? x : slope * expm1(x); selu: lambda * (x > 0 ? x : alpha * expm1(x)); gelu: the erf form
  0.5 x (1 + erf(x / sqrt 2)). ELEMWISE (helpers in runtime_c/mxcc_math.h).
- prelu: x > 0 ? x : gamma * x with a learned gamma of shape (1,) (one slope) or (C,) (per channel, axis 1).
  BROADCAST: a loop nest reading gamma with stride 0 outside the channel axis.
- rrelu at inference: leaky with slope (lower_bound + upper_bound) / 2. It has MXNet's two outputs,
  `output` and `mask`; MXNet leaves the mask uninitialised at inference, mxcc fills it with that slope.
TODO(6): training (rrelu's random slopes, gradients).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

from mxcc.ops import register
from mxcc.ops._util import broadcast_strides, elementwise_loop, loops_vars, strides
from mxcc.ops.base import EpilogueStep, Fusion, OpDef, c_float


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


def _lower(a: LeakyReLUAttrs, k):
    x = k.in_type("data").shape
    if a.act_type == "prelu":
        g = k.in_type("gamma").shape
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


LEAKY_RELU = register(OpDef(
    name="LeakyReLU", attrs=LeakyReLUAttrs,
    inputs=lambda a: ("data", "gamma") if a.act_type == "prelu" else ("data",),
    output_names=lambda a: ("output", "mask") if a.act_type == "rrelu" else ("output",),
    infer=_infer, fusion=_fusion, lower=_lower, epilogue=_epilogue,
    c_expr=lambda a, xs: EXPRS[a.act_type][0](xs[0], a),
    flops=lambda a, ins, outs: EXPRS[a.act_type][1] * prod(outs[0].shape),
    inplace=True, doc=__doc__))
