"""MXNet 1.9's NumPy-mode operator names (`mx.npx.set_np()`, `mx.np`/`mx.npx`), mapped onto mxcc's operators.

What NumPy-mode blocks export (checked with MXNet 1.9.1: tests/data/numpy_mode/gen.py lists every name and
attribute of a CNN, an MLP and a block of common np ops): Gluon's layers still write the legacy names
(Convolution, BatchNorm, Pooling, FullyConnected, Activation, Flatten, Dropout, Embedding, LayerNorm), and
`npx.convolution`, `npx.fully_connected`, ... are MXNet *aliases* of those ops, written back under the legacy
name; `np.*` functions and a few `npx.*` ones are operators of their own. Three kinds here:

- ALIASES: an MXNet alias of an op mxcc has (`_npx_convolution` = Convolution): the very same OpDef under one
  more name, as MXNet's registry does (a JSON naming the alias loads; mxcc writes the canonical name back).
- RENAMED: an operator of its own whose attributes and semantics are those of an mxcc op (`_npi_add` is
  broadcast_add: numpy broadcasting, right-aligned; `_npi_exp` is exp; `_npi_multiply_scalar` is _mul_scalar;
  `_np_copy` is identity): the op's OpDef with MXNet's name.
- TRANSLATED: the same computation with other attribute names, defaults or shape rules, each an OpDef whose
  functions convert the attributes and call the existing op's rules (`_translated`), with its own shape rule
  where numpy's differs: `_np_sum`/`_npi_mean`/`_np_max`/`_np_min` (axis=None reduces everything to a 0-d
  result, axis=() reduces nothing), `_np_transpose` (axes=None reverses), `_np_reshape` (only -1 is special),
  `_npx_reshape` (NumPy-mode codes -1..-6, unlike Reshape's: -2 copy one dim, -3 drop a 1, -4 copy the
  rest, -5 merge two, -6 split one, `reverse`), `_np_squeeze` (squeezing every dim leaves a 0-d result),
  `_npi_concatenate` (axis; None concatenates the flattened inputs), `_np_moveaxis`, `_npi_full_like`,
  `_np_dot` and `_npi_matmul` (dot where numpy's dot equals MXNet's, batch_dot for stacks of equal batch shape).
Anything else NumPy mode writes is not mapped: an unknown name is UnsupportedOpError, and an attribute or
shape this mapping cannot honour (a dtype other than float32/float64, `initial`, order='F', matmul batch
broadcasting, np.dot of a 3-d right operand) is an AttrError or ShapeError naming the node. Inputs keep the
mxcc op's names (`data`, `lhs`/`rhs`, `arg0`...), not numpy's `a`/`b`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from math import prod
from typing import Literal, Optional

from mxcc.ops import REGISTRY, register
# every module whose ops the tables below name, imported so that they are registered before this one reads them
# (the registry imports the op modules in name order; numpy_ops comes before several of them)
from mxcc.ops import (activation, batch_norm, broadcast, concat, convolution, deconvolution, dot, dropout,  # noqa: F401
                      elemwise, embedding, fully_connected, index_ops, init_ops, leaky_relu, math_ops, norm_ops,
                      ordering_ops, pooling, reduce, reshape, rnn, shape_ops, softmax, tile_ops)
from mxcc.ops._util import norm_axis
from mxcc.ops.base import Fusion, NoAttrs, OpDef, c_float, check_arity

# -- aliases: MXNet registers these names for the same operator (nnvm's add_alias) -----------------------------
ALIASES = {
    "_npx_activation": "Activation", "_npx_batch_norm": "BatchNorm", "_npx_convolution": "Convolution",
    "_npx_deconvolution": "Deconvolution", "_npx_fully_connected": "FullyConnected", "_npx_pooling": "Pooling",
    "_npx_dropout": "Dropout", "_npx_embedding": "Embedding", "_npx_layer_norm": "LayerNorm",
    "_npx_leaky_relu": "LeakyReLU", "_npx_rnn": "RNN", "_npx_roi_pooling": "ROIPooling",
    "_npx_softmax": "softmax", "_npx_log_softmax": "log_softmax", "_npx_batch_dot": "batch_dot",
    "_npx_batch_flatten": "Flatten", "_npx_arange_like": "_contrib_arange_like", "_npx_erf": "erf",
    "_npx_cast": "Cast", "_npi_cast": "Cast", "_npx_one_hot": "one_hot", "_npx_pick": "pick",
    "_npx_reshape_like": "reshape_like", "_npx_slice": "slice", "_npi_slice": "slice", "_npx_topk": "topk",
    "_npi_clip": "clip", "_npi_expand_dims": "expand_dims", "_npi_maximum": "broadcast_maximum",
    "_npi_minimum": "broadcast_minimum", "_npi_maximum_scalar": "_maximum_scalar",
    "_npi_minimum_scalar": "_minimum_scalar", "_npi_swapaxes": "SwapAxis", "_npi_take": "take",
    "_npi_tile": "tile", "_np_repeat": "repeat", "_npi_sort": "sort", "_npi_argsort": "argsort",
    "_npi_rnn_param_concat": "_rnn_param_concat",
}

# -- renamed: operators of their own computing exactly what an mxcc op computes, with its attributes -----------
RENAMED = {
    "_npx_relu": "relu", "_npx_sigmoid": "sigmoid",
    "_npi_exp": "exp", "_npi_log": "log", "_npi_sqrt": "sqrt", "_npi_square": "square", "_npi_tanh": "tanh",
    "_npi_negative": "negative", "_npi_absolute": "abs", "_npi_reciprocal": "reciprocal", "_npi_sign": "sign",
    "_npi_log1p": "log1p", "_npi_expm1": "expm1", "_npi_floor": "floor", "_npi_ceil": "ceil",
    "_npi_add": "broadcast_add", "_npi_subtract": "broadcast_sub", "_npi_multiply": "broadcast_mul",
    "_npi_true_divide": "broadcast_div", "_npi_power": "broadcast_power",
    "_npi_add_scalar": "_plus_scalar", "_npi_subtract_scalar": "_minus_scalar",
    "_npi_rsubtract_scalar": "_rminus_scalar", "_npi_multiply_scalar": "_mul_scalar",
    "_npi_true_divide_scalar": "_div_scalar", "_npi_rtrue_divide_scalar": "_rdiv_scalar",
    "_npi_power_scalar": "_power_scalar", "_npi_rpower_scalar": "_rpower_scalar",
    "_np_copy": "_copy", "_npi_stack": "stack", "_npi_arange": "_arange", "_npi_zeros": "_zeros",
    "_npi_ones": "_ones",
}
# MXNet's aliases of the NumPy-mode operators defined in this module
NP_ALIASES = {"_npi_abs": "_npi_absolute", "_np_amax": "_np_max", "_np_amin": "_np_min",
              "_npi_reshape": "_npx_reshape"}


def _alias(name: str, canonical: str) -> None:
    if name in REGISTRY:
        raise ValueError(f"operator {name!r} registered twice")
    REGISTRY[name] = REGISTRY[canonical]


def _renamed(name: str, base: str, doc: str) -> OpDef:
    return register(dataclasses.replace(REGISTRY[base], name=name, aliases=(), doc=f"{name}: {doc}"))


# every field of an OpDef that is a function of the attrs (first argument); fusion, view and hidden_outputs
# are such functions or plain values
_ATTR_FUNCTIONS = ("inputs", "infer", "lower", "flops", "aux", "output_names", "epilogue", "c_expr", "grad",
                   "workspace", "mutates", "fusion", "view", "hidden_outputs")


def _translated(name: str, base: OpDef, attrs: type, to_base, doc: str, **own) -> OpDef:
    """`name` computing what `base` computes: every rule of `base` (shape, lowering, gradient, FLOPs...) called
    with `to_base(attrs)`, except the rules given in `own` (functions of this op's attrs)."""
    assert base.train_op is None and not base.loss, f"{base.name}: a training form needs its own attrs class"
    fields = {}
    for f in _ATTR_FUNCTIONS:
        fn = getattr(base, f)
        if f in own:
            fields[f] = own.pop(f)
        elif callable(fn):
            fields[f] = (lambda fn: lambda a, *rest: fn(to_base(a), *rest))(fn)
        else:
            fields[f] = fn
    assert not own, f"unknown OpDef fields {sorted(own)}"
    return register(dataclasses.replace(base, name=name, aliases=(), attrs=attrs, doc=f"{name}: {doc}", **fields))


# -- reductions: _np_sum, _npi_mean, _np_max, _np_min ---------------------------------------------------------
NP_DTYPES = Literal["bool", "float16", "float32", "float64", "int32", "int64", "int8"]


@dataclass(frozen=True)
class NpReduceAttrs:
    """MXNet's NumpyReduceAxesParam: axis None = every axis (a 0-d result), () = none."""
    axis: Optional[tuple[int, ...]] = None
    keepdims: bool = False
    dtype: Optional[NP_DTYPES] = None
    initial: Optional[float] = None

    def __post_init__(self):
        if self.dtype not in (None, "float32", "float64"):
            raise ValueError(f"dtype={self.dtype} is not supported (mxcc computes in float32; float32 or float64)")
        if self.initial is not None:
            raise ValueError(f"initial={self.initial} is not supported (MXNet 1.9.1 refuses it too)")


@dataclass(frozen=True)
class NpMaxAttrs:
    axis: Optional[tuple[int, ...]] = None
    keepdims: bool = False
    initial: Optional[float] = None

    def __post_init__(self):
        if self.initial is not None:
            raise ValueError(f"initial={self.initial} is not supported (MXNet 1.9.1 refuses it too)")


def _to_reduce(a) -> reduce.ReduceAttrs:
    # legacy `axis=None` and `()` both mean every axis; `axis=()` here is a view (no reduction, never lowered)
    return reduce.ReduceAttrs(axis=a.axis, keepdims=a.keepdims)


def _np_reduce_infer(a, s):
    x = s.known("data")
    if a.axis == ():
        return [x]
    red = reduce.reduced_axes(_to_reduce(a), x, s)
    return [tuple(1 if i in red else d for i, d in enumerate(x)) if a.keepdims
            else tuple(d for i, d in enumerate(x) if i not in red)]      # numpy: every axis reduced -> 0-d


def _np_reduce_grad(base: OpDef):
    def grad(a, g):
        if a.axis == ():
            return reshape.view_grad(a, g)
        return base.grad(_to_reduce(a), g)
    return grad


_REDUCE_DOC = ("numpy's {op}: axis None reduces every axis (a 0-d result), a tuple those axes, () none (a view); "
               "keepdims; dtype float32/float64 only, computed in float32 with double sums (ops/reduce.py).")
NP_REDUCE = {}
for _name, _base, _attrs in (("_np_sum", "sum", NpReduceAttrs), ("_npi_mean", "mean", NpReduceAttrs),
                             ("_np_max", "max", NpMaxAttrs), ("_np_min", "min", NpMaxAttrs)):
    NP_REDUCE[_name] = _translated(
        _name, REGISTRY[_base], _attrs, _to_reduce, _REDUCE_DOC.format(op=_base), infer=_np_reduce_infer,
        grad=_np_reduce_grad(REGISTRY[_base]), view=lambda a: a.axis == ())


# -- transpose, moveaxis --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NpTransposeAttrs:
    axes: Optional[tuple[int, ...]] = None


def _np_perm(axes: Optional[tuple], x: tuple, s=None) -> tuple[int, ...]:
    """numpy.transpose's permutation: None reverses; else every axis once (negative ones from the end)."""
    if axes is None:
        return tuple(reversed(range(len(x))))
    if len(axes) != len(x):
        s.fail(f"axes {axes} must list all {len(x)} dimensions of data {x}", input="data")
    perm = tuple(norm_axis(ax, len(x), s) for ax in axes)
    if sorted(perm) != list(range(len(x))):
        s.fail(f"axes {axes} is not a permutation of the {len(x)} dimensions", input="data")
    return perm


def _to_transpose(perm: tuple) -> shape_ops.TransposeAttrs:
    return shape_ops.TransposeAttrs(axes=perm)


def _transpose_rules(perm_of):
    """(infer, lower, grad) of a transpose whose permutation `perm_of(attrs, data shape, s)` gives."""
    base = shape_ops.TRANSPOSE

    def infer(a, s):
        x = s.known("data")
        return base.infer(_to_transpose(perm_of(a, x, s)), s)

    def lower(a, ctx):
        return base.lower(_to_transpose(perm_of(a, ctx.in_type("data").shape)), ctx)

    def grad(a, g):
        return base.grad(_to_transpose(perm_of(a, g.type_of(g.input("data")).shape)), g)
    return infer, lower, grad


_t_infer, _t_lower, _t_grad = _transpose_rules(lambda a, x, s=None: _np_perm(a.axes, x, s))
NP_TRANSPOSE = _translated(
    "_np_transpose", shape_ops.TRANSPOSE, NpTransposeAttrs, lambda a: shape_ops.TransposeAttrs(),
    "numpy's transpose: axes None reverses the dimensions, else a permutation (negative axes count from the end).",
    infer=_t_infer, lower=_t_lower, grad=_t_grad)


@dataclass(frozen=True)
class MoveaxisAttrs:
    source: tuple[int, ...]
    destination: tuple[int, ...]


def _moveaxis_perm(a: MoveaxisAttrs, x: tuple, s=None) -> tuple[int, ...]:
    """numpy.moveaxis: the source axes go to the destination positions, the others keep their order."""
    if len(a.source) != len(a.destination):
        s.fail(f"source {a.source} and destination {a.destination} must have the same number of axes", input="data")
    src = [norm_axis(v, len(x), s, what="source axis") for v in a.source]
    dst = [norm_axis(v, len(x), s, what="destination axis") for v in a.destination]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        s.fail(f"repeated axis in source {a.source} or destination {a.destination}", input="data")
    order = [i for i in range(len(x)) if i not in src]
    for d, v in sorted(zip(dst, src)):
        order.insert(d, v)
    return tuple(order)


_m_infer, _m_lower, _m_grad = _transpose_rules(_moveaxis_perm)
NP_MOVEAXIS = _translated(
    "_np_moveaxis", shape_ops.TRANSPOSE, MoveaxisAttrs, lambda a: shape_ops.TransposeAttrs(),
    "numpy.moveaxis: a transpose moving the source axes to the destination positions.",
    infer=_m_infer, lower=_m_lower, grad=_m_grad)


# -- reshapes: _np_reshape, _npx_reshape, _np_squeeze ----------------------------------------------------------
@dataclass(frozen=True)
class NpReshapeAttrs:
    newshape: tuple[int, ...]
    order: Literal["C", "F", "A"] = "C"

    def __post_init__(self):
        if self.order != "C":
            raise ValueError(f"order={self.order!r} is not supported (C order only, as MXNet 1.9.1)")


@dataclass(frozen=True)
class NpxReshapeAttrs:
    newshape: tuple[int, ...]
    reverse: bool = False
    order: Literal["C", "F", "A"] = "C"

    def __post_init__(self):
        if self.order != "C":
            raise ValueError(f"order={self.order!r} is not supported (C order only, as MXNet 1.9.1)")


def np_reshape_shape(newshape: tuple, x: tuple, s) -> tuple:
    """numpy.reshape as MXNet's NumpyReshapeInferShape: sizes >= 0 and one -1 inferred."""
    def bad(msg):
        s.fail(f"cannot reshape {tuple(x)} into {tuple(newshape)}: {msg}", input="data")
    if any(d < -1 for d in newshape):
        bad("-1 is the only negative size allowed (the npx.reshape codes -2..-6 are not numpy's)")
    if list(newshape).count(-1) > 1:
        bad("only one dimension can be inferred (-1)")
    if 0 in newshape:
        bad("a dimension of size 0 (mxcc has no empty tensors)")
    known = prod(d for d in newshape if d != -1)
    if -1 in newshape:
        if prod(x) % known:
            bad(f"{prod(x)} elements do not divide into dimensions of {known}")
        newshape = tuple(prod(x) // known if d == -1 else d for d in newshape)
    if prod(newshape) != prod(x):
        bad(f"{prod(newshape)} elements, the input has {prod(x)}")
    return tuple(newshape)


def npx_reshape_shape(codes: tuple, x: tuple, reverse: bool, s) -> tuple:
    """npx.reshape's codes as MXNet 1.9.1's NumpyXReshapeInferShape, every check it makes (and -3's
    out-of-range read, which it does not check) a ShapeError naming the node:
      d > 0 that size (skips one input dim)      -1 inferred (skips one)      -2 copy one input dim
      -3 drop an input dim of size 1             -4 copy every remaining dim  -5 merge two input dims
      -6 split one input dim into the next two codes (one may be -1)
    `reverse` matches codes and dims from the right (both reversed, then the result)."""
    def bad(msg):
        s.fail(f"npx.reshape codes {tuple(codes)}{' (reverse)' if reverse else ''} cannot reshape {tuple(x)}: "
               f"{msg}", input="data")
    src, target = (tuple(reversed(x)), tuple(reversed(codes))) if reverse else (tuple(x), tuple(codes))
    out: list[int] = []
    unknown, known, j, i = -1, 1, 0, 0

    def take() -> int:              # read the next input dim (MXNet checks the bound, except for -3)
        nonlocal j
        if j >= len(src):
            bad("no input dimension left for a -2, -3, -5 or -6 code")
        j += 1
        return src[j - 1]

    def infer_here(pos: int):
        nonlocal unknown
        if unknown >= 0:
            bad("only one dimension can be inferred (-1)")
        unknown = pos

    while i < len(target):
        c = target[i]
        if c < -6:
            bad(f"unknown code {c} (codes are sizes >= 0 and -1..-6)")
        if c == 0:
            bad("a dimension of size 0 (mxcc has no empty tensors)")
        if c == -1:                 # like a size, it skips one input dim unread (even past the last)
            infer_here(len(out))
            out.append(-1)
            j += 1
        elif c == -2:
            out.append(take())
            known *= out[-1]
        elif c == -3:
            if take() != 1:
                bad("-3 drops only an input dimension of size 1")
        elif c == -4:
            while j < len(src):
                out.append(take())
                known *= out[-1]
        elif c == -5:
            out.append(take() * take())
            known *= out[-1]
        elif c == -6:
            if i + 2 >= len(target):
                bad("-6 must be followed by the two sizes to split into")
            d0, d1, d2 = take(), target[i + 1], target[i + 2]
            i += 2
            if d1 == -1 and d2 == -1:
                bad("the two sizes after -6 cannot both be -1")
            if d1 < -1 or d2 < -1 or d1 == 0 or d2 == 0:
                bad(f"-6 splits into sizes ({d1}, {d2}): each a positive size or -1")
            d1, d2 = (d0 // d2 if d1 == -1 else d1), (d0 // d1 if d2 == -1 else d2)
            if d1 * d2 != d0:
                bad(f"-6 cannot split dimension {d0} into ({target[i - 1]}, {target[i]})")
            out += [d1, d2]
            known *= d0
        else:
            out.append(c)
            known *= c
            j += 1
        i += 1
    if unknown >= 0:
        if prod(x) % known:
            bad(f"the -1 dimension cannot be inferred: {prod(x)} elements do not divide by {known}")
        out[unknown] = prod(x) // known
    if reverse:
        out.reverse()
    if prod(out) != prod(x):
        bad(f"the result {tuple(out)} has {prod(out)} elements, the input {prod(x)}")
    return tuple(out)


_VIEW = dict(fusion=Fusion.INJECTIVE, view=True, grad=reshape.view_grad)
NP_RESHAPE = register(OpDef(
    name="_np_reshape", attrs=NpReshapeAttrs, inputs=lambda a: ("data",),
    infer=lambda a, s: [np_reshape_shape(a.newshape, s.known("data"), s)], **_VIEW,
    doc="_np_reshape: numpy.reshape (sizes and one -1; C order), a view of the input."))
NPX_RESHAPE = register(OpDef(
    name="_npx_reshape", attrs=NpxReshapeAttrs, inputs=lambda a: ("data",),
    infer=lambda a, s: [npx_reshape_shape(a.newshape, s.known("data"), a.reverse, s)], **_VIEW,
    doc="_npx_reshape: npx.reshape's codes (-1..-6, see npx_reshape_shape), a view of the input."))


@dataclass(frozen=True)
class NpSqueezeAttrs:
    axis: Optional[tuple[int, ...]] = None


def _np_squeeze_infer(a: NpSqueezeAttrs, s):
    x = s.known("data")
    if a.axis is None:
        return [tuple(d for d in x if d != 1)]          # every size-1 dim; all of them: 0-d, as numpy
    kept = shape_ops.SQUEEZE.infer(shape_ops.SqueezeAttrs(a.axis), s)[0]   # its checks: range, size 1, repeats
    return [() if len(a.axis) == len(x) else kept]      # squeeze's (1,) for "all squeezed" is numpy's ()


NP_SQUEEZE = register(OpDef(
    name="_np_squeeze", attrs=NpSqueezeAttrs, inputs=lambda a: ("data",), infer=_np_squeeze_infer, **_VIEW,
    doc="_np_squeeze: numpy.squeeze (every size-1 dim, or the axes given, each of size 1; all of them leaves a "
        "0-d result), a view."))


# -- concatenate ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NpConcatAttrs:
    num_args: int
    axis: Optional[int] = 0

    def __post_init__(self):
        check_arity("num_args", self.num_args)


def _to_concat(a: NpConcatAttrs) -> concat.ConcatAttrs:
    return concat.ConcatAttrs(num_args=a.num_args, dim=a.axis)


def _flat_infer(a: NpConcatAttrs, s):
    return [(sum(prod(s.known(n)) for n in concat.CONCAT.inputs(_to_concat(a))),)]


def _flat_lower(a: NpConcatAttrs, ctx):
    copies, off = [], 0
    for name in concat.CONCAT.inputs(_to_concat(a)):
        n = prod(ctx.in_type(name).shape)
        copies.append(dict(dst="out", dst_off=off, dst_ld=n, src=name, src_off=0, src_ld=n, rows=1, cols=n,
                           note=f"{name} (flattened) -> out[{off}:{off + n}]"))
        off += n
    return concat.copy_rows(f"concatenate {a.num_args} flattened inputs into out[{off}]", copies)


def _flat_grad(a: NpConcatAttrs, g):
    names = concat.CONCAT.inputs(_to_concat(a))
    shapes = [g.type_of(g.input(n)).shape for n in names]
    parts = g.emit("_backward_Concat", [g.ograd()], num_args=a.num_args, dim=0, sizes=tuple(prod(x) for x in shapes))
    return {n: g.emit("_reshape_to", [p], shape=x)[0] for n, p, x in zip(names, parts, shapes) if g.needs(n)}


def _either(flat, per_axis):
    return lambda a, *rest: (flat if a.axis is None else per_axis)(a, *rest)


_cat = concat.CONCAT
NP_CONCATENATE = _translated(
    "_npi_concatenate", _cat, NpConcatAttrs, _to_concat,
    "numpy.concatenate: Concat along `axis` (default 0); axis None concatenates the flattened inputs.",
    infer=_either(_flat_infer, lambda a, s: _cat.infer(_to_concat(a), s)),
    lower=_either(_flat_lower, lambda a, ctx: _cat.lower(_to_concat(a), ctx)),
    grad=_either(_flat_grad, lambda a, g: _cat.grad(_to_concat(a), g)))


# -- full_like ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FullLikeAttrs:
    fill_value: float
    ctx: str = ""
    dtype: Optional[math_ops.CAST_DTYPES] = None


def _fill(a: FullLikeAttrs) -> str:
    """The value as the output dtype holds it (float32 when dtype is None: the input's, float32 here)."""
    return c_float(math_ops.cast_value(a.fill_value, a.dtype or "float32"))


NP_FULL_LIKE = register(OpDef(
    name="_npi_full_like", attrs=FullLikeAttrs, inputs=lambda a: ("data",), infer=lambda a, s: [s.known("data")],
    fusion=Fusion.ELEMWISE, inplace=True, c_expr=lambda a, xs: _fill(a), grad=lambda a, g: {},
    doc="_npi_full_like: numpy.full_like (zeros_like/ones_like in NumPy mode): the input's shape filled with "
        "fill_value as `dtype` holds it; no gradient flows through it."))


# -- dot, matmul -------------------------------------------------------------------------------------------------

_DOT = dot.DotAttrs()


def _dot_kind(op: str, l: tuple, r: tuple, s=None) -> str:
    """"dot" where MXNet's dot computes numpy's (a right operand of 1 or 2 dims: MXNet's dot reads the right
    operand as (K, N), numpy's dot and matmul then agree with it), "batch" for matmul of stacks of equal batch
    shape (batch_dot), else a ShapeError naming the case."""
    def refuse(why):
        s.fail(f"{op} of shapes {l} and {r}: {why}", input="rhs", got=r)
    if not l or not r:
        refuse("0-d operands are not supported")
    if len(r) <= 2:
        return "dot"
    if op == "_np_dot":
        refuse("numpy.dot with a right operand of 3+ dims (a sum over its second-to-last axis) is not mapped")
    if len(l) == len(r) and l[:-2] == r[:-2]:
        return "batch"
    refuse("matmul with broadcast batch dimensions is not mapped (only equal batch shapes: batch_dot)")


def _base_of(op: str, l: tuple, r: tuple, s=None) -> OpDef:
    return dot.BATCH_DOT if _dot_kind(op, l, r, s) == "batch" else dot.DOT


def _matmul_rules(op: str):
    def infer(a, s):
        l, r = s.known("lhs"), s.known("rhs")
        out = _base_of(op, l, r, s).infer(_DOT, s)
        return [()] if len(l) == 1 and len(r) == 1 else out      # numpy: vector . vector is 0-d

    def lower(a, ctx):
        return _base_of(op, ctx.in_type("lhs").shape, ctx.in_type("rhs").shape).lower(_DOT, ctx)

    def grad(a, g):
        l, r = (g.type_of(g.input(n)).shape for n in ("lhs", "rhs"))
        return _base_of(op, l, r).grad(_DOT, g)

    def flops(a, ins, outs):
        return _base_of(op, ins[0].shape, ins[1].shape).flops(_DOT, ins, outs)
    return dict(infer=infer, lower=lower, grad=grad, flops=flops)


NP_DOT = _translated("_np_dot", dot.DOT, NoAttrs, lambda a: _DOT,
                     "numpy.dot where it equals MXNet's dot (a right operand of 1 or 2 dims; vector . vector is "
                     "0-d), lowered to the runtime GEMM.", **_matmul_rules("_np_dot"))
NP_MATMUL = _translated("_npi_matmul", dot.DOT, NoAttrs, lambda a: _DOT,
                        "numpy.matmul: dot for a 1-d or 2-d right operand, batch_dot for stacks of equal batch "
                        "shape; broadcast batch dimensions are refused.", **_matmul_rules("_npi_matmul"))


# -- registration of the tables ---------------------------------------------------------------------------------
for _name, _base in RENAMED.items():
    _renamed(_name, _base, f"NumPy mode's name of {_base} (same attributes and semantics).")
for _name, _canonical in {**ALIASES, **NP_ALIASES}.items():
    _alias(_name, _canonical)

__all__ = ["ALIASES", "NP_ALIASES", "RENAMED", "np_reshape_shape", "npx_reshape_shape"]
