"""dot and batch_dot: matrix products lowered to the runtime GEMM (runtime_c/gemm/mxcc_gemm.h).

dot follows MXNet's DotForward_: the left operand is read as a row-major (M, K) matrix (leading dims by
the last one), or with transpose_a as (K, M) (first dim by the rest) and transposed; the right one as
(K, N) (first dim by the rest), or with transpose_b as (N, K) (leading dims by the last) and transposed.
Both are the GEMM's TRANS/NO_TRANS cases on the stored arrays: no copy. The output shape is the M dims (if
the left is not 1-d) followed by the N dims (if the right is not 1-d); 1-d . 1-d is a (1,) dot product.
dot is an ANCHOR: an activation after it runs in the GEMM's tile epilogue.
batch_dot: (B..., M, K) x (B..., K, N) with equal batch dims, one GEMM per batch entry.
Backward (`_backward_dot`, one kernel for both operands, per batch entry for batch_dot): with dy (M, N),
  d lhs = dy . op(rhs)^T   (stored transposed: op(rhs) . dy^T)
  d rhs = op(lhs)^T . dy   (stored transposed: dy^T . op(lhs))
each one GEMM on the stored arrays (the TRANS flags absorb every transpose: no copy).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from math import prod
from typing import Literal, Optional

from mxcc.ops import register
from mxcc.ops._pack import gemm_pack_b
from mxcc.ops.fully_connected import prepack_pays, small_m_packed, unpacked_rows
from mxcc.ops.base import Fusion, OpDef


@dataclass(frozen=True)
class DotAttrs:
    transpose_a: bool = False
    transpose_b: bool = False
    forward_stype: Optional[Literal["default", "csr", "row_sparse"]] = None

    def __post_init__(self):
        if self.forward_stype not in (None, "default"):
            raise ValueError(f"forward_stype={self.forward_stype!r}: sparse storage is not supported")


def _split_dot(a: DotAttrs, l: tuple, r: tuple) -> tuple[tuple, int, int, tuple]:
    """(M dims, K of lhs, K of rhs, N dims) in MXNet's DotShape convention."""
    if a.transpose_a:
        m_dims, kl = (l[1:] if len(l) > 1 else (1,)), l[0]
    else:
        m_dims, kl = (l[:-1] if len(l) > 1 else (1,)), l[-1]
    if a.transpose_b:
        n_dims, kr = (r[:-1] if len(r) > 1 else (1,)), r[-1]
    else:
        n_dims, kr = (r[1:] if len(r) > 1 else (1,)), r[0]
    return m_dims, kl, kr, n_dims


def _dot_infer(a: DotAttrs, s):
    l, r = s.known("lhs"), s.known("rhs")
    if len(l) == 1 and len(r) == 1:
        if a.transpose_a or a.transpose_b:
            s.fail("cannot transpose vectors (both inputs are 1-d)", input="lhs")
        if l != r:
            s.fail(f"dot of vectors of lengths {l[0]} and {r[0]}", input="rhs", expected=l, got=r)
        return [(1,)]
    m_dims, kl, kr, n_dims = _split_dot(a, l, r)
    if kl != kr:
        s.fail(f"dot shape error: {l} x {r} (transpose_a={a.transpose_a}, transpose_b={a.transpose_b}): "
               f"reduction sizes {kl} and {kr} differ", input="rhs", got=r)
    return [(m_dims if len(l) > 1 else ()) + (n_dims if len(r) > 1 else ())]


def _gemm_vars(m, n, k, ta, tb, lda, ldb, what, ctx, *, batched=False) -> dict:
    # a constant rhs (a weight) is packed once at bind time, unless the GEMM takes its small-M path
    bp = ctx.packed_input("rhs", gemm_pack_b(k, n, trans=tb)) if not batched and prepack_pays(m, tb, k, n, ta) else None
    return dict(m=m, n=n, k=k, trans_a="MXCC_TRANS" if ta else "MXCC_NO_TRANS",
                trans_b="MXCC_TRANS" if tb else "MXCC_NO_TRANS", a="lhs", lda=lda, b="rhs", ldb=ldb,
                c="out", ldc=n, epilogue=ctx.gemm_epilogue(bias=None, per_row=False), what=what,
                **({} if batched else {"bp": bp, "small_m": small_m_packed(m, n),
                                       "unpacked": unpacked_rows(m, k, n, ta, tb, bp is not None)}))


def _dot_lower(a: DotAttrs, ctx):
    l, r = ctx.in_type("lhs").shape, ctx.in_type("rhs").shape
    if len(l) == 1 and len(r) == 1:
        m_dims, k, n_dims = (1,), l[0], (1,)
    else:
        m_dims, k, _, n_dims = _split_dot(a, l, r)
    m, n = prod(m_dims), prod(n_dims)
    ta, tb = a.transpose_a and len(l) + len(r) > 2, a.transpose_b and len(l) + len(r) > 2
    what = (f"out[{m},{n}] = lhs{'^T' if ta else ''}[{m},{k}] . rhs{'^T' if tb else ''}[{k},{n}]"
            f"  (lhs{list(l)}, rhs{list(r)})")
    # stored row lengths: lhs (M, K) or, transposed, (K, M); rhs (K, N) or, transposed, (N, K)
    return "kernels/gemm.c.j2", _gemm_vars(m, n, k, ta, tb, m if ta else k, k if tb else n, what, ctx)


def _dot_flops(a, ins, outs):
    l = ins[0].shape
    k = (l[0] if a.transpose_a else l[-1]) if len(l) > 1 else l[0]
    return 2 * prod(outs[0].shape) * k


DOT = register(OpDef(
    name="dot", attrs=DotAttrs, inputs=lambda a: ("lhs", "rhs"), infer=_dot_infer, fusion=Fusion.ANCHOR,
    flops=_dot_flops, lower=_dot_lower, grad=lambda a, g: _grad(False)(a, g), doc=__doc__))

# -------------------------------------------------------------------------------------------- batch_dot


def _batch_split(a: DotAttrs, l: tuple, r: tuple) -> tuple[int, int, int, int]:
    """(M, K of lhs, K of rhs, N) of each batch entry."""
    m, kl = (l[-1], l[-2]) if a.transpose_a else (l[-2], l[-1])
    kr, n = (r[-1], r[-2]) if a.transpose_b else (r[-2], r[-1])
    return m, kl, kr, n


def _batch_infer(a: DotAttrs, s):
    l, r = s.known("lhs"), s.known("rhs")
    if len(l) < 3 or len(l) != len(r):
        s.fail(f"batch_dot needs two N-d inputs (N >= 3) of the same rank, got {l} and {r}", input="rhs", got=r)
    if l[:-2] != r[:-2]:
        s.fail(f"batch dimensions differ: {l[:-2]} and {r[:-2]}", input="rhs", expected=l[:-2], got=r[:-2])
    m, kl, kr, n = _batch_split(a, l, r)
    if kl != kr:
        s.fail(f"batch_dot shape error: {l} x {r} (transpose_a={a.transpose_a}, transpose_b={a.transpose_b})",
               input="rhs", got=r)
    return [l[:-2] + (m, n)]


def _batch_lower(a: DotAttrs, ctx):
    l, r = ctx.in_type("lhs").shape, ctx.in_type("rhs").shape
    m, k, _, n = _batch_split(a, l, r)
    batch = prod(l[:-2])
    what = (f"for each of {batch} batches: out[{m},{n}] = lhs{'^T' if a.transpose_a else ''}[{m},{k}] . "
            f"rhs{'^T' if a.transpose_b else ''}[{k},{n}]")
    return "kernels/batch_gemm.c.j2", dict(
        batch=batch, stride_a=m * k, stride_b=k * n, stride_c=m * n,
        **_gemm_vars(m, n, k, a.transpose_a, a.transpose_b, l[-1], r[-1], what, ctx, batched=True))


def _batch_flops(a, ins, outs):
    l = ins[0].shape
    return 2 * prod(outs[0].shape) * (l[-2] if a.transpose_a else l[-1])


BATCH_DOT = register(OpDef(
    name="batch_dot", attrs=DotAttrs, inputs=lambda a: ("lhs", "rhs"), infer=_batch_infer,
    fusion=Fusion.ANCHOR, flops=_batch_flops, lower=_batch_lower, grad=lambda a, g: _grad(True)(a, g), doc=__doc__))


# -- backward ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DotBackwardAttrs(DotAttrs):
    batched: bool = False            # batch_dot
    lhs_grad: bool = True
    rhs_grad: bool = True


def _grad(batched: bool):
    def grad(a: DotAttrs, g):
        attrs = {f.name: getattr(a, f.name) for f in fields(DotAttrs)}
        outs = g.emit("_backward_dot", [g.ograd(), g.input("lhs"), g.input("rhs")], batched=batched,
                      lhs_grad=g.needs("lhs"), rhs_grad=g.needs("rhs"), **attrs)
        return dict(zip([n for n in ("lhs", "rhs") if g.needs(n)], outs))
    return grad


def _bwd_outputs(a: DotBackwardAttrs):
    return tuple(f"{n}_grad" for n, want in (("lhs", a.lhs_grad), ("rhs", a.rhs_grad)) if want)


def _bwd_infer(a: DotBackwardAttrs, s):
    return [s.known(n) for n, want in (("lhs", a.lhs_grad), ("rhs", a.rhs_grad)) if want]


def _gemm(c: str, x: tuple[str, tuple, bool], y: tuple[str, tuple, bool]) -> dict:
    """C = op(X) . op(Y) on stored row-major matrices X (xr, xc), Y (yr, yc): the GEMM call's arguments."""
    (xn, (xr, xc), tx), (yn, (yr, yc), ty) = x, y
    m, k = (xc, xr) if tx else (xr, xc)
    n = yr if ty else yc
    return dict(c=c, ta="MXCC_TRANS" if tx else "MXCC_NO_TRANS", tb="MXCC_TRANS" if ty else "MXCC_NO_TRANS",
                m=m, n=n, k=k, a=xn, lda=xc, b=yn, ldb=yc, ldc=n)


def _bwd_lower(a: DotBackwardAttrs, ctx):
    l, r = ctx.in_type("lhs").shape, ctx.in_type("rhs").shape
    if a.batched:
        m, k, _, n = _batch_split(a, l, r)
        batch, ta, tb = prod(l[:-2]), a.transpose_a, a.transpose_b
    else:
        if len(l) == 1 and len(r) == 1:
            m_dims, k, n_dims = (1,), l[0], (1,)
        else:
            m_dims, k, _, n_dims = _split_dot(a, l, r)
        m, n, batch = prod(m_dims), prod(n_dims), 1
        ta, tb = a.transpose_a and len(l) + len(r) > 2, a.transpose_b and len(l) + len(r) > 2
    A, B, dy = ("lhs", (k, m) if ta else (m, k)), ("rhs", (n, k) if tb else (k, n)), ("ograd", (m, n))
    names = _bwd_outputs(a)
    out = {nm: (f"out{i}" if len(names) > 1 else "out") for i, nm in enumerate(names)}
    gemms = []
    if a.lhs_grad:   # d lhs = dy . op(rhs)^T, or stored transposed op(rhs) . dy^T
        gemms.append(_gemm(out["lhs_grad"], (*B, tb), (*dy, True)) if ta else _gemm(out["lhs_grad"], (*dy, False), (*B, not tb)))
    if a.rhs_grad:   # d rhs = op(lhs)^T . dy, or stored transposed dy^T . op(lhs)
        gemms.append(_gemm(out["rhs_grad"], (*dy, True), (*A, ta)) if tb else _gemm(out["rhs_grad"], (*A, not ta), (*dy, False)))
    strides = dict(lhs=m * k, rhs=k * n, ograd=m * n)
    strides.update({out["lhs_grad"]: m * k} if a.lhs_grad else {})
    strides.update({out["rhs_grad"]: k * n} if a.rhs_grad else {})
    for gm in gemms:
        gm.update(sa=strides[gm["a"]], sb=strides[gm["b"]], sc=strides[gm["c"]])
    return "kernels/dot_backward.c.j2", dict(
        batch=batch, gemms=gemms,
        what=f"{'batch_' if a.batched else ''}dot backward: dy ({m}, {n}), lhs{'^T' if ta else ''} ({m}, {k}), "
             f"rhs{'^T' if tb else ''} ({k}, {n}){f', {batch} batch entries' if batch > 1 else ''}")


DOT_BACKWARD = register(OpDef(
    name="_backward_dot", attrs=DotBackwardAttrs, inputs=lambda a: ("ograd", "lhs", "rhs"), output_names=_bwd_outputs,
    infer=_bwd_infer, fusion=Fusion.OPAQUE, lower=_bwd_lower,
    flops=lambda a, ins, outs: len(outs) * (_batch_flops if a.batched else _dot_flops)(a, ins[1:], ins[:1])))
