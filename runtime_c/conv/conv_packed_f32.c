/* Convolution as one GEMM with output pixels as rows and the weights packed once (contract: mxcc_conv.h).
 *
 *   out^T (batch*P, O) = im2col(x)^T (batch*P, K) . W^T (K, O),   K = C*KD*KH*KW, P = OD*OH*OW
 *
 * BLIS with the roles swapped: the pixels are the M dimension (MR = 14 rows of the AVX-512 tile, 6 on
 * AVX2/plain C), the output channels the N dimension (NR = 32 / 16 columns: O = 64..512 fill the panels
 * exactly). B is the weight packed at bind time by mxcc_gemm_pack_b_f32 (panel q = columns q*NR.. at
 * wp + q*NR*K), read in place by every thread. A is never materialized as a column matrix: a block of
 * pixel micro-panels is gathered straight from the image into the packed layout the micro-kernel reads
 * (Ap[k*MR + r] = x at pixel r, tap k): a piece (the pixels of a micro-panel in one output row) is one
 * masked 16-lane store per k on AVX-512 (stride 1: masked or expand load; stride 2: even-lane permute),
 * its valid range computed once per (piece, tap) and reused for all C channels; the panel is written
 * front to back.
 *
 * Loop nest per thread: pixel block (MC pixels, its packed A in L2) -> weight panel q (read once per block,
 * so stage 4's 9.4 MB weight streams from memory once per block, not per pixel panel) -> pixel panel ->
 * micro-kernel over the whole K into an (MR, NR) tile; then the block's tiles get the epilogue and are
 * stored transposed into y (N, O, P) (AVX-512: a 16 x 16 register transpose per half tile).
 * Slicing K (CONV_PACKED_KC, BLIS's kc, the weight slice in L1) costs a little with the weight in cache: 1
 * thread, GFLOP/s whole-K / KC 256 / KC 512: 3x3 64@56 122 / 120 / 119, 256@14 155 / 150 / 152, 512@7 131 /
 * 127 / 129, 1x1 512@14 159 / 126 / 157 (benchmarks/conv_packed.py shapes, CP_FLAGS=-DCONV_PACKED_KC=...).
 * In a network the weight is cold, and a weight panel over the whole K (stage 4: 4608 x 32 floats, 590 KB)
 * streams from memory during the first pixel panel's pass alone: K sliced, every pass shares the stream.
 * So K is sliced only for panels past CONV_PACKED_SLICE_FLOATS: ResNet-18's stage-4 3x3 layers in the
 * network (1 thread, Intel Xeon model 167, --profile medians) 2.57 -> 2.38 ms at KC 256 (512: the same,
 * 1024: 2.43); the K <= 2304 layers measured 1-2% slower sliced and stay whole.
 *
 * Threads: one job per call (mxcc_parallel_chunks), a part per thread: pixel panels, weight panels, or
 * contiguous ranges of the grid of both (packed_split). Weight panels over pixels that fit one block (stage 4
 * at batch 1: 4 pixel panels) take two jobs: the parts gather the block together, a channel slice each, then
 * each computes its weight panels against it (every part gathering the whole block, ResNet-18's stage-4 3x3
 * layer's 16 parts added up to 4.0 ms against 2.3 ms on one thread: 16-core Xeon, split simulator). Each
 * output element is the same micro-kernel calls over K (sliced by K alone) whatever the split, so the result
 * does not depend on the thread count.
 */
#include <string.h>

#include "mxcc_conv.h"
#include "conv_internal.h"
#include "gemm/gemm_internal.h"
#include "gemm/epilogue_simd.h"
#include "../parallel.h"
#include "../simd.h"

#define MR MXCC_GEMM_MR
#define NR MXCC_GEMM_NR

/* Packed A bytes per pixel block: the block stays in L2 (2 MiB here) while the weight panels walk past it,
 * with room left for the weight panel and the output. A block holds at least one micro-panel. Every block
 * reads the whole weight once, and in a network the weight is cold (ResNet-18 stage 4: 9.4 MB per layer):
 * 1 MiB instead of 512 KiB halves those reads at stage 4 (2 blocks instead of 4 at batch 1), 3.3 -> 2.6 ms
 * per layer in the network (resnet18_v1_bench --profile, best of 4 alternating rounds); 1.5 MiB (one block)
 * measured the same as 1 MiB. */
#define CONV_PACKED_BLOCK_BYTES (1024 * 1024)

/* K slice of one micro-kernel call for weight panels of more than CONV_PACKED_SLICE_FLOATS (K x NR) floats;
 * smaller panels run the whole K in one call, accumulators in registers throughout (0: never slice). */
#ifndef CONV_PACKED_KC
#define CONV_PACKED_KC 256
#endif
#ifndef CONV_PACKED_SLICE_FLOATS
#define CONV_PACKED_SLICE_FLOATS (96L * 1024)
#endif

static inline long kdim(const mxcc_conv_geom *g)
{
    return (long)g->channels * g->k[0] * g->k[1] * g->k[2];
}

/* Pixel micro-panels per block: as many as fit CONV_PACKED_BLOCK_BYTES (at least 1, at most all). */
static long block_panels(long K, long panels)
{
    long b = CONV_PACKED_BLOCK_BYTES / (long)(sizeof(float) * MR * K);
    if (b < 1) b = 1;
    return b < panels ? b : panels;
}

/* Per-thread scratch: one block of packed A, then the block's C tiles for one weight panel. */
static long thread_floats(long K, long panels)
{
    return mxcc_round16(block_panels(K, panels) * MR * K) + mxcc_round16(block_panels(K, panels) * MR * NR);
}

long mxcc_conv_packed_scratch_floats(const mxcc_conv_geom *g, int batch, int O, int max_threads)
{
    (void)O;
    const long P = (long)g->out[0] * g->out[1] * g->out[2];
    const long panels = ((long)batch * P + MR - 1) / MR;
    return (long)mxcc_scratch_threads(max_threads) * thread_floats(kdim(g), panels);
}

/* ---- gather: pixels [m0, m0 + mc) of the batch*P pixel range into packed A micro-panels ---------------- */

/* d[0:len] = one piece of a micro-panel row (len <= MR): zeros, then the valid pixels [lo, hi) read from
 * the input row at xs[(i - lo) * stride] (xs: the input of pixel lo; unused when lo == hi), then zeros. */
static inline void put_piece(float *restrict d, int len, int lo, int hi, const float *restrict xs, int stride)
{
#if defined(__AVX512F__)
    /* one 16-lane store per piece (MR = 14 <= 16): the valid lanes are expanded into place, the rest zero */
    const __mmask16 all = (__mmask16)((1u << len) - 1);
    const int nv = hi - lo;
    const __mmask16 valid = (__mmask16)(((1u << nv) - 1) << lo);
    __m512 v;
    if (nv == 0) {
        v = _mm512_setzero_ps();
    } else if (stride == 1) {
        /* a plain masked load unless the piece starts in the left padding (expand: a shuffle-port uop) */
        v = lo == 0 ? _mm512_maskz_loadu_ps(valid, xs) : _mm512_maskz_expandloadu_ps(valid, xs);
    } else if (stride == 2) {
        /* the even elements of xs[0 : 2nv - 1] (two masked loads) moved to lanes 0..nv-1, then to lo.. */
        const int span = 2 * nv - 1;
        const __m512 v0 = _mm512_maskz_loadu_ps((__mmask16)((1u << (span < 16 ? span : 16)) - 1), xs);
        const __m512 v1 = span > 16 ? _mm512_maskz_loadu_ps((__mmask16)((1u << (span - 16)) - 1), xs + 16)
                                    : _mm512_setzero_ps();
        v = _mm512_maskz_expand_ps(valid, mxcc_even_f32(v0, v1));
    } else {
        const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                               _mm512_set1_epi32(stride));
        const __m512 g = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), (__mmask16)((1u << nv) - 1), idx, xs, 4);
        v = _mm512_maskz_expand_ps(valid, g);
    }
    _mm512_mask_storeu_ps(d, all, v);
#else
    int i = 0;
    for (; i < lo; i++) d[i] = 0.0f;
    if (stride == 1) {
        for (; i < hi; i++) d[i] = xs[i - lo];
    } else {
        for (; i < hi; i++) d[i] = xs[(long)(i - lo) * stride];
    }
    for (; i < len; i++) d[i] = 0.0f;
#endif
}

static inline void zero_run(float *d, int len)
{
    for (int i = 0; i < len; i++) d[i] = 0.0f;
}

/* A piece: consecutive pixels of one output row (n, od, oh, ow0..ow1-1) inside one micro-panel, whose
 * first pixel sits at row r0 of panel `panel` of the block. */
typedef struct piece { int n, od, oh, ow0, ow1, panel, r0; } piece;

#define KW_CACHED 16     /* kernel widths whose valid ranges gather_block computes once */
#define TAPS_CACHED 128  /* kernels (KD*KH*KW) whose per-piece tap table lives on the stack (11x11, 5x5x5) */
typedef struct tapview { int lo, hi; long off; } tapview;

/* Ap (ceil(mc/MR) panels of (K, MR)) = im2col(x)^T rows m0 .. m0+mc-1, rows past mc zero: the rows k of
 * channels [c0, c1) (k = (c, tap)), all of them for [0, C). */
__attribute__((noinline)) static void gather_block(const mxcc_conv_geom *g, const float *x, long m0, long mc,
                                                   float *restrict ap, int c0, int c1)
{
    const int C = g->channels, D = g->in[0], H = g->in[1], W = g->in[2];
    const int OH = g->out[1], OW = g->out[2];
    const int KD = g->k[0], KH = g->k[1], KW = g->k[2];
    const int sw = g->stride[2];
    const long K = kdim(g), P = (long)g->out[0] * OH * OW, plane = (long)D * H * W;
    const long panel_floats = (long)MR * K;
    const long taps = (long)KD * KH * KW;
    /* rows past mc in the last panel: zero for every k (the kernel computes them; they are never stored) */
    const long tail = (mc + MR - 1) / MR * MR - mc;
    if (tail) {
        float *last = ap + (mc / MR) * panel_floats;   /* (K, MR) */
        for (long k = c0 * taps; k < c1 * taps; k++) zero_run(last + k * MR + (MR - tail), (int)tail);
    }
    /* the output columns whose tap kw reads inside the row (the same for every row and piece) */
    int lo_w[KW_CACHED], hi_w[KW_CACHED];
    tapview tv[TAPS_CACHED];
    for (int kw = 0; kw < KW && kw < KW_CACHED; kw++)
        mxcc_conv_valid_range(OW, W, sw, kw * g->dilate[2] - g->pad[2], &lo_w[kw], &hi_w[kw]);
    for (long at = 0; at < mc;) {
        /* the piece starting at block pixel `at`: clipped at the end of its output row, of its micro-panel
         * and of the block */
        const long m = m0 + at, n = m / P, p = m - n * P, row = p / OW;
        piece pc = {(int)n, (int)(row / OH), (int)(row % OH), (int)(p - row * OW), OW, (int)(at / MR),
                    (int)(at % MR)};
        long len = pc.ow1 - pc.ow0;
        if (len > MR - pc.r0) len = MR - pc.r0;
        if (len > mc - at) len = mc - at;
        pc.ow1 = pc.ow0 + (int)len;
        const float *xn = x + (long)pc.n * C * plane;   /* (C, D, H, W) image n */
        float *dp = ap + pc.panel * panel_floats + pc.r0;   /* (K, MR) at row r0: dp[k * MR + i] */
        /* per tap: the valid pixels [lo, hi) of the piece and the input offset (channel 0) of pixel lo */
        long tap = 0;
        for (int kd = 0; kd < KD; kd++) {
            const int id = pc.od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
            for (int kh = 0; kh < KH; kh++) {
                const int ih = pc.oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                const int row_in = id >= 0 && id < D && ih >= 0 && ih < H;
                for (int kw = 0; kw < KW; kw++, tap++) {
                    const int off_w = kw * g->dilate[2] - g->pad[2];
                    int lo = 0, hi = 0;
                    if (row_in) {
                        if (KW <= KW_CACHED) {
                            lo = lo_w[kw];
                            hi = hi_w[kw];
                        } else {
                            mxcc_conv_valid_range(OW, W, sw, off_w, &lo, &hi);
                        }
                    }
                    const int a = mxcc_conv_clampi(lo, pc.ow0, pc.ow1), b = mxcc_conv_clampi(hi, a, pc.ow1);
                    /* pieces [ow0, a) and [b, ow1) read the padding; [a, b) reads input row (id, ih) */
                    const long off = b > a ? ((long)id * H + ih) * W + (long)a * sw + off_w : 0;
                    if (taps <= TAPS_CACHED) {
                        tv[tap] = (tapview){a - pc.ow0, b - pc.ow0, off};
                    } else {
                        for (int c = c0; c < c1; c++)   /* row k = (c, kd, kh, kw) */
                            put_piece(dp + (c * taps + tap) * MR, (int)len, a - pc.ow0, b - pc.ow0,
                                      xn + c * plane + off, sw);
                    }
                }
            }
        }
        /* rows k = (c, tap) in order: the panel is written front to back (full cache lines), the taps of
         * a channel read neighbouring input rows */
        if (taps <= TAPS_CACHED) {
            float *d = dp + c0 * taps * MR;
            for (int c = c0; c < c1; c++) {
                const float *xc = xn + c * plane;
                for (long t = 0; t < taps; t++, d += MR)
                    put_piece(d, (int)len, tv[t].lo, tv[t].hi, xc + tv[t].off, sw);
            }
        }
        at += len;
    }
}

/* ---- tile epilogue and transposed store ------------------------------------------------------------------ */

/* The tile t (MR, NR) holds pixels m0 .. m0+m-1 (rows) x channels o0 .. o0+nn-1 (columns); y[n, o, p] of
 * pixel m = n*P + p is at y[(n*O + o)*P + p]. A tile's rows are runs of consecutive pixels of one image
 * (one run unless the tile crosses an image boundary): run i covers rows r0 .. r0+len-1 = pixels p0.. of
 * image n, a contiguous piece of every channel plane. */
typedef struct run { int r0, len; long n, p0; } run;

static int tile_runs(long m0, int m, long P, run *runs /* [MR] */)
{
    int nr = 0;
    for (int r = 0; r < m; nr++) {
        const long gm = m0 + r, n = gm / P, p0 = gm - n * P;
        const int len = (int)(P - p0 < m - r ? P - p0 : m - r);
        runs[nr] = (run){r, len, n, p0};
        r += len;
    }
    return nr;
}

#if defined(__AVX512F__)
/* r[0:16] (16 rows of 16) = its transpose: 4 rounds of in-register shuffles (64 shuffles, port 5). */
static inline __attribute__((always_inline)) void transpose_16x16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);       /* per 128-bit lane: a0 b0 a1 b1 */
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);   /* a2 b2 a3 b3 */
    }
    for (int i = 0; i < 4; i++) {   /* r[4i+j], lane L: column 4L+j of rows 4i..4i+3 */
        r[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {   /* t[j]: (rows 0-3, col j), (0-3, 8+j), (4-7, j), (4-7, 8+j); and so on */
        t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        t[j + 4] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xDD);
        t[j + 8] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        t[j + 12] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xDD);
    }
    for (int j = 0; j < 4; j++) {   /* r[c] = column c of the input */
        r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
        r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xDD);
        r[j + 4] = _mm512_shuffle_f32x4(t[j + 4], t[j + 12], 0x88);
        r[j + 12] = _mm512_shuffle_f32x4(t[j + 4], t[j + 12], 0xDD);
    }
}

/* The epilogue in the contract's order (x*scale + shift, + bias, + residual, act) on the transposed tile,
 * one 16-lane vector of pixels per channel, stored with a mask per run. */
__attribute__((noinline)) static void store_tile(const mxcc_epilogue *ep, const float *restrict t, int m, int nn, long m0, int o0, long P,
                       int O, float *restrict y)
{
    run runs[MR];
    const int nr = tile_runs(m0, m, P, runs);
    const int has_ep = !mxcc_epilogue_is_noop(ep);
    const float *sc = has_ep ? ep->scale : NULL, *sh = has_ep ? ep->shift : NULL;
    const float *bi = has_ep ? ep->bias : NULL, *res = has_ep ? ep->residual : NULL;
    const int slow_act = has_ep && !mxcc_act_in_registers(ep->act);
    for (int h = 0; h * 16 < nn; h++) {
        __m512 r[16];
        for (int i = 0; i < 16; i++)
            r[i] = i < m ? _mm512_loadu_ps(t + i * NR + 16 * h) : _mm512_setzero_ps();
        transpose_16x16(r);   /* r[c]: pixels 0..15 of channel o0 + 16h + c */
        const int nc = nn - 16 * h < 16 ? nn - 16 * h : 16;
        for (int c = 0; c < nc; c++) {
            const int o = o0 + 16 * h + c;
            __m512 v = r[c];
            if (sc) v = _mm512_mul_ps(v, _mm512_set1_ps(sc[o]));
            if (sh) v = _mm512_add_ps(v, _mm512_set1_ps(sh[o]));
            if (bi) v = _mm512_add_ps(v, _mm512_set1_ps(bi[o]));
            for (int i = 0; i < nr; i++) {
                const run u = runs[i];
                const __mmask16 lm = (__mmask16)((1u << u.len) - 1);
                /* the run's lanes moved down to lane 0 (a tile crossing an image boundary) */
                __m512 w = u.r0 ? _mm512_maskz_compress_ps((__mmask16)(lm << u.r0), v) : v;
                if (res) w = _mm512_add_ps(w, _mm512_maskz_loadu_ps(lm, res + (u.n * O + o) * ep->ld_residual + u.p0));
                if (has_ep) w = mxcc_act_f32(ep->act, ep->alpha, ep->lo, ep->hi, w);
                _mm512_mask_storeu_ps(y + (u.n * O + o) * P + u.p0, lm, w);
            }
        }
    }
    if (slow_act) {   /* sigmoid, tanh, ...: the scalar activation on the stored runs */
        for (int i = 0; i < nr; i++)
            for (int c = 0; c < nn; c++)
                mxcc_act_apply_f32(ep->act, ep->alpha, ep->lo, ep->hi, y + (runs[i].n * O + o0 + c) * P + runs[i].p0,
                                   runs[i].len);
    }
}
#else
/* Scale/shift/bias on the tile's rows (vectors of NR channels: the GEMM's per-column epilogue), the
 * residual added while transposing, the activation on the tile (no residual) or on y's runs (after it). */
__attribute__((noinline)) static void store_tile(const mxcc_epilogue *ep, float *restrict t, int m, int nn, long m0, int o0, long P,
                       int O, float *restrict y)
{
    run runs[MR];
    const int nr = tile_runs(m0, m, P, runs);
    mxcc_epilogue vec = {0}, act = {0};
    const int has_ep = !mxcc_epilogue_is_noop(ep);
    if (has_ep) {
        vec.scale = ep->scale; vec.shift = ep->shift; vec.bias = ep->bias;   /* per_row = 0: by channel */
        act.act = ep->act; act.alpha = ep->alpha; act.lo = ep->lo; act.hi = ep->hi;
        mxcc_epilogue_apply_f32(&vec, t, NR, 0, o0, m, nn);
        if (!ep->residual) mxcc_epilogue_apply_f32(&act, t, NR, 0, o0, m, nn);
    }
    const float *res = has_ep ? ep->residual : NULL;
    for (int i = 0; i < nr; i++) {
        const run u = runs[i];
        const float *tr = t + (long)u.r0 * NR;   /* (len, NR) */
        for (int c = 0; c < nn; c++) {
            float *restrict yc = y + (u.n * O + o0 + c) * P + u.p0;   /* (len,) */
            if (res) {
                const float *rc = res + (u.n * O + o0 + c) * ep->ld_residual + u.p0;   /* (len,) */
                for (int j = 0; j < u.len; j++) yc[j] = tr[(long)j * NR + c] + rc[j];
            } else {
                for (int j = 0; j < u.len; j++) yc[j] = tr[(long)j * NR + c];
            }
        }
        if (res && act.act != MXCC_ACT_NONE) {   /* the activation after the residual */
            for (int c = 0; c < nn; c++)
                mxcc_act_apply_f32(act.act, act.alpha, act.lo, act.hi, y + (u.n * O + o0 + c) * P + u.p0, u.len);
        }
    }
}
#endif

/* ---- driver ----------------------------------------------------------------------------------------------- */

/* The block of pixel panels [b0, b1), packed at ap, times weight panels [q0, q1), stored to y; its C tiles at cb. */
static void run_block(const mxcc_conv_geom *g, int O, const float *ap, const float *wp, const mxcc_epilogue *ep,
                      float *y, float *cb, long M, long b0, long b1, int q0, int q1)
{
    const long K = kdim(g), P = (long)g->out[0] * g->out[1] * g->out[2];
    /* K in slices of kc (evened out): the weight panel's slice (kc x NR) stays in L1 while every pixel
     * panel of the block meets it; the slicing depends on K only, so the sums' order does too */
    const long nk = CONV_PACKED_KC > 0 && K * NR > CONV_PACKED_SLICE_FLOATS
                  ? (K + CONV_PACKED_KC - 1) / CONV_PACKED_KC : 1;
    const long kc = (K + nk - 1) / nk;
    for (int q = q0; q < q1; q++) {
        const float *bq = wp + (long)q * NR * K;   /* (K, NR) weight panel q */
        const int nn = O - q * NR < NR ? O - q * NR : NR;
        for (long k0 = 0; k0 < K; k0 += kc) {
            const int kk = (int)(K - k0 < kc ? K - k0 : kc);
            for (long p = b0; p < b1; p++) {
                const int m = (int)(M - p * MR < MR ? M - p * MR : MR);
                MXCC_UKERNEL_F32(kk, ap + (p - b0) * MR * K + k0 * MR, bq + k0 * NR, cb + (p - b0) * MR * NR,
                                 NR, m, nn, k0 > 0);
            }
        }
        for (long p = b0; p < b1; p++) {
            const int m = (int)(M - p * MR < MR ? M - p * MR : MR);
            store_tile(ep, cb + (p - b0) * MR * NR, m, nn, p * MR, q * NR, P, O, y);
        }
    }
}

/* Pixel panels [p0, p1) x weight panels [q0, q1) on one thread, its scratch at s: block by block, each
 * gathered into the scratch's packed A, then met by every weight panel. */
static void run_range(const mxcc_conv_geom *g, int O, const float *x, const float *wp,
                      const mxcc_epilogue *ep, float *y, float *s, long M, long p0, long p1, int q0, int q1)
{
    const long K = kdim(g), panels = (M + MR - 1) / MR, bp = block_panels(K, panels);
    float *ap = s;                                   /* (bp, K, MR) packed A block */
    float *cb = s + mxcc_round16(bp * MR * K);       /* (bp, MR, NR) the block's C tiles for one q */
    for (long b0 = p0; b0 < p1; b0 += bp) {
        const long b1 = b0 + bp < p1 ? b0 + bp : p1;
        const long m0 = b0 * MR, mc = (b1 * MR < M ? b1 * MR : M) - m0;
        gather_block(g, x, m0, mc, ap, 0, g->channels);
        run_block(g, O, ap, wp, ep, y, cb, M, b0, b1, q0, q1);
    }
}


/* one thread's part (mxcc_parallel_chunks): pixel panels, weight panels, or a range of the grid of both; or,
 * for weight panels over a single block (SHARED), a channel slice of the block's gather, then (a second job)
 * a share of the weight panels against the gathered block */
enum { BY_PIXELS, BY_WEIGHTS, BY_GRID, SHARED_GATHER, SHARED_WEIGHTS };
typedef struct packed_job {
    const mxcc_conv_geom *g;
    int O, nq, parts, how, threads;
    const float *x, *wp;
    const mxcc_epilogue *ep;
    float *y, *scratch;
    long M, panels, per_thread;
} packed_job;

/* The block the SHARED parts gather and read: in the packed-A space of the last worker, whose part uses only its
 * C tiles. Not worker 0's: the kernels after this one keep small per-thread scratch at the arena's start (the
 * pointwise kernel's copied panels), and writing lines that every core has just read costs each writer a snoop
 * per line. */
static float *shared_block(const packed_job *j)
{
    return j->scratch + (long)(j->threads - 1) * j->per_thread;
}

static void packed_part(void *arg, long part, int worker)
{
    const packed_job *j = arg;
    float *s = j->scratch + worker * j->per_thread;
    const int t = (int)part;
    if (j->how == BY_PIXELS) {
        run_range(j->g, j->O, j->x, j->wp, j->ep, j->y, s, j->M, mxcc_split_at(j->panels, j->parts, t),
                  mxcc_split_at(j->panels, j->parts, t + 1), 0, j->nq);
    } else if (j->how == BY_WEIGHTS) {
        /* each part gathers every pixel panel and takes a share of the weight panels */
        const int q0 = (int)mxcc_split_at(j->nq, j->parts, t), q1 = (int)mxcc_split_at(j->nq, j->parts, t + 1);
        if (q1 > q0) run_range(j->g, j->O, j->x, j->wp, j->ep, j->y, s, j->M, 0, j->panels, q0, q1);
    } else if (j->how == SHARED_GATHER) {
        const int C = j->g->channels;
        gather_block(j->g, j->x, 0, j->M, shared_block(j), (int)mxcc_split_at(C, j->parts, t),
                     (int)mxcc_split_at(C, j->parts, t + 1));
    } else if (j->how == SHARED_WEIGHTS) {
        const int q0 = (int)mxcc_split_at(j->nq, j->parts, t), q1 = (int)mxcc_split_at(j->nq, j->parts, t + 1);
        const long K = kdim(j->g);
        if (q1 > q0)
            run_block(j->g, j->O, shared_block(j), j->wp, j->ep, j->y, s + mxcc_round16(j->panels * MR * K), j->M,
                      0, j->panels, q0, q1);
    } else {
        mxcc_rect r[3];
        const int n = mxcc_grid_rects(j->panels, j->nq, j->parts, t, r);
        for (int i = 0; i < n; i++)
            run_range(j->g, j->O, j->x, j->wp, j->ep, j->y, s, j->M, r[i].r0, r[i].r1, (int)r[i].c0, (int)r[i].c1);
    }
}

/* How nt parts split panels x nq tiles: the split whose busiest part computes the fewest tiles; on a tie pixel
 * panels (each part gathers only its own), unless the pixels are one block (`shared`: gathered once, by all
 * parts), then weight panels (each part streams only its share of the weight: ResNet-50 b1 on 2 threads,
 * stage 4's 4 pixel panels, 30.7-31.1 -> 29.5-29.7 ms, Intel Xeon model 167); the grid only when its busiest
 * part is 3% less still (its parts re-gather the pixel panels they share with a neighbour and stream every
 * weight panel). codegen/splits.py models this. */
static int packed_split(long panels, int nq, int nt, int shared)
{
    const long by_pixels = (panels + nt - 1) / nt * nq, by_weights = panels * ((nq + nt - 1) / nt);
    const long by_grid = (panels * nq + nt - 1) / nt, plain = by_pixels < by_weights ? by_pixels : by_weights;
    if (100 * by_grid < 97 * plain) return BY_GRID;
    if (shared && by_weights == by_pixels) return BY_WEIGHTS;
    return by_pixels <= by_weights ? BY_PIXELS : BY_WEIGHTS;
}

void mxcc_conv_packed_f32(const mxcc_conv_geom *g, int batch, int O, const float *x, const float *wp,
                          const mxcc_epilogue *ep, float *y, float *scratch, int parallel)
{
    const long K = kdim(g), P = (long)g->out[0] * g->out[1] * g->out[2];
    const long M = (long)batch * P, panels = (M + MR - 1) / MR;
    const int nq = (O + NR - 1) / NR;
    const long per_thread = thread_floats(K, panels);
    if (M == 0 || O == 0) return;
    /* as many threads as get MIN_FLOPS_PER_THREAD each (parallel.h) */
    const int nt = mxcc_threads_for_call(parallel, 2.0 * (double)M * O * K);
    if (nt == 1) {
        run_range(g, O, x, wp, ep, y, scratch, M, 0, panels, 0, nq);
        return;
    }
    const int one_block = panels <= block_panels(K, panels);
    packed_job job = {g, O, nq, nt, packed_split(panels, nq, nt, one_block), nt, x, wp, ep, y, scratch, M, panels,
                      per_thread};
    if (job.how == BY_WEIGHTS && one_block) {
        /* every part would gather the same block (stage 4 at batch 1: 16 threads gathered 16 copies of a
         * 1 MB block): gather it once, a channel slice per part, then share it */
        job.how = SHARED_GATHER;
        job.parts = nt < g->channels ? nt : g->channels;
        mxcc_parallel_chunks(job.parts, nt, packed_part, &job);
        job.how = SHARED_WEIGHTS;
        job.parts = nt;
    }
    mxcc_parallel_chunks(nt, nt, packed_part, &job);   /* a part per thread; a late thread's by the caller */
}
