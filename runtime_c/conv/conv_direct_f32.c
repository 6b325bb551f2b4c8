/* Direct convolution for few input channels (contract: mxcc_conv.h): the first layers of CNNs (C = 1..4)
 * and other layers up to ~20 channels, where K = C*KH*KW is too small for the GEMM paths to pay for gathering
 * taps into panels and storing the tile transposed (mxcc/ops/convolution.py: DIRECT_MAX_C, with the numbers).
 *
 *   y[n, o, oh, ow] = sum over (c, kh, kw) of w[o, c, kh, kw] * x[n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw]
 *
 * Vectorized over the output pixels of a row (V = 16 lanes AVX-512, 8 AVX2 / plain C) with a register tile of
 * OB output channels x NV pixel vectors; per tap, NV input vectors are loaded and each of the OB weights is
 * broadcast against them (the weight packed at bind time as (K, O rounded up to 8): one tap's channels side
 * by side, zeros past O).
 *
 * No gathers, no bounds tests in the inner loop: per (image, block of R output rows) the input rows the block
 * reads are staged once into a per-thread buffer, zero-padded and split into stride phases (phase q of a row
 * holds padded columns q, q + sw, q + 2sw, ...): tap (kh, kw) of output pixel ow then reads phase
 * (kw*dw) % sw at index ow + (kw*dw) / sw, a unit-stride vector load whatever the stride. Each phase row is
 * long enough for whole vectors past OW (the extra lanes are computed and never stored). With row stride 1
 * and rows that would leave lanes idle (LeNet's OW = 24 on 16 lanes), the "flat" mode stages KW column-
 * shifted copies of each row instead, so that vectors run across the block's rows (see make_plan).
 *
 * Where the time goes (MobileNet conv0, 1 thread, perf): ~70% in the tap loop, which runs at the FMA peak
 * (24 zmm FMAs per 3 + 8 loads); the rest is staging (~12%: the image read once) and the stores.
 *
 * The epilogue (x*scale + shift, + bias, + residual, act) runs on the accumulators before a masked store to y
 * in NCHW; the activations that are not a few vector instructions run on the stored pieces afterwards.
 *
 * Threads: work items (image, row block, channel block) in that order, a contiguous share per thread (the
 * staged rows are reused by the consecutive channel blocks of one row block). Every output element is one
 * sum in tap order (c, kh, kw) whatever the split, so the result does not depend on the thread count.
 */
#include <string.h>

#include "mxcc_conv.h"
#include "conv_internal.h"
#include "gemm/gemm_internal.h"
#include "gemm/epilogue_simd.h"
#include "../parallel.h"
#include "../simd.h"

#define OPAD MXCC_CONV_DIRECT_OB   /* the packed weight's channel rounding; every OB below divides it */

/* Staged input bytes per row block (the channel blocks and register tiles walk over them from L1/L2). Larger
 * blocks stage fewer overlapping rows; 1 thread, C driver, 12 / 24 / 48 / 96 KiB: MobileNet conv0 277 / 270 /
 * 264 / 262-268 us, ResNet-18 stem 2241 / 2241 / 2197 / 2190 us, LeNet conv1 b64 547 / 514 / 509 / 503 us.
 * A software prefetch of the next block's rows measured no better (within the noise of a busy machine). */
#ifndef CONV_DIRECT_STAGE_BYTES
#define CONV_DIRECT_STAGE_BYTES (48 * 1024)
#endif

/* ---- the register tile per ISA (the vector operations: simd.h) ------------------------------------------- */
#define V MXCC_SIMD_SIZE_F32   /* lanes: 16 AVX-512, 8 AVX2 and plain C */
#if defined(__AVX512F__)
/* 8 x 3 tile: 24 accumulators + 3 input vectors of 32 zmm registers; the broadcasts are FMA memory operands */
#define OB 8
#define NV 3
#elif defined(__AVX2__) && defined(__FMA__)
/* 4 x 3 tile: 12 accumulators + 3 input vectors + 1 broadcast = the 16 ymm registers */
#define OB 4
#define NV 3
#else
/* plain C: simd.h's 8 lanes in a struct (the compiler keeps them in SSE registers where it can) */
#define OB 4
#define NV 2
#endif

/* ---- the layer's plan: staging geometry and work split, a function of the geometry only ------------------- */

typedef struct plan {
    int C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw;
    int flat;      /* 1: pixel vectors run over the block's rows as one flat range (see make_plan) */
    int nvr;       /* row mode: pixel vectors per output row, ceil(OW / V) */
    int L;         /* floats per staged phase row: nvr*V + (KW-1)*dw / sw (whole vectors past OW), rounded up
                    * to 16 (whole vectors in the phase split) */
    int R;         /* output rows per block */
    int rows_in;   /* staged input rows per block: (R-1)*sh + (KH-1)*dh + 1 */
    int nrb, ncb;  /* row blocks per image, channel blocks of OB */
    long K;        /* taps C*KH*KW */
    long stage;    /* floats of the staging buffer: row mode C * rows_in * sw * L, flat C * KW * rows_in * OW + V */
} plan;

static plan make_plan(const mxcc_conv_geom *g, int O)
{
    plan p;
    p.C = g->channels; p.H = g->in[1]; p.W = g->in[2]; p.OH = g->out[1]; p.OW = g->out[2];
    p.KH = g->k[1]; p.KW = g->k[2]; p.sh = g->stride[1]; p.sw = g->stride[2];
    p.ph = g->pad[1]; p.pw = g->pad[2]; p.dh = g->dilate[1]; p.dw = g->dilate[2];
    p.nvr = (p.OW + V - 1) / V;
    p.L = (int)mxcc_round16(p.nvr * V + (p.KW - 1) * p.dw / p.sw);
    p.K = (long)p.C * p.KH * p.KW;
    /* Row mode computes nvr*V lanes per row for OW pixels: LeNet's OW = 24 uses 24 of 32 lanes. With row
     * stride 1, staging KW column-shifted copies of each row with row pitch OW makes the block's pixels one
     * flat range that vectors cross rows in (no lane idle but the last vector's), for KW times the staging:
     * LeNet conv1 b64 (1 thread, C driver, alternating): row mode 597-607 us, flat 509-519 us. */
    p.flat = p.sh == 1 && p.OW < 0.9 * p.nvr * V;
    const long row_bytes = (long)sizeof(float) * p.C * (p.flat ? (long)p.KW * p.OW : (long)p.sw * p.L);
    const long fit = CONV_DIRECT_STAGE_BYTES / row_bytes - (long)(p.KH - 1) * p.dh - 1;   /* (R-1)*sh */
    p.R = fit > 0 ? (int)(fit / p.sh + 1) : 1;
    if (p.R > p.OH) p.R = p.OH;
    p.rows_in = (p.R - 1) * p.sh + (p.KH - 1) * p.dh + 1;
    p.nrb = (p.OH + p.R - 1) / p.R;
    p.ncb = (O + OB - 1) / OB;
    /* flat: the last vector of the last plane reads up to V - 1 floats past it (lanes never stored) */
    p.stage = p.flat ? (long)p.C * p.KW * p.rows_in * p.OW + V : (long)p.C * p.rows_in * p.sw * p.L;
    return p;
}

/* Per thread: the staging buffer, the tap table (K ints), a padded row (sw*L). */
static long thread_floats(const plan *p) { return mxcc_round16(p->stage) + mxcc_round16(p->K) + (long)p->sw * p->L; }

long mxcc_conv_direct_scratch_floats(const mxcc_conv_geom *g, int batch, int O, int max_threads)
{
    (void)batch;
    const plan p = make_plan(g, O);
    return (long)mxcc_scratch_threads(max_threads) * thread_floats(&p);
}

void mxcc_conv_direct_pack_f32(int K, int O, const float *w, float *wp)
{
    const int op = (O + OPAD - 1) / OPAD * OPAD;
    for (int t = 0; t < K; t++)
        for (int o = 0; o < op; o++) wp[(long)t * op + o] = o < O ? w[(long)o * K + t] : 0.0f;
}

void mxcc_conv_direct_scale_packed_f32(int K, int O, float *wp, const float *scale)
{
    const int op = (O + OPAD - 1) / OPAD * OPAD;
    for (int t = 0; t < K; t++)
        for (int o = 0; o < O; o++) wp[(long)t * op + o] *= scale[o];
}

/* ---- staging ---------------------------------------------------------------------------------------------- */

/* d (sw, L) = the stride phases of the padded row t (sw*L,): d[q*L + j] = t[j*sw + q]. L is a multiple of 16,
 * so whole vectors fill each phase exactly. */
static void deinterleave(const float *restrict t, int sw, int L, float *restrict d)
{
#if MXCC_SIMD_VECTOR
    if (sw == 2) {   /* two loads, the even and the odd lanes (simd.h) per V outputs of each phase */
        for (int j = 0; j < L; j += V) {
            const mxcc_simd_f32 a = mxcc_loadu_f32(t + 2 * j), b = mxcc_loadu_f32(t + 2 * j + V);
            mxcc_storeu_f32(d + j, mxcc_even_f32(a, b));
            mxcc_storeu_f32(d + L + j, mxcc_odd_f32(a, b));
        }
        return;
    }
#endif
    for (int q = 0; q < sw; q++)
        for (int j = 0; j < L; j++) d[(long)q * L + j] = t[(long)j * sw + q];
}

#if defined(__AVX512F__)
/* Padded columns i0 .. i0+15 of a row whose columns [lo, hi) are src[i - pw] and the rest zero: one load, or
 * an expand load at the edges (it reads only the valid elements, so no pointer leaves the row). */
static inline __m512 padded16(const float *src, int i0, int lo, int hi, int pw)
{
    const int a = lo - i0 > 0 ? lo - i0 : 0, b = hi - i0 < 16 ? hi - i0 : 16;
    if (a >= b) return _mm512_setzero_ps();
    if (a == 0 && b == 16) return _mm512_loadu_ps(src + i0 - pw);
    return _mm512_maskz_expandloadu_ps(mxcc_mask_lanes(a, b), src + i0 + a - pw);
}

/* d (2, L) = the two stride phases of the padded row straight from the image row src (W,): two loads and an
 * even/odd-lane permute per 16 outputs of each phase (the padded-row copy first cost 6% of MobileNet conv0). */
static void stage_row_s2(const float *src, int lo, int hi, int pw, int L, float *restrict d)
{
    for (int j = 0; j < L; j += 16) {
        const __m512 a = padded16(src, 2 * j, lo, hi, pw), b = padded16(src, 2 * j + 16, lo, hi, pw);
        mxcc_storeu_f32(d + j, mxcc_even_f32(a, b));
        mxcc_storeu_f32(d + L + j, mxcc_odd_f32(a, b));
    }
}
#endif

/* buf (C, rows_in, sw, L) = the input rows of output rows oh0.. of image xn (C, H, W): row r is input row
 * oh0*sh - ph + r, phase q element j is input column j*sw + q - pw; zero outside the image. tmp: (sw*L,)
 * a padded row before its split into phases (stride > 1). */
static void stage_rows(const plan *p, const float *restrict xn, int oh0, float *restrict buf, float *restrict tmp)
{
    const int n = p->sw * p->L;   /* padded columns staged per row */
    /* columns [lo, hi) of a padded row are inside the image */
    const int lo = p->pw < n ? p->pw : n, hi = p->pw + p->W < n ? p->pw + p->W : n;
    for (int c = 0; c < p->C; c++) {
        for (int r = 0; r < p->rows_in; r++) {
            const int ih = oh0 * p->sh - p->ph + r;
            float *restrict d = buf + ((long)c * p->rows_in + r) * n;   /* (sw, L) */
            if (ih < 0 || ih >= p->H) {
                memset(d, 0, (size_t)n * sizeof(float));
                continue;
            }
            const float *src = xn + ((long)c * p->H + ih) * p->W;   /* (W,) */
#if defined(__AVX512F__)
            if (p->sw == 2) {
                stage_row_s2(src, p->pw, p->pw + p->W, p->pw, p->L, d);
                continue;
            }
#endif
            float *t = p->sw == 1 ? d : tmp;
            memset(t, 0, (size_t)lo * sizeof(float));
            memcpy(t + lo, src + lo - p->pw, (size_t)(hi - lo) * sizeof(float));
            memset(t + hi, 0, (size_t)(n - hi) * sizeof(float));
            if (p->sw > 1) deinterleave(tmp, p->sw, p->L, d);
        }
    }
}

/* Flat mode (stride 1 along rows): buf (C, KW, rows_in, OW) = for each tap column kw, the input rows of
 * output rows oh0.. read at the columns tap kw reads: buf[c, kw, r, ow] = x[c, oh0 - ph + r, ow*sw - pw + kw*dw],
 * zero outside the image. */
static void stage_flat(const plan *p, const float *restrict xn, int oh0, float *restrict buf)
{
    for (int c = 0; c < p->C; c++)
        for (int kw = 0; kw < p->KW; kw++) {
            /* output columns [lo, hi) read inside the row */
            const int off = kw * p->dw - p->pw;
            int lo = off >= 0 ? 0 : (-off + p->sw - 1) / p->sw;
            int hi = p->W - 1 - off < 0 ? 0 : (p->W - 1 - off) / p->sw + 1;
            if (hi > p->OW) hi = p->OW;
            if (lo > hi) lo = hi;
            for (int r = 0; r < p->rows_in; r++) {
                const int ih = oh0 - p->ph + r;
                float *restrict d = buf + (((long)c * p->KW + kw) * p->rows_in + r) * p->OW;   /* (OW,) */
                if (ih < 0 || ih >= p->H) {
                    memset(d, 0, (size_t)p->OW * sizeof(float));
                    continue;
                }
                const float *src = xn + ((long)c * p->H + ih) * p->W + off;   /* column ow at src[ow * sw] */
                memset(d, 0, (size_t)lo * sizeof(float));
                if (p->sw == 1) memcpy(d + lo, src + lo, (size_t)(hi - lo) * sizeof(float));
                else for (int ow = lo; ow < hi; ow++) d[ow] = src[(long)ow * p->sw];
                memset(d + hi, 0, (size_t)(p->OW - hi) * sizeof(float));
            }
        }
    memset(buf + p->stage - V, 0, V * sizeof(float));   /* the slack the last vector reads */
}

/* tap[t] for t = (c, kh, kw): the offset in the staged buffer of the input of tap t for output pixel 0 of the
 * block's first row. */
static void tap_table(const plan *p, int *tap)
{
    long t = 0;
    for (int c = 0; c < p->C; c++)
        for (int kh = 0; kh < p->KH; kh++)
            for (int kw = 0; kw < p->KW; kw++, t++)
                tap[t] = p->flat ? (int)((((long)c * p->KW + kw) * p->rows_in + kh * p->dh) * p->OW)
                                 : (int)((((long)c * p->rows_in + kh * p->dh) * p->sw + kw * p->dw % p->sw) * p->L +
                                         kw * p->dw / p->sw);
}

/* ---- the register tile and its epilogue ------------------------------------------------------------------- */

/* Where a pixel vector lands: pixels at .. at + n - 1 of the channel plane (OH*OW). */
typedef struct pix { long at; int n; } pix;

/* The epilogue resolved once per call (NULL fields: not applied). y and residual point at image n, channel 0. */
typedef struct epi {
    const float *sc, *sh, *bi, *res;
    long ld_res, plane;   /* the residual's channel stride; y's (OH*OW) */
    mxcc_act act;
    float alpha, lo, hi;
} epi;

static epi resolve_epilogue(const mxcc_epilogue *ep, long plane)
{
    epi e = {0};
    e.plane = plane;
    if (!ep || mxcc_epilogue_is_noop(ep)) return e;
    e.sc = ep->scale; e.sh = ep->shift; e.bi = ep->bias; e.res = ep->residual; e.ld_res = ep->ld_residual;
    e.act = ep->act; e.alpha = ep->alpha; e.lo = ep->lo; e.hi = ep->hi;
    return e;
}

/* The epilogue on one accumulator (channel o, pixels px) and its masked store into y (C_out, OH*OW). */
static inline __attribute__((always_inline)) void store_vec(const epi *e, mxcc_simd_f32 a, pix px, int o,
                                                            const float *res, float *restrict y)
{
    if (e->sc) a = mxcc_mul_f32(a, mxcc_set1_f32(e->sc[o]));
    if (e->sh) a = mxcc_add_f32(a, mxcc_set1_f32(e->sh[o]));
    if (e->bi) a = mxcc_add_f32(a, mxcc_set1_f32(e->bi[o]));
    if (res) a = mxcc_add_f32(a, mxcc_load_tail_f32(res + o * e->ld_res + px.at, px.n));
    a = mxcc_act_f32(e->act, e->alpha, e->lo, e->hi, a);
    float *yo = y + o * e->plane + px.at;
    mxcc_store_tail_f32(yo, a, px.n);
    if (!mxcc_act_in_registers(e->act))   /* sigmoid, tanh, ...: the scalar activation on the stored piece */
        mxcc_act_apply_f32(e->act, e->alpha, e->lo, e->hi, yo, px.n);
}

/* y[o0 + j, px[v]] = epilogue(sum over taps t of w[t, j] * buf[tap[t] + vb[v] + lane]) for nn <= ob channels
 * and nv pixel vectors (ob <= OB, nv <= NV: constants after inlining, one specialized loop each; the
 * accumulators never leave the registers). w: the packed weight at channel o0. y, res: image n's. */
static inline __attribute__((always_inline)) void tile(const float *restrict buf, const int *restrict tap, long K,
                                                       const float *restrict w, int op, const long *vb, int ob,
                                                       int nv, const epi *e, const pix *px, int o0, int nn,
                                                       const float *res, float *restrict y)
{
    mxcc_simd_f32 a[OB][NV];
    /* Prefetch the tile's output lines for writing: in a network the output is cold (the arena was walked by
     * the other layers), and its read-for-ownership then overlaps the taps instead of the stores. MobileNet
     * conv0 with an output not in cache (C driver, 1 thread, best of 6 alternating): 298 -> 286 us.
     * Unrolled like every loop over a[][] (GCC places an array in registers only if all its indices are
     * constants before its late unroller runs: the AVX2 build stored 6 accumulators to the stack per tap). */
#pragma GCC unroll 8
    for (int j = 0; j < ob; j++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            a[j][v] = mxcc_zero_f32();
            if (j < nn) __builtin_prefetch(y + (o0 + j) * e->plane + px[v].at, 1, 3);
        }
    for (long t = 0; t < K; t++) {
        const float *xt = buf + tap[t];
        const float *wt = w + t * op;   /* (OB,) this tap's weights */
        mxcc_simd_f32 xv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) xv[v] = mxcc_loadu_f32(xt + vb[v]);
#pragma GCC unroll 8
        for (int j = 0; j < ob; j++)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) a[j][v] = mxcc_fmadd_f32(mxcc_set1_f32(wt[j]), xv[v], a[j][v]);
    }
    /* Full tiles with the common epilogues (BatchNorm or bias, then relu or nothing) in straight-line code:
     * one test per tile, not per vector (MobileNet conv0, C driver, 1 thread, best of 3000: 278 -> 257 us in
     * cache, 295 -> 274 us with the caches trashed). The same operations in the same order as store_vec. */
    int full = nn == ob && !res && (e->act == MXCC_ACT_NONE || e->act == MXCC_ACT_RELU) &&
               ((e->sc && e->sh && !e->bi) || (!e->sc && !e->sh && e->bi));
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) full = full && px[v].n == V;
    if (full) {
        const float *mul = e->sc ? e->sc + o0 : NULL, *add = e->sc ? e->sh + o0 : e->bi + o0;
        const int relu = e->act == MXCC_ACT_RELU;
#pragma GCC unroll 8
        for (int j = 0; j < ob; j++) {
            float *yo = y + (o0 + j) * e->plane;
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) {
                mxcc_simd_f32 t = a[j][v];
                if (mul) t = mxcc_mul_f32(t, mxcc_set1_f32(mul[j]));
                t = mxcc_add_f32(t, mxcc_set1_f32(add[j]));
                if (relu) t = mxcc_relu_f32(t);
                mxcc_storeu_f32(yo + px[v].at, t);
            }
        }
        return;
    }
    /* unrolled like the loop above, so that the accumulators are not spilled to the stack */
#pragma GCC unroll 8
    for (int j = 0; j < ob; j++)
        if (j < nn)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) store_vec(e, a[j][v], px[v], o0 + j, res, y);
}

/* tile() for nv = 1..NV vectors and ob = OB or OB/2 channels (the last block of O = 20: 8 + 8 + 4) */
static void tile_any(const float *buf, const int *tap, long K, const float *w, int op, const long *vb, int nv,
                     const epi *e, const pix *px, int o0, int nn, const float *res, float *y)
{
#define TILE(ob, v) tile(buf, tap, K, w, op, vb, ob, v, e, px, o0, nn, res, y)
    if (nn > OB / 2) {
        if (nv == NV) TILE(OB, NV);
#if NV > 2
        else if (nv == 2) TILE(OB, 2);
#endif
        else TILE(OB, 1);
    } else {
        if (nv == NV) TILE(OB / 2, NV);
#if NV > 2
        else if (nv == 2) TILE(OB / 2, 2);
#endif
        else TILE(OB / 2, 1);
    }
#undef TILE
}

/* ---- driver ----------------------------------------------------------------------------------------------- */

/* Work items [i0, i1) of (image, row block, channel block) on one thread, its scratch at s. */
static void run_items(const plan *p, int O, const float *x, const float *wp, const epi *e, float *y,
                      float *s, long i0, long i1)
{
    float *buf = s;   /* (C, rows_in, sw, L) staged rows, flat mode (C, KW, rows_in, OW) + V */
    int *tap = (int *)(s + mxcc_round16(p->stage));   /* (K,) */
    float *row = s + mxcc_round16(p->stage) + mxcc_round16(p->K);   /* (sw*L,) */
    const int op = (O + OPAD - 1) / OPAD * OPAD;
    const long X = (long)p->C * p->H * p->W;
    tap_table(p, tap);
    long staged = -1;   /* the (image, row block) in buf */
    for (long it = i0; it < i1; it++) {
        const long nr = it / p->ncb;   /* image * nrb + row block */
        const int cb = (int)(it - nr * p->ncb), n = (int)(nr / p->nrb), rb = (int)(nr - (long)n * p->nrb);
        const int oh0 = rb * p->R, rows = p->OH - oh0 < p->R ? p->OH - oh0 : p->R;
        if (nr != staged) {
            if (p->flat) stage_flat(p, x + n * X, oh0, buf);
            else stage_rows(p, x + n * X, oh0, buf, row);
            staged = nr;
        }
        const int o0 = cb * OB, nn = O - o0 < OB ? O - o0 : OB;
        const float *w = wp + o0;
        const int npix = rows * p->OW, nvec = p->flat ? (npix + V - 1) / V : rows * p->nvr;
        for (int i = 0; i < nvec; i += NV) {
            const int nv = nvec - i < NV ? nvec - i : NV;
            long vb[NV];   /* the vectors' offsets in the staged buffer (tap 0 at 0) */
            pix px[NV];
            for (int v = 0; v < nv; v++) {
                if (p->flat) {   /* block pixels f.. (row r of the block: input row r + kh*dh) */
                    const int f = (i + v) * V;
                    vb[v] = f;
                    px[v] = (pix){(long)oh0 * p->OW + f, npix - f < V ? npix - f : V};
                } else {         /* row r, columns ow0.. */
                    const int r = (i + v) / p->nvr, ow0 = (i + v - r * p->nvr) * V;
                    vb[v] = (long)r * p->sh * p->sw * p->L + ow0;
                    px[v] = (pix){(long)(oh0 + r) * p->OW + ow0, p->OW - ow0 < V ? p->OW - ow0 : V};
                }
            }
            tile_any(buf, tap, p->K, w, op, vb, nv, e, px, o0, nn, e->res ? e->res + (long)n * O * e->ld_res : NULL,
                     y + (long)n * O * e->plane);
        }
    }
}


/* one thread's range of work items (mxcc_parallel_chunks) */
typedef struct direct_job {
    const plan *p;
    int O, parts;
    const float *x, *wp;
    const epi *e;
    float *y, *scratch;
    long items, per_thread;
} direct_job;

static void direct_part(void *arg, long part, int worker)
{
    const direct_job *j = arg;
    run_items(j->p, j->O, j->x, j->wp, j->e, j->y, j->scratch + worker * j->per_thread,
              mxcc_split_at(j->items, j->parts, (int)part), mxcc_split_at(j->items, j->parts, (int)part + 1));
}
void mxcc_conv_direct_f32(const mxcc_conv_geom *g, int batch, int O, const float *x, const float *wp,
                          const mxcc_epilogue *ep, float *y, float *scratch, int parallel)
{
    const plan p = make_plan(g, O);
    const epi e = resolve_epilogue(ep, (long)p.OH * p.OW);
    const long items = (long)batch * p.nrb * p.ncb;
    if (items == 0 || p.OW == 0) return;
    /* as many threads as get MIN_FLOPS_PER_THREAD each (parallel.h), at most one per work item */
    int nt = mxcc_threads_for_call(parallel, 2.0 * batch * O * (double)p.OH * p.OW * p.K);
    if (items < nt) nt = (int)items;
    if (nt == 1) {
        run_items(&p, O, x, wp, &e, y, scratch, 0, items);
        return;
    }
    direct_job job = {&p, O, nt, x, wp, &e, y, scratch, items, thread_floats(&p)};
    mxcc_parallel_chunks(nt, nt, direct_part, &job);   /* a part per thread; a late thread's by the caller */
}
