/* mxcc_ukernel_f32_rowdot_avx512f: C[m, n] = A[m, k] . W[n, k]^T for small m, AVX-512F intrinsics.
 *
 * FullyConnected with a small batch (gemm_f32.c uses it up to m = 32): every output is the dot product
 * of a row of A with a row of the weight, and both rows are contiguous, so the k loop streams them with
 * unit stride and no packing. The weight (n x k) is the traffic: each group of 4 weight rows is read
 * once and used by all m rows of A, which stay in L1/L2 (m x k x 4 B). Register tile: R rows of A x 4
 * rows of W, R = 3/2/1 -> 12/8/8 accumulators; per 16 floats of k, 4 + R loads feed 4R FMAs.
 * (R = 1 keeps two accumulator sets over even/odd 16-float chunks so that 8 FMAs are in flight).
 * A head up to W's first 64-byte boundary and the k tail use masked loads; a ragged last group of W rows repeats a valid row and drops
 * its results. The twin of mxcc_ukernel_f32_rowdot_avx2fma with 16-lane vectors: half the loads and FMAs
 * per float of W, which is what this path spends its time on. Contract: gemm_internal.h. Compiled to
 * nothing without AVX-512F.
 */
#include "gemm_internal.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#define NW 4  /* rows of W per register tile */

/* the low and the high 8 lanes added: same sum, half the width */
static inline __m256 fold(__m512 v)
{
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

/* horizontal sums of 4 vectors -> (sum v0, sum v1, sum v2, sum v3) */
static inline __m128 hsum4(__m512 v0, __m512 v1, __m512 v2, __m512 v3)
{
    const __m256 s01 = _mm256_hadd_ps(fold(v0), fold(v1));  /* v0 pairs, v1 pairs (per 128-bit half) */
    const __m256 s23 = _mm256_hadd_ps(fold(v2), fold(v3));
    const __m256 s = _mm256_hadd_ps(s01, s23);  /* [v0 v1 v2 v3] lo half | [v0 v1 v2 v3] hi half */
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

/* The loops over r < R and j < NW are unrolled before GCC decides where acc lives (UNROLLED): left to the
 * late unroller, acc stayed an array in memory with one 64-byte store per FMA, which halved the R = 3
 * tile's speed (54 vs 80 GFLOP/s at 32 x 128 x 784). */
#define UNROLLED _Pragma("GCC unroll 4")

/* c[r, 0:nw] (+)= a[r, :] . w[0:4, :] for r < R. a: (R, k) stride lda; w: 4 row pointers (k,);
 * c: (R, nw) stride ldc. R is a compile-time constant at every call site (always_inline). */
static inline __attribute__((always_inline)) void tile_rx4(const int R, int k, const float *a, long lda,
                                                            const float *const w[NW], float *c, long ldc,
                                                            int nw, int beta)
{
    __m512 acc[3][NW], acc1[NW];  /* acc[r][j]: partial dot of A row r and W row j; acc1: R == 1 odd chunks */
    UNROLLED for (int r = 0; r < R; r++)
        UNROLLED for (int j = 0; j < NW; j++) acc[r][j] = _mm512_setzero_ps();
    UNROLLED for (int j = 0; j < NW; j++) acc1[j] = _mm512_setzero_ps();
    /* acc[r][j] += a[r, P : P+16] * w[j][P : P+16] on the lanes of MASK (masked loads read nothing else) */
#define CHUNK(P, MASK)                                                                             \
    do {                                                                                           \
        __m512 wv[NW];                                                                             \
        UNROLLED for (int j = 0; j < NW; j++) wv[j] = _mm512_maskz_loadu_ps((MASK), w[j] + (P));   \
        UNROLLED for (int r = 0; r < R; r++) {                                                     \
            const __m512 x = _mm512_maskz_loadu_ps((MASK), a + r * lda + (P));                     \
            UNROLLED for (int j = 0; j < NW; j++) acc[r][j] = _mm512_fmadd_ps(x, wv[j], acc[r][j]); \
        }                                                                                          \
    } while (0)

    /* head: the floats up to W row 0's next 64-byte boundary, so that the main loop's W loads start cache
     * lines. numpy and malloc give 16-byte alignment, where every 64-byte load would split two lines and
     * this load-bound loop ran at ~0.75x the AVX2 kernel (1 x 128 x 784). Rows 1..3 share the alignment
     * when ldw is a multiple of 16 (K = 128, 784, 800 ...). */
    int p = (int)((64 - ((unsigned long)w[0] & 63)) & 63) / 4;
    if (p >= k) {
        p = 0;
    } else if (p > 0) {
        CHUNK(0, (__mmask16)((1u << p) - 1));
    }
    if (R == 1) {
        /* two independent accumulator sets: 8 FMA chains hide the 4-cycle FMA latency */
        for (; p + 32 <= k; p += 32) {
            const __m512 x0 = _mm512_loadu_ps(a + p), x1 = _mm512_loadu_ps(a + p + 16);
            UNROLLED for (int j = 0; j < NW; j++) {
                acc[0][j] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w[j] + p), acc[0][j]);
                acc1[j] = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w[j] + p + 16), acc1[j]);
            }
        }
    }
    /* k loop: 16 floats of every row per step, each W vector used by R rows of A */
    for (; p + 16 <= k; p += 16) {
        CHUNK(p, (__mmask16)0xFFFF);
    }
    if (p < k) {
        /* k tail: masked loads read only the k % 16 valid floats (zeros elsewhere) */
        CHUNK(p, (__mmask16)((1u << (k - p)) - 1));
    }
#undef CHUNK
    if (R == 1) {
        UNROLLED for (int j = 0; j < NW; j++) acc[0][j] = _mm512_add_ps(acc[0][j], acc1[j]);
    }

    UNROLLED for (int r = 0; r < R; r++) {
        float out[NW];  /* (NW,) dot products of A row r with the 4 W rows */
        _mm_storeu_ps(out, hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
        float *c_row = c + r * ldc;  /* (nw,) */
        for (int j = 0; j < nw; j++) c_row[j] = beta ? c_row[j] + out[j] : out[j];
    }
}

void mxcc_ukernel_f32_rowdot_avx512f(int m, int n, int k, const float *a, int lda, const float *w, int ldw,
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

#endif /* __AVX512F__ */
