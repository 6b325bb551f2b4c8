/* The GEMM's paths for a FullyConnected of a few rows, side by side in one process: C (M, N) = A (M, K) . W^T,
 * W (N, K) as MXNet keeps it, with a bias.
 *
 *   dot products   mxcc_gemm_f32 with W as it is (its small-M path up to MXCC_GEMM_SMALLM_MAX rows)
 *   packed B       mxcc_gemm_f32_packed_b with W packed once (what a constant weight reads: row panels, tails)
 *   panels         mxcc_gemm_f32_small_m_packed_b on the same panels (the one-row kernel, two rows per pass)
 *
 * Build (any -march: the build picks the ISA, as mxcc's runtime does):
 *   gcc -O3 -march=native -fopenmp -Iruntime_c/gemm benchmarks/gemm_paths.c $(find runtime_c/gemm -name '*.c') \
 *       runtime_c/pool/pool.c -lm -o /tmp/gemm_paths
 * Run:
 *   /tmp/gemm_paths [threads] [pool]            threads: OpenMP threads (1); "pool": mxcc's pool for the jobs
 *   MS=1,2,4,8,16,32 SH=1024x1000,784x128 /tmp/gemm_paths     rows M (up to 256), shapes KxN
 * Each case alternates the three paths five times, each a timed loop of about 20 MFLOP, and prints the best
 * time of each in us (the machines are shared: noise only ever slows a loop down) and dot products / packed B.
 * docs/performance.md ("GEMM") records what it measured and where.
 */
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mxcc_gemm.h"
#include "../pool/mxcc_pool.h"

#define MAX_ROWS 256

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static float *random_floats(long n)
{
    float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
    for (long i = 0; i < n; i++) p[i] = (float)rand() / RAND_MAX - 0.5f;
    return p;
}

typedef struct fc {
    mxcc_gemm_ws *ws;
    int M, N, K;
    const float *A, *W, *Wp, *bias;
    float *C;
} fc;

static void dot_products(const fc *f)
{
    const mxcc_epilogue ep = {.bias = f->bias};
    mxcc_gemm_f32(f->ws, 0, 1, f->M, f->N, f->K, f->A, f->K, f->W, f->K, 0.0f, f->C, f->N, &ep);
}

static void packed_b(const fc *f)
{
    const mxcc_epilogue ep = {.bias = f->bias};
    mxcc_gemm_f32_packed_b(f->ws, 0, f->M, f->N, f->K, f->A, f->K, f->Wp, 0.0f, f->C, f->N, &ep);
}

static void panels(const fc *f)
{
    const mxcc_epilogue ep = {.bias = f->bias};
    mxcc_gemm_f32_small_m_packed_b(f->M, f->N, f->K, f->A, f->K, f->Wp, f->C, f->N, &ep, 1);
}

/* seconds per call of a loop of reps calls */
static double per_call(void (*path)(const fc *), const fc *f, int reps)
{
    const double t0 = now();
    for (int i = 0; i < reps; i++) path(f);
    return (now() - t0) / reps;
}

/* a comma-separated list of ints (or of KxN pairs: two ints each) from the environment, else the default */
static int parse_list(const char *name, const char *fallback, int *out, int max, int pairs)
{
    const char *env = getenv(name);
    char *text = strdup(env ? env : fallback);
    int n = 0;
    for (char *tok = strtok(text, ","); tok && n < max; tok = strtok(NULL, ",")) {
        if (pairs) {
            if (sscanf(tok, "%dx%d", &out[2 * n], &out[2 * n + 1]) == 2) n++;
        } else {
            out[n++] = atoi(tok);
        }
    }
    free(text);
    return n;
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    omp_set_num_threads(threads);
    if (argc > 2 && strcmp(argv[2], "pool") == 0) mxcc_pool_select(1);
    int rows[64], shapes[2 * 32];
    const int nrows = parse_list("MS", "2,4,8,16,32", rows, 64, 0);
    const int nshapes = parse_list("SH", "1024x1000,784x128,128x64,800x512,3072x768", shapes, 32, 1);
    mxcc_gemm_ws *ws = mxcc_gemm_ws_create(0);
    printf("%d thread(s)%s\n%12s %4s %12s %12s %12s %10s\n", threads, argc > 2 ? ", pool" : "", "K->N", "M",
           "dot us", "packed B us", "panels us", "dot/packed");
    for (int s = 0; s < nshapes; s++) {
        const int K = shapes[2 * s], N = shapes[2 * s + 1];
        float *W = random_floats((long)N * K), *A = random_floats((long)MAX_ROWS * K);
        float *C = random_floats((long)MAX_ROWS * N), *bias = random_floats(N);
        float *Wp = aligned_alloc(64, (size_t)(mxcc_gemm_packed_b_floats(K, N) * 4 + 64));
        mxcc_gemm_pack_b_f32(1, K, N, W, K, Wp);
        for (int r = 0; r < nrows; r++) {
            const int M = rows[r] < 1 ? 1 : rows[r] > MAX_ROWS ? MAX_ROWS : rows[r];
            const fc f = {ws, M, N, K, A, W, Wp, bias, C};
            const int reps = (int)(2e7 / (2.0 * M * N * K)) + 5;
            double best[3] = {1e9, 1e9, 1e9};
            for (int round = 0; round < 5; round++) {
                const double t[3] = {per_call(dot_products, &f, reps), per_call(packed_b, &f, reps),
                                     per_call(panels, &f, reps)};
                for (int i = 0; i < 3; i++) best[i] = t[i] < best[i] ? t[i] : best[i];
            }
            char shape[32];
            snprintf(shape, sizeof shape, "%d->%d", K, N);
            printf("%12s %4d %12.2f %12.2f %12.2f %10.2f\n", shape, M, best[0] * 1e6, best[1] * 1e6, best[2] * 1e6,
                   best[0] / best[1]);
        }
        free(W);
        free(A);
        free(C);
        free(bias);
        free(Wp);
    }
    mxcc_gemm_ws_free(ws);
    return 0;
}
