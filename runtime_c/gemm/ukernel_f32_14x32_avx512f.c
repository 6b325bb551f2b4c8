/* mxcc_ukernel_f32_14x32_avx512f: one 14 x 32 tile of C over k, AVX-512F intrinsics.
 *
 * Register plan (31 of 32 zmm): c[i][0..1] = row i of the tile as two 16-lane vectors (28 accumulators),
 * b[0..1] = row p of the packed B micro-panel, one broadcast of A[i, p] at a time. Per k step: 2 vector
 * loads + 14 broadcast loads (load ports, no shuffle port) feed 28 FMAs, so the two 512-bit FMA ports are
 * the bottleneck. The tile and the alternatives measured are in gemm_config.h.
 * Edge tiles: rows past m are computed (the packed A rows are zero) but never stored, up to 4 rows for
 * m <= 4 and 7 for m <= 7; a tile of 8 .. 13 rows computes exactly its m (Winograd's even tile blocks: 16
 * tiles on 16 threads are two blocks of 8, each the cost of 8 rows, not of 14; 1 thread, k = 128, 72-76 ns
 * a row for every m from 7 to 14); columns past n are masked off (_mm512_mask_storeu_ps), so C is never
 * touched outside the m x n corner. A tile with n <= 16 computes only its left 16 columns (half the FMAs).
 * beta == 0 stores without loading C.
 * Contract: gemm_internal.h; layouts: runtime_c/README.md. Compiled to nothing without AVX-512F
 * (gemm_f32.c then selects the AVX2 or the reference kernel, with their own panel geometry).
 */
#include "gemm_internal.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#include "epilogue_simd.h"

#define MR MXCC_GEMM_MR
#define NR MXCC_GEMM_NR
#define NV (NR / 16)  /* 16-lane vectors per row of the tile */
_Static_assert(MR == 14 && NR == 32, "the AVX-512 kernel reads 14 x 32 panels (gemm_config.h)");
/* The loops over the tile's rows and vectors are unrolled before GCC decides where acc lives: left to the
 * late unroller, acc stays an array on the stack, zeroed there and stored and reloaded around the k loop. */
#define UNROLLED _Pragma("GCC unroll 16")

/* The tile over k. WIDE == 0: only vector 0 of each row (a tile with n <= 16). R: the rows computed, MR,
 * HALF for a tile of m <= HALF rows (half the FMAs: ResNet's 7x7 layers are 49 = 3 x 14 + 7 pixel rows) or
 * QUARTER for m <= QUARTER.
 * m rows are stored (the rest of the accumulators are discarded), each with `mask` on its last vector: all
 * ones for a full tile. R, WIDE and FULL are constants at every call site (always_inline), so each variant
 * is straight-line code and the accumulator array lives in registers. Each stored element is the same
 * sequence of FMAs in every variant. */
#define HALF (MR / 2)
/* A last panel of 1-4 rows (169 = 12 x 14 + 1 pixels of a 13x13 image, the MLP's batch 256 = 18 x 14 + 4): 8
 * accumulators, two FMAs per cycle through their 4-cycle latency, against the half tile's 14 */
#define QUARTER 4
static inline __attribute__((always_inline)) void tile_14x32(const int R, const int WIDE, const int FULL, int k,
                                                              const float *restrict ap,
                                                              const float *restrict bp, float *restrict c,
                                                              long ldc, int m, __mmask16 mask, int beta)
{
    const int nv = WIDE ? NV : 1;
    /* the tile is written at the end; touching its rows now hides the miss behind the k loop */
    for (int i = 0; i < R; i++) {
        if (FULL || i < m) {
            _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
            if (WIDE) {
                _mm_prefetch((const char *)(c + i * ldc + NR - 1), _MM_HINT_T0);
            }
        }
    }
    __m512 acc[MR][NV];  /* (MR, NR) as MR rows of NV vectors, R of them used */
    UNROLLED for (int i = 0; i < R; i++) {
        UNROLLED for (int v = 0; v < nv; v++) {
            acc[i][v] = _mm512_setzero_ps();
        }
    }
    /* k loop: rank-1 update with column p of A and row p of B; unrolled so the pointer bumps and the
     * loop branch are amortized over 4 x 28 FMAs */
#pragma GCC unroll 4
    for (int p = 0; p < k; p++) {
        __m512 b[NV];
        UNROLLED for (int v = 0; v < nv; v++) {
            b[v] = _mm512_loadu_ps(bp + 16 * v);  /* B[p, 16v : 16v+16] */
        }
        UNROLLED for (int i = 0; i < R; i++) {
            const __m512 a = _mm512_set1_ps(ap[i]);  /* A[i, p] */
            UNROLLED for (int v = 0; v < nv; v++) {
                acc[i][v] = _mm512_fmadd_ps(a, b[v], acc[i][v]);
            }
        }
        ap += MR;
        bp += NR;
    }
    /* write back m rows; the last vector of each row is masked to the valid columns */
    UNROLLED for (int i = 0; i < R; i++) {
        if (!FULL && i >= m) {
            continue;   /* not break: a loop with one exit is unrolled, and acc indexed by constants only */
        }
        float *row = c + i * ldc;  /* (n,) */
        UNROLLED for (int v = 0; v < nv; v++) {
            const __mmask16 mv = (FULL || v < nv - 1) ? (__mmask16)0xFFFF : mask;
            __m512 x = acc[i][v];
            if (beta) {
                x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mv, row + 16 * v));
            }
            _mm512_mask_storeu_ps(row + 16 * v, mv, x);
        }
    }
}

/* an edge tile computing R rows (QUARTER, HALF, 8 .. 13 or MR), m of them stored, any n */
#define EDGE_TILE(R) \
    if (n > 16) tile_14x32(R, 1, 0, k, ap, bp, c, ldc, m, (__mmask16)((1u << (n - 16)) - 1), beta); \
    else tile_14x32(R, 0, 0, k, ap, bp, c, ldc, m, (__mmask16)((1u << n) - 1), beta); \
    return;

void mxcc_ukernel_f32_14x32_avx512f(int k, const float *ap, const float *bp, float *c, int ldc,
                                    int m, int n, int beta)
{
    if (m == MR && n == NR) {
        tile_14x32(MR, 1, 1, k, ap, bp, c, ldc, MR, 0xFFFF, beta);
        return;
    }
    if (m <= QUARTER) {
        EDGE_TILE(QUARTER)
    }
    if (m <= HALF) {
        EDGE_TILE(HALF)
    }
    switch (m) {
    case 8: EDGE_TILE(8)
    case 9: EDGE_TILE(9)
    case 10: EDGE_TILE(10)
    case 11: EDGE_TILE(11)
    case 12: EDGE_TILE(12)
    case 13: EDGE_TILE(13)
    default: EDGE_TILE(MR)
    }
}

/* The same tile with A read in place: R rows a, a + lda, ... (k floats each, A row-major), no packed
 * micro-panel. R = MR, or exactly m for a last tile of 8 .. 13 rows (rows past m do not exist here: nothing
 * past them is read; the packed kernel computes 14). Row i's element p is a broadcast from row i + p: the
 * rows are reached from five bases three rows apart (b, b + lda, b + 2 lda), which gcc keeps in registers as
 * base + index * scale, where 14 row pointers would spill. The FMAs per output element are the packed
 * kernel's, in its order. EPI: the epilogue's column bias and register activation before the store. */
static inline __attribute__((always_inline)) void tile_rows_14x32(const int R, const int WIDE, const int FULL,
                                                                   const int EPI, int k,
                                                                   const float *restrict a, long lda,
                                                                   const float *restrict bp, float *restrict c,
                                                                   long ldc, __mmask16 mask, int beta,
                                                                   const mxcc_epilogue *ep, int j0)
{
    const int nv = WIDE ? NV : 1;
    for (int i = 0; i < R; i++) {
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        if (WIDE) {
            _mm_prefetch((const char *)(c + i * ldc + NR - 1), _MM_HINT_T0);
        }
    }
    __m512 acc[MR][NV];
    UNROLLED for (int i = 0; i < R; i++) {
        UNROLLED for (int v = 0; v < nv; v++) {
            acc[i][v] = _mm512_setzero_ps();
        }
    }
    const float *bases[5];
    UNROLLED for (int g = 0; g < 5; g++) {
        bases[g] = 3 * g < R ? a + 3 * g * lda : a;
    }
#pragma GCC unroll 4
    for (int p = 0; p < k; p++) {
        __m512 b[NV];
        UNROLLED for (int v = 0; v < nv; v++) {
            b[v] = _mm512_loadu_ps(bp + 16 * v);
        }
        UNROLLED for (int i = 0; i < R; i++) {
            const __m512 x = _mm512_set1_ps(bases[i / 3][(i % 3) * lda + p]);   /* A[i, p] */
            UNROLLED for (int v = 0; v < nv; v++) {
                acc[i][v] = _mm512_fmadd_ps(x, b[v], acc[i][v]);
            }
        }
        bp += NR;
    }
    /* the epilogue's column bias (masked past n) */
    __m512 bias[NV];
    UNROLLED for (int v = 0; v < nv; v++) {
        const __mmask16 mv = (FULL || v < nv - 1) ? (__mmask16)0xFFFF : mask;
        bias[v] = EPI && ep->bias ? _mm512_maskz_loadu_ps(mv, ep->bias + j0 + 16 * v) : _mm512_setzero_ps();
    }
    UNROLLED for (int i = 0; i < R; i++) {
        float *row = c + i * ldc;
        UNROLLED for (int v = 0; v < nv; v++) {
            const __mmask16 mv = (FULL || v < nv - 1) ? (__mmask16)0xFFFF : mask;
            __m512 x = acc[i][v];
            if (beta) {
                x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mv, row + 16 * v));
            }
            if (EPI) {
                if (ep->bias) x = _mm512_add_ps(x, bias[v]);
                x = mxcc_act_f32(ep->act, ep->alpha, ep->lo, ep->hi, x);
            }
            _mm512_mask_storeu_ps(row + 16 * v, mv, x);
        }
    }
}

/* a last tile of exactly R rows (8 .. 13), any n */
#define ROWS_TAIL(R) \
    if (n > 16) tile_rows_14x32(R, 1, 0, ep != NULL, k, a, lda, bp, c, ldc, (__mmask16)((1u << (n - 16)) - 1), beta, \
                                ep, j0); \
    else tile_rows_14x32(R, 0, 0, ep != NULL, k, a, lda, bp, c, ldc, (__mmask16)((1u << n) - 1), beta, ep, j0); \
    return;

void mxcc_ukernel_f32_14x32_rows_avx512f(int k, const float *a, long lda, const float *bp, float *c, int ldc,
                                         int m, int n, int beta, const mxcc_epilogue *ep, int j0)
{
    switch (m) {
    case 8: ROWS_TAIL(8)
    case 9: ROWS_TAIL(9)
    case 10: ROWS_TAIL(10)
    case 11: ROWS_TAIL(11)
    case 12: ROWS_TAIL(12)
    case 13: ROWS_TAIL(13)
    default: break;
    }
    if (n == NR) {
        if (ep) tile_rows_14x32(MR, 1, 1, 1, k, a, lda, bp, c, ldc, 0xFFFF, beta, ep, j0);
        else tile_rows_14x32(MR, 1, 1, 0, k, a, lda, bp, c, ldc, 0xFFFF, beta, ep, j0);
    } else if (n > 16) {
        tile_rows_14x32(MR, 1, 0, ep != NULL, k, a, lda, bp, c, ldc, (__mmask16)((1u << (n - 16)) - 1), beta, ep, j0);
    } else {
        tile_rows_14x32(MR, 0, 0, ep != NULL, k, a, lda, bp, c, ldc, (__mmask16)((1u << n) - 1), beta, ep, j0);
    }
}
#undef ROWS_TAIL

#endif /* __AVX512F__ */
