"""FullyConnected: out = data . weight^T + bias, data flattened to 2-D unless flatten=False.

Lowered to one call of the runtime GEMM with the weight in MXNet's (num_hidden, in) layout (the TRANS
case, no copy); bias and any fused activation run in the GEMM's tile epilogue. In an inference plan a batch
past the GEMM's small-M bound, of 4 rows or more on 64+ outputs, or of one or two rows whose outputs fill the
weight panels reads the weight packed once at bind time (`<net>_prepare`), not per call (prepack_pays).
"""
from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from math import prod

from mxcc.codegen.batchvar import Cond, is_dynamic
from mxcc.files import resource_dir
from mxcc.errors import BuildError
from mxcc.ops import register
from mxcc.ops._pack import gemm_pack_b
from mxcc.ops.base import Fusion, OpDef


def _gemm_config(*names: str) -> tuple[int, ...]:
    """The values of integer #defines of runtime_c/gemm/gemm_config.h, read from the header itself so that the
    choices below are the GEMM's own (one source for C and Python)."""
    header = resource_dir("runtime_c") / "gemm" / "gemm_config.h"
    text = header.read_text()
    ops = {ast.LShift: operator.lshift, ast.Mult: operator.mul, ast.Add: operator.add, ast.Sub: operator.sub}

    def value(node):   # numbers, parentheses, <<, *, +, -: what the header writes, e.g. (1 << 18)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](value(node.left), value(node.right))
        raise ValueError(ast.dump(node))

    out = []
    for name in names:
        m = re.search(rf"^#define\s+{name}\s+(.+?)\s*(?:/\*.*)?$", text, re.M)
        try:
            out.append(value(ast.parse(m[1], mode="eval").body))
        except (TypeError, SyntaxError, ValueError):
            raise BuildError(f"{header}: no integer #define {name}") from None
    return tuple(out)


# The GEMM's small-M path (runtime_c/gemm/gemm_config.h: MXCC_GEMM_SMALLM_MAX rows of A, MXCC_GEMM_SMALLM_MAX_A
# floats of A): C = A . W^T reads W's rows unpacked, so packing W at bind time would not be used.
GEMM_SMALL_M, GEMM_SMALL_M_A = _gemm_config("MXCC_GEMM_SMALLM_MAX", "MXCC_GEMM_SMALLM_MAX_A")


def gemm_small_m(m: int, k: int, trans_a: bool, trans_b: bool) -> bool:
    """Whether mxcc_gemm_f32 runs op(A) (m x k) . op(B) by its small-M path: mxcc_gemm_small_m in
    runtime_c/gemm/gemm_f32.c, the same condition (tests/runtime/test_gemm_small_m.py compares them)."""
    return (m <= GEMM_SMALL_M) & (m * k <= GEMM_SMALL_M_A) & (not trans_a and trans_b)   # a Cond at a dynamic batch


# One row (batch-1 inference) reads a constant weight packed at bind time too, through
# mxcc_gemm_f32_small_m_packed_b (runtime_c/gemm/smallm_packed_f32.c: each A value broadcast against the panels,
# no horizontal sums). One thread, C driver, same build: 784->128 3.4 vs 3.7 us, 128->64 0.155 vs 0.48 us,
# 64->10 0.09-0.11 vs 0.17 us (the MLP's layers); at 2-4 rows the unpacked path's dot products won
# (2 x 128 x 784: 4.2-4.7 vs 5.5 us), so only M = 1 takes it (from 4 rows on 64+ outputs the packed
# micro-kernel does: GEMM_PACKED_FROM_M below).
SMALL_M_PACKED = 1

# The panels are whole: NR columns each (32 on AVX-512, 16 on AVX2), so an output of a few columns computes a
# panel mostly of padding. Zen 4, 1 thread, one row (benchmarks/gemm_paths.c), us, dot products / panels:
# AVX-512 500->10 0.24 / 0.60, 2048->10 0.93 / 2.34, 512->40 0.80 / 1.18, 512->48 0.95 / 1.18,
# 512->32 0.65 / 0.62, 512->64 1.26 / 1.18,
# 1024->1000 52.3 / 43.8; AVX2 500->10 0.20 / 0.31, 512->40 0.75 / 0.94, 512->64 1.19 / 1.21. So the panels
# serve one or two rows where the columns fill them to PANEL_FILL (counted in 32-column panels, the widest).
PANEL_COLUMNS, PANEL_FILL = 32, 0.9


def panels_filled(n) -> bool:
    """Whether n output columns fill their 32-column weight panels to PANEL_FILL."""
    return n >= PANEL_FILL * -(-n // PANEL_COLUMNS) * PANEL_COLUMNS


def small_m_packed(m: int, n: int | None = None):
    """Whether a GEMM of m rows (n output columns, None: not weighed) with a B packed at bind time runs
    mxcc_gemm_f32_small_m_packed_b: one row, where the columns fill the panels (panels_filled). For one row
    op(A) is the same contiguous vector whether A is transposed or not. With a dynamic batch: a Cond, the
    template tests it at run time."""
    return m <= SMALL_M_PACKED if n is None or panels_filled(n) else False


# A few rows against a weight packed at bind time: the packed micro-kernel has only A to pack, and from 4 rows
# it beats the small-M path's dot products wherever the weight spans a few panels (N >= 64). Zen 4 (AMD EPYC
# family 25 model 17), 1 thread, benchmarks/gemm_paths.c (best of 5 alternating), us, small-M path / packed B
# (with gemm_f32.c's short last panels by the panel kernel), 2026-11-28:
#   AVX-512: 1024->1000 M = 4 119 / 79, 8 202 / 147, 16 393 / 380, 24 598 / 527, 32 790 / 750;
#            800->512 M = 8 74 / 58, 32 284 / 228; 784->128 M = 8 17.3 / 14.0, 32 67.8 / 56.6
#   AVX2:    1024->1000 M = 6 162 / 116, 12 328 / 226, 32 898 / 633; 784->128 M = 4 9.9 / 10.3, 32 77 / 57;
#            128->64 M = 4 0.97 / 1.14, 8 1.87 / 1.36, 32 7.5 / 4.8
# Two rows go to the one-row kernel's panels (mxcc_gemm_f32_packed_b hands M <= 2 to it), which beats the dot
# products there: us, small-M path / panels, AVX-512 1024->1000 57.5 / 45.8, 800->512 21.6 / 18.1, 784->128
# 4.78 / 4.09, 128->64 0.57 / 0.41; AVX2 67.6 / 50.4, 23.7 / 20.8, 5.02 / 4.68, 0.52 / 0.45. At 3 rows (the
# panels twice: 1024->1000 71 / 84) and for narrow outputs (512->10, 256->24: up to 4x slower packed on AVX2,
# whose edge tiles compute whole 16-column halves), the dot products stay.
GEMM_PACKED_FROM_M, GEMM_PACKED_FROM_N = 4, 64


def packed_rows_pay(m, n: int):
    """Whether m rows (m <= GEMM_SMALL_M) of a GEMM with N = n columns run faster against a B packed at bind time
    than by the small-M path: 2 rows, or GEMM_PACKED_FROM_M and more, on n >= GEMM_PACKED_FROM_N. A Cond at a
    dynamic batch."""
    if n < GEMM_PACKED_FROM_N:
        return False
    # m == 2 as two comparisons: an Extent's == is structural (batchvar.py), its <= and >= give run-time tests
    return (m >= GEMM_PACKED_FROM_M) | ((m >= 2) & (m <= 2) if panels_filled(n) else False)


def unpacked_rows(m, k: int, n: int, trans_a: bool, trans_b: bool, packed: bool):
    """With B packed at bind time for a dynamic batch: whether a call's rows (m, an Extent of N) take the
    GEMM's small-M path on B as it is (a Cond tested per call), as a module compiled for that batch would
    not have packed B. 0 otherwise."""
    if not (packed and is_dynamic(m)):
        return 0
    small, pays = gemm_small_m(m, k, trans_a, trans_b), packed_rows_pay(m, n)
    return small & (~pays if isinstance(pays, Cond) else not pays)


def prepack_pays(m: int, trans_b: bool, k: int, n: int, trans_a: bool = False) -> bool:
    """Whether packing B (k x n) once at bind time saves work: the GEMM (op(A) m x k) packs its B per call, not
    taking its small-M path or taking it where packed rows pay (packed_rows_pay), or one row reads the panels
    with mxcc_gemm_f32_small_m_packed_b. With a dynamic batch (m an Extent of N) the packing is done once for
    every batch: it pays when it does at the maximum or at one row (N = 1 takes the one-row path)."""
    if is_dynamic(m):
        return prepack_pays(m.at(1), trans_b, k, n, trans_a) or prepack_pays(m.at_max, trans_b, k, n, trans_a)
    return small_m_packed(m, n) or not gemm_small_m(m, k, trans_a, trans_b) or packed_rows_pay(m, n)


@dataclass(frozen=True)
class FCAttrs:
    num_hidden: int
    no_bias: bool = False
    flatten: bool = True

    def __post_init__(self):
        if self.num_hidden <= 0:
            raise ValueError(f"num_hidden must be positive, got {self.num_hidden}")


def _inputs(a: FCAttrs):
    return ("data", "weight") if a.no_bias else ("data", "weight", "bias")


def _mk(a: FCAttrs, x: tuple) -> tuple[int, int]:
    """(rows M, reduction K) of the GEMM for data shape x."""
    if a.flatten:
        return x[0], prod(x[1:])
    return prod(x[:-1]), x[-1]


def _infer(a: FCAttrs, s):
    x = s.known("data")
    if len(x) < 1 or (not a.flatten and len(x) < 1):
        s.fail(f"input 'data' must have at least 1 dimension, got {x}", input="data")
    _, k = _mk(a, x)
    s.expect("weight", (a.num_hidden, k), f"(num_hidden={a.num_hidden}, {k} from data {x})")
    if not a.no_bias:
        s.expect("bias", (a.num_hidden,), f"(num_hidden={a.num_hidden})")
    out = (x[0], a.num_hidden) if a.flatten else (*x[:-1], a.num_hidden)
    return [out]


def _flops(a: FCAttrs, ins, outs):
    m, k = _mk(a, ins[0].shape)
    return 2 * m * k * a.num_hidden + (0 if a.no_bias else m * a.num_hidden)


def _lower(a: FCAttrs, ctx):
    (m, k), n = _mk(a, ctx.in_type("data").shape), a.num_hidden
    return "kernels/gemm.c.j2", dict(
        m=m, n=a.num_hidden, k=k, trans_a="MXCC_NO_TRANS", trans_b="MXCC_TRANS",
        a="data", lda=k, b="weight", ldb=k, c="out", ldc=a.num_hidden, small_m=small_m_packed(m, n),
        bp=ctx.packed_input("weight", gemm_pack_b(k, n, trans=True)) if prepack_pays(m, True, k, n) else None,
        unpacked=unpacked_rows(m, k, n, False, True, prepack_pays(m, True, k, n) and "weight" in ctx.const),
        epilogue=ctx.gemm_epilogue(bias=None if a.no_bias else "bias", per_row=False, ld_residual=a.num_hidden),
        what=f"out[{m},{a.num_hidden}] = data[{m},{k}] . weight[{a.num_hidden},{k}]^T",
    )


def _grad(a: FCAttrs, g):
    outs = g.emit("_backward_FullyConnected", [g.ograd(), g.input("data"), g.input("weight")],
                  num_hidden=a.num_hidden, no_bias=a.no_bias, flatten=a.flatten, data_grad=g.needs("data"))
    names = _bwd_outputs(FCBackwardAttrs(a.num_hidden, a.no_bias, a.flatten, g.needs("data")))
    return {n.replace("_grad", ""): r for n, r in zip(names, outs)}


FULLY_CONNECTED = register(OpDef(
    name="FullyConnected", attrs=FCAttrs, inputs=_inputs, infer=_infer, fusion=Fusion.ANCHOR,
    flops=_flops, lower=_lower, grad=_grad, epilogue_axis=-1, doc=__doc__))


# -- backward: one kernel per layer computing (data_grad), weight_grad, (bias_grad) -----------------------
@dataclass(frozen=True)
class FCBackwardAttrs:
    num_hidden: int
    no_bias: bool = False
    flatten: bool = True
    data_grad: bool = True        # False for the first layer: nobody needs the gradient of the input


def _bwd_outputs(a: FCBackwardAttrs) -> tuple[str, ...]:
    return (("data_grad",) if a.data_grad else ()) + ("weight_grad",) + (() if a.no_bias else ("bias_grad",))


def _bwd_infer(a: FCBackwardAttrs, s):
    x, w = s.known("data"), s.known("weight")
    outs = [x] if a.data_grad else []
    return outs + [w] + ([] if a.no_bias else [(a.num_hidden,)])


def _bwd_flops(a: FCBackwardAttrs, ins, outs):
    m, k = _mk(FCAttrs(a.num_hidden, a.no_bias, a.flatten), ins[1].shape)
    return 2 * m * k * a.num_hidden * (2 if a.data_grad else 1) + (0 if a.no_bias else m * a.num_hidden)


def _bwd_lower(a: FCBackwardAttrs, ctx):
    m, k = _mk(FCAttrs(a.num_hidden, a.no_bias, a.flatten), ctx.in_type("data").shape)
    names = _bwd_outputs(a)
    out = {n: (f"out{i}" if len(names) > 1 else "out") for i, n in enumerate(names)}
    return "kernels/fc_backward.c.j2", dict(
        m=m, n=a.num_hidden, k=k, dx=out.get("data_grad"), dw=out["weight_grad"], db=out.get("bias_grad"))


FC_BACKWARD = register(OpDef(
    name="_backward_FullyConnected", attrs=FCBackwardAttrs, inputs=lambda a: ("ograd", "data", "weight"),
    infer=_bwd_infer, output_names=_bwd_outputs, fusion=Fusion.OPAQUE, flops=_bwd_flops, lower=_bwd_lower))
