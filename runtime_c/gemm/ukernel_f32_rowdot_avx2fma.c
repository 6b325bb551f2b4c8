/* mxcc_ukernel_f32_rowdot_avx2fma: C[m, n] = A[m, k] . W[n, k]^T for small m, AVX2 + FMA intrinsics.
 *
 * FullyConnected with a small batch (gemm_f32.c uses it up to m = 32): every output is the dot product
 * of a row of A with a row of the weight, and both rows are contiguous, so the k loop streams them with
 * unit stride and no packing. The weight (n x k) is the traffic: each group of 4 weight rows is read
 * once and used by all m rows of A, which stay in L1/L2 (m x k x 4 B). Register tile: R rows of A x 4
 * rows of W, R = 3/2/1 -> 12/8/8 accumulators; per 8 floats of k, 4 + R loads feed 4R FMAs.
 * (R = 1 keeps two accumulator sets over even/odd 8-float chunks so that 8 FMAs are in flight).
 * The k tail (k % 8) uses masked loads; a ragged last group of W rows repeats a valid row and drops
 * its results. Contract: gemm_internal.h. Compiled to nothing without AVX2+FMA.
 */
#include "gemm_internal.h"
#include "../simd.h"

#if defined(__AVX2__) && defined(__FMA__)

#define NW 4  /* rows of W per register tile */
/* The loops over the tile's rows and vectors are unrolled before GCC decides where acc lives: left to the
 * late unroller, acc stays an array on the stack, zeroed there and stored and reloaded around the k loop. */
#define UNROLLED _Pragma("GCC unroll 16")

/* horizontal sums of 4 vectors -> (sum v0, sum v1, sum v2, sum v3) */
static inline __m128 hsum4(__m256 v0, __m256 v1, __m256 v2, __m256 v3)
{
    const __m256 s01 = _mm256_hadd_ps(v0, v1);   /* v0 pairs, v1 pairs (per 128-bit half) */
    const __m256 s23 = _mm256_hadd_ps(v2, v3);
    const __m256 s = _mm256_hadd_ps(s01, s23);   /* [v0 v1 v2 v3] lo half | [v0 v1 v2 v3] hi half */
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

/* c[r, 0:nw] (+)= a[r, :] . w[0:4, :] for r < R. a: (R, k) stride lda; w: 4 row pointers (k,);
 * c: (R, nw) stride ldc. R is a compile-time constant at every call site (always_inline). */
static inline __attribute__((always_inline)) void tile_rx4(const int R, int k, const float *a, long lda,
                                                            const float *const w[NW], float *c, long ldc,
                                                            int nw, int beta)
{
    __m256 acc[3][NW], acc1[NW];  /* acc[r][j]: partial dot of A row r and W row j; acc1: R == 1 odd chunks */
    UNROLLED for (int r = 0; r < R; r++)
        UNROLLED for (int j = 0; j < NW; j++) acc[r][j] = _mm256_setzero_ps();
    UNROLLED for (int j = 0; j < NW; j++) acc1[j] = _mm256_setzero_ps();

    int p = 0;
    if (R == 1) {
        /* two independent accumulator sets: 8 FMA chains hide the 4-cycle FMA latency */
        for (; p + 16 <= k; p += 16) {
            const __m256 x0 = _mm256_loadu_ps(a + p), x1 = _mm256_loadu_ps(a + p + 8);
            UNROLLED for (int j = 0; j < NW; j++) {
                acc[0][j] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(w[j] + p), acc[0][j]);
                acc1[j] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(w[j] + p + 8), acc1[j]);
            }
        }
    }
    /* k loop: 8 floats of every row per step, each W vector used by R rows of A */
    for (; p + 8 <= k; p += 8) {
        __m256 wv[NW];
        UNROLLED for (int j = 0; j < NW; j++) wv[j] = _mm256_loadu_ps(w[j] + p);
        UNROLLED for (int r = 0; r < R; r++) {
            const __m256 x = _mm256_loadu_ps(a + r * lda + p);
            UNROLLED for (int j = 0; j < NW; j++) acc[r][j] = _mm256_fmadd_ps(x, wv[j], acc[r][j]);
        }
    }
    if (p < k) {
        /* k tail: masked loads read only the k % 8 valid floats (zeros elsewhere) */
        const __m256i mask = mxcc_tail_f32x8(k - p);   /* the last k % 8 floats */
        __m256 wv[NW];
        UNROLLED for (int j = 0; j < NW; j++) wv[j] = _mm256_maskload_ps(w[j] + p, mask);
        UNROLLED for (int r = 0; r < R; r++) {
            const __m256 x = _mm256_maskload_ps(a + r * lda + p, mask);
            UNROLLED for (int j = 0; j < NW; j++) acc[r][j] = _mm256_fmadd_ps(x, wv[j], acc[r][j]);
        }
    }
    if (R == 1) {
        UNROLLED for (int j = 0; j < NW; j++) acc[0][j] = _mm256_add_ps(acc[0][j], acc1[j]);
    }

    UNROLLED for (int r = 0; r < R; r++) {
        float out[NW];  /* (NW,) dot products of A row r with the 4 W rows */
        _mm_storeu_ps(out, hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
        float *c_row = c + r * ldc;  /* (nw,) */
        for (int j = 0; j < nw; j++) c_row[j] = beta ? c_row[j] + out[j] : out[j];
    }
}

void mxcc_ukernel_f32_rowdot_avx2fma(int m, int n, int k, const float *a, int lda, const float *w, int ldw,
                                     float *c, int ldc, int beta)
{
    /* loop over groups of 4 W rows (outer: each weight row is read from memory once) */
    for (int j = 0; j < n; j += NW) {
        const int nw = n - j < NW ? n - j : NW;
        const float *wr[NW];  /* rows j .. j+3 of W; past n, repeat row j (results dropped) */
        for (int q = 0; q < NW; q++) wr[q] = w + (long)(j + (q < nw ? q : 0)) * ldw;
        /* loop over A rows in register tiles of 3 or 2 (or 1): 8 = 3+3+2, 4 = 2+2, 7 = 3+2+2 */
        for (int i = 0; i < m;) {
            const int left = m - i;
            const float *ai = a + (long)i * lda;  /* (rows, k) */
            float *ci = c + (long)i * ldc + j;    /* (rows, nw) */
            if (left >= 5 || left == 3) {
                tile_rx4(3, k, ai, lda, wr, ci, ldc, nw, beta);
                i += 3;
            } else if (left >= 2) {
                tile_rx4(2, k, ai, lda, wr, ci, ldc, nw, beta);
                i += 2;
            } else {
                tile_rx4(1, k, ai, lda, wr, ci, ldc, nw, beta);
                i += 1;
            }
        }
    }
}

#endif /* __AVX2__ && __FMA__ */
