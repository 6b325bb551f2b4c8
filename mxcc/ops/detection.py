"""_contrib_ROIAlign and ROIPooling: pool a 4-D feature map over regions given at run time, as MXNet 1.9.1.

rois (R, 5) rows [batch, x1, y1, x2, y2] in image coordinates (times spatial_scale on the map); output
(R, C, ph, pw) (ROIAlign position_sensitive: C / (ph * pw) channels, output channel c of bin (i, j) reading
input channel (c * ph + i) * pw + j). The region arithmetic is MXNet's, in float32, done by the kernel (the
boxes are data):
  ROIAlign: start = x1 * scale - (aligned ? 0.5 : 0), size = x2 * scale - ... - start (at least 1 unless
    aligned); bin = size / pooled; each bin averages a grid of sample_ratio (or ceil(size / pooled)) points per
    side, each a bilinear interpolation (MXNet's: points beyond [-1, H] x [-1, W] count 0, others clamped).
  ROIPooling: start = round(x1 * scale), size = max(round(x2 * scale) - start + 1, 1); bin (i, j) covers rows
    [floor(i * size / ph), ceil((i + 1) * size / ph)) + start clipped to the map; the max over the bin (the
    first one in row-major order wins a tie; an empty bin gives 0).
A box whose batch index is negative or past the batch gives zeros (MXNet: ROIAlign zeroes one element and
leaves the rest unwritten, ROIPooling zeros; an aligned box of non-positive size, where MXNet aborts, gives
zeros too). Kernels: kernels/det_roi_align.c.j2 and det_roi_pool.c.j2, parallel over boxes (forward) or
channels (backward, whose scatters then never collide).
Gradients: the data only (`_backward_ROIAlign`: each sample's weights times the bin's gradient / count;
`_backward_ROIPooling`: the bin's gradient to the position of its max, found again from the data); the boxes
get none (MXNet's is zero).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

import numpy as np

from mxcc.ops import register
from mxcc.ops.base import Fusion, OpDef, c_float

PARALLEL_MIN_ELEMENTS = 1 << 12      # each output costs a bin's worth of work


@dataclass(frozen=True)
class ROIAlignAttrs:
    pooled_size: tuple[int, ...]
    spatial_scale: float
    sample_ratio: int = -1
    position_sensitive: bool = False
    aligned: bool = False

    def __post_init__(self):
        if len(self.pooled_size) != 2 or min(self.pooled_size) < 1:
            raise ValueError(f"pooled_size={self.pooled_size} must be (height, width), both positive")


@dataclass(frozen=True)
class ROIPoolingAttrs:
    pooled_size: tuple[int, ...]
    spatial_scale: float

    def __post_init__(self):
        if len(self.pooled_size) != 2 or min(self.pooled_size) < 1:
            raise ValueError(f"pooled_size={self.pooled_size} must be (height, width), both positive")
        if not 0.0 <= self.spatial_scale <= 1.0:
            raise ValueError(f"spatial_scale={self.spatial_scale} must be in [0, 1] (MXNet's range)")


def _roi_infer(a, s) -> list:
    x, r = s.known("data"), s.known("rois")
    if len(x) != 4:
        s.fail(f"input 'data' has shape {x}: expected a 4-D (N, C, H, W) feature map", input="data")
    if len(r) != 2 or r[1] != 5:
        s.fail(f"input 'rois' has shape {r}: expected (num_rois, 5) rows [batch, x1, y1, x2, y2]", input="rois")
    ph, pw = a.pooled_size
    c = x[1]
    if getattr(a, "position_sensitive", False):
        if c % (ph * pw):
            s.fail(f"position_sensitive: the {c} channels are not divisible by pooled_size {ph}x{pw}", input="data")
        c //= ph * pw
    return [(r[0], c, ph, pw)]


def _roi_vars(a, x: tuple, r: tuple, out_c: int, what: str) -> dict:
    ph, pw = a.pooled_size
    ps = getattr(a, "position_sensitive", False)
    return dict(what=what, batch=x[0], channels=x[1], out_c=out_c, h=x[2], w=x[3], h_last=x[2] - 1, w_last=x[3] - 1,
                plane=x[2] * x[3], image=prod(x[1:]), size=prod(x), out_box=out_c * ph * pw, rois=r[0], ph=ph,
                pw=pw, bins=ph * pw, scale=c_float(a.spatial_scale),
                in_channel=f"(c * {ph} + py) * {pw} + px" if ps else "c",
                parallel=r[0] * out_c * ph * pw >= PARALLEL_MIN_ELEMENTS)


def _align_vars(a: ROIAlignAttrs, ctx, backward: bool) -> dict:
    x, r = ctx.in_type("data").shape, ctx.in_type("rois").shape
    out_c = (ctx.in_type("ograd") if backward else ctx.out_type(0)).shape[1]
    flags = (", aligned" if a.aligned else "") + (", position-sensitive" if a.position_sensitive else "")
    v = _roi_vars(a, x, r, out_c, f"ROIAlign{' backward' if backward else ''} of {r[0]} boxes on {x}, pooled "
                                  f"{a.pooled_size}, spatial_scale {a.spatial_scale}, sample_ratio {a.sample_ratio}"
                                  f"{flags}")
    return dict(v, backward=backward, aligned=a.aligned, sample_ratio=a.sample_ratio)


def _align_flops(a: ROIAlignAttrs, ins, outs) -> int:
    grid = a.sample_ratio if a.sample_ratio > 0 else 2        # adaptive grids: data-dependent, 2x2 typical
    return 8 * grid * grid * prod(outs[0].shape)


ROI_ALIGN = register(OpDef(
    name="_contrib_ROIAlign", attrs=ROIAlignAttrs, inputs=lambda a: ("data", "rois"), infer=_roi_infer,
    fusion=Fusion.OPAQUE, flops=_align_flops, lower=lambda a, ctx: ("kernels/det_roi_align.c.j2",
                                                                   _align_vars(a, ctx, False)),
    grad=lambda a, g: {"data": g.emit("_backward_ROIAlign", [g.ograd(), g.input("data"), g.input("rois")],
                                      **a.__dict__)[0]}, doc=__doc__))
ROI_ALIGN_BACKWARD = register(OpDef(
    name="_backward_ROIAlign", attrs=ROIAlignAttrs, inputs=lambda a: ("ograd", "data", "rois"),
    infer=lambda a, s: [s.known("data")], fusion=Fusion.OPAQUE, flops=_align_flops,
    lower=lambda a, ctx: ("kernels/det_roi_align.c.j2", _align_vars(a, ctx, True))))


def _pool_vars(a: ROIPoolingAttrs, ctx, backward: bool) -> dict:
    x, r = ctx.in_type("data").shape, ctx.in_type("rois").shape
    v = _roi_vars(a, x, r, x[1], f"ROIPooling{' backward' if backward else ''} (max) of {r[0]} boxes on {x}, "
                                 f"pooled {a.pooled_size}, spatial_scale {a.spatial_scale}")
    return dict(v, backward=backward, lowest=c_float(-float(np.finfo(np.float32).max)))


ROI_POOLING = register(OpDef(
    name="ROIPooling", attrs=ROIPoolingAttrs, inputs=lambda a: ("data", "rois"),
    infer=lambda a, s: [_roi_infer(a, s)[0]] * 2, output_names=lambda a: ("output", "maxidx"), hidden_outputs=1,
    fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: prod(outs[0].shape) * 4,
    lower=lambda a, ctx: ("kernels/det_roi_pool.c.j2", _pool_vars(a, ctx, False)),
    grad=lambda a, g: {"data": g.emit("_backward_ROIPooling", [g.ograd(), g.input("data"), g.input("rois")],
                                      pooled_size=a.pooled_size, spatial_scale=a.spatial_scale)[0]}, doc=__doc__))
ROI_POOLING_BACKWARD = register(OpDef(
    name="_backward_ROIPooling", attrs=ROIPoolingAttrs, inputs=lambda a: ("ograd", "data", "rois"),
    infer=lambda a, s: [s.known("data")], fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: prod(ins[0].shape) * 4,
    lower=lambda a, ctx: ("kernels/det_roi_pool.c.j2", _pool_vars(a, ctx, True))))
