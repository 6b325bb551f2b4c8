/* conv1x1_sanity: random pointwise problems through mxcc_conv1x1_f32 (every third one strided, through
 * mxcc_conv1x1_strided_f32: its gather reads an exact-size image) against a naive float64 triple loop with
 * the same epilogue, for sanitizer builds.
 *
 * tests/runtime/test_conv1x1.py compiles this with conv1x1_f32.c and runtime_c/gemm/epilogue_f32.c under
 * -fsanitize=address,undefined -fno-sanitize-recover=all -fopenmp and runs it with 2 threads: a tile store or
 * residual read past a channel plane, a packed-weight or scratch overrun (exact-size heap blocks, sized by
 * mxcc_conv1x1_packed_w_floats / mxcc_conv1x1_scratch_floats) aborts the run; a mismatch exits 1. Each
 * problem also runs serially and must give the parallel result bit for bit.
 *
 * usage: conv1x1_sanity [n_problems] [seed]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv/mxcc_conv.h"

#include "sanity_rng.h"

static double act(mxcc_act a, double v)
{
    switch (a) {
    case MXCC_ACT_RELU: return v > 0 ? v : 0;
    case MXCC_ACT_SIGMOID: return 1 / (1 + exp(-v));
    case MXCC_ACT_TANH: return tanh(v);
    case MXCC_ACT_SOFTRELU: return v > 20 ? v : log1p(exp(v));
    case MXCC_ACT_SOFTSIGN: return v / (1 + fabs(v));
    case MXCC_ACT_LEAKY: return v > 0 ? v : 0.1 * v;
    case MXCC_ACT_CLIP: return v < -0.5 ? -0.5 : (v > 0.5 ? 0.5 : v);
    default: return v;
    }
}

int main(int argc, char **argv)
{
    const int n_problems = argc > 1 ? atoi(argv[1]) : 40;
    unsigned long long seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    unsigned long long *s = &seed;
    for (int t = 0; t < n_problems; t++) {
        /* every 4th problem has 1-3 pixels; every 5th is big enough for two threads (2 M flops), split by
         * pixel panels or, with few pixels, by weight panels; past 64 channels an image takes several packed blocks */
        const int big = t % 5 == 1;
        const int batch = rand_int(s, 1, 3), C = big ? rand_int(s, 30, 300) : rand_int(s, 1, 40);
        const int O = big ? rand_int(s, 50, 200) : rand_int(s, 1, 40);   /* >= 144: rows copied (PW_COPY_MIN_NB) */
        long P = t % 4 == 0 ? rand_int(s, 1, 3) : big ? rand_int(s, 20, 400) : rand_int(s, 1, 150);
        /* strided: an H x W image, strides 1..3 (not both 1), output pixel (oh, ow) at (oh * sh, ow * sw) */
        const int strided = t % 3 == 2;
        const int H = strided ? rand_int(s, 1, big ? 40 : 20) : 1, W = strided ? rand_int(s, 1, big ? 60 : 40) : 1;
        int sh = strided ? rand_int(s, 1, 3) : 1, sw = strided ? rand_int(s, 1, 3) : 1;
        if (strided && sh == 1 && sw == 1) sw = 2;
        const int OW = strided ? (W - 1) / sw + 1 : (int)P;
        if (strided) P = (long)((H - 1) / sh + 1) * OW;
        const long X = strided ? (long)H * W : P;   /* floats per input plane */
        float *x = rand_buf(s, batch * C * X), *w = rand_buf(s, (long)O * C);
        float *scale = rand_buf(s, O), *shift = rand_buf(s, O), *bias = rand_buf(s, O);
        float *res = rand_buf(s, batch * O * P);
        float *wp = malloc((size_t)mxcc_conv1x1_packed_w_floats(C, O) * sizeof(float));
        if (mxcc_conv1x1_packed_w_floats(C, O) > MXCC_CONV1X1_PACKED_W_FLOATS_MAX(C, O)) {
            fprintf(stderr, "problem %d: packed weight larger than its bound\n", t);
            return 1;
        }
        mxcc_conv1x1_pack_w_f32(O, C, w, wp);
        const int parts = rand_int(s, 0, 15);
        const mxcc_act a = (mxcc_act)rand_int(s, 0, 7);
        mxcc_epilogue ep = {parts & 1 ? bias : NULL, parts & 2 ? scale : NULL, parts & 4 ? shift : NULL, 1,
                            parts & 8 ? res : NULL, (int)P, a, 0.1f, -0.5f, 0.5f};
        const long ns = mxcc_conv1x1_scratch_floats(C, 0);
        float *scratch = malloc((size_t)ns * sizeof(float));
        float *y = malloc((size_t)(batch * O * P) * sizeof(float)), *y1 = malloc((size_t)(batch * O * P) * sizeof(float));
        if (strided) {
            mxcc_conv1x1_strided_f32(batch, C, H, W, sh, sw, O, x, wp, &ep, y, scratch, 1);
            mxcc_conv1x1_strided_f32(batch, C, H, W, sh, sw, O, x, wp, &ep, y1, scratch, 0);
        } else {
            mxcc_conv1x1_f32(batch, C, (int)P, O, x, wp, &ep, y, scratch, 1);
            mxcc_conv1x1_f32(batch, C, (int)P, O, x, wp, &ep, y1, scratch, 0);
        }
        if (memcmp(y, y1, (size_t)(batch * O * P) * sizeof(float)) != 0) {
            fprintf(stderr, "problem %d: parallel and serial results differ\n", t);
            return 1;
        }
        for (int n = 0; n < batch; n++)
            for (int o = 0; o < O; o++)
                for (long p = 0; p < P; p++) {
                    const long q = strided ? p / OW * sh * W + p % OW * sw : p;   /* the input pixel */
                    double v = 0, mag = 0;
                    for (int c = 0; c < C; c++) {
                        v += (double)w[o * C + c] * x[(n * C + c) * X + q];
                        mag += fabs((double)w[o * C + c] * x[(n * C + c) * X + q]);
                    }
                    if (ep.scale) { v *= scale[o]; mag *= fabs(scale[o]); }
                    if (ep.shift) v += shift[o];
                    if (ep.bias) v += bias[o];
                    if (ep.residual) v += res[(n * O + o) * P + p];
                    v = act(a, v);
                    const float got = y[(n * O + o) * P + p];
                    if (!(fabs(got - v) <= 1e-6 * sqrt((double)C) * mag + 1e-6 * (1 + fabs(v)))) {
                        fprintf(stderr, "problem %d (n %d, o %d, p %ld): %g vs reference %g\n", t, n, o, p, got, v);
                        return 1;
                    }
                }
        free(x); free(w); free(scale); free(shift); free(bias); free(res); free(wp); free(scratch);
        free(y); free(y1);
    }
    printf("%d problems ok\n", n_problems);
    return 0;
}
