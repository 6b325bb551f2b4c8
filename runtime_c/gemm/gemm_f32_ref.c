/* mxcc_gemm_f32_ref: the GEMM as its definition, a triple loop plus the shared epilogue.
 *
 * The oracle of tests/runtime/ (through gemm_sanity.c) and nothing else: no blocking, no threads,
 * one dot product per output accumulated in float in k order.
 */
#include "gemm_internal.h"

void mxcc_gemm_f32_ref(int trans_a, int trans_b, int M, int N, int K,
                       const float *A, int lda, const float *B, int ldb,
                       float beta, float *C, int ldc, const mxcc_epilogue *ep)
{
    /* A: (M, K) row stride lda, or (K, M) if trans_a     B: (K, N) row stride ldb, or (N, K) if trans_b
     * C: (M, N) row stride ldc */
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int p = 0; p < K; p++) {
                const float a = trans_a ? A[(long)p * lda + i] : A[(long)i * lda + p];  /* op(A)[i, p] */
                const float b = trans_b ? B[(long)j * ldb + p] : B[(long)p * ldb + j];  /* op(B)[p, j] */
                acc += a * b;
            }
            /* beta is 0 or 1: with 0, C is write-only (it may hold NaN) */
            C[(long)i * ldc + j] = beta != 0.0f ? C[(long)i * ldc + j] + acc : acc;
        }
    }
    mxcc_epilogue_apply_f32(ep, C, ldc, 0, 0, M, N);
}
