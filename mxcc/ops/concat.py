"""Concat (concat), SliceChannel (split) and slice_axis: block copies along one axis.

Viewing each tensor as (outer, axis * inner), every input of Concat, every output of SliceChannel and the
one slice of slice_axis is `outer` rows of contiguous floats at a constant column offset, so all three
lower to `kernels/copy_rows.c.j2`: one memcpy per row (one in all when outer == 1).
SliceChannel is multi-output (`output0`, `output1`, ... as MXNet names them); with squeeze_axis the split
axis (of size num_outputs) is dropped.
Gradients are the same copies the other way: `_backward_Concat` splits the output gradient (one kernel for
every input), SliceChannel's is a Concat of its outputs' gradients, `_backward_slice_axis` zero-fills and
copies the slice back.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Optional

from mxcc.ops import register
from mxcc.ops._util import PARALLEL_MIN_ELEMENTS, norm_axis
from mxcc.ops.base import Fusion, OpDef, check_arity


def _rows(shape: tuple, ax: int) -> tuple[int, int]:
    """(outer, inner): the row count and the floats per unit of the axis."""
    return prod(shape[:ax]), prod(shape[ax + 1:])


def _copy(dst: str, dst_off: int, dst_ld: int, src: str, src_off: int, src_ld: int, rows: int, cols: int,
          note: str) -> dict:
    return dict(dst=dst, dst_off=dst_off, dst_ld=dst_ld, src=src, src_off=src_off, src_ld=src_ld, rows=rows,
                cols=cols, note=note)


def copy_rows(what: str, copies: list[dict], zero=0) -> tuple[str, dict]:
    """`kernels/copy_rows.c.j2` for these block copies (Concat, SliceChannel, slice_axis, stack and their
    gradients): `total` floats in all, run in parts on the threads past PARALLEL_MIN_ELEMENTS unless it zeroes
    `out` first (SqueezeNet's concatenations on one core took 110-130 us on 2 threads, ORT's 61-72)."""
    total = sum(c["rows"] * c["cols"] for c in copies)
    return "kernels/copy_rows.c.j2", dict(what=what, copies=copies, zero=zero, total=total,
                                          parallel=not zero and total >= PARALLEL_MIN_ELEMENTS)


def drop_copies_in_place(variables: dict, address) -> tuple[dict, int]:
    """copy_rows' variables without the copies whose source already is their destination (a concatenation's
    inputs the planner placed in its output: their kernels wrote them there), and how many it dropped.
    `address(buffer name, float offset)`: where that float lies (comparable between buffers), or None."""
    def in_place(c):
        dst = address(c["dst"], c["dst_off"])
        return (not variables["zero"] and dst is not None and dst == address(c["src"], c["src_off"])
                and (c["rows"] == 1 or c["dst_ld"] == c["src_ld"]))

    keep = [c for c in variables["copies"] if not in_place(c)]
    dropped = len(variables["copies"]) - len(keep)
    if not dropped:
        return variables, 0
    what = f"{variables['what']}: {dropped} of {len(variables['copies'])} inputs written in place by their kernels"
    return copy_rows(what, keep)[1], dropped


# ------------------------------------------------------------------------------------------------ Concat


@dataclass(frozen=True)
class ConcatAttrs:
    num_args: int
    dim: int = 1

    def __post_init__(self):
        check_arity("num_args", self.num_args)


def _concat_inputs(a: ConcatAttrs) -> tuple[str, ...]:
    return tuple(f"arg{i}" for i in range(a.num_args))


def _concat_infer(a: ConcatAttrs, s):
    names = _concat_inputs(a)
    shapes = [s.known(n) for n in names]
    first = shapes[0]
    ax = norm_axis(a.dim, len(first), s, input=names[0], what="dim")
    for name, sh in zip(names[1:], shapes[1:]):
        if len(sh) != len(first) or any(p != q for i, (p, q) in enumerate(zip(sh, first)) if i != ax):
            want = first[:ax] + ("*",) + first[ax + 1:]
            s.fail(f"input {name!r} has shape {sh}, expected ({', '.join(map(str, want))}) to concatenate "
                   f"with {names[0]} {first} along dim {ax}", input=name, got=sh)
    return [first[:ax] + (sum(sh[ax] for sh in shapes),) + first[ax + 1:]]


def _concat_lower(a: ConcatAttrs, ctx):
    out = ctx.out_type().shape
    ax = norm_axis(a.dim, len(out), None)
    outer, inner = _rows(out, ax)
    copies, off = [], 0
    for name in _concat_inputs(a):
        n = ctx.in_type(name).shape[ax]
        copies.append(_copy("out", off * inner, out[ax] * inner, name, 0, n * inner, outer, n * inner,
                            f"{name} -> out[..., {off}:{off + n}, ...]"))
        off += n
    return copy_rows(f"concatenate {a.num_args} inputs along dim {ax} into {list(out)}", copies)


def _concat_input_slices(a: ConcatAttrs, in_types, out_type):
    """Each input's byte offset in the output, when each is one contiguous range of it: nothing but 1s before
    the axis, and the axis not the first (a batch axis, which a dynamic batch would resize)."""
    shape = out_type.shape
    ax = norm_axis(a.dim, len(shape), None)
    if ax == 0 or prod(shape[:ax]) != 1:
        return None
    offs, off = [], 0
    for t in in_types:
        offs.append(off)
        off += t.nbytes
    return tuple(offs)


def _concat_grad(a: ConcatAttrs, g):
    outs = g.emit("_backward_Concat", [g.ograd()], num_args=a.num_args, dim=a.dim,
                  sizes=tuple(g.type_of(g.input(n)).shape[norm_axis(a.dim, len(g.type_of(g.ograd()).shape), None)]
                              for n in _concat_inputs(a)))
    return dict(zip(_concat_inputs(a), outs))


CONCAT = register(OpDef(
    name="Concat", aliases=("concat",), attrs=ConcatAttrs, inputs=_concat_inputs, infer=_concat_infer,
    fusion=Fusion.INJECTIVE, lower=_concat_lower, grad=_concat_grad, input_slices=_concat_input_slices,
    doc=__doc__))


@dataclass(frozen=True)
class ConcatBackwardAttrs:
    num_args: int
    dim: int
    sizes: tuple[int, ...]        # each input's extent along dim

    def __post_init__(self):
        check_arity("num_args", self.num_args)
        if len(self.sizes) != self.num_args or any(n < 0 for n in self.sizes):
            raise ValueError(f"sizes={self.sizes} must give num_args={self.num_args} extents >= 0")


def _concat_bwd_infer(a: ConcatBackwardAttrs, s):
    y = s.known("ograd")
    ax = norm_axis(a.dim, len(y), s, input="ograd", what="dim")
    return [y[:ax] + (n,) + y[ax + 1:] for n in a.sizes]


def _concat_bwd_lower(a: ConcatBackwardAttrs, ctx):
    y = ctx.in_type("ograd").shape
    ax = norm_axis(a.dim, len(y), None)
    outer, inner = _rows(y, ax)
    names = ["out"] if a.num_args == 1 else [f"out{j}" for j in range(a.num_args)]
    copies, off = [], 0
    for name, n in zip(names, a.sizes):
        copies.append(_copy(name, 0, n * inner, "ograd", off * inner, y[ax] * inner, outer, n * inner,
                            f"ograd[..., {off}:{off + n}, ...] -> {name}"))
        off += n
    return copy_rows(f"Concat backward: split ograd{list(y)} along dim {ax}", copies)


CONCAT_BACKWARD = register(OpDef(
    name="_backward_Concat", attrs=ConcatBackwardAttrs, inputs=lambda a: ("ograd",), infer=_concat_bwd_infer,
    output_names=lambda a: tuple(f"arg{i}_grad" for i in range(a.num_args)), fusion=Fusion.INJECTIVE,
    lower=_concat_bwd_lower))

# ------------------------------------------------------------------------------------------ SliceChannel


@dataclass(frozen=True)
class SliceChannelAttrs:
    num_outputs: int
    axis: int = 1
    squeeze_axis: bool = False

    def __post_init__(self):
        check_arity("num_outputs", self.num_outputs)


def _split_infer(a: SliceChannelAttrs, s):
    x = s.known("data")
    ax = norm_axis(a.axis, len(x), s)
    if x[ax] % a.num_outputs:
        s.fail(f"cannot split axis {ax} of size {x[ax]} into num_outputs={a.num_outputs} equal parts",
               input="data")
    piece = x[ax] // a.num_outputs
    if a.squeeze_axis:
        if piece != 1:
            s.fail(f"squeeze_axis=True needs axis {ax} of size num_outputs={a.num_outputs}, got {x[ax]}",
                   input="data")
        if len(x) == 1:
            s.fail("squeeze_axis=True on a 1-d input would leave 0-d outputs", input="data")
        out = x[:ax] + x[ax + 1:]
    else:
        out = x[:ax] + (piece,) + x[ax + 1:]
    return [out] * a.num_outputs


def _split_lower(a: SliceChannelAttrs, ctx):
    x = ctx.in_type("data").shape
    ax = norm_axis(a.axis, len(x), None)
    outer, inner = _rows(x, ax)
    piece = x[ax] // a.num_outputs
    names = ["out"] if a.num_outputs == 1 else [f"out{j}" for j in range(a.num_outputs)]
    copies = [_copy(name, 0, piece * inner, "data", j * piece * inner, x[ax] * inner, outer, piece * inner,
                    f"data[..., {j * piece}:{(j + 1) * piece}, ...] -> {name}")
              for j, name in enumerate(names)]
    return copy_rows(f"split data{list(x)} along axis {ax} into {a.num_outputs} parts", copies)


def _split_grad(a: SliceChannelAttrs, g):
    x = g.type_of(g.input("data")).shape
    ax = norm_axis(a.axis, len(x), None)
    piece = x[:ax] + (x[ax] // a.num_outputs,) + x[ax + 1:]
    parts = [g.ograd(i) for i in range(a.num_outputs)]
    if a.squeeze_axis:
        parts = [g.emit("_reshape_to", [p], shape=piece)[0] for p in parts]
    return {"data": g.emit("Concat", parts, num_args=a.num_outputs, dim=ax)[0]}


SLICE_CHANNEL = register(OpDef(
    name="SliceChannel", aliases=("split",), attrs=SliceChannelAttrs, inputs=lambda a: ("data",),
    output_names=lambda a: tuple(f"output{i}" for i in range(a.num_outputs)), infer=_split_infer,
    fusion=Fusion.INJECTIVE, lower=_split_lower, grad=_split_grad, doc=__doc__))

# -------------------------------------------------------------------------------------------- slice_axis


@dataclass(frozen=True)
class SliceAxisAttrs:
    axis: int
    begin: int
    end: Optional[int] = None   # None: to the end (MXNet requires the attribute, "None" allowed)


def _slice_range(a: SliceAxisAttrs, x: tuple, s) -> tuple[int, int, int]:
    """MXNet's GetSliceAxisParams: (axis, begin, end) normalized, negative indices from the end."""
    ax = norm_axis(a.axis, len(x), s)
    n = x[ax]
    b = a.begin + n if a.begin < 0 else a.begin
    e = n if a.end is None else (a.end + n if a.end < 0 else a.end)
    if not (0 <= b < e <= n):
        s.fail(f"invalid slice begin={a.begin}, end={a.end} for axis {ax} of size {n}", input="data")
    return ax, b, e


def _slice_infer(a, s):
    x = s.known("data")
    ax, b, e = _slice_range(a, x, s)
    return [x[:ax] + (e - b,) + x[ax + 1:]]


def _slice_lower(a, ctx):
    x = ctx.in_type("data").shape
    ax, b, e = _slice_range(a, x, None)
    outer, inner = _rows(x, ax)
    copy = _copy("out", 0, (e - b) * inner, "data", b * inner, x[ax] * inner, outer, (e - b) * inner,
                 f"data[..., {b}:{e}, ...]")
    return copy_rows(f"slice axis {ax} of data{list(x)} to [{b}, {e})", [copy])


def _slice_grad(a: SliceAxisAttrs, g):
    shape = g.type_of(g.input("data")).shape
    return {"data": g.emit("_backward_slice_axis", [g.ograd()], axis=a.axis, begin=a.begin, end=a.end,
                           data_shape=shape)[0]}


SLICE_AXIS = register(OpDef(
    name="slice_axis", attrs=SliceAxisAttrs, inputs=lambda a: ("data",), infer=_slice_infer,
    fusion=Fusion.INJECTIVE, lower=_slice_lower, grad=_slice_grad, doc=__doc__))


@dataclass(frozen=True)
class SliceAxisBackwardAttrs(SliceAxisAttrs):
    data_shape: tuple[int, ...] = ()


def _slice_bwd_lower(a: SliceAxisBackwardAttrs, ctx):
    x = tuple(a.data_shape)
    ax, b, e = _slice_range(a, x, None)
    outer, inner = _rows(x, ax)
    copy = _copy("out", b * inner, x[ax] * inner, "ograd", 0, (e - b) * inner, outer, (e - b) * inner,
                 f"ograd -> out[..., {b}:{e}, ...]")
    return copy_rows(f"slice_axis backward: zeros{list(x)} with [{b}, {e}) of axis {ax} from ograd", [copy],
                     zero=prod(x))


SLICE_AXIS_BACKWARD = register(OpDef(
    name="_backward_slice_axis", attrs=SliceAxisBackwardAttrs, inputs=lambda a: ("ograd",),
    infer=lambda a, s: [tuple(a.data_shape)], fusion=Fusion.INJECTIVE, lower=_slice_bwd_lower))
