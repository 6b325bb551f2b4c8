"""UpSampling, sample_type='nearest': each input repeated `scale_i` times along H and W, where scale_i
makes it as large as the first input times `scale`; several inputs are concatenated along channels
(multi_input_mode='concat', the default) or summed ('sum'), as MXNet's upsampling-inl.h does.

Inputs are named arg0, arg1, ... (MXNet's names for nearest). 'bilinear' (a Deconvolution with a weight)
is not supported. Lowered to kernels/upsampling.c.j2: one gather loop per input.
Backward (`_backward_UpSampling`, one kernel for every input): each input pixel's gradient is the sum of the
scale x scale block of the output gradient it was copied to (its channels' block, or every input reads
the same channels with 'sum').
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
        if self.sample_type != "nearest":
            raise ValueError("sample_type='bilinear' is not supported (use a Deconvolution with a bilinear "
                             "weight); only 'nearest'")
        if self.scale < 1:
            raise ValueError(f"scale must be >= 1, got {self.scale}")
        check_arity("num_args", self.num_args)


def _inputs(a: UpSamplingAttrs):
    return tuple(f"arg{i}" for i in range(a.num_args))


def _infer(a: UpSamplingAttrs, s):
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
    attrs = {f: getattr(a, f) for f in ("scale", "sample_type", "num_args", "num_filter", "multi_input_mode")}
    shapes = tuple(g.type_of(g.input(n)).shape for n in _inputs(a))
    outs = g.emit("_backward_UpSampling", [g.ograd()], in_shapes=shapes, **attrs)
    return dict(zip(_inputs(a), outs))


UPSAMPLING = register(OpDef(
    name="UpSampling", attrs=UpSamplingAttrs, inputs=_inputs, infer=_infer, fusion=Fusion.INJECTIVE,
    flops=lambda a, ins, outs: prod(outs[0].shape) * (a.num_args - 1 if a.multi_input_mode == "sum" else 0),
    lower=_lower, grad=_grad, doc=__doc__))


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
