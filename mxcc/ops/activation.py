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


# act_type -> (derivative in mxcc_math.h, whether it reads the forward output (else the input))
GRADIENTS = {
    "relu": ("mxcc_relu_grad", True), "sigmoid": ("mxcc_sigmoid_grad", True), "tanh": ("mxcc_tanh_grad", True),
    "softrelu": ("mxcc_softrelu_grad", True), "softsign": ("mxcc_softsign_grad", False),
}


def _grad(a, g):
    fn, uses_output = GRADIENTS[a.act_type]
    other = g.output() if uses_output else g.input("data")
    return {"data": g.emit("_backward_Activation", [g.ograd(), other], act_type=a.act_type)[0]}


def _bwd_inputs(a):
    return ("ograd", "output" if GRADIENTS[a.act_type][1] else "data")


def _bwd_infer(a, s):
    dy = s.known("ograd")
    s.expect(_bwd_inputs(a)[1], dy, "(the forward value has the gradient's shape)")
    return [dy]


ACTIVATION_BACKWARD = register(OpDef(
    name="_backward_Activation", attrs=ActAttrs, inputs=_bwd_inputs, infer=_bwd_infer, fusion=Fusion.ELEMWISE,
    flops=lambda a, ins, outs: elementwise_flops(3)(a, ins, outs), inplace=True,
    c_expr=lambda a, xs: f"{GRADIENTS[a.act_type][0]}({xs[0]}, {xs[1]})"))

ACTIVATION = register(OpDef(
    name="Activation", attrs=ActAttrs, inputs=lambda a: ("data",), infer=_infer, fusion=Fusion.ELEMWISE,
    flops=lambda a, ins, outs: elementwise_flops(ACTIVATIONS[a.act_type][2])(a, ins, outs),
    epilogue=lambda a: EpilogueStep(act=ACTIVATIONS[a.act_type][1]),
    c_expr=lambda a, xs: f"{ACTIVATIONS[a.act_type][0]}({xs[0]})",
    inplace=True, grad=_grad, doc=__doc__))
