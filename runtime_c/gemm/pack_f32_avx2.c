/* AVX2 packing for the two transposing cases: op(A) = A (MR rows interleaved) and op(B) = B^T (the
 * FullyConnected weight). Same contract and layout as mxcc_pack_a_f32 / mxcc_pack_b_f32 (pack_f32.c),
 * which stay the portable versions and the oracles in tests/runtime/test_gemm.py.
 *
 * Why: both cases gather one float from each of MR (or NR) source rows per k. Scalar, that is one load
 * and one store per float; here 8 consecutive k of 8 rows are loaded and transposed in registers (8 x 8
 * transpose: 16 shuffles), 4-5x the scalar rate. It matters when B or A is reused by few tiles:
 * FullyConnected with a batch of 64 spent ~20% of its time transposing the weight. Written for AVX2, it
 * packs the 6 x 16 panels of the AVX2 build and the 14 x 32 panels of the AVX-512 build (a ragged last A
 * panel too, zero-padded).
 * The other two cases are plain copies, left to pack_f32.c. gemm_f32.c selects these functions.
 */
#include "gemm_internal.h"
#include "../simd.h"

#if defined(__AVX2__)  /* no FMA needed: -mavx512f alone implies AVX2 but not FMA */

#define MR MXCC_GEMM_MR
#define NR MXCC_GEMM_NR
/* both geometries (6 x 16 for AVX2, 14 x 32 for AVX-512): A panels in up to two 8-row groups, B panels
 * in whole 8-column groups */
_Static_assert(MR <= 16 && NR % 8 == 0, "pack_f32_avx2.c: MR <= 16, NR a multiple of 8");

/* 4 floats at p, or zeros for a padding row (nothing is read) */
static inline __m128 load4(const float *p, int valid)
{
    return valid ? _mm_loadu_ps(p) : _mm_setzero_ps();
}

/* r[j] = column j of the 8 x 8 block at src (row stride ld): (src[0*ld + j], ..., src[7*ld + j]); rows at
 * or past `rows` read as zero. The 128-bit lane exchange of a register transpose is done by the loads
 * (row i's first 4 floats with row i+4's in one register, 128-bit loads + vinsertf128), leaving two
 * in-lane 4 x 4 transposes: 16 shuffles instead of 24. Shuffles are the bottleneck of this loop (one
 * shuffle port): 64 x 128 x 784 spent 14% of its time transposing W with the 24-shuffle version. */
static inline __attribute__((always_inline)) void load_transpose_8x8(const float *src, long ld, int rows,
                                                                      __m256 r[8])
{
    __m256 t[8];  /* t[i] = (row i, row i+4) floats 0..3; t[i+4] = the same for floats 4..7 (i < 4) */
    for (int i = 0; i < 4; i++) {
        const float *lo = src + i * ld, *hi = src + (i + 4) * ld;
        t[i] = _mm256_insertf128_ps(_mm256_castps128_ps256(load4(lo, i < rows)), load4(hi, i + 4 < rows), 1);
        t[i + 4] = _mm256_insertf128_ps(_mm256_castps128_ps256(load4(lo + 4, i < rows)),
                                        load4(hi + 4, i + 4 < rows), 1);
    }
    for (int h = 0; h < 2; h++) {
        /* a 4 x 4 transpose in each 128-bit lane of t[4h .. 4h+3] gives columns 4h .. 4h+3 */
        const __m256 *q = t + 4 * h;
        const __m256 u0 = _mm256_unpacklo_ps(q[0], q[1]), u1 = _mm256_unpackhi_ps(q[0], q[1]);
        const __m256 u2 = _mm256_unpacklo_ps(q[2], q[3]), u3 = _mm256_unpackhi_ps(q[2], q[3]);
        r[4 * h + 0] = _mm256_shuffle_ps(u0, u2, _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * h + 1] = _mm256_shuffle_ps(u0, u2, _MM_SHUFFLE(3, 2, 3, 2));
        r[4 * h + 2] = _mm256_shuffle_ps(u1, u3, _MM_SHUFFLE(1, 0, 1, 0));
        r[4 * h + 3] = _mm256_shuffle_ps(u1, u3, _MM_SHUFFLE(3, 2, 3, 2));
    }
}

/* One panel of op(A) = A: dst[k*MR + r] = a[r*lda + k] for r < mr, zero for mr <= r < MR; kc columns. */
static inline __attribute__((always_inline)) void pack_a_panel(int mr, int kc, const float *a, long lda,
                                                                float *dst /* (kc, MR) */)
{
    int k = 0;
    /* 8 k at a time: rows 8g .. 8g+7 (zero past mr) are transposed in registers; column k of the group is
     * stored as its lanes below MR at dst + k*MR + 8g */
    for (; k + 8 <= kc; k += 8) {
        for (int g = 0; g < MR; g += 8) {
            const int lanes = MR - g < 8 ? MR - g : 8;
            __m256 r[8];
            load_transpose_8x8(a + g * lda + k, lda, mr - g, r);
#if defined(__AVX512VL__)
            /* vmaskmovps costs several uops per store; the AVX-512 masked store one (14 x 32 panels) */
            for (int j = 0; j < 8; j++) _mm256_mask_storeu_ps(dst + (k + j) * MR + g, (__mmask8)((1u << lanes) - 1), r[j]);
#else
            const __m256i valid = mxcc_tail_f32x8(lanes);
            for (int j = 0; j < 8; j++) _mm256_maskstore_ps(dst + (k + j) * MR + g, valid, r[j]);
#endif
        }
    }
    for (; k < kc; k++) {
        for (int i = 0; i < MR; i++) dst[k * MR + i] = i < mr ? a[i * lda + k] : 0.0f;
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
            load_transpose_8x8(b + g * ldb + k, ldb, 8, r);
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
        pack_a_panel(MR, kc, a + (long)i * lda, lda, ap + (long)i * kc);  /* MR constant: no row tests */
    }
    if (full < mc) {
        pack_a_panel(mc - full, kc, a + (long)full * lda, lda, ap + (long)full * kc);
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

#endif /* __AVX2__ */
