/* The epilogue's cheap activations on registers, for kernels that apply the epilogue to a tile before
 * storing it (runtime_c/conv/conv_packed_f32.c, conv1x1_f32.c). Same results as the scalar mxcc_epilogue
 * (epilogue_f32.c): relu is a > 0 ? a : 0 (NaN -> 0), clip is a < lo ? lo : (a > hi ? hi : a). The other
 * activations (sigmoid, tanh, softrelu, softsign) run over the stored tile with mxcc_epilogue_apply_f32. */
#ifndef MXCC_EPILOGUE_SIMD_H
#define MXCC_EPILOGUE_SIMD_H

#include "mxcc_gemm.h"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

/* The activations these helpers compute (the others go through the stored tile). */
static inline int mxcc_act_in_registers(mxcc_act a)
{
    return a == MXCC_ACT_NONE || a == MXCC_ACT_RELU || a == MXCC_ACT_LEAKY || a == MXCC_ACT_CLIP;
}

#if defined(__AVX2__) && defined(__FMA__)
static inline __m256 mxcc_act_f32x8(mxcc_act act, float alpha, float lo, float hi, __m256 v)
{
    switch (act) {
    case MXCC_ACT_RELU:
        return _mm256_and_ps(v, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ));
    case MXCC_ACT_LEAKY:
        return _mm256_blendv_ps(_mm256_mul_ps(v, _mm256_set1_ps(alpha)), v,
                                _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ));
    case MXCC_ACT_CLIP: {
        const __m256 l = _mm256_set1_ps(lo), h = _mm256_set1_ps(hi);
        const __m256 below = _mm256_cmp_ps(v, l, _CMP_LT_OQ);
        v = _mm256_blendv_ps(v, h, _mm256_cmp_ps(v, h, _CMP_GT_OQ));
        return _mm256_blendv_ps(v, l, below);
    }
    default:
        return v;
    }
}
#endif

#if defined(__AVX512F__)
static inline __m512 mxcc_act_f32x16(mxcc_act act, float alpha, float lo, float hi, __m512 v)
{
    const __m512 z = _mm512_setzero_ps();
    switch (act) {
    case MXCC_ACT_RELU:
        return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, z, _CMP_GT_OQ), v);
    case MXCC_ACT_LEAKY:
        return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, z, _CMP_GT_OQ), _mm512_mul_ps(v, _mm512_set1_ps(alpha)), v);
    case MXCC_ACT_CLIP: {
        const __m512 l = _mm512_set1_ps(lo), h = _mm512_set1_ps(hi);
        const __mmask16 below = _mm512_cmp_ps_mask(v, l, _CMP_LT_OQ);
        v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, h, _CMP_GT_OQ), v, h);
        return _mm512_mask_blend_ps(below, v, l);
    }
    default:
        return v;
    }
}
#endif

#endif /* MXCC_EPILOGUE_SIMD_H */
