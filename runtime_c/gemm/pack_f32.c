/* Packing: copy a block of op(A) into MR-row micro-panels and a block of op(B) into NR-column
 * micro-panels, in the order the micro-kernel reads them, zero-padding the ragged last panel.
 *
 * After packing, the micro-kernel walks both operands with unit stride whatever the transposition and
 * leading dimensions of the caller's matrices (BLIS's "pack once, stream many times"). Layouts:
 * gemm_internal.h and runtime_c/README.md. Plain C: the same code serves every ISA.
 */
#include "gemm_internal.h"

#define MR MXCC_GEMM_MR
#define NR MXCC_GEMM_NR

/* One A micro-panel: dst[k*MR + r] = op(A)[r, k] for r < mr (rows mr..MR-1 zero).
 * a: op(A)[0, 0] of the panel; op(A)[r, k] = a[r*lda + k] (no trans) or a[k*lda + r] (trans). */
static void pack_a_panel(int trans_a, int mr, int kc, const float *a, long lda, float *dst /* (kc, MR) */)
{
    if (!trans_a) {
        if (mr == MR) {
            /* the MR source rows are read in parallel with unit stride; each k gathers one column */
            for (int k = 0; k < kc; k++) {
                for (int r = 0; r < MR; r++) {
                    dst[k * MR + r] = a[r * lda + k];
                }
            }
            return;
        }
        for (int k = 0; k < kc; k++) {
            for (int r = 0; r < MR; r++) {
                dst[k * MR + r] = r < mr ? a[r * lda + k] : 0.0f;
            }
        }
    } else {
        /* op(A) = A^T: column k of the panel is MR contiguous floats of row k of A */
        for (int k = 0; k < kc; k++) {
            const float *src = a + k * lda;  /* (mr,) */
            for (int r = 0; r < MR; r++) {
                dst[k * MR + r] = r < mr ? src[r] : 0.0f;
            }
        }
    }
}

void mxcc_pack_a_f32(int trans_a, int mc, int kc, const float *a, int lda, float *ap)
{
    /* panel p holds rows p*MR .. p*MR+MR-1 of the block */
    for (int i = 0; i < mc; i += MR) {
        const int mr = mc - i < MR ? mc - i : MR;
        const float *src = trans_a ? a + i : a + (long)i * lda;
        pack_a_panel(trans_a, mr, kc, src, lda, ap + (long)i * kc);
    }
}

/* One B micro-panel: dst[k*NR + c] = op(B)[k, c] for c < nr (columns nr..NR-1 zero).
 * b: op(B)[0, 0] of the panel; op(B)[k, c] = b[k*ldb + c] (no trans) or b[c*ldb + k] (trans). */
static void pack_b_panel(int trans_b, int nr, int kc, const float *b, long ldb, float *dst /* (kc, NR) */)
{
    if (!trans_b) {
        /* row k of the panel is NR contiguous floats of row k of B */
        if (nr == NR) {
            for (int k = 0; k < kc; k++) {
                for (int c = 0; c < NR; c++) {
                    dst[k * NR + c] = b[k * ldb + c];
                }
            }
            return;
        }
        for (int k = 0; k < kc; k++) {
            for (int c = 0; c < NR; c++) {
                dst[k * NR + c] = c < nr ? b[k * ldb + c] : 0.0f;
            }
        }
    } else {
        /* op(B) = B^T (FullyConnected weight, N x K): a transpose. Read each of the nr source rows with
         * unit stride and scatter it down one column of the panel; the panel (kc x 64 B) stays in L1. */
        for (int c = 0; c < nr; c++) {
            const float *src = b + c * ldb;  /* (kc,) */
            for (int k = 0; k < kc; k++) {
                dst[k * NR + c] = src[k];
            }
        }
        for (int c = nr; c < NR; c++) {
            for (int k = 0; k < kc; k++) {
                dst[k * NR + c] = 0.0f;
            }
        }
    }
}

void mxcc_pack_b_f32(int trans_b, int kc, int nc, const float *b, int ldb, float *bp)
{
    /* panel q holds columns q*NR .. q*NR+NR-1 of the block */
    for (int j = 0; j < nc; j += NR) {
        const int nr = nc - j < NR ? nc - j : NR;
        const float *src = trans_b ? b + (long)j * ldb : b + j;
        pack_b_panel(trans_b, nr, kc, src, ldb, bp + (long)j * kc);
    }
}
