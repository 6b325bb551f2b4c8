"""topk, sort, argsort, argmax and argmin, as MXNet 1.9.1's CPU kernels compute them (indices as float32).

topk/sort/argsort view the data as rows along `axis` (axis None: the flattened data, one row) and order each row
exactly as MXNet's TopKSort: libstdc++'s std::sort when k * 8 > n, else std::partial_sort of the first k, on the
row's indices with `vals[a] < vals[b]` (ascending) or `>` (descending). Neither is stable, so ties come out in
the order those algorithms leave them; the kernel (kernels/det_topk.c.j2) carries a port of both, so mxcc's tie
order is MXNet's. k <= 0 means the whole row. ret_typ: 'value' (outputs value, hidden indices), 'indices',
'mask' (1 where the row's top k are, the data's shape), 'both' (value, indices). sort = topk(k=0, value),
argsort = topk(k=0, indices); `dtype` must be float32 (mxcc's only element type).
Gradients: topk with 'value'/'both' and sort scatter the value gradient to the selected positions (the order
found again from the data, the same way: `_backward_topk`); indices and masks have none (MXNet's is zero).
argmax/argmin: per row along axis (None: the flattened data), MXNet's reduce: the first index of the maximum
(minimum), a NaN winning from where it first appears; output without the axis (keepdims: with it as 1; never
0-d: (1,)); no gradient (kernels/det_argmax.c.j2).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal, Optional

import numpy as np

from mxcc.codegen.batchvar import at_max
from mxcc.ops import register
from mxcc.ops._util import norm_axis
from mxcc.ops.base import Fusion, OpDef, c_float

PARALLEL_MIN_ELEMENTS = 1 << 14
DTYPES = Literal["float16", "float32", "float64", "int32", "int64", "uint8"]


def _float32_only(dtype: str) -> None:
    if dtype != "float32":
        raise ValueError(f"dtype={dtype!r}: mxcc computes float32 tensors only (indices as float32, MXNet's default)")


@dataclass(frozen=True)
class TopKAttrs:
    axis: Optional[int] = -1
    k: int = 1
    ret_typ: Literal["both", "indices", "mask", "value"] = "indices"
    is_ascend: bool = False
    dtype: DTYPES = "float32"

    def __post_init__(self):
        _float32_only(self.dtype)


@dataclass(frozen=True)
class SortAttrs:
    axis: Optional[int] = -1
    is_ascend: bool = True


@dataclass(frozen=True)
class ArgSortAttrs:
    axis: Optional[int] = -1
    is_ascend: bool = True
    dtype: DTYPES = "float32"

    def __post_init__(self):
        _float32_only(self.dtype)


def _as_topk(a) -> TopKAttrs:
    if isinstance(a, TopKAttrs):
        return a
    return TopKAttrs(axis=a.axis, k=0, ret_typ="value" if isinstance(a, SortAttrs) else "indices",
                     is_ascend=a.is_ascend)


@dataclass(frozen=True)
class Rows:
    """The data as (outer, n, inner): rows (o, i) of n values, stride inner; k of each row selected."""
    outer: int
    n: int
    inner: int
    k: int


def _rows(a: TopKAttrs, x: tuple, s=None) -> Rows:
    if a.axis is None:
        n = prod(x)
        outer, inner = 1, 1
    else:
        ax = norm_axis(a.axis, len(x), s) if s is not None else a.axis % len(x)
        outer, n, inner = prod(x[:ax]), x[ax], prod(x[ax + 1:])
    k = n if a.k <= 0 else a.k
    if k > n and s is not None:
        s.fail(f"k={a.k} is larger than the {n} elements along the axis", input="data")
    return Rows(outer, n, inner, k)


def _topk_shape(a: TopKAttrs, x: tuple, r: Rows) -> tuple:
    if a.ret_typ == "mask":
        return tuple(x)
    if a.axis is None:
        return (r.k,)
    ax = a.axis % len(x)
    return (*x[:ax], r.k, *x[ax + 1:])


def _outputs(a) -> tuple[str, ...]:
    t = _as_topk(a)
    return ("output0", "output1") if t.ret_typ in ("value", "both") else ("output",)


def _infer(a, s):
    t = _as_topk(a)
    x = s.known("data")
    if not x:
        s.fail("needs data of at least 1 dimension, got a scalar", input="data")
    y = _topk_shape(t, x, _rows(t, x, s))
    return [y, y] if len(_outputs(a)) == 2 else [y]


def _vars(t: TopKAttrs, x: tuple, what: str, backward: bool, names: tuple[str, ...]) -> dict:
    r = _rows(t, x)
    parallel = r.outer * r.inner > 1 and prod(x) >= PARALLEL_MIN_ELEMENTS
    return dict(what=what, backward=backward, rows=r.outer * r.inner, n=r.n, inner=r.inner, k=r.k,
                row_stride=r.n * r.inner, out_row_stride=r.k * r.inner, full_sort=r.k * 8 > r.n,
                less=">" if not t.is_ascend else "<", ret_typ=t.ret_typ, parallel=parallel,
                row_scratch=2 * r.n if parallel else 0,
                out_values=names[0] if t.ret_typ in ("value", "both") and not backward else "",
                out_indices=names[-1] if t.ret_typ in ("indices", "both") and not backward else "",
                out_mask=names[0] if t.ret_typ == "mask" and not backward else "")


def _describe(t: TopKAttrs, x: tuple) -> str:
    r = _rows(t, x)
    where = "the flattened data" if t.axis is None else f"axis {t.axis}"
    algo = "std::sort" if r.k * 8 > r.n else "std::partial_sort"
    return (f"top {r.k} of {r.n} ({'ascending' if t.is_ascend else 'descending'}, {t.ret_typ}) along {where} of {x}, "
            f"{r.outer * r.inner} rows, as MXNet's {algo}")


def _lower(a, ctx):
    t = _as_topk(a)
    x = ctx.in_type("data").shape
    visible = 2 if t.ret_typ == "both" else 1
    names = ("out0", "out1") if visible == 2 else ("out",)
    return "kernels/det_topk.c.j2", _vars(t, x, _describe(t, x), False, names)


def _workspace(a, ins, outs, const=frozenset()) -> int:
    """Per row being ordered: its values (float) and its index permutation (int): for every row when the rows
    run in parallel, else one."""
    t = _as_topk(a)
    v = _vars(t, ins[-1].shape, "", False, ("out",))
    return (v["rows"] if v["parallel"] else 1) * v["n"] * 8


def _grad(a, g):
    t = _as_topk(a)
    if t.ret_typ not in ("value", "both"):
        return {}                       # indices and masks: no gradient (MXNet's is zero)
    return {"data": g.emit("_backward_topk", [g.ograd(0), g.input("data")], axis=t.axis, k=t.k,
                           ret_typ=t.ret_typ, is_ascend=t.is_ascend)[0]}


def _flops(a, ins, outs) -> int:
    n = at_max(prod(ins[0].shape))      # a dynamic batch: the count at the maximum
    return n * max(1, n.bit_length())


for _name, _attrs in (("topk", TopKAttrs), ("sort", SortAttrs), ("argsort", ArgSortAttrs)):
    register(OpDef(
        name=_name, attrs=_attrs, inputs=lambda a: ("data",), infer=_infer, fusion=Fusion.OPAQUE, flops=_flops,
        output_names=_outputs, hidden_outputs=lambda a: 1 if _as_topk(a).ret_typ == "value" else 0,
        lower=_lower, workspace=_workspace, grad=_grad, doc=__doc__))


def _bwd_lower(a: TopKAttrs, ctx):
    x = ctx.in_type("data").shape
    return "kernels/det_topk.c.j2", _vars(a, x, "backward: the gradient of the " + _describe(a, x), True, ("out",))


TOPK_BACKWARD = register(OpDef(
    name="_backward_topk", attrs=TopKAttrs, inputs=lambda a: ("ograd", "data"),
    infer=lambda a, s: [s.known("data")], fusion=Fusion.OPAQUE, flops=_flops, lower=_bwd_lower,
    workspace=_workspace))


# ---------------------------------------------------------------------------------------------- argmax/argmin
@dataclass(frozen=True)
class ArgMaxAttrs:
    axis: Optional[int] = None
    keepdims: bool = False


def _arg_infer(a: ArgMaxAttrs, s):
    x = s.known("data")
    if not x:
        s.fail("needs data of at least 1 dimension, got a scalar", input="data")
    if a.axis is None:
        return [(1,) * len(x) if a.keepdims else (1,)]
    ax = norm_axis(a.axis, len(x), s)
    y = (*x[:ax], 1, *x[ax + 1:]) if a.keepdims else (*x[:ax], *x[ax + 1:])
    return [y or (1,)]


def _arg_lower(largest: bool):
    def lower(a: ArgMaxAttrs, ctx):
        x = ctx.in_type("data").shape
        if a.axis is None:
            outer, n, inner = 1, prod(x), 1
        else:
            ax = a.axis % len(x)
            outer, n, inner = prod(x[:ax]), x[ax], prod(x[ax + 1:])
        return "kernels/det_argmax.c.j2", dict(
            what=f"arg{'max' if largest else 'min'} of {n} values along "
                 f"{'the flattened data' if a.axis is None else f'axis {a.axis}'} of {x}",
            rows=outer * inner, n=n, inner=inner, row_stride=n * inner, keeps=">=" if largest else "<=",
            init=c_float(float(np.finfo(np.float32).max) * (-1 if largest else 1)),
            parallel=(outer * inner > 1) & (prod(x) >= PARALLEL_MIN_ELEMENTS))
    return lower


for _name, _largest in (("argmax", True), ("argmin", False)):
    register(OpDef(
        name=_name, attrs=ArgMaxAttrs, inputs=lambda a: ("data",), infer=_arg_infer, fusion=Fusion.REDUCE,
        flops=lambda a, ins, outs: prod(ins[0].shape), lower=_arg_lower(_largest),
        grad=lambda a, g: {}, doc=__doc__))      # no gradient (MXNet's is zero)
