"""softmax, log_softmax, SoftmaxActivation and SoftmaxOutput (inference forward: softmax probabilities).

All three lower to one kernel: softmax over an axis of length n, viewing the tensor as (outer, n, inner).
SoftmaxOutput's axis follows MXNet: channel axis 1 with multi_output, the last axis with preserve_shape,
otherwise the data flattened to (batch, rest). Its label is read only by training. SoftmaxActivation
(deprecated in MXNet) is, as MXNet 1.9.1 computes it, softmax over the LAST axis (mode='instance': MXNet views
the data as (prod(shape[:-1]), shape[-1]), so 2-D data is one row per sample and 1-D data one row) or over
axis 1 (mode='channel', data of at least 3 dims).
Gradients: `_backward_softmax` reads the output y and the output gradient dy, per row of the axis:
softmax dx = y * (dy - sum(dy * y)) / T, log_softmax dx = (dy - exp(y) * sum(dy)) / T (double sums).
SoftmaxActivation's sums over its softmax axis: the true derivative (MXNet 1.9.1's backward sums over axis 1
in both modes, wrong for mode='instance' on data of 3+ dims, and fails on 1-D data; tests/data/mxnet_extra).
SoftmaxOutput's is `_backward_SoftmaxOutput` (the head gradient is ignored, as MXNet does).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
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
    def lower(a, ctx):
        x = ctx.in_type("data").shape
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


def _so_lower(a, ctx):
    outer, n, inner = _so_axis(a, ctx.in_type("data").shape)
    return "kernels/softmax.c.j2", _softmax_vars(outer, n, inner, None, False)


# -- SoftmaxOutput backward: (softmax - onehot(label)) * grad_scale / norm; the head gradient is ignored ---
def _so_grad(a: SoftmaxOutputAttrs, g):
    return {"data": g.emit("_backward_SoftmaxOutput", [g.output(), g.input("label")],
                           **{f.name: getattr(a, f.name) for f in fields(a)})[0]}


def _so_bwd_infer(a, s):
    return [s.known("output")]


def _so_bwd_lower(a: SoftmaxOutputAttrs, ctx):
    shape = ctx.in_type("output").shape
    outer, n, inner = _so_axis(a, shape)
    labels = outer * inner
    # MXNet's normalization (softmax_output-inl.h): null -> 1 (multi_output: positions per sample),
    # batch -> the label's size, valid -> the count of labels not ignored (at run time)
    if a.normalization == "null":
        norm = inner if a.multi_output else 1
    elif a.normalization == "batch":
        norm = labels
    else:
        norm = None if a.use_ignore else labels
    return "kernels/softmax_output_backward.c.j2", dict(
        outer=outer, n=n, inner=inner, rows=labels, row_stride=n * inner, grad_scale=c_float(a.grad_scale),
        norm=norm, ignore=c_float(a.ignore_label) if a.use_ignore else None,
        on=c_float(1.0 - a.smooth_alpha), off=c_float(a.smooth_alpha / (n - 1) if n > 1 else 0.0))


SOFTMAX_OUTPUT_BACKWARD = register(OpDef(
    name="_backward_SoftmaxOutput", attrs=SoftmaxOutputAttrs, inputs=lambda a: ("output", "label"),
    infer=_so_bwd_infer, fusion=Fusion.OPAQUE, flops=_softmax_flops, lower=_so_bwd_lower))


# -- softmax / log_softmax / SoftmaxActivation backward --------------------------------------------------
@dataclass(frozen=True)
class SoftmaxBackwardAttrs:
    outer: int                   # the tensor viewed as (outer, n, inner), softmax over n
    n: int
    inner: int
    log: bool = False
    temperature: Optional[float] = None


def _softmax_grad(log: bool, split):
    def grad(a, g):
        outer, n, inner = split(a, g.type_of(g.output()).shape)
        t = getattr(a, "temperature", None)
        return {"data": g.emit("_backward_softmax", [g.ograd(), g.output()], outer=outer, n=n, inner=inner,
                               log=log, temperature=None if t in (None, 1.0) else t)[0]}
    return grad


def _bwd_softmax_lower(a: SoftmaxBackwardAttrs, ctx):
    v = _softmax_vars(a.outer, a.n, a.inner, None if a.temperature is None else c_float(a.temperature), a.log)
    return "kernels/softmax_backward.c.j2", v


SOFTMAX_BACKWARD = register(OpDef(
    name="_backward_softmax", attrs=SoftmaxBackwardAttrs, inputs=lambda a: ("ograd", "output"),
    infer=lambda a, s: [s.known("ograd")], fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: 4 * prod(outs[0].shape),
    lower=_bwd_softmax_lower))


def _axis_split(a, shape):
    return _split(shape, _axis(a, shape))


def _sa_split(a, shape):
    """SoftmaxActivation's (outer, n, inner): channel over axis 1, instance over the last axis."""
    return _split(shape, 1 if a.mode == "channel" else len(shape) - 1)


SOFTMAX = register(OpDef(
    name="softmax", attrs=SoftmaxAttrs, inputs=lambda a: ("data",), infer=_softmax_infer,
    fusion=Fusion.OPAQUE, flops=_softmax_flops, lower=_softmax_lower(False),
    grad=_softmax_grad(False, _axis_split), doc=__doc__))
LOG_SOFTMAX = register(OpDef(
    name="log_softmax", attrs=SoftmaxAttrs, inputs=lambda a: ("data",), infer=_softmax_infer,
    fusion=Fusion.OPAQUE, flops=_softmax_flops, lower=_softmax_lower(True),
    grad=_softmax_grad(True, _axis_split), doc=__doc__))
SOFTMAX_OUTPUT = register(OpDef(
    name="SoftmaxOutput", aliases=("Softmax",), attrs=SoftmaxOutputAttrs,
    inputs=lambda a: ("data", "label"), labels=("label",), infer=_so_infer, fusion=Fusion.OPAQUE,
    flops=_softmax_flops, lower=_so_lower, loss=True, grad=_so_grad, doc=__doc__))


@dataclass(frozen=True)
class SoftmaxActivationAttrs:
    mode: Literal["instance", "channel"] = "instance"


def _sa_infer(a: SoftmaxActivationAttrs, s):
    x = s.known("data")
    if a.mode == "channel" and len(x) < 3:
        s.fail(f"mode='channel' needs data of at least 3 dimensions, got {x}", input="data")
    if len(x) == 0:
        s.fail("needs data of at least 1 dimension, got a scalar", input="data")
    return [x]


def _sa_lower(a: SoftmaxActivationAttrs, ctx):
    outer, n, inner = _sa_split(a, ctx.in_type("data").shape)
    return "kernels/softmax.c.j2", _softmax_vars(outer, n, inner, None, False)


SOFTMAX_ACTIVATION = register(OpDef(
    name="SoftmaxActivation", attrs=SoftmaxActivationAttrs, inputs=lambda a: ("data",), infer=_sa_infer,
    fusion=Fusion.OPAQUE, flops=_softmax_flops, lower=_sa_lower, grad=_softmax_grad(False, _sa_split), doc=__doc__))
