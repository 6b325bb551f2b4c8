/* mxcc_ukernel_f32_6x16_avx2fma: one 6 x 16 tile of C over k, AVX2 + FMA intrinsics.
 *
 * Register plan (15 of 16 ymm): c[i][0..1] = row i of the tile as two 8-lane vectors (12 accumulators),
 * b0/b1 = row p of the packed B micro-panel, one broadcast of A[i, p] at a time. Per k step: 2 loads,
 * 6 broadcasts, 12 FMAs, so the two FMA ports are the bottleneck (BLIS haswell sgemm uses the same tile).
 * Edge tiles (m < 6 or n < 16) compute 3 rows for m <= 3 and exactly m of 4 or 5, whole rows of 16 columns
 * (m >= 3) stored in place and others on a stack tile whose valid corner is copied, so C is never touched
 * outside it (Winograd's 16 tiles are panels of 6 + 6 + 4 rows; the MLP's batch 64 is 10 x 6 + 4).
 * beta == 0 stores without loading C.
 * Contract: gemm_internal.h; layouts: runtime_c/README.md. Compiled only for AVX2+FMA without AVX-512F:
 * an AVX-512 build packs 14 x 32 panels (gemm_config.h) and uses mxcc_ukernel_f32_14x32_avx512f; without
 * AVX2+FMA, gemm_f32.c selects mxcc_ukernel_f32_ref.
 */
#include "gemm_internal.h"

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#include <immintrin.h>

#include "epilogue_simd.h"

#define MR 6
#define NR 16
_Static_assert(MR == MXCC_GEMM_MR && NR == MXCC_GEMM_NR, "6x16 kernel reads MXCC_GEMM_MR x NR panels");

/* The full 6 x 16 tile, or only its left half (6 x 8) when WIDE == 0: an edge tile with n <= 8 then
 * costs half the FMAs; R = 3: only rows 0..2 (an edge tile of m <= 3 rows, half the FMAs again), R = 4 or
 * 5: those rows (each computed element the same FMA sequence). ap: (k, 6) packed A, bp: (k, 16) packed B,
 * c: (R, 16 or 8) row stride ldc. R and WIDE are constants at each call site (always_inline): straight-line
 * code per variant. */
/* ROWS: A read in place instead, row i at ap + i * lda (A row-major, k floats per row), no packed panel. */
#define A_AT(i) (ROWS ? ap + (i) * lda : ap + (i))
static inline __attribute__((always_inline)) void tile_6x16(const int R, const int WIDE, const int ROWS, int k,
                                                             const float *restrict ap, long lda,
                                                             const float *restrict bp, float *restrict c,
                                                             long ldc, int beta, const mxcc_epilogue *ep, int j0)
{
    /* the tile is written at the end; touching its R rows now hides the miss behind the k loop */
    for (int i = 0; i < R; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + NR - 1), _MM_HINT_T0);
    }
    __m256 c00 = _mm256_setzero_ps(), c01 = _mm256_setzero_ps();
    __m256 c10 = _mm256_setzero_ps(), c11 = _mm256_setzero_ps();
    __m256 c20 = _mm256_setzero_ps(), c21 = _mm256_setzero_ps();
    __m256 c30 = _mm256_setzero_ps(), c31 = _mm256_setzero_ps();
    __m256 c40 = _mm256_setzero_ps(), c41 = _mm256_setzero_ps();
    __m256 c50 = _mm256_setzero_ps(), c51 = _mm256_setzero_ps();

    /* k loop: rank-1 update of the tile with column p of A and row p of B; unrolled by 4 so the
     * loop overhead and the pointer bumps are amortized over 48 FMAs */
#pragma GCC unroll 4
    for (int p = 0; p < k; p++) {
        const __m256 b0 = _mm256_loadu_ps(bp);      /* B[p, 0:8]  */
        if (WIDE) {
            const __m256 b1 = _mm256_loadu_ps(bp + 8);  /* B[p, 8:16] */
            __m256 a;
            a = _mm256_broadcast_ss(A_AT(0)); c00 = _mm256_fmadd_ps(a, b0, c00); c01 = _mm256_fmadd_ps(a, b1, c01);
            a = _mm256_broadcast_ss(A_AT(1)); c10 = _mm256_fmadd_ps(a, b0, c10); c11 = _mm256_fmadd_ps(a, b1, c11);
            a = _mm256_broadcast_ss(A_AT(2)); c20 = _mm256_fmadd_ps(a, b0, c20); c21 = _mm256_fmadd_ps(a, b1, c21);
            if (R > 3) {
                a = _mm256_broadcast_ss(A_AT(3)); c30 = _mm256_fmadd_ps(a, b0, c30); c31 = _mm256_fmadd_ps(a, b1, c31);
            }
            if (R > 4) {
                a = _mm256_broadcast_ss(A_AT(4)); c40 = _mm256_fmadd_ps(a, b0, c40); c41 = _mm256_fmadd_ps(a, b1, c41);
            }
            if (R > 5) {
                a = _mm256_broadcast_ss(A_AT(5)); c50 = _mm256_fmadd_ps(a, b0, c50); c51 = _mm256_fmadd_ps(a, b1, c51);
            }
        } else {
            c00 = _mm256_fmadd_ps(_mm256_broadcast_ss(A_AT(0)), b0, c00);
            c10 = _mm256_fmadd_ps(_mm256_broadcast_ss(A_AT(1)), b0, c10);
            c20 = _mm256_fmadd_ps(_mm256_broadcast_ss(A_AT(2)), b0, c20);
            if (R > 3) c30 = _mm256_fmadd_ps(_mm256_broadcast_ss(A_AT(3)), b0, c30);
            if (R > 4) c40 = _mm256_fmadd_ps(_mm256_broadcast_ss(A_AT(4)), b0, c40);
            if (R > 5) c50 = _mm256_fmadd_ps(_mm256_broadcast_ss(A_AT(5)), b0, c50);
        }
        ap += ROWS ? 1 : MR;
        bp += NR;
    }

    if (beta) {
        c00 = _mm256_add_ps(c00, _mm256_loadu_ps(c + 0 * ldc));
        c10 = _mm256_add_ps(c10, _mm256_loadu_ps(c + 1 * ldc));
        c20 = _mm256_add_ps(c20, _mm256_loadu_ps(c + 2 * ldc));
        if (R > 3) c30 = _mm256_add_ps(c30, _mm256_loadu_ps(c + 3 * ldc));
        if (R > 4) c40 = _mm256_add_ps(c40, _mm256_loadu_ps(c + 4 * ldc));
        if (R > 5) c50 = _mm256_add_ps(c50, _mm256_loadu_ps(c + 5 * ldc));
        if (WIDE) {
            c01 = _mm256_add_ps(c01, _mm256_loadu_ps(c + 0 * ldc + 8));
            c11 = _mm256_add_ps(c11, _mm256_loadu_ps(c + 1 * ldc + 8));
            c21 = _mm256_add_ps(c21, _mm256_loadu_ps(c + 2 * ldc + 8));
            if (R > 3) c31 = _mm256_add_ps(c31, _mm256_loadu_ps(c + 3 * ldc + 8));
            if (R > 4) c41 = _mm256_add_ps(c41, _mm256_loadu_ps(c + 4 * ldc + 8));
            if (R > 5) c51 = _mm256_add_ps(c51, _mm256_loadu_ps(c + 5 * ldc + 8));
        }
    }
    if (ep) {   /* a full tile's column bias and activation (ROWS tiles only: the driver's choice) */
        const __m256 z = _mm256_setzero_ps();
        const __m256 b0 = ep->bias ? _mm256_loadu_ps(ep->bias + j0) : z;
        const __m256 b1 = ep->bias && WIDE ? _mm256_loadu_ps(ep->bias + j0 + 8) : z;
#define EPI_ROW(x0, x1) do { \
            if (ep->bias) { x0 = _mm256_add_ps(x0, b0); if (WIDE) x1 = _mm256_add_ps(x1, b1); } \
            x0 = mxcc_act_f32(ep->act, ep->alpha, ep->lo, ep->hi, x0); \
            if (WIDE) x1 = mxcc_act_f32(ep->act, ep->alpha, ep->lo, ep->hi, x1); \
        } while (0)
        EPI_ROW(c00, c01); EPI_ROW(c10, c11); EPI_ROW(c20, c21);
        if (R > 3) EPI_ROW(c30, c31);
        if (R > 4) EPI_ROW(c40, c41);
        if (R > 5) EPI_ROW(c50, c51);
#undef EPI_ROW
    }
    _mm256_storeu_ps(c + 0 * ldc, c00);
    _mm256_storeu_ps(c + 1 * ldc, c10);
    _mm256_storeu_ps(c + 2 * ldc, c20);
    if (R > 3) _mm256_storeu_ps(c + 3 * ldc, c30);
    if (R > 4) _mm256_storeu_ps(c + 4 * ldc, c40);
    if (R > 5) _mm256_storeu_ps(c + 5 * ldc, c50);
    if (WIDE) {
        _mm256_storeu_ps(c + 0 * ldc + 8, c01);
        _mm256_storeu_ps(c + 1 * ldc + 8, c11);
        _mm256_storeu_ps(c + 2 * ldc + 8, c21);
        if (R > 3) _mm256_storeu_ps(c + 3 * ldc + 8, c31);
        if (R > 4) _mm256_storeu_ps(c + 4 * ldc + 8, c41);
        if (R > 5) _mm256_storeu_ps(c + 5 * ldc + 8, c51);
    }
}

/* Edge tiles of either kind: the full tile on a stack tile, then its valid m x n corner copied into c. */
static inline __attribute__((always_inline)) void edge_6x16(const int ROWS, int k, const float *ap, long lda,
                                                             const float *bp, float *c, int ldc, int m, int n,
                                                             int beta)
{
    /* edge tile: compute the full tile into a stack tile, then copy the valid m x n corner */
    float tile[MR * NR] __attribute__((aligned(32)));  /* (MR, NR) */
    if (beta) {
        /* zero the padding too: it is added to the discarded accumulators and must be defined */
        for (int i = 0; i < MR * NR; i++) {
            tile[i] = 0.0f;
        }
        for (int i = 0; i < m; i++) {
            for (int j = 0; j < n; j++) {
                tile[i * NR + j] = c[(long)i * ldc + j];
            }
        }
    }
    /* R rows of the tile computed (3 for m <= 3, else m, in-place A rows always MR), the rest left as they are;
     * columns 8..15 only for n > 8 */
#define EDGE_ROWS(R) \
    do { \
        if (n > NR / 2) tile_6x16(R, 1, ROWS, k, ap, lda, bp, tile, NR, beta, NULL, 0); \
        else tile_6x16(R, 0, ROWS, k, ap, lda, bp, tile, NR, beta, NULL, 0); \
    } while (0)
    if (m <= 3 && !ROWS)
        EDGE_ROWS(3);
    else if (m == 4 && !ROWS)
        EDGE_ROWS(4);
    else if (m == 5 && !ROWS)
        EDGE_ROWS(5);
    else
        EDGE_ROWS(MR);
#undef EDGE_ROWS
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < n; j++) {
            c[(long)i * ldc + j] = tile[i * NR + j];
        }
    }
}

void mxcc_ukernel_f32_6x16_avx2fma(int k, const float *ap, const float *bp, float *c, int ldc,
                                   int m, int n, int beta)
{
    if (m == MR && n == NR)
        tile_6x16(MR, 1, 0, k, ap, 0, bp, c, ldc, beta, NULL, 0);
    else if (m == 5 && n == NR)   /* whole rows: stored in place, no stack tile */
        tile_6x16(5, 1, 0, k, ap, 0, bp, c, ldc, beta, NULL, 0);
    else if (m == 4 && n == NR)
        tile_6x16(4, 1, 0, k, ap, 0, bp, c, ldc, beta, NULL, 0);
    else if (m == 3 && n == NR)
        tile_6x16(3, 1, 0, k, ap, 0, bp, c, ldc, beta, NULL, 0);
    else
        edge_6x16(0, k, ap, 0, bp, c, ldc, m, n, beta);
}

/* A full-height tile with A read in place (MXCC_UKERNEL_ROWS_F32): rows a + i * lda, i < MR = m. */
void mxcc_ukernel_f32_6x16_rows_avx2fma(int k, const float *a, long lda, const float *bp, float *c, int ldc,
                                        int m, int n, int beta, const mxcc_epilogue *ep, int j0)
{
    (void)m;   /* MR: MXCC_UKERNEL_ROWS_MIN_M */
    if (n == NR && ep) {
        tile_6x16(MR, 1, 1, k, a, lda, bp, c, ldc, beta, ep, j0);
    } else if (n == NR) {
        tile_6x16(MR, 1, 1, k, a, lda, bp, c, ldc, beta, NULL, 0);
    } else {
        edge_6x16(1, k, a, lda, bp, c, ldc, MR, n, beta);
        if (ep) mxcc_epilogue_apply_f32(ep, c, ldc, 0, j0, MR, n);   /* the stored corner, as the driver would */
    }
}

#endif /* __AVX2__ && __FMA__ && !__AVX512F__ */
