/* The gate arithmetic of the recurrent kernels (rnn_f32.c) on the build's vector: rv, RV lanes.
 *
 * sigmoid and tanh run on every gate of every step, so they are computed in registers, not by a libm call per
 * element (glibc's expf/tanhf do not vectorize without -ffast-math, which mxcc never uses):
 *   exp(x)      Cephes' expf: x = n ln2 + r (n = round(x / ln2), ln2 in two parts so r is exact), e^r by
 *               its degree-6 polynomial, times 2^n written into the exponent bits; x clamped to
 *               [-87.3, 88.3] so 2^n stays a normal float (NaN passes through). About 1 ulp.
 *   sigmoid(x)  1 / (1 + exp(-x))                 (mshadow_op::sigmoid's formula)
 *   tanh(x)     |x| < 0.625: Cephes' tanhf polynomial x + x^3 P(x^2); else sign(x) (1 - 2 / (exp(2|x|) + 1)).
 *               About 2 ulp.
 * mxcc_rnn_act_f32 (rnn_f32.c) exposes them for tests against libm. Three builds, by the compiler's target
 * macros only: AVX-512F (16 lanes, masked tails), AVX2 + FMA (8 lanes, vmaskmovps tails), plain C (1 lane:
 * the same formulas on floats).
 */
#ifndef MXCC_RNN_VEC_H
#define MXCC_RNN_VEC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../simd.h"

#define RV_INLINE static inline __attribute__((always_inline))

#if defined(__AVX512F__)
#define RV 16
typedef __m512 rv;
RV_INLINE rv rv_set(float a) { return _mm512_set1_ps(a); }
/* n floats at p, n <= RV (lanes past n read as 0, never touched in memory) */
RV_INLINE rv rv_load(const float *p, int n)
{
    return n >= RV ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(mxcc_tail_f32x16(n), p);
}
RV_INLINE void rv_store(float *p, rv v, int n)
{
    if (n >= RV)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, mxcc_tail_f32x16(n), v);
}
RV_INLINE rv rv_add(rv a, rv b) { return _mm512_add_ps(a, b); }
RV_INLINE rv rv_sub(rv a, rv b) { return _mm512_sub_ps(a, b); }
RV_INLINE rv rv_mul(rv a, rv b) { return _mm512_mul_ps(a, b); }
RV_INLINE rv rv_div(rv a, rv b) { return _mm512_div_ps(a, b); }
RV_INLINE rv rv_fma(rv a, rv b, rv c) { return _mm512_fmadd_ps(a, b, c); }
/* min(hi, max(lo, x)) keeping a NaN x (minps/maxps return their second operand when either is NaN) */
RV_INLINE rv rv_clamp(rv x, float lo, float hi) { return _mm512_max_ps(rv_set(lo), _mm512_min_ps(rv_set(hi), x)); }
RV_INLINE rv rv_round(rv x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
/* 2^n for integral n in [-126, 127] */
RV_INLINE rv rv_pow2(rv n)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
RV_INLINE rv rv_abs(rv x) { return _mm512_abs_ps(x); }
/* |mag| with the sign of x */
RV_INLINE rv rv_signof(rv x, rv mag)
{
    const __m512i s = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u));
    return _mm512_castsi512_ps(_mm512_or_si512(s, _mm512_castps_si512(mag)));
}
RV_INLINE rv rv_lt_select(rv x, float c, rv a, rv b)    /* x < c ? a : b */
{
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, rv_set(c), _CMP_LT_OQ), b, a);
}
RV_INLINE rv rv_where_pos(rv x, rv a)                    /* x > 0 ? a : 0 (NaN x -> 0) */
{
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), a);
}

#elif defined(__AVX2__) && defined(__FMA__)
#define RV 8
typedef __m256 rv;
RV_INLINE rv rv_set(float a) { return _mm256_set1_ps(a); }
RV_INLINE rv rv_load(const float *p, int n)
{
    return n >= RV ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mxcc_tail_f32x8(n));
}
RV_INLINE void rv_store(float *p, rv v, int n)
{
    if (n >= RV)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, mxcc_tail_f32x8(n), v);
}
RV_INLINE rv rv_add(rv a, rv b) { return _mm256_add_ps(a, b); }
RV_INLINE rv rv_sub(rv a, rv b) { return _mm256_sub_ps(a, b); }
RV_INLINE rv rv_mul(rv a, rv b) { return _mm256_mul_ps(a, b); }
RV_INLINE rv rv_div(rv a, rv b) { return _mm256_div_ps(a, b); }
RV_INLINE rv rv_fma(rv a, rv b, rv c) { return _mm256_fmadd_ps(a, b, c); }
RV_INLINE rv rv_clamp(rv x, float lo, float hi) { return _mm256_max_ps(rv_set(lo), _mm256_min_ps(rv_set(hi), x)); }
RV_INLINE rv rv_round(rv x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
RV_INLINE rv rv_pow2(rv n)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
RV_INLINE rv rv_abs(rv x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
RV_INLINE rv rv_signof(rv x, rv mag) { return _mm256_or_ps(_mm256_and_ps(x, _mm256_set1_ps(-0.0f)), mag); }
RV_INLINE rv rv_lt_select(rv x, float c, rv a, rv b)
{
    return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, rv_set(c), _CMP_LT_OQ));
}
RV_INLINE rv rv_where_pos(rv x, rv a) { return _mm256_and_ps(a, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ)); }

#else
#define RV 1
typedef float rv;
RV_INLINE rv rv_set(float a) { return a; }
RV_INLINE rv rv_load(const float *p, int n) { (void)n; return *p; }
RV_INLINE void rv_store(float *p, rv v, int n) { (void)n; *p = v; }
RV_INLINE rv rv_add(rv a, rv b) { return a + b; }
RV_INLINE rv rv_sub(rv a, rv b) { return a - b; }
RV_INLINE rv rv_mul(rv a, rv b) { return a * b; }
RV_INLINE rv rv_div(rv a, rv b) { return a / b; }
RV_INLINE rv rv_fma(rv a, rv b, rv c) { return a * b + c; }
RV_INLINE rv rv_clamp(rv x, float lo, float hi)
{
    x = hi < x ? hi : x;                        /* NaN kept, as the vector forms */
    return x < lo ? lo : x;
}
RV_INLINE rv rv_round(rv x) { return nearbyintf(x); }
RV_INLINE rv rv_pow2(rv n)
{
    const int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
RV_INLINE rv rv_abs(rv x) { return fabsf(x); }
RV_INLINE rv rv_signof(rv x, rv mag) { return copysignf(mag, x); }
RV_INLINE rv rv_lt_select(rv x, float c, rv a, rv b) { return x < c ? a : b; }
RV_INLINE rv rv_where_pos(rv x, rv a) { return x > 0.0f ? a : 0.0f; }
#endif

/* relu as mshadow_op::relu, x > 0 ? x : 0 (NaN -> 0); its gradient from the output y: y > 0 ? dy : 0 */
RV_INLINE rv rv_relu(rv x) { return rv_where_pos(x, x); }

RV_INLINE rv rv_exp(rv x)
{
    x = rv_clamp(x, -87.3f, 88.3f);
    /* n: the clamped x without its NaN (a NaN x keeps r NaN, so the result is NaN) */
    const rv n = rv_round(rv_clamp(rv_mul(x, rv_set(1.44269504088896341f)), -126.0f, 127.0f));
    const rv safe = rv_lt_select(n, 200.0f, n, rv_set(0.0f));        /* NaN compares false: 2^0 */
    rv r = rv_fma(n, rv_set(-0.693359375f), x);
    r = rv_fma(n, rv_set(2.12194440e-4f), r);
    rv p = rv_set(1.9875691500e-4f);
    p = rv_fma(p, r, rv_set(1.3981999507e-3f));
    p = rv_fma(p, r, rv_set(8.3334519073e-3f));
    p = rv_fma(p, r, rv_set(4.1665795894e-2f));
    p = rv_fma(p, r, rv_set(1.6666665459e-1f));
    p = rv_fma(p, r, rv_set(5.0000001201e-1f));
    p = rv_add(rv_fma(p, rv_mul(r, r), r), rv_set(1.0f));
    return rv_mul(p, rv_pow2(safe));
}

RV_INLINE rv rv_sigmoid(rv x) { return rv_div(rv_set(1.0f), rv_add(rv_set(1.0f), rv_exp(rv_sub(rv_set(0.0f), x)))); }

RV_INLINE rv rv_tanh(rv x)
{
    const rv ax = rv_abs(x), z = rv_mul(x, x);
    rv p = rv_set(-5.70498872745e-3f);
    p = rv_fma(p, z, rv_set(2.06390887954e-2f));
    p = rv_fma(p, z, rv_set(-5.37397155531e-2f));
    p = rv_fma(p, z, rv_set(1.33314422036e-1f));
    p = rv_fma(p, z, rv_set(-3.33332819422e-1f));
    const rv small = rv_fma(rv_mul(p, z), x, x);
    const rv e = rv_exp(rv_add(ax, ax));
    const rv big = rv_signof(x, rv_sub(rv_set(1.0f), rv_div(rv_set(2.0f), rv_add(e, rv_set(1.0f)))));
    return rv_lt_select(ax, 0.625f, small, big);
}

#endif /* MXCC_RNN_VEC_H */
