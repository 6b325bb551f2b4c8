/* mxcc GEMM: the public contract of runtime_c/gemm/ (see runtime_c/README.md for the packed layouts).
 *
 *   C[M,N] = op(A)[M,K] . op(B)[K,N]  (+ C if beta == 1), then the epilogue, tile by tile.
 *
 * Row-major throughout. op(A) = A (A is M x K, lda >= K) or A^T (A stored K x M, lda >= M);
 * op(B) = B (B stored K x N, ldb >= N) or B^T (B stored N x K, ldb >= K): MXNet's FullyConnected weight
 * (num_hidden, in) is the TRANS case, so C = X . W^T needs no copy.
 *
 * No global state: the packing buffers live in a workspace the caller owns (one per mxcc context).
 */
#ifndef MXCC_GEMM_H
#define MXCC_GEMM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { MXCC_NO_TRANS = 0, MXCC_TRANS = 1 };

/* Activations applied in the epilogue. Values are stable: generated code uses the names. */
typedef enum mxcc_act {
    MXCC_ACT_NONE = 0,
    MXCC_ACT_RELU,      /* max(x, 0) */
    MXCC_ACT_SIGMOID,   /* 1 / (1 + exp(-x)) */
    MXCC_ACT_TANH,
    MXCC_ACT_SOFTRELU,  /* log(1 + exp(x)), computed stably */
    MXCC_ACT_SOFTSIGN,  /* x / (1 + |x|) */
    MXCC_ACT_LEAKY,     /* x > 0 ? x : alpha * x */
    MXCC_ACT_CLIP,      /* min(max(x, lo), hi): relu6 is clip(0, 6) */
} mxcc_act;

/* What happens to each finished C tile while it is still in cache, in this order:
 *   x = acc (+ C_old if beta == 1)
 *   x = x * scale[i] + shift[i]      (folded BatchNorm; scale/shift may each be NULL)
 *   x = x + bias[i]                  (bias may be NULL)
 *   x = x + residual[r, c]           (residual may be NULL; its own leading dimension)
 *   x = act(x)
 * where i is the column index (per_row == 0, FullyConnected) or the row index (per_row == 1,
 * convolution with output channels as rows). A NULL epilogue pointer means "nothing". */
typedef struct mxcc_epilogue {
    const float *bias;        /* [N] or [M] */
    const float *scale;       /* [N] or [M] */
    const float *shift;       /* [N] or [M] */
    int per_row;              /* 0: vectors index columns; 1: vectors index rows */
    const float *residual;    /* [M, ld_residual] */
    int ld_residual;
    mxcc_act act;
    float alpha;              /* LEAKY slope */
    float lo, hi;             /* CLIP bounds */
} mxcc_epilogue;

typedef struct mxcc_gemm_ws mxcc_gemm_ws;

/* Packing buffers for up to max_threads OpenMP threads (0 = omp_get_max_threads()). NULL on OOM. */
mxcc_gemm_ws *mxcc_gemm_ws_create(int max_threads);
void mxcc_gemm_ws_free(mxcc_gemm_ws *ws);

/* beta is 0 (C is write-only, never read) or 1 (accumulate into C). */
void mxcc_gemm_f32(mxcc_gemm_ws *ws, int trans_a, int trans_b, int M, int N, int K,
                   const float *A, int lda, const float *B, int ldb,
                   float beta, float *C, int ldc, const mxcc_epilogue *ep);

/* A batch of `batch` GEMMs of one shape, entry b at A + b * stride_a, B + b * stride_b, C + b * stride_c (in
 * floats), the same epilogue each (batch_dot). The entries are split between threads where they divide evenly
 * enough, else each GEMM splits its own work; the bits are mxcc_gemm_f32's for each entry either way. */
void mxcc_gemm_f32_batched(mxcc_gemm_ws *ws, long batch, long stride_a, long stride_b, long stride_c, int trans_a,
                           int trans_b, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                           float beta, float *C, int ldc, const mxcc_epilogue *ep);

/* ---- B packed once, used by many calls (a layer's weights, packed at bind time by <net>_prepare) ----------
 * mxcc_gemm_pack_b_f32 writes op(B) (K x N) as the micro-panels the kernels read: ceil(N / NR) panels of
 * (K, NR) floats, row-major, columns past N zero. NR is the build's register tile width (16 or 32), so the
 * size depends on the ISA: mxcc_gemm_packed_b_floats(K, N) gives it, and never exceeds
 * MXCC_GEMM_PACKED_B_FLOATS_MAX(K, N), the bound a compiler can size buffers with without knowing the ISA.
 * mxcc_gemm_f32_packed_b is mxcc_gemm_f32 with op(B) read from such panels (same contract otherwise): no
 * packing of B per call, and the panels are shared by all threads without a barrier. */
#define MXCC_GEMM_PACKED_B_FLOATS_MAX(K, N) ((long)(K) * (((long)(N) + 31) / 32 * 32))
long mxcc_gemm_packed_b_floats(int K, int N);
void mxcc_gemm_pack_b_f32(int trans_b, int K, int N, const float *B, int ldb, float *Bp);
/* Column n of the packed op(B) times scale[n] (N,): an inference BatchNorm's scale folded into a weight */
void mxcc_gemm_scale_packed_b_f32(int K, int N, float *Bp, const float *scale);
void mxcc_gemm_f32_packed_b(mxcc_gemm_ws *ws, int trans_a, int M, int N, int K, const float *A, int lda,
                            const float *Bp, float beta, float *C, int ldc, const mxcc_epilogue *ep);

/* ---- a few rows against B packed once: batch-1..4 FullyConnected (runtime_c/gemm/smallm_packed_f32.c) -----
 * C (M, N) = A (M, K) . op(B), op(B) from mxcc_gemm_pack_b_f32's panels, then the epilogue; beta 0 (C is
 * write-only), A read in place (row-major, lda). Each panel streams once per MXCC_GEMM_SMALLM_PACKED_MAX rows
 * with every A value broadcast against it: no packing, no horizontal sums. Any M works; past the bound the
 * general mxcc_gemm_f32_packed_b is faster. parallel: split the panels over OpenMP threads when the weight
 * pays for a fork; the result does not depend on the thread count. */
#define MXCC_GEMM_SMALLM_PACKED_MAX 4
void mxcc_gemm_f32_small_m_packed_b(int M, int N, int K, const float *A, int lda, const float *Bp, float *C,
                                    int ldc, const mxcc_epilogue *ep, int parallel);

/* The plain reference: triple loop + the same epilogue. The test oracle and nothing else. */
void mxcc_gemm_f32_ref(int trans_a, int trans_b, int M, int N, int K,
                       const float *A, int lda, const float *B, int ldb,
                       float beta, float *C, int ldc, const mxcc_epilogue *ep);

#ifdef __cplusplus
}
#endif
#endif /* MXCC_GEMM_H */
