"""sum, mean, max, min over axes (MXNet's ReduceAxesParam: axis, keepdims, exclude).

`axis` may be an int, a tuple or None/() (every axis: the result has shape (1,), or all ones with
keepdims, never 0-d; `exclude` is ignored then, as in MXNet's ReduceAxesShapeImpl); `exclude=True`
reduces every axis *not* listed. Lowering merges adjacent kept and adjacent reduced dimensions and
prints `kernels/reduce.c.j2`: outer loops over output elements, inner loops over the reduced ones.
sum and mean accumulate in double (MXNet's sum reducer is Kahan-compensated; plain float32 would drift
on long axes); max and min propagate NaN.
Gradients (`_backward_reduce`, one broadcasting loop over the input's shape): sum spreads the output
gradient, mean divides it by the count, max/min send it to every element equal to the result (ties all
receive it, as MXNet does).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Optional

from mxcc.ops import register
from mxcc.ops._util import (PARALLEL_MIN_ELEMENTS, broadcast_strides, elementwise_loop, index_expr, loop_nest,
                            merge_loops, strides)
from mxcc.ops.base import Fusion, OpDef, elementwise_flops


@dataclass(frozen=True)
class ReduceAttrs:
    axis: Optional[tuple[int, ...]] = None
    keepdims: bool = False
    exclude: bool = False


def reduced_axes(a: ReduceAttrs, x: tuple, s=None) -> tuple[int, ...]:
    """The axes actually reduced, ascending (errors as MXNet: out of range, duplicates)."""
    if not a.axis:
        return tuple(range(len(x)))
    axes = sorted(ax + len(x) if ax < 0 else ax for ax in a.axis)
    if not all(0 <= ax < len(x) for ax in axes):
        s.fail(f"reduction axis {a.axis} is out of range for data {x}", input="data")
    if len(set(axes)) != len(axes):
        s.fail(f"reduction axes {a.axis} have duplicates", input="data")
    if a.exclude:
        return tuple(i for i in range(len(x)) if i not in axes)
    return tuple(axes)


def _infer(a: ReduceAttrs, s):
    x = s.known("data")
    red = reduced_axes(a, x, s)
    if a.keepdims:
        return [tuple(1 if i in red else d for i, d in enumerate(x))]
    return [tuple(d for i, d in enumerate(x) if i not in red) or (1,)]


# op -> (accumulator type, initial value, step statement of acc and x, result expression of acc and n)
REDUCERS = {
    "sum": ("double", "0.0", "acc += {x}", "(float)acc"),
    "mean": ("double", "0.0", "acc += {x}", "(float)(acc / {n}.0)"),
    "max": ("float", "-INFINITY", "acc = mxcc_maxf(acc, {x})", "acc"),
    "min": ("float", "INFINITY", "acc = mxcc_minf(acc, {x})", "acc"),
}


def _lower(op: str):
    acc_type, init, step, finish = REDUCERS[op]

    def lower(a: ReduceAttrs, ctx):
        x = ctx.in_type("data").shape
        red = set(reduced_axes(a, x))
        st = strides(x)
        kept = [d for d in range(len(x)) if d not in red]
        kept_ext = tuple(x[d] for d in kept)
        outer_ext, (outer_in, outer_out) = merge_loops(kept_ext, [tuple(st[d] for d in kept), strides(kept_ext)])
        inner_ext, (inner_in,) = merge_loops(tuple(x[d] for d in sorted(red)), [tuple(st[d] for d in sorted(red))])
        if prod(outer_ext) == 1:
            outer_ext, outer_in, outer_out = (), (), ()
        if prod(inner_ext) == 1:
            inner_ext, inner_in = (), ()
        outer, ovars, body = loop_nest(outer_ext, "o", 1 if outer_ext else 2)   # no outer loop: a bare block
        inner, ivars, inner_body = loop_nest(inner_ext, "r", len(body) // 4)
        n = prod(x[d] for d in red)
        x_at = f"data[{index_expr(outer_in + inner_in, ovars + ivars)}]"
        what = (f"out{list(ctx.out_type().shape)} = {op}(data{list(x)}) over axes {sorted(red)} "
                f"({n} elements each)")
        return "kernels/reduce.c.j2", dict(
            what=what, bare_block=not outer_ext, outer=outer, inner=inner, body_indent=body,
            inner_indent=inner_body, close_indent=outer[-1]["indent"] if outer else "    ",
            acc_type=acc_type, init=init, step=step.format(x=x_at), finish=finish.format(n=n),
            out_index=index_expr(outer_out, ovars),
            parallel=bool(outer_ext) and prod(x) >= PARALLEL_MIN_ELEMENTS, collapse=max(1, len(outer_ext)))
    return lower


def _flops(a, ins, outs):
    return prod(ins[0].shape)


def _grad(op: str):
    def grad(a: ReduceAttrs, g):
        ins = [g.ograd()] + ([g.input("data"), g.output()] if op in ("max", "min") else [])
        shape = g.type_of(g.input("data")).shape
        return {"data": g.emit("_backward_reduce", ins, reducer=op, axis=reduced_axes(a, shape), data_shape=shape)[0]}
    return grad


ALIASES = {"sum": ("sum_axis",), "mean": (), "max": ("max_axis",), "min": ("min_axis",)}
OPS = {op: register(OpDef(name=op, aliases=ALIASES[op], attrs=ReduceAttrs, inputs=lambda a: ("data",),
                          infer=_infer, fusion=Fusion.REDUCE, flops=_flops, lower=_lower(op), grad=_grad(op),
                          doc=__doc__))
       for op in REDUCERS}


@dataclass(frozen=True)
class ReduceBackwardAttrs:
    reducer: str                    # sum | mean | max | min
    axis: tuple[int, ...]           # the reduced axes of the input (normalized)
    data_shape: tuple[int, ...]


def _bwd_lower(a: ReduceBackwardAttrs, ctx):
    x = tuple(a.data_shape)
    kept = tuple(1 if d in a.axis else n for d, n in enumerate(x))     # the result with keepdims
    bst = broadcast_strides(kept, x)
    n = prod(x[d] for d in a.axis)
    operands = [("ograd", bst)] + ([("data", strides(x)), ("output", bst)] if a.reducer in ("max", "min") else [])
    expr = {"sum": lambda v: v[0], "mean": lambda v: f"{v[0]} * {1.0 / n!r}f",
            "max": lambda v: f"({v[1]} == {v[2]} ? {v[0]} : 0.0f)", "min": lambda v: f"({v[1]} == {v[2]} ? {v[0]} : 0.0f)"}
    return "kernels/loops.c.j2", elementwise_loop(
        f"{a.reducer} backward: out{list(x)} from ograd{list(kept)} broadcast over axes {list(a.axis)}", x, operands,
        expr[a.reducer])


REDUCE_BACKWARD = register(OpDef(
    name="_backward_reduce", attrs=ReduceBackwardAttrs,
    inputs=lambda a: ("ograd", "data", "output") if a.reducer in ("max", "min") else ("ograd",),
    infer=lambda a, s: [tuple(a.data_shape)], fusion=Fusion.BROADCAST, flops=elementwise_flops(1),
    lower=_bwd_lower))
