"""Pooling: max, avg, sum (and lp with p_value=2) over 1-D (NCW) or 2-D (NCHW) windows.

MXNet 1.9.1 semantics: output size floor((x + 2p - k) / s) + 1 ('valid') or ceil(...) + 1 ('full'); each
window [o*s - p, o*s - p + k) is clipped to [-p, x + p) and then to the input. avg divides by the first
(count_include_pad, the default) or the second window size; max starts from the lowest float. global_pool
pools the whole plane, ignoring kernel/stride/pad/convention. 'same' is rejected: MXNet 1.9.1 crashes on it.

Outputs: MXNet's oneDNN build lists max pooling (1-D..3-D kernel, channel-first) with a second, hidden
output (its workspace), and node_row_ptr in the JSON counts it; mxcc keeps the count and never stores it.
Lowered to kernels/pool2d.c.j2, parallel over the N*C planes above PARALLEL_MIN_ELEMENTS; `_path` picks at
compile time: 'flat' (one window over the whole unpadded plane: a per-plane reduction), 'split' (the outputs
whose windows need no clipping run constant-trip loops, the border the clipped loop) or 'generic'.
Backward (`_backward_Pooling`, kernels/pool2d_backward.c.j2): the same windows, each sending its output
gradient back: max to the first element equal to the output (the one the forward kept, as MXNet's native
kernel does), avg/sum spread over the window with the forward's divisor, lp (p=2) as data / output.
max and lp read the forward's input and output; avg and sum only the gradient.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from math import ceil, prod
from typing import Literal, Optional

import numpy as np

from mxcc.ops import register
from mxcc.ops._spatial import CHANNEL_FIRST, LAYOUTS, check_layout, spatial
from mxcc.ops.base import Fusion, OpDef, c_float

PARALLEL_MIN_ELEMENTS = 1 << 15
FAST_PATHS = True        # False: every output on the generic clipped loop (benchmarks/pool.py, tests compare)
SPLIT_MAX_ROW = 1 << 14  # the split path's per-row scratch t[] lives on the stack: bound it (64 KiB)


@dataclass(frozen=True)
class PoolAttrs:
    kernel: tuple[int, ...] = ()
    pool_type: Literal["max", "avg", "sum", "lp"] = "max"
    global_pool: bool = False
    pooling_convention: Literal["valid", "full", "same"] = "valid"
    stride: tuple[int, ...] = ()
    pad: tuple[int, ...] = ()
    p_value: Optional[int] = None
    count_include_pad: Optional[bool] = None
    layout: Optional[Literal[LAYOUTS]] = None

    IGNORED = ("cudnn_off",)

    def __post_init__(self):
        if self.pooling_convention == "same":
            raise ValueError("pooling_convention='same' is not supported (MXNet 1.9.1 itself fails on it: "
                             "'Check failed: i >= 0 && i < ndim()'); use 'valid' or 'full' with a pad")
        if self.pool_type == "lp" and self.p_value != 2:
            raise ValueError(f"pool_type='lp' is supported with p_value=2 only, got p_value={self.p_value}")
        nsp = len(self.kernel)
        if not self.global_pool and nsp == 0:
            raise ValueError("kernel is required unless global_pool=True")
        if nsp > 2 and not self.global_pool:
            raise ValueError(f"kernel={self.kernel}: 3-D pooling is not supported (1-D and 2-D only)")
        if any(k <= 0 for k in self.kernel):
            raise ValueError(f"kernel={self.kernel} must be positive")
        if nsp and not self.global_pool:
            for what, v, lo in (("stride", self.stride, 1), ("pad", self.pad, 0)):
                if any(x < lo for x in spatial(v, nsp, lo, what)):
                    raise ValueError(f"{what}={v} must be >= {lo}")
        if nsp:
            check_layout(self.layout, nsp)


def _outputs(a: PoolAttrs):
    """MXNet's GetNumOutputs (oneDNN build): max pooling that oneDNN supports has a workspace output."""
    two = a.pool_type == "max" and 1 <= len(a.kernel) <= 3 and a.layout in (None, "NCW", "NCHW", "NCDHW")
    return ("output", "workspace") if two else ("output",)


def window(a: PoolAttrs, x: tuple):
    """(kernel, stride, pad, out) per spatial axis of data shape x."""
    nsp = len(x) - 2
    if a.global_pool:
        return tuple(x[2:]), (1,) * nsp, (0,) * nsp, (1,) * nsp
    k, s, p = a.kernel, spatial(a.stride, nsp, 1, "stride"), spatial(a.pad, nsp, 0, "pad")
    if a.pooling_convention == "full":
        out = tuple(1 + ceil((x[2 + i] + 2 * p[i] - k[i]) / s[i]) for i in range(nsp))
    else:
        out = tuple(1 + (x[2 + i] + 2 * p[i] - k[i]) // s[i] for i in range(nsp))
    return k, s, p, out


def _infer(a: PoolAttrs, s):
    x = s.known("data")
    nsp = len(x) - 2
    if nsp not in (1, 2):
        s.fail(f"input 'data' has shape {x}: pooling needs 3-D (NCW) or 4-D (NCHW) data", input="data")
    if a.kernel and len(a.kernel) != nsp and not a.global_pool:
        s.fail(f"kernel {a.kernel} has {len(a.kernel)} dimensions, data {x} has {nsp} spatial ones", input="data")
    if a.layout is not None and a.layout != CHANNEL_FIRST[nsp]:
        s.fail(f"layout={a.layout!r} does not match {nsp}-D data {x} ({CHANNEL_FIRST[nsp]} expected)")
    k, st, p, out = window(a, x)
    for i in range(nsp):
        if k[i] > x[2 + i] + 2 * p[i]:
            s.fail(f"kernel {k} is larger than the padded input {x[2 + i]} + 2*{p[i]} along spatial axis {i}",
                   input="data")
    y = (*x[:2], *out)
    return [y, y] if len(_outputs(a)) == 2 else [y]


def _flops(a: PoolAttrs, ins, outs):
    k, _, _, _ = window(a, ins[0].shape)
    return prod(outs[0].shape) * prod(k)


def _hw(t: tuple, fill: int) -> tuple:
    """Spatial tuple -> (h, w); 1-D pooling runs as a 1 x W plane."""
    return (fill,) * (2 - len(t)) + tuple(t)


def _lower(a: PoolAttrs, ctx):
    v = _pool_vars(a, ctx.in_type("data").shape)
    return "kernels/pool2d.c.j2", {**v, **_split_blocking(v)}


def _split_blocking(v: dict) -> dict:
    """The forward's split path in blocks of interior rows (kernels/pool2d.c.j2): `n` interior outputs per
    row, `vec2` whether stride-2 rows run the vector code (short rows, LeNet's 4 outputs, run faster plainly
    than through a mostly unused 16-wide block), `nu` n rounded up to 16, `tpad` floats of the column-reduced
    row t, `rb` rows per block so that a block of t stays within 4 KiB. Unblocked (rb = 1): rows shorter than
    a vector (gcc then unrolls them whole), and rows over 128 floats, whose own column pass separates the
    stores from the loads (blocking measured slower there: ResNet stem 260 vs 190 us). `init` is the
    reduction's start (max: the lowest float, as MXNet starts: NaN never wins)."""
    n = v["ow1"] - v["ow0"]
    vec2 = v["path"] == "split" and v["sw"] == 2 and n >= 8
    nu = (n + 15) // 16 * 16
    tpad = 2 * nu + v["kw"] + 16 if vec2 else v["tw"]
    rb = 1 if tpad < 16 or tpad > 128 else min(max(1024 // max(tpad, 1), 1), max(v["oh1"] - v["oh0"], 1))
    return dict(n=n, vec2=vec2, nu=nu, tpad=tpad, rb=rb, init=v["lowest"] if v["reduce"] == "max" else "0.0f")


def _pool_vars(a: PoolAttrs, x: tuple) -> dict:
    """The loop bounds of the forward's windows over data shape x (forward and backward share them)."""
    kern, st, p, out = window(a, x)
    (h, w), (oh, ow) = _hw(x[2:], 1), _hw(out, 1)
    (kh, kw), (sh, sw), (ph, pw) = _hw(kern, 1), _hw(st, 1), _hw(p, 0)
    planes = x[0] * x[1]
    reduce = {"max": "max", "avg": "sum", "sum": "sum", "lp": "lp2"}[a.pool_type]
    divisor = "none"
    if a.pool_type == "avg":
        divisor = "valid" if a.count_include_pad is False else "window"
    conv = "global" if a.global_pool else a.pooling_convention
    path, inner = _path(h, w, oh, ow, kh, kw, sh, sw, ph, pw)
    return dict(
        path=path, **inner,
        what=f"{a.pool_type} pooling {kern} stride {st} pad {p} ({conv}"
             f"{', count_include_pad' if divisor == 'window' else ''}): {planes} planes {x[2:]} -> {out}",
        reduce=reduce, divisor=divisor, lowest=c_float(np.finfo(np.float32).min),
        planes=planes, h=h, w=w, hw=h * w, hp=h + ph, wp=w + pw, oh=oh, ow=ow, ohw=oh * ow,
        kh=kh, kw=kw, sh=sh, sw=sw, ph=ph, pw=pw, window=kh * kw,
        hw_tail=h * w - h * w % 8,                  # flat path: where the 8-lane loop stops
        parallel=(planes * oh * ow * kh * kw >= PARALLEL_MIN_ELEMENTS) & (planes > 1),
    )


def _interior(x: int, o: int, k: int, s: int, p: int) -> tuple[int, int]:
    """Outputs [o0, o1) whose windows [o*s - p, o*s - p + k) lie wholly inside [0, x) (o0 == o1 if none)."""
    o0 = -(-p // s)
    o1 = min(o, (x + p - k) // s + 1) if x + p >= k else 0
    return o0, max(o0, o1)


def _path(h, w, oh, ow, kh, kw, sh, sw, ph, pw) -> tuple[str, dict]:
    """The forward template's path and its interior bounds (see kernels/pool2d.c.j2)."""
    (oh0, oh1), (ow0, ow1) = _interior(h, oh, kh, sh, ph), _interior(w, ow, kw, sw, pw)
    tw = (ow1 - ow0 - 1) * sw + kw if ow1 > ow0 else 0       # input columns the interior windows read
    inner = dict(oh0=oh0, oh1=oh1, ow0=ow0, ow1=ow1, c0=ow0 * sw - pw, tw=tw)
    if not FAST_PATHS:
        return "generic", inner
    if (oh, ow, kh, kw, ph, pw) == (1, 1, h, w, 0, 0):
        return "flat", inner
    if oh1 > oh0 and ow1 > ow0 and inner["tw"] <= SPLIT_MAX_ROW:
        return "split", inner
    return "generic", inner


FORWARD_ONLY = ("path", "oh0", "oh1", "ow0", "ow1", "c0", "tw", "window", "hw_tail")   # the backward keeps the generic loop


def _grad(a: PoolAttrs, g):
    ins = [g.ograd(), g.input("data"), g.output()] if _reads_values(a) else [g.ograd()]
    attrs = {f.name: getattr(a, f.name) for f in fields(PoolAttrs)}
    shape = g.type_of(g.input("data")).shape
    return {"data": g.emit("_backward_Pooling", ins, data_shape=shape, **attrs)[0]}


POOLING = register(OpDef(
    name="Pooling", attrs=PoolAttrs, inputs=lambda a: ("data",), infer=_infer, fusion=Fusion.OPAQUE,
    flops=_flops, lower=_lower, output_names=_outputs, hidden_outputs=lambda a: len(_outputs(a)) - 1,
    grad=_grad, doc=__doc__))


# -- backward: the gradient of each window back to the inputs it read ---------------------------------------
@dataclass(frozen=True)
class PoolBackwardAttrs(PoolAttrs):
    data_shape: tuple[int, ...] = ()     # the forward's input (avg/sum backward reads only the gradient)


def _reads_values(a: PoolAttrs) -> bool:
    """max and lp need the forward's input and output; avg and sum only the gradient."""
    return a.pool_type in ("max", "lp")


def _bwd_infer(a: PoolBackwardAttrs, s):
    return [tuple(a.data_shape)]


def _bwd_lower(a: PoolBackwardAttrs, ctx):
    v = _pool_vars(a, tuple(a.data_shape))
    for key in FORWARD_ONLY:
        del v[key]
    v["what"] = "backward of " + v["what"] + {"max": "; the gradient goes to the first maximum of each window (MXNet)",
                                            "lp": "; d sqrt(sum x^2) = x / out", "avg": "", "sum": ""}[a.pool_type]
    return "kernels/pool2d_backward.c.j2", v


POOLING_BACKWARD = register(OpDef(
    name="_backward_Pooling", attrs=PoolBackwardAttrs,
    inputs=lambda a: ("ograd", "data", "output") if _reads_values(a) else ("ograd",), infer=_bwd_infer,
    fusion=Fusion.OPAQUE, flops=lambda a, ins, outs: _flops(a, outs, ins), lower=_bwd_lower))
