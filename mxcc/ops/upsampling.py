"""UpSampling, sample_type='nearest': each input repeated `scale_i` times along H and W, where scale_i
makes it as large as the first input times `scale`; several inputs are concatenated along channels
(multi_input_mode='concat', the default) or summed ('sum'), as MXNet's upsampling-inl.h does.

Inputs are named arg0, arg1, ... (MXNet's names for nearest). Lowered to kernels/upsampling.c.j2: one gather loop
per input.
Backward (`_backward_UpSampling`, one kernel for every input): each input pixel's gradient is the sum of the
scale x scale block of the output gradient it was copied to (its channels' block, or every input reads
the same channels with 'sum').

sample_type='bilinear' (inputs data and weight, whatever num_args says) is MXNet's depthwise Deconvolution
(upsampling-inl.h GetDeconvolutionParam): kernel K = 2 scale - scale % 2, stride scale, pad ceil((scale - 1) / 2),
num_group = num_filter = the channels, no bias; the weight (C, 1, K, K) is an ordinary input (MXNet initialises it
bilinear, any values are used as given). Lowered to kernels/resize_upsampling_bilinear.c.j2 (a gather: each output
sums its at most 2 x 2 taps); `_backward_UpSampling_bilinear` gives the data gradient (the correlation of the
output gradient with the weight) and the weight gradient (per channel, over images and positions, in double).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

from mxcc.ops import register
from mxcc.ops.base import Fusion, OpDef, check_arity

PARALLEL_MIN_ELEMENTS = 1 << 15


@dataclass(frozen=True)
class UpSamplingAttrs:
    scale: int
    sample_type: Literal["nearest", "bilinear"]
    num_args: int = 1
    num_filter: int = 0
    multi_input_mode: Literal["concat", "sum"] = "concat"

    IGNORED = ("workspace",)

    def __post_init__(self):
        if self.scale < 1:
            raise ValueError(f"scale must be >= 1, got {self.scale}")
        check_arity("num_args", self.num_args)


def _inputs(a: UpSamplingAttrs):
    if a.sample_type == "bilinear":
        return ("data", "weight")
    return tuple(f"arg{i}" for i in range(a.num_args))


def _infer(a: UpSamplingAttrs, s):
    if a.sample_type == "bilinear":
        return _bilinear_infer(a, s)
    first = s.known("arg0")
    if len(first) != 4:
        s.fail(f"input 'arg0' has shape {first}: UpSampling needs 4-D (NCHW) data", input="arg0")
    oh, ow = first[2] * a.scale, first[3] * a.scale
    channels = 0
    for name in _inputs(a):
        x = s.known(name)
        if len(x) != 4 or x[0] != first[0]:
            s.fail(f"input {name!r} has shape {x}: expected 4-D data with batch {first[0]}", input=name)
        if oh % x[2] or x[3] * (oh // x[2]) != ow:
            s.fail(f"input {name!r} ({x[2]}x{x[3]}) does not scale by an integer to the output {oh}x{ow}",
                   input=name)
        if a.multi_input_mode == "sum":
            if channels and x[1] != channels:
                s.fail(f"input {name!r} has {x[1]} channels, expected {channels} (multi_input_mode='sum')",
                       input=name)
            channels = x[1]
        else:
            channels += x[1]
    return [(first[0], channels, oh, ow)]


def _lower(a: UpSamplingAttrs, ctx):
    if a.sample_type == "bilinear":
        return "kernels/resize_upsampling_bilinear.c.j2", _bilinear_vars(a, ctx.in_type("data").shape, False)
    y = ctx.out_type(0).shape
    inputs, off = [], 0
    for i, name in enumerate(_inputs(a)):
        x = ctx.in_type(name).shape
        inputs.append(dict(name=name, planes=x[0] * x[1], channels=x[1], h=x[2], w=x[3], hw=x[2] * x[3], scale=y[2] // x[2],
                           c_off=off, out_c=y[1], ohw=y[2] * y[3], first=a.multi_input_mode == "concat" or i == 0))
        off += x[1] if a.multi_input_mode == "concat" else 0
    return "kernels/upsampling.c.j2", dict(
        what=f"nearest upsampling x{a.scale} of {a.num_args} input(s) ({a.multi_input_mode}) -> {y}",
        oh=y[2], ow=y[3], inputs=inputs, parallel=prod(y) >= PARALLEL_MIN_ELEMENTS)


def _grad(a: UpSamplingAttrs, g):
    if a.sample_type == "bilinear":
        outs = g.emit("_backward_UpSampling_bilinear", [g.ograd(), g.input("data"), g.input("weight")],
                      scale=a.scale)
        return {"data": outs[0], "weight": outs[1]}
    attrs = {f: getattr(a, f) for f in ("scale", "sample_type", "num_args", "num_filter", "multi_input_mode")}
    shapes = tuple(g.type_of(g.input(n)).shape for n in _inputs(a))
    outs = g.emit("_backward_UpSampling", [g.ograd()], in_shapes=shapes, **attrs)
    return dict(zip(_inputs(a), outs))


def _flops(a: UpSamplingAttrs, ins, outs) -> int:
    if a.sample_type == "bilinear":
        return 2 * prod(ins[0].shape) * prod(ins[1].shape[2:])
    return prod(outs[0].shape) * (a.num_args - 1 if a.multi_input_mode == "sum" else 0)


UPSAMPLING = register(OpDef(
    name="UpSampling", attrs=UpSamplingAttrs, inputs=_inputs, infer=_infer,
    fusion=lambda a: Fusion.OPAQUE if a.sample_type == "bilinear" else Fusion.INJECTIVE,
    flops=_flops, lower=_lower, grad=_grad, doc=__doc__))


@dataclass(frozen=True)
class UpSamplingBackwardAttrs(UpSamplingAttrs):
    in_shapes: tuple[tuple[int, ...], ...] = ()


def _bwd_lower(a: UpSamplingBackwardAttrs, ctx):
    y = ctx.in_type("ograd").shape
    names = ["out"] if a.num_args == 1 else [f"out{i}" for i in range(a.num_args)]
    inputs, off = [], 0
    for name, x in zip(names, a.in_shapes):
        inputs.append(dict(name=name, planes=x[0] * x[1], channels=x[1], h=x[2], w=x[3], hw=x[2] * x[3],
                           scale=y[2] // x[2], c_off=off, out_c=y[1], ohw=y[2] * y[3]))
        off += x[1] if a.multi_input_mode == "concat" else 0
    return "kernels/upsampling_backward.c.j2", dict(
        what=f"nearest upsampling x{a.scale} backward ({a.multi_input_mode}): block sums of ograd{list(y)}",
        ow=y[3], inputs=inputs, parallel=prod(y) >= PARALLEL_MIN_ELEMENTS)


UPSAMPLING_BACKWARD = register(OpDef(
    name="_backward_UpSampling", attrs=UpSamplingBackwardAttrs, inputs=lambda a: ("ograd",),
    output_names=lambda a: tuple(f"{n}_grad" for n in _inputs(a)), infer=lambda a, s: [tuple(x) for x in a.in_shapes],
    fusion=Fusion.OPAQUE, lower=_bwd_lower, flops=lambda a, ins, outs: prod(ins[0].shape)))


# -- sample_type='bilinear': MXNet's depthwise Deconvolution ---------------------------------------------------
def bilinear_geometry(scale: int) -> tuple[int, int, int]:
    """(kernel, stride, pad) of MXNet's GetDeconvolutionParam."""
    return 2 * scale - scale % 2, scale, scale // 2          # pad: ceil((scale - 1) / 2)


def _bilinear_infer(a: UpSamplingAttrs, s):
    x = s.known("data")
    if len(x) != 4:
        s.fail(f"input 'data' has shape {x}: bilinear UpSampling needs 4-D (NCHW) data", input="data")
    if a.num_filter != x[1]:
        s.fail(f"num_filter={a.num_filter} must equal the data's {x[1]} channels (bilinear UpSampling is a "
               "depthwise Deconvolution with num_group = num_filter)", input="data")
    k = bilinear_geometry(a.scale)[0]
    s.expect("weight", (x[1], 1, k, k), f"(one {k}x{k} kernel per channel for scale {a.scale})")
    return [(x[0], x[1], x[2] * a.scale, x[3] * a.scale)]


def _bilinear_vars(a, x: tuple, backward: bool) -> dict:
    k, st, pad = bilinear_geometry(a.scale)
    oh, ow = x[2] * a.scale, x[3] * a.scale
    return dict(what=f"bilinear UpSampling x{a.scale}{' backward' if backward else ''}: depthwise deconvolution "
                     f"of {x}, kernel {k}, stride {st}, pad {pad}",
                backward=backward, batch=x[0], channels=x[1], planes=x[0] * x[1], h=x[2], w=x[3], oh=oh, ow=ow,
                in_plane=x[2] * x[3], out_plane=oh * ow, k=k, kk=k * k, stride=st, pad=pad,
                parallel=x[0] * x[1] * oh * ow * 4 >= PARALLEL_MIN_ELEMENTS)


@dataclass(frozen=True)
class UpSamplingBilinearBackwardAttrs:
    scale: int


def _bilinear_bwd_infer(a: UpSamplingBilinearBackwardAttrs, s):
    return [s.known("data"), s.known("weight")]


UPSAMPLING_BILINEAR_BACKWARD = register(OpDef(
    name="_backward_UpSampling_bilinear", attrs=UpSamplingBilinearBackwardAttrs,
    inputs=lambda a: ("ograd", "data", "weight"), output_names=lambda a: ("data_grad", "weight_grad"),
    infer=_bilinear_bwd_infer, fusion=Fusion.OPAQUE,
    flops=lambda a, ins, outs: 4 * prod(ins[1].shape) * prod(ins[2].shape[2:]),
    lower=lambda a, ctx: ("kernels/resize_upsampling_bilinear.c.j2",
                          _bilinear_vars(a, ctx.in_type("data").shape, True))))
