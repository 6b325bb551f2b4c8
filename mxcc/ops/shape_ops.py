"""Shape operators: Reshape, expand_dims, squeeze, identity (_copy), BlockGrad and transpose (Cast: math_ops.py).

All but transpose are views of their input (no kernel, no copy; a copy kernel only when the view is a
graph output); their gradients are the output gradient viewed in the input's shape (BlockGrad's is zero),
transpose's is the transpose by the inverse permutation. Reshape follows MXNet 1.9's InferReshapeShape code for code (0 copy, -1 infer, -2 copy
the rest, -3 merge two, -4 split one into the next two codes, `reverse` from the right), and turns every
code sequence MXNet would reject, misread or corrupt memory on into a ShapeError naming the node.
transpose is a strided copy through the generic loop kernel (`kernels/loops.c.j2`).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Optional

from mxcc.ops import register
from mxcc.ops._util import elementwise_loop, norm_axis, strides
from mxcc.ops.base import Fusion, NoAttrs, OpDef
from mxcc.ops.reshape import view_grad

# ----------------------------------------------------------------------------------------------- Reshape


@dataclass(frozen=True)
class ReshapeAttrs:
    shape: tuple[int, ...] = ()
    reverse: bool = False
    target_shape: Optional[tuple[int, ...]] = None   # deprecated form: 0 marks the one inferred dim
    keep_highest: bool = False                       # with target_shape: keep data's first dim


def reshape_codes(codes: tuple, dshape: tuple, reverse: bool, s) -> tuple:
    """The output shape for MXNet's special codes; every inconsistency is a ShapeError."""
    def bad(msg: str):
        s.fail(f"shape codes {tuple(codes)}{' (reverse)' if reverse else ''} cannot reshape {tuple(dshape)}: "
               f"{msg}", input="data")

    d, sp = list(dshape), list(codes)
    if reverse:
        d.reverse()
        sp.reverse()
    tmp: list[int] = []
    src, inf, i = 0, -1, 0
    while i < len(sp):
        v = sp[i]
        if v == 0:
            if src >= len(d):
                bad("code 0 has no input dimension left to copy")
            tmp.append(d[src])
            src += 1
        elif v == -1:
            if inf >= 0:
                bad("only one dimension can be inferred (-1)")
            if i != len(tmp):
                # MXNet 1.9 writes the inferred size at index i of the output (the code's position), which
                # after a -2 or -4 is another dimension or past the end (memory corruption): refuse.
                bad(f"-1 after a -2/-4 code: MXNet would infer output dimension {i} instead of {len(tmp)}")
            inf = len(tmp)
            tmp.append(1)
            src += 1
        elif v == -2:
            tmp.extend(d[src:])
            src = len(d)
        elif v == -3:
            if src + 1 >= len(d):
                bad("code -3 needs two input dimensions left to merge")
            tmp.append(d[src] * d[src + 1])
            src += 2
        elif v == -4:
            if i + 2 >= len(sp):
                bad("code -4 must be followed by the two sizes to split into")
            if src >= len(d):
                bad("code -4 has no input dimension left to split")
            d0, (d1, d2) = d[src], sp[i + 1:i + 3]
            src += 1
            i += 2
            if d1 == -1 and d2 == -1:
                bad("the two sizes after -4 cannot both be -1")
            if d1 == -1 and d2 > 0:
                d1 = d0 // d2
            if d2 == -1 and d1 > 0:
                d2 = d0 // d1
            if d1 <= 0 or d2 <= 0 or d1 * d2 != d0:
                bad(f"-4 cannot split dimension {d0} into ({sp[i - 1]}, {sp[i]})")
            tmp += [d1, d2]
        elif v > 0:
            tmp.append(v)
            src += 1
        else:
            bad(f"unknown code {v} (codes are positive sizes, 0, -1, -2, -3, -4)")
        i += 1
    size = prod(dshape)
    if inf >= 0:
        rest = prod(tmp)
        if size % rest:
            bad(f"the -1 dimension cannot be inferred: {size} elements do not divide by {rest}")
        tmp[inf] = size // rest
    if reverse:
        tmp.reverse()
    if prod(tmp) != size:
        bad(f"the result {tuple(tmp)} has {prod(tmp)} elements, the input {size}")
    return tuple(tmp)


def _legacy_target_shape(a: ReshapeAttrs, x: tuple, s) -> tuple:
    o = list(a.target_shape)
    start = 0
    if a.keep_highest:
        o[0], start = x[0], 1
    zeros = [i for i in range(start, len(o)) if o[i] == 0]
    if len(zeros) == 1:
        o[zeros[0]] = 1
        o[zeros[0]] = prod(x) // prod(o)
    if any(v <= 0 for v in o) or prod(o) != prod(x):
        s.fail(f"target_shape {a.target_shape} gives {tuple(o)}, which does not hold the {prod(x)} elements "
               f"of {x}", input="data")
    return tuple(o)


def _reshape_infer(a: ReshapeAttrs, s):
    x = s.known("data")
    if a.shape:
        return [reshape_codes(a.shape, x, a.reverse, s)]
    if a.target_shape:
        return [_legacy_target_shape(a, x, s)]
    s.fail("Reshape needs a non-empty `shape` attribute", input="data")


RESHAPE = register(OpDef(
    name="Reshape", aliases=("reshape",), attrs=ReshapeAttrs, inputs=lambda a: ("data",), infer=_reshape_infer,
    fusion=Fusion.INJECTIVE, view=True, grad=view_grad, doc=__doc__))

# ------------------------------------------------------------------------------------ expand_dims, squeeze


@dataclass(frozen=True)
class ExpandDimsAttrs:
    axis: int


def _expand_infer(a: ExpandDimsAttrs, s):
    x = s.known("data")
    ax = a.axis + len(x) + 1 if a.axis < 0 else a.axis
    if not 0 <= ax <= len(x):
        s.fail(f"axis {a.axis} is out of range for a {len(x)}-d input (allowed {-len(x) - 1}..{len(x)})",
               input="data")
    return [x[:ax] + (1,) + x[ax:]]


@dataclass(frozen=True)
class SqueezeAttrs:
    axis: Optional[tuple[int, ...]] = None


def _squeeze_infer(a: SqueezeAttrs, s):
    x = s.known("data")
    if a.axis is None:
        drop = {i for i, d in enumerate(x) if d == 1}
    else:
        drop = set()
        for ax in a.axis:
            i = norm_axis(ax, len(x), s)
            if x[i] != 1:
                s.fail(f"cannot squeeze axis {ax}: its size is {x[i]}, not 1 (data {x})", input="data")
            if i in drop:
                s.fail(f"axis {ax} is given twice", input="data")
            drop.add(i)
    out = tuple(d for i, d in enumerate(x) if i not in drop)
    return [out or (1,)]          # MXNet: squeezing every dimension leaves (1,)


EXPAND_DIMS = register(OpDef(
    name="expand_dims", attrs=ExpandDimsAttrs, inputs=lambda a: ("data",), infer=_expand_infer,
    fusion=Fusion.INJECTIVE, view=True, grad=view_grad, doc=__doc__))
SQUEEZE = register(OpDef(
    name="squeeze", attrs=SqueezeAttrs, inputs=lambda a: ("data",), infer=_squeeze_infer,
    fusion=Fusion.INJECTIVE, view=True, grad=view_grad, doc=__doc__))

# ---------------------------------------------------------------------------------- identity, BlockGrad



def _same(a, s):
    return [s.known("data")]


IDENTITY = register(OpDef(
    name="_copy", aliases=("identity",), attrs=NoAttrs, inputs=lambda a: ("data",), infer=_same,
    fusion=Fusion.INJECTIVE, view=True, grad=view_grad, doc="identity: out = data (a view)."))
BLOCK_GRAD = register(OpDef(
    name="BlockGrad", aliases=("stop_gradient",), attrs=NoAttrs, inputs=lambda a: ("data",), infer=_same,
    fusion=Fusion.INJECTIVE, view=True, grad=lambda a, g: {},     # no gradient flows back: it is zero
    doc="BlockGrad: the identity forward; stops gradients (training: the input's gradient is zero)."))

# -------------------------------------------------------------------------------------------- transpose


@dataclass(frozen=True)
class TransposeAttrs:
    axes: tuple[int, ...] = ()


def _perm(a: TransposeAttrs, x: tuple, s=None) -> tuple[int, ...]:
    if not a.axes:
        return tuple(reversed(range(len(x))))
    if len(a.axes) != len(x):
        s.fail(f"axes {a.axes} must list all {len(x)} dimensions of data {x}", input="data")
    perm = tuple(norm_axis(ax, len(x), s) for ax in a.axes)
    if sorted(perm) != list(range(len(x))):
        s.fail(f"axes {a.axes} is not a permutation of the {len(x)} dimensions", input="data")
    return perm


def _transpose_infer(a, s):
    x = s.known("data")
    return [tuple(x[p] for p in _perm(a, x, s))]


def _transpose_lower(a, ctx):
    x = ctx.in_type("data").shape
    perm = _perm(a, x)
    out = tuple(x[p] for p in perm)
    st = strides(x)
    return "kernels/loops.c.j2", elementwise_loop(
        f"out{list(out)} = transpose(data{list(x)}, axes={perm})", out, [("data", tuple(st[p] for p in perm))],
        lambda xs: xs[0])


def _transpose_grad(a, g):
    perm = _perm(a, g.type_of(g.input("data")).shape)
    inverse = tuple(perm.index(i) for i in range(len(perm)))
    return {"data": g.emit("transpose", [g.ograd()], axes=inverse)[0]}


TRANSPOSE = register(OpDef(
    name="transpose", attrs=TransposeAttrs, inputs=lambda a: ("data",), infer=_transpose_infer,
    fusion=Fusion.INJECTIVE, lower=_transpose_lower, grad=_transpose_grad, doc=__doc__))
