/* The runtime's one SIMD vocabulary: the float vector of the ISA the compiler targets, and the few operations
 * the vectorized kernels build on (runtime_c/conv/: depthwise, direct, Winograd; runtime_c/gemm/: the small-M
 * packed kernel). Named after XNNPACK's src/xnnpack/simd/f32-*.h: mxcc_<op>_f32 on mxcc_simd_f32, whose width
 * is MXCC_SIMD_SIZE_F32 lanes. Every function is static inline and compiles to the one intrinsic it names, so
 * a kernel written with them is the kernel written with intrinsics.
 *
 *   mxcc_simd_f32, mxcc_simd_mask   the vector and a lane mask (a lane is on or off)
 *   mxcc_zero_f32 / set1 / loadu / storeu, mxcc_add / sub / mul / div / max / min / fmadd_f32 (a * b + c, one
 *   rounding where the ISA has FMA)
 *   mxcc_abs_f32, mxcc_round_f32 (to nearest even), mxcc_signof_f32(x, m) (m >= 0 with the sign of x),
 *   mxcc_exp2i_f32(n) (2^n for an integral n in [-126, 127], through the exponent bits)
 *   mxcc_cmplt_f32 / mxcc_cmpgt_f32 (a mask; false where a lane is NaN), mxcc_select_f32(m, a, b) (m ? a : b)
 *   mxcc_mask_lanes(lo, hi), mxcc_mask_tail(n), mxcc_mask_bits(bits) and the masked load / store: lanes off
 *   are neither read (they load as 0, and never fault) nor written
 *   mxcc_unpacklo/hi_f32 (32-bit), mxcc_unpacklo/hi_f32x2 (64-bit pairs): interleaves within 128-bit lanes
 *   mxcc_even_f32 / mxcc_odd_f32 (a, b): the even / odd lanes of the 2 * MXCC_SIMD_SIZE_F32 floats a, b, in
 *   order: a stride-2 row deinterleaved
 *
 * Three builds, chosen only by the compiler's target macros (one branch each below): AVX-512F (16 lanes),
 * AVX2 + FMA (8 lanes), plain C (8 lanes in a struct, for the kernels whose portable path is the vector code
 * itself: conv_direct_f32.c). MXCC_SIMD_VECTOR is 1 in the first two: kernels that keep a separate plain-C
 * twin test it. Kernels that use registers of two widths in one build (the AVX-512 build's
 * 8-lane tiles of conv1x1_f32.c, the AVX2 transposes of gemm/pack_f32_avx2.c) also get the fixed-width masks
 * mxcc_tail_f32x8 / mxcc_tail_f32x16. The activations on these registers are gemm/epilogue_simd.h.
 */
#ifndef MXCC_SIMD_H
#define MXCC_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

/* ---- fixed widths: wherever the ISA is there, whatever the build's vector ------------------------------- */

#if defined(__AVX2__)
/* 8-lane mask for the AVX2 masked moves (vmaskmovps): lanes l < n on, for any n (n <= 0: none, n >= 8: all) */
static inline __m256i mxcc_tail_f32x8(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#endif

#if defined(__AVX512F__)
/* 16-lane k-register mask: lanes l < n on, for any n (n <= 0: none, n >= 16: all) */
static inline __mmask16 mxcc_tail_f32x16(int n)
{
    return n <= 0 ? (__mmask16)0 : n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
}
#endif

/* ---- the build's vector ----------------------------------------------------------------------------------- */

#if defined(__AVX512F__)
/* AVX-512F: one zmm register of 16 floats; masks are k registers, and the masked loads and stores cost no
 * more than plain ones (lanes off are suppressed, so they never fault). */
#define MXCC_SIMD_VECTOR 1
#define MXCC_SIMD_SIZE_F32 16
typedef __m512 mxcc_simd_f32;
typedef __mmask16 mxcc_simd_mask;

static inline mxcc_simd_f32 mxcc_zero_f32(void) { return _mm512_setzero_ps(); }
static inline mxcc_simd_f32 mxcc_set1_f32(float a) { return _mm512_set1_ps(a); }
static inline mxcc_simd_f32 mxcc_loadu_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline void mxcc_storeu_f32(float *p, mxcc_simd_f32 v) { _mm512_storeu_ps(p, v); }
static inline mxcc_simd_f32 mxcc_add_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm512_add_ps(a, b); }
static inline mxcc_simd_f32 mxcc_sub_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm512_sub_ps(a, b); }
static inline mxcc_simd_f32 mxcc_mul_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm512_mul_ps(a, b); }
/* max/min return b when a lane of either is NaN or both are zeros (x86 semantics, not fmaxf's) */
static inline mxcc_simd_f32 mxcc_max_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm512_max_ps(a, b); }
static inline mxcc_simd_f32 mxcc_min_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm512_min_ps(a, b); }
static inline mxcc_simd_f32 mxcc_fmadd_f32(mxcc_simd_f32 a, mxcc_simd_f32 b, mxcc_simd_f32 c)
{
    return _mm512_fmadd_ps(a, b, c);
}
static inline mxcc_simd_f32 mxcc_div_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm512_div_ps(a, b); }
static inline mxcc_simd_f32 mxcc_abs_f32(mxcc_simd_f32 a) { return _mm512_abs_ps(a); }
static inline mxcc_simd_f32 mxcc_round_f32(mxcc_simd_f32 a)
{
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline mxcc_simd_f32 mxcc_signof_f32(mxcc_simd_f32 x, mxcc_simd_f32 m)
{
    const __m512i s = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u));
    return _mm512_castsi512_ps(_mm512_or_si512(s, _mm512_castps_si512(m)));
}
static inline mxcc_simd_f32 mxcc_exp2i_f32(mxcc_simd_f32 n)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
static inline mxcc_simd_mask mxcc_cmplt_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ);
}
static inline mxcc_simd_mask mxcc_cmpgt_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ);
}
static inline mxcc_simd_f32 mxcc_select_f32(mxcc_simd_mask m, mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm512_mask_blend_ps(m, b, a);
}
/* lanes l with lo <= l < hi on (any lo, hi) */
static inline mxcc_simd_mask mxcc_mask_lanes(int lo, int hi)
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > 16 ? 16 : hi;
    return hi <= lo ? 0 : (mxcc_simd_mask)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
static inline mxcc_simd_mask mxcc_mask_tail(int n) { return mxcc_tail_f32x16(n); }   /* lanes l < n */
static inline mxcc_simd_mask mxcc_mask_bits(unsigned bits) { return (mxcc_simd_mask)bits; }   /* lane l: bit l */
static inline mxcc_simd_f32 mxcc_load_mask_f32(const float *p, mxcc_simd_mask m) { return _mm512_maskz_loadu_ps(m, p); }
static inline void mxcc_store_mask_f32(float *p, mxcc_simd_f32 v, mxcc_simd_mask m) { _mm512_mask_storeu_ps(p, m, v); }
static inline mxcc_simd_f32 mxcc_unpacklo_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm512_unpacklo_ps(a, b); }
static inline mxcc_simd_f32 mxcc_unpackhi_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm512_unpackhi_ps(a, b); }
static inline mxcc_simd_f32 mxcc_unpacklo_f32x2(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
static inline mxcc_simd_f32 mxcc_unpackhi_f32x2(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
static inline mxcc_simd_f32 mxcc_even_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)   /* one vpermt2ps */
{
    return _mm512_permutex2var_ps(a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);
}
static inline mxcc_simd_f32 mxcc_odd_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm512_permutex2var_ps(a, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), b);
}

#elif defined(__AVX2__) && defined(__FMA__)
/* AVX2 + FMA: one ymm register of 8 floats; a mask is a vector whose lanes are all ones (on) or zero (off),
 * for vmaskmovps, which never faults on the lanes off. */
#define MXCC_SIMD_VECTOR 1
#define MXCC_SIMD_SIZE_F32 8
typedef __m256 mxcc_simd_f32;
typedef __m256i mxcc_simd_mask;

static inline mxcc_simd_f32 mxcc_zero_f32(void) { return _mm256_setzero_ps(); }
static inline mxcc_simd_f32 mxcc_set1_f32(float a) { return _mm256_set1_ps(a); }
static inline mxcc_simd_f32 mxcc_loadu_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline void mxcc_storeu_f32(float *p, mxcc_simd_f32 v) { _mm256_storeu_ps(p, v); }
static inline mxcc_simd_f32 mxcc_add_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm256_add_ps(a, b); }
static inline mxcc_simd_f32 mxcc_sub_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm256_sub_ps(a, b); }
static inline mxcc_simd_f32 mxcc_mul_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm256_mul_ps(a, b); }
static inline mxcc_simd_f32 mxcc_max_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm256_max_ps(a, b); }
static inline mxcc_simd_f32 mxcc_min_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm256_min_ps(a, b); }
static inline mxcc_simd_f32 mxcc_fmadd_f32(mxcc_simd_f32 a, mxcc_simd_f32 b, mxcc_simd_f32 c)
{
    return _mm256_fmadd_ps(a, b, c);
}
static inline mxcc_simd_f32 mxcc_div_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm256_div_ps(a, b); }
static inline mxcc_simd_f32 mxcc_abs_f32(mxcc_simd_f32 a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline mxcc_simd_f32 mxcc_round_f32(mxcc_simd_f32 a)
{
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline mxcc_simd_f32 mxcc_signof_f32(mxcc_simd_f32 x, mxcc_simd_f32 m)
{
    return _mm256_or_ps(_mm256_and_ps(x, _mm256_set1_ps(-0.0f)), m);
}
static inline mxcc_simd_f32 mxcc_exp2i_f32(mxcc_simd_f32 n)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
static inline mxcc_simd_mask mxcc_cmplt_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ));
}
static inline mxcc_simd_mask mxcc_cmpgt_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_GT_OQ));
}
static inline mxcc_simd_f32 mxcc_select_f32(mxcc_simd_mask m, mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(m));
}
static inline mxcc_simd_mask mxcc_mask_lanes(int lo, int hi)
{
    const __m256i l = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(l, _mm256_set1_epi32(lo - 1)), _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), l));
}
static inline mxcc_simd_mask mxcc_mask_tail(int n) { return mxcc_tail_f32x8(n); }
static inline mxcc_simd_mask mxcc_mask_bits(unsigned bits)
{
    const __m256i b = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), b), b);
}
static inline mxcc_simd_f32 mxcc_load_mask_f32(const float *p, mxcc_simd_mask m) { return _mm256_maskload_ps(p, m); }
static inline void mxcc_store_mask_f32(float *p, mxcc_simd_f32 v, mxcc_simd_mask m) { _mm256_maskstore_ps(p, m, v); }
static inline mxcc_simd_f32 mxcc_unpacklo_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm256_unpacklo_ps(a, b); }
static inline mxcc_simd_f32 mxcc_unpackhi_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return _mm256_unpackhi_ps(a, b); }
static inline mxcc_simd_f32 mxcc_unpacklo_f32x2(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(a), _mm256_castps_pd(b)));
}
static inline mxcc_simd_f32 mxcc_unpackhi_f32x2(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(a), _mm256_castps_pd(b)));
}
/* per 128-bit lane (a0 a2 b0 b2 | a4 a6 b4 b6), then the 64-bit pairs in the order 0 2 1 3 */
static inline mxcc_simd_f32 mxcc_even_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    const __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
static inline mxcc_simd_f32 mxcc_odd_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    const __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}

#else
/* Plain C: 8 floats in a struct, each operation a loop over the lanes (the compiler keeps them in SSE
 * registers where it can). The same arithmetic lane by lane as the vector builds, with a separate multiply
 * and add in mxcc_fmadd_f32 (no FMA without the ISA). A mask is a bit per lane. */
#define MXCC_SIMD_VECTOR 0
#define MXCC_SIMD_SIZE_F32 8
typedef struct mxcc_simd_f32 { float f[8]; } mxcc_simd_f32;
typedef unsigned mxcc_simd_mask;

static inline mxcc_simd_f32 mxcc_zero_f32(void)
{
    mxcc_simd_f32 r;
    for (int i = 0; i < 8; i++) r.f[i] = 0.0f;
    return r;
}
static inline mxcc_simd_f32 mxcc_set1_f32(float a)
{
    mxcc_simd_f32 r;
    for (int i = 0; i < 8; i++) r.f[i] = a;
    return r;
}
static inline mxcc_simd_f32 mxcc_loadu_f32(const float *p)
{
    mxcc_simd_f32 r;
    memcpy(r.f, p, sizeof r.f);
    return r;
}
static inline void mxcc_storeu_f32(float *p, mxcc_simd_f32 v) { memcpy(p, v.f, sizeof v.f); }
static inline mxcc_simd_f32 mxcc_add_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    for (int i = 0; i < 8; i++) a.f[i] += b.f[i];
    return a;
}
static inline mxcc_simd_f32 mxcc_sub_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    for (int i = 0; i < 8; i++) a.f[i] -= b.f[i];
    return a;
}
static inline mxcc_simd_f32 mxcc_mul_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    for (int i = 0; i < 8; i++) a.f[i] *= b.f[i];
    return a;
}
static inline mxcc_simd_f32 mxcc_max_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)   /* as maxps: b unless a > b */
{
    for (int i = 0; i < 8; i++) a.f[i] = a.f[i] > b.f[i] ? a.f[i] : b.f[i];
    return a;
}
static inline mxcc_simd_f32 mxcc_min_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)   /* as minps: b unless a < b */
{
    for (int i = 0; i < 8; i++) a.f[i] = a.f[i] < b.f[i] ? a.f[i] : b.f[i];
    return a;
}
static inline mxcc_simd_f32 mxcc_fmadd_f32(mxcc_simd_f32 a, mxcc_simd_f32 b, mxcc_simd_f32 c)
{
    for (int i = 0; i < 8; i++) c.f[i] += a.f[i] * b.f[i];
    return c;
}
static inline mxcc_simd_f32 mxcc_div_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    for (int i = 0; i < 8; i++) a.f[i] /= b.f[i];
    return a;
}
static inline mxcc_simd_f32 mxcc_abs_f32(mxcc_simd_f32 a)
{
    for (int i = 0; i < 8; i++) a.f[i] = fabsf(a.f[i]);
    return a;
}
static inline mxcc_simd_f32 mxcc_round_f32(mxcc_simd_f32 a)   /* the default rounding mode: to nearest even */
{
    for (int i = 0; i < 8; i++) a.f[i] = nearbyintf(a.f[i]);
    return a;
}
static inline mxcc_simd_f32 mxcc_signof_f32(mxcc_simd_f32 x, mxcc_simd_f32 m)
{
    for (int i = 0; i < 8; i++) m.f[i] = copysignf(m.f[i], x.f[i]);
    return m;
}
static inline mxcc_simd_f32 mxcc_exp2i_f32(mxcc_simd_f32 n)
{
    for (int i = 0; i < 8; i++) {
        const int32_t bits = ((int32_t)n.f[i] + 127) * (1 << 23);
        memcpy(&n.f[i], &bits, sizeof bits);
    }
    return n;
}
static inline mxcc_simd_mask mxcc_cmplt_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    mxcc_simd_mask m = 0;
    for (int i = 0; i < 8; i++) m |= (unsigned)(a.f[i] < b.f[i]) << i;
    return m;
}
static inline mxcc_simd_mask mxcc_cmpgt_f32(mxcc_simd_f32 a, mxcc_simd_f32 b) { return mxcc_cmplt_f32(b, a); }
static inline mxcc_simd_f32 mxcc_select_f32(mxcc_simd_mask m, mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    for (int i = 0; i < 8; i++) b.f[i] = m >> i & 1u ? a.f[i] : b.f[i];
    return b;
}
static inline mxcc_simd_mask mxcc_mask_lanes(int lo, int hi)
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > 8 ? 8 : hi;
    return hi <= lo ? 0u : ((1u << hi) - 1u) & ~((1u << lo) - 1u);
}
static inline mxcc_simd_mask mxcc_mask_tail(int n) { return mxcc_mask_lanes(0, n); }
static inline mxcc_simd_mask mxcc_mask_bits(unsigned bits) { return bits & 0xFFu; }
static inline mxcc_simd_f32 mxcc_load_mask_f32(const float *p, mxcc_simd_mask m)
{
    mxcc_simd_f32 r;
    for (int i = 0; i < 8; i++) r.f[i] = m >> i & 1u ? p[i] : 0.0f;
    return r;
}
static inline void mxcc_store_mask_f32(float *p, mxcc_simd_f32 v, mxcc_simd_mask m)
{
    for (int i = 0; i < 8; i++)
        if (m >> i & 1u) p[i] = v.f[i];
}
static inline mxcc_simd_f32 mxcc_even_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    mxcc_simd_f32 r;
    for (int i = 0; i < 4; i++) r.f[i] = a.f[2 * i], r.f[4 + i] = b.f[2 * i];
    return r;
}
static inline mxcc_simd_f32 mxcc_odd_f32(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    mxcc_simd_f32 r;
    for (int i = 0; i < 4; i++) r.f[i] = a.f[2 * i + 1], r.f[4 + i] = b.f[2 * i + 1];
    return r;
}
#endif

/* The first n lanes (any n: none below 1, all from MXCC_SIMD_SIZE_F32), the rest read as 0 / left alone. */
static inline mxcc_simd_f32 mxcc_load_tail_f32(const float *p, int n) { return mxcc_load_mask_f32(p, mxcc_mask_tail(n)); }
static inline void mxcc_store_tail_f32(float *p, mxcc_simd_f32 v, int n) { mxcc_store_mask_f32(p, v, mxcc_mask_tail(n)); }

#endif /* MXCC_SIMD_H */
