/* Direct convolution for few input channels (contract: mxcc_conv.h): the first layers of CNNs (C = 1..4),
 * where K = C*KH*KW is too small for the GEMM paths to pay for gathering taps into panels and storing the
 * tile transposed.
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
 * long enough for whole vectors past OW (the extra lanes are computed and never stored).
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
#include "gemm/gemm_internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#define OPAD MXCC_CONV_DIRECT_OB   /* the packed weight's channel rounding; every OB below divides it */

/* Staged input bytes per row block: the block's rows stay in L1d (32 KiB) while the channel blocks and the
 * register tiles walk over them. TODO measure */
#ifndef CONV_DIRECT_STAGE_BYTES
#define CONV_DIRECT_STAGE_BYTES (24 * 1024)
#endif

/* ---- vector layer: V lanes, the few operations the kernel needs ------------------------------------------ */
#if defined(__AVX512F__)
/* 8 x 3 tile: 24 accumulators + 3 input vectors of 32 zmm registers; the broadcasts are FMA memory operands */
#define V 16
#define OB 8
#define NV 3
typedef __m512 vec;
static inline vec v_zero(void) { return _mm512_setzero_ps(); }
static inline vec v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline vec v_fma_bcast(const float *w, vec x, vec acc) { return _mm512_fmadd_ps(_mm512_set1_ps(*w), x, acc); }
static inline vec v_mul_s(vec v, float s) { return _mm512_mul_ps(v, _mm512_set1_ps(s)); }
static inline vec v_add_s(vec v, float s) { return _mm512_add_ps(v, _mm512_set1_ps(s)); }
static inline vec v_add(vec a, vec b) { return _mm512_add_ps(a, b); }
static inline __mmask16 lanes(int n) { return (__mmask16)((1u << n) - 1); }
static inline vec v_load_n(const float *p, int n) { return _mm512_maskz_loadu_ps(lanes(n), p); }
static inline void v_store_n(float *p, vec v, int n) { _mm512_mask_storeu_ps(p, lanes(n), v); }
static inline vec v_relu(vec v)   /* v > 0 ? v : 0 (NaN -> 0, as the scalar epilogue) */
{
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v);
}
static inline vec v_leaky(vec v, float a)
{
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), v_mul_s(v, a), v);
}
static inline vec v_clip(vec v, float lo, float hi)   /* v < lo ? lo : (v > hi ? hi : v) */
{
    const __m512 l = _mm512_set1_ps(lo), h = _mm512_set1_ps(hi);
    const __mmask16 below = _mm512_cmp_ps_mask(v, l, _CMP_LT_OQ);
    v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, h, _CMP_GT_OQ), v, h);
    return _mm512_mask_blend_ps(below, v, l);
}
#elif defined(__AVX2__) && defined(__FMA__)
/* 4 x 3 tile: 12 accumulators + 3 input vectors + 1 broadcast = the 16 ymm registers */
#define V 8
#define OB 4
#define NV 3
typedef __m256 vec;
static inline vec v_zero(void) { return _mm256_setzero_ps(); }
static inline vec v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline vec v_fma_bcast(const float *w, vec x, vec acc) { return _mm256_fmadd_ps(_mm256_broadcast_ss(w), x, acc); }
static inline vec v_mul_s(vec v, float s) { return _mm256_mul_ps(v, _mm256_set1_ps(s)); }
static inline vec v_add_s(vec v, float s) { return _mm256_add_ps(v, _mm256_set1_ps(s)); }
static inline vec v_add(vec a, vec b) { return _mm256_add_ps(a, b); }
static inline __m256i lanes(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
static inline vec v_load_n(const float *p, int n) { return _mm256_maskload_ps(p, lanes(n)); }
static inline void v_store_n(float *p, vec v, int n) { _mm256_maskstore_ps(p, lanes(n), v); }
static inline vec v_relu(vec v) { return _mm256_and_ps(v, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ)); }
static inline vec v_leaky(vec v, float a)
{
    return _mm256_blendv_ps(v_mul_s(v, a), v, _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GT_OQ));
}
static inline vec v_clip(vec v, float lo, float hi)
{
    const __m256 l = _mm256_set1_ps(lo), h = _mm256_set1_ps(hi);
    const __m256 below = _mm256_cmp_ps(v, l, _CMP_LT_OQ);
    v = _mm256_blendv_ps(v, h, _mm256_cmp_ps(v, h, _CMP_GT_OQ));
    return _mm256_blendv_ps(v, l, below);
}
#else
/* plain C: 8 lanes in a struct (the compiler keeps them in SSE registers where it can) */
#define V 8
#define OB 4
#define NV 2
typedef struct { float f[V]; } vec;
static inline vec v_zero(void) { vec r; for (int i = 0; i < V; i++) r.f[i] = 0.0f; return r; }
static inline vec v_load(const float *p) { vec r; memcpy(r.f, p, sizeof r.f); return r; }
static inline vec v_fma_bcast(const float *w, vec x, vec acc)
{
    for (int i = 0; i < V; i++) acc.f[i] += *w * x.f[i];
    return acc;
}
static inline vec v_mul_s(vec v, float s) { for (int i = 0; i < V; i++) v.f[i] *= s; return v; }
static inline vec v_add_s(vec v, float s) { for (int i = 0; i < V; i++) v.f[i] += s; return v; }
static inline vec v_add(vec a, vec b) { for (int i = 0; i < V; i++) a.f[i] += b.f[i]; return a; }
static inline vec v_load_n(const float *p, int n) { vec r = v_zero(); memcpy(r.f, p, (size_t)n * sizeof(float)); return r; }
static inline void v_store_n(float *p, vec v, int n) { memcpy(p, v.f, (size_t)n * sizeof(float)); }
static inline vec v_relu(vec v) { for (int i = 0; i < V; i++) v.f[i] = v.f[i] > 0.0f ? v.f[i] : 0.0f; return v; }
static inline vec v_leaky(vec v, float a)
{
    for (int i = 0; i < V; i++) v.f[i] = v.f[i] > 0.0f ? v.f[i] : a * v.f[i];
    return v;
}
static inline vec v_clip(vec v, float lo, float hi)
{
    for (int i = 0; i < V; i++) v.f[i] = v.f[i] < lo ? lo : (v.f[i] > hi ? hi : v.f[i]);
    return v;
}
#endif

/* ---- the layer's plan: staging geometry and work split, a function of the geometry only ------------------- */

typedef struct plan {
    int C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw;
    int nvr;       /* pixel vectors per output row: ceil(OW / V) */
    int L;         /* floats per staged phase row: nvr*V + (KW-1)*dw / sw (whole vectors past OW) */
    int R;         /* output rows per block */
    int rows_in;   /* staged input rows per block: (R-1)*sh + (KH-1)*dh + 1 */
    int nrb, ncb;  /* row blocks per image, channel blocks of OB */
    long K;        /* taps C*KH*KW */
    long stage;    /* floats of the staging buffer: C * rows_in * sw * L */
} plan;

static inline long round16(long n) { return (n + 15) / 16 * 16; }   /* floats -> a multiple of 64 bytes */

static plan make_plan(const mxcc_conv_geom *g, int O)
{
    plan p;
    p.C = g->channels; p.H = g->in[1]; p.W = g->in[2]; p.OH = g->out[1]; p.OW = g->out[2];
    p.KH = g->k[1]; p.KW = g->k[2]; p.sh = g->stride[1]; p.sw = g->stride[2];
    p.ph = g->pad[1]; p.pw = g->pad[2]; p.dh = g->dilate[1]; p.dw = g->dilate[2];
    p.nvr = (p.OW + V - 1) / V;
    p.L = p.nvr * V + (p.KW - 1) * p.dw / p.sw;
    p.K = (long)p.C * p.KH * p.KW;
    const long row_bytes = (long)p.C * p.sw * p.L * (long)sizeof(float);   /* one staged input row */
    const long fit = CONV_DIRECT_STAGE_BYTES / row_bytes - (long)(p.KH - 1) * p.dh - 1;   /* (R-1)*sh */
    p.R = fit > 0 ? (int)(fit / p.sh + 1) : 1;
    if (p.R > p.OH) p.R = p.OH;
    p.rows_in = (p.R - 1) * p.sh + (p.KH - 1) * p.dh + 1;
    p.nrb = (p.OH + p.R - 1) / p.R;
    p.ncb = (O + OB - 1) / OB;
    p.stage = (long)p.C * p.rows_in * p.sw * p.L;
    return p;
}

/* Per thread: the staging buffer, then the tap table (K ints). */
static long thread_floats(const plan *p) { return round16(p->stage) + round16(p->K); }

long mxcc_conv_direct_scratch_floats(const mxcc_conv_geom *g, int batch, int O, int max_threads)
{
    (void)batch;
    const plan p = make_plan(g, O);
#ifdef _OPENMP
    if (max_threads <= 0) max_threads = omp_get_max_threads();
#endif
    if (max_threads < 1) max_threads = 1;
    return (long)max_threads * thread_floats(&p);
}

void mxcc_conv_direct_pack_f32(int K, int O, const float *w, float *wp)
{
    const int op = (O + OPAD - 1) / OPAD * OPAD;
    for (int t = 0; t < K; t++)
        for (int o = 0; o < op; o++) wp[(long)t * op + o] = o < O ? w[(long)o * K + t] : 0.0f;
}

/* ---- staging ---------------------------------------------------------------------------------------------- */

/* buf (C, rows_in, sw, L) = the input rows of output rows oh0.. of image xn (C, H, W): row r is input row
 * oh0*sh - ph + r, phase q element j is input column j*sw + q - pw; zero outside the image. */
static void stage_rows(const plan *p, const float *restrict xn, int oh0, float *restrict buf)
{
    for (int c = 0; c < p->C; c++) {
        for (int r = 0; r < p->rows_in; r++) {
            const int ih = oh0 * p->sh - p->ph + r;
            const float *src = xn + ((long)c * p->H + ih) * p->W;   /* (W,) when 0 <= ih < H */
            for (int q = 0; q < p->sw; q++) {
                float *restrict d = buf + (((long)c * p->rows_in + r) * p->sw + q) * p->L;   /* (L,) */
                if (ih < 0 || ih >= p->H) {
                    memset(d, 0, (size_t)p->L * sizeof(float));
                    continue;
                }
                /* j with 0 <= j*sw + q - pw < W: [ja, jb) */
                const int off = q - p->pw;
                int ja = off >= 0 ? 0 : (-off + p->sw - 1) / p->sw;
                int jb = p->W - 1 - off < 0 ? 0 : (p->W - 1 - off) / p->sw + 1;
                if (jb > p->L) jb = p->L;
                if (ja > jb) ja = jb;
                memset(d, 0, (size_t)ja * sizeof(float));
                if (p->sw == 1) {
                    memcpy(d + ja, src + ja + off, (size_t)(jb - ja) * sizeof(float));
                } else {
                    const float *s = src + off;
                    for (int j = ja; j < jb; j++) d[j] = s[(long)j * p->sw];
                }
                memset(d + jb, 0, (size_t)(p->L - jb) * sizeof(float));
            }
        }
    }
}

/* tap[t] for t = (c, kh, kw): the offset in the staged buffer of the input of tap t for output pixel 0 of the
 * block's first row. */
static void tap_table(const plan *p, int *tap)
{
    long t = 0;
    for (int c = 0; c < p->C; c++)
        for (int kh = 0; kh < p->KH; kh++)
            for (int kw = 0; kw < p->KW; kw++, t++)
                tap[t] = (int)((((long)c * p->rows_in + kh * p->dh) * p->sw + kw * p->dw % p->sw) * p->L +
                               kw * p->dw / p->sw);
}

/* ---- the register tile and its epilogue ------------------------------------------------------------------- */

/* acc[j][v] = sum over taps t of w[t, j] * buf[tap[t] + vb[v] + lane], for nv pixel vectors (nv <= NV, a
 * constant after inlining: one specialized loop per nv). w: the packed weight at the block's first channel. */
static inline __attribute__((always_inline)) void tile(const float *restrict buf, const int *restrict tap, long K,
                                                       const float *restrict w, int op, const long *vb, int nv,
                                                       vec acc[OB][NV])
{
    vec a[OB][NV];   /* local, so that it lives in registers; copied out once */
    for (int j = 0; j < OB; j++)
        for (int v = 0; v < nv; v++) a[j][v] = v_zero();
    for (long t = 0; t < K; t++) {
        const float *xt = buf + tap[t];
        const float *wt = w + t * op;   /* (OB,) this tap's weights */
        vec xv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) xv[v] = v_load(xt + vb[v]);
#pragma GCC unroll 8
        for (int j = 0; j < OB; j++)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) a[j][v] = v_fma_bcast(wt + j, xv[v], a[j][v]);
    }
    for (int j = 0; j < OB; j++)
        for (int v = 0; v < nv; v++) acc[j][v] = a[j][v];
}

/* Where pixel vector i of a row block lands: row oh, columns ow0 .. ow0 + n - 1. */
typedef struct pix { int oh, ow0, n; } pix;

/* The epilogue on acc (channels o0.., nn of them; nv pixel vectors px) and the masked stores into y. */
static void store_tile(const plan *p, const mxcc_epilogue *ep, vec acc[OB][NV], int nv, const pix *px, int n,
                       int O, int o0, int nn, float *restrict y)
{
    const int has_ep = ep && !mxcc_epilogue_is_noop(ep);
    const float *sc = has_ep ? ep->scale : NULL, *sh = has_ep ? ep->shift : NULL;
    const float *bi = has_ep ? ep->bias : NULL, *res = has_ep ? ep->residual : NULL;
    const mxcc_act act = has_ep ? ep->act : MXCC_ACT_NONE;
    const long P = (long)p->OH * p->OW;
    for (int j = 0; j < nn; j++) {
        const int o = o0 + j;
        for (int v = 0; v < nv; v++) {
            vec a = acc[j][v];
            const long at = (long)px[v].oh * p->OW + px[v].ow0;   /* pixel offset in the channel plane */
            if (sc) a = v_mul_s(a, sc[o]);
            if (sh) a = v_add_s(a, sh[o]);
            if (bi) a = v_add_s(a, bi[o]);
            if (res) a = v_add(a, v_load_n(res + ((long)n * O + o) * ep->ld_residual + at, px[v].n));
            if (act == MXCC_ACT_RELU) a = v_relu(a);
            else if (act == MXCC_ACT_LEAKY) a = v_leaky(a, ep->alpha);
            else if (act == MXCC_ACT_CLIP) a = v_clip(a, ep->lo, ep->hi);
            float *yo = y + ((long)n * O + o) * P + at;
            v_store_n(yo, a, px[v].n);
            if (act != MXCC_ACT_NONE && act != MXCC_ACT_RELU && act != MXCC_ACT_LEAKY && act != MXCC_ACT_CLIP) {
                mxcc_epilogue only = {0};   /* sigmoid, tanh, ...: the scalar epilogue on the stored piece */
                only.act = act;
                mxcc_epilogue_apply_f32(&only, yo, px[v].n, 0, 0, 1, px[v].n);
            }
        }
    }
}

/* ---- driver ----------------------------------------------------------------------------------------------- */

/* Work items [i0, i1) of (image, row block, channel block) on one thread, its scratch at s. */
static void run_items(const plan *p, int O, const float *x, const float *wp, const mxcc_epilogue *ep, float *y,
                      float *s, long i0, long i1)
{
    float *buf = s;                              /* (C, rows_in, sw, L) staged rows */
    int *tap = (int *)(s + round16(p->stage));   /* (K,) */
    const int op = (O + OPAD - 1) / OPAD * OPAD;
    const long X = (long)p->C * p->H * p->W;
    tap_table(p, tap);
    long staged = -1;   /* the (image, row block) in buf */
    for (long it = i0; it < i1; it++) {
        const long nr = it / p->ncb;   /* image * nrb + row block */
        const int cb = (int)(it - nr * p->ncb), n = (int)(nr / p->nrb), rb = (int)(nr - (long)n * p->nrb);
        const int oh0 = rb * p->R, rows = p->OH - oh0 < p->R ? p->OH - oh0 : p->R;
        if (nr != staged) {
            stage_rows(p, x + n * X, oh0, buf);
            staged = nr;
        }
        const int o0 = cb * OB, nn = O - o0 < OB ? O - o0 : OB;
        const float *w = wp + o0;
        const int nvec = rows * p->nvr;
        for (int i = 0; i < nvec; i += NV) {
            const int nv = nvec - i < NV ? nvec - i : NV;
            long vb[NV];
            pix px[NV];
            for (int v = 0; v < nv; v++) {
                const int r = (i + v) / p->nvr, ow0 = (i + v - r * p->nvr) * V;
                vb[v] = (long)r * p->sh * p->sw * p->L + ow0;
                px[v] = (pix){oh0 + r, ow0, p->OW - ow0 < V ? p->OW - ow0 : V};
            }
            vec acc[OB][NV];
            switch (nv) {   /* one tile loop per width, the accumulators in registers */
            case NV: tile(buf, tap, p->K, w, op, vb, NV, acc); break;
#if NV > 2
            case 2: tile(buf, tap, p->K, w, op, vb, 2, acc); break;
#endif
            default: tile(buf, tap, p->K, w, op, vb, 1, acc); break;
            }
            store_tile(p, ep, acc, nv, px, n, O, o0, nn, y);
        }
    }
}

void mxcc_conv_direct_f32(const mxcc_conv_geom *g, int batch, int O, const float *x, const float *wp,
                          const mxcc_epilogue *ep, float *y, float *scratch, int parallel)
{
    const plan p = make_plan(g, O);
    const long items = (long)batch * p.nrb * p.ncb;
    if (items == 0 || p.OW == 0) return;
    int nt = 1;
#ifdef _OPENMP
    if (parallel && !omp_in_parallel()) {
        /* as many threads as get MIN_FLOPS_PER_THREAD each (the fork costs a few us) */
        const double flops = 2.0 * batch * O * (double)p.OH * p.OW * p.K;
        const double fit = flops / MXCC_GEMM_MIN_FLOPS_PER_THREAD;
        nt = omp_get_max_threads();
        if (fit < nt) nt = fit < 1 ? 1 : (int)fit;
        if (items < nt) nt = (int)items;
    }
#endif
    if (nt == 1) {
        run_items(&p, O, x, wp, ep, y, scratch, 0, items);
        return;
    }
    const long per_thread = thread_floats(&p);
#pragma omp parallel num_threads(nt)
    {
        int team = 1, tid = 0;
#ifdef _OPENMP
        team = omp_get_num_threads();
        tid = omp_get_thread_num();
#endif
        run_items(&p, O, x, wp, ep, y, scratch + tid * per_thread, items * tid / team, items * (tid + 1) / team);
    }
}
