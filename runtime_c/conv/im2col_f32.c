/* im2col / col2im: a convolution's image as the column matrix the runtime GEMM multiplies, and the adjoint
 * (contracts and the geometry convention: mxcc_conv.h).
 *
 *   mxcc_im2col_block_f32 / mxcc_im2col_f32        col (C*KD*KH*KW, columns) = the image's values under each
 *                                                  kernel offset, 0 in the padding
 *   mxcc_col2im_block_acc_f32 / mxcc_col2im_f32    the columns summed back into an image (Deconvolution, the
 *                                                  data gradient)
 *
 * The fast versions compute, for each kernel offset, the range of output columns whose input position falls
 * inside the image ([lo, hi): mxcc_conv_valid_range), so the inner loops have no bounds tests and (stride 1)
 * vectorize. The `_ref` twins are the plain loops with a bounds test per element: the oracles of
 * tests/runtime/test_conv.py. Threads split rows (im2col) or channels (col2im), never a sum.
 */
#include <string.h>

#include "mxcc_conv.h"
#include "conv_internal.h"
#include "../parallel.h"

/* ---- im2col ------------------------------------------------------------------------------------------ */

/* A block holds the columns [j0, j0 + nj) of the column matrix; both im2col and col2im walk it as segments
 * of one output row (od, oh) each: block columns [at, at + ow1 - ow0) are output columns (od, oh, ow0..ow1-1). */
typedef struct segment { int od, oh, ow0, ow1; } segment;

static inline segment segment_at(int OH, int OW, long j0, long nj, long at)
{
    const long j = j0 + at, row = j / OW;   /* row = od * OH + oh */
    segment s = {(int)(row / OH), (int)(row % OH), (int)(j - row * OW), OW};
    if (nj - at < s.ow1 - s.ow0)
        s.ow1 = s.ow0 + (int)(nj - at);
    return s;
}

/* The input row a segment reads under kernel offsets (kd, kh): its offset in a channel's (D, H, W) image, or
 * -1 when the row lies in the padding. */
static inline long segment_row(const mxcc_conv_geom *g, segment s, int kd, int kh)
{
    const int id = s.od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
    const int ih = s.oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
    return id < 0 || id >= g->in[0] || ih < 0 || ih >= g->in[1] ? -1 : ((long)id * g->in[1] + ih) * g->in[2];
}

/* The reference twins' geometry, one element at a time: the input offset in the (C, D, H, W) image of column j
 * of row r = (c, kd, kh, kw) of the column matrix, or -1 when it lies in the padding. */
static long ref_input_at(const mxcc_conv_geom *g, long r, long j)
{
    const int D = g->in[0], H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KD = g->k[0], KH = g->k[1], KW = g->k[2];
    const int kw = (int)(r % KW), kh = (int)(r / KW % KH), kd = (int)(r / KW / KH % KD), c = (int)(r / KW / KH / KD);
    const int ow = (int)(j % OW), oh = (int)(j / OW % OH), od = (int)(j / OW / OH);
    const int id = od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
    const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
    const int iw = ow * g->stride[2] - g->pad[2] + kw * g->dilate[2];
    const int inside = id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W;
    return inside ? (((long)c * D + id) * H + ih) * W + iw : -1;
}

/* Rows [r0, r1) of the column block */
static void im2col_rows(const mxcc_conv_geom *g, const float *x, long j0, long nj, float *col, int r0, int r1)
{
    const int D = g->in[0], H = g->in[1], W = g->in[2];
    const int OH = g->out[1], OW = g->out[2];
    const int KD = g->k[0], KH = g->k[1], KW = g->k[2];
    const int sw = g->stride[2];
    for (int r = r0; r < r1; r++) {
        const int kw = r % KW, kh = (r / KW) % KH, kd = (r / (KW * KH)) % KD, c = r / (KW * KH * KD);
        const float *xc = x + (long)c * D * H * W;   /* (D, H, W) channel c */
        float *dst = col + (long)r * nj;             /* (nj,) row r of the block */
        const int off_w = kw * g->dilate[2] - g->pad[2];
        int lo, hi;
        mxcc_conv_valid_range(OW, W, sw, off_w, &lo, &hi);
        for (long at = 0; at < nj;) {
            const segment sg = segment_at(OH, OW, j0, nj, at);
            const int ow0 = sg.ow0, ow1 = sg.ow1;
            const long row = segment_row(g, sg, kd, kh);
            /* loops, not memset/memcpy: segments are one output row (tens of floats), shorter than a
             * libc call is worth */
            float *restrict d = dst + at;   /* (ow1 - ow0,): d[ow - ow0] is column (od, oh, ow) */
            if (row < 0) {
                for (int i = 0; i < ow1 - ow0; i++) d[i] = 0.0f;
            } else {
                const float *restrict xr = xc + row;   /* (W,) input row */
                const int a = mxcc_conv_clampi(lo, ow0, ow1), b = mxcc_conv_clampi(hi, a, ow1);
                for (int i = 0; i < a - ow0; i++) d[i] = 0.0f;
                float *restrict dv = d + (a - ow0);                    /* (b - a,) the valid columns */
                if (sw == 1) {
                    const float *restrict xs = xr + a + off_w;         /* (b - a,) */
                    for (int i = 0; i < b - a; i++) dv[i] = xs[i];
                } else {
                    for (int ow = a; ow < b; ow++) dv[ow - a] = xr[(long)ow * sw + off_w];
                }
                for (int i = b - ow0; i < ow1 - ow0; i++) d[i] = 0.0f;
            }
            at += ow1 - ow0;
        }
    }
}

/* Units [u0, u1) of a column block: rows (im2col) or channels (col2im) */
typedef void cols_range_fn(const mxcc_conv_geom *g, const float *src, long j0, long nj, float *dst, int u0, int u1);

typedef struct cols_job {
    cols_range_fn *range;
    const mxcc_conv_geom *g;
    const float *src;
    float *dst;
    long j0, nj;
    int units, parts;
} cols_job;

static void cols_part(void *arg, long part, int worker)
{
    const cols_job *j = arg;
    (void)worker;
    j->range(j->g, j->src, j->j0, j->nj, j->dst, (int)mxcc_split_at(j->units, j->parts, (int)part),
             (int)mxcc_split_at(j->units, j->parts, (int)part + 1));
}

/* One job per call (mxcc_parallel_chunks: mxcc's pool, or an OpenMP region where OpenMP is the engine): a
 * contiguous range of units per part, as the static schedule had; every thread the call may use (parallel: the
 * engine's count), at most one per unit. */
static void run_cols(cols_range_fn *range, const mxcc_conv_geom *g, const float *src, long j0, long nj, float *dst,
                     int units, int parallel)
{
    int nt = mxcc_threads_for_call(parallel, 2.0 * MXCC_GEMM_MIN_FLOPS_PER_THREAD * (double)units);
    if (nt > units) nt = units;
    if (nt <= 1) {
        range(g, src, j0, nj, dst, 0, units);
        return;
    }
    cols_job job = {range, g, src, dst, j0, nj, units, nt};
    mxcc_parallel_chunks(nt, nt, cols_part, &job);
}

void mxcc_im2col_block_f32(const mxcc_conv_geom *g, const float *x, long j0, long nj, float *col, int parallel)
{
    run_cols(im2col_rows, g, x, j0, nj, col, g->channels * g->k[0] * g->k[1] * g->k[2], parallel);
}

void mxcc_im2col_block_f32_ref(const mxcc_conv_geom *g, const float *x, long j0, long nj, float *col, int parallel)
{
    (void)parallel;
    for (long r = 0; r < (long)g->channels * g->k[0] * g->k[1] * g->k[2]; r++)
        for (long j = j0; j < j0 + nj; j++) {
            const long at = ref_input_at(g, r, j);
            col[r * nj + (j - j0)] = at >= 0 ? x[at] : 0.0f;
        }
}

void mxcc_im2col_f32(const mxcc_conv_geom *g, const float *x, float *col, int parallel)
{
    mxcc_im2col_block_f32(g, x, 0, (long)g->out[0] * g->out[1] * g->out[2], col, parallel);
}

void mxcc_im2col_f32_ref(const mxcc_conv_geom *g, const float *x, float *col, int parallel)
{
    mxcc_im2col_block_f32_ref(g, x, 0, (long)g->out[0] * g->out[1] * g->out[2], col, parallel);
}

/* ---- col2im ------------------------------------------------------------------------------------------ */

/* Channels [c0, c1): a part owns its channels' whole images, so the sums never race; each pixel receives its
 * rows' contributions in row order, as in the reference */
static void col2im_channels(const mxcc_conv_geom *g, const float *col, long j0, long nj, float *x, int c0, int c1)
{
    const int D = g->in[0], H = g->in[1], W = g->in[2];
    const int OH = g->out[1], OW = g->out[2];
    const int KD = g->k[0], KH = g->k[1], KW = g->k[2];
    const int sw = g->stride[2];
    for (int c = c0; c < c1; c++) {
        float *xc = x + (long)c * D * H * W;   /* (D, H, W) */
        for (int kd = 0; kd < KD; kd++)
            for (int kh = 0; kh < KH; kh++)
                for (int kw = 0; kw < KW; kw++) {
                    const float *src = col + ((((long)c * KD + kd) * KH + kh) * KW + kw) * nj;   /* (nj,) */
                    const int off_w = kw * g->dilate[2] - g->pad[2];
                    int lo, hi;
                    mxcc_conv_valid_range(OW, W, sw, off_w, &lo, &hi);
                    for (long at = 0; at < nj;) {
                        const segment sg = segment_at(OH, OW, j0, nj, at);
                        const int ow0 = sg.ow0, ow1 = sg.ow1;
                        const long row = segment_row(g, sg, kd, kh);
                        if (row >= 0) {
                            const float *s = src + at;                           /* (ow1 - ow0,) */
                            float *xr = xc + row;                                /* (W,) */
                            const int a = mxcc_conv_clampi(lo, ow0, ow1), b = mxcc_conv_clampi(hi, a, ow1);
                            for (int ow = a; ow < b; ow++)
                                xr[(long)ow * sw + off_w] += s[ow - ow0];
                        }
                        at += ow1 - ow0;
                    }
                }
    }
}

void mxcc_col2im_block_acc_f32(const mxcc_conv_geom *g, const float *col, long j0, long nj, float *x, int parallel)
{
    run_cols(col2im_channels, g, col, j0, nj, x, g->channels, parallel);
}

void mxcc_col2im_block_acc_f32_ref(const mxcc_conv_geom *g, const float *col, long j0, long nj, float *x,
                                   int parallel)
{
    (void)parallel;
    for (long r = 0; r < (long)g->channels * g->k[0] * g->k[1] * g->k[2]; r++)   /* rows in order: each pixel's sum */
        for (long j = j0; j < j0 + nj; j++) {
            const long at = ref_input_at(g, r, j);
            if (at >= 0)
                x[at] += col[r * nj + (j - j0)];
        }
}

void mxcc_col2im_f32(const mxcc_conv_geom *g, const float *col, float *x, int parallel)
{
    memset(x, 0, (size_t)g->channels * g->in[0] * g->in[1] * g->in[2] * sizeof(float));
    mxcc_col2im_block_acc_f32(g, col, 0, (long)g->out[0] * g->out[1] * g->out[2], x, parallel);
}

void mxcc_col2im_f32_ref(const mxcc_conv_geom *g, const float *col, float *x, int parallel)
{
    memset(x, 0, (size_t)g->channels * g->in[0] * g->in[1] * g->in[2] * sizeof(float));
    mxcc_col2im_block_acc_f32_ref(g, col, 0, (long)g->out[0] * g->out[1] * g->out[2], x, parallel);
}
