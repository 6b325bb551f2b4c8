/* The epilogue's activations on registers: the one implementation every kernel uses that applies its epilogue
 * to a tile before storing it (runtime_c/conv/: packed, 1x1, direct, depthwise, Winograd; the small-M paths).
 *
 * relu, leaky and clip have a register form; the others (sigmoid, tanh, softrelu, softsign) run over the
 * stored tile with mxcc_act_apply_f32 (epilogue_f32.c), which the scalar epilogue uses too. Every form gives
 * the bits of the scalar definitions in mxcc_math.h (mshadow_op), NaN and signed zeros included:
 *   relu   x > 0 ? x : 0 as a compare mask (NaN and -0 -> +0). max(x, 0) gives the same bits (maxps returns
 *          its second operand for a NaN or two zeros) but is not used: where a kernel's multiply and add
 *          are contracted into an FMA depends on the optimizer's unswitching, which depends on the code
 *          around it, and the mask form is the one every kernel's results were measured with
 *   leaky  x > 0 ? x : alpha * x (a compare and a blend)
 *   clip   x < lo ? lo : (x > hi ? hi : x) as a compare, a blend and min(hi, x) (minps returns x unless
 *          hi < x: x > hi ? hi : x, NaN kept); also right when lo > hi, where min(max(x, lo), hi) is not
 *
 *   mxcc_act_in_registers(act)                 whether act has a register form (NONE counts: nothing to do)
 *   mxcc_act_f32x1(act, alpha, lo, hi, x)      one float: plain-C tiles
 *   mxcc_relu_f32x4(v)                          4 floats (SSE): Winograd's output rows
 *   mxcc_relu/leaky/clip_f32x8, mxcc_act_f32x8  8 floats, in AVX2 builds (AVX-512 ones too: 8-lane tiles)
 *   mxcc_relu/leaky/clip_f32x16                 16 floats, in AVX-512 builds
 *   mxcc_relu/leaky/clip_f32, mxcc_act_f32      the build's vector (runtime_c/simd.h), and mxcc_act_n_f32:
 *                                                n accumulators, the switch and the broadcasts outside the loop
 * leaky and clip take their parameters as vectors (set1 once per tile, not per vector); the mxcc_act_* forms
 * take floats. An activation without a register form leaves the vector as it is.
 */
#ifndef MXCC_EPILOGUE_SIMD_H
#define MXCC_EPILOGUE_SIMD_H

#include "mxcc_gemm.h"
#include "../mxcc_math.h"
#include "../simd.h"

#define MXCC_ACT_INLINE static inline __attribute__((always_inline))

/* The activations the register forms compute (the others go through the stored tile). */
static inline int mxcc_act_in_registers(mxcc_act a)
{
    return a == MXCC_ACT_NONE || a == MXCC_ACT_RELU || a == MXCC_ACT_LEAKY || a == MXCC_ACT_CLIP;
}

/* ---- one float ------------------------------------------------------------------------------------------ */
MXCC_ACT_INLINE float mxcc_act_f32x1(mxcc_act act, float alpha, float lo, float hi, float x)
{
    switch (act) {
    case MXCC_ACT_RELU: return mxcc_relu(x);
    case MXCC_ACT_LEAKY: return mxcc_leaky(x, alpha);
    case MXCC_ACT_CLIP: return mxcc_clip(x, lo, hi);
    default: return x;
    }
}

/* ---- 4 and 8 floats (SSE / AVX) ------------------------------------------------------------------------- */
#if defined(__AVX2__)
MXCC_ACT_INLINE __m128 mxcc_relu_f32x4(__m128 v) { return _mm_and_ps(v, _mm_cmpgt_ps(v, _mm_setzero_ps())); }

MXCC_ACT_INLINE __m256 mxcc_relu_f32x8(__m256 v)
{
    return _mm256_and_ps(v, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ));
}
MXCC_ACT_INLINE __m256 mxcc_leaky_f32x8(__m256 v, __m256 alpha)
{
    return _mm256_blendv_ps(_mm256_mul_ps(v, alpha), v, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ));
}
MXCC_ACT_INLINE __m256 mxcc_clip_f32x8(__m256 v, __m256 lo, __m256 hi)
{
    return _mm256_blendv_ps(_mm256_min_ps(hi, v), lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ));
}
MXCC_ACT_INLINE __m256 mxcc_act_f32x8(mxcc_act act, float alpha, float lo, float hi, __m256 v)
{
    switch (act) {
    case MXCC_ACT_RELU: return mxcc_relu_f32x8(v);
    case MXCC_ACT_LEAKY: return mxcc_leaky_f32x8(v, _mm256_set1_ps(alpha));
    case MXCC_ACT_CLIP: return mxcc_clip_f32x8(v, _mm256_set1_ps(lo), _mm256_set1_ps(hi));
    default: return v;
    }
}
#endif

/* ---- 16 floats (AVX-512F) ------------------------------------------------------------------------------- */
#if defined(__AVX512F__)
MXCC_ACT_INLINE __m512 mxcc_relu_f32x16(__m512 v)
{
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
}
MXCC_ACT_INLINE __m512 mxcc_leaky_f32x16(__m512 v, __m512 alpha)
{
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), _mm512_mul_ps(v, alpha), v);
}
MXCC_ACT_INLINE __m512 mxcc_clip_f32x16(__m512 v, __m512 lo, __m512 hi)
{
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), _mm512_min_ps(hi, v), lo);
}
#endif

/* ---- the build's vector (simd.h) ------------------------------------------------------------------------ */
#if defined(__AVX512F__)
MXCC_ACT_INLINE mxcc_simd_f32 mxcc_relu_f32(mxcc_simd_f32 v) { return mxcc_relu_f32x16(v); }
MXCC_ACT_INLINE mxcc_simd_f32 mxcc_leaky_f32(mxcc_simd_f32 v, mxcc_simd_f32 alpha) { return mxcc_leaky_f32x16(v, alpha); }
MXCC_ACT_INLINE mxcc_simd_f32 mxcc_clip_f32(mxcc_simd_f32 v, mxcc_simd_f32 lo, mxcc_simd_f32 hi)
{
    return mxcc_clip_f32x16(v, lo, hi);
}
#elif defined(__AVX2__) && defined(__FMA__)
MXCC_ACT_INLINE mxcc_simd_f32 mxcc_relu_f32(mxcc_simd_f32 v) { return mxcc_relu_f32x8(v); }
MXCC_ACT_INLINE mxcc_simd_f32 mxcc_leaky_f32(mxcc_simd_f32 v, mxcc_simd_f32 alpha) { return mxcc_leaky_f32x8(v, alpha); }
MXCC_ACT_INLINE mxcc_simd_f32 mxcc_clip_f32(mxcc_simd_f32 v, mxcc_simd_f32 lo, mxcc_simd_f32 hi)
{
    return mxcc_clip_f32x8(v, lo, hi);
}
#else
/* plain C: the scalar definitions lane by lane */
MXCC_ACT_INLINE mxcc_simd_f32 mxcc_relu_f32(mxcc_simd_f32 v)
{
    for (int i = 0; i < MXCC_SIMD_SIZE_F32; i++) v.f[i] = mxcc_relu(v.f[i]);
    return v;
}
MXCC_ACT_INLINE mxcc_simd_f32 mxcc_leaky_f32(mxcc_simd_f32 v, mxcc_simd_f32 alpha)
{
    for (int i = 0; i < MXCC_SIMD_SIZE_F32; i++) v.f[i] = mxcc_leaky(v.f[i], alpha.f[i]);
    return v;
}
MXCC_ACT_INLINE mxcc_simd_f32 mxcc_clip_f32(mxcc_simd_f32 v, mxcc_simd_f32 lo, mxcc_simd_f32 hi)
{
    for (int i = 0; i < MXCC_SIMD_SIZE_F32; i++) v.f[i] = mxcc_clip(v.f[i], lo.f[i], hi.f[i]);
    return v;
}
#endif

/* act on v[0:n] in place. n is a constant at the call sites (always_inline): the loops unroll and v stays in
 * registers; the switch and the parameter broadcasts run once for the n vectors. */
MXCC_ACT_INLINE void mxcc_act_n_f32(mxcc_act act, float alpha, float lo, float hi, mxcc_simd_f32 *v, const int n)
{
    switch (act) {
    case MXCC_ACT_RELU:
#pragma GCC unroll 16
        for (int i = 0; i < n; i++) v[i] = mxcc_relu_f32(v[i]);
        break;
    case MXCC_ACT_LEAKY: {
        const mxcc_simd_f32 a = mxcc_set1_f32(alpha);
#pragma GCC unroll 16
        for (int i = 0; i < n; i++) v[i] = mxcc_leaky_f32(v[i], a);
        break;
    }
    case MXCC_ACT_CLIP: {
        const mxcc_simd_f32 l = mxcc_set1_f32(lo), h = mxcc_set1_f32(hi);
#pragma GCC unroll 16
        for (int i = 0; i < n; i++) v[i] = mxcc_clip_f32(v[i], l, h);
        break;
    }
    default:
        break;
    }
}

MXCC_ACT_INLINE mxcc_simd_f32 mxcc_act_f32(mxcc_act act, float alpha, float lo, float hi, mxcc_simd_f32 v)
{
    mxcc_act_n_f32(act, alpha, lo, hi, &v, 1);
    return v;
}

#endif /* MXCC_EPILOGUE_SIMD_H */
