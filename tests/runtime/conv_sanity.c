/* conv_sanity: random convolution geometries, every fast routine of runtime_c/conv/ against its reference
 * twin, for sanitizer builds.
 *
 * tests/runtime/test_conv.py compiles this with runtime_c/conv/ (im2col_f32.c, depthwise_*.c, conv_epilogue_f32.c)
 * and runtime_c/gemm/epilogue_f32.c under
 * -fsanitize=address,undefined -fno-sanitize-recover=all -fopenmp and runs it: an out-of-bounds access
 * (im2col reading outside the image at a padded edge, col2im or the depthwise kernels writing past a row)
 * or undefined behaviour aborts the run; a mismatch exits 1. Every buffer is its own exact-size heap block
 * so ASan sees the true bounds. Geometries include pads wider than the kernel, strides larger than the
 * kernel, dilation, and 1-D/2-D/3-D shapes.
 *
 * usage: conv_sanity [n_problems] [seed]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "conv/mxcc_conv.h"

#include "sanity_rng.h"

static int close_enough(const float *a, const float *b, long n, float tol, const char *what)
{
    for (long i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= tol * (1.0f + fabsf(b[i])))) {
            fprintf(stderr, "%s: element %ld: %g vs reference %g\n", what, i, a[i], b[i]);
            return 0;
        }
    return 1;
}

/* A random geometry of 1..3 spatial dimensions whose output is non-empty. */
static mxcc_conv_geom random_geom(unsigned long long *s, int nsp)
{
    mxcc_conv_geom g;
    g.channels = rand_int(s, 1, 4);
    /* 1-D/2-D (the depthwise kernel's): wide rows for its vector paths, sometimes planes too large for its
     * padded copy (the row path); kept rare and single-channel, they dominate the run time under ASan */
    const int wide = nsp <= 2 && rand_int(s, 0, 3) == 0;
    const int tall = wide && nsp == 2 && rand_int(s, 0, 2) == 0;
    if (tall)
        g.channels = 1;
    for (int i = 0; i < 3; i++) {
        const int used = i >= 3 - nsp;
        g.in[i] = used ? rand_int(s, 1, 9) : 1;
        if (used && i == 2 && wide)
            g.in[i] = tall ? rand_int(s, 121, 150) : rand_int(s, 10, 150);
        if (used && i == 1 && tall)
            g.in[i] = rand_int(s, 57, 80);
        g.k[i] = used ? rand_int(s, 1, 4) : 1;
        g.stride[i] = used ? rand_int(s, 1, 3) : 1;
        g.dilate[i] = used ? rand_int(s, 1, 2) : 1;
        g.pad[i] = used ? rand_int(s, 0, 4) : 0;
        int ext = g.dilate[i] * (g.k[i] - 1) + 1;
        while (ext > g.in[i] + 2 * g.pad[i]) {   /* make the output non-empty */
            g.pad[i]++;
        }
        g.out[i] = (g.in[i] + 2 * g.pad[i] - ext) / g.stride[i] + 1;
    }
    return g;
}

/* The depthwise kernel and its backward on g (2-D or 1-D) against their reference twins, with a random
 * epilogue (a fused residual with one image: its rows are that image's channels). */
static int check_depthwise(unsigned long long *s, const mxcc_conv_geom *gp)
{
    const mxcc_conv_geom g = *gp;
    const long img = (long)g.channels * g.in[0] * g.in[1] * g.in[2];
    const long ocols = (long)g.out[0] * g.out[1] * g.out[2];
    int ok = 1;
    const int with_res = rand_int(s, 0, 3) == 0;
    const int batch = with_res ? 1 : rand_int(s, 1, 2);
    const long kk = (long)g.k[1] * g.k[2];
    float *xb = rand_buf(s, batch * img), *w = rand_buf(s, g.channels * kk);
    float *bias = rand_buf(s, g.channels), *scale = rand_buf(s, g.channels), *shift = rand_buf(s, g.channels);
    float *res = rand_buf(s, (long)g.channels * ocols);
    float *o = rand_buf(s, batch * (long)g.channels * ocols), *o_ref = rand_buf(s, batch * (long)g.channels * ocols);
    mxcc_epilogue ep = {.bias = rand_int(s, 0, 1) ? bias : NULL, .scale = rand_int(s, 0, 1) ? scale : NULL,
                        .shift = rand_int(s, 0, 1) ? shift : NULL, .per_row = 1,
                        .residual = with_res ? res : NULL, .ld_residual = (int)ocols,
                        .act = (mxcc_act)rand_int(s, MXCC_ACT_NONE, MXCC_ACT_CLIP), .alpha = 0.1f,
                        .lo = -0.5f, .hi = 0.5f};
    const mxcc_epilogue *pe = with_res || rand_int(s, 0, 3) ? &ep : NULL;
    mxcc_conv_depthwise_f32(&g, batch, xb, w, pe, o, 1);
    mxcc_conv_depthwise_f32_ref(&g, batch, xb, w, pe, o_ref, 0);
    ok &= close_enough(o, o_ref, batch * (long)g.channels * ocols, 1e-5f, "depthwise");
    /* its backward: the data gradient (sometimes not wanted: NULL) and the weight gradient */
    float *dy = rand_buf(s, batch * (long)g.channels * ocols);
    float *dx = rand_buf(s, batch * img), *dx_ref = rand_buf(s, batch * img);
    float *dw = rand_buf(s, g.channels * kk), *dw_ref = rand_buf(s, g.channels * kk);
    const int want_dx = rand_int(s, 0, 3) != 0;
    mxcc_conv_depthwise_backward_f32(&g, batch, xb, w, dy, want_dx ? dx : NULL, dw, 1);
    mxcc_conv_depthwise_backward_f32_ref(&g, batch, xb, w, dy, want_dx ? dx_ref : NULL, dw_ref, 0);
    if (want_dx)
        ok &= close_enough(dx, dx_ref, batch * img, 1e-5f, "depthwise backward (data)");
    ok &= close_enough(dw, dw_ref, g.channels * kk, 1e-5f, "depthwise backward (weight)");
    free(dy); free(dx); free(dx_ref); free(dw); free(dw_ref); free(res);
    free(xb); free(w); free(bias); free(scale); free(shift); free(o); free(o_ref);
    if (!ok)
        fprintf(stderr, "depthwise geometry: C=%d in=(%d,%d) k=(%d,%d) s=(%d,%d) p=(%d,%d) d=(%d,%d) batch=%d\n",
                g.channels, g.in[1], g.in[2], g.k[1], g.k[2], g.stride[1], g.stride[2], g.pad[1], g.pad[2],
                g.dilate[1], g.dilate[2], batch);
    return ok;
}

/* A geometry of the depthwise kernel's specialized paths: square 1x1 / 3x3 / 5x5 kernels, equal strides 1
 * or 2, no dilation, widths across the vector widths (1..40), up to 24 rows; half of them "same" padding
 * (the flat path's planes, stride 1 or 2). */
static mxcc_conv_geom random_dw_geom(unsigned long long *s)
{
    mxcc_conv_geom g = {.channels = rand_int(s, 1, 3), .in = {1, rand_int(s, 1, 24), rand_int(s, 1, 40)},
                        .k = {1, 0, 0}, .stride = {1, 0, 0}, .pad = {0, 0, 0}, .dilate = {1, 1, 1}};
    const int k = 2 * rand_int(s, 0, 2) + 1, st = rand_int(s, 1, 2);
    const int p = rand_int(s, 0, 1) ? (k - 1) / 2 : rand_int(s, 0, 2);
    g.k[1] = g.k[2] = k;
    g.stride[1] = g.stride[2] = st;
    g.pad[1] = g.pad[2] = p;
    for (int i = 1; i < 3; i++) {
        while (g.in[i] + 2 * g.pad[i] < k)   /* make the output non-empty */
            g.in[i]++;
        g.out[i] = (g.in[i] + 2 * g.pad[i] - k) / st + 1;
    }
    g.out[0] = 1;
    return g;
}

static int check_one(unsigned long long *s)
{
    const int nsp = rand_int(s, 1, 3);
    mxcc_conv_geom g = random_geom(s, nsp);
    const long img = (long)g.channels * g.in[0] * g.in[1] * g.in[2];
    const long ocols = (long)g.out[0] * g.out[1] * g.out[2];
    const long rows = (long)g.channels * g.k[0] * g.k[1] * g.k[2];
    int ok = 1;

    float *x = rand_buf(s, img), *col = rand_buf(s, rows * ocols), *col_ref = rand_buf(s, rows * ocols);
    mxcc_im2col_f32(&g, x, col, 1);
    mxcc_im2col_f32_ref(&g, x, col_ref, 0);
    ok &= close_enough(col, col_ref, rows * ocols, 0.0f, "im2col");

    float *y = rand_buf(s, img), *y_ref = rand_buf(s, img);
    mxcc_col2im_f32(&g, col, y, 1);
    mxcc_col2im_f32_ref(&g, col, y_ref, 0);
    ok &= close_enough(y, y_ref, img, 1e-5f, "col2im");

    /* the same matrix in blocks of random width: each block its own exact-size buffer */
    {
        const long nb = rand_int(s, 1, 12);
        float *acc = calloc((size_t)img, sizeof(float));
        for (long j0 = 0; j0 < ocols; j0 += nb) {
            const long nj = j0 + nb <= ocols ? nb : ocols - j0;
            float *blk = rand_buf(s, rows * nj), *blk_ref = rand_buf(s, rows * nj);
            mxcc_im2col_block_f32(&g, x, j0, nj, blk, 1);
            mxcc_im2col_block_f32_ref(&g, x, j0, nj, blk_ref, 0);
            ok &= close_enough(blk, blk_ref, rows * nj, 0.0f, "im2col block");
            mxcc_col2im_block_acc_f32(&g, blk, j0, nj, acc, 1);
            free(blk); free(blk_ref);
        }
        float *y_blocks = rand_buf(s, img);   /* the whole-matrix col2im of the same columns */
        mxcc_col2im_f32_ref(&g, col_ref, y_blocks, 0);
        ok &= close_enough(acc, y_blocks, img, 1e-5f, "col2im blocks");
        free(acc); free(y_blocks);
    }

    if (nsp <= 2)
        ok &= check_depthwise(s, &g);
    if (!ok)
        fprintf(stderr, "geometry: C=%d in=(%d,%d,%d) k=(%d,%d,%d) s=(%d,%d,%d) p=(%d,%d,%d) d=(%d,%d,%d)\n",
                g.channels, g.in[0], g.in[1], g.in[2], g.k[0], g.k[1], g.k[2], g.stride[0], g.stride[1],
                g.stride[2], g.pad[0], g.pad[1], g.pad[2], g.dilate[0], g.dilate[1], g.dilate[2]);
    free(x); free(col); free(col_ref); free(y); free(y_ref);
    const mxcc_conv_geom gd = random_dw_geom(s);   /* and one geometry of the specialized paths */
    return check_depthwise(s, &gd) && ok;
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 200;
    unsigned long long seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 88172645463325252ULL;
    int failures = 0;
    for (int i = 0; i < n; i++)
        failures += !check_one(&seed);
    printf("conv_sanity: %d problems, %d failures\n", n, failures);
    return failures ? 1 : 0;
}
