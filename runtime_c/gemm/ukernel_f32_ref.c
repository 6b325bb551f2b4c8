/* Portable reference micro-kernels: plain C, same contracts as the AVX2 kernels.
 *
 * They are the build for machines without AVX2+FMA (gemm_f32.c selects them at compile time) and the
 * oracles the AVX2 kernels are tested against (tests/runtime/test_gemm.py). Clarity first: the loops
 * read like the math, and the compiler is free to vectorize them.
 */
#include "gemm_internal.h"

#define MR MXCC_GEMM_MR
#define NR MXCC_GEMM_NR
/* The loop over the tile's rows is unrolled early (the columns are left to the vectorizer): otherwise the
 * SSE2 and AVX2 builds keep acc on the stack and load and store it every k step (10x slower there). */
#define UNROLLED _Pragma("GCC unroll 16")

/* One MR x NR tile of C over k, from packed panels.
 * ap: (k, MR)  packed A micro-panel, ap[p*MR + i] = A[i, p]
 * bp: (k, NR)  packed B micro-panel, bp[p*NR + j] = B[p, j]
 * c:  (m, n)   the valid corner of the C tile, row stride ldc */
void mxcc_ukernel_f32_ref(int k, const float *ap, const float *bp, float *c, int ldc,
                          int m, int n, int beta)
{
    /* accumulate the whole tile, padding included (padded rows/columns of the panels are zero), in a
     * local array so that C is touched only in the valid corner, and only read when beta == 1 */
    float acc[MR][NR] = {{0.0f}};  /* (MR, NR) */
    for (int p = 0; p < k; p++) {
        const float *a_col = ap + p * MR;  /* (MR,) column p of the A panel */
        const float *b_row = bp + p * NR;  /* (NR,) row p of the B panel */
        /* rank-1 update: every row i of the tile gets a_col[i] times the B row */
        UNROLLED for (int i = 0; i < MR; i++) {
            for (int j = 0; j < NR; j++) {
                acc[i][j] += a_col[i] * b_row[j];
            }
        }
    }
    /* write back the valid corner; beta == 0 overwrites without reading (C may hold NaN) */
    for (int i = 0; i < m; i++) {
        float *c_row = c + (long)i * ldc;  /* (n,) */
        for (int j = 0; j < n; j++) {
            c_row[j] = beta ? c_row[j] + acc[i][j] : acc[i][j];
        }
    }
}

/* Small-M GEMM with the second operand transposed: every output is a dot product of two rows.
 * a: (m, k) row stride lda     w: (n, k) row stride ldw     c: (m, n) row stride ldc */
void mxcc_ukernel_f32_rowdot_ref(int m, int n, int k, const float *a, int lda, const float *w, int ldw,
                                 float *c, int ldc, int beta)
{
    for (int i = 0; i < m; i++) {
        const float *a_row = a + (long)i * lda;  /* (k,) */
        float *c_row = c + (long)i * ldc;        /* (n,) */
        for (int j = 0; j < n; j++) {
            const float *w_row = w + (long)j * ldw;  /* (k,) */
            float dot = 0.0f;
            for (int p = 0; p < k; p++) {
                dot += a_row[p] * w_row[p];
            }
            c_row[j] = beta ? c_row[j] + dot : dot;
        }
    }
}
