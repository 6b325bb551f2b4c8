"""LRN: local response normalization across channels (AlexNet), MXNet's lrn-inl.h formula.

    out[n, c] = data[n, c] * (knorm + alpha / nsize * sum_{|j - c| <= nsize // 2} data[n, j]^2) ^ (-beta)

The channel window is clipped at the edges. MXNet lists a second output (`tmp_norm`, the normalizer,
hidden); mxcc counts it and never stores it. Lowered to kernels/lrn.c.j2, parallel over (n, c) planes.
Backward (`_backward_LRN`, MXNet's formula with the normalizer s recomputed from data):
    ddata_j = ograd_j s_j^-beta - 2 alpha beta / nsize * data_j * sum_{c: |c - j| <= nsize // 2} ograd_c data_c s_c^(-beta - 1)
two passes over the planes, the per-element s^-beta and ograd * data * s^(-beta-1) kept in the workspace.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from mxcc.ops import register
from mxcc.ops.base import Fusion, OpDef, c_float

PARALLEL_MIN_ELEMENTS = 1 << 15


@dataclass(frozen=True)
class LRNAttrs:
    nsize: int
    alpha: float = 1e-4
    beta: float = 0.75
    knorm: float = 2.0

    def __post_init__(self):
        if self.nsize <= 0 or self.nsize % 2 == 0:
            raise ValueError(f"nsize must be a positive odd number, got {self.nsize} (MXNet's native and "
                             f"oneDNN kernels center an even window differently)")


def _infer(a: LRNAttrs, s):
    x = s.known("data")
    if len(x) != 4:
        s.fail(f"input 'data' has shape {x}: LRN needs 4-D (NCHW) data", input="data")
    return [x, x]


def _lower(a: LRNAttrs, ctx):
    x = ctx.in_type("data").shape
    return "kernels/lrn.c.j2", dict(
        what=f"LRN over {a.nsize} channels, alpha {a.alpha} beta {a.beta} knorm {a.knorm}: data {x}",
        planes=x[0] * x[1], channels=x[1], last=x[1] - 1, hw=prod(x[2:]), half=a.nsize // 2, salpha=c_float(a.alpha / a.nsize),
        knorm=c_float(a.knorm), beta=c_float(a.beta), parallel=prod(x) * a.nsize >= PARALLEL_MIN_ELEMENTS,
    )


LRN = register(OpDef(
    name="LRN", attrs=LRNAttrs, inputs=lambda a: ("data",), infer=_infer, fusion=Fusion.OPAQUE,
    flops=lambda a, ins, outs: prod(outs[0].shape) * (2 * a.nsize + 4), lower=_lower,
    output_names=lambda a: ("output", "tmp_norm"), hidden_outputs=1,
    grad=lambda a, g: {"data": g.emit("_backward_LRN", [g.ograd(), g.input("data")], nsize=a.nsize, alpha=a.alpha,
                                      beta=a.beta, knorm=a.knorm)[0]}, doc=__doc__))


def _bwd_lower(a: LRNAttrs, ctx):
    v = _lower(a, ctx)[1]
    v["what"] = "backward of " + v["what"]
    v["coef"] = c_float(2.0 * a.alpha * a.beta / a.nsize)
    v["n"] = prod(ctx.in_type("data").shape)
    return "kernels/lrn_backward.c.j2", v


LRN_BACKWARD = register(OpDef(
    name="_backward_LRN", attrs=LRNAttrs, inputs=lambda a: ("ograd", "data"), infer=lambda a, s: [s.known("data")],
    fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: prod(outs[0].shape) * (3 * a.nsize + 8), lower=_bwd_lower,
    workspace=lambda a, ins, outs, const: 2 * prod(outs[0].shape) * 4))
