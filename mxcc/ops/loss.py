"""Loss heads at inference: LinearRegressionOutput, MAERegressionOutput, LogisticRegressionOutput, MakeLoss.

Their forward is the identity (Linear, MAE, MakeLoss: views) or a sigmoid (Logistic: ELEMWISE); the label
is read only by training. Label shape as MXNet's RegressionOpShape: the data's shape, or (N,) for data
(N, 1). TODO(6): their gradients (grad_scale, MakeLoss normalization).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

from mxcc.ops import register
from mxcc.ops.base import Fusion, OpDef, elementwise_flops


@dataclass(frozen=True)
class RegressionAttrs:
    grad_scale: float = 1.0


@dataclass(frozen=True)
class MakeLossAttrs:
    grad_scale: float = 1.0
    valid_thresh: float = 0.0
    normalization: Literal["null", "batch", "valid"] = "null"


@dataclass(frozen=True)
class NoAttrs:
    pass


def _regression_infer(a, s):
    x = s.known("data")
    label = s.maybe("label")
    if label is None:
        s.expect("label", (x[0],) if len(x) == 2 and x[1] == 1 else x)
    elif label[0] != x[0] or prod(label) != prod(x):
        s.fail(f"input 'label' has shape {tuple(label)}, expected {x} (the data's shape)", input="label",
               expected=x, got=tuple(label))
    return [x]


def _regression(name: str, doc: str, **kw) -> OpDef:
    return register(OpDef(name=name, attrs=RegressionAttrs, inputs=lambda a: ("data", "label"),
                          labels=("label",), infer=_regression_infer, doc=doc, **kw))


LINEAR_REGRESSION = _regression("LinearRegressionOutput", "Least-squares head: the identity forward (a view).",
                                fusion=Fusion.INJECTIVE, view=True)
MAE_REGRESSION = _regression("MAERegressionOutput", "L1 head: the identity forward (a view).",
                             fusion=Fusion.INJECTIVE, view=True)
LOGISTIC_REGRESSION = _regression("LogisticRegressionOutput", "Logistic head: sigmoid(data) forward.",
                                  fusion=Fusion.ELEMWISE, c_expr=lambda a, xs: f"mxcc_sigmoid({xs[0]})",
                                  flops=elementwise_flops(4), inplace=True)
MAKE_LOSS = register(OpDef(
    name="MakeLoss", attrs=MakeLossAttrs, inputs=lambda a: ("data",), infer=lambda a, s: [s.known("data")],
    fusion=Fusion.INJECTIVE, view=True, doc="MakeLoss: the identity forward (a view); its input is the loss."))
MAKE_LOSS_FN = register(OpDef(
    name="make_loss", attrs=NoAttrs, inputs=lambda a: ("data",), infer=lambda a, s: [s.known("data")],
    fusion=Fusion.INJECTIVE, view=True, doc="make_loss: the identity forward (a view)."))
