/* winograd_sanity: random geometries through runtime_c/conv/winograd_f32.c against a direct convolution in
 * double, for sanitizer builds.
 *
 * tests/runtime/test_winograd.py compiles this with winograd_f32.c and runtime_c/gemm/ under
 * -fsanitize=address,undefined -fno-sanitize-recover=all -fopenmp and runs it with 2 threads: an
 * out-of-bounds access (the input transform reading outside the image at a padded edge, the output transform
 * writing past a row or a plane, the scratch or the weight overrun) or undefined behaviour aborts the run; an
 * error above 3e-5 of sum |w| |x| exits 1. Every buffer is its own exact-size heap block so ASan sees the true
 * bounds. Geometries: C 1..24, O 1..40, H, W 1..20, pad 0..3, batch 1..3, a random epilogue, parallel or not.
 *
 * usage: winograd_sanity [n_problems] [seed]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "conv/mxcc_winograd.h"

#include "sanity_rng.h"

static int check_one(unsigned long long *s)
{
    mxcc_conv_geom g = {.in = {1, 1, 1}, .out = {1, 1, 1}, .k = {1, 3, 3}, .stride = {1, 1, 1},
                        .pad = {0, 0, 0}, .dilate = {1, 1, 1}};
    const int batch = rand_int(s, 1, 3), C = rand_int(s, 1, 24), O = rand_int(s, 1, 40);
    g.channels = C;
    for (int i = 1; i < 3; i++) {
        g.pad[i] = rand_int(s, 0, 3);
        g.in[i] = rand_int(s, g.pad[i] >= 1 ? 1 : 3, 20);   /* output >= 1 */
        g.out[i] = g.in[i] + 2 * g.pad[i] - 2;
    }
    const int H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2], threads = 2;
    const long nx = (long)batch * C * H * W, ny = (long)batch * O * OH * OW;
    float *x = rand_buf(s, nx), *w = rand_buf(s, (long)O * C * 9), *y = rand_buf(s, ny);
    float *u = rand_buf(s, mxcc_winograd_f43_weight_floats(O, C));
    float *bias = rand_buf(s, O), *scale = rand_buf(s, O), *shift = rand_buf(s, O), *res = rand_buf(s, ny);
    const long ns = mxcc_winograd_f43_scratch_floats(&g, batch, O, threads);
    float *scratch = aligned_alloc(64, (size_t)((ns * sizeof(float) + 63) / 64 * 64));
    mxcc_epilogue ep = {.bias = rand_int(s, 0, 1) ? bias : NULL, .scale = rand_int(s, 0, 1) ? scale : NULL,
                        .shift = rand_int(s, 0, 1) ? shift : NULL, .per_row = 1,
                        .residual = rand_int(s, 0, 1) ? res : NULL, .ld_residual = OH * OW,
                        .act = rand_int(s, 0, 1) ? MXCC_ACT_RELU : MXCC_ACT_NONE};
    const mxcc_epilogue *pe = rand_int(s, 0, 2) ? &ep : NULL;
    mxcc_winograd_f43_weight_f32(O, C, w, u);
    mxcc_winograd_f43_f32(&g, batch, O, x, u, pe, y, scratch, rand_int(s, 0, 3) != 0);
    /* the direct convolution in double: ref, and mag = sum |w| |x| per output */
    double *ref = malloc((size_t)ny * sizeof(double)), *mag = malloc((size_t)ny * sizeof(double));
    for (int n = 0; n < batch; n++)
        for (int o = 0; o < O; o++)
            for (int oy = 0; oy < OH; oy++)
                for (int ox = 0; ox < OW; ox++) {
                    double acc = 0.0, m = 0.0;
                    for (int c = 0; c < C; c++)
                        for (int ky = 0; ky < 3; ky++)
                            for (int kx = 0; kx < 3; kx++) {
                                const int iy = oy - g.pad[1] + ky, ix = ox - g.pad[2] + kx;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                const double a = x[(((long)n * C + c) * H + iy) * W + ix], b = w[((long)o * C + c) * 9 + ky * 3 + kx];
                                acc += a * b;
                                m += fabs(a * b);
                            }
                    const long at = (((long)n * O + o) * OH + oy) * OW + ox;
                    if (pe) {
                        if (pe->scale) { acc *= pe->scale[o]; m *= fabs(pe->scale[o]); }
                        if (pe->shift) acc += pe->shift[o];
                        if (pe->bias) acc += pe->bias[o];
                        if (pe->residual) acc += pe->residual[((long)n * O + o) * pe->ld_residual + (long)oy * OW + ox];
                        if (pe->act == MXCC_ACT_RELU) acc = acc > 0.0 ? acc : 0.0;
                    }
                    ref[at] = acc;
                    mag[at] = m;
                }
    /* the error bound of test_winograd.py: 3e-5 of mag maximized over the output's 4x4 tile */
    int ok = 1;
    for (long at = 0; at < ny && ok; at++) {
        const long ox = at % OW, oy = at / OW % OH, plane = at - oy * OW - ox;
        double tile = 0.0;
        for (long ty = oy / 4 * 4; ty < oy / 4 * 4 + 4 && ty < OH; ty++)
            for (long tx = ox / 4 * 4; tx < ox / 4 * 4 + 4 && tx < OW; tx++)
                tile = fmax(tile, mag[plane + ty * OW + tx]);
        if (!(fabs(y[at] - ref[at]) <= 3e-5 * tile + 1e-6 * fabs(ref[at]) + 1e-30)) {
            fprintf(stderr, "b%d C%d O%d %dx%d pad (%d,%d): y[%ld] = %g, direct %g\n", batch, C, O, H, W, g.pad[1],
                    g.pad[2], at, y[at], ref[at]);
            ok = 0;
        }
    }
    free(ref); free(mag);
    free(x); free(w); free(y); free(u); free(bias); free(scale); free(shift); free(res); free(scratch);
    return ok;
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 40;
    unsigned long long seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 88172645463325252ULL;
    int failures = 0;
    for (int i = 0; i < n; i++)
        failures += !check_one(&seed);
    printf("winograd_sanity: %d problems, %d failures\n", n, failures);
    return failures ? 1 : 0;
}
