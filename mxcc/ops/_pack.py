"""Bind-time transforms of constant inputs (weights), for LowerCtx.packed_input: each returns
(C statement reading `src` and writing `packed`, floats written, a comment, C statement multiplying output
channel o of `packed` by `bn_scale[o]`). `<net>_prepare` runs the first statement once after the params are
bound, and the last one too when the kernel's epilogue has an inference BatchNorm to fold into the weight
(LowerCtx.packed_input); the kernel reads the result from ctx->derived."""
from __future__ import annotations

from mxcc.codegen.splits import ISAS, pw_weight_panels


def gemm_pack_b(k: int, n: int, trans: bool) -> tuple[str, int, str, str]:
    """mxcc_gemm_pack_b_f32 of a (k x n) op(B) stored (n, k) if `trans`, else (k, n). The size is
    MXCC_GEMM_PACKED_B_FLOATS_MAX (runtime_c/gemm/mxcc_gemm.h): enough whether the build's NR is 16 or 32."""
    call = (f"mxcc_gemm_pack_b_f32({'MXCC_TRANS' if trans else 'MXCC_NO_TRANS'}, {k}, {n}, src, "
            f"{k if trans else n}, packed);")
    return (call, k * (-(-n // 32) * 32), f"op(B) ({k}, {n}){' = B^T' if trans else ''} as GEMM B panels",
            f"mxcc_gemm_scale_packed_b_f32({k}, {n}, packed, bn_scale);")


def winograd_f43_weight(o: int, c: int) -> tuple[str, int, str, str]:
    """mxcc_winograd_f43_weight_f32 of a (o, c, 3, 3) weight: 36 transformed (c x o) matrices as GEMM B
    panels. The size is MXCC_WINOGRAD_F43_WEIGHT_FLOATS_MAX (runtime_c/conv/mxcc_winograd.h)."""
    return (f"mxcc_winograd_f43_weight_f32({o}, {c}, src, packed);", 36 * gemm_pack_b(c, o, False)[1],
            "Winograd F(4x4, 3x3) transform G g G^T, 36 (C, O) matrices as GEMM B panels",
            f"mxcc_winograd_f43_scale_weight_f32({o}, {c}, packed, bn_scale);")


def conv1x1_weight(o: int, c: int) -> tuple[str, int, str, str]:
    """mxcc_conv1x1_pack_w_f32 of a (o, c) 1x1 weight: (c, MR) panels of output channels. The size is
    MXCC_CONV1X1_PACKED_W_FLOATS_MAX (runtime_c/conv/mxcc_conv.h): enough whether the build's MR is 12, 6 or 4."""
    wide = ISAS["avx512"]   # the tallest panels (MR = 12), the most floats of any build
    return (f"mxcc_conv1x1_pack_w_f32({o}, {c}, src, packed);", c * pw_weight_panels(o, wide) * wide.pw_mr,
            "1x1 weight (O, C) as (C, MR) panels of output channels",
            f"mxcc_conv1x1_scale_packed_w_f32({o}, {c}, packed, bn_scale);")


def conv_direct_weight(k: int, o: int) -> tuple[str, int, str, str]:
    """mxcc_conv_direct_pack_f32 of a (o, k) weight, k = C*KH*KW: (k, o rounded up to MXCC_CONV_DIRECT_OB = 8,
    runtime_c/conv/mxcc_conv.h), one tap's output channels side by side, zeros past o."""
    return (f"mxcc_conv_direct_pack_f32({k}, {o}, src, packed);", k * (-(-o // 8) * 8),
            "weight (O, C*KH*KW) as (C*KH*KW, O rounded up to 8): a tap's channels side by side",
            f"mxcc_conv_direct_scale_packed_f32({k}, {o}, packed, bn_scale);")
