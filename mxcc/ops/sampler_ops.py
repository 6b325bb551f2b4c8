"""GridGenerator and BilinearSampler (spatial transformer networks), as MXNet 1.9.1 computes them.

GridGenerator makes a sampling grid (N, 2, H, W) of normalized source coordinates (x in channel 0, y in 1):
  affine: data (N, 6) is theta (2 x 3), target_shape (H, W); out = theta . (x_t, y_t, 1) with
          x_t = -1 + col * (2 / (W - 1)), y_t = -1 + row * (2 / (H - 1)) (float32 steps computed here, as MXNet's)
  warp:   data (N, 2, H, W) is a flow in pixels; out = (flow + (col, row)) / ((W - 1) / 2, (H - 1) / 2) - 1
BilinearSampler samples data (N, C, H, W) at grid (N, 2, OH, OW): x = (gx + 1) (W - 1) / 2 (y likewise), the
four neighbours of (floor y, floor x) weighted bilinearly, each one outside the map counting 0 (MXNet's kernel).
Outputs: MXNet's second ones (GridGenerator's grid_dst, BilinearSampler's tmp) are hidden, not stored.
Kernels: kernels/det_grid_generator.c.j2 and det_bilinear_sampler.c.j2 (forward and backward each).
Gradients: GridGenerator's theta gradient sums ograd times (x_t, y_t, 1) over the grid (double), the flow's is
ograd / ((W - 1) / 2, (H - 1) / 2); BilinearSampler's data gradient spreads each output gradient over its four
neighbours (parallel over planes, so no two threads add to one pixel) and its grid gradient is MXNet's (the
derivative of the interpolation weights times (W - 1) / 2, (H - 1) / 2, summed over channels in double).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal, Optional

import numpy as np

from mxcc.ops import register
from mxcc.ops.base import Fusion, OpDef, c_float

PARALLEL_MIN_ELEMENTS = 1 << 14


@dataclass(frozen=True)
class GridGeneratorAttrs:
    transform_type: Literal["affine", "warp"]
    target_shape: tuple[int, ...] = (0, 0)

    def __post_init__(self):
        if len(self.target_shape) != 2:
            raise ValueError(f"target_shape={self.target_shape} must be (height, width)")


def _grid_infer(a: GridGeneratorAttrs, s):
    x = s.known("data")
    if a.transform_type == "affine":
        if len(x) != 2 or x[1] != 6:
            s.fail(f"input 'data' has shape {x}: affine needs (batch, 6) matrices", input="data")
        h, w = a.target_shape
        if h <= 0 or w <= 0:
            s.fail(f"target_shape={a.target_shape} must be positive for transform_type='affine'", input="data")
        return [(x[0], 2, h, w), (3, h * w)]
    if len(x) != 4 or x[1] != 2:
        s.fail(f"input 'data' has shape {x}: warp needs a (batch, 2, H, W) flow", input="data")
    return [x, (2, x[2], x[3])]


def _f32(v: float) -> str:
    return c_float(np.float32(v))


def _grid_vars(a: GridGeneratorAttrs, x: tuple, y: tuple, backward: bool) -> dict:
    n, h, w = y[0], y[2], y[3]
    # affine: MXNet's scalar<DType>(2.0 / (W - 1)) steps; warp: (DType(W) - 1.0) / 2.0 denominators (float32)
    return dict(what=f"GridGenerator ({a.transform_type}{', backward' if backward else ''}) {x} -> {y}",
                backward=backward, affine=a.transform_type == "affine", batch=n, h=h, w=w, plane=h * w,
                step_x=_f32(2.0 / (w - 1)) if w > 1 else "INFINITY",     # w = 1: MXNet divides by zero too
                step_y=_f32(2.0 / (h - 1)) if h > 1 else "INFINITY",
                den_x=_f32((w - 1.0) / 2.0), den_y=_f32((h - 1.0) / 2.0), parallel=prod(y) >= PARALLEL_MIN_ELEMENTS)


GRID_GENERATOR = register(OpDef(
    name="GridGenerator", attrs=GridGeneratorAttrs, inputs=lambda a: ("data",), infer=_grid_infer,
    output_names=lambda a: ("output", "grid_dst"), hidden_outputs=1, fusion=Fusion.OPAQUE,
    flops=lambda a, ins, outs: 3 * prod(outs[0].shape),
    lower=lambda a, ctx: ("kernels/det_grid_generator.c.j2",
                          _grid_vars(a, ctx.in_type("data").shape, ctx.out_type(0).shape, False)),
    grad=lambda a, g: {"data": g.emit("_backward_GridGenerator", [g.ograd(0)], transform_type=a.transform_type,
                                      target_shape=a.target_shape, in_shape=g.type_of(g.input("data")).shape)[0]},
    doc=__doc__))


@dataclass(frozen=True)
class GridGeneratorBackwardAttrs(GridGeneratorAttrs):
    in_shape: tuple[int, ...] = ()


GRID_GENERATOR_BACKWARD = register(OpDef(
    name="_backward_GridGenerator", attrs=GridGeneratorBackwardAttrs, inputs=lambda a: ("ograd",),
    infer=lambda a, s: [a.in_shape], fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: 2 * prod(ins[0].shape),
    lower=lambda a, ctx: ("kernels/det_grid_generator.c.j2",
                          _grid_vars(a, a.in_shape, ctx.in_type("ograd").shape, True))))


# ----------------------------------------------------------------------------------------- BilinearSampler
@dataclass(frozen=True)
class BilinearSamplerAttrs:
    cudnn_off: Optional[bool] = None     # GPU only: no effect on the result


def _sampler_infer(a: BilinearSamplerAttrs, s):
    x, g = s.known("data"), s.known("grid")
    if len(x) != 4:
        s.fail(f"input 'data' has shape {x}: expected 4-D (N, C, H, W) data", input="data")
    if len(g) != 4 or g[1] != 2 or g[0] != x[0]:
        s.fail(f"input 'grid' has shape {g}: expected ({x[0]}, 2, OH, OW) for data {x}", input="grid")
    return [(x[0], x[1], g[2], g[3]), (x[0], g[2], g[3], 2)]


def _sampler_vars(x: tuple, g: tuple, backward: bool) -> dict:
    return dict(what=f"BilinearSampler{' backward' if backward else ''}: data {x} at grid {g}", backward=backward,
                batch=x[0], channels=x[1], planes=x[0] * x[1], h=x[2], w=x[3], h_last=x[2] - 1, w_last=x[3] - 1,
                w_next=x[3] + 1, plane=x[2] * x[3],
                oh=g[2], ow=g[3], out_plane=g[2] * g[3], parallel=x[0] * x[1] * g[2] * g[3] >= PARALLEL_MIN_ELEMENTS)


BILINEAR_SAMPLER = register(OpDef(
    name="BilinearSampler", attrs=BilinearSamplerAttrs, inputs=lambda a: ("data", "grid"), infer=_sampler_infer,
    output_names=lambda a: ("output", "tmp"), hidden_outputs=1, fusion=Fusion.OPAQUE,
    flops=lambda a, ins, outs: 8 * prod(outs[0].shape),
    lower=lambda a, ctx: ("kernels/det_bilinear_sampler.c.j2",
                          _sampler_vars(ctx.in_type("data").shape, ctx.in_type("grid").shape, False)),
    grad=lambda a, g: dict(zip(("data", "grid"), g.emit("_backward_BilinearSampler",
                                                        [g.ograd(0), g.input("data"), g.input("grid")]))),
    doc=__doc__))

BILINEAR_SAMPLER_BACKWARD = register(OpDef(
    name="_backward_BilinearSampler", attrs=BilinearSamplerAttrs, inputs=lambda a: ("ograd", "data", "grid"),
    output_names=lambda a: ("data_grad", "grid_grad"), infer=lambda a, s: [s.known("data"), s.known("grid")],
    fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: 20 * prod(ins[0].shape),
    lower=lambda a, ctx: ("kernels/det_bilinear_sampler.c.j2",
                          _sampler_vars(ctx.in_type("data").shape, ctx.in_type("grid").shape, True))))
