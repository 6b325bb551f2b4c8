"""BatchNorm (inference): normalize with the moving statistics, per channel of `axis`.

    out = (data - moving_mean) / sqrt(moving_var + eps) * gamma + beta     (gamma := 1 when fix_gamma)

MXNet defaults: eps=1e-3, fix_gamma=True, axis=1. moving_mean/moving_var are auxiliary states (`aux:` in
the params). Training-mode batch statistics and the moving-average update are TODO(6); at inference
use_global_stats and momentum change nothing.

Outputs: MXNet lists three (output, mean, var); the last two are hidden unless output_mean_var, in which
case they hold what MXNet returns at inference: the moving mean and 1 / sqrt(moving_var + eps).
A kernel of its own for now (kernels/batch_norm.c.j2); TODO(4): fold into the preceding convolution.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Optional

from mxcc.ops import register
from mxcc.ops.base import Fusion, OpDef, c_float

PARALLEL_MIN_ELEMENTS = 1 << 15


@dataclass(frozen=True)
class BNAttrs:
    eps: float = 1e-3
    momentum: float = 0.9
    fix_gamma: bool = True
    use_global_stats: bool = False
    output_mean_var: bool = False
    axis: int = 1
    min_calib_range: Optional[float] = None
    max_calib_range: Optional[float] = None

    IGNORED = ("cudnn_off",)

    def __post_init__(self):
        if not self.eps > 0:
            raise ValueError(f"eps must be positive, got {self.eps}")


INPUTS = ("data", "gamma", "beta", "moving_mean", "moving_var")


def _axis(a: BNAttrs, x: tuple, s) -> int:
    ax = a.axis + len(x) if a.axis < 0 else a.axis
    if not 0 <= ax < len(x):
        s.fail(f"axis={a.axis} is out of range for data of shape {x}", input="data")
    return ax


def _infer(a: BNAttrs, s):
    x = s.known("data")
    c = x[_axis(a, x, s)]
    for name in INPUTS[1:]:
        s.expect(name, (c,), f"(one per channel of axis {a.axis}: {c})")
    return [x, (c,), (c,)]


def _flops(a: BNAttrs, ins, outs):
    return 3 * prod(outs[0].shape)


def _lower(a: BNAttrs, k):
    x = k.in_type("data").shape
    ax = a.axis % len(x)
    outer, c, inner = prod(x[:ax]), x[ax], prod(x[ax + 1:])
    return "kernels/batch_norm.c.j2", dict(
        what=f"data viewed as ({outer}, {c}, {inner}), channel axis {ax}, eps {a.eps}"
             f"{', fix_gamma (gamma := 1)' if a.fix_gamma else ''}",
        rows=outer * c, channels=c, inner=inner, eps=c_float(a.eps), fix_gamma=a.fix_gamma,
        mean_var=a.output_mean_var, parallel=prod(x) >= PARALLEL_MIN_ELEMENTS and outer * c > 1,
    )


BATCH_NORM = register(OpDef(
    name="BatchNorm", attrs=BNAttrs, inputs=lambda a: INPUTS, aux=lambda a: ("moving_mean", "moving_var"),
    infer=_infer, fusion=Fusion.OPAQUE, flops=_flops, lower=_lower,
    output_names=lambda a: ("output", "mean", "var"), hidden_outputs=lambda a: 0 if a.output_mean_var else 2,
    doc=__doc__))
