/* mxcc_gemm_f32: the BLIS five-loop GEMM around one micro-kernel, the small-M path, and the workspace.
 *
 *   loop 5  jc  step NC  columns of C and B        B panel (KC x NC) packed once per pc step
 *   loop 4  pc  step KC  the K dimension           rank-KC updates; the epilogue runs after the last one
 *   loop 3  ic  step MC  rows of C and A           A block (MC x KC) packed per thread, lives in L2
 *   loop 2  jr  step NR  one B micro-panel         stays in L1 across loop 1
 *   loop 1  ir  step MR  one A micro-panel         -> micro-kernel on one MR x NR tile of C
 *                        (balanced heights up to MR with B prepacked on AVX-512: row_height)
 *
 * Threads: one job per call, split ic_ways x jr_ways (choose_ways): B micro-panels (loop 2) on 2 threads and
 * whenever M is small, rows of C (loop 3) when the panels run short; or, when that grid balances badly, the
 * MR x NR tiles in row-major ranges (grid_ranges). Split only by panels, each part packs just the B panels
 * it multiplies (no barrier). On mxcc's pool (and with B prepacked) row groups pack their own B too; as an
 * OpenMP region a team split by rows shares the packed B (each packs a slice, then a barrier; two B buffers
 * alternate so one barrier per pc step suffices). Serial when the problem is small or when called from
 * inside a parallel region or a pool job. Small M with B transposed (FullyConnected) skips packing: see gemm_small_m.
 * The ISA is chosen at compile time in gemm_internal.h (MXCC_UKERNEL_F32 ...): the AVX-512F kernels if the
 * compiler targets AVX-512F, else the AVX2+FMA kernels if it targets those, else the reference kernels.
 * B may also come prepacked (mxcc_gemm_f32_packed_b: weights packed once at bind time): then loop 4 reads
 * its slices in place and nothing is packed or shared for B; and a row-major A is read in place too, by the
 * build's in-place kernel (MXCC_UKERNEL_ROWS_F32: tiles of MXCC_UKERNEL_ROWS_MIN_M rows or more, a column
 * bias and a register activation on its registers), as MLAS does: only a last, shorter micro-panel is packed,
 * or the whole block where A's rows would alias in L1 (a_rows_alias). A batch of at most SMALLM_MAX rows hands
 * a last panel of 1-2 rows to the panel kernel of smallm_packed_f32.c (mxcc_gemm_f32_packed_b).
 */
#include <omp.h>
#include <stdlib.h>

#include "epilogue_simd.h"
#include "gemm_internal.h"
#include "../parallel.h"

#define UKERNEL MXCC_UKERNEL_F32
#ifdef MXCC_UKERNEL_ROWS_F32
#define UKERNEL_ROWS MXCC_UKERNEL_ROWS_F32
#endif
#define ROWDOT MXCC_ROWDOT_F32
#define PACK_A MXCC_PACK_A_F32
#define PACK_B MXCC_PACK_B_F32
#define MC MXCC_GEMM_MC
#define KC MXCC_GEMM_KC
#define NC MXCC_GEMM_NC
#define MR MXCC_GEMM_MR
#define NR MXCC_GEMM_NR
_Static_assert(MC % MR == 0 && NC % NR == 0, "MC/NC must be multiples of MR/NR");

/* ---- workspace ------------------------------------------------------------------------------------- */

/* One slot per thread: its packed A block, and a B panel (shared by the team in a parallel call:
 * slots 0 and 1 are the two alternating B buffers; used privately by a serial call). */
typedef struct gemm_slot {
    float *a_pack;    /* (MC, KC) as MC/MR micro-panels */
    float *b_pack;    /* (KC, NC) as NC/NR micro-panels */
    omp_lock_t lock;  /* held by a serial call made from inside a parallel region */
} gemm_slot;

struct mxcc_gemm_ws {
    int nslots;
    gemm_slot *slots;  /* (nslots,) */
};

static float *alloc_floats(size_t n)
{
    /* 64 B: micro-panels start on cache lines (NR*4 = 64 B rows); C11 wants size % alignment == 0 */
    const size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes);
}

mxcc_gemm_ws *mxcc_gemm_ws_create(int max_threads)
{
    const int nslots = max_threads > 0 ? max_threads : omp_get_max_threads();
    mxcc_gemm_ws *ws = calloc(1, sizeof *ws);
    if (ws == NULL) {
        return NULL;
    }
    ws->slots = calloc((size_t)nslots, sizeof *ws->slots);
    if (ws->slots == NULL) {
        free(ws);
        return NULL;
    }
    ws->nslots = nslots;
    for (int s = 0; s < nslots; s++) {
        /* NOTE: large blocks are mmap'ed and only touched pages become resident, so slots of threads that
         * never run cost address space, not memory. */
        ws->slots[s].a_pack = alloc_floats((size_t)MC * KC);
        ws->slots[s].b_pack = alloc_floats((size_t)KC * NC);
        omp_init_lock(&ws->slots[s].lock);
        if (ws->slots[s].a_pack == NULL || ws->slots[s].b_pack == NULL) {
            ws->nslots = s + 1;  /* free what exists, including this slot */
            mxcc_gemm_ws_free(ws);
            return NULL;
        }
    }
    return ws;
}

void mxcc_gemm_ws_free(mxcc_gemm_ws *ws)
{
    if (ws == NULL) {
        return;
    }
    for (int s = 0; s < ws->nslots; s++) {
        free(ws->slots[s].a_pack);
        free(ws->slots[s].b_pack);
        omp_destroy_lock(&ws->slots[s].lock);
    }
    free(ws->slots);
    free(ws);
}

/* ---- the problem, as every thread sees it ------------------------------------------------------------ */

typedef struct gemm_problem {
    int trans_a, trans_b, M, N, K;
    const float *A;  /* (M, K) stride lda, or (K, M) if trans_a */
    const float *B;  /* (K, N) stride ldb, or (N, K) if trans_b */
    const float *Bp; /* or NULL: op(B) prepacked whole (mxcc_gemm_pack_b_f32), panel q at Bp + q * NR * K */
    float *C;        /* (M, N) stride ldc */
    long lda, ldb, ldc;
    int beta;                  /* 0 or 1 */
    const mxcc_epilogue *ep;   /* NULL when it does nothing */
} gemm_problem;

static int ceil_div(int a, int b) { return (a + b - 1) / b; }
static int min_int(int a, int b) { return a < b ? a : b; }

/* [begin, end) of part `part` when `n` units are split into `parts` nearly equal ranges (parallel.h) */
static void split_range(int n, int parts, int part, int *begin, int *end)
{
    *begin = (int)mxcc_split_at(n, parts, part);
    *end = (int)mxcc_split_at(n, parts, part + 1);
}

/* Pointers to op(A)[i, p] and op(B)[p, j] */
static const float *a_at(const gemm_problem *g, int i, int p)
{
    return g->trans_a ? g->A + p * g->lda + i : g->A + i * g->lda + p;
}
static const float *b_at(const gemm_problem *g, int p, int j)
{
    return g->trans_b ? g->B + j * g->ldb + p : g->B + p * g->ldb + j;
}

/* The rows a micro-kernel computes for a row panel of m <= MR rows: its edge tiles compute a few fixed heights
 * (ukernel_f32_14x32_avx512f.c: 4 for m <= 4, 7 for m <= 7, else m; ukernel_f32_6x16_avx2fma.c: 3 for m <= 3,
 * else m), the reference kernel always MR. codegen/splits.py gemm_panel_rows models it. */
static int panel_rows(int m)
{
#if defined(__AVX512F__)
    return m <= 4 ? 4 : m <= 7 ? 7 : m;
#elif defined(__AVX2__) && defined(__FMA__)
    return m <= 3 ? 3 : m;
#else
    (void)m;
    return MR;
#endif
}

/* How evenly a ways split of M rows into row groups (ranges of row panels) loads them: the lower of the panels
 * per group (the measure the scores below were tuned with) and the rows computed per group, where a short last
 * panel counts what its edge tile costs (M = 16 on AVX-512 is a panel of 14 and one of 2, which a 2 x 1 grid
 * gives one thread each: 14 rows against 4, though one panel each). */
static double rows_balance(int M, int ways)
{
    const int units = ceil_div(M, MR);
    const double by_panels = (double)units / (ways * ceil_div(units, ways));
    double total = 0.0, most = 0.0;
    for (int g = 0; g < ways; g++) {
        int b, e;
        split_range(units, ways, g, &b, &e);
        double rows = 0.0;
        for (int u = b; u < e; u++) rows += panel_rows(min_int(MR, M - u * MR));
        total += rows;
        most = rows > most ? rows : most;
    }
    const double by_rows = most > 0.0 ? total / (ways * most) : 0.0;
    return by_rows < by_panels ? by_rows : by_panels;
}

/* How a team of nt threads splits loop 3 (ic, rows of C) and loop 2 (jr, B micro-panels). Score of a
 * split = rows_balance times the fraction of useful column tiles per thread, times:
 *  - 0.97 if rows are split (ic_ways > 1): those threads share the packed B, with a barrier per pc step
 *    and reads of panels packed on the other core. With 2 threads, the jr split measured as fast or
 *    faster on the FullyConnected shapes (best of 4-8 alternating runs: 146 vs 131 GFLOP/s at
 *    256x128x784, 144 vs 134 at 100x512x800) and within noise on squares; it also has no barrier.
 *  - 1 / (1 + 0.02 (jr_ways - 1)): every thread of a row group packs the same A block, which adds up
 *    on many threads;
 *  - min(1, columns per thread / 64): a thread with fewer than 64 columns of B (4 micro-panels of the
 *    6x16 kernel, 2 of the 14x32 one) re-packs A for little work. Counted in columns, not panels: with
 *    NR = 32, 784->128 b64 on 2 threads split rows 3 + 2 panels (99 GFLOP/s) instead of columns 64 + 64. */
static void choose_ways(int M, int N, int nt, int b_prepacked, int *ic_ways, int *jr_ways)
{
    const int units_n = ceil_div(min_int(N, NC), NR);
    double best = -1.0;
    *ic_ways = nt;
    *jr_ways = 1;
    for (int a = 1; a <= nt; a++) {
        if (nt % a != 0) {
            continue;
        }
        const int b = nt / a;
        const double eff_m = rows_balance(M, a);
        const double eff_n = (double)units_n / (b * ceil_div(units_n, b));
        const double per_thread = (double)units_n * NR / b / 16.0;  /* in 16-column units, whatever NR */
        /* prepacked B: a row split shares nothing and needs no barrier */
        double score = eff_m * eff_n * (a > 1 && !b_prepacked ? 0.97 : 1.0) / (1.0 + 0.02 * (b - 1));
        score *= per_thread < 4.0 ? per_thread / 4.0 : 1.0;
        if (score > best) {
            best = score;
            *ic_ways = a;
            *jr_ways = b;
        }
    }
}

/* Whether nt parts should take ranges of the MR x NR tiles in row-major order (each part up to 3 rectangles:
 * mxcc_grid_rects) rather than cells of the ic_ways x jr_ways grid: when the grid leaves threads idle or
 * unevenly loaded (below 0.9 of its tiles per thread: 19 row panels on 8 row groups, MLP b256 on 16 threads)
 * and ranges balance better. Only for one column block (N <= NC), and only where no part waits for another.
 * A range packs the A panels of the rows it touches, at most two more than a grid cell. codegen/splits.py
 * models this. */
static int grid_ranges(int M, int N, int nt, int ic_ways, int jr_ways)
{
    const long um = ceil_div(M, MR), un = ceil_div(N, NR), tiles = um * un;
    if (N > NC || tiles < nt)
        return 0;
    const double cells = (double)ic_ways * ceil_div((int)um, ic_ways) * jr_ways * ceil_div((int)un, jr_ways);
    const double grid = tiles / cells;
    const double ranges = (double)tiles / ((double)nt * ((tiles + nt - 1) / nt));
    return grid < 0.9 && ranges > grid + 0.02;
}

/* The height of the micro-panels of a block of mc rows: MR, the last one shorter; or, B prepacked and A
 * row-major on AVX-512 (FullyConnected), the block in ceil(mc / MR) panels of balanced heights (M = 16: 8 + 8,
 * 29: 10 + 10 + 9): that kernel costs the same per row from 7 rows to 14 (ukernel_f32_14x32_avx512f.c), so no
 * rows are computed past the block, where a short last panel computes 4 or 7. Zen 4, 1 thread, B prepacked:
 * 1024->512 M = 16 189 -> 147 us, 29 350 -> 267, 3072->768 M = 16 866 -> 685 (gemm_config.h, SMALLM_PACKED_TAIL,
 * for what those rows took before). */
static int row_height(int mc, int fc)
{
#if defined(__AVX512F__)
    /* every panel but a block's last then reads A in place: at least ceil((MR + 1) / 2) rows */
    _Static_assert((MR + 2) / 2 >= MXCC_UKERNEL_ROWS_MIN_M, "balanced panels of the in-place kernel's heights");
    return fc && mc > MR ? ceil_div(mc, ceil_div(mc, MR)) : MR;
#else
    (void)mc;
    (void)fc;
    return MR;
#endif
}

/* Whether A's rows, read in place by the AVX-512 kernel, would evict each other from L1: a row stride that is
 * a multiple of 4 KiB puts the same column of every row in one cache set (64 sets of 8 or 12 ways), more rows
 * than ways for a tile of 9-14. Zen 4, 1 thread, B prepacked, in place / A packed, us: 1024->512 M = 14 164 /
 * 129, 64 673 / 590; 3072->768 M = 14 762 / 586, 64 3198 / 2693; 2048->2048 M = 28 2895 / 2215; a stride of
 * 2 KiB multiples (K = 512, 1536, 2560) and K = 784, 800 within 2% either way; a block of 8 rows or fewer
 * (one tile) faster in place (2048->512 M = 8 150 / 219). The AVX2 kernel's 6 rows stay in place (A packed
 * instead: 11 shapes, K = 768..4096, M = 12..256, within -14%..+7% and mostly 5%: no rule found). */
#ifdef UKERNEL_ROWS
static int a_rows_alias(const gemm_problem *g, int mc)
{
#if defined(__AVX512F__)
    return (long)g->lda * (long)sizeof(float) % 4096 == 0 && mc > 8;
#else
    (void)g;
    (void)mc;
    return 0;
#endif
}
#endif

/* The five loops, run by thread `tid` of a team of `nt` split ic_ways x jr_ways (nt == 1: serial).
 * a_pack: (MC, KC) this thread's; b_pack[2]: two (KC, NC) buffers shared by the team (the same buffer
 * twice when serial). */
static void gemm_loops(const gemm_problem *g, int nt, int tid, int ic_ways, int jr_ways, const mxcc_rect *rect,
                       float *a_pack, float *const b_pack[2], float *b_private, int share_b)
{
    const int M = g->M, N = g->N, K = g->K;
    /* balanced steps: K = 784 runs as 2 x 392, not 384 + 384 + 16 */
    const int kc_step = ceil_div(K, ceil_div(K, KC));
    const int nc_step = ceil_div(ceil_div(N, ceil_div(N, NC)), NR) * NR;
    /* this thread's rows (whole MR panels) and their MC blocks: of the grid, or the rectangle given */
    int m_begin, m_end;
    if (rect) {
        m_begin = (int)rect->r0;
        m_end = (int)rect->r1;
    } else {
        split_range(ceil_div(M, MR), ic_ways, tid / jr_ways, &m_begin, &m_end);
    }
    m_begin *= MR;
    m_end = min_int(m_end * MR, M);
    const int rows = m_end - m_begin;
#ifdef UKERNEL_ROWS
    /* an epilogue the in-place kernel applies on its registers: column bias, a register activation */
    const int ep_in_tile = g->ep && !g->ep->per_row && !g->ep->scale && !g->ep->shift && !g->ep->residual
                           && mxcc_act_in_registers(g->ep->act);
#endif
    const int mc_step = rows > 0 ? ceil_div(ceil_div(rows, ceil_div(rows, MC)), MR) * MR : MC;
    int iter = 0;

    /* loop 5 (jc): NC-wide column blocks of C */
    for (int jc = 0; jc < N; jc += nc_step) {
        const int nc = min_int(nc_step, N - jc);
        const int panels_n = ceil_div(nc, NR);
        /* loop 4 (pc): KC-deep slices of K, each a rank-kc update of the whole column block */
        for (int pc = 0; pc < K; pc += kc_step, iter++) {
            const int kc = min_int(kc_step, K - pc);
            float *bp = b_pack[iter & 1];  /* (kc, nc) packed; alternates so one barrier is enough */
            /* this thread's B micro-panels in loop 2 */
            int q_begin, q_end;
            if (rect) {   /* one column block (grid_ranges) */
                q_begin = (int)rect->c0;
                q_end = (int)rect->c1;
            } else {
                split_range(panels_n, jr_ways, tid % jr_ways, &q_begin, &q_end);
            }
            /* pack B[pc:pc+kc, jc:jc+nc]. When the team splits only loop 2 (ic_ways == 1), each thread packs
             * just the micro-panels it multiplies: private, no barrier. Otherwise threads of different row
             * groups need the same panels: each packs a slice, then a barrier. */
            const int shared_b = share_b && ic_ways > 1 && !g->Bp && !rect;
            int p_begin = q_begin, p_end = q_end;
            if (g->Bp) {
                /* prepacked whole: nothing to pack; panels of this column block start at Bp + jc * K */
                bp = (float *)g->Bp + (long)jc * K;
                p_begin = p_end = 0;
            } else if (shared_b) {
                split_range(panels_n, nt, tid, &p_begin, &p_end);
            } else {
                /* NOTE: private panels go to this thread's own buffer: with no barrier, a team buffer would be
                 * overwritten by a thread one jc block ahead while a slower one still reads it (the split
                 * of the last, narrower block differs) */
                bp = b_private - (long)q_begin * NR * kc;   /* so that bp + q * NR * kc is this thread's */
            }
            if (p_begin < p_end) {
                PACK_B(g->trans_b, kc, min_int(p_end * NR, nc) - p_begin * NR,
                       b_at(g, pc, jc + p_begin * NR), (int)g->ldb, bp + (long)p_begin * NR * kc);
            }
            if (shared_b) {
                /* B is complete; also, everyone has finished reading the other buffer (iteration - 1) */
#pragma omp barrier
            }
            const int beta = pc == 0 ? g->beta : 1;
            const int last = pc + kc == K;
            if (q_begin == q_end) {
                continue;
            }
            /* loop 3 (ic): MC-tall row blocks of this thread's rows */
            for (int ic = m_begin; ic < m_end; ic += mc_step) {
                const int mc = min_int(mc_step, m_end - ic);
                /* micro-panels of h rows (row_height), panel p packed at a_pack + p * MR * kc */
                const int h = row_height(mc, g->Bp && !g->trans_a), panels_m = ceil_div(mc, h);
                const int last_rows = mc - (panels_m - 1) * h;
#ifdef UKERNEL_ROWS
                /* B prepacked, A row-major: tiles of MXCC_UKERNEL_ROWS_MIN_M rows or more read A in place,
                 * unless its rows alias in L1 (a_rows_alias); only a last micro-panel of fewer rows is packed
                 * (the packed kernel reads its missing rows, which must then read as zero, not past A's end) */
                const int in_place = g->Bp && !g->trans_a && !a_rows_alias(g, mc);
#else
                const int in_place = 0;
                (void)last_rows;
#endif
                if (in_place) {
#ifdef UKERNEL_ROWS
                    if (last_rows < MXCC_UKERNEL_ROWS_MIN_M)
                        PACK_A(g->trans_a, last_rows, kc, a_at(g, ic + mc - last_rows, pc), (int)g->lda,
                               a_pack + (long)(panels_m - 1) * MR * kc);
#endif
                } else if (h == MR) {
                    PACK_A(g->trans_a, mc, kc, a_at(g, ic, pc), (int)g->lda, a_pack);
                } else {
                    for (int p = 0; p < panels_m; p++)
                        PACK_A(g->trans_a, min_int(h, mc - p * h), kc, a_at(g, ic + p * h, pc), (int)g->lda,
                               a_pack + (long)p * MR * kc);
                }
                /* loop 2 (jr): NR-wide micro-panels of the B panel (this thread's share) */
                for (int q = q_begin; q < q_end; q++) {
                    const int jr = q * NR;
                    const int n = min_int(NR, nc - jr);
                    const float *bq = g->Bp ? bp + (long)jr * K + (long)pc * NR  /* rows pc.. of a (K, NR) panel */
                                            : bp + (long)jr * kc;              /* (kc, NR) */
                    /* loop 1 (ir): micro-panels of the A block */
                    for (int ir = 0; ir < mc; ir += h) {
                        const int m = min_int(h, mc - ir);
                        float *c = g->C + (ic + ir) * g->ldc + jc + jr;  /* (m, n) tile of C */
#ifdef UKERNEL_ROWS
                        if (in_place && m >= MXCC_UKERNEL_ROWS_MIN_M) {
                            const int in_tile = last && ep_in_tile;   /* bias and activation on registers */
                            UKERNEL_ROWS(kc, a_at(g, ic + ir, pc), g->lda, bq, c, (int)g->ldc, m, n, beta,
                                         in_tile ? g->ep : NULL, jc + jr);
                            if (in_tile)
                                continue;
                        } else
#endif
                        UKERNEL(kc, a_pack + (long)(ir / h) * MR * kc, bq, c, (int)g->ldc, m, n, beta);
                        if (last && g->ep) {
                            /* the tile is final and still in L1: bias, activation, ... now */
                            mxcc_epilogue_apply_f32(g->ep, c, (int)g->ldc, ic + ir, jc + jr, m, n);
                        }
                    }
                }
            }
        }
    }
}

/* ---- small M: rows of A against rows of W (C = A . W^T), no packing -------------------------------- */

/* columns [j0, j1) of C: rows of A against W rows j0 .. j1-1, then the epilogue */
static void small_m_columns(const gemm_problem *g, int j0, int j1)
{
    float *c = g->C + j0;  /* (M, j1 - j0) */
    ROWDOT(g->M, j1 - j0, g->K, g->A, (int)g->lda, g->B + j0 * g->ldb, (int)g->ldb, c, (int)g->ldc, g->beta);
    if (g->ep) {
        mxcc_epilogue_apply_f32(g->ep, c, (int)g->ldc, 0, j0, g->M, j1 - j0);
    }
}

typedef struct small_m_job {
    const gemm_problem *g;
    int parts;
} small_m_job;

/* part `part` of the columns, in groups of 4 (the rowdot register tile) */
static void small_m_part(void *arg, long part, int worker)
{
    const small_m_job *j = arg;
    (void)worker;
    int j0, j1;
    split_range(ceil_div(j->g->N, 4), j->parts, (int)part, &j0, &j1);
    j0 *= 4;
    j1 = min_int(j1 * 4, j->g->N);
    if (j0 < j1) {
        small_m_columns(j->g, j0, j1);
    }
}

static void gemm_small_m(const gemm_problem *g, int nt)
{
    if (nt == 1) {
        /* no parallel job at all: even an empty one costs, 10% of batch-1 784->128 */
        small_m_columns(g, 0, g->N);
        return;
    }
    small_m_job job = {g, nt};
    mxcc_parallel_chunks(nt, nt, small_m_part, &job);
}

/* A split with no barrier (B prepacked, or each part packing its own B panels): part `part` of the
 * ic_ways x jr_ways grid or of the row-major tile ranges, on the buffers of whichever thread runs it
 * (mxcc_parallel_chunks). */
typedef struct loops_job {
    const gemm_problem *g;
    mxcc_gemm_ws *ws;
    int nt, ic_ways, jr_ways;
    int ranges;   /* 1: part t is range t of the tiles in row-major order (grid_ranges), not a grid cell */
} loops_job;

static void loops_part(void *arg, long part, int worker)
{
    const loops_job *j = arg;
    float *own = j->ws->slots[worker].b_pack;
    float *b_pack[2] = {own, own};   /* not read: no part shares B */
    if (!j->ranges) {
        gemm_loops(j->g, j->nt, (int)part, j->ic_ways, j->jr_ways, NULL, j->ws->slots[worker].a_pack, b_pack, own, 0);
        return;
    }
    mxcc_rect r[3];
    const int n = mxcc_grid_rects(ceil_div(j->g->M, MR), ceil_div(j->g->N, NR), j->nt, (int)part, r);
    for (int i = 0; i < n; i++)
        gemm_loops(j->g, 1, 0, 1, 1, &r[i], j->ws->slots[worker].a_pack, b_pack, own, 0);
}

/* ---- entry point ------------------------------------------------------------------------------------- */

/* The small-M path's condition (gemm_config.h: SMALLM_MAX, SMALLM_MAX_A; B not prepacked is the caller's part):
 * FullyConnected's C = A . W^T with few rows of A, all of them small enough to stay in L1/L2. Static for
 * gemm_run (an exported function is not inlined in a -fPIC build); exported as mxcc_gemm_small_m. */
static int small_m_path(int M, int K, int trans_a, int trans_b)
{
    return M <= MXCC_GEMM_SMALLM_MAX && (long)M * K <= MXCC_GEMM_SMALLM_MAX_A && !trans_a && trans_b;
}

int mxcc_gemm_small_m(int M, int K, int trans_a, int trans_b)
{
    return small_m_path(M, K, trans_a, trans_b);
}

/* K == 0: the product is empty, C = beta * C, then the epilogue */
static void gemm_k0(const gemm_problem *g)
{
    if (!g->beta) {
        for (int i = 0; i < g->M; i++) {
            for (int j = 0; j < g->N; j++) {
                g->C[i * g->ldc + j] = 0.0f;
            }
        }
    }
    mxcc_epilogue_apply_f32(g->ep, g->C, (int)g->ldc, 0, 0, g->M, g->N);
}

/* Serial call from inside someone else's parallel region: borrow a free slot (the thread's own first). */
static void gemm_serial_nested(const gemm_problem *g, mxcc_gemm_ws *ws)
{
    const int home = omp_get_thread_num() % ws->nslots;
    int s = home;
    while (!omp_test_lock(&ws->slots[s].lock)) {
        s = (s + 1) % ws->nslots;
        if (s == home) {
            omp_set_lock(&ws->slots[s].lock);  /* every slot busy: wait for ours */
            break;
        }
    }
    float *b_pack[2] = {ws->slots[s].b_pack, ws->slots[s].b_pack};
    gemm_loops(g, 1, 0, 1, 1, NULL, ws->slots[s].a_pack, b_pack, ws->slots[s].b_pack, 0);
    omp_unset_lock(&ws->slots[s].lock);
}

/* Both entry points: threads, then the small-M path, the nested serial path or the five loops. */
static void gemm_run(mxcc_gemm_ws *ws, const gemm_problem *g)
{
    const int M = g->M, N = g->N, K = g->K;
    if (M <= 0 || N <= 0) {
        return;
    }
    if (K <= 0) {
        gemm_k0(g);
        return;
    }
    /* threads: none inside a parallel region; otherwise as many as the work pays for */
    const int nested = omp_get_level() > 0 || mxcc_pool_in_chunk();
    const int small_m = !g->Bp && small_m_path(M, K, g->trans_a, g->trans_b);
    const double flops = 2.0 * (small_m && M < 16 ? 16 : M) * N * K;
    const int most = small_m ? omp_get_max_threads() : min_int(omp_get_max_threads(), ws->nslots);
    const int nt = nested ? 1 : mxcc_threads_for(flops, mxcc_pool_threads(most));

    if (small_m) {
        gemm_small_m(g, nt);
        return;
    }
    if (nested) {
        gemm_serial_nested(g, ws);
        return;
    }
    if (nt == 1) {
        float *b_pack[2] = {ws->slots[0].b_pack, ws->slots[0].b_pack};
        gemm_loops(g, 1, 0, 1, 1, NULL, ws->slots[0].a_pack, b_pack, ws->slots[0].b_pack, 0);
        return;
    }
    int ic_ways, jr_ways;
    choose_ways(M, N, nt, g->Bp != NULL, &ic_ways, &jr_ways);
    if (g->Bp || ic_ways == 1 || mxcc_pool_selected()) {
        /* no part waits for another (on the pool, row groups pack their own B panels rather than share them
         * behind a barrier: an OpenMP team beside the pool would cost more than the repacking, ~ic_ways/2M
         * of the work): parts any thread may run, a late thread's by the caller */
        loops_job job = {g, ws, nt, ic_ways, jr_ways, grid_ranges(M, N, nt, ic_ways, jr_ways)};
        mxcc_parallel_chunks(nt, nt, loops_part, &job);
        return;
    }
#pragma omp parallel num_threads(nt)
    {
        /* the team may be smaller than asked (OMP_DYNAMIC, thread limits): split what we got */
        const int team = omp_get_num_threads(), tid = omp_get_thread_num();
        int icw = ic_ways, jrw = jr_ways;
        if (team != nt) {
            choose_ways(M, N, team, g->Bp != NULL, &icw, &jrw);
        }
        float *b_pack[2] = {ws->slots[0].b_pack, ws->slots[team > 1 ? 1 : 0].b_pack};
        gemm_loops(g, team, tid, icw, jrw, NULL, ws->slots[tid].a_pack, b_pack, ws->slots[tid].b_pack, 1);
    }
}

/* mxcc_gemm_f32's arguments as the problem the loops read (B as it is, not prepacked) */
static gemm_problem problem_of(int trans_a, int trans_b, int M, int N, int K, const float *A, int lda, const float *B,
                               int ldb, float beta, float *C, int ldc, const mxcc_epilogue *ep)
{
    return (gemm_problem){
        .trans_a = trans_a, .trans_b = trans_b, .M = M, .N = N, .K = K,
        .A = A, .B = B, .C = C, .lda = lda, .ldb = ldb, .ldc = ldc,
        .beta = beta != 0.0f, .ep = mxcc_epilogue_is_noop(ep) ? NULL : ep,
    };
}

void mxcc_gemm_f32(mxcc_gemm_ws *ws, int trans_a, int trans_b, int M, int N, int K,
                   const float *A, int lda, const float *B, int ldb,
                   float beta, float *C, int ldc, const mxcc_epilogue *ep)
{
    const gemm_problem g = problem_of(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, ep);
    gemm_run(ws, &g);
}

/* ---- a batch of GEMMs of one shape (batch_dot) -------------------------------------------------------- */

/* Entries [b0, b1) of part `part`, each GEMM serial on the buffers of whichever thread runs it (a call from a
 * pool chunk or an OpenMP region takes gemm_run's nested path) */
typedef struct batched_job {
    mxcc_gemm_ws *ws;
    const gemm_problem *g;
    long batch, stride_a, stride_b, stride_c;
    int parts;
} batched_job;

static void batched_part(void *arg, long part, int worker)
{
    const batched_job *j = arg;
    (void)worker;
    for (long b = mxcc_split_at(j->batch, j->parts, part); b < mxcc_split_at(j->batch, j->parts, part + 1); b++) {
        gemm_problem g = *j->g;
        g.A += b * j->stride_a;
        g.B += b * j->stride_b;
        g.C += b * j->stride_c;
        gemm_run(j->ws, &g);
    }
}

/* How many parts the entries of a batch split into (0: none, each GEMM splits its own work instead): one per
 * thread the whole batch pays for, or one per entry when there are fewer entries, where that keeps the threads
 * at least 3/4 busy (12 attention heads: 6 + 6 on 2 threads, 3 + 3 + 3 + 3 on 4, 12 of 16 threads). One job
 * for the batch, where a parallel GEMM per entry meets its threads once per entry (BERT-base's attention
 * scores, 12 x (128 x 128 x 64)). codegen/splits.py batch_gemm_split models it. */
static int batched_parts(long batch, double flops, int threads)
{
    const int nt = mxcc_threads_for(flops, threads);
    if (nt <= 1 || batch < 2)
        return 0;
    const int parts = batch < nt ? (int)batch : nt;
    const long most = (batch + parts - 1) / parts;
    return (double)batch / ((double)nt * most) >= 0.75 ? parts : 0;
}

void mxcc_gemm_f32_batched(mxcc_gemm_ws *ws, long batch, long stride_a, long stride_b, long stride_c, int trans_a,
                           int trans_b, int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                           float beta, float *C, int ldc, const mxcc_epilogue *ep)
{
    const gemm_problem g = problem_of(trans_a, trans_b, M, N, K, A, lda, B, ldb, beta, C, ldc, ep);
    const int nested = omp_get_level() > 0 || mxcc_pool_in_chunk();
    const int parts = nested || M <= 0 || N <= 0
                    ? 0 : batched_parts(batch, 2.0 * M * N * (K > 0 ? K : 1) * batch,
                                        mxcc_pool_threads(min_int(omp_get_max_threads(), ws->nslots)));
    batched_job job = {ws, &g, batch, stride_a, stride_b, stride_c, parts > 0 ? parts : 1};
    if (parts > 1)
        mxcc_parallel_chunks(parts, parts, batched_part, &job);
    else
        batched_part(&job, 0, 0);
}

/* ---- prepacked B ------------------------------------------------------------------------------------- */

long mxcc_gemm_packed_b_floats(int K, int N)
{
    return (long)K * ceil_div(N, NR) * NR;
}

void mxcc_gemm_pack_b_f32(int trans_b, int K, int N, const float *B, int ldb, float *Bp)
{
    if (K > 0 && N > 0) {
        PACK_B(trans_b, K, N, B, ldb, Bp);
    }
}

void mxcc_gemm_scale_packed_b_f32(int K, int N, float *Bp, const float *scale)
{
    for (int j = 0; j < N; j += NR) {   /* panel j / NR: columns j .. j + NR - 1, (K, NR) */
        const int nr = N - j < NR ? N - j : NR;
        float *panel = Bp + (long)j * K;
        for (int k = 0; k < K; k++)
            for (int c = 0; c < nr; c++) panel[(long)k * NR + c] *= scale[j + c];
    }
}

/* The epilogue of rows [i0, ...) of C: a row-indexed vector and the residual start i0 further */
static mxcc_epilogue epilogue_from_row(const mxcc_epilogue *ep, int i0)
{
    mxcc_epilogue e = *ep;
    if (e.per_row) {
        e.bias = e.bias ? e.bias + i0 : NULL;
        e.scale = e.scale ? e.scale + i0 : NULL;
        e.shift = e.shift ? e.shift + i0 : NULL;
    }
    e.residual = e.residual ? e.residual + (long)i0 * e.ld_residual : NULL;
    return e;
}

void mxcc_gemm_f32_packed_b(mxcc_gemm_ws *ws, int trans_a, int M, int N, int K, const float *A, int lda,
                            const float *Bp, float beta, float *C, int ldc, const mxcc_epilogue *ep)
{
    /* A batch of a few rows (M <= SMALLM_MAX) whose last row panel holds 1 or 2 (gemm_config.h,
     * SMALLM_PACKED_TAIL): those rows go to the panel kernel of smallm_packed_f32.c, which reads the same
     * panels two rows at a time, instead of an edge tile computing 4 (AVX-512) or 3 (AVX2) rows. On AVX-512
     * the panels of more than MR rows have balanced heights (row_height), so only M <= 2 leaves such a panel
     * (a row split between threads can still give one thread a short group: choose_ways weighs that). */
#if defined(__AVX512F__)
    const int tail = M <= MXCC_GEMM_SMALLM_PACKED_TAIL ? M : 0;
#else
    const int tail = M % MR;
#endif
    if (!trans_a && beta == 0.0f && M <= MXCC_GEMM_SMALLM_MAX && tail >= 1 && tail <= MXCC_GEMM_SMALLM_PACKED_TAIL
        && N > 0 && K > 0) {
        const int full = M - tail;
        if (full > 0)
            mxcc_gemm_f32_packed_b(ws, trans_a, full, N, K, A, lda, Bp, beta, C, ldc, ep);
        const mxcc_epilogue rest = ep ? epilogue_from_row(ep, full) : (mxcc_epilogue){0};
        mxcc_gemm_f32_small_m_packed_b(tail, N, K, A + (long)full * lda, lda, Bp, C + (long)full * ldc, ldc,
                                       ep ? &rest : NULL, 1);
        return;
    }
    const gemm_problem g = {
        .trans_a = trans_a, .trans_b = MXCC_NO_TRANS, .M = M, .N = N, .K = K,
        .A = A, .B = NULL, .Bp = Bp, .C = C, .lda = lda, .ldb = 0, .ldc = ldc,
        .beta = beta != 0.0f, .ep = mxcc_epilogue_is_noop(ep) ? NULL : ep,
    };
    gemm_run(ws, &g);
}
