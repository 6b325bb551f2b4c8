/* mxcc_gemm_f32_small_m_packed_b: C (M, N) = A (M, K) . op(B) for a batch of 1..MXCC_GEMM_SMALLM_PACKED_MAX
 * rows, op(B) prepacked at bind time (mxcc_gemm_pack_b_f32: panels of NR columns, (K, NR) each, row-major).
 *
 * Batch-1 inference of a FullyConnected layer: the weight is the traffic, every element used once per row of
 * A. The unpacked small-M path (rowdot kernels) reads W's rows and forms dot products, which end in one
 * horizontal sum per output; on a weight that sits in L1/L2 (128 -> 64: 32 KB) those sums cost as much as the
 * FMAs. Here the panels are streamed in order and each A value is broadcast against NR columns at once:
 * per k, R broadcasts + 2P vector loads feed 2PR FMAs into accumulators that are the outputs themselves.
 * Tile: R rows of A (1 or 2) x P panels (up to 4 on AVX-512 = 128 columns, 2 on AVX2 = 32; AVX2 has 16
 * registers). With one row the k loop keeps two accumulator sets (even and odd k, added at the end) so that
 * 16 FMA chains hide the FMA latency; that split depends on R only, which depends on M only, so the sums
 * are the same whatever the thread count or the panel grouping (a column's arithmetic never depends on P).
 * Threads split the panels; A (M x K, small) is read by all.
 */
#include <string.h>

#include <omp.h>

#include "gemm_internal.h"
#include "../parallel.h"
#include "../simd.h"

#define NR MXCC_GEMM_NR

#if MXCC_SIMD_VECTOR
#define VL MXCC_SIMD_SIZE_F32   /* lanes of the build's vector (simd.h) */
#if defined(__AVX512F__)
#define P_MAX 4
#else
#define P_MAX 2
#endif
#define VP (NR / VL)  /* vectors per panel: 2 on both */
_Static_assert(NR == 2 * VL, "the small-M packed kernel assumes panels of two vectors");

#define UNROLLED _Pragma("GCC unroll 8")

/* out (R, P*NR; row stride ldo) = a (R, K; lda) . panels bp, bp + ps, ... (P of them, (K, NR) each).
 * R, P are compile-time constants at every call site (always_inline), so acc stays in registers. */
static inline __attribute__((always_inline)) void tile(const int R, const int P, int K, const float *a, int lda,
                                                       const float *bp, long ps, float *out, int ldo)
{
    const int SETS = R == 1 ? 2 : 1;
    mxcc_simd_f32 acc[2][2][P_MAX * VP];  /* acc[s][r][v] */
    UNROLLED for (int s = 0; s < SETS; s++)
        UNROLLED for (int r = 0; r < R; r++)
            UNROLLED for (int v = 0; v < P * VP; v++) acc[s][r][v] = mxcc_zero_f32();
#define STEP(S, KK)                                                                                         \
    {                                                                                                       \
        mxcc_simd_f32 b[P_MAX * VP];                                                                        \
        UNROLLED for (int p = 0; p < P; p++)                                                                \
            UNROLLED for (int h = 0; h < VP; h++)                                                           \
                b[p * VP + h] = mxcc_loadu_f32(bp + p * ps + (long)(KK) * NR + h * VL);                     \
        UNROLLED for (int r = 0; r < R; r++) {                                                              \
            const mxcc_simd_f32 x = mxcc_set1_f32(a[(long)r * lda + (KK)]);                                 \
            UNROLLED for (int v = 0; v < P * VP; v++) acc[S][r][v] = mxcc_fmadd_f32(x, b[v], acc[S][r][v]); \
        }                                                                                                   \
    }
    int k = 0;
    if (SETS == 2) {
        for (; k + 2 <= K; k += 2) {
            STEP(0, k)
            STEP(1, k + 1)
        }
    }
    for (; k < K; k++) STEP(0, k)  /* R > 1: every k; R == 1: the last k of an odd K (set 0, like the even ones) */
#undef STEP
    UNROLLED for (int r = 0; r < R; r++)
        UNROLLED for (int v = 0; v < P * VP; v++)
            mxcc_storeu_f32(out + (long)r * ldo + v * VL,
                            SETS == 2 ? mxcc_add_f32(acc[0][r][v], acc[1][r][v]) : acc[0][r][v]);
}

/* panels [q0, q1) for every row: out (M, (q1 - q0) * NR), row stride ldo */
static void panels(int M, int K, const float *a, int lda, const float *bp, int q0, int q1, float *out, int ldo)
{
    const long ps = (long)K * NR;
    for (int q = q0; q < q1; q += P_MAX) {
        const int np = q1 - q < P_MAX ? q1 - q : P_MAX;
        const float *b = bp + q * ps;
        float *o = out + (q - q0) * NR;
        for (int i = 0; i < M;) {
            const int R = M - i >= 2 ? 2 : 1;  /* rows 2 at a time, a lone last row alone: a function of M only */
            const float *ai = a + (long)i * lda;
            float *oi = o + (long)i * ldo;
#define CASE(RR, PP) tile(RR, PP, K, ai, lda, b, ps, oi, ldo)
            if (R == 2) {
                switch (np) {
                case 1: CASE(2, 1); break;
                case 2: CASE(2, 2); break;
#if P_MAX == 4
                case 3: CASE(2, 3); break;
                default: CASE(2, 4); break;
#endif
                }
            } else {
                switch (np) {
                case 1: CASE(1, 1); break;
                case 2: CASE(1, 2); break;
#if P_MAX == 4
                case 3: CASE(1, 3); break;
                default: CASE(1, 4); break;
#endif
                }
            }
#undef CASE
            i += R;
        }
    }
}

#else  /* plain C: the same sums in the same order (even k, odd k for one row), for any NR */

#define P_MAX 4

static void panels(int M, int K, const float *a, int lda, const float *bp, int q0, int q1, float *out, int ldo)
{
    const long ps = (long)K * NR;
    for (int q = q0; q < q1; q++) {
        const float *b = bp + q * ps;
        float *o = out + (q - q0) * NR;
        for (int i = 0; i < M; i++) {
            const int lone = i == M - 1 && M % 2 == 1;  /* the vector kernels' R = 1 tile: even and odd k apart */
            float s0[NR] = {0}, s1[NR] = {0};
            for (int k = 0; k < K; k++) {
                float *s = lone && (k & 1) ? s1 : s0;
                const float x = a[(long)i * lda + k];
                for (int c = 0; c < NR; c++) s[c] += x * b[(long)k * NR + c];
            }
            for (int c = 0; c < NR; c++) o[(long)i * ldo + c] = lone ? s0[c] + s1[c] : s0[c];
        }
    }
}
#endif

/* C[:, panels q0..q1) (+ epilogue): whole panels into a tile buffer, then the valid columns to C (N need not be
 * a multiple of NR) */
static void panel_range(int M, int N, int K, const float *A, int lda, const float *Bp, float *C, int ldc,
                        const mxcc_epilogue *ep, int q0, int q1)
{
    float buf[MXCC_GEMM_SMALLM_PACKED_MAX * P_MAX * NR] __attribute__((aligned(64)));
    for (int q = q0; q < q1; q += P_MAX) {
        const int qe = q1 - q < P_MAX ? q1 : q + P_MAX;
        const int ldo = (qe - q) * NR, j0 = q * NR, nj = (qe * NR < N ? qe * NR : N) - j0;
        for (int i0 = 0; i0 < M; i0 += MXCC_GEMM_SMALLM_PACKED_MAX) {   /* any M; fast for the small ones */
            const int mi = M - i0 < MXCC_GEMM_SMALLM_PACKED_MAX ? M - i0 : MXCC_GEMM_SMALLM_PACKED_MAX;
            panels(mi, K, A + (long)i0 * lda, lda, Bp, q, qe, buf, ldo);
            for (int i = 0; i < mi; i++)
                memcpy(C + (long)(i0 + i) * ldc + j0, buf + (long)i * ldo, (size_t)nj * sizeof(float));
        }
        if (ep)
            mxcc_epilogue_apply_f32(ep, C + j0, ldc, 0, j0, M, nj);
    }
}

/* one thread's range of panels (mxcc_parallel_chunks) */
typedef struct panels_job {
    int M, N, K;
    const float *A;
    int lda;
    const float *Bp;
    float *C;
    int ldc;
    const mxcc_epilogue *ep;
    int npanels, parts;
} panels_job;

static void panels_part(void *arg, long part, int worker)
{
    const panels_job *j = arg;
    (void)worker;
    panel_range(j->M, j->N, j->K, j->A, j->lda, j->Bp, j->C, j->ldc, j->ep, (int)mxcc_split_at(j->npanels, j->parts, (int)part),
                (int)mxcc_split_at(j->npanels, j->parts, (int)part + 1));
}

void mxcc_gemm_f32_small_m_packed_b(int M, int N, int K, const float *A, int lda, const float *Bp, float *C,
                                    int ldc, const mxcc_epilogue *ep, int parallel)
{
    if (M <= 0 || N <= 0)
        return;
    if (mxcc_epilogue_is_noop(ep))
        ep = NULL;
    if (K <= 0) {
        for (int i = 0; i < M; i++) memset(C + (long)i * ldc, 0, (size_t)N * sizeof(float));
        mxcc_epilogue_apply_f32(ep, C, ldc, 0, 0, M, N);
        return;
    }
    const int npanels = (N + NR - 1) / NR;
    /* a fork pays when the weight is large (the unpacked small-M path's rule: work counted as >= 16 rows) */
    int nt = parallel && omp_get_level() == 0 && !mxcc_pool_in_chunk()
           ? mxcc_threads_for(2.0 * 16 * N * K, mxcc_pool_threads(omp_get_max_threads())) : 1;
    if (nt > npanels)
        nt = npanels;
    if (nt <= 1) {
        /* no parallel region at all: entering one, even of 1 thread, costs ~0.3 us (a 64 -> 10 layer's whole time) */
        panel_range(M, N, K, A, lda, Bp, C, ldc, ep, 0, npanels);
        return;
    }
    const panels_job job = {M, N, K, A, lda, Bp, C, ldc, ep, npanels, nt};
    mxcc_parallel_chunks(nt, nt, panels_part, (void *)&job);   /* a part per thread; a late thread's by the caller */
}
