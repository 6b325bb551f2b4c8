/* mxcc_ukernel_f32_rowdot_avx512f: C[m, n] = A[m, k] . W[n, k]^T for small m, AVX-512F intrinsics.
 *
 * FullyConnected with a small batch (gemm_f32.c uses it up to m = 32): every output is the dot product
 * of a row of A with a row of the weight, and both rows are contiguous, so the k loop streams them with
 * unit stride and no packing. The weight (n x k) is the traffic: each group of 4 weight rows is read
 * once and used by all m rows of A, which stay in L1/L2 (m x k x 4 B). Register tile: R rows of A x 4
 * rows of W, R = 3/2/1 -> 12/8/8 accumulators; per 16 floats of k, 4 + R loads feed 4R FMAs.
 * (R = 1 keeps two accumulator sets over 32-float steps so that 8 FMAs are in flight).
 * The k loop runs on W's cache-line grid with masked first and last steps, and the result does not depend
 * on that grid (see tile_rx4); a ragged last group of W rows repeats a valid row and drops its results. The twin of mxcc_ukernel_f32_rowdot_avx2fma with 16-lane vectors: half the loads and FMAs
 * per float of W, which is what this path spends its time on. Contract: gemm_internal.h. Compiled to
 * nothing without AVX-512F.
 */
#include "gemm_internal.h"
#include "../simd.h"

#if defined(__AVX512F__)

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
 * c: (R, nw) stride ldc. R is a compile-time constant at every call site (always_inline).
 *
 * Steps of S floats (R == 1: S = 32 in two accumulator sets, so that 8 FMA chains hide the 4-cycle FMA
 * latency; else S = 16, one set) on a grid aligned to W row 0's S*4-byte boundaries: the W loads start
 * cache lines (rows 1..3 too when ldw is a multiple of 16: K = 128, 784, 800 ...). numpy and malloc give
 * 16-byte alignment, where every 64-byte load would split two lines: this load-bound loop then ran at
 * ~0.75x the AVX2 kernel (1 x 128 x 784). The first and last steps are masked to [0, k).
 * The grid must not change the result (a model loaded twice must compute the same bits): lane L of the
 * S-lane accumulator adds the k with k = L - h (mod S) in increasing order, masked lanes adding exact
 * zeros, so rotating the lanes by h at the end gives the sums a grid at k = 0 would, whatever the address. */
static inline __attribute__((always_inline)) void tile_rx4(const int R, int k, const float *a, long lda,
                                                            const float *const w[NW], float *c, long ldc,
                                                            int nw, int beta)
{
    const int SETS = R == 1 ? 2 : 1, S = 16 * SETS;
    __m512 acc[2][3][NW];  /* acc[s][r][j]: lanes 16s .. 16s+15 of the partial dots of A row r and W row j */
    UNROLLED for (int s = 0; s < SETS; s++)
        UNROLLED for (int r = 0; r < R; r++)
            UNROLLED for (int j = 0; j < NW; j++) acc[s][r][j] = _mm512_setzero_ps();
    /* acc[s][.][.] += a[r, q : q+16] * w[j][q : q+16], q = P + 16s, on the lanes of MASK(q) (masked loads
     * read nothing else). A macro, not a function: GCC keeps acc in registers only when it is not passed by
     * pointer. */
#define STEP(P, MASK)                                                                                  \
    UNROLLED for (int s = 0; s < SETS; s++) {                                                          \
        const int q = (P) + 16 * s;                                                                    \
        const __mmask16 mq = MASK;                                                                     \
        __m512 wv[NW];                                                                                 \
        UNROLLED for (int j = 0; j < NW; j++) wv[j] = _mm512_maskz_loadu_ps(mq, w[j] + q);             \
        UNROLLED for (int r = 0; r < R; r++) {                                                         \
            const __m512 x = _mm512_maskz_loadu_ps(mq, a + r * lda + q);                               \
            UNROLLED for (int j = 0; j < NW; j++) acc[s][r][j] = _mm512_fmadd_ps(x, wv[j], acc[s][r][j]); \
        }                                                                                              \
    }

    const int h = (int)(((unsigned long)w[0] / sizeof(float)) % (unsigned)S);  /* w[0] - h is on the grid */
    int p = -h;
    if (h > 0) {
        /* the head: k in [0, S - h). Its first h lanes lie before the rows and are masked off: a masked
         * load neither reads nor faults on them (the ASan/UBSan build of tests/runtime runs this). */
        STEP(p, mxcc_mask_lanes(-q, k - q))   /* lanes l with 0 <= q + l < k: inside the row */
        p += S;
    }
    for (; p + S <= k; p += S) {
        STEP(p, (__mmask16)0xFFFF)
    }
    if (p < k) {
        STEP(p, mxcc_mask_lanes(-q, k - q))  /* the tail */
    }
#undef STEP

    /* rotate lane L to lane L - h (mod S), across both sets when S = 32, then fold the sets */
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i from0 = _mm512_and_si512(_mm512_add_epi32(lane, _mm512_set1_epi32(h)), _mm512_set1_epi32(S - 1));
    UNROLLED for (int r = 0; r < R; r++) {
        UNROLLED for (int j = 0; j < NW; j++) {
            if (SETS == 2) {
                const __m512i from1 = _mm512_and_si512(_mm512_add_epi32(lane, _mm512_set1_epi32(h + 16)),
                                                       _mm512_set1_epi32(S - 1));
                const __m512 lo = _mm512_permutex2var_ps(acc[0][r][j], from0, acc[1][r][j]);
                const __m512 hi = _mm512_permutex2var_ps(acc[0][r][j], from1, acc[1][r][j]);
                acc[0][r][j] = _mm512_add_ps(lo, hi);
            } else {
                acc[0][r][j] = _mm512_permutexvar_ps(from0, acc[0][r][j]);
            }
        }
    }

    UNROLLED for (int r = 0; r < R; r++) {
        float out[NW];  /* (NW,) dot products of A row r with the 4 W rows */
        _mm_storeu_ps(out, hsum4(acc[0][r][0], acc[0][r][1], acc[0][r][2], acc[0][r][3]));
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
