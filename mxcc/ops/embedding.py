"""Embedding: out[..., :] = weight[index, :] for every index in data (any shape); weight (input_dim, output_dim).

Indices are float32, as MXNet feeds them: each is truncated toward zero and clipped to [0, input_dim - 1]
(MXNet's TakeZeroAxisCPU<clip=true>), so out-of-range indices read the first or last row.
The kernel is one row memcpy per index (`kernels/embedding.c.j2`).
Backward (`_backward_Embedding`): weight_grad = zeros, then ograd's row i added to row index(i) for every
index in order (repeated indices accumulate); the indices get no gradient, as in MXNet.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

from mxcc.ops import register
from mxcc.ops._util import PARALLEL_MIN_ELEMENTS
from mxcc.ops.base import Fusion, OpDef, c_float


@dataclass(frozen=True)
class EmbeddingAttrs:
    input_dim: int
    output_dim: int
    dtype: Literal["float32", "float64", "float16", "bfloat16", "uint8", "int8", "int32", "int64"] = "float32"
    sparse_grad: bool = False

    def __post_init__(self):
        if self.input_dim < 1 or self.output_dim < 1:
            raise ValueError(f"input_dim and output_dim must be positive, got {self.input_dim}, {self.output_dim}")
        if self.dtype != "float32":
            raise ValueError(f"dtype={self.dtype} is not supported (float32 only)")


def _infer(a: EmbeddingAttrs, s):
    x = s.known("data")
    s.expect("weight", (a.input_dim, a.output_dim), f"(input_dim={a.input_dim}, output_dim={a.output_dim})")
    return [x + (a.output_dim,)]


def _lower(a: EmbeddingAttrs, ctx):
    n = prod(ctx.in_type("data").shape)
    return "kernels/embedding.c.j2", dict(n=n, bound=c_float(a.input_dim), last=a.input_dim - 1,
                                          output_dim=a.output_dim,
                                          parallel=n * a.output_dim >= PARALLEL_MIN_ELEMENTS)


def _grad(a: EmbeddingAttrs, g):
    attrs = {k: getattr(a, k) for k in ("input_dim", "output_dim", "dtype", "sparse_grad")}
    return {"weight": g.emit("_backward_Embedding", [g.ograd(), g.input("data")], **attrs)[0]}


EMBEDDING = register(OpDef(
    name="Embedding", attrs=EmbeddingAttrs, inputs=lambda a: ("data", "weight"), infer=_infer,
    fusion=Fusion.INJECTIVE, lower=_lower, grad=_grad, doc=__doc__))


def _bwd_lower(a: EmbeddingAttrs, ctx):
    n = prod(ctx.in_type("data").shape)
    return "kernels/embedding_backward.c.j2", dict(n=n, bound=c_float(a.input_dim), last=a.input_dim - 1,
                                                   output_dim=a.output_dim, rows=a.input_dim)


EMBEDDING_BACKWARD = register(OpDef(
    name="_backward_Embedding", attrs=EmbeddingAttrs, inputs=lambda a: ("ograd", "data"),
    infer=lambda a, s: [(a.input_dim, a.output_dim)], fusion=Fusion.OPAQUE, lower=_bwd_lower,
    flops=lambda a, ins, outs: prod(ins[0].shape)))
