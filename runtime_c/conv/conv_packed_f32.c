/* Convolution as one GEMM with output pixels as rows and the weights packed once (contract: mxcc_conv.h).
 *
 *   out^T (batch*P, O) = im2col(x)^T (batch*P, K) . W^T (K, O),   K = C*KD*KH*KW, P = OD*OH*OW
 *
 * BLIS with the roles swapped: the pixels are the M dimension (MR = 14 rows of the AVX-512 tile, 6 on
 * AVX2/plain C), the output channels the N dimension (NR = 32 / 16 columns: O = 64..512 fill the panels
 * exactly). B is the weight packed at bind time by mxcc_gemm_pack_b_f32 (panel q = columns q*NR.. at
 * wp + q*NR*K), read in place by every thread. A is never materialized as a column matrix: a block of
 * pixel micro-panels is gathered straight from the image into the packed layout the micro-kernel reads
 * (Ap[k*MR + r] = x at pixel r, tap k), copying runs of an input row, with the valid range of each run
 * computed once per (piece, kd, kh, kw) and reused for all C channels.
 *
 * Loop nest per thread: pixel block (MC pixels, its packed A in L2) -> weight panel q (read once per block,
 * so stage 4's 9.4 MB weight streams from memory once per block, not per pixel panel) -> pixel panel ->
 * micro-kernel over the whole K into an (MR, NR) tile -> epilogue -> transposed store into y (N, O, P).
 *
 * Threads: one parallel region per call. Pixel panels are split over the threads; when there are fewer
 * than two per thread (stage 4 at batch 1: 4 panels), every thread gathers all of them and the weight
 * panels are split instead. Each output element is one micro-kernel call over the whole K whatever the
 * split, so the result does not depend on the thread count.
 */
#include <string.h>

#include "mxcc_conv.h"
#include "gemm/gemm_internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define MR MXCC_GEMM_MR
#define NR MXCC_GEMM_NR

/* Packed A bytes per pixel block: the block stays in L2 (2 MiB here) while the weight panels walk past it,
 * with room left for the weight panel and the output. A block holds at least one micro-panel. */
#define CONV_PACKED_BLOCK_BYTES (512 * 1024)

static inline long round16(long n) { return (n + 15) / 16 * 16; }   /* floats -> a multiple of 64 bytes */

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

/* Per-thread scratch: one block of packed A, then the (MR, NR) C tile. */
static long thread_floats(long K, long panels)
{
    return round16(block_panels(K, panels) * MR * K) + round16(MR * NR);
}

long mxcc_conv_packed_scratch_floats(const mxcc_conv_geom *g, int batch, int O, int max_threads)
{
    (void)O;
    const long P = (long)g->out[0] * g->out[1] * g->out[2];
    const long panels = ((long)batch * P + MR - 1) / MR;
#ifdef _OPENMP
    if (max_threads <= 0) max_threads = omp_get_max_threads();
#endif
    if (max_threads < 1) max_threads = 1;
    return (long)max_threads * thread_floats(kdim(g), panels);
}

/* ---- gather: pixels [m0, m0 + mc) of the batch*P pixel range into packed A micro-panels ---------------- */

/* Output positions o in [0, n_out) with 0 <= o * stride + off < n_in: [*lo, *hi) (empty: lo == hi). */
static inline void valid_range(int n_out, int n_in, int stride, int off, int *lo, int *hi)
{
    int a = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int b = n_in - 1 - off < 0 ? 0 : (n_in - 1 - off) / stride + 1;
    if (b > n_out) b = n_out;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* d[0:len] = s[0:len] (stride 1) or s[i * stride] (len <= MR: one piece of a micro-panel row) */
static inline void copy_run(float *restrict d, const float *restrict s, int len, int stride)
{
#if defined(__AVX512F__)
    if (stride == 1) {
        /* len <= MR = 14 < 16: one masked load/store instead of a short loop with a libc-sized setup */
        const __mmask16 m = (__mmask16)((1u << len) - 1);
        _mm512_mask_storeu_ps(d, m, _mm512_maskz_loadu_ps(m, s));
        return;
    }
#endif
    if (stride == 1) {
        for (int i = 0; i < len; i++) d[i] = s[i];
    } else {
        for (int i = 0; i < len; i++) d[i] = s[(long)i * stride];
    }
}

static inline void zero_run(float *d, int len)
{
    for (int i = 0; i < len; i++) d[i] = 0.0f;
}

/* A piece: consecutive pixels of one output row (n, od, oh, ow0..ow1-1) inside one micro-panel, whose
 * first pixel sits at row r0 of panel `panel` of the block. */
typedef struct piece { int n, od, oh, ow0, ow1, panel, r0; } piece;

/* Ap (ceil(mc/MR) panels of (K, MR)) = im2col(x)^T rows m0 .. m0+mc-1, rows past mc zero. */
static void gather_block(const mxcc_conv_geom *g, const float *x, long m0, long mc, float *restrict ap)
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
        for (long k = 0; k < K; k++) zero_run(last + k * MR + (MR - tail), (int)tail);
    }
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
        long tap = 0;
        for (int kd = 0; kd < KD; kd++) {
            const int id = pc.od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
            for (int kh = 0; kh < KH; kh++) {
                const int ih = pc.oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                const int row_in = id >= 0 && id < D && ih >= 0 && ih < H;
                for (int kw = 0; kw < KW; kw++, tap++) {
                    const int off_w = kw * g->dilate[2] - g->pad[2];
                    int lo = 0, hi = 0;
                    if (row_in) valid_range(OW, W, sw, off_w, &lo, &hi);
                    const int a = clampi(lo, pc.ow0, pc.ow1), b = clampi(hi, a, pc.ow1);
                    /* pieces [ow0, a) and [b, ow1) read the padding; [a, b) reads input row (id, ih) */
                    if (b == a) {
                        for (int c = 0; c < C; c++) zero_run(dp + (c * taps + tap) * MR, (int)len);
                        continue;
                    }
                    const float *xs = xn + ((long)id * H + ih) * W + (long)a * sw + off_w;   /* channel 0 */
                    for (int c = 0; c < C; c++) {
                        float *d = dp + (c * taps + tap) * MR;   /* (len,) row k = (c, kd, kh, kw) */
                        zero_run(d, a - pc.ow0);
                        copy_run(d + (a - pc.ow0), xs + c * plane, b - a, sw);
                        zero_run(d + (b - pc.ow0), pc.ow1 - b);
                    }
                }
            }
        }
        at += len;
    }
}

/* ---- tile epilogue and transposed store ------------------------------------------------------------------ */

/* The tile t (MR, NR) holds pixels m0 .. m0+m-1 (rows) x channels o0 .. o0+nn-1 (columns). Applies the
 * epilogue in the contract's order (scale, shift, bias per channel, residual, activation) and writes
 * y[n, o, p] for each pixel m = n*P + p. Scale/shift/bias run on the tile's rows (vectors of NR channels,
 * the GEMM's per-column epilogue); the residual is added while transposing. */
static void store_tile(const mxcc_epilogue *ep, float *restrict t, int m, int nn, long m0, int o0, long P,
                       int O, float *restrict y)
{
    mxcc_epilogue vec = {0}, act = {0};
    const int has_ep = !mxcc_epilogue_is_noop(ep);
    if (has_ep) {
        vec.scale = ep->scale; vec.shift = ep->shift; vec.bias = ep->bias;   /* per_row = 0: by channel */
        act.act = ep->act; act.alpha = ep->alpha; act.lo = ep->lo; act.hi = ep->hi;
        mxcc_epilogue_apply_f32(&vec, t, NR, 0, o0, m, nn);
        if (!ep->residual) mxcc_epilogue_apply_f32(&act, t, NR, 0, o0, m, nn);
    }
    const float *res = has_ep ? ep->residual : NULL;
    for (int r = 0; r < m;) {
        /* rows r .. r+len-1 are pixels p0.. of image n: one contiguous run in each channel plane */
        const long gm = m0 + r, n = gm / P, p0 = gm - n * P;
        const int len = (int)(P - p0 < m - r ? P - p0 : m - r);
        const float *tr = t + (long)r * NR;   /* (len, NR) */
        for (int c = 0; c < nn; c++) {
            const long at = (n * O + o0 + c) * P + p0;
            float *restrict yc = y + at;   /* (len,) */
            if (res) {
                const float *rc = res + (n * O + o0 + c) * ep->ld_residual + p0;   /* (len,) */
                for (int i = 0; i < len; i++) yc[i] = tr[(long)i * NR + c] + rc[i];
            } else {
                for (int i = 0; i < len; i++) yc[i] = tr[(long)i * NR + c];
            }
        }
        if (res && act.act != MXCC_ACT_NONE) {
            /* the activation after the residual: on y's runs (the contract's order) */
            for (int c = 0; c < nn; c++)
                mxcc_epilogue_apply_f32(&act, y + (n * O + o0 + c) * P + p0, len, 0, 0, 1, len);
        }
        r += len;
    }
}

/* ---- driver ----------------------------------------------------------------------------------------------- */

/* Pixel panels [p0, p1) x weight panels [q0, q1) on one thread, its scratch at s. */
static void run_range(const mxcc_conv_geom *g, int O, const float *x, const float *wp,
                      const mxcc_epilogue *ep, float *y, float *s, long M, long p0, long p1, int q0, int q1)
{
    const long K = kdim(g), P = (long)g->out[0] * g->out[1] * g->out[2];
    const long panels = (M + MR - 1) / MR, bp = block_panels(K, panels);
    float *ap = s;                                   /* (bp, K, MR) packed A block */
    float *tile = s + round16(bp * MR * K);          /* (MR, NR) */
    for (long b0 = p0; b0 < p1; b0 += bp) {
        const long b1 = b0 + bp < p1 ? b0 + bp : p1;
        const long m0 = b0 * MR, mc = (b1 * MR < M ? b1 * MR : M) - m0;
        gather_block(g, x, m0, mc, ap);
        for (int q = q0; q < q1; q++) {
            const float *bq = wp + (long)q * NR * K;   /* (K, NR) weight panel q */
            const int nn = O - q * NR < NR ? O - q * NR : NR;
            for (long p = b0; p < b1; p++) {
                const long pm0 = p * MR;
                const int m = (int)(M - pm0 < MR ? M - pm0 : MR);
                MXCC_UKERNEL_F32((int)K, ap + (p - b0) * MR * K, bq, tile, NR, m, nn, 0);
                store_tile(ep, tile, m, nn, pm0, q * NR, P, O, y);
            }
        }
    }
}

void mxcc_conv_packed_f32(const mxcc_conv_geom *g, int batch, int O, const float *x, const float *wp,
                          const mxcc_epilogue *ep, float *y, float *scratch, int parallel)
{
    const long K = kdim(g), P = (long)g->out[0] * g->out[1] * g->out[2];
    const long M = (long)batch * P, panels = (M + MR - 1) / MR;
    const int nq = (O + NR - 1) / NR;
    const long per_thread = thread_floats(K, panels);
    if (M == 0 || O == 0) return;
    int nt = 1;
#ifdef _OPENMP
    if (parallel && !omp_in_parallel()) {
        /* as many threads as get MIN_FLOPS_PER_THREAD each (the fork costs a few us) */
        const double flops = 2.0 * (double)M * O * K;
        const double fit = flops / MXCC_GEMM_MIN_FLOPS_PER_THREAD;
        nt = omp_get_max_threads();
        if (fit < nt) nt = fit < 1 ? 1 : (int)fit;
    }
#endif
    if (nt == 1) {
        run_range(g, O, x, wp, ep, y, scratch, M, 0, panels, 0, nq);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        int team = 1, tid = 0;
#ifdef _OPENMP
        team = omp_get_num_threads();
        tid = omp_get_thread_num();
#endif
        float *s = scratch + tid * per_thread;
        if (panels >= 2L * team) {
            run_range(g, O, x, wp, ep, y, s, M, panels * tid / team, panels * (tid + 1) / team, 0, nq);
        } else {
            /* too few pixel panels to share: each thread gathers them all and takes a share of the
             * weight panels */
            const int q0 = (int)((long)nq * tid / team), q1 = (int)((long)nq * (tid + 1) / team);
            if (q1 > q0) run_range(g, O, x, wp, ep, y, s, M, 0, panels, q0, q1);
        }
    }
}
