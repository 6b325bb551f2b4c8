/* Depthwise convolution, register-blocked rows (vector builds; see depthwise_internal.h): one plane at a time,
 * blocks of R output rows x U vectors of VL output columns in registers, for 3x3 and 5x5 kernels with strides
 * 1 or 2 (R, U: the register plan per ISA, with the measurements, in depthwise_internal.h), and one output
 * row and one vector at a time for any other geometry with column stride 1 or 2 (dw_planes_any).
 *
 * Register blocking in H: each input row is loaded once per block and feeds every output row whose window
 * covers it. Blocks whose loads stay inside the input row run unmasked; the edges and narrow rows use lane
 * masks, computed once per block. The epilogue runs on the accumulators before the store.
 */
#include "depthwise_internal.h"

#ifdef MXCC_DEPTHWISE_SIMD

/* DW_S2A: a stride-2 3x3 row (AVX-512) from three loads at the block's column b = c0 + 1 (b - 16, b, b + 16)
 * and three lane permutes (tap 1 = even lanes of the last two, tap 2 = odd lanes, tap 0 = tap 2 moved up one
 * lane with the column before b), in natural lane order, instead of two pairs of loads one float apart (all
 * split across cache lines) and in-lane shuffles put back in order at the end. 1 thread, in cache:
 * 64x112x112 104 -> 93 us, 128x56x56 51 -> 45-49, 256x28x28 32 -> 29-30; in MobileNet 1.0 (1 thread) conv3
 * 113 -> 98 us, conv7 55 -> 49, conv11 34 -> 32. */
#ifndef DW_S2A
#if defined(__AVX512F__)
#define DW_S2A 1
#else
#define DW_S2A 0
#endif
#endif

/* dw_even_pi / dw_odd_pi: the even and odd lanes of 2*VL consecutive floats (mxcc_even_f32 / mxcc_odd_f32)
 * without crossing 128-bit lanes (vshufps), the outputs in an order "pi" that dw_from_pi puts back, once per
 * accumulator (one vpermps instead of three vpermt2ps per input row: 64x112x112 s2 124.9 -> 118.2 us,
 * 1 thread). AVX-512 pi: lane 4k + i holds output i < 2 ? 2k + i : 8 + 2k + i - 2; AVX2 pi: outputs
 * 0 1 4 5 | 2 3 6 7, and dw_from_pi swaps the middle 64-bit pairs. */
#if defined(__AVX512F__)
static inline mxcc_simd_f32 dw_even_pi(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
}
static inline mxcc_simd_f32 dw_odd_pi(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
}
static inline mxcc_simd_f32 dw_from_pi(mxcc_simd_f32 a)
{
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15), a);
}
#else
static inline mxcc_simd_f32 dw_even_pi(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
}
static inline mxcc_simd_f32 dw_odd_pi(mxcc_simd_f32 a, mxcc_simd_f32 b)
{
    return _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
}
static inline mxcc_simd_f32 dw_from_pi(mxcc_simd_f32 a)
{
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(a), _MM_SHUFFLE(3, 1, 2, 0)));
}
#endif

/* A block's accumulators (R rows x U vectors at (oh0, ow0)) through the epilogue into y: rows past OH are
 * dropped, lanes past OW too (masked). */
DW_INLINE void dw_store(const dw_plane *p, mxcc_simd_f32 acc[DW_R * DW_U], int oh0, int ow0, const int R, const int U,
                        const int masked)
{
    const int nr = p->OH - oh0 < R ? p->OH - oh0 : R;   /* rows of the block inside the output */
    mxcc_simd_mask sm[DW_U];
#pragma GCC unroll 16
    for (int u = 0; u < U; u++)
        sm[u] = mxcc_mask_lanes(0, masked ? p->OW - (ow0 + u * VL) : VL);
    dw_affine(p, acc, R * U);
    if (p->res) {
#pragma GCC unroll 16
        for (int r = 0; r < R; r++)
#pragma GCC unroll 16
            for (int u = 0; u < U; u++) {
                if (r >= nr)   /* not in the loop bound: a constant trip count unrolls, acc stays in registers */
                    break;
                const float *res = p->res + (long)(oh0 + r) * p->OW + ow0 + u * VL;
                acc[r * U + u] = mxcc_add_f32(acc[r * U + u],
                                              masked ? mxcc_load_mask_f32(res, sm[u]) : mxcc_loadu_f32(res));
            }
    }
    dw_act(p, acc, R * U);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        if (r >= nr)
            break;
#pragma GCC unroll 16
        for (int u = 0; u < U; u++) {
            float *y = p->y + (long)(oh0 + r) * p->OW + ow0 + u * VL;
            /* AVX2: a masked block's whole vectors stored plainly, vmaskmovps stores are slow on AMD (1 thread,
             * AVX2 build: 512x14x14 105 -> 81 us, 256x28x28 143 -> 123, 32x112x112 178 -> 164, 256x28x28
             * stride 2 65 -> 58); AVX-512's masked stores cost nothing more (the test cost 2% at 512x14x14) */
#if defined(__AVX512F__)
            if (masked)
#else
            if (masked && ow0 + (u + 1) * VL > p->OW)
#endif
                mxcc_store_mask_f32(y, acc[r * U + u], sm[u]);
            else
                mxcc_storeu_f32(y, acc[r * U + u]);
        }
    }
}

/* A block of R output rows (oh0..) x U vectors (columns ow0.. in steps of VL) of a KH x KW, stride S,
 * dilation 1 depthwise convolution, all of them compile-time constants of the caller (the loops unroll, the
 * accumulators live in registers). Register blocking in H: each input row is loaded once (KW shifted
 * vectors, or for stride 2 the even and odd lanes of KW/2 + 1 pairs of vectors) and feeds every output
 * row of the block whose window covers it (up to KH of them for stride 1). Input rows outside the image are
 * skipped (the zero padding adds nothing); output rows past OH are computed and dropped. masked: some load
 * crosses a row end or the block crosses OW (lane masks, computed once per block); else plain loads. */
DW_INLINE void dw_block(const dw_plane *p, const mxcc_simd_f32 *wv, int oh0, int ow0, const int KH, const int KW,
                        const int S, const int R, const int U, const int masked)
{
    /* fixed sizes (not [R][U]: a variable-length array stays in memory); R <= DW_R, U <= DW_U, KW <= 5 */
    mxcc_simd_f32 acc[DW_R * DW_U];   /* acc[r * U + u] */
    mxcc_simd_mask lm[DW_U][6];   /* load masks: stride 1 per tap; stride 2 per half of each pair (S2A: 3 vectors) */
    const int W = p->W, c00 = ow0 * S - p->pw;   /* input column of block lane 0, tap 0 */
    const int s2a = DW_S2A && S == 2 && KW == 3;
#pragma GCC unroll 8
    for (int u = 0; u < U; u++) {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            acc[r * U + u] = mxcc_zero_f32();
        if (masked && s2a) {   /* columns [b - 16, b), [b, b + 16), [b + 16, b + 32), b = c0 + 1 */
            const int b = c00 + u * VL * S + 1;
#pragma GCC unroll 3
            for (int q = 0; q < 3; q++) lm[u][q] = mxcc_mask_lanes(-(b + (q - 1) * VL), W - (b + (q - 1) * VL));
        } else if (masked) {
            const int c0 = c00 + u * VL * S;
#pragma GCC unroll 8
            for (int kw = 0; kw < KW; kw++) {
                if (S == 1)
                    lm[u][kw] = mxcc_mask_lanes(-(c0 + kw), W - (c0 + kw));
                else if (kw % 2 == 0) {
                    lm[u][kw] = mxcc_mask_lanes(-(c0 + kw), W - (c0 + kw));
                    lm[u][kw + 1] = mxcc_mask_lanes(-(c0 + kw + VL), W - (c0 + kw + VL));
                }
            }
        }
    }
    const int ih0 = oh0 * S - p->ph;
#pragma GCC unroll 32
    for (int j = 0; j < (R - 1) * S + KH; j++) {   /* the input rows of the block */
        if (ih0 + j < 0 || ih0 + j >= p->H)
            continue;
        const float *xr = p->x + (long)(ih0 + j) * W + c00;   /* lane 0, tap 0: may be before the row */
#pragma GCC unroll 8
        for (int u = 0; u < U; u++) {
            mxcc_simd_f32 in[5];   /* the row's values under tap kw for the VL outputs (stride 2: in pi order) */
            const float *xu = xr + u * VL * S;
#if DW_S2A
            if (s2a) {   /* in natural order: tap 1 the even lanes of (b, b+16), tap 2 the odd, tap 0 the odd
                          * shifted up one lane with the column before b */
                const float *xb = xu + 1;
                const mxcc_simd_f32 a0 = masked ? mxcc_load_mask_f32(xb - VL, lm[u][0]) : mxcc_loadu_f32(xb - VL);
                const mxcc_simd_f32 a1 = masked ? mxcc_load_mask_f32(xb, lm[u][1]) : mxcc_loadu_f32(xb);
                const mxcc_simd_f32 a2 = masked ? mxcc_load_mask_f32(xb + VL, lm[u][2]) : mxcc_loadu_f32(xb + VL);
                in[1] = mxcc_even_f32(a1, a2);
                in[2] = mxcc_odd_f32(a1, a2);
                in[0] = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(in[2]), _mm512_castps_si512(a0), 15));
            } else
#endif
#pragma GCC unroll 8
            for (int kw = 0; kw < KW; kw++) {
                if (S == 1)
                    in[kw] = masked ? mxcc_load_mask_f32(xu + kw, lm[u][kw]) : mxcc_loadu_f32(xu + kw);
                else if (kw % 2 == 0) {
                    const mxcc_simd_f32 a = masked ? mxcc_load_mask_f32(xu + kw, lm[u][kw]) : mxcc_loadu_f32(xu + kw);
                    const mxcc_simd_f32 b = masked ? mxcc_load_mask_f32(xu + kw + VL, lm[u][kw + 1])
                                                   : mxcc_loadu_f32(xu + kw + VL);
                    in[kw] = dw_even_pi(a, b);
                    if (kw + 1 < KW)
                        in[kw + 1] = dw_odd_pi(a, b);
                }
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const int kh = j - r * S;   /* output row oh0 + r reads this row with tap row kh */
                if (kh < 0 || kh >= KH)
                    continue;
#pragma GCC unroll 8
                for (int kw = 0; kw < KW; kw++)
                    acc[r * U + u] = mxcc_fmadd_f32(wv[kh * KW + kw], in[kw], acc[r * U + u]);
            }
        }
    }
    if (S == 2 && !s2a) {
#pragma GCC unroll 16
        for (int i = 0; i < R * U; i++)
            acc[i] = dw_from_pi(acc[i]);
    }
    dw_store(p, acc, oh0, ow0, R, U, masked);
}

/* Planes p0 .. p1-1 by dw_block: per block of R rows, the columns in vectors; blocks of U vectors without
 * masks where every load of the block stays inside the input row and the block inside the output row,
 * single masked vectors elsewhere (the edges, and rows narrower than a vector). */
DW_INLINE void dw_planes_blocked(const dw_call *a, long p0, long p1, const int KH, const int KW, const int S,
                                 const int R, const int U)
{
    dw_plane pl = a->base, *p = &pl;   /* a local copy: the stores to y cannot change it */
    /* columns a vector starting at ow reads: [ow*S - pw - before, ow*S - pw + span) */
    const int s2a = DW_S2A && S == 2 && KW == 3, before = s2a ? VL - 1 : 0;
    const int span = S == 1 ? KW - 1 + VL : s2a ? 2 * VL + 1 : (KW - 1) / 2 * 2 + 2 * VL;
    const int ow_lo = (p->pw + before + S - 1) / S;
    int ow_hi = p->W + p->pw - span >= 0 ? (p->W + p->pw - span) / S : -1;   /* last unmasked vector start */
    if (ow_hi > p->OW - VL)
        ow_hi = p->OW - VL;
    for (long i = p0; i < p1; i++) {
        dw_plane_at(p, a, i);
        mxcc_simd_f32 wv[25];   /* the taps, broadcast once per plane */
#pragma GCC unroll 25
        for (int t = 0; t < KH * KW; t++)
            wv[t] = mxcc_set1_f32(p->w[t]);
        for (int oh0 = 0; oh0 < p->OH; oh0 += R) {
            int ow = 0;
            while (ow < p->OW) {
                if (ow >= ow_lo && ow + (U - 1) * VL <= ow_hi) {
                    dw_block(p, wv, oh0, ow, KH, KW, S, R, U, 0);
                    ow += U * VL;
                } else if (ow >= ow_lo && ow <= ow_hi) {
                    dw_block(p, wv, oh0, ow, KH, KW, S, R, 1, 0);
                    ow += VL;
                } else {
                    dw_block(p, wv, oh0, ow, KH, KW, S, R, 1, 1);
                    ow += VL;
                }
            }
        }
        dw_act_after(a, p->y, (long)p->OH * p->OW);
    }
}

static void dw_planes_3x3s1(const dw_call *a, long p0, long p1) { dw_planes_blocked(a, p0, p1, 3, 3, 1, DW_R_S1, DW_U); }
static void dw_planes_3x3s2(const dw_call *a, long p0, long p1) { dw_planes_blocked(a, p0, p1, 3, 3, 2, 4, 1); }
static void dw_planes_5x5s1(const dw_call *a, long p0, long p1) { dw_planes_blocked(a, p0, p1, 5, 5, 1, 4, DW_U); }
static void dw_planes_5x5s2(const dw_call *a, long p0, long p1) { dw_planes_blocked(a, p0, p1, 5, 5, 2, 4, DW_U); }
#if DW_R_TALL != 4
static void dw_planes_3x3s1_tall(const dw_call *a, long p0, long p1)
{
    dw_planes_blocked(a, p0, p1, 3, 3, 1, DW_R_TALL, DW_U);
}
#else
#define dw_planes_3x3s1_tall dw_planes_3x3s1
#endif

/* Any other geometry with column stride 1 or 2 (other kernel sizes, dilation, unequal strides): one output
 * row and one masked vector at a time, the taps in loops. */
static void dw_planes_any(const dw_call *a, long p0, long p1)
{
    const mxcc_conv_geom *g = a->g;
    const int KH = g->k[1], KW = g->k[2], sh = g->stride[1], sw = g->stride[2];
    const int dh = g->dilate[1], dw = g->dilate[2];
    dw_plane pl = a->base, *p = &pl;
    const int W = p->W;
    for (long i = p0; i < p1; i++) {
        dw_plane_at(p, a, i);
        for (int oh = 0; oh < p->OH; oh++) {
            const int ih0 = oh * sh - p->ph;
            for (int ow = 0; ow < p->OW; ow += VL) {
                mxcc_simd_f32 acc = mxcc_zero_f32();
                for (int kh = 0; kh < KH; kh++) {
                    const int ih = ih0 + kh * dh;
                    if (ih < 0 || ih >= p->H)
                        continue;
                    const float *xr = p->x + (long)ih * W;   /* (W,) */
                    for (int kw = 0; kw < KW; kw++) {
                        const int c = ow * sw - p->pw + kw * dw;   /* input column of lane 0 */
                        mxcc_simd_f32 in = mxcc_load_mask_f32(xr + c, mxcc_mask_lanes(-c, W - c));
                        if (sw == 2)
                            in = mxcc_even_f32(in, mxcc_load_mask_f32(xr + c + VL, mxcc_mask_lanes(-c - VL, W - c - VL)));
                        acc = mxcc_fmadd_f32(mxcc_set1_f32(p->w[kh * KW + kw]), in, acc);
                    }
                }
                const long at = (long)oh * p->OW + ow;
                const mxcc_simd_mask sm = mxcc_mask_lanes(0, p->OW - ow);
                dw_affine(p, &acc, 1);
                if (p->res)
                    acc = mxcc_add_f32(acc, mxcc_load_mask_f32(p->res + at, sm));
                dw_act(p, &acc, 1);
                mxcc_store_mask_f32(p->y + at, acc, sm);
            }
        }
        dw_act_after(a, p->y, (long)p->OH * p->OW);
    }
}

/* The kernel for g: the specialized ones for square 3x3 / 5x5 kernels with equal strides 1 or 2 and no
 * dilation, dw_planes_any otherwise. */
dw_planes_fn *mxcc_depthwise_rows_kernel(const mxcc_conv_geom *g)
{
    const int OH = g->out[1], KH = g->k[1], KW = g->k[2], s = g->stride[2];
    const int sq = KH == KW && g->stride[1] == g->stride[2] && g->dilate[1] == 1 && g->dilate[2] == 1;
    /* tall blocks unless they waste more rows past the output than blocks of 4 */
    const int tall = (OH + DW_R_TALL - 1) / DW_R_TALL * DW_R_TALL - OH <= (OH + 3) / 4 * 4 - OH;
    return !sq ? dw_planes_any
           : KH == 3 ? (s == 1 ? (tall ? dw_planes_3x3s1_tall : dw_planes_3x3s1) : dw_planes_3x3s2)
           : KH == 5 ? (s == 1 ? dw_planes_5x5s1 : dw_planes_5x5s2) : dw_planes_any;
}

#endif /* MXCC_DEPTHWISE_SIMD */
