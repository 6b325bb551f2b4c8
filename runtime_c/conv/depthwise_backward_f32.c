/* Depthwise convolution, backward (contract: mxcc_conv.h, mxcc_conv_depthwise_backward_f32): the gradients
 * of mxcc_conv_depthwise_f32 with respect to the data (each output gradient scattered back through the taps to
 * the input position it read, the col2im of a depthwise kernel) and the weights (per channel, summed over
 * the batch: each output row's products in float, the rows in double).
 *
 * Threads split the N*C planes (dx) and the C channels (dw): each thread owns what it writes, so the sums never
 * race and their order does not depend on the thread count. The `_ref` twin is the plain loops with a bounds
 * test per element, the oracle of tests/runtime/test_conv.py.
 */
#include <string.h>

#include "mxcc_conv.h"
#include "conv_internal.h"

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
                        mxcc_conv_valid_range(OW, W, sw, off, &lo, &hi);
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
                mxcc_conv_valid_range(OW, W, sw, off, &lo, &hi);
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
