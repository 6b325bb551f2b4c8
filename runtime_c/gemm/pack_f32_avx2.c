/* AVX2 packing for the two transposing cases: op(A) = A (MR rows interleaved) and op(B) = B^T (the
 * FullyConnected weight). Same contract and layout as mxcc_pack_a_f32 / mxcc_pack_b_f32 (pack_f32.c),
 * which stay the portable versions and the oracles in tests/runtime/test_gemm.py.
 *
 * Why: both cases gather one float from each of MR (or NR) source rows per k. Scalar, that is one load
 * and one store per float; here 8 consecutive k of 8 rows are loaded as 8 vectors and transposed in
 * registers (8 x 8 transpose: 24 shuffles), 4-5x the scalar rate. It matters when B or A is reused by
 * few tiles: FullyConnected with a batch of 64 spent ~20% of its time transposing the weight.
 * The other two cases are plain copies, left to pack_f32.c. gemm_f32.c selects these functions.
 */
#include "gemm_internal.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define MR MXCC_GEMM_MR
#define NR MXCC_GEMM_NR
/* both geometries (6 x 16 for AVX2, 14 x 32 for AVX-512): A panels in up to two 8-row groups, B panels
 * in whole 8-column groups */
_Static_assert(MR <= 16 && NR % 8 == 0, "pack_f32_avx2.c: MR <= 16, NR a multiple of 8");

/* lanes < n on, for _mm256_maskstore_ps */
static inline __m256i lanes_below(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* r[j] (8 lanes) = row j; afterwards r[k] = column k: (row0[k], ..., row7[k]) */
static inline __attribute__((always_inline)) void transpose_8x8(__m256 r[8])
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* A full panel of op(A) = A: dst[k*MR + r] = a[r*lda + k], MR rows x kc. */
static void pack_a_panel(int kc, const float *a, long lda, float *dst /* (kc, MR) */)
{
    int k = 0;
    /* 8 k at a time: rows 8g .. 8g+7 (zero past MR) are transposed in registers; column k of the group is
     * stored as its valid lanes at dst + k*MR + 8g */
    for (; k + 8 <= kc; k += 8) {
        for (int g = 0; g < MR; g += 8) {
            const int rows = MR - g < 8 ? MR - g : 8;
            const __m256i valid = lanes_below(rows);
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = i < rows ? _mm256_loadu_ps(a + (g + i) * lda + k) : _mm256_setzero_ps();
            transpose_8x8(r);
#if defined(__AVX512VL__)
            /* vmaskmovps costs several uops per store; the AVX-512 masked store one (14 x 32 panels) */
            (void)valid;
            for (int j = 0; j < 8; j++) _mm256_mask_storeu_ps(dst + (k + j) * MR + g, (__mmask8)((1u << rows) - 1), r[j]);
#else
            for (int j = 0; j < 8; j++) _mm256_maskstore_ps(dst + (k + j) * MR + g, valid, r[j]);
#endif
        }
    }
    for (; k < kc; k++) {
        for (int i = 0; i < MR; i++) dst[k * MR + i] = a[i * lda + k];
    }
}

/* A full panel of op(B) = B^T: dst[k*NR + c] = b[c*ldb + k], NR source rows x kc. */
static void pack_bt_panel(int kc, const float *b, long ldb, float *dst /* (kc, NR) */)
{
    int k = 0;
    for (; k + 8 <= kc; k += 8) {
        /* source rows 8g .. 8g+7 become columns 8g .. 8g+7 of 8 panel rows */
        for (int g = 0; g < NR; g += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(b + (g + i) * ldb + k);
            transpose_8x8(r);
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(dst + (k + j) * NR + g, r[j]);
        }
    }
    for (; k < kc; k++) {
        for (int c = 0; c < NR; c++) dst[k * NR + c] = b[c * ldb + k];
    }
}

void mxcc_pack_a_f32_avx2(int trans_a, int mc, int kc, const float *a, int lda, float *ap)
{
    if (trans_a) {
        mxcc_pack_a_f32(trans_a, mc, kc, a, lda, ap);  /* a contiguous copy: nothing to gain */
        return;
    }
    const int full = mc / MR * MR;
    for (int i = 0; i < full; i += MR) {
        pack_a_panel(kc, a + (long)i * lda, lda, ap + (long)i * kc);
    }
    if (full < mc) {
        mxcc_pack_a_f32(trans_a, mc - full, kc, a + (long)full * lda, lda, ap + (long)full * kc);
    }
}

void mxcc_pack_b_f32_avx2(int trans_b, int kc, int nc, const float *b, int ldb, float *bp)
{
    if (!trans_b) {
        mxcc_pack_b_f32(trans_b, kc, nc, b, ldb, bp);  /* a contiguous copy: nothing to gain */
        return;
    }
    const int full = nc / NR * NR;
    for (int j = 0; j < full; j += NR) {
        pack_bt_panel(kc, b + (long)j * ldb, ldb, bp + (long)j * kc);
    }
    if (full < nc) {
        mxcc_pack_b_f32(trans_b, kc, nc - full, b + (long)full * ldb, ldb, bp + (long)full * kc);
    }
}

#endif /* __AVX2__ && __FMA__ */
