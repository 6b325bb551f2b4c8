"""Dropout: the identity at inference; in training a random mask, MXNet's "inverted dropout".

    training:  mask = (u >= p) / (1 - p),  out = data * mask        (u uniform in [0, 1), one per element)
    backward:  data_grad = ograd * mask

For inference the remove_dropout pass deletes it; when it survives (passes off, or the gradient of the
inference function) it is a view whose gradient passes through. A training graph runs `_train_Dropout`
(passes/train_mode.py) instead: u comes from the context's counter-based RNG (runtime_c/rng/mxcc_rng.h) keyed
by (seed, training step, this node's name), so masks are reproducible from the seed and independent of the
thread count. `axes` shares one draw along the listed axes (variational dropout); the mask output is still
the data's shape. MXNet's own masks come from its global generators and cannot be reproduced: compare
statistics and the consistency of output, mask and gradient instead.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

from mxcc.ops import register
from mxcc.ops._util import index_expr, loops_vars, merge_loops, rng_stream, strides
from mxcc.ops.base import Fusion, NoAttrs, OpDef, c_float, elementwise_flops


@dataclass(frozen=True)
class DropoutAttrs:
    p: float = 0.5
    mode: Literal["training", "always"] = "training"
    axes: tuple[int, ...] = ()
    cudnn_off: bool = False

    def __post_init__(self):
        if not 0.0 <= self.p < 1.0:
            raise ValueError(f"p must be in [0, 1), got {self.p}")
        if self.mode == "always" and self.p > 0:
            raise ValueError("mode='always' (dropout at inference) is not supported yet")


def _infer(a: DropoutAttrs, s):
    x = s.known("data")
    for ax in a.axes:
        if not -len(x) <= ax < len(x):
            s.fail(f"axes={a.axes}: axis {ax} is out of range for data {x}", input="data")
    return [x, x]


def _train_lower(a: DropoutAttrs, ctx):
    x = ctx.in_type("data").shape
    shared = {ax % len(x) for ax in a.axes}
    # the draw index: the element's coordinates with the shared axes dropped (stride 0 there)
    draw_shape = tuple(1 if d in shared else n for d, n in enumerate(x))
    draw_st = tuple(0 if d in shared else s for d, s in enumerate(strides(draw_shape)))
    ext, (st, dst) = merge_loops(x, [strides(x), draw_st])
    thresh = min(round(a.p * (1 << 24)), 1 << 24)          # keep when the draw's top 24 bits >= thresh
    scale = c_float(1.0 / (1.0 - a.p))

    def body(v):
        i, j = index_expr(st, v), index_expr(dst, v)
        return [f"const float m = (mxcc_rng_bits(key, {j}) >> 40) >= {thresh}u ? {scale} : 0.0f",
                f"out1[{i}] = m", f"out0[{i}] = data[{i}] * m"]
    what = (f"dropout p={a.p}: out0 = data * mask, mask (out1) = 0 or 1/(1-p) = {scale}"
            + (f", one draw shared along axes {sorted(shared)}" if shared else ""))
    return "kernels/random_loops.c.j2", dict(stream=rng_stream(ctx.node), **loops_vars(what, ext, body))


def _train_grad(a: DropoutAttrs, g):
    return {"data": g.emit("_backward_Dropout", [g.ograd(), g.output(1)])[0]}


DROPOUT = register(OpDef(
    name="Dropout", attrs=DropoutAttrs, inputs=lambda a: ("data",), infer=_infer, hidden_outputs=1,
    output_names=lambda a: ("output", "mask"), fusion=Fusion.INJECTIVE, view=True,
    identity_in_inference=True, grad=lambda a, g: {"data": g.ograd()},
    train_op=lambda a: "_train_Dropout" if a.p > 0 else None, doc=__doc__))

TRAIN_DROPOUT = register(OpDef(
    name="_train_Dropout", attrs=DropoutAttrs, inputs=lambda a: ("data",), infer=_infer,
    output_names=lambda a: ("output", "mask"), fusion=Fusion.OPAQUE, lower=_train_lower, random=True,
    flops=lambda a, ins, outs: 2 * prod(outs[0].shape), grad=_train_grad, doc=__doc__))


def _bwd_infer(a, s):
    dy = s.known("ograd")
    s.expect("mask", dy, "(the mask has the gradient's shape)")
    return [dy]


DROPOUT_BACKWARD = register(OpDef(
    name="_backward_Dropout", attrs=NoAttrs, inputs=lambda a: ("ograd", "mask"), infer=_bwd_infer,
    fusion=Fusion.ELEMWISE, flops=elementwise_flops(1), inplace=True, c_expr=lambda a, xs: f"({xs[0]} * {xs[1]})"))
