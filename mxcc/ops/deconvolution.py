"""Deconvolution: the transposed convolution (the gradient of Convolution with respect to its data).

    out = col2im(weight^T . data) + bias,   weight (C_in, num_filter / num_group, *kernel)

Output size per spatial axis: stride * (in - 1) + dilate * (kernel - 1) + 1 - 2 * pad + adj; with a
(non-zero) target_shape MXNet derives pad and adj from it instead (deconvolution-inl.h, InferPad), and the
output is the target. `no_bias` defaults to True, as in MXNet 1.x.

An ANCHOR: a fused residual and activation run with the bias after col2im (or in the GEMM epilogue on the 1x1 path).
Lowered to kernels/deconv2d.c.j2: one GEMM per image and group into the workspace, then col2im
(runtime_c/conv/); 1x1 kernels with stride 1 and no padding skip col2im.
Backward (`_backward_Deconvolution`, one kernel per layer): per image, dcols = im2col(ograd[n]) with the
forward's col2im geometry, then per group ddata_g = weight_g . dcols_g and dweight_g += data_g . dcols_g^T;
dbias = the sums of ograd per channel.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from math import prod
from typing import Literal, Optional

from mxcc.codegen.batchvar import cond_of
from mxcc.ops import register
from mxcc.ops._spatial import LAYOUTS, check_layout, dilated, geom, per_image_epilogue, spatial
from mxcc.ops.base import Fusion, OpDef

PARALLEL_MIN_ELEMENTS = 1 << 15


@dataclass(frozen=True)
class DeconvAttrs:
    kernel: tuple[int, ...]
    num_filter: int
    stride: tuple[int, ...] = ()
    dilate: tuple[int, ...] = ()
    pad: tuple[int, ...] = ()
    adj: tuple[int, ...] = ()
    target_shape: tuple[int, ...] = ()
    num_group: int = 1
    no_bias: bool = True
    layout: Optional[Literal[LAYOUTS]] = None

    IGNORED = ("workspace", "cudnn_tune", "cudnn_off")

    def __post_init__(self):
        nsp = len(self.kernel)
        if not 1 <= nsp <= 3:
            raise ValueError(f"kernel={self.kernel}: only 1-D, 2-D and 3-D deconvolutions exist")
        if any(k <= 0 for k in self.kernel):
            raise ValueError(f"kernel={self.kernel} must be positive")
        if self.num_filter <= 0:
            raise ValueError(f"num_filter must be positive, got {self.num_filter}")
        if self.num_group <= 0 or self.num_filter % self.num_group:
            raise ValueError(f"num_filter={self.num_filter} must be a multiple of num_group={self.num_group}")
        for what, v, lo in (("stride", self.stride, 1), ("dilate", self.dilate, 1), ("pad", self.pad, 0),
                            ("adj", self.adj, 0), ("target_shape", self.target_shape, 0)):
            if any(x < lo for x in spatial(v, nsp, lo, what)):
                raise ValueError(f"{what}={v} must be >= {lo}")
        check_layout(self.layout, nsp)

    @property
    def nsp(self) -> int:
        return len(self.kernel)


def _inputs(a: DeconvAttrs):
    return ("data", "weight") if a.no_bias else ("data", "weight", "bias")


def geometry(a: DeconvAttrs, x: tuple):
    """(kernel, stride, pad, adj, dilate, out spatial) for data shape x, as MXNet's InferPad decides."""
    n = a.nsp
    k, s, d = a.kernel, spatial(a.stride, n, 1, "stride"), spatial(a.dilate, n, 1, "dilate")
    full = tuple(s[i] * (x[2 + i] - 1) + dilated(k[i], d[i]) for i in range(n))
    if a.target_shape and any(a.target_shape):
        tot = tuple(full[i] - a.target_shape[i] for i in range(n))
        p = tuple((t + 1) // 2 for t in tot)
        adj = tuple(t % 2 for t in tot)
    else:
        p, adj = spatial(a.pad, n, 0, "pad"), spatial(a.adj, n, 0, "adj")
    out = tuple(full[i] - 2 * p[i] + adj[i] for i in range(n))
    return k, s, p, adj, d, out


def _infer(a: DeconvAttrs, s):
    x = s.known("data")
    nsp = a.nsp
    if len(x) != nsp + 2:
        s.fail(f"input 'data' has shape {x}: a {nsp}-D kernel {a.kernel} needs {nsp + 2}-D data", input="data")
    if a.target_shape and any(a.target_shape):
        if len(a.target_shape) != nsp:
            s.fail(f"target_shape={a.target_shape} has {len(a.target_shape)} dimensions, the kernel has {nsp}")
    c = x[1]
    if c % a.num_group:
        s.fail(f"input 'data' has {c} channels, not a multiple of num_group={a.num_group}", input="data")
    s.expect("weight", (c, a.num_filter // a.num_group, *a.kernel),
             f"(data channels {c}, num_filter / num_group = {a.num_filter // a.num_group}, kernel {a.kernel})")
    if not a.no_bias:
        s.expect("bias", (a.num_filter,), f"(num_filter={a.num_filter})")
    k, st, p, adj, d, out = geometry(a, x)
    for i in range(nsp):
        full = st[i] * (x[2 + i] - 1) + dilated(k[i], d[i])
        if a.target_shape and any(a.target_shape) and a.target_shape[i] > full:
            s.fail(f"target_shape={a.target_shape} is too big: at most {full} along spatial axis {i} "
                   f"for input {x[2 + i]}")
        if out[i] <= 0:
            s.fail(f"output size {out[i]} along spatial axis {i}: pad {p[i]} is too large")
    return [(x[0], a.num_filter, *out)]


def _flops(a: DeconvAttrs, ins, outs):
    x, y = ins[0].shape, outs[0].shape
    og = a.num_filter // a.num_group
    return 2 * prod(x) * og * prod(a.kernel) + (0 if a.no_bias else prod(y))


def _direct(a: DeconvAttrs, x: tuple) -> bool:
    """1x1, stride 1, no padding/adj: the GEMM writes the output directly."""
    k, s, p, adj, _, _ = geometry(a, x)
    return all(v == 1 for v in k) and all(v == 1 for v in s) and not any(p) and not any(adj)


def _workspace(a: DeconvAttrs, ins, outs, const=frozenset()) -> int:
    x = ins[0].shape
    if _direct(a, x):
        return 0
    return a.num_filter * prod(a.kernel) * prod(x[2:]) * 4    # columns (O*K, HW) of one image


def _lower(a: DeconvAttrs, ctx):
    x, y = ctx.in_type("data").shape, ctx.out_type(0).shape
    kern, st, p, adj, d, out = geometry(a, x)
    g, c, o = a.num_group, x[1], a.num_filter
    cg, og, k, hw, ohw = c // g, o // g, prod(kern), prod(x[2:]), prod(y[2:])
    direct = _direct(a, x)
    return "kernels/deconv2d.c.j2", dict(
        path="gemm" if direct else "col2im", batch=x[0], groups=g, m=og * k, n=hw, k=cg,
        x_img=c * hw, y_img=o * ohw, w_grp=cg * og * k, b_grp=cg * hw, c_grp=og * k * hw,
        # col2im undoes the convolution that maps out (o channels, padded) to data: that conv's geometry
        geom=[] if direct else geom(o, y[2:], x[2:], kern, st, p, d),
        **per_image_epilogue(ctx, None if a.no_bias else "bias", o * ohw, ohw),
        out_rows=o, out_cols=ohw, parallel=cond_of(x[0] * o * ohw * k >= PARALLEL_MIN_ELEMENTS),
        what=f"out[n] ({o}, {ohw}) = col2im(weight^T ({o * k}, {c}) . data[n] ({c}, {hw})); "
             f"kernel {kern} stride {st} pad {p} adj {adj} dilate {d} groups {g}",
    )


def _grad(a: DeconvAttrs, g):
    attrs = {f.name: getattr(a, f.name) for f in fields(DeconvAttrs)}
    outs = g.emit("_backward_Deconvolution", [g.ograd(), g.input("data"), g.input("weight")],
                  data_grad=g.needs("data"), **attrs)
    names = _bwd_outputs(DeconvBackwardAttrs(**attrs, data_grad=g.needs("data")))
    return {n[:-len("_grad")]: r for n, r in zip(names, outs)}


DECONVOLUTION = register(OpDef(
    name="Deconvolution", attrs=DeconvAttrs, inputs=_inputs, infer=_infer, fusion=Fusion.ANCHOR, epilogue_axis=1,
    flops=_flops, lower=_lower, workspace=_workspace, grad=_grad, doc=__doc__))


@dataclass(frozen=True)
class DeconvBackwardAttrs(DeconvAttrs):
    data_grad: bool = True


def _bwd_outputs(a: DeconvBackwardAttrs) -> tuple[str, ...]:
    return (("data_grad",) if a.data_grad else ()) + ("weight_grad",) + (() if a.no_bias else ("bias_grad",))


def _bwd_infer(a: DeconvBackwardAttrs, s):
    x, w = s.known("data"), s.known("weight")
    return ([x] if a.data_grad else []) + [w] + ([] if a.no_bias else [(a.num_filter,)])


def _bwd_lower(a: DeconvBackwardAttrs, ctx):
    x, y = ctx.in_type("data").shape, ctx.in_type("ograd").shape
    kern, st, p, adj, d, out = geometry(a, x)
    g, c, o = a.num_group, x[1], a.num_filter
    cg, og, k, hw, ohw = c // g, o // g, prod(kern), prod(x[2:]), prod(y[2:])
    direct = _direct(a, x)
    names = _bwd_outputs(a)
    outv = {n: (f"out{i}" if len(names) > 1 else "out") for i, n in enumerate(names)}
    return "kernels/deconv2d_backward.c.j2", dict(
        path="gemm" if direct else "im2col", batch=x[0], groups=g, m=cg, n=hw, k=og * k,
        x_img=c * hw, y_img=o * ohw, w_grp=cg * og * k, x_grp=cg * hw, c_grp=og * k * hw,
        geom=[] if direct else geom(o, y[2:], x[2:], kern, st, p, d), out_channels=o, ohw=ohw,
        dx=outv.get("data_grad"), dw=outv["weight_grad"], db=outv.get("bias_grad"),
        parallel=cond_of(x[0] * o * ohw * k >= PARALLEL_MIN_ELEMENTS),
        what=f"dcols ({o * k}, {hw}) = im2col(ograd[n]); ddata_g = weight_g ({cg}, {og * k}) . dcols_g, "
             f"dweight_g += data_g . dcols_g^T; kernel {kern} stride {st} pad {p} adj {adj} dilate {d} groups {g}")


DECONVOLUTION_BACKWARD = register(OpDef(
    name="_backward_Deconvolution", attrs=DeconvBackwardAttrs, inputs=lambda a: ("ograd", "data", "weight"),
    output_names=_bwd_outputs, infer=_bwd_infer, fusion=Fusion.OPAQUE,
    flops=lambda a, ins, outs: _flops(a, [ins[1]], [ins[0]]) * (2 if a.data_grad else 1), lower=_bwd_lower,
    workspace=lambda a, ins, outs, const: _workspace(a, [ins[1]], [ins[0]])))
