"""LayerNorm, GroupNorm, InstanceNorm and L2Normalization: normalize rows of the data, as MXNet 1.9.1 does.

Each views the data as (outer, m, inner) and normalizes every row (o, i) of m values, stride inner:
  LayerNorm(axis)        outer = dims before axis, m = the axis, inner = dims after; gamma/beta (m,), per value
  GroupNorm(num_groups)  (N, C, ...) as (N * G, C / G * rest, 1); gamma/beta (num_groups,): one per group (MXNet
                         1.9.1's shapes, not one per channel)
  InstanceNorm           (N, C, ...) as (N * C, rest, 1); gamma/beta (C,), one per channel
    out = (x - mean) / sqrt(var + eps) * gamma + beta       (biased variance; sums in double, two passes)
  L2Normalization(mode)  instance: (N, rest, 1), channel: (N, C, rest), spatial: (N * C, rest, 1);
    out = x / sqrt(sum(x^2) + eps)
MXNet's outputs: (output, mean, std) for LayerNorm/GroupNorm (mean/std shaped like the data with the reduced
dims collapsed; visible with output_mean_var), (output, mean, var) for InstanceNorm and (output, norm) for
L2Normalization (always hidden); hidden outputs are not stored. Kernels: kernels/norm_rows.c.j2 and
kernels/norm_l2.c.j2, one parallel loop over rows.
Gradients (`_backward_NormRows`, `_backward_L2Normalization`) recompute the row statistics from the data, as
MXNet's: dx = invstd * (g dy - mean(g dy) - xhat mean(g dy xhat)), dgamma = sum dy xhat, dbeta = sum dy
(per value of the axis, or per group/channel), and for L2 dx = dy / n - x sum(dy x) / n^3. Like MXNet, the
head gradients of the mean/std outputs are ignored (its gradient is not their derivative).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Literal

from mxcc.ops import register
from mxcc.ops._util import norm_axis
from mxcc.ops.base import Fusion, OpDef

PARALLEL_MIN_ELEMENTS = 1 << 15
NORM_INPUTS = ("data", "gamma", "beta")


@dataclass(frozen=True)
class LayerNormAttrs:
    axis: int = -1
    eps: float = 1e-5
    output_mean_var: bool = False


@dataclass(frozen=True)
class GroupNormAttrs:
    num_groups: int = 1
    eps: float = 1e-5
    output_mean_var: bool = False

    def __post_init__(self):
        if self.num_groups < 1:
            raise ValueError(f"num_groups must be >= 1, got {self.num_groups}")


@dataclass(frozen=True)
class InstanceNormAttrs:
    eps: float = 1e-3


@dataclass(frozen=True)
class L2NormAttrs:
    eps: float = 1e-10
    mode: Literal["channel", "instance", "spatial"] = "instance"


@dataclass(frozen=True)
class RowView:
    """The data as (outer, m, inner), rows (o, i); gamma per value of m (period 0) or per row o % period."""
    outer: int
    m: int
    inner: int
    period: int = 0

    @property
    def rows(self) -> int:
        return self.outer * self.inner


def _view(op: str, a, x: tuple, s=None) -> RowView:
    """The row view of data shape x for op `op` (shape errors through `s` when given)."""
    if op == "LayerNorm":
        ax = norm_axis(a.axis, len(x), s) if s is not None else a.axis % len(x)
        return RowView(prod(x[:ax]), x[ax], prod(x[ax + 1:]))
    if op == "GroupNorm":
        g = a.num_groups
        return RowView(x[0] * g, x[1] // g * prod(x[2:]), 1, g)
    if op == "InstanceNorm":
        return RowView(x[0] * x[1], prod(x[2:]), 1, x[1])
    if a.mode == "instance":
        return RowView(x[0], prod(x[1:]), 1)
    if a.mode == "channel":
        return RowView(x[0], x[1], prod(x[2:]))
    return RowView(x[0] * x[1], prod(x[2:]), 1)


def _stats_shape(op: str, a, x: tuple) -> tuple:
    """The shape of MXNet's mean/std (var, norm) outputs."""
    if op == "LayerNorm":
        ax = a.axis % len(x)
        return (*x[:ax], 1, *x[ax + 1:])
    if op == "GroupNorm":
        return (x[0], a.num_groups)
    if op == "InstanceNorm":
        return (x[0], x[1])
    return {"instance": (x[0],), "channel": (x[0], 1, *x[2:]), "spatial": (x[0], x[1])}[a.mode]


def _norm_infer(op: str):
    def infer(a, s):
        x = s.known("data")
        if op == "LayerNorm":
            if not x:
                s.fail("needs data of at least 1 dimension, got a scalar", input="data")
            c = x[norm_axis(a.axis, len(x), s)]
            why = f"(one per value of axis {a.axis}: {c})"
        else:
            if len(x) < 3:
                s.fail(f"input 'data' has shape {x}: {op} needs data of at least 3 dimensions (N, C, ...)",
                       input="data")
            if op == "GroupNorm" and x[1] % a.num_groups:
                s.fail(f"{x[1]} channels are not divisible by num_groups={a.num_groups}", input="data")
            c = a.num_groups if op == "GroupNorm" else x[1]
            why = f"(one per group: num_groups={c})" if op == "GroupNorm" else f"(one per channel: {c})"
        s.expect("gamma", (c,), why)
        s.expect("beta", (c,), why)
        st = _stats_shape(op, a, x)
        return [x, st, st]
    return infer


def _row_vars(v: RowView, a, what: str) -> dict:
    return dict(what=what, rows=v.rows, m=v.m, inner=v.inner, row_stride=v.m * v.inner, period=v.period,
                eps=repr(float(a.eps)), parallel=(v.rows > 1) & (v.rows * v.m >= PARALLEL_MIN_ELEMENTS))


def _norm_lower(op: str):
    def lower(a, ctx):
        x = ctx.in_type("data").shape
        v = _view(op, a, x)
        gamma = "per value of the axis" if not v.period else f"per row mod {v.period}"
        mean_var = getattr(a, "output_mean_var", False)
        return "kernels/norm_rows.c.j2", dict(
            _row_vars(v, a, f"{op} of data {x}: {v.rows} rows of {v.m} values (stride {v.inner}), gamma/beta "
                            f"{gamma}, eps {a.eps}"),
            y="out0" if mean_var else "out", mean_var=mean_var)
    return lower


def _norm_grad(op: str):
    def grad(a, g):
        v = _view(op, a, g.type_of(g.input("data")).shape)
        outs = g.emit("_backward_NormRows", [g.ograd(0), g.input("data"), g.input("gamma")],
                      outer=v.outer, m=v.m, inner=v.inner, period=v.period, eps=a.eps)
        return dict(zip(NORM_INPUTS, outs))
    return grad


def _norm_op(op: str, attrs: type, outputs: tuple, mean_var: bool):
    return register(OpDef(
        name=op, attrs=attrs, inputs=lambda a: NORM_INPUTS, infer=_norm_infer(op), fusion=Fusion.OPAQUE,
        flops=lambda a, ins, outs: 8 * prod(ins[0].shape), lower=_norm_lower(op), output_names=lambda a: outputs,
        hidden_outputs=(lambda a: 0 if a.output_mean_var else 2) if mean_var else 2, grad=_norm_grad(op),
        doc=__doc__))


LAYER_NORM = _norm_op("LayerNorm", LayerNormAttrs, ("output", "mean", "std"), True)
GROUP_NORM = _norm_op("GroupNorm", GroupNormAttrs, ("output", "mean", "std"), True)
INSTANCE_NORM = _norm_op("InstanceNorm", InstanceNormAttrs, ("output", "mean", "var"), False)


@dataclass(frozen=True)
class NormRowsBackwardAttrs:
    outer: int
    m: int
    inner: int
    period: int
    eps: float


def _norm_bwd_infer(a: NormRowsBackwardAttrs, s):
    x, c = s.known("data"), s.known("gamma")
    s.expect("ograd", x, "(the output gradient has the data's shape)")
    return [x, c, c]


def _norm_bwd_lower(a: NormRowsBackwardAttrs, ctx):
    v = RowView(a.outer, a.m, a.inner, a.period)
    gamma = "per value of the axis" if not v.period else f"per row mod {v.period}"
    return "kernels/norm_rows_backward.c.j2", dict(_row_vars(
        v, a, f"normalization backward: {v.rows} rows of {v.m} values (stride {v.inner}), gamma {gamma}"),
        gamma_at=f"o % {v.period}" if v.period else "j")


NORM_ROWS_BACKWARD = register(OpDef(
    name="_backward_NormRows", attrs=NormRowsBackwardAttrs, inputs=lambda a: ("ograd", "data", "gamma"),
    output_names=lambda a: ("data_grad", "gamma_grad", "beta_grad"), infer=_norm_bwd_infer, fusion=Fusion.OPAQUE,
    flops=lambda a, ins, outs: 14 * prod(ins[1].shape), lower=_norm_bwd_lower,
    workspace=lambda a, ins, outs, const: 2 * a.outer * a.inner * 4))   # per row: mean, invstd


# -- L2Normalization ----------------------------------------------------------------------------------------
def _l2_infer(a: L2NormAttrs, s):
    x = s.known("data")
    if len(x) < (2 if a.mode == "instance" else 3):
        s.fail(f"input 'data' has shape {x}: mode={a.mode!r} needs data of at least "
               f"{2 if a.mode == 'instance' else 3} dimensions", input="data")
    return [x, _stats_shape("L2Normalization", a, x)]


def _l2_vars(a: L2NormAttrs, x: tuple, what: str) -> dict:
    v = _view("L2Normalization", a, x)
    return _row_vars(v, a, f"{what} (mode {a.mode}) of data {x}: {v.rows} rows of {v.m} values "
                           f"(stride {v.inner}), eps {a.eps}")


L2_NORMALIZATION = register(OpDef(
    name="L2Normalization", attrs=L2NormAttrs, inputs=lambda a: ("data",), infer=_l2_infer, fusion=Fusion.OPAQUE,
    flops=lambda a, ins, outs: 3 * prod(ins[0].shape), output_names=lambda a: ("output", "norm"), hidden_outputs=1,
    lower=lambda a, ctx: ("kernels/norm_l2.c.j2", _l2_vars(a, ctx.in_type("data").shape, "L2Normalization")),
    grad=lambda a, g: {"data": g.emit("_backward_L2Normalization", [g.ograd(0), g.input("data")], eps=a.eps,
                                      mode=a.mode)[0]}, doc=__doc__))

L2_NORMALIZATION_BACKWARD = register(OpDef(
    name="_backward_L2Normalization", attrs=L2NormAttrs, inputs=lambda a: ("ograd", "data"),
    infer=lambda a, s: [s.known("data")], fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: 6 * prod(ins[1].shape),
    lower=lambda a, ctx: ("kernels/norm_l2_backward.c.j2",
                          _l2_vars(a, ctx.in_type("data").shape, "L2Normalization backward"))))
