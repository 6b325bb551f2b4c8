"""Loss heads: LinearRegressionOutput, MAERegressionOutput, LogisticRegressionOutput, MakeLoss, make_loss.

Their forward is the identity (Linear, MAE, MakeLoss: views) or a sigmoid (Logistic: ELEMWISE); the label
is read only by training. Label shape as MXNet's RegressionOpShape: the data's shape, or (N,) for data
(N, 1). Training: each is a loss head (no head gradient; its backward ignores any) with MXNet's gradient:
  regression  (out - label) * grad_scale / num_output (MAE: sign(out - label)), num_output = label.size / N
  MakeLoss    grad_scale / norm everywhere: norm 1 (null), N (batch), or the count of outputs > valid_thresh
              (valid, at least 1)
  make_loss   ones
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

from mxcc.ops import register
from mxcc.ops.base import Fusion, NoAttrs, OpDef, c_float, elementwise_flops


@dataclass(frozen=True)
class RegressionAttrs:
    grad_scale: float = 1.0


@dataclass(frozen=True)
class MakeLossAttrs:
    grad_scale: float = 1.0
    valid_thresh: float = 0.0
    normalization: Literal["null", "batch", "valid"] = "null"



def _regression_infer(a, s):
    x = s.known("data")
    label = s.maybe("label")
    if label is None:
        s.expect("label", (x[0],) if len(x) == 2 and x[1] == 1 else x)
    elif label[0] != x[0] or prod(label) != prod(x):
        s.fail(f"input 'label' has shape {tuple(label)}, expected {x} (the data's shape)", input="label",
               expected=x, got=tuple(label))
    return [x]


# forward op -> the gradient's C expression of the output o, the label l and the scale s
REGRESSION_GRAD = {"LinearRegressionOutput": "({o} - {l}) * {s}", "MAERegressionOutput": "mxcc_sign({o} - {l}) * {s}",
                   "LogisticRegressionOutput": "({o} - {l}) * {s}"}


def _regression_grad(name: str):
    def grad(a: RegressionAttrs, g):
        label = g.type_of(g.input("label")).shape
        scale = a.grad_scale / (prod(label) // label[0])
        return {"data": g.emit("_backward_regression", [g.output(), g.input("label")], head=name, scale=scale)[0]}
    return grad


def _regression(name: str, doc: str, **kw) -> OpDef:
    return register(OpDef(name=name, attrs=RegressionAttrs, inputs=lambda a: ("data", "label"),
                          labels=("label",), infer=_regression_infer, doc=doc, loss=True,
                          grad=_regression_grad(name), **kw))


@dataclass(frozen=True)
class RegressionBackwardAttrs:
    head: str
    scale: float


def _regression_bwd_infer(a, s):
    out = s.known("output")
    if prod(s.known("label")) != prod(out):
        s.fail(f"label {s.known('label')} does not hold one value per output {out}", input="label")
    return [out]


REGRESSION_BACKWARD = register(OpDef(
    name="_backward_regression", attrs=RegressionBackwardAttrs, inputs=lambda a: ("output", "label"),
    infer=_regression_bwd_infer, fusion=Fusion.ELEMWISE, flops=elementwise_flops(2),
    c_expr=lambda a, xs: REGRESSION_GRAD[a.head].format(o=xs[0], l=xs[1], s=c_float(a.scale))))


LINEAR_REGRESSION = _regression("LinearRegressionOutput", "Least-squares head: the identity forward (a view).",
                                fusion=Fusion.INJECTIVE, view=True)
MAE_REGRESSION = _regression("MAERegressionOutput", "L1 head: the identity forward (a view).",
                             fusion=Fusion.INJECTIVE, view=True)
LOGISTIC_REGRESSION = _regression("LogisticRegressionOutput", "Logistic head: sigmoid(data) forward.",
                                  fusion=Fusion.ELEMWISE, c_expr=lambda a, xs: f"mxcc_sigmoid({xs[0]})",
                                  flops=elementwise_flops(4), inplace=True)
def _make_loss_grad(a: MakeLossAttrs, g):
    return {"data": g.emit("_backward_MakeLoss", [g.output()], grad_scale=a.grad_scale, valid_thresh=a.valid_thresh,
                           normalization=a.normalization)[0]}


MAKE_LOSS = register(OpDef(
    name="MakeLoss", attrs=MakeLossAttrs, inputs=lambda a: ("data",), infer=lambda a, s: [s.known("data")],
    fusion=Fusion.INJECTIVE, view=True, loss=True, grad=_make_loss_grad,
    doc="MakeLoss: the identity forward (a view); its input is the loss."))
MAKE_LOSS_FN = register(OpDef(
    name="make_loss", attrs=NoAttrs, inputs=lambda a: ("data",), infer=lambda a, s: [s.known("data")],
    fusion=Fusion.INJECTIVE, view=True, loss=True,
    grad=lambda a, g: {"data": g.emit("_backward_MakeLoss", [g.output()])[0]},
    doc="make_loss: the identity forward (a view); its gradient is ones."))


def _make_loss_bwd_lower(a: MakeLossAttrs, ctx):
    y = ctx.in_type("output").shape
    norm = {"null": 1, "batch": y[0], "valid": None}[a.normalization]
    return "kernels/loss_fill.c.j2", dict(
        n=prod(y), grad_scale=c_float(a.grad_scale), norm=norm, valid_thresh=c_float(a.valid_thresh),
        what=f"MakeLoss backward: grad_scale {a.grad_scale} / "
             + ("the count of outputs > valid_thresh" if norm is None else str(norm)) + f" everywhere ({list(y)})")


MAKE_LOSS_BACKWARD = register(OpDef(
    name="_backward_MakeLoss", attrs=MakeLossAttrs, inputs=lambda a: ("output",), infer=lambda a, s: [s.known("output")],
    fusion=Fusion.OPAQUE, lower=_make_loss_bwd_lower))
