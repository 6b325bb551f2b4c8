"""softmax, log_softmax and SoftmaxOutput (inference forward: softmax probabilities).

All three lower to one kernel: softmax over an axis of length n, viewing the tensor as (outer, n, inner).
SoftmaxOutput's axis follows MXNet: channel axis 1 with multi_output, the last axis with preserve_shape,
otherwise the data flattened to (batch, rest). Its label is read only by training.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal, Optional

from mxcc.ops import register
from mxcc.ops.base import Fusion, OpDef, c_float


@dataclass(frozen=True)
class SoftmaxAttrs:
    axis: int = -1
    temperature: Optional[float] = None
    dtype: Optional[str] = None
    use_length: bool = False

    def __post_init__(self):
        if self.use_length:
            raise ValueError("use_length=True (masked softmax) is not supported")
        if self.dtype not in (None, "float32"):
            raise ValueError(f"dtype={self.dtype} is not supported (float32 only)")


@dataclass(frozen=True)
class SoftmaxOutputAttrs:
    grad_scale: float = 1.0
    ignore_label: float = -1.0
    multi_output: bool = False
    use_ignore: bool = False
    preserve_shape: bool = False
    normalization: Literal["null", "batch", "valid"] = "null"
    out_grad: bool = False
    smooth_alpha: float = 0.0


def _axis(a: SoftmaxAttrs, shape: tuple, s=None) -> int:
    ax = a.axis + len(shape) if a.axis < 0 else a.axis
    if not 0 <= ax < len(shape):
        s.fail(f"axis {a.axis} is out of range for data of shape {shape}", input="data")
    return ax


def _softmax_infer(a, s):
    x = s.known("data")
    _axis(a, x, s)
    return [x]


def _split(shape: tuple, ax: int) -> tuple[int, int, int]:
    return prod(shape[:ax]), shape[ax], prod(shape[ax + 1:])


def _softmax_lower(log: bool):
    def lower(a, k):
        x = k.in_type("data").shape
        outer, n, inner = _split(x, _axis(a, x))
        t = None if a.temperature in (None, 1.0) else c_float(a.temperature)
        return "kernels/softmax.c.j2", _softmax_vars(outer, n, inner, t, log)
    return lower


def _softmax_vars(outer: int, n: int, inner: int, temperature, log: bool) -> dict:
    return dict(outer=outer, n=n, inner=inner, rows=outer * inner, row_stride=n * inner,
                parallel=outer * inner * n >= 1 << 14, temperature=temperature, log=log)


def _softmax_flops(a, ins, outs):
    return 5 * prod(outs[0].shape)


def _so_axis(a: SoftmaxOutputAttrs, shape: tuple) -> tuple[int, int, int]:
    if a.multi_output:
        return _split(shape, 1)
    if a.preserve_shape:
        return _split(shape, len(shape) - 1)
    return shape[0], prod(shape[1:]), 1


def _so_infer(a: SoftmaxOutputAttrs, s):
    x = s.known("data")
    if a.multi_output:
        if len(x) < 2:
            s.fail(f"multi_output needs data with a channel axis, got {x}", input="data")
        label = (x[0], *x[2:])
    elif a.preserve_shape:
        label = x[:-1]
    else:
        label = (x[0],)
    got = s.maybe("label")
    if got is None or tuple(got) != tuple(x):      # a label may also be given as probabilities (data's shape)
        s.expect("label", label, f"(class indices for data {x})")
    return [x]


def _so_lower(a, k):
    outer, n, inner = _so_axis(a, k.in_type("data").shape)
    return "kernels/softmax.c.j2", _softmax_vars(outer, n, inner, None, False)


SOFTMAX = register(OpDef(
    name="softmax", attrs=SoftmaxAttrs, inputs=lambda a: ("data",), infer=_softmax_infer,
    fusion=Fusion.OPAQUE, flops=_softmax_flops, lower=_softmax_lower(False), doc=__doc__))
LOG_SOFTMAX = register(OpDef(
    name="log_softmax", attrs=SoftmaxAttrs, inputs=lambda a: ("data",), infer=_softmax_infer,
    fusion=Fusion.OPAQUE, flops=_softmax_flops, lower=_softmax_lower(True), doc=__doc__))
SOFTMAX_OUTPUT = register(OpDef(
    name="SoftmaxOutput", aliases=("Softmax",), attrs=SoftmaxOutputAttrs,
    inputs=lambda a: ("data", "label"), labels=("label",), infer=_so_infer, fusion=Fusion.OPAQUE,
    flops=_softmax_flops, lower=_so_lower, doc=__doc__))
