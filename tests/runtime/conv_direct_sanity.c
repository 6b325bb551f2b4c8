/* conv_direct_sanity: random few-channel geometries through mxcc_conv_direct_f32 against the plain math
 * it computes (a naive convolution with a bounds test per tap here, then the shared epilogue), for sanitizer
 * builds.
 *
 * tests/runtime/test_conv_direct.py compiles this with conv_direct_f32.c and gemm/epilogue_f32.c under
 * -fsanitize=address,undefined -fno-sanitize-recover=all -fopenmp and runs it with 2 threads: staging that
 * reads outside the image at a padded edge, a store or residual read past a channel plane, a packed-weight
 * read past its end (an exact-size heap block) or a scratch overrun aborts the run; a mismatch exits 1. Each
 * problem also runs serially and must give the parallel result bit for bit.
 *
 * usage: conv_direct_sanity [n_problems] [seed]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv/mxcc_conv.h"
#include "gemm/gemm_internal.h"

#include "sanity_rng.h"

/* y (O, OH*OW) = conv(x (C, H, W), w (O, C, KH, KW)) for one image, 2-D geometry. */
static void conv_naive(const mxcc_conv_geom *g, int O, const float *x, const float *w, float *y)
{
    const int C = g->channels, H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    for (int o = 0; o < O; o++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                double acc = 0;
                for (int c = 0; c < C; c++)
                    for (int kh = 0; kh < g->k[1]; kh++)
                        for (int kw = 0; kw < g->k[2]; kw++) {
                            const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                            const int iw = ow * g->stride[2] - g->pad[2] + kw * g->dilate[2];
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            acc += (double)w[((o * C + c) * g->k[1] + kh) * g->k[2] + kw] * x[((long)c * H + ih) * W + iw];
                        }
                y[((long)o * OH + oh) * OW + ow] = (float)acc;
            }
}

/* A random 1-D or 2-D geometry with 1..20 channels (mostly 1..4) whose output is non-empty. */
static mxcc_conv_geom random_geom(unsigned long long *s, int nsp)
{
    mxcc_conv_geom g;
    for (;;) {
        g.channels = rand_int(s, 0, 3) ? rand_int(s, 1, 4) : rand_int(s, 5, 20);   /* first layers, some wider */
        int ok = 1;
        for (int i = 0; i < 3; i++) {
            const int used = i >= 3 - nsp;
            g.in[i] = used ? rand_int(s, 1, i == 2 ? 45 : 12) : 1;
            g.k[i] = used ? rand_int(s, 1, 7) : 1;
            g.stride[i] = used ? rand_int(s, 1, 3) : 1;
            g.pad[i] = used ? rand_int(s, 0, 3) : 0;
            g.dilate[i] = used ? rand_int(s, 1, 2) : 1;
            const int span = g.in[i] + 2 * g.pad[i] - g.dilate[i] * (g.k[i] - 1) - 1;
            if (span < 0) ok = 0;
            g.out[i] = span / g.stride[i] + 1;
        }
        if (ok) return g;
    }
}

int main(int argc, char **argv)
{
    const int n_problems = argc > 1 ? atoi(argv[1]) : 40;
    unsigned long long seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    unsigned long long *s = &seed;
    for (int t = 0; t < n_problems; t++) {
        const mxcc_conv_geom g = random_geom(s, 1 + t % 2);
        const int batch = rand_int(s, 1, 3), O = rand_int(s, 1, 40);
        const int K = g.channels * g.k[1] * g.k[2], OP = (O + MXCC_CONV_DIRECT_OB - 1) / MXCC_CONV_DIRECT_OB * MXCC_CONV_DIRECT_OB;
        const long P = (long)g.out[1] * g.out[2], X = (long)g.channels * g.in[1] * g.in[2];
        float *x = rand_buf(s, batch * X), *w = rand_buf(s, (long)O * K);
        float *scale = rand_buf(s, O), *shift = rand_buf(s, O), *bias = rand_buf(s, O);
        float *res = rand_buf(s, batch * O * P);
        float *wp = malloc((size_t)K * OP * sizeof(float));
        mxcc_conv_direct_pack_f32(K, O, w, wp);
        const int parts = rand_int(s, 0, 15);
        mxcc_epilogue ep = {parts & 1 ? bias : NULL, parts & 2 ? scale : NULL, parts & 4 ? shift : NULL, 1,
                            parts & 8 ? res : NULL, (int)P, (mxcc_act)rand_int(s, 0, 7), 0.1f, -0.5f, 0.5f};
        const long ns = mxcc_conv_direct_scratch_floats(&g, batch, O, 0);
        float *scratch = aligned_alloc(64, ((size_t)ns * sizeof(float) + 63) / 64 * 64);
        float *y = malloc((size_t)(batch * O * P) * sizeof(float)), *y1 = malloc((size_t)(batch * O * P) * sizeof(float));
        float *want = malloc((size_t)(O * P) * sizeof(float));
        mxcc_conv_direct_f32(&g, batch, O, x, wp, &ep, y, scratch, 1);
        mxcc_conv_direct_f32(&g, batch, O, x, wp, &ep, y1, scratch, 0);
        if (memcmp(y, y1, (size_t)(batch * O * P) * sizeof(float)) != 0) {
            fprintf(stderr, "problem %d: parallel and serial results differ\n", t);
            return 1;
        }
        for (int n = 0; n < batch; n++) {
            mxcc_epilogue e = ep;
            if (e.residual) e.residual += (long)n * O * P;
            conv_naive(&g, O, x + n * X, w, want);
            mxcc_epilogue_apply_f32(&e, want, (int)P, 0, 0, O, (int)P);
            for (long i = 0; i < O * P; i++) {
                const float got = y[n * O * P + i];
                if (!(fabsf(got - want[i]) <= 1e-5f * sqrtf((float)K) * (1.0f + fabsf(want[i])))) {
                    fprintf(stderr, "problem %d image %d element %ld: %g vs reference %g\n", t, n, i, got, want[i]);
                    return 1;
                }
            }
        }
        free(x); free(w); free(scale); free(shift); free(bias); free(res); free(wp); free(scratch);
        free(y); free(y1); free(want);
    }
    printf("%d problems ok\n", n_problems);
    return 0;
}
