"""BatchNorm: normalize per channel of `axis`, with the moving statistics (inference) or the batch's (training).

    out = (data - mean) * invstd * gamma + beta,   invstd = 1 / sqrt(var + eps)    (gamma := 1 when fix_gamma)

MXNet defaults: eps=1e-3, fix_gamma=True, axis=1. moving_mean/moving_var are auxiliary states (`aux:` in
the params). Inference (`BatchNorm`) uses the moving statistics; use_global_stats and momentum change nothing.
Training (`_train_BatchNorm`, chosen by passes/train_mode.py unless use_global_stats) uses the batch's biased
mean/variance and outputs them for the backward (mean, and invstd in the `var` output, as MXNet stores it);
`_backward_BatchNorm` computes the data/gamma/beta gradients in one kernel and, in training, updates the
moving statistics in place as MXNet does during backward: m = momentum * m + (1 - momentum) * batch_stat,
the variance recovered from invstd (MXNet's INVSTD_TO_VARIANCE). With fix_gamma the gamma gradient is 0.

Outputs: MXNet lists three (output, mean, var); the last two are hidden unless output_mean_var, in which
case they hold what MXNet returns: the mean and 1 / sqrt(var + eps) (moving ones at inference).
After a Convolution/FullyConnected/Deconvolution at inference it is folded into that anchor's GEMM
epilogue (the fuse pass; scale/shift computed at bind time by `<net>_prepare`, kernels/fold_batch_norm.c.j2;
when the anchor reads its weight packed at bind time, the scale is multiplied into that packed weight and the
epilogue adds the shift only: codegen/lower.py LowerCtx.packed_input);
elsewhere it is a kernel of its own (kernels/batch_norm.c.j2; training: batch_norm_train.c.j2 and
batch_norm_backward.c.j2).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Optional

from mxcc.ops import register
from mxcc.ops.base import EpilogueStep, Fusion, OpDef, c_float

PARALLEL_MIN_ELEMENTS = 1 << 15


@dataclass(frozen=True)
class BNAttrs:
    eps: float = 1e-3
    momentum: float = 0.9
    fix_gamma: bool = True
    use_global_stats: bool = False
    output_mean_var: bool = False
    axis: int = 1
    min_calib_range: Optional[float] = None
    max_calib_range: Optional[float] = None

    IGNORED = ("cudnn_off",)

    def __post_init__(self):
        if not self.eps > 0:
            raise ValueError(f"eps must be positive, got {self.eps}")


INPUTS = ("data", "gamma", "beta", "moving_mean", "moving_var")


def _axis(a: BNAttrs, x: tuple, s) -> int:
    ax = a.axis + len(x) if a.axis < 0 else a.axis
    if not 0 <= ax < len(x):
        s.fail(f"axis={a.axis} is out of range for data of shape {x}", input="data")
    return ax


def _infer(a: BNAttrs, s):
    x = s.known("data")
    c = x[_axis(a, x, s)]
    for name in INPUTS[1:]:
        s.expect(name, (c,), f"(one per channel of axis {a.axis}: {c})")
    return [x, (c,), (c,)]


def _flops(a: BNAttrs, ins, outs):
    return 3 * prod(outs[0].shape)


def _lower(a: BNAttrs, ctx):
    x = ctx.in_type("data").shape
    ax = a.axis % len(x)
    outer, c, inner = prod(x[:ax]), x[ax], prod(x[ax + 1:])
    return "kernels/batch_norm.c.j2", dict(
        what=f"data viewed as ({outer}, {c}, {inner}), channel axis {ax}, eps {a.eps}"
             f"{', fix_gamma (gamma := 1)' if a.fix_gamma else ''}",
        rows=outer * c, channels=c, inner=inner, eps=c_float(a.eps), fix_gamma=a.fix_gamma,
        mean_var=a.output_mean_var, parallel=(prod(x) >= PARALLEL_MIN_ELEMENTS) & (outer * c > 1),
    )


BATCH_NORM = register(OpDef(
    name="BatchNorm", attrs=BNAttrs, inputs=lambda a: INPUTS, aux=lambda a: ("moving_mean", "moving_var"),
    infer=_infer, fusion=Fusion.OPAQUE, flops=_flops, lower=_lower,
    output_names=lambda a: ("output", "mean", "var"), hidden_outputs=lambda a: 0 if a.output_mean_var else 2,
    # at inference a BatchNorm after a Convolution/FullyConnected folds into its GEMM epilogue (fuse pass):
    # scale = gamma / sqrt(var + eps), shift = (bias - mean) * scale + beta, computed once at bind time
    epilogue=lambda a: None if a.output_mean_var else EpilogueStep(batch_norm=True),
    grad=lambda a, g: _grad(a, g, batch_stats=False),
    train_op=lambda a: None if a.use_global_stats else "_train_BatchNorm", doc=__doc__))


# -- training: batch statistics, and the backward of both modes ---------------------------------------------
def _view(a: BNAttrs, x: tuple) -> tuple[int, int, int]:
    """(outer, channels, inner): the data viewed around the channel axis."""
    ax = a.axis % len(x)
    return prod(x[:ax]), x[ax], prod(x[ax + 1:])


def _train_lower(a: BNAttrs, ctx):
    x = ctx.in_type("data").shape
    outer, c, inner = _view(a, x)
    return "kernels/batch_norm_train.c.j2", dict(
        what=f"data viewed as ({outer}, {c}, {inner}), channel axis {a.axis % len(x)}, eps {a.eps}"
             f"{', fix_gamma (gamma := 1)' if a.fix_gamma else ''}; batch statistics over {outer * inner} values",
        outer=outer, channels=c, inner=inner, count=outer * inner, eps=repr(float(a.eps)),
        fix_gamma=a.fix_gamma, parallel=(prod(x) >= PARALLEL_MIN_ELEMENTS) & (c > 1))


def _grad(a: BNAttrs, g, batch_stats: bool):
    stats = [g.output(1), g.output(2)] if batch_stats else []
    ins = [g.ograd(), g.input("data"), g.input("gamma"), *stats, g.input("moving_mean"), g.input("moving_var")]
    attrs = BNBackwardAttrs(a.eps, a.momentum, a.fix_gamma, a.axis, batch_stats, g.needs("data"))
    outs = g.emit("_backward_BatchNorm", ins, **{f: getattr(attrs, f) for f in BNBackwardAttrs.__dataclass_fields__})
    return {n[:-len("_grad")]: r for n, r in zip(_bwd_outputs(attrs), outs)}


TRAIN_BATCH_NORM = register(OpDef(
    name="_train_BatchNorm", attrs=BNAttrs, inputs=lambda a: INPUTS, aux=lambda a: ("moving_mean", "moving_var"),
    infer=_infer, fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: 7 * prod(outs[0].shape), lower=_train_lower,
    output_names=lambda a: ("output", "mean", "var"), grad=lambda a, g: _grad(a, g, batch_stats=True),
    doc=__doc__))


@dataclass(frozen=True)
class BNBackwardAttrs:
    eps: float
    momentum: float
    fix_gamma: bool
    axis: int
    batch_stats: bool        # training (reads the batch mean/invstd, updates the moving stats) or global stats
    data_grad: bool = True


def _bwd_inputs(a: BNBackwardAttrs):
    stats = ("mean", "invstd") if a.batch_stats else ()
    return ("ograd", "data", "gamma", *stats, "moving_mean", "moving_var")


def _bwd_outputs(a: BNBackwardAttrs):
    return (("data_grad",) if a.data_grad else ()) + ("gamma_grad", "beta_grad")


def _bwd_infer(a: BNBackwardAttrs, s):
    x, c = s.known("data"), s.known("gamma")
    return ([x] if a.data_grad else []) + [c, c]


def _bwd_lower(a: BNBackwardAttrs, ctx):
    x = ctx.in_type("data").shape
    outer, c, inner = _view(BNAttrs(axis=a.axis), x)
    names = _bwd_outputs(a)
    out = {n: (f"out{i}" if len(names) > 1 else "out") for i, n in enumerate(names)}
    mom = float(a.momentum)
    return "kernels/batch_norm_backward.c.j2", dict(
        what=f"BatchNorm backward ({'batch statistics, moving stats updated with momentum ' + str(mom) if a.batch_stats else 'global statistics'}"
             f"{', fix_gamma' if a.fix_gamma else ''}): data viewed as ({outer}, {c}, {inner})",
        outer=outer, channels=c, inner=inner, count=outer * inner, eps=repr(float(a.eps)), batch_stats=a.batch_stats,
        momentum=c_float(mom), one_minus_momentum=c_float(1.0 - mom), fix_gamma=a.fix_gamma,
        dx=out.get("data_grad"), dgamma=out["gamma_grad"], dbeta=out["beta_grad"],
        parallel=(prod(x) >= PARALLEL_MIN_ELEMENTS) & (c > 1))


BATCH_NORM_BACKWARD = register(OpDef(
    name="_backward_BatchNorm", attrs=BNBackwardAttrs, inputs=_bwd_inputs, output_names=_bwd_outputs,
    infer=_bwd_infer, fusion=Fusion.OPAQUE, lower=_bwd_lower,
    flops=lambda a, ins, outs: 8 * prod(ins[1].shape),
    mutates=lambda a: ("moving_mean", "moving_var") if a.batch_stats else ()))
