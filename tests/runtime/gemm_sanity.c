/* gemm_sanity: random GEMM problems, mxcc_gemm_f32 against mxcc_gemm_f32_ref, for sanitizer builds.
 *
 * tests/runtime/test_gemm.py compiles this with every runtime_c/gemm/*.c under
 * -fsanitize=address,undefined -fno-sanitize-recover=all -fopenmp and runs it: any out-of-bounds access
 * (a kernel reading past a ragged edge, a pack routine writing past its panel), undefined behaviour or
 * leak aborts the run; a numerical mismatch exits 1. Every matrix lives in its own exact-size heap
 * block, with the leading dimension padded by a random amount, so ASan sees the true bounds.
 * Also exercises calls made from inside a parallel region (each thread borrows a workspace slot).
 *
 * usage: gemm_sanity [n_problems] [seed]
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "mxcc_gemm.h"

/* xorshift64*: deterministic, no global state */
static unsigned long long next_u64(unsigned long long *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}
static int rand_int(unsigned long long *s, int lo, int hi) { return lo + (int)(next_u64(s) % (unsigned)(hi - lo + 1)); }
static float rand_float(unsigned long long *s) { return (float)(next_u64(s) >> 40) / (float)(1 << 24) * 2.0f - 1.0f; }

static float *rand_matrix(unsigned long long *s, int rows, int ld)
{
    float *x = malloc((size_t)rows * ld * sizeof(float) + 1);  /* exact size: ASan guards the end */
    for (long i = 0; i < (long)rows * ld; i++) x[i] = rand_float(s);
    return x;
}

/* One problem. Returns 0 if mxcc_gemm_f32 matches the reference within tolerance. */
static int check_one(mxcc_gemm_ws *ws, unsigned long long *s, int max_dim, int verbose)
{
    const int M = rand_int(s, 1, max_dim), N = rand_int(s, 1, max_dim), K = rand_int(s, 0, max_dim);
    const int ta = rand_int(s, 0, 1), tb = rand_int(s, 0, 1), beta = rand_int(s, 0, 1);
    const int lda = (ta ? M : K) + rand_int(s, 0, 3), ldb = (tb ? K : N) + rand_int(s, 0, 3);
    const int ldc = N + rand_int(s, 0, 3);
    float *A = rand_matrix(s, ta ? K : M, lda > 0 ? lda : 1);  /* (M, K) or (K, M) */
    float *B = rand_matrix(s, tb ? N : K, ldb > 0 ? ldb : 1);  /* (K, N) or (N, K) */
    float *C = rand_matrix(s, M, ldc);                         /* (M, N) */
    float *C_ref = malloc((size_t)M * ldc * sizeof(float));
    for (long i = 0; i < (long)M * ldc; i++) C_ref[i] = C[i];
    if (!beta) {
        /* beta == 0 must never read C: NaN would propagate */
        for (int i = 0; i < M; i++) for (int j = 0; j < N; j++) C[(long)i * ldc + j] = NAN;
    }
    /* vectors for the epilogue, sized for per-row or per-column use */
    const int per_row = rand_int(s, 0, 1), vlen = per_row ? M : N;
    float *bias = rand_matrix(s, 1, vlen), *scale = rand_matrix(s, 1, vlen), *shift = rand_matrix(s, 1, vlen);
    float *residual = rand_matrix(s, M, N);
    mxcc_epilogue ep = {
        .bias = rand_int(s, 0, 1) ? bias : NULL, .scale = rand_int(s, 0, 1) ? scale : NULL,
        .shift = rand_int(s, 0, 1) ? shift : NULL, .per_row = per_row,
        .residual = rand_int(s, 0, 1) ? residual : NULL, .ld_residual = N,
        .act = (mxcc_act)rand_int(s, 0, MXCC_ACT_CLIP), .alpha = 0.1f, .lo = -0.5f, .hi = 0.5f,
    };
    const mxcc_epilogue *epp = rand_int(s, 0, 3) ? &ep : NULL;

    /* the same call with B prepacked (A row-major: its full-height tiles read A in place) */
    float *C_pre = malloc((size_t)M * ldc * sizeof(float));
    for (long i = 0; i < (long)M * ldc; i++) C_pre[i] = C[i];
    float *Bp = malloc((size_t)mxcc_gemm_packed_b_floats(K, N) * sizeof(float) + 1);
    mxcc_gemm_pack_b_f32(tb, K, N, B, ldb, Bp);

    mxcc_gemm_f32(ws, ta, tb, M, N, K, A, lda, B, ldb, (float)beta, C, ldc, epp);
    mxcc_gemm_f32_packed_b(ws, ta, M, N, K, A, lda, Bp, (float)beta, C_pre, ldc, epp);
    mxcc_gemm_f32_ref(ta, tb, M, N, K, A, lda, B, ldb, (float)beta, C_ref, ldc, epp);

    /* |a| <= 1, |b| <= 1: each sum is bounded by K, its float32 rounding by ~K * 2^-24 (ref) plus the
     * same for the blocked FMA order; the epilogue adds at most a few ulps of values of that size */
    const double tol = 1e-5 * (K + 4);
    int bad = 0;
    for (int i = 0; i < M && !bad; i++) {
        for (int j = 0; j < N; j++) {
            const double got = C[(long)i * ldc + j], want = C_ref[(long)i * ldc + j], pre = C_pre[(long)i * ldc + j];
            if (!(fabs(got - want) <= tol * (1.0 + fabs(want))) || !(fabs(pre - want) <= tol * (1.0 + fabs(want)))) {
                if (verbose) {
                    fprintf(stderr, "mismatch M=%d N=%d K=%d ta=%d tb=%d beta=%d act=%d at (%d,%d): %g (prepacked B %g) "
                            "vs %g\n", M, N, K, ta, tb, beta, (int)ep.act, i, j, got, pre, want);
                }
                bad = 1;
                break;
            }
        }
    }
    free(A); free(B); free(C); free(C_ref); free(C_pre); free(Bp); free(bias); free(scale); free(shift); free(residual);
    return bad;
}

int main(int argc, char **argv)
{
    const int n_problems = argc > 1 ? atoi(argv[1]) : 200;
    unsigned long long seed = argc > 2 ? strtoull(argv[2], NULL, 10) : 12345ULL;
    mxcc_gemm_ws *ws = mxcc_gemm_ws_create(0);
    if (ws == NULL) {
        fprintf(stderr, "mxcc_gemm_ws_create failed\n");
        return 2;
    }
    int failures = 0;
    /* top-level calls: the library picks its own threads; mostly small, some past the block sizes */
    for (int t = 0; t < n_problems; t++) {
        failures += check_one(ws, &seed, t % 25 == 0 ? 420 : 80, 1);
    }
    /* calls from inside a parallel region: serial inside, each thread on its own slot of the shared ws */
#pragma omp parallel reduction(+ : failures)
    {
        unsigned long long s = seed + 1000003ULL * (unsigned long long)(omp_get_thread_num() + 1);
        for (int t = 0; t < n_problems / 4; t++) {
            failures += check_one(ws, &s, 60, 1);
        }
    }
    mxcc_gemm_ws_free(ws);
    if (failures) {
        fprintf(stderr, "gemm_sanity: %d mismatches\n", failures);
        return 1;
    }
    printf("gemm_sanity: %d problems ok\n", n_problems + n_problems / 4 * omp_get_max_threads());
    return 0;
}
