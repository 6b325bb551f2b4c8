/* conv_packed_sanity: random geometries through mxcc_conv_packed_f32 against the plain math it
 * computes (a naive im2col here + mxcc_gemm_f32_ref per image, same epilogue), for sanitizer builds.
 *
 * tests/runtime/test_conv_packed.py compiles this with conv_packed_f32.c and runtime_c/gemm/ under
 * -fsanitize=address,undefined -fno-sanitize-recover=all -fopenmp and runs it with 2 threads: a gather
 * reading outside the image at a padded edge, a transposed store or residual read past a channel plane, or
 * a scratch overrun (the scratch is an exact-size heap block) aborts the run; a mismatch exits 1. Each
 * problem also runs serially and must give the parallel result bit for bit.
 *
 * usage: conv_packed_sanity [n_problems] [seed]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv/mxcc_conv.h"

#include "sanity_rng.h"

/* col (K, P) = im2col(x (C, D, H, W)): the bounds test per element that the fast gather avoids. */
static void im2col_naive(const mxcc_conv_geom *g, const float *x, float *col)
{
    long r = 0;
    const long P = (long)g->out[0] * g->out[1] * g->out[2];
    for (int c = 0; c < g->channels; c++)
        for (int kd = 0; kd < g->k[0]; kd++)
            for (int kh = 0; kh < g->k[1]; kh++)
                for (int kw = 0; kw < g->k[2]; kw++, r++)
                    for (long j = 0; j < P; j++) {
                        const int ow = (int)(j % g->out[2]), oh = (int)(j / g->out[2] % g->out[1]);
                        const int od = (int)(j / g->out[2] / g->out[1]);
                        const int id = od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
                        const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                        const int iw = ow * g->stride[2] - g->pad[2] + kw * g->dilate[2];
                        const int in = id >= 0 && id < g->in[0] && ih >= 0 && ih < g->in[1] && iw >= 0 && iw < g->in[2];
                        col[r * P + j] = in ? x[(((long)c * g->in[0] + id) * g->in[1] + ih) * g->in[2] + iw] : 0.0f;
                    }
}

/* A random geometry of 1..3 spatial dimensions whose output is non-empty. */
static mxcc_conv_geom random_geom(unsigned long long *s, int nsp)
{
    mxcc_conv_geom g;
    for (;;) {
        g.channels = rand_int(s, 1, 5);
        int ok = 1;
        for (int i = 0; i < 3; i++) {
            const int used = i >= 3 - nsp;
            g.in[i] = used ? rand_int(s, 1, i == 2 ? 20 : 9) : 1;
            g.k[i] = used ? rand_int(s, 1, 5) : 1;
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
        const mxcc_conv_geom g = random_geom(s, 1 + t % 3);
        const int batch = rand_int(s, 1, 3), O = rand_int(s, 1, 40);
        const int K = g.channels * g.k[0] * g.k[1] * g.k[2];
        const long P = (long)g.out[0] * g.out[1] * g.out[2], X = (long)g.channels * g.in[0] * g.in[1] * g.in[2];
        float *x = rand_buf(s, batch * X), *w = rand_buf(s, (long)O * K);
        float *scale = rand_buf(s, O), *shift = rand_buf(s, O), *bias = rand_buf(s, O);
        float *res = rand_buf(s, batch * O * P);
        float *wp = malloc((size_t)mxcc_gemm_packed_b_floats(K, O) * sizeof(float));
        mxcc_gemm_pack_b_f32(MXCC_TRANS, K, O, w, K, wp);
        const int parts = rand_int(s, 0, 15);
        mxcc_epilogue ep = {parts & 1 ? bias : NULL, parts & 2 ? scale : NULL, parts & 4 ? shift : NULL, 1,
                            parts & 8 ? res : NULL, (int)P, (mxcc_act)rand_int(s, 0, 7), 0.1f, -0.5f, 0.5f};
        const long ns = mxcc_conv_packed_scratch_floats(&g, batch, O, 0);
        float *scratch = aligned_alloc(64, ((size_t)ns * sizeof(float) + 63) / 64 * 64);
        float *y = malloc((size_t)(batch * O * P) * sizeof(float)), *y1 = malloc((size_t)(batch * O * P) * sizeof(float));
        float *col = malloc((size_t)(K * P) * sizeof(float)), *want = malloc((size_t)(O * P) * sizeof(float));
        mxcc_conv_packed_f32(&g, batch, O, x, wp, &ep, y, scratch, 1);
        mxcc_conv_packed_f32(&g, batch, O, x, wp, &ep, y1, scratch, 0);
        if (memcmp(y, y1, (size_t)(batch * O * P) * sizeof(float)) != 0) {
            fprintf(stderr, "problem %d: parallel and serial results differ\n", t);
            return 1;
        }
        for (int n = 0; n < batch; n++) {
            mxcc_epilogue e = ep;
            if (e.residual) e.residual += (long)n * O * P;
            im2col_naive(&g, x + n * X, col);
            mxcc_gemm_f32_ref(MXCC_NO_TRANS, MXCC_NO_TRANS, O, (int)P, K, w, K, col, (int)P, 0.0f, want, (int)P, &e);
            for (long i = 0; i < O * P; i++) {
                const float got = y[n * O * P + i];
                if (!(fabsf(got - want[i]) <= 1e-5f * sqrtf((float)K) * (1.0f + fabsf(want[i])))) {
                    fprintf(stderr, "problem %d image %d element %ld: %g vs reference %g\n", t, n, i, got, want[i]);
                    return 1;
                }
            }
        }
        free(x); free(w); free(scale); free(shift); free(bias); free(res); free(wp); free(scratch);
        free(y); free(y1); free(col); free(want);
    }
    printf("%d problems ok\n", n_problems);
    return 0;
}
