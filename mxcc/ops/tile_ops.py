"""Replicating and restacking operators, MXNet 1.9.1 semantics: broadcast_to, broadcast_like, tile, repeat,
stack and reshape_like.

- broadcast_to(shape): same number of dimensions; a 0 in shape keeps data's size; a size-1 dimension stretches.
  broadcast_like(lhs, rhs, lhs_axes, rhs_axes): to rhs's shape (same ndim, as broadcast_to), or, with both axes
  tuples given, lhs's size-1 axes lhs_axes[i] take rhs's sizes at rhs_axes[i] (negative axes count from the end;
  one tuple without the other is ignored, as MXNet does).
- tile(reps): the shorter of data's shape and reps is padded with leading 1s; reps=() is the identity.
- repeat(repeats, axis): each element repeated along axis (axis=None: of the flattened data).
- stack(*data, axis, num_args): a new axis (axis in [-(ndim+1), ndim]); inputs of one shape.
- reshape_like(lhs, rhs, lhs_begin, lhs_end, rhs_begin, rhs_end): lhs's dims [lhs_begin, lhs_end) replaced by
  rhs's dims [rhs_begin, rhs_end) (None: the whole range; negative: from the end); a view of lhs.
broadcast_*, tile and repeat are one loop nest reading data with stride 0 along the copies (`kernels/loops.c.j2`);
stack is a block copy per input (`kernels/copy_rows.c.j2`). Zero-sized results (reps or repeats of 0, which
MXNet 1.9 allows) are errors: mxcc has no 0-sized tensors.
Gradients: the output gradient summed over the copies (`sum` over the stretched axes of a view of it, so
tile and repeat reshape it first), stack's split by `_backward_Concat`, reshape_like's viewed in lhs's shape;
the `rhs` of broadcast_like and reshape_like get none (zero), as in MXNet.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Optional

from mxcc.ops import concat, register
from mxcc.ops._util import broadcast_strides, elementwise_loop, norm_axis, strides
from mxcc.ops.base import Fusion, OpDef, check_arity


def _replicate_lower(what: str, src: str, in_shape: tuple, out_shape: tuple) -> tuple[str, dict]:
    """out = src read with stride 0 along the dimensions where in_shape is 1 (same ndim as out_shape)."""
    return "kernels/loops.c.j2", elementwise_loop(what, out_shape, [(src, broadcast_strides(in_shape, out_shape))],
                                                  lambda xs: xs[0])


def _summed_back(g, ograd, view_shape: tuple, axes: tuple, shape: tuple, keepdims: bool = False):
    """The gradient of a replication: ograd viewed as `view_shape`, summed over `axes`, viewed as `shape`."""
    if axes:
        if view_shape != g.type_of(ograd).shape:
            ograd = g.emit("_reshape_to", [ograd], shape=view_shape)[0]
        ograd = g.emit("sum", [ograd], axis=axes, keepdims=keepdims)[0]
    if g.type_of(ograd).shape != tuple(shape):
        ograd = g.emit("_reshape_to", [ograd], shape=shape)[0]
    return ograd


def _stretched(in_shape: tuple, out_shape: tuple) -> tuple[int, ...]:
    return tuple(i for i, (d, o) in enumerate(zip(in_shape, out_shape)) if d != o)


# ------------------------------------------------------------------------------------------ broadcast_to


@dataclass(frozen=True)
class BroadcastToAttrs:
    shape: tuple[int, ...] = ()


def _broadcast_to_infer(a: BroadcastToAttrs, s):
    x = s.known("data")
    if len(a.shape) != len(x):
        s.fail(f"data of shape {x} cannot be broadcast to {a.shape}: the number of dimensions differs", input="data")
    out = []
    for d, t in zip(x, a.shape):
        if t < 0 or (t and d != t and d != 1):
            s.fail(f"data of shape {x} cannot be broadcast to {a.shape}", input="data")
        out.append(t or d)
    return [tuple(out)]


def _broadcast_grad(name: str):
    def grad(a, g):
        x, out = g.type_of(g.input(name)).shape, g.type_of(g.output()).shape
        return {name: _summed_back(g, g.ograd(), out, _stretched(x, out), x, keepdims=True)}
    return grad


BROADCAST_TO = register(OpDef(
    name="broadcast_to", attrs=BroadcastToAttrs, inputs=lambda a: ("data",), infer=_broadcast_to_infer,
    fusion=Fusion.INJECTIVE, grad=_broadcast_grad("data"), doc=__doc__,
    lower=lambda a, ctx: _replicate_lower(f"out{list(ctx.out_type().shape)} = broadcast_to(data"
                                          f"{list(ctx.in_type('data').shape)})", "data",
                                          ctx.in_type("data").shape, ctx.out_type().shape)))

# ---------------------------------------------------------------------------------------- broadcast_like


@dataclass(frozen=True)
class BroadcastLikeAttrs:
    lhs_axes: Optional[tuple[int, ...]] = None
    rhs_axes: Optional[tuple[int, ...]] = None


def _broadcast_like_infer(a: BroadcastLikeAttrs, s):
    lhs, rhs = s.known("lhs"), s.known("rhs")
    if a.lhs_axes is None or a.rhs_axes is None:
        if len(lhs) != len(rhs) or any(p != q and p != 1 for p, q in zip(lhs, rhs)):
            s.fail(f"lhs of shape {lhs} cannot be broadcast to rhs's shape {rhs}", input="lhs", got=lhs)
        return [tuple(rhs)]
    if len(a.lhs_axes) != len(a.rhs_axes):
        s.fail(f"lhs_axes {a.lhs_axes} and rhs_axes {a.rhs_axes} must have the same length", input="lhs")
    if not a.lhs_axes:
        s.fail("lhs_axes and rhs_axes cannot be empty", input="lhs")
    out = list(lhs)
    for la, ra in zip(a.lhs_axes, a.rhs_axes):
        i = norm_axis(la, len(lhs), s, input="lhs", what="lhs_axes entry")
        j = norm_axis(ra, len(rhs), s, input="rhs", what="rhs_axes entry")
        if lhs[i] != 1:
            s.fail(f"axis {la} of lhs {lhs} has size {lhs[i]}, not 1: it cannot be broadcast to {rhs[j]}",
                   input="lhs", got=lhs)
        out[i] = rhs[j]
    return [tuple(out)]


BROADCAST_LIKE = register(OpDef(
    name="broadcast_like", attrs=BroadcastLikeAttrs, inputs=lambda a: ("lhs", "rhs"), infer=_broadcast_like_infer,
    fusion=Fusion.INJECTIVE, grad=_broadcast_grad("lhs"), doc=__doc__,
    lower=lambda a, ctx: _replicate_lower(f"out{list(ctx.out_type().shape)} = broadcast_like(lhs"
                                          f"{list(ctx.in_type('lhs').shape)}), rhs is not read", "lhs",
                                          ctx.in_type("lhs").shape, ctx.out_type().shape)))

# ------------------------------------------------------------------------------------------------- tile


@dataclass(frozen=True)
class TileAttrs:
    reps: tuple[int, ...]


def _tile_view(a: TileAttrs, x: tuple) -> tuple[tuple, tuple]:
    """(padded data shape, interleaved (r0, d0, r1, d1, ...): the output's shape with each copy count apart)."""
    n = max(len(x), len(a.reps))
    d, r = (1,) * (n - len(x)) + tuple(x), (1,) * (n - len(a.reps)) + tuple(a.reps)
    return d, tuple(v for pair in zip(r, d) for v in pair)


def _tile_infer(a: TileAttrs, s):
    x = s.known("data")
    if any(r < 1 for r in a.reps):
        s.fail(f"reps {a.reps} must be positive (mxcc has no 0-sized tensors)", input="data")
    if not a.reps:
        return [x]
    d, inter = _tile_view(a, x)
    return [tuple(inter[2 * i] * inter[2 * i + 1] for i in range(len(d)))]


def _tile_lower(a: TileAttrs, ctx):
    x = ctx.in_type("data").shape
    d, inter = _tile_view(a, x)
    st = strides(d)
    return "kernels/loops.c.j2", elementwise_loop(
        f"out{list(ctx.out_type().shape)} = tile(data{list(x)}, reps={tuple(a.reps)}), viewed as {list(inter)}",
        inter, [("data", tuple(v for s in st for v in (0, s)))], lambda xs: xs[0])


def _tile_grad(a: TileAttrs, g):
    x = g.type_of(g.input("data")).shape
    _, inter = _tile_view(a, x)
    axes = tuple(2 * i for i in range(len(inter) // 2) if inter[2 * i] > 1)
    return {"data": _summed_back(g, g.ograd(), inter, axes, x)}


TILE = register(OpDef(
    name="tile", attrs=TileAttrs, inputs=lambda a: ("data",), infer=_tile_infer, fusion=Fusion.INJECTIVE,
    lower=_tile_lower, grad=_tile_grad, doc=__doc__))

# ----------------------------------------------------------------------------------------------- repeat


@dataclass(frozen=True)
class RepeatAttrs:
    repeats: int
    axis: Optional[int] = None

    def __post_init__(self):
        if self.repeats < 1:
            raise ValueError(f"repeats must be positive, got {self.repeats} (mxcc has no 0-sized tensors)")


def _repeat_view(a: RepeatAttrs, x: tuple, s=None) -> tuple[tuple, int]:
    """(the output as (outer, n, repeats, inner), the position of the repeats axis in it)."""
    if a.axis is None:
        return (prod(x), a.repeats), 1
    ax = norm_axis(a.axis, len(x), s)
    return (prod(x[:ax]), x[ax], a.repeats, prod(x[ax + 1:])), 2


def _repeat_infer(a: RepeatAttrs, s):
    x = s.known("data")
    if a.axis is None:
        return [(prod(x) * a.repeats,)]
    ax = norm_axis(a.axis, len(x), s)
    return [x[:ax] + (x[ax] * a.repeats,) + x[ax + 1:]]


def _repeat_lower(a: RepeatAttrs, ctx):
    x = ctx.in_type("data").shape
    view, rax = _repeat_view(a, x)
    st = list(strides(tuple(d for i, d in enumerate(view) if i != rax)))
    st.insert(rax, 0)
    return "kernels/loops.c.j2", elementwise_loop(
        f"out{list(ctx.out_type().shape)} = repeat(data{list(x)}, repeats={a.repeats}, axis={a.axis}), "
        f"viewed as {list(view)}", view, [("data", tuple(st))], lambda xs: xs[0])


def _repeat_grad(a: RepeatAttrs, g):
    x = g.type_of(g.input("data")).shape
    view, rax = _repeat_view(a, x)
    return {"data": _summed_back(g, g.ograd(), view, (rax,), x)}


REPEAT = register(OpDef(
    name="repeat", attrs=RepeatAttrs, inputs=lambda a: ("data",), infer=_repeat_infer, fusion=Fusion.INJECTIVE,
    lower=_repeat_lower, grad=_repeat_grad, doc=__doc__))

# ------------------------------------------------------------------------------------------------ stack


@dataclass(frozen=True)
class StackAttrs:
    num_args: int
    axis: int = 0

    def __post_init__(self):
        check_arity("num_args", self.num_args)


def _stack_inputs(a: StackAttrs) -> tuple[str, ...]:
    return tuple(f"arg{i}" for i in range(a.num_args))


def _stack_infer(a: StackAttrs, s):
    names = _stack_inputs(a)
    shape = next((s.maybe(n) for n in names if s.maybe(n) is not None), None)
    if shape is None:
        s.known(names[0])
    for n in names:
        s.expect(n, shape, "(stacked inputs must have the same shape)")
    ax = norm_axis(a.axis, len(shape) + 1, s, input=names[0])
    return [tuple(shape[:ax]) + (a.num_args,) + tuple(shape[ax:])]


def _stack_lower(a: StackAttrs, ctx):
    x, out = ctx.in_type("arg0").shape, ctx.out_type().shape
    ax = norm_axis(a.axis, len(out), None)
    outer, inner = prod(x[:ax]), prod(x[ax:])
    copies = [dict(dst="out", dst_off=i * inner, dst_ld=a.num_args * inner, src=name, src_off=0, src_ld=inner,
                   rows=outer, cols=inner, note=f"{name} -> out[..., {i}, ...]")
              for i, name in enumerate(_stack_inputs(a))]
    what = f"stack {a.num_args} inputs{list(x)} along a new axis {ax}: out{list(out)}"
    return concat.copy_rows(what, copies)


def _stack_grad(a: StackAttrs, g):
    x = g.type_of(g.input("arg0")).shape
    ax = norm_axis(a.axis, len(x) + 1, None)
    parts = g.emit("_backward_Concat", [g.ograd()], num_args=a.num_args, dim=ax, sizes=(1,) * a.num_args)
    return {name: g.emit("_reshape_to", [p], shape=x)[0] for name, p in zip(_stack_inputs(a), parts)
            if g.needs(name)}


STACK = register(OpDef(
    name="stack", attrs=StackAttrs, inputs=_stack_inputs, infer=_stack_infer, fusion=Fusion.INJECTIVE,
    lower=_stack_lower, grad=_stack_grad, doc=__doc__))

# ----------------------------------------------------------------------------------------- reshape_like


@dataclass(frozen=True)
class ReshapeLikeAttrs:
    lhs_begin: Optional[int] = None
    lhs_end: Optional[int] = None
    rhs_begin: Optional[int] = None
    rhs_end: Optional[int] = None


def _dim_range(side: str, ndim: int, begin, end, s) -> tuple[int, int]:
    """MXNet's ReshapeLikeRangeCanonicalize: [begin, end) of ndim dims, None for the whole, negative from the end."""
    b = 0 if begin is None else begin + ndim if begin < 0 else begin
    e = ndim if end is None else end + ndim if end < 0 else end
    if not 0 <= b < e <= ndim:
        s.fail(f"{side}_begin={begin}, {side}_end={end} is not a non-empty range of {side}'s {ndim} dimensions",
               input=side)
    return b, e


def _reshape_like_infer(a: ReshapeLikeAttrs, s):
    lhs, rhs = s.known("lhs"), s.known("rhs")
    lb, le = _dim_range("lhs", len(lhs), a.lhs_begin, a.lhs_end, s)
    rb, re = _dim_range("rhs", len(rhs), a.rhs_begin, a.rhs_end, s)
    out = tuple(lhs[:lb]) + tuple(rhs[rb:re]) + tuple(lhs[le:])
    if prod(out) != prod(lhs):
        s.fail(f"cannot reshape lhs {lhs} to {out}: the sizes differ", input="rhs", got=rhs)
    return [out]


RESHAPE_LIKE = register(OpDef(
    name="reshape_like", attrs=ReshapeLikeAttrs, inputs=lambda a: ("lhs", "rhs"), infer=_reshape_like_infer,
    fusion=Fusion.INJECTIVE, view=True, doc=__doc__,
    grad=lambda a, g: {"lhs": g.emit("_reshape_to", [g.ograd()], shape=g.type_of(g.input("lhs")).shape)[0]}))
