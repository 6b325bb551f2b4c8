"""Pad, _contrib_AdaptiveAvgPooling2D, _contrib_BilinearResize2D and Crop, as MXNet 1.9.1 computes them.

Pad (4-D or 5-D, no padding of the first two axes): numpy.pad's 'constant' (constant_value), 'edge' and
'reflect' (each pad smaller than its axis); backward: the output gradient summed onto the input positions each
output read (kernels/resize_pad.c.j2, both directions).
AdaptiveAvgPooling2D(output_size: () -> 1x1, (s,) -> s x s, (h, w)): output (oy, ox) averages rows
[floor(oy * H / OH), ceil((oy + 1) * H / OH)) and the same for columns, with MXNet's float32 division (its
START_IND/END_IND); the bins are tables computed here (kernels/resize_adaptive_pool.c.j2, both directions).
BilinearResize2D: the output size from `mode` as MXNet's shape function computes it (float32 products,
truncated; in mode 'size' the width uses scale_width only when scale_height is given, as MXNet's code reads),
then bilinear interpolation with align_corners (src = scale * dst) or without (src = max(scale * (dst + 0.5)
- 0.5, 0)); per output row and column its source index, step (0 at the last input row) and weights are
computed here in float32 exactly as MXNet's kernel does, and printed as tables (kernels/resize_bilinear.c.j2;
same size: a copy; both directions). Backward: each output's gradient spread onto its four sources with the same
weights; 'like' gets no gradient (MXNet's is zero).
Crop (4-D; num_args 1: h_w, 2: the second input's H x W; offset or center_crop): a copy of a window
(kernels/resize_crop.c.j2); backward: the gradient padded with zeros (a Pad node); crop_like gets none.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil, floor, prod
from typing import Literal, Optional

import numpy as np

from mxcc.ops import register
from mxcc.ops._util import index_expr, strides
from mxcc.ops.base import Fusion, OpDef, c_float

PARALLEL_MIN_ELEMENTS = 1 << 15
_F = np.float32


# ----------------------------------------------------------------------------------------------------- Pad
@dataclass(frozen=True)
class PadAttrs:
    mode: Literal["constant", "edge", "reflect"]
    pad_width: tuple[int, ...]
    constant_value: float = 0.0

    def __post_init__(self):
        if any(p < 0 for p in self.pad_width):
            raise ValueError(f"pad_width={self.pad_width} must not be negative")


def _pad_infer(a: PadAttrs, s):
    x = s.known("data")
    if len(x) not in (4, 5):
        s.fail(f"input 'data' has shape {x}: Pad supports 4-D and 5-D data only (as MXNet)", input="data")
    if len(a.pad_width) != 2 * len(x):
        s.fail(f"pad_width={a.pad_width} has {len(a.pad_width)} values, expected {2 * len(x)} for {len(x)}-D data",
               input="data")
    if any(a.pad_width[:4]):
        s.fail(f"pad_width={a.pad_width}: the first two axes cannot be padded (MXNet's rule)", input="data")
    if a.mode == "reflect":
        for d in range(2, len(x)):
            if max(a.pad_width[2 * d], a.pad_width[2 * d + 1]) >= x[d]:
                s.fail(f"pad_width={a.pad_width}: reflect padding of axis {d} (size {x[d]}) must be smaller than "
                       "the axis", input="data")
    return [tuple(x[d] + a.pad_width[2 * d] + a.pad_width[2 * d + 1] for d in range(len(x)))]


def _pad_vars(a: PadAttrs, x: tuple, y: tuple, what: str, backward: bool) -> dict:
    """Loops over the output's spatial axes ((depth,) height, width), each with its input size and pad before,
    and the C index expressions of an element of the input and output planes."""
    sp = len(x) - 2
    axes = [dict(o=f"o{d}", i=f"i{d}", n=y[2 + d], size=x[2 + d], before=a.pad_width[4 + 2 * d],
                 end=a.pad_width[4 + 2 * d] + x[2 + d], last=x[2 + d] - 1,
                 mirror=2 * (x[2 + d] - 1) + a.pad_width[4 + 2 * d], indent="    " * (d + 2)) for d in range(sp)]
    return dict(what=what, backward=backward, mode=a.mode, value=c_float(a.constant_value), planes=x[0] * x[1],
                axes=axes, in_plane=prod(x[2:]), out_plane=prod(y[2:]),
                in_index=index_expr(strides(x[2:]), tuple(ax["i"] for ax in axes)),
                out_index=index_expr(strides(y[2:]), tuple(ax["o"] for ax in axes)),
                inside=" && ".join(f"(unsigned long){ax['i']} < {ax['size']}" for ax in axes),
                body_indent="    " * (sp + 2), parallel=prod(y) >= PARALLEL_MIN_ELEMENTS)


def _pad_lower(a: PadAttrs, ctx):
    x, y = ctx.in_type("data").shape, ctx.out_type(0).shape
    return "kernels/resize_pad.c.j2", _pad_vars(a, x, y, f"Pad ({a.mode}) {x} -> {y}, pad_width {a.pad_width}", False)


PAD = register(OpDef(
    name="Pad", aliases=("pad",), attrs=PadAttrs, inputs=lambda a: ("data",), infer=_pad_infer,
    fusion=Fusion.INJECTIVE, lower=_pad_lower,
    grad=lambda a, g: {"data": g.emit("_backward_Pad", [g.ograd()], mode=a.mode, pad_width=a.pad_width,
                                      constant_value=a.constant_value)[0]}, doc=__doc__))


def _pad_bwd_infer(a: PadAttrs, s):
    y = s.known("ograd")
    if len(a.pad_width) != 2 * len(y):
        s.fail(f"pad_width={a.pad_width} does not match the gradient {y}", input="ograd")
    return [tuple(y[d] - a.pad_width[2 * d] - a.pad_width[2 * d + 1] for d in range(len(y)))]


def _pad_bwd_lower(a: PadAttrs, ctx):
    y, x = ctx.in_type("ograd").shape, ctx.out_type(0).shape
    return "kernels/resize_pad.c.j2", _pad_vars(a, x, y, f"Pad ({a.mode}) backward: {y} -> {x}", True)


PAD_BACKWARD = register(OpDef(
    name="_backward_Pad", attrs=PadAttrs, inputs=lambda a: ("ograd",), infer=_pad_bwd_infer, fusion=Fusion.OPAQUE,
    flops=lambda a, ins, outs: prod(ins[0].shape), lower=_pad_bwd_lower))


# -------------------------------------------------------------------------------------- AdaptiveAvgPooling2D
@dataclass(frozen=True)
class AdaptivePoolAttrs:
    output_size: tuple[int, ...] = ()

    def __post_init__(self):
        if len(self.output_size) > 2 or any(v < 1 for v in self.output_size):
            raise ValueError(f"output_size={self.output_size} must be (), (size,) or (height, width) of positive ints")


def _adaptive_out(a: AdaptivePoolAttrs) -> tuple[int, int]:
    if not a.output_size:
        return 1, 1
    return (a.output_size[0],) * 2 if len(a.output_size) == 1 else tuple(a.output_size)


def _adaptive_infer(a: AdaptivePoolAttrs, s):
    x = s.known("data")
    if len(x) != 4:
        s.fail(f"input 'data' has shape {x}: AdaptiveAvgPooling2D needs 4-D (NCHW) data", input="data")
    return [(x[0], x[1], *_adaptive_out(a))]


def adaptive_bins(n_in: int, n_out: int) -> tuple[list[int], list[int]]:
    """MXNet's START_IND/END_IND: floor/ceil of float32(a * n_in) / float32(n_out)."""
    start = [int(floor(_F(o * n_in) / _F(n_out))) for o in range(n_out)]
    end = [int(ceil(_F((o + 1) * n_in) / _F(n_out))) for o in range(n_out)]
    return start, end


def _adaptive_vars(x: tuple, y: tuple, what: str, backward: bool) -> dict:
    h0, h1 = adaptive_bins(x[2], y[2])
    w0, w1 = adaptive_bins(x[3], y[3])
    return dict(what=what, backward=backward, planes=x[0] * x[1], ih=x[2], iw=x[3], oh=y[2], ow=y[3],
                in_plane=x[2] * x[3], out_plane=y[2] * y[3], h0=h0, h1=h1, w0=w0, w1=w1,
                parallel=(prod(x) >= PARALLEL_MIN_ELEMENTS) | (prod(y) >= PARALLEL_MIN_ELEMENTS))


ADAPTIVE_AVG_POOLING = register(OpDef(
    name="_contrib_AdaptiveAvgPooling2D", attrs=AdaptivePoolAttrs, inputs=lambda a: ("data",),
    infer=_adaptive_infer, fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: prod(ins[0].shape),
    lower=lambda a, ctx: ("kernels/resize_adaptive_pool.c.j2", _adaptive_vars(
        ctx.in_type("data").shape, ctx.out_type(0).shape,
        f"adaptive average pooling {ctx.in_type('data').shape} -> {ctx.out_type(0).shape}", False)),
    grad=lambda a, g: {"data": g.emit("_backward_contrib_AdaptiveAvgPooling2D", [g.ograd()],
                                      in_shape=g.type_of(g.input("data")).shape)[0]}, doc=__doc__))


@dataclass(frozen=True)
class InShapeAttrs:
    in_shape: tuple[int, ...]


ADAPTIVE_AVG_POOLING_BACKWARD = register(OpDef(
    name="_backward_contrib_AdaptiveAvgPooling2D", attrs=InShapeAttrs, inputs=lambda a: ("ograd",),
    infer=lambda a, s: [a.in_shape], fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: prod(outs[0].shape),
    lower=lambda a, ctx: ("kernels/resize_adaptive_pool.c.j2", _adaptive_vars(
        a.in_shape, ctx.in_type("ograd").shape, f"adaptive average pooling backward {ctx.in_type('ograd').shape} "
                                                f"-> {a.in_shape}", True))))


# --------------------------------------------------------------------------------------- BilinearResize2D
RESIZE_MODES = ("size", "odd_scale", "like", "to_even_down", "to_even_up", "to_odd_down", "to_odd_up")


@dataclass(frozen=True)
class BilinearResizeAttrs:
    height: int = 1
    width: int = 1
    scale_height: Optional[float] = None
    scale_width: Optional[float] = None
    mode: Literal[RESIZE_MODES] = "size"
    align_corners: bool = True

    def __post_init__(self):
        if not (1 <= self.height <= 10000 and 1 <= self.width <= 10000):
            raise ValueError(f"height={self.height}, width={self.width} must be in [1, 10000] (MXNet's range)")
        if self.mode == "odd_scale" and (self.scale_height is None or self.scale_width is None):
            raise ValueError("mode='odd_scale' needs scale_height and scale_width")
        if self.mode == "size" and self.scale_height is not None and self.scale_width is None:
            raise ValueError("scale_height without scale_width: MXNet reads scale_width whenever scale_height is "
                             "given (and fails on it)")


def _resize_inputs(a: BilinearResizeAttrs):
    return ("data", "like") if a.mode == "like" else ("data",)


def _trunc_f32(v) -> int:
    return int(_F(v))


def resize_size(a: BilinearResizeAttrs, h: int, w: int, like: tuple | None) -> tuple[int, int]:
    """MXNet 1.9.1's BilinearSampleOpInferShape: float32 products truncated toward zero."""
    if a.mode == "size":
        if a.scale_height is not None:        # NOTE: MXNet tests scale_height for the width too
            return _trunc_f32(_F(a.scale_height) * _F(h)), _trunc_f32(_F(a.scale_width) * _F(w))
        return a.height, a.width
    if a.mode == "odd_scale":
        def odd(n, sc):
            return _trunc_f32(_F(n) * _F(sc)) if n % 2 == 0 else _trunc_f32(_F(n - 1) * _F(sc)) + 1
        return odd(h, a.scale_height), odd(w, a.scale_width)
    if a.mode == "like":
        return like[2], like[3]
    up, even = a.mode.endswith("up"), "even" in a.mode
    step = 1 if up else -1
    return tuple(n if (n % 2 == 0) == even else n + step for n in (h, w))


def _resize_infer(a: BilinearResizeAttrs, s):
    x = s.known("data")
    if len(x) != 4:
        s.fail(f"input 'data' has shape {x}: BilinearResize2D needs 4-D (NCHW) data", input="data")
    like = None
    if a.mode == "like":
        like = s.known("like")
        if len(like) != 4:
            s.fail(f"input 'like' has shape {like}: mode='like' needs 4-D data to take H and W from", input="like")
    oh, ow = resize_size(a, x[2], x[3], like)
    if oh < 1 or ow < 1:
        s.fail(f"mode={a.mode!r} resizes {x[2]}x{x[3]} to {oh}x{ow}: an empty output", input="data")
    return [(x[0], x[1], oh, ow)]


def resize_taps(n_in: int, n_out: int, align_corners: bool) -> tuple[list[int], list[int], list[str], list[str]]:
    """Per output index (as MXNet's kernel, in float32): source index, step to the next source (0 at the last
    input index), and the weights of the two sources, as C literals."""
    if n_out > 1:
        scale = _F(n_in - 1) / _F(n_out - 1) if align_corners else _F(n_in) / _F(n_out)
    else:
        scale = _F(0)
    first, step, w0, w1 = [], [], [], []
    for d in range(n_out):
        if align_corners:
            src = _F(scale * _F(d))
        else:
            src = _F(float(scale) * (d + 0.5) - 0.5)
            src = _F(0) if src < 0 else src
        i = int(src)
        lam = _F(src - _F(i))
        first.append(i)
        step.append(1 if i < n_in - 1 else 0)
        w1.append(c_float(lam))
        w0.append(c_float(_F(1) - lam))
    return first, step, w0, w1


def _resize_vars(a, x: tuple, y: tuple, what: str, backward: bool) -> dict:
    hy, hs, h0, h1 = resize_taps(x[2], y[2], a.align_corners)
    wx, ws, w0, w1 = resize_taps(x[3], y[3], a.align_corners)
    return dict(what=what, backward=backward, planes=x[0] * x[1], ih=x[2], iw=x[3], oh=y[2], ow=y[3],
                in_plane=x[2] * x[3], out_plane=y[2] * y[3], total=prod(x), same_size=tuple(x[2:]) == tuple(y[2:]),
                hy=hy, hs=hs, h0=h0, h1=h1, wx=wx, ws=ws, w0=w0, w1=w1, parallel=prod(y) >= PARALLEL_MIN_ELEMENTS)


def _resize_lower(a: BilinearResizeAttrs, ctx):
    x, y = ctx.in_type("data").shape, ctx.out_type(0).shape
    return "kernels/resize_bilinear.c.j2", _resize_vars(
        a, x, y, f"bilinear resize {x} -> {y} (mode {a.mode}, align_corners={a.align_corners})", False)


@dataclass(frozen=True)
class BilinearResizeBackwardAttrs:
    in_shape: tuple[int, ...]
    align_corners: bool


def _resize_bwd_lower(a: BilinearResizeBackwardAttrs, ctx):
    y = ctx.in_type("ograd").shape
    return "kernels/resize_bilinear.c.j2", _resize_vars(
        a, a.in_shape, y, f"bilinear resize backward {y} -> {a.in_shape} (align_corners={a.align_corners})", True)


BILINEAR_RESIZE = register(OpDef(
    name="_contrib_BilinearResize2D", attrs=BilinearResizeAttrs, inputs=_resize_inputs, infer=_resize_infer,
    fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: 7 * prod(outs[0].shape), lower=_resize_lower,
    grad=lambda a, g: {"data": g.emit("_backward_contrib_BilinearResize2D", [g.ograd()],
                                      in_shape=g.type_of(g.input("data")).shape,
                                      align_corners=a.align_corners)[0]}, doc=__doc__))
BILINEAR_RESIZE_BACKWARD = register(OpDef(
    name="_backward_contrib_BilinearResize2D", attrs=BilinearResizeBackwardAttrs, inputs=lambda a: ("ograd",),
    infer=lambda a, s: [a.in_shape], fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: 8 * prod(ins[0].shape),
    lower=_resize_bwd_lower))


# ---------------------------------------------------------------------------------------------------- Crop
@dataclass(frozen=True)
class CropAttrs:
    num_args: int
    offset: tuple[int, ...] = (0, 0)
    h_w: tuple[int, ...] = (0, 0)
    center_crop: bool = False

    def __post_init__(self):
        if self.num_args not in (1, 2):
            raise ValueError(f"num_args must be 1 (crop to h_w) or 2 (crop like the second input), got {self.num_args}")
        if len(self.offset) != 2 or len(self.h_w) != 2:
            raise ValueError(f"offset={self.offset} and h_w={self.h_w} must be (y, x) / (h, w) pairs")


def _crop_inputs(a: CropAttrs):
    return ("arg0", "arg1") if a.num_args == 2 else ("arg0",)


def crop_window(a: CropAttrs, x: tuple, like: tuple | None) -> tuple[int, int, int, int, str]:
    """(h, w, y0, x0, fault): the crop's size and offset in data x (MXNet's InferShape and InferCropOfferset);
    `fault` is empty or says why MXNet would refuse it."""
    h, w = a.h_w if a.num_args == 1 else like[2:4]
    if a.num_args == 1 and not (1 <= h <= x[2] and 1 <= w <= x[3]):
        return h, w, 0, 0, f"h_w={a.h_w} must be between (1, 1) and the data's ({x[2]}, {x[3]})"
    if h > x[2] or w > x[3]:
        return h, w, 0, 0, f"crop_like's {h}x{w} is larger than the data's {x[2]}x{x[3]}"
    if a.center_crop:
        return h, w, (x[2] - h) // 2, (x[3] - w) // 2, ""
    y0, x0 = a.offset
    if not (0 <= y0 <= x[2] - h and 0 <= x0 <= x[3] - w):
        return h, w, y0, x0, f"offset={a.offset} puts the {h}x{w} crop outside the data's {x[2]}x{x[3]}"
    return h, w, y0, x0, ""


def _crop_infer(a: CropAttrs, s):
    x = s.known("arg0")
    if len(x) != 4:
        s.fail(f"input 'arg0' has shape {x}: Crop needs 4-D (NCHW) data", input="arg0")
    like = s.known("arg1") if a.num_args == 2 else None
    if like is not None and len(like) != 4:
        s.fail(f"input 'arg1' (crop_like) has shape {like}: expected 4-D data", input="arg1")
    h, w, _, _, fault = crop_window(a, x, like)
    if fault:
        s.fail(fault, input="arg0" if a.num_args == 1 else "arg1")
    return [(x[0], x[1], h, w)]


def _crop_lower(a: CropAttrs, ctx):
    x, y = ctx.in_type("arg0").shape, ctx.out_type(0).shape
    like = ctx.in_type("arg1").shape if a.num_args == 2 else None
    h, w, y0, x0, _ = crop_window(a, x, like)
    return "kernels/resize_crop.c.j2", dict(
        what=f"Crop {x} -> {y} at offset ({y0}, {x0})", planes=x[0] * x[1], h=h, w=w, iw=x[3],
        in_plane=x[2] * x[3], out_plane=h * w, start=y0 * x[3] + x0, parallel=prod(y) >= PARALLEL_MIN_ELEMENTS)


def _crop_grad(a: CropAttrs, g):
    """The gradient padded back with zeros to the data's size (a Pad node)."""
    x = g.type_of(g.input("arg0")).shape
    like = g.type_of(g.input("arg1")).shape if a.num_args == 2 else None
    h, w, y0, x0, _ = crop_window(a, x, like)
    pad = (0, 0, 0, 0, y0, x[2] - h - y0, x0, x[3] - w - x0)
    return {"arg0": g.emit("Pad", [g.ograd()], mode="constant", pad_width=pad, constant_value=0.0)[0]}


CROP = register(OpDef(
    name="Crop", attrs=CropAttrs, inputs=_crop_inputs, infer=_crop_infer, fusion=Fusion.INJECTIVE, lower=_crop_lower,
    grad=_crop_grad, doc=__doc__))
