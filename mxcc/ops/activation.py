"""Activation(act_type): relu, sigmoid, tanh, softrelu, softsign, elementwise.

Each type is one row: its C expression (scalar helpers in runtime_c/mxcc_math.h, shared with the GEMM
epilogue so fused and unfused results agree bit for bit) and its GEMM-epilogue code.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mxcc.ops import register
from mxcc.ops.base import EpilogueStep, Fusion, OpDef, elementwise_flops

# act_type -> (C function in mxcc_math.h, epilogue enum, FLOPs per element)
ACTIVATIONS = {
    "relu": ("mxcc_relu", "MXCC_ACT_RELU", 1),
    "sigmoid": ("mxcc_sigmoid", "MXCC_ACT_SIGMOID", 4),
    "tanh": ("mxcc_tanh", "MXCC_ACT_TANH", 4),
    "softrelu": ("mxcc_softrelu", "MXCC_ACT_SOFTRELU", 4),
    "softsign": ("mxcc_softsign", "MXCC_ACT_SOFTSIGN", 3),
}


@dataclass(frozen=True)
class ActAttrs:
    act_type: Literal["relu", "sigmoid", "tanh", "softrelu", "softsign"]


def _infer(a, s):
    return [s.known("data")]


ACTIVATION = register(OpDef(
    name="Activation", attrs=ActAttrs, inputs=lambda a: ("data",), infer=_infer, fusion=Fusion.ELEMWISE,
    flops=lambda a, ins, outs: elementwise_flops(ACTIVATIONS[a.act_type][2])(a, ins, outs),
    epilogue=lambda a: EpilogueStep(act=ACTIVATIONS[a.act_type][1]),
    c_expr=lambda a, xs: f"{ACTIVATIONS[a.act_type][0]}({xs[0]})",
    inplace=True, doc=__doc__))
