/* Convolution helpers: im2col / col2im around the runtime GEMM, the direct depthwise kernel, and the
 * per-channel epilogue. Contracts and the geometry convention are in mxcc_conv.h.
 *
 * The fast versions compute, for each kernel offset, the range of output columns whose input position
 * falls inside the image ([lo, hi) below), so the inner loops have no bounds tests and (stride 1)
 * vectorize or become memcpy. The `_ref` twins are the plain loops with a bounds test per element.
 */
#include <string.h>

#include "mxcc_conv.h"
#include "mxcc_math.h"

/* Output positions o in [0, n_out) with 0 <= o * stride + off < n_in: [*lo, *hi) (empty: lo == hi). */
static void valid_range(int n_out, int n_in, int stride, int off, int *lo, int *hi)
{
    int a = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int b = n_in - 1 - off < 0 ? 0 : (n_in - 1 - off) / stride + 1;
    if (b > n_out) b = n_out;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

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

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

void mxcc_im2col_block_f32(const mxcc_conv_geom *g, const float *x, long j0, long nj, float *col, int parallel)
{
    const int D = g->in[0], H = g->in[1], W = g->in[2];
    const int OH = g->out[1], OW = g->out[2];
    const int KD = g->k[0], KH = g->k[1], KW = g->k[2];
    const int rows = g->channels * KD * KH * KW;
    const int sw = g->stride[2];
#pragma omp parallel for schedule(static) if (parallel)
    for (int r = 0; r < rows; r++) {
        const int kw = r % KW, kh = (r / KW) % KH, kd = (r / (KW * KH)) % KD, c = r / (KW * KH * KD);
        const float *xc = x + (long)c * D * H * W;   /* (D, H, W) channel c */
        float *dst = col + (long)r * nj;             /* (nj,) row r of the block */
        const int off_w = kw * g->dilate[2] - g->pad[2];
        int lo, hi;
        valid_range(OW, W, sw, off_w, &lo, &hi);
        for (long at = 0; at < nj;) {
            const segment sg = segment_at(OH, OW, j0, nj, at);
            const int od = sg.od, oh = sg.oh, ow0 = sg.ow0, ow1 = sg.ow1;
            const int id = od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
            const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
            float *d = dst + at;   /* (ow1 - ow0,): d[ow - ow0] is column (od, oh, ow) */
            if (id < 0 || id >= D || ih < 0 || ih >= H) {
                memset(d, 0, (size_t)(ow1 - ow0) * sizeof(float));
            } else {
                const float *xr = xc + ((long)id * H + ih) * W;   /* (W,) input row */
                const int a = clampi(lo, ow0, ow1), b = clampi(hi, a, ow1);
                memset(d, 0, (size_t)(a - ow0) * sizeof(float));
                if (sw == 1) {
                    memcpy(d + (a - ow0), xr + a + off_w, (size_t)(b - a) * sizeof(float));
                } else {
                    for (int ow = a; ow < b; ow++)
                        d[ow - ow0] = xr[(long)ow * sw + off_w];
                }
                memset(d + (b - ow0), 0, (size_t)(ow1 - b) * sizeof(float));
            }
            at += ow1 - ow0;
        }
    }
}

void mxcc_im2col_block_f32_ref(const mxcc_conv_geom *g, const float *x, long j0, long nj, float *col, int parallel)
{
    (void)parallel;
    const int D = g->in[0], H = g->in[1], W = g->in[2];
    const int OH = g->out[1], OW = g->out[2];
    long r = 0;
    for (int c = 0; c < g->channels; c++)
        for (int kd = 0; kd < g->k[0]; kd++)
            for (int kh = 0; kh < g->k[1]; kh++)
                for (int kw = 0; kw < g->k[2]; kw++, r++)
                    for (long j = j0; j < j0 + nj; j++) {
                        const int ow = (int)(j % OW), oh = (int)(j / OW % OH), od = (int)(j / OW / OH);
                        const int id = od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
                        const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                        const int iw = ow * g->stride[2] - g->pad[2] + kw * g->dilate[2];
                        const int inside = id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W;
                        col[r * nj + (j - j0)] = inside ? x[(((long)c * D + id) * H + ih) * W + iw] : 0.0f;
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

void mxcc_col2im_block_acc_f32(const mxcc_conv_geom *g, const float *col, long j0, long nj, float *x, int parallel)
{
    const int D = g->in[0], H = g->in[1], W = g->in[2];
    const int OH = g->out[1], OW = g->out[2];
    const int KD = g->k[0], KH = g->k[1], KW = g->k[2];
    const int sw = g->stride[2];
    /* one channel per iteration: a thread owns its channel's whole image, so the sums never race; each
     * pixel receives its rows' contributions in row order, as in the reference */
#pragma omp parallel for schedule(static) if (parallel)
    for (int c = 0; c < g->channels; c++) {
        float *xc = x + (long)c * D * H * W;   /* (D, H, W) */
        for (int kd = 0; kd < KD; kd++)
            for (int kh = 0; kh < KH; kh++)
                for (int kw = 0; kw < KW; kw++) {
                    const float *src = col + ((((long)c * KD + kd) * KH + kh) * KW + kw) * nj;   /* (nj,) */
                    const int off_w = kw * g->dilate[2] - g->pad[2];
                    int lo, hi;
                    valid_range(OW, W, sw, off_w, &lo, &hi);
                    for (long at = 0; at < nj;) {
                        const segment sg = segment_at(OH, OW, j0, nj, at);
                        const int od = sg.od, oh = sg.oh, ow0 = sg.ow0, ow1 = sg.ow1;
                        const int id = od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
                        const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                        if (id >= 0 && id < D && ih >= 0 && ih < H) {
                            const float *s = src + at;                           /* (ow1 - ow0,) */
                            float *xr = xc + ((long)id * H + ih) * W;            /* (W,) */
                            const int a = clampi(lo, ow0, ow1), b = clampi(hi, a, ow1);
                            for (int ow = a; ow < b; ow++)
                                xr[(long)ow * sw + off_w] += s[ow - ow0];
                        }
                        at += ow1 - ow0;
                    }
                }
    }
}

void mxcc_col2im_block_acc_f32_ref(const mxcc_conv_geom *g, const float *col, long j0, long nj, float *x,
                                   int parallel)
{
    (void)parallel;
    const int D = g->in[0], H = g->in[1], W = g->in[2];
    const int OH = g->out[1], OW = g->out[2];
    long r = 0;
    for (int c = 0; c < g->channels; c++)
        for (int kd = 0; kd < g->k[0]; kd++)
            for (int kh = 0; kh < g->k[1]; kh++)
                for (int kw = 0; kw < g->k[2]; kw++, r++)
                    for (long j = j0; j < j0 + nj; j++) {
                        const int ow = (int)(j % OW), oh = (int)(j / OW % OH), od = (int)(j / OW / OH);
                        const int id = od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
                        const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                        const int iw = ow * g->stride[2] - g->pad[2] + kw * g->dilate[2];
                        if (id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W)
                            x[(((long)c * D + id) * H + ih) * W + iw] += col[r * nj + (j - j0)];
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

/* ---- epilogue on channel planes ------------------------------------------------------------------------ */

/* act(x) on x[0:n] in place; the switch is outside the loop so relu/leaky/clip vectorize. */
static void activate(const mxcc_epilogue *ep, float *restrict x, long n)
{
    switch (ep->act) {
    case MXCC_ACT_NONE:
        break;
    case MXCC_ACT_RELU:
        for (long j = 0; j < n; j++) x[j] = mxcc_relu(x[j]);
        break;
    case MXCC_ACT_SIGMOID:
        for (long j = 0; j < n; j++) x[j] = mxcc_sigmoid(x[j]);
        break;
    case MXCC_ACT_TANH:
        for (long j = 0; j < n; j++) x[j] = mxcc_tanh(x[j]);
        break;
    case MXCC_ACT_SOFTRELU:
        for (long j = 0; j < n; j++) x[j] = mxcc_softrelu(x[j]);
        break;
    case MXCC_ACT_SOFTSIGN:
        for (long j = 0; j < n; j++) x[j] = mxcc_softsign(x[j]);
        break;
    case MXCC_ACT_LEAKY:
        for (long j = 0; j < n; j++) x[j] = mxcc_leaky(x[j], ep->alpha);
        break;
    case MXCC_ACT_CLIP:
        for (long j = 0; j < n; j++) x[j] = mxcc_clip(x[j], ep->lo, ep->hi);
        break;
    }
}

void mxcc_conv_epilogue_f32(const mxcc_epilogue *ep, float *y, int rows, long n, int row0)
{
    if (ep == NULL)
        return;
    for (int r = 0; r < rows; r++) {
        float *restrict x = y + (long)r * n;   /* (n,) channel row0 + r */
        const int c = row0 + r;
        if (ep->scale) { const float s = ep->scale[c]; for (long j = 0; j < n; j++) x[j] *= s; }
        if (ep->shift) { const float t = ep->shift[c]; for (long j = 0; j < n; j++) x[j] += t; }
        if (ep->bias)  { const float b = ep->bias[c];  for (long j = 0; j < n; j++) x[j] += b; }
        if (ep->residual) {
            const float *res = ep->residual + (long)c * ep->ld_residual;   /* (n,) */
            for (long j = 0; j < n; j++) x[j] += res[j];
        }
        activate(ep, x, n);
    }
}

/* ---- depthwise ---------------------------------------------------------------------------------------- */

void mxcc_conv_depthwise_f32(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                             const mxcc_epilogue *ep, float *y, int parallel)
{
    const int C = g->channels, H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KH = g->k[1], KW = g->k[2], sh = g->stride[1], sw = g->stride[2];
    const long planes = (long)batch * C;
#pragma omp parallel for schedule(static) if (parallel)
    for (long p = 0; p < planes; p++) {
        const int c = (int)(p % C);
        const float *xp = x + p * H * W;           /* (H, W) plane (n, c) */
        const float *wc = w + (long)c * KH * KW;   /* (KH, KW) */
        float *yp = y + p * OH * OW;               /* (OH, OW) */
        for (int oh = 0; oh < OH; oh++) {
            float *restrict yr = yp + (long)oh * OW;   /* (OW,) */
            for (int ow = 0; ow < OW; ow++)
                yr[ow] = 0.0f;
            for (int kh = 0; kh < KH; kh++) {
                const int ih = oh * sh - g->pad[1] + kh * g->dilate[1];
                if (ih < 0 || ih >= H)
                    continue;
                const float *restrict xr = xp + (long)ih * W;   /* (W,) */
                for (int kw = 0; kw < KW; kw++) {
                    const float wv = wc[kh * KW + kw];
                    const int off = kw * g->dilate[2] - g->pad[2];
                    int lo, hi;
                    valid_range(OW, W, sw, off, &lo, &hi);
                    if (sw == 1) {
                        for (int ow = lo; ow < hi; ow++)
                            yr[ow] += wv * xr[ow + off];
                    } else {
                        for (int ow = lo; ow < hi; ow++)
                            yr[ow] += wv * xr[(long)ow * sw + off];
                    }
                }
            }
        }
        mxcc_conv_epilogue_f32(ep, yp, 1, (long)OH * OW, c);
    }
}

void mxcc_conv_depthwise_f32_ref(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                                 const mxcc_epilogue *ep, float *y, int parallel)
{
    (void)parallel;
    const int C = g->channels, H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KH = g->k[1], KW = g->k[2];
    for (long p = 0; p < (long)batch * C; p++) {
        const int c = (int)(p % C);
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                float acc = 0.0f;
                for (int kh = 0; kh < KH; kh++)
                    for (int kw = 0; kw < KW; kw++) {
                        const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                        const int iw = ow * g->stride[2] - g->pad[2] + kw * g->dilate[2];
                        if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                            acc += w[((long)c * KH + kh) * KW + kw] * x[(p * H + ih) * W + iw];
                    }
                y[(p * OH + oh) * OW + ow] = acc;
            }
        mxcc_conv_epilogue_f32(ep, y + p * OH * OW, 1, (long)OH * OW, c);
    }
}

/* ---- depthwise backward ------------------------------------------------------------------------------- */

void mxcc_conv_depthwise_backward_f32(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                                      const float *dy, float *dx, float *dw, int parallel)
{
    const int C = g->channels, H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KH = g->k[1], KW = g->k[2], sh = g->stride[1], sw = g->stride[2];
    const long planes = (long)batch * C;
    if (dx) {
        /* dx: each plane (n, c) gathers from its own dy plane; the taps scatter along valid ranges */
#pragma omp parallel for schedule(static) if (parallel)
        for (long p = 0; p < planes; p++) {
            const int c = (int)(p % C);
            const float *wc = w + (long)c * KH * KW;    /* (KH, KW) */
            const float *dyp = dy + p * OH * OW;        /* (OH, OW) */
            float *dxp = dx + p * H * W;                /* (H, W) */
            memset(dxp, 0, (size_t)H * W * sizeof(float));
            for (int oh = 0; oh < OH; oh++) {
                const float *restrict dyr = dyp + (long)oh * OW;   /* (OW,) */
                for (int kh = 0; kh < KH; kh++) {
                    const int ih = oh * sh - g->pad[1] + kh * g->dilate[1];
                    if (ih < 0 || ih >= H)
                        continue;
                    float *restrict dxr = dxp + (long)ih * W;       /* (W,) */
                    for (int kw = 0; kw < KW; kw++) {
                        const float wv = wc[kh * KW + kw];
                        const int off = kw * g->dilate[2] - g->pad[2];
                        int lo, hi;
                        valid_range(OW, W, sw, off, &lo, &hi);
                        for (int ow = lo; ow < hi; ow++)
                            dxr[(long)ow * sw + off] += wv * dyr[ow];
                    }
                }
            }
        }
    }
    /* dw: one channel per iteration, images in order; each output row's products summed in float, the
     * rows in double (a channel sums N*OH*OW products) */
#pragma omp parallel for schedule(static) if (parallel)
    for (int c = 0; c < C; c++) {
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                const int off = kw * g->dilate[2] - g->pad[2];
                int lo, hi;
                valid_range(OW, W, sw, off, &lo, &hi);
                double acc = 0.0;
                for (int n = 0; n < batch; n++) {
                    const long p = (long)n * C + c;
                    for (int oh = 0; oh < OH; oh++) {
                        const int ih = oh * sh - g->pad[1] + kh * g->dilate[1];
                        if (ih < 0 || ih >= H)
                            continue;
                        const float *restrict dyr = dy + (p * OH + oh) * OW;   /* (OW,) */
                        const float *restrict xr = x + (p * H + ih) * W;       /* (W,) */
                        float row = 0.0f;
                        for (int ow = lo; ow < hi; ow++)
                            row += dyr[ow] * xr[(long)ow * sw + off];
                        acc += row;
                    }
                }
                dw[((long)c * KH + kh) * KW + kw] = (float)acc;
            }
    }
}

void mxcc_conv_depthwise_backward_f32_ref(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                                          const float *dy, float *dx, float *dw, int parallel)
{
    (void)parallel;
    const int C = g->channels, H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KH = g->k[1], KW = g->k[2];
    if (dx)
        memset(dx, 0, (size_t)batch * C * H * W * sizeof(float));
    memset(dw, 0, (size_t)C * KH * KW * sizeof(float));
    for (int c = 0; c < C; c++)
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                double acc = 0.0;
                for (int n = 0; n < batch; n++) {
                    const long p = (long)n * C + c;
                    for (int oh = 0; oh < OH; oh++)
                        for (int ow = 0; ow < OW; ow++) {
                            const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                            const int iw = ow * g->stride[2] - g->pad[2] + kw * g->dilate[2];
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                continue;
                            const float d = dy[(p * OH + oh) * OW + ow];
                            acc += (double)d * x[(p * H + ih) * W + iw];
                            if (dx)
                                dx[(p * H + ih) * W + iw] += w[((long)c * KH + kh) * KW + kw] * d;
                        }
                }
                dw[((long)c * KH + kh) * KW + kw] = (float)acc;
            }
}
