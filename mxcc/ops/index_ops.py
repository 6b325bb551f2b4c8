"""Indexing operators, MXNet 1.9.1 semantics: slice, slice_like, take, pick, one_hot, _arange, _contrib_arange_like.

- slice(begin, end, step): per axis, None entries and negative indices as MXNet's GetIndexRange (a begin past
  the end clamps to the last element when stepping backwards; an end of None with a negative step runs to
  index 0); axes past len(begin) are kept whole. An empty result (MXNet 1.9 allows 0-sized shapes) is a
  ShapeError: mxcc has no 0-sized tensors. slice_like(axes) slices [0, shape_like's size) on `axes` (every
  axis when empty). Both are one strided loop nest (`kernels/loops.c.j2`); their gradient, `_backward_slice`,
  zeroes the input's gradient and copies the output gradient into the slice (`kernels/idx_scatter.c.j2`).
- take(a, indices, axis, mode), pick(data, index, axis, keepdims, mode): float indices, converted as MXNet
  converts them (truncated toward zero, to int64 for take and int32 for pick; NaN and out-of-range values
  give the integer's minimum), then clipped to the axis or wrapped (Python's modulo). mode='raise' (take)
  clips too: mxcc's kernels do not raise. pick's axis=None is refused, as MXNet 1.9.1 does.
  Gradients (`_backward_take`, `_backward_pick`): zeros, then the output gradient added at the selected
  positions (repeated indices add up); the indices get none (zero), as in MXNet.
- one_hot(indices, depth, on_value, off_value, dtype): index i of row k is on where (int)indices[k] == i;
  out-of-range indices give a row of off_value. on/off hold what `dtype` holds (mxcc keeps float32: see Cast
  in ops/math_ops.py). No gradient (zero).
- _arange(start, stop, step, repeat, dtype): no inputs; stop=None means range(0, start); length
  ceil((stop - start) / step) * repeat; value i is start + (i / repeat) * step computed in the dtype as MXNet
  does (float32 arithmetic; int32/int64: start and step truncated to integers first; float64 in double), for
  dtype float32, float64, int32, int64. An inference build computes it once at bind time (fold_constants).
  _contrib_arange_like(data, start, step, repeat, axis): the same over data's shape (or data.shape[axis]),
  float32; data's gradient is zero.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from math import prod
from typing import Literal, Optional

import numpy as np

from mxcc.ops import register
from mxcc.ops._util import PARALLEL_MIN_ELEMENTS, index_expr, loops_vars, merge_loops, norm_axis, strides
from mxcc.ops.base import Fusion, OpDef, c_float
from mxcc.ops.math_ops import cast_value


def strided_copy(what: str, shape: tuple, dst: tuple[str, tuple, int], src: tuple[str, tuple, int]) -> dict:
    """Variables of `kernels/loops.c.j2` for `dst[...] = src[...]` over the index space `shape`, each side
    (cname, strides over shape, base offset); dimensions merged where both sides allow."""
    ext, (dst_st, src_st) = merge_loops(tuple(shape), [dst[1], src[1]])

    def body(vars_):
        return [f"{dst[0]}[{index_expr(dst_st, vars_, dst[2])}] = {src[0]}[{index_expr(src_st, vars_, src[2])}]"]
    return loops_vars(what, ext, body)


# ------------------------------------------------------------------------------------------------ slice


@dataclass(frozen=True)
class SliceAttrs:
    begin: tuple[Optional[int], ...]
    end: tuple[Optional[int], ...]
    step: tuple[Optional[int], ...] = ()


def slice_ranges(a: SliceAttrs, x: tuple, s, input: str = "data") -> list[tuple[int, int, int]]:
    """(first index, step, count) per axis of x: MXNet 1.9's GetIndexRange and SetSliceOpOutputDimSize."""
    nb = len(a.begin)
    if nb > len(x):
        s.fail(f"begin {a.begin} has {nb} entries, more than the {len(x)} dimensions of data {x}", input=input)
    if len(a.end) != nb:
        s.fail(f"begin {a.begin} and end {a.end} must have the same length", input=input)
    if a.step and len(a.step) != nb:
        s.fail(f"step {a.step} and begin {a.begin} must have the same length", input=input)
    out = []
    for i, n in enumerate(x):
        if i >= nb:
            out.append((0, 1, n))
            continue
        st = a.step[i] if a.step and a.step[i] is not None else 1
        if st == 0:
            s.fail(f"step[{i}] cannot be 0", input=input)
        b = a.begin[i] if a.begin[i] is not None else (n - 1 if st < 0 else 0)
        e = a.end[i] if a.end[i] is not None else (-1 if st < 0 else n)
        b += n if b < 0 else 0
        e += n if e < 0 and a.end[i] is not None else 0
        b = 0 if b < 0 and st > 0 else n - 1 if b > n - 1 and st < 0 else b
        b = -1 if b < 0 or b > n - 1 else b
        e = min(max(e, -1), n)
        count = 0
        if b >= 0 and st > 0 and e > b:
            count = (e - b - 1) // st + 1
        elif b >= 0 and st < 0 and e < b:
            count = (b - e - 1) // -st + 1
        if count == 0:
            s.fail(f"slice begin={a.begin[i]}, end={a.end[i]}, step={st} of axis {i} (size {n}) is empty "
                   "(mxcc has no 0-sized tensors)", input=input)
        out.append((b, st, count))
    return out


def _slice_infer(a: SliceAttrs, s):
    return [tuple(c for _, _, c in slice_ranges(a, s.known("data"), s))]


def _slice_src(x: tuple, ranges) -> tuple[tuple, int]:
    """The input's strides over the output's index space and the offset of its first element."""
    st = strides(x)
    return tuple(s * step for s, (_, step, _) in zip(st, ranges)), sum(s * b for s, (b, _, _) in zip(st, ranges))


def _slice_lower(a: SliceAttrs, ctx):
    x, out = ctx.in_type("data").shape, ctx.out_type().shape
    src_st, base = _slice_src(x, slice_ranges(a, x, None))
    return "kernels/loops.c.j2", strided_copy(
        f"out{list(out)} = data{list(x)}[{_slice_text(a)}]", out, ("out", strides(out), 0), ("data", src_st, base))


def _slice_text(a: SliceAttrs) -> str:
    def part(i):
        b, e = a.begin[i], a.end[i]
        st = a.step[i] if a.step else None
        return ("" if b is None else str(b)) + ":" + ("" if e is None else str(e)) + ("" if st is None else f":{st}")
    return ", ".join(part(i) for i in range(len(a.begin)))


def _slice_grad(a: SliceAttrs, g):
    return {"data": g.emit("_backward_slice", [g.ograd()], begin=a.begin, end=a.end, step=a.step,
                           data_shape=g.type_of(g.input("data")).shape)[0]}


SLICE = register(OpDef(
    name="slice", aliases=("crop",), attrs=SliceAttrs, inputs=lambda a: ("data",), infer=_slice_infer,
    fusion=Fusion.INJECTIVE, lower=_slice_lower, grad=_slice_grad, doc=__doc__))


@dataclass(frozen=True)
class SliceBackwardAttrs(SliceAttrs):
    data_shape: tuple[int, ...] = ()


def _slice_bwd_infer(a: SliceBackwardAttrs, s):
    want = tuple(c for _, _, c in slice_ranges(a, tuple(a.data_shape), s, input="ograd"))
    s.expect("ograd", want, f"(the slice of {tuple(a.data_shape)})")
    return [tuple(a.data_shape)]


def _slice_bwd_lower(a: SliceBackwardAttrs, ctx):
    x, y = tuple(a.data_shape), ctx.in_type("ograd").shape
    dst_st, base = _slice_src(x, slice_ranges(a, x, None))
    v = strided_copy(f"slice backward: zeros{list(x)}, then [{_slice_text(a)}] = ograd{list(y)}", y,
                     ("out", dst_st, base), ("ograd", strides(y), 0))
    return "kernels/idx_scatter.c.j2", dict(v, zero=prod(x))


SLICE_BACKWARD = register(OpDef(
    name="_backward_slice", attrs=SliceBackwardAttrs, inputs=lambda a: ("ograd",), infer=_slice_bwd_infer,
    fusion=Fusion.INJECTIVE, lower=_slice_bwd_lower))

# ------------------------------------------------------------------------------------------- slice_like


@dataclass(frozen=True)
class SliceLikeAttrs:
    axes: tuple[int, ...] = ()


def _slice_like_infer(a: SliceLikeAttrs, s):
    x, like = s.known("data"), s.known("shape_like")
    if not a.axes:
        if len(x) != len(like):
            s.fail(f"without axes every axis is sliced: shape_like {like} needs data's {len(x)} dimensions",
                   input="shape_like", got=like)
        axes = range(len(x))
    else:
        axes = []
        for ax in a.axes:
            i = ax + len(x) if ax < 0 else ax
            if not 0 <= i < len(x) or i >= len(like):
                s.fail(f"axis {ax} is out of range for data {x} or shape_like {like}", input="shape_like")
            axes.append(i)
    out = list(x)
    for i in axes:
        if like[i] > x[i]:
            s.fail(f"axis {i} of shape_like {like} is longer than data's {x}", input="shape_like", got=like)
        out[i] = like[i]
    return [tuple(out)]


def _slice_like_lower(a: SliceLikeAttrs, ctx):
    x, out = ctx.in_type("data").shape, ctx.out_type().shape
    return "kernels/loops.c.j2", strided_copy(
        f"out{list(out)} = data{list(x)}[{', '.join(f':{d}' for d in out)}]", out, ("out", strides(out), 0),
        ("data", strides(x), 0))


def _slice_like_grad(a: SliceLikeAttrs, g):
    out = g.type_of(g.output()).shape
    return {"data": g.emit("_backward_slice", [g.ograd()], begin=(0,) * len(out), end=out,
                           data_shape=g.type_of(g.input("data")).shape)[0]}


SLICE_LIKE = register(OpDef(
    name="slice_like", attrs=SliceLikeAttrs, inputs=lambda a: ("data", "shape_like"), infer=_slice_like_infer,
    fusion=Fusion.INJECTIVE, lower=_slice_like_lower, grad=_slice_like_grad, doc=__doc__))

# ------------------------------------------------------------------------------------------ take, pick

# how MXNet turns a float index into an integer: (float range [lo, hi), the integer for NaN and outside it)
_INT64 = (c_float(-2.0 ** 63), c_float(2.0 ** 63), "INT64_MIN")
_INT32 = (c_float(-2.0 ** 31), c_float(2.0 ** 31), "INT32_MIN")


def _index_vars(n: int, mode: str, conversion: tuple) -> dict:
    lo, hi, minimum = conversion
    return dict(n=n, last=n - 1, mode="wrap" if mode == "wrap" else "clip", lo=lo, hi=hi, min=minimum)


@dataclass(frozen=True)
class TakeAttrs:
    axis: int = 0
    mode: Literal["clip", "raise", "wrap"] = "clip"


def _take_infer(a: TakeAttrs, s):
    x, idx = s.known("a"), s.known("indices")
    ax = norm_axis(a.axis, len(x), s, input="a")
    return [x[:ax] + tuple(idx) + x[ax + 1:]]


def _take_vars(a: TakeAttrs, x: tuple, count: int) -> dict:
    ax = norm_axis(a.axis, len(x), None)
    outer, inner = prod(x[:ax]), prod(x[ax + 1:])
    return dict(_index_vars(x[ax], a.mode, _INT64), outer=outer, count=count, inner=inner,
                parallel=outer * count * inner >= PARALLEL_MIN_ELEMENTS)


def _take_lower(a: TakeAttrs, ctx):
    x = ctx.in_type("a").shape
    v = _take_vars(a, x, prod(ctx.in_type("indices").shape))
    return "kernels/idx_take.c.j2", dict(
        v, what=f"out{list(ctx.out_type().shape)} = take(a{list(x)}, indices, axis={a.axis}, mode={v['mode']})")


def _take_grad(a: TakeAttrs, g):
    return {"a": g.emit("_backward_take", [g.ograd(), g.input("indices")], axis=a.axis, mode=a.mode,
                        a_shape=g.type_of(g.input("a")).shape)[0]}


TAKE = register(OpDef(
    name="take", attrs=TakeAttrs, inputs=lambda a: ("a", "indices"), infer=_take_infer, fusion=Fusion.INJECTIVE,
    lower=_take_lower, grad=_take_grad, doc=__doc__))


@dataclass(frozen=True)
class TakeBackwardAttrs(TakeAttrs):
    a_shape: tuple[int, ...] = ()


def _take_bwd_lower(a: TakeBackwardAttrs, ctx):
    x = tuple(a.a_shape)
    v = _take_vars(a, x, prod(ctx.in_type("indices").shape))
    return "kernels/idx_take_backward.c.j2", dict(
        v, total=prod(x), parallel=(v["outer"] > 1) & v["parallel"],
        what=f"take backward: a_grad{list(x)} = zeros, then ograd's rows added at the taken indices (axis={a.axis}, "
             f"mode={v['mode']})")


register(OpDef(
    name="_backward_take", attrs=TakeBackwardAttrs, inputs=lambda a: ("ograd", "indices"),
    infer=lambda a, s: [tuple(a.a_shape)], fusion=Fusion.OPAQUE, lower=_take_bwd_lower,
    flops=lambda a, ins, outs: prod(ins[0].shape)))


@dataclass(frozen=True)
class PickAttrs:
    axis: Optional[int] = -1
    keepdims: bool = False
    mode: Literal["clip", "wrap"] = "clip"

    def __post_init__(self):
        if self.axis is None:
            raise ValueError("axis=None is not supported by pick (MXNet 1.9.1 refuses it too): give an axis")


def _pick_shape(a: PickAttrs, x: tuple, s) -> tuple[int, tuple]:
    ax = norm_axis(a.axis, len(x), s)
    return ax, (x[:ax] + (1,) + x[ax + 1:] if a.keepdims else x[:ax] + x[ax + 1:]) or (1,)


def _pick_infer(a: PickAttrs, s):
    _, out = _pick_shape(a, s.known("data"), s)
    s.expect("index", out, f"(data {s.known('data')} without axis {a.axis})")
    return [out]


def _pick_vars(a: PickAttrs, x: tuple, backward: bool) -> dict:
    ax = norm_axis(a.axis, len(x), None)
    rows, inner = prod(x[:ax]) * prod(x[ax + 1:]), prod(x[ax + 1:])
    # position r = o * inner + c of index selects data[o, j, c]
    at = f"r * {x[ax]} + j" if inner == 1 else f"(r / {inner} * {x[ax]} + j) * {inner} + r % {inner}"
    return dict(_index_vars(x[ax], a.mode, _INT32), rows=rows, at=at, total=prod(x), backward=backward,
                parallel=rows >= PARALLEL_MIN_ELEMENTS)


def _pick_lower(a: PickAttrs, ctx):
    x = ctx.in_type("data").shape
    v = _pick_vars(a, x, False)
    return "kernels/idx_pick.c.j2", dict(
        v, what=f"out{list(ctx.out_type().shape)} = data{list(x)} at index along axis {a.axis} (mode={v['mode']})")


def _pick_grad(a: PickAttrs, g):
    return {"data": g.emit("_backward_pick", [g.ograd(), g.input("index")], axis=a.axis, keepdims=a.keepdims,
                           mode=a.mode, data_shape=g.type_of(g.input("data")).shape)[0]}


PICK = register(OpDef(
    name="pick", attrs=PickAttrs, inputs=lambda a: ("data", "index"), infer=_pick_infer, fusion=Fusion.INJECTIVE,
    lower=_pick_lower, grad=_pick_grad, doc=__doc__))


@dataclass(frozen=True)
class PickBackwardAttrs(PickAttrs):
    data_shape: tuple[int, ...] = ()


def _pick_bwd_lower(a: PickBackwardAttrs, ctx):
    x = tuple(a.data_shape)
    v = _pick_vars(a, x, True)
    return "kernels/idx_pick.c.j2", dict(
        v, what=f"pick backward: data_grad{list(x)} = zeros, then ograd at index along axis {a.axis} "
                f"(mode={v['mode']})")


register(OpDef(
    name="_backward_pick", attrs=PickBackwardAttrs, inputs=lambda a: ("ograd", "index"),
    infer=lambda a, s: [tuple(a.data_shape)], fusion=Fusion.INJECTIVE, lower=_pick_bwd_lower))

# ---------------------------------------------------------------------------------------------- one_hot

FLOAT_AND_INT_DTYPES = Literal["bfloat16", "float16", "float32", "float64", "int32", "int64", "int8", "uint8"]


@dataclass(frozen=True)
class OneHotAttrs:
    depth: int
    on_value: float = 1.0
    off_value: float = 0.0
    dtype: FLOAT_AND_INT_DTYPES = "float32"

    def __post_init__(self):
        if self.depth < 1:
            raise ValueError(f"depth must be positive, got {self.depth}")


def _one_hot_lower(a: OneHotAttrs, ctx):
    count = prod(ctx.in_type("indices").shape)
    on, off = cast_value(a.on_value, a.dtype), cast_value(a.off_value, a.dtype)
    return "kernels/idx_one_hot.c.j2", dict(count=count, depth=a.depth, bound=c_float(a.depth), on=c_float(on),
                                            off=c_float(off), parallel=count * a.depth >= PARALLEL_MIN_ELEMENTS)


ONE_HOT = register(OpDef(
    name="one_hot", attrs=OneHotAttrs, inputs=lambda a: ("indices",),
    infer=lambda a, s: [tuple(s.known("indices")) + (a.depth,)], fusion=Fusion.INJECTIVE, lower=_one_hot_lower,
    grad=lambda a, g: {}, doc=__doc__))

# ----------------------------------------------------------------------------------- _arange, arange_like


@dataclass(frozen=True)
class ArangeAttrs:
    start: float
    stop: Optional[float] = None
    step: float = 1.0
    repeat: int = 1
    infer_range: bool = False
    ctx: str = ""
    dtype: FLOAT_AND_INT_DTYPES = "float32"

    def __post_init__(self):
        if self.infer_range:
            raise ValueError("infer_range=True is not supported (the range must be given by start, stop, step)")
        if self.dtype not in ("float32", "float64", "int32", "int64"):
            raise ValueError(f"dtype={self.dtype} is not supported (float32, float64, int32, int64)")
        _check_range_attrs(self)


def _check_range_attrs(a) -> None:
    if a.step == 0:
        raise ValueError(f"step cannot be 0, received {a.step}")
    if a.repeat < 1:
        raise ValueError(f"repeat must be positive, received {a.repeat}")


def _arange_infer(a: ArangeAttrs, s):
    start, stop = (0.0, a.start) if a.stop is None else (a.start, a.stop)
    if (a.step > 0 and not start < stop) or (a.step < 0 and not start > stop):
        s.fail(f"invalid range (start, stop, step) = ({start}, {stop}, {a.step}): it is empty")
    return [(math.ceil((stop - start) / a.step) * a.repeat,)]


def _range_vars(what: str, n: int, start: float, step: float, repeat: int, dtype: str) -> dict:
    """`out[i] = start + (i / repeat) * step` in the arithmetic of `dtype`, as MXNet's range_fwd."""
    def value(vars_):
        k = vars_[0] if repeat == 1 else f"({vars_[0]} / {repeat})"
        if dtype in ("int32", "int64"):               # MXNet casts start and step to the integer type first
            return f"(float)({int(start)} + {k} * {int(step)})"
        if dtype == "float64":
            return f"(float)({float(start)!r} + (double){k} * {float(step)!r})"
        return f"{c_float(float(np.float32(start)))} + (float){k} * {c_float(float(np.float32(step)))}"
    return loops_vars(what, (n,), lambda vars_: [f"out[{vars_[0]}] = {value(vars_)}"])


def _arange_lower(a: ArangeAttrs, ctx):
    start, stop = (0.0, a.start) if a.stop is None else (a.start, a.stop)
    n = ctx.out_type().shape[0]
    return "kernels/loops.c.j2", _range_vars(
        f"out[{n}] = arange(start={start}, stop={stop}, step={a.step}, repeat={a.repeat}, dtype={a.dtype})",
        n, start, a.step, a.repeat, a.dtype)


ARANGE = register(OpDef(
    name="_arange", attrs=ArangeAttrs, inputs=lambda a: (), infer=_arange_infer, fusion=Fusion.INJECTIVE,
    lower=_arange_lower, flops=lambda a, ins, outs: 2 * prod(outs[0].shape), doc=__doc__))


@dataclass(frozen=True)
class ArangeLikeAttrs:
    start: float = 0.0
    step: float = 1.0
    repeat: int = 1
    ctx: str = ""
    axis: Optional[int] = None

    def __post_init__(self):
        _check_range_attrs(self)


def _arange_like_infer(a: ArangeLikeAttrs, s):
    x = s.known("data")
    return [x if a.axis is None else (x[norm_axis(a.axis, len(x), s)],)]


def _arange_like_lower(a: ArangeLikeAttrs, ctx):
    out = ctx.out_type().shape
    return "kernels/loops.c.j2", _range_vars(
        f"out{list(out)} = arange_like(start={a.start}, step={a.step}, repeat={a.repeat}) (data is not read)",
        prod(out), a.start, a.step, a.repeat, "float32")


ARANGE_LIKE = register(OpDef(
    name="_contrib_arange_like", attrs=ArangeLikeAttrs, inputs=lambda a: ("data",), infer=_arange_like_infer,
    fusion=Fusion.INJECTIVE, lower=_arange_like_lower, flops=lambda a, ins, outs: 2 * prod(outs[0].shape),
    grad=lambda a, g: {}, doc=__doc__))
