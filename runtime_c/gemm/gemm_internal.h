/* Internal interfaces of runtime_c/gemm/: pack routines, micro-kernels and the epilogue.
 *
 * Not part of the public contract (mxcc_gemm.h); declared here so that gemm_f32.c can pick a kernel
 * and tests/runtime/test_gemm.py can call each piece against its reference twin.
 * Packed layouts and the micro-kernel contract are drawn in runtime_c/README.md.
 */
#ifndef MXCC_GEMM_INTERNAL_H
#define MXCC_GEMM_INTERNAL_H

#include "mxcc_gemm.h"
#include "gemm_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the build's kernels, chosen at compile time by the ISA the compiler targets -----------------------
 * One place for every user of the packed panels (gemm_f32.c, the convolution drivers in runtime_c/conv/). */
#if defined(__AVX512F__)
#define MXCC_UKERNEL_F32 mxcc_ukernel_f32_14x32_avx512f
#define MXCC_ROWDOT_F32 mxcc_ukernel_f32_rowdot_avx512f
#define MXCC_PACK_A_F32 mxcc_pack_a_f32_avx2
#define MXCC_PACK_B_F32 mxcc_pack_b_f32_avx2
#define MXCC_GEMM_MC MXCC_GEMM_AVX512F_MC
#define MXCC_GEMM_KC MXCC_GEMM_AVX512F_KC
#define MXCC_GEMM_NC MXCC_GEMM_AVX512F_NC
#else
#if defined(__AVX2__) && defined(__FMA__)
#define MXCC_UKERNEL_F32 mxcc_ukernel_f32_6x16_avx2fma
#define MXCC_ROWDOT_F32 mxcc_ukernel_f32_rowdot_avx2fma
#define MXCC_PACK_A_F32 mxcc_pack_a_f32_avx2
#define MXCC_PACK_B_F32 mxcc_pack_b_f32_avx2
#define MXCC_GEMM_MC MXCC_GEMM_AVX2FMA_MC
#define MXCC_GEMM_KC MXCC_GEMM_AVX2FMA_KC
#define MXCC_GEMM_NC MXCC_GEMM_AVX2FMA_NC
#else
#define MXCC_UKERNEL_F32 mxcc_ukernel_f32_ref
#define MXCC_ROWDOT_F32 mxcc_ukernel_f32_rowdot_ref
#define MXCC_PACK_A_F32 mxcc_pack_a_f32
#define MXCC_PACK_B_F32 mxcc_pack_b_f32
#define MXCC_GEMM_MC MXCC_GEMM_REF_MC
#define MXCC_GEMM_KC MXCC_GEMM_REF_KC
#define MXCC_GEMM_NC MXCC_GEMM_REF_NC
#endif
#endif  /* no #elif: benchmarks/_build_gemm.py reads these headers' conditions */

/* ---- packing (pack_f32.c) ------------------------------------------------------------------------------
 * Ap = op(A)[0:mc, 0:kc] as ceil(mc/MR) micro-panels, panel p = (kc, MR) row-major: Ap[p*MR*kc + k*MR + r]
 *      = op(A)[p*MR + r, k]; rows past mc are zero. `a` points at op(A)[0, 0] of the block.
 * Bp = op(B)[0:kc, 0:nc] as ceil(nc/NR) micro-panels, panel q = (kc, NR) row-major: Bp[q*NR*kc + k*NR + c]
 *      = op(B)[k, q*NR + c]; columns past nc are zero. `b` points at op(B)[0, 0] of the block. */
void mxcc_pack_a_f32(int trans_a, int mc, int kc, const float *a, int lda, float *ap);
void mxcc_pack_b_f32(int trans_b, int kc, int nc, const float *b, int ldb, float *bp);
/* The same with AVX2 register transposes for the gathering cases (pack_f32_avx2.c), for either geometry. */
#if defined(__AVX2__)
void mxcc_pack_a_f32_avx2(int trans_a, int mc, int kc, const float *a, int lda, float *ap);
void mxcc_pack_b_f32_avx2(int trans_b, int kc, int nc, const float *b, int ldb, float *bp);
#endif

/* ---- micro-kernels: one MR x NR tile of C over k --------------------------------------------------------
 *   C[0:m, 0:n] = (beta ? C[0:m, 0:n] : 0) + Ap[MR, k] . Bp[k, NR]  restricted to the valid m x n corner
 * ap: one packed A micro-panel (k, MR); bp: one packed B micro-panel (k, NR); c: C at the tile's corner,
 * row stride ldc. 1 <= m <= MR, 1 <= n <= NR, k >= 1, beta is 0 (C never read) or 1. Edge tiles (m < MR or
 * n < NR) never touch C outside the m x n corner. Each optimized kernel exists only in the builds whose
 * panel geometry it reads (gemm_config.h); the conditions below are those of its source file, and
 * benchmarks/_build_gemm.py evaluates them to declare to cffi only what the build defines. */
#if defined(__AVX512F__)
void mxcc_ukernel_f32_14x32_avx512f(int k, const float *ap, const float *bp, float *c, int ldc,
                                    int m, int n, int beta);
/* A tile of m rows with A read in place: rows a + i * lda, i < m, MXCC_UKERNEL_ROWS_MIN_M <= m <= MR
 * (MXCC_UKERNEL_ROWS_F32). ep: NULL, or an epilogue of a column bias and a register activation alone
 * (gemm_f32.c's ep_in_tile), applied before the tile is stored; j0: the tile's first column (its bias). */
void mxcc_ukernel_f32_14x32_rows_avx512f(int k, const float *a, long lda, const float *bp, float *c, int ldc,
                                         int m, int n, int beta, const mxcc_epilogue *ep, int j0);
#define MXCC_UKERNEL_ROWS_F32 mxcc_ukernel_f32_14x32_rows_avx512f
#define MXCC_UKERNEL_ROWS_MIN_M 8   /* fewer rows: the packed half-height tile (7 rows) costs no more */
#endif
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
void mxcc_ukernel_f32_6x16_avx2fma(int k, const float *ap, const float *bp, float *c, int ldc,
                                   int m, int n, int beta);
void mxcc_ukernel_f32_6x16_rows_avx2fma(int k, const float *a, long lda, const float *bp, float *c, int ldc,
                                        int m, int n, int beta, const mxcc_epilogue *ep, int j0);
#define MXCC_UKERNEL_ROWS_F32 mxcc_ukernel_f32_6x16_rows_avx2fma
#define MXCC_UKERNEL_ROWS_MIN_M 6   /* full tiles only */
#endif
void mxcc_ukernel_f32_ref(int k, const float *ap, const float *bp, float *c, int ldc,
                          int m, int n, int beta);

/* ---- small-M kernels: rows of A against rows of W, no packing --------------------------------------------
 *   C[0:m, 0:n] = (beta ? C : 0) + A[0:m, 0:k] . W[0:n, 0:k]^T
 * a: (m, k) row stride lda; w: (n, k) row stride ldw (FullyConnected weight); c: (m, n) row stride ldc.
 * 1 <= m <= MXCC_GEMM_SMALLM_MAX, n >= 1, k >= 1. No packed panels: the AVX2 one exists in AVX-512 builds too. */
#if defined(__AVX512F__)
void mxcc_ukernel_f32_rowdot_avx512f(int m, int n, int k, const float *a, int lda, const float *w, int ldw,
                                      float *c, int ldc, int beta);
#endif
#if defined(__AVX2__) && defined(__FMA__)
void mxcc_ukernel_f32_rowdot_avx2fma(int m, int n, int k, const float *a, int lda, const float *w, int ldw,
                                     float *c, int ldc, int beta);
#endif
void mxcc_ukernel_f32_rowdot_ref(int m, int n, int k, const float *a, int lda, const float *w, int ldw,
                                 float *c, int ldc, int beta);

/* ---- path choice (gemm_f32.c) --------------------------------------------------------------------------
 * 1 if mxcc_gemm_f32 runs C = op(A) . op(B) by the small-M kernels (MXCC_ROWDOT_F32) rather than the packed
 * loops. mxcc/ops/fully_connected.py mirrors it to decide whether a weight is packed at bind time
 * (tests/runtime/test_gemm_small_m.py compares the two). */
int mxcc_gemm_small_m(int M, int K, int trans_a, int trans_b);

/* ---- epilogue (epilogue_f32.c) ------------------------------------------------------------------------
 * Applies ep (see mxcc_gemm.h for the order of operations) to the finished block C[i0:i0+m, j0:j0+n];
 * c points at C[i0, j0]. i0/j0 index the per-row/per-column vectors and the residual. */
int mxcc_epilogue_is_noop(const mxcc_epilogue *ep);
void mxcc_epilogue_apply_f32(const mxcc_epilogue *ep, float *c, int ldc, int i0, int j0, int m, int n);
/* The activation alone on x[0:n], in place: the epilogue's last step, which kernels that apply the rest on
 * registers run over a stored piece when the activation has no register form (epilogue_simd.h). */
void mxcc_act_apply_f32(mxcc_act act, float alpha, float lo, float hi, float *x, long n);

#ifdef __cplusplus
}
#endif
#endif /* MXCC_GEMM_INTERNAL_H */
