/* Internals of the depthwise convolution's vector kernels (vector builds only: AVX-512F, AVX2 + FMA; the
 * plain-C build runs the portable plane of depthwise_f32.c). Contract: mxcc_conv_depthwise_f32 in mxcc_conv.h.
 *
 *   depthwise_f32.c        the driver: describes the call (dw_call), picks a plane kernel, splits the planes
 *                          over the threads; the portable plane and the reference
 *   depthwise_rows_f32.c   planes by register blocks of output rows x vectors of columns (3x3 / 5x5, strides
 *                          1 and 2), and one row and vector at a time for any other geometry
 *   depthwise_flat_f32.c   small planes (rows narrower than half a vector) as one flat range of outputs
 *   depthwise_cblock_f32.c small 3x3 planes, 16 at a time transposed: a vector holds a pixel's 16 channels
 *                          (AVX-512)
 *
 * A plane kernel computes planes [p0, p1) of the call (plane i = image i / C, channel i % C) and applies the
 * epilogue on its accumulators: y = acc * mul + add (dw_affine), + the residual, then the activation on the
 * registers (gemm/epilogue_simd.h); an activation without a register form runs over each finished plane
 * (act_after). The result never depends on which thread computes a plane.
 */
#ifndef MXCC_DEPTHWISE_INTERNAL_H
#define MXCC_DEPTHWISE_INTERNAL_H

#include "mxcc_conv.h"
#include "gemm/epilogue_simd.h"
#include "gemm/gemm_internal.h"
#include "../simd.h"

#if MXCC_SIMD_VECTOR
#define MXCC_DEPTHWISE_SIMD 1

#define VL MXCC_SIMD_SIZE_F32   /* lanes of the build's vector (simd.h) */
#define DW_INLINE static inline __attribute__((always_inline))

/* Register blocks per ISA: R rows x U vectors of accumulators next to the KW loaded vectors and the
 * broadcast taps (32 zmm / 16 ymm registers). AVX-512 runs 3x3 kernels in blocks of DW_R_TALL = 7 rows
 * where that wastes no more rows past the output than blocks of 4 (MobileNet's 112..7: multiples of 7):
 * 9 input rows feed 7 output rows instead of 6 feeding 4 (14x14 stride 1: 54 vs 42 GFLOP/s, 28x28: 57 vs
 * 50, in L2 on this machine). Stride 2 stays at 4 rows x 1 vector (1 thread, 7x2 -> 4x1: 64x112x112 118 ->
 * 104 us, 128x56x56 58 -> 51, 256x28x28 35 -> 31; 4x2 106, 52, 30; 2x1, 3x1, 5x2, 6x2 slower): there an
 * input row feeds at most 2 output rows, and 7x2 accumulators leave too few registers for the deinterleave.
 * DW_R is the largest R. */
#if defined(__AVX512F__)
#define DW_R 7
#define DW_R_TALL 7
#define DW_U 2
#else
#define DW_R 4
#define DW_R_TALL 4
#define DW_U 1
#endif
/* Rows per block of the stride-1 3x3 kernel where DW_R_TALL does not apply. AVX2 has 16 ymm registers: 4 rows
 * (4 accumulators + 3 loaded vectors + 9 broadcast taps) spilled; 3 rows, 1 thread, AVX2 build: 32x112x112
 * 212 -> 178 us, 128x56x56 230 -> 203 us, 512x14x14 103 -> 104 (2 rows: 185, 214, 109). */
#if defined(__AVX512F__)
#define DW_R_S1 4
#else
#define DW_R_S1 3
#endif

/* One channel plane and its epilogue, as the vector kernels read them: the geometry and epilogue kind are
 * the call's, the pointers and the channel's constants are set per plane (dw_plane_at). */
typedef struct dw_plane {
    const float *x;       /* (H, W) input plane */
    const float *w;       /* (KH, KW) the channel's taps */
    float *y;             /* (OH, OW) output plane */
    const float *res;     /* (OH, OW) residual plane, or NULL */
    int H, W, OH, OW, ph, pw;
    int has_mul, has_add; /* y = acc * mul + add: scale, shift + bias */
    float mul, add;
    int act;              /* applied on the registers: NONE, RELU, LEAKY, CLIP; others after the plane */
    float alpha, lo, hi;
} dw_plane;

/* What the planes of one call share. */
typedef struct dw_call {
    const mxcc_conv_geom *g;
    const float *x, *w;       /* (N, C, H, W), (C, KH, KW) */
    float *y;                 /* (N, C, OH, OW) */
    const mxcc_epilogue *ep;  /* NULL: none */
    int act_after;            /* an activation without a register form: mxcc_act_apply_f32 on each plane */
    dw_plane base;            /* the geometry and the epilogue kind, no plane yet */
    const mxcc_simd_mask *flat_mask;   /* dw_planes_flat: [vector * taps + tap] */
    const long *flat_off;     /* dw_planes_flat: [tap] */
    int flat_s2;              /* dw_planes_flat: stride 2, the taps read the input's phases */
    int flat_vecs;            /* dw_planes_flat: vectors per plane, a multiple of DW_FLAT_GROUP */
} dw_call;

/* p's pointers and channel constants for plane i = (n, c) of the call. */
DW_INLINE void dw_plane_at(dw_plane *p, const dw_call *a, long i)
{
    const mxcc_conv_geom *g = a->g;
    const int c = (int)(i % g->channels);
    p->x = a->x + i * g->in[1] * g->in[2];
    p->w = a->w + (long)c * g->k[1] * g->k[2];
    p->y = a->y + i * mxcc_conv_y_plane(g);
    const mxcc_epilogue *ep = a->ep;
    if (ep) {
        p->mul = ep->scale ? ep->scale[c] : 1.0f;
        p->add = (ep->shift ? ep->shift[c] : 0.0f) + (ep->bias ? ep->bias[c] : 0.0f);
        p->res = ep->residual ? ep->residual + (long)c * ep->ld_residual : NULL;
    }
}

/* The epilogue on n accumulators, each test once per block rather than per vector: y = acc * mul + add
 * (dw_affine), + residual (the caller's), then the activation (mxcc_act_n_f32). */
DW_INLINE void dw_affine(const dw_plane *p, mxcc_simd_f32 *acc, const int n)
{
    if (p->has_mul) {
        const mxcc_simd_f32 mul = mxcc_set1_f32(p->mul), add = mxcc_set1_f32(p->add);
#pragma GCC unroll 16
        for (int i = 0; i < n; i++) acc[i] = mxcc_fmadd_f32(acc[i], mul, add);
    } else if (p->has_add) {
        const mxcc_simd_f32 add = mxcc_set1_f32(p->add);
#pragma GCC unroll 16
        for (int i = 0; i < n; i++) acc[i] = mxcc_add_f32(acc[i], add);
    }
}

/* The activation on n accumulators (its register form; none when the call has act_after). */
DW_INLINE void dw_act(const dw_plane *p, mxcc_simd_f32 *acc, const int n)
{
    mxcc_act_n_f32((mxcc_act)p->act, p->alpha, p->lo, p->hi, acc, n);
}

/* An activation without a register form, over a finished plane y (n floats). */
DW_INLINE void dw_act_after(const dw_call *a, float *y, long n)
{
    if (a->act_after)
        mxcc_act_apply_f32(a->ep->act, a->ep->alpha, a->ep->lo, a->ep->hi, y, n);
}

/* ---- the plane kernels: planes [p0, p1) of a call ------------------------------------------------------- */
typedef void dw_planes_fn(const dw_call *a, long p0, long p1);

/* depthwise_rows_f32.c: the register-blocked kernel for g (1-D/2-D, column stride 1 or 2) */
dw_planes_fn *mxcc_depthwise_rows_kernel(const mxcc_conv_geom *g);

/* depthwise_flat_f32.c: the flat kernel when g's planes are small enough (dw_flat_fits), else NULL. It fills
 * a's flat_* fields; mask and off (DW_FLAT_VECS * DW_FLAT_TAPS, DW_FLAT_TAPS) must outlive the call. */
#define DW_FLAT_VECS 8    /* vectors per flat plane, at most */
#define DW_FLAT_TAPS 25   /* taps (KH * KW), at most */
dw_planes_fn *mxcc_depthwise_flat_kernel(const mxcc_conv_geom *g, dw_call *a, mxcc_simd_mask *mask, long *off);
int mxcc_depthwise_flat_fits(const mxcc_conv_geom *g);   /* whether the above returns a kernel (no tables made) */

/* depthwise_cblock_f32.c (AVX-512): 16 planes at a time on their side, for small 3x3 planes without a residual
 * (at least 16 planes; a part's planes best start at a multiple of DW_CBLOCK from the first), else NULL */
#define DW_CBLOCK 16
#if defined(__AVX512F__)
dw_planes_fn *mxcc_depthwise_cblock_kernel(const mxcc_conv_geom *g, const mxcc_epilogue *ep, long planes);
#endif

#endif /* vector builds */
#endif /* MXCC_DEPTHWISE_INTERNAL_H */
