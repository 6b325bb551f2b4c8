/* Winograd F(4x4, 3x3) convolution (contract and matrices: mxcc_winograd.h).
 *
 * Orientation: tiles are the GEMM's rows (MR), output channels its columns (NR), input channels its k.
 * The weight transform writes U_xi (C x O) as packed B panels once; the input transform writes V_xi
 * (tiles x C) straight into packed A panels, so the 36 GEMMs are bare micro-kernel calls
 * (MXCC_UKERNEL_F32, the build's kernel) with no packing step.
 *
 * Blocking (per thread, in its scratch):
 *   V  [36][tb / MR][C][MR]   a block of tb tiles (consecutive in (n, ty, tx) order), all 36 positions,
 *                             all channels: the A panels of the 36 GEMMs
 *   M  [36][tb][ob]           their products for a block of ob output channels (row stride ob)
 *   strip [g][6][ws]          g tile rows of one channel after the vertical half of B^T d B (g = row_group:
 *                             the whole rows of a small plane one vector pass takes; else 1)
 *   zero  [W]                 a zero image row: rows in the padding read it
 * tb and ob are chosen in plan_of (budgets below): V ~1 MiB and M <= 0.5 MiB for C <= 128, V up to 4 MiB
 * at C = 512 where U's reuse needs at least 56 tiles per block. For each block of tiles: input transform,
 * then per block of output channels: 36 GEMMs, output transform into y with the epilogue (an activation
 * other than relu on the rows just written).
 * A block whose last panel holds <= 7 tiles runs that panel with a smaller AVX-512 kernel (rows_x32), one of
 * 8..13 the 14x32 kernel's exact tail; where that makes the busiest block cheaper, the blocks share the
 * tiles evenly (block_grain).
 * Threads take contiguous runs of (tile block, output-channel part) units; the output channels are split
 * only when tile blocks are fewer than 2 per thread (e.g. 512 x 7 x 7, batch 1: 4 tiles), and blocks are made
 * smaller when they are too few for the threads (choose_units; where U is small, tile blocks alone rather than
 * channel parts that share V: WHOLE_U_BYTES). With channel parts, the blocks' input
 * transforms run first as a job of their own (a channel slice per part, into the block's scratch slot), so
 * that no part transforms a block again.
 *
 * Transforms are vectorized across tiles (input: the 16 or 8 tiles of a tile row, or of several whole rows
 * of a small plane, after one vertical pass over the strip in plain C that the compiler vectorizes) and
 * across output channels (output: 16 or 8 channels, transposed in registers to rows of 4 pixels). AVX-512F,
 * AVX2 + FMA and plain-C paths, chosen at compile time.
 */
#include <limits.h>
#include <string.h>

#include <omp.h>

#include "mxcc_winograd.h"
#include "gemm/gemm_internal.h"
#include "gemm/epilogue_simd.h"
#include "../parallel.h"
#include "../simd.h"

#define MR MXCC_GEMM_MR
#define NR MXCC_GEMM_NR
#define GUARD 16  /* floats before V: the masked stores of the input transform may start up to 15 before */
/* Loops over registers (a tile's rows, vectors, transform rows) are unrolled before GCC decides where their
 * arrays live: left to the late unroller, the arrays stay on the stack and every value round-trips there. */
#define UNROLLED _Pragma("GCC unroll 16")

/* Block sizes. Each tile block reads all of U (36 C O floats: 9.4 MB at C = O = 256) for 2 tb FLOPs per
 * float, so tb must stay large enough for U to stream from L3 or memory: at least MIN_TB_PANELS panels (56
 * tiles on AVX-512: 28 FLOPs per byte of U). Above that, as many tiles as V_BYTES of V (the A panels: 36 C
 * floats per tile) holds; V then spans 1 MiB (C <= 128) to 4 MiB (C = 512). M (36 tb ob floats) gets
 * M_BYTES; V is read once per block of ob output channels. */
#ifndef V_BYTES  /* -D overrides for tuning runs (benchmarks/winograd.py: build_winograd) */
#define V_BYTES (1024L * 1024)
#endif
#ifndef M_BYTES
#define M_BYTES (512L * 1024)
#endif
#ifndef MIN_TB_PANELS
#define MIN_TB_PANELS 4
#endif

static long ceil_div(long a, long b) { return (a + b - 1) / b; }
static long round_up(long a, long b) { return ceil_div(a, b) * b; }
static long min_l(long a, long b) { return a < b ? a : b; }
static long max_l(long a, long b) { return a > b ? a : b; }

/* ---- weight transform: U = G g G^T, points 0, 1, -1, 2, -2, inf ------------------------------------- */

static const double G[6][3] = {
    {1.0 / 4, 0.0, 0.0},
    {-1.0 / 6, -1.0 / 6, -1.0 / 6},
    {-1.0 / 6, 1.0 / 6, -1.0 / 6},
    {1.0 / 24, 1.0 / 12, 1.0 / 6},
    {1.0 / 24, -1.0 / 12, 1.0 / 6},
    {0.0, 0.0, 1.0},
};

/* Floats of one U_xi: ceil(O / NR) panels of (C, NR), what mxcc_gemm_packed_b_floats(C, O) says; computed
 * here so that this file needs only the micro-kernels and the epilogue of runtime_c/gemm/. */
static long u_floats(int C, int O)
{
    return (long)C * round_up(O, NR);
}

long mxcc_winograd_f43_weight_floats(int O, int C)
{
    return 36L * u_floats(C, O);
}

void mxcc_winograd_f43_weight_f32(int O, int C, const float *w /* (O, C, 3, 3) */, float *u)
{
    const long upx = u_floats(C, O);  /* floats per position xi */
    memset(u, 0, (size_t)(36 * upx) * sizeof(float));  /* the padding columns of the last panel */
    for (int o = 0; o < O; o++) {
        for (int c = 0; c < C; c++) {
            const float *g = w + ((long)o * C + c) * 9;  /* (3, 3) */
            double t[6][3];                               /* G g */
            for (int i = 0; i < 6; i++)
                for (int j = 0; j < 3; j++)
                    t[i][j] = G[i][0] * g[j] + G[i][1] * g[3 + j] + G[i][2] * g[6 + j];
            float *dst = u + (long)(o / NR) * C * NR + (long)c * NR + o % NR;  /* U_0[c, o] in its panel */
            for (int i = 0; i < 6; i++)
                for (int j = 0; j < 6; j++)
                    dst[(i * 6 + j) * upx] = (float)(t[i][0] * G[j][0] + t[i][1] * G[j][1] + t[i][2] * G[j][2]);
        }
    }
}

void mxcc_winograd_f43_scale_weight_f32(int O, int C, float *u, const float *scale)
{
    const long upx = u_floats(C, O);
    for (int xi = 0; xi < 36; xi++)   /* U_xi[c, o] at panel o / NR, row c, column o % NR */
        for (int o = 0; o < O; o++) {
            float *col = u + xi * upx + (long)(o / NR) * C * NR + o % NR;
            for (int c = 0; c < C; c++) col[(long)c * NR] *= scale[o];
        }
}

/* ---- the plan: tile geometry, block sizes, scratch layout -------------------------------------------- */

typedef struct plan {
    int C, H, W, ph, pw, OH, OW, TH, TW, O;
    long tiles;     /* batch * TH * TW */
    int row_group;  /* whole tile rows the input transform takes in one vector pass: VL / TW, or 1 */
    long tb;        /* tiles per block, a multiple of MR */
    long ob;        /* output channels per block, a multiple of NR */
    long ws;        /* floats per strip row */
    long v_off, m_off, strip_off, zero_off, per_thread;  /* floats, each a multiple of 16 */
} plan;

static plan with_tb(plan p, long tb, long ob_max);

static plan plan_of(const mxcc_conv_geom *g, int batch, int O)
{
    plan p;
    p.C = g->channels;
    p.H = g->in[1];
    p.W = g->in[2];
    p.ph = g->pad[1];
    p.pw = g->pad[2];
    p.OH = g->out[1];
    p.OW = g->out[2];
    p.TH = (int)ceil_div(p.OH, 4);
    p.TW = (int)ceil_div(p.OW, 4);
#if MXCC_SIMD_VECTOR
    p.row_group = 2 * p.TW <= MXCC_SIMD_SIZE_F32 ? MXCC_SIMD_SIZE_F32 / p.TW : 1;
#else
    p.row_group = 1;
#endif
    p.O = O;
    p.tiles = (long)batch * p.TH * p.TW;
    /* as many MR panels as V_BYTES holds, then balanced: 196 tiles with tb = 112 -> 2 x 98, not 112 + 84 */
    long tb = MR * max_l(MIN_TB_PANELS, V_BYTES / (36L * p.C * (long)sizeof(float) * MR));
    /* and no more than M_BYTES of M holds for one panel of output channels: without it a layer with few
     * input channels (C = 3: 1 MiB of V holds 2400 tiles) would need an M of tens of MiB */
    tb = min_l(tb, MR * max_l(MIN_TB_PANELS, M_BYTES / (36L * NR * (long)sizeof(float) * MR)));
    tb = min_l(tb, round_up(p.tiles, MR));
    return with_tb(p, round_up(ceil_div(p.tiles, ceil_div(p.tiles, tb)), MR), LONG_MAX);
}

/* The plan with tile blocks of tb tiles (a multiple of MR, at most plan_of's: the scratch is sized by it) and
 * output-channel blocks of at most ob_max (a multiple of NR): ob and the scratch layout follow. */
static plan with_tb(plan p, long tb, long ob_max)
{
    const int O = p.O;
    p.tb = tb;
    long ob = NR * max_l(1, M_BYTES / (36L * tb * (long)sizeof(float) * NR));
    ob = min_l(min_l(ob, round_up(O, NR)), ob_max);
    ob = round_up(ceil_div(O, ceil_div(O, ob)), NR);
    p.ob = ob;
    p.ws = 4 * round_up(p.TW, 16) + 16;  /* a 16-tile group reads 4 * 16 + 2 floats */
    p.v_off = GUARD;
    p.m_off = p.v_off + round_up(36L * p.C * tb, 16);
    p.strip_off = p.m_off + round_up(36L * tb * ob, 16);
    p.zero_off = p.strip_off + 6L * p.row_group * p.ws;   /* a strip (6, ws) per tile row of a group */
    p.per_thread = p.zero_off + round_up(p.W, 16);
    return p;
}

long mxcc_winograd_f43_scratch_floats(const mxcc_conv_geom *g, int batch, int O, int max_threads)
{
    return plan_of(g, batch, O).per_thread * (max_threads > 0 ? max_threads : 1);
}

/* ---- input transform ---------------------------------------------------------------------------------
 * B^T = [4  0 -5  0  1  0]     applied to the 6 rows of a tile (vertical), then to the 6 columns of the
 *       [0 -4 -4  1  1  0]     result (horizontal), as
 *       [0  4 -4 -1  1  0]       t0 = 4 d0 - 5 d2 + d4          t5 = 4 d1 - 5 d3 + d5
 *       [0 -2 -1  2  1  0]       t1,2 = (d4 - 4 d2) +- (d3 - 4 d1)
 *       [0  2 -1 -2  1  0]       t3,4 = (d4 - d2) +- 2 (d3 - d1)
 *       [0  4  0 -5  0  1]
 * A tile row strip of one channel: tiles tx0 .. tx0 + ntx - 1 of row ty, columns x = 4 tx0 - pw + x'. */

/* t_i[j] = sum_k B^T[i][k] d_k[j], j < n: the vertical half on 6 image rows. A function of its own for the
 * restrict parameters: with restrict local pointers GCC 12 found no vector type and ran it scalar. */
static void bt_rows(long n, const float *restrict d0, const float *restrict d1, const float *restrict d2,
                    const float *restrict d3, const float *restrict d4, const float *restrict d5,
                    float *restrict t0, float *restrict t1, float *restrict t2, float *restrict t3,
                    float *restrict t4, float *restrict t5)
{
    for (long j = 0; j < n; j++) {
        const float a = d4[j] - 4.0f * d2[j], b = d3[j] - 4.0f * d1[j];
        const float c = d4[j] - d2[j], e = 2.0f * (d3[j] - d1[j]);
        t0[j] = 4.0f * d0[j] - 5.0f * d2[j] + d4[j];
        t1[j] = a + b;
        t2[j] = a - b;
        t3[j] = c + e;
        t4[j] = c - e;
        t5[j] = 4.0f * d1[j] - 5.0f * d3[j] + d5[j];
    }
}

/* The columns x' of a strip inside the image: [lo, hi); the rest of [0, 4 ntx + 2) is padding. */
static void strip_cols(const plan *p, int tx0, int ntx, long *lo, long *hi)
{
    const long xs0 = 4L * tx0 - p->pw;  /* image column of x' = 0 */
    *lo = max_l(0, -xs0);
    *hi = max_l(*lo, min_l(4L * ntx + 2, p->W - xs0));
}

/* strip[i][x'] = sum_k B^T[i][k] x[4 ty - ph + k][4 tx0 - pw + x'] for x' in [lo, hi) (strip_cols); the
 * caller zeroes the rest once for all channels (this writes nothing else). */
static void strip_vertical(const plan *p, const float *xc /* (H, W) */, const float *zero /* (W,) */,
                           int ty, int tx0, int ntx, float *restrict strip /* (6, ws) */)
{
    const float *row[6];
    for (int k = 0; k < 6; k++) {
        const int y = 4 * ty - p->ph + k;
        row[k] = (y >= 0 && y < p->H) ? xc + (long)y * p->W : zero;
    }
    const long xs0 = 4L * tx0 - p->pw;
    long lo, hi;
    strip_cols(p, tx0, ntx, &lo, &hi);
    /* inside the image: x' = lo + j, image column xs0 + lo + j */
    float *t[6];
    for (int i = 0; i < 6; i++)
        t[i] = strip + i * p->ws + lo;
    bt_rows(hi - lo, row[0] + xs0 + lo, row[1] + xs0 + lo, row[2] + xs0 + lo, row[3] + xs0 + lo,
            row[4] + xs0 + lo, row[5] + xs0 + lo, t[0], t[1], t[2], t[3], t[4], t[5]);
}

/* Where tile t of the block (block-local index) lives in V for channel 0, position 0: its panel's row r. */
static long v_index(const plan *p, long t)
{
    return (t / MR) * p->C * MR + t % MR;
}

/* The vector transforms (simd.h): VL tiles (input) or output channels (output) at a time */
#if MXCC_SIMD_VECTOR
#define VL MXCC_SIMD_SIZE_F32

/* out[j] = B^T[j] . P for the 6 phase vectors P (one 6-vector per lane) */
static inline __attribute__((always_inline)) void bt6(const mxcc_simd_f32 P[6], mxcc_simd_f32 out[6])
{
    const mxcc_simd_f32 k4 = mxcc_set1_f32(4.0f), km4 = mxcc_set1_f32(-4.0f), km5 = mxcc_set1_f32(-5.0f);
    const mxcc_simd_f32 k2 = mxcc_set1_f32(2.0f), km2 = mxcc_set1_f32(-2.0f);
    const mxcc_simd_f32 a = mxcc_fmadd_f32(km4, P[2], P[4]), b = mxcc_fmadd_f32(km4, P[1], P[3]);
    const mxcc_simd_f32 c = mxcc_sub_f32(P[4], P[2]), d = mxcc_sub_f32(P[3], P[1]);
    out[0] = mxcc_fmadd_f32(k4, P[0], mxcc_fmadd_f32(km5, P[2], P[4]));
    out[1] = mxcc_add_f32(a, b);
    out[2] = mxcc_sub_f32(a, b);
    out[3] = mxcc_fmadd_f32(k2, d, c);
    out[4] = mxcc_fmadd_f32(km2, d, c);
    out[5] = mxcc_fmadd_f32(k4, P[1], mxcc_fmadd_f32(km5, P[3], P[5]));
}

/* The lanes of a group of tiles, cut where they cross a panel boundary: lane l of run r goes to
 * vc + off[r] + l (the run's first lane at its tile's place). At most 3 runs (VL <= MR + 2). */
typedef struct runs {
    int n;
    long off[3];
    int lo[3], hi[3];  /* lanes [lo, hi) */
} runs;

static runs runs_of(const plan *p, long t, int nl)
{
    runs rs = {0};
    for (int l = 0; l < nl;) {
        const long tt = t + l;
        const int len = (int)min_l(nl - l, MR - tt % MR);
        rs.off[rs.n] = v_index(p, tt) - l;  /* >= -(VL - 1): GUARD covers it */
        rs.lo[rs.n] = l;
        rs.hi[rs.n] = l + len;
        rs.n++;
        l += len;
    }
    return rs;
}
#endif

#if defined(__AVX512F__)
/* The phases P[m][l] = strip row[4 l + m], m = 0..5, for the 16 tiles of a group: 4 loads deinterleaved
 * by 2 two-source permutes per pair + 4 128-bit shuffles; phases 4 and 5 are 0 and 1 shifted by a tile. */
static inline __attribute__((always_inline)) void phases(const float *s, mxcc_simd_f32 P[6])
{
    const __m512i i01 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
    const __m512i i23 = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
    const mxcc_simd_f32 a0 = _mm512_loadu_ps(s), a1 = _mm512_loadu_ps(s + 16);
    const mxcc_simd_f32 a2 = _mm512_loadu_ps(s + 32), a3 = _mm512_loadu_ps(s + 48);
    const mxcc_simd_f32 b01 = _mm512_permutex2var_ps(a0, i01, a1), b23 = _mm512_permutex2var_ps(a0, i23, a1);
    const mxcc_simd_f32 c01 = _mm512_permutex2var_ps(a2, i01, a3), c23 = _mm512_permutex2var_ps(a2, i23, a3);
    P[0] = _mm512_shuffle_f32x4(b01, c01, 0x44);
    P[1] = _mm512_shuffle_f32x4(b01, c01, 0xEE);
    P[2] = _mm512_shuffle_f32x4(b23, c23, 0x44);
    P[3] = _mm512_shuffle_f32x4(b23, c23, 0xEE);
    P[4] = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(_mm512_set1_ps(s[64])),
                                                   _mm512_castps_si512(P[0]), 1));
    P[5] = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(_mm512_set1_ps(s[65])),
                                                   _mm512_castps_si512(P[1]), 1));
}
#elif defined(__AVX2__) && defined(__FMA__)
/* The phases for 8 tiles: tiles (l, l + 4) paired in each vector, so that the 4x4 transposes within the
 * 128-bit lanes leave tiles 0..3 in lane 0 and 4..7 in lane 1; phases 4 and 5 by a lane rotation. */
static inline __attribute__((always_inline)) void phases(const float *s, mxcc_simd_f32 P[6])
{
#define LOAD2(lo, hi) _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(s + (lo))), _mm_loadu_ps(s + (hi)), 1)
    const mxcc_simd_f32 a0 = LOAD2(0, 16), a1 = LOAD2(4, 20), a2 = LOAD2(8, 24), a3 = LOAD2(12, 28);
#undef LOAD2
    const mxcc_simd_f32 t0 = mxcc_unpacklo_f32(a0, a1), t1 = mxcc_unpacklo_f32(a2, a3);
    const mxcc_simd_f32 t2 = mxcc_unpackhi_f32(a0, a1), t3 = mxcc_unpackhi_f32(a2, a3);
    P[0] = mxcc_unpacklo_f32x2(t0, t1);
    P[1] = mxcc_unpackhi_f32x2(t0, t1);
    P[2] = mxcc_unpacklo_f32x2(t2, t3);
    P[3] = mxcc_unpackhi_f32x2(t2, t3);
    const __m256i rot = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 7);
    P[4] = _mm256_blend_ps(_mm256_permutevar8x32_ps(P[0], rot), _mm256_broadcast_ss(s + 32), 0x80);
    P[5] = _mm256_blend_ps(_mm256_permutevar8x32_ps(P[1], rot), _mm256_broadcast_ss(s + 33), 0x80);
}
#endif

#if MXCC_SIMD_VECTOR
/* vc's panels = B^T d B of the strip's tiles, VL tiles at a time: their phases, the horizontal half, and one
 * masked store per run of lanes within a panel (runs_of) */
static void strip_horizontal(const plan *p, const float *strip, int ntx, long t, float *vc, long xs)
{
    for (int l0 = 0; l0 < ntx; l0 += VL) {
        const runs rs = runs_of(p, t + l0, (int)min_l(VL, ntx - l0));
        mxcc_simd_mask mk[3];
        for (int r = 0; r < rs.n; r++)
            mk[r] = mxcc_mask_lanes(rs.lo[r], rs.hi[r]);
        for (int i = 0; i < 6; i++) {
            mxcc_simd_f32 P[6], V[6];
            phases(strip + i * p->ws + 4 * l0, P);
            bt6(P, V);
            for (int j = 0; j < 6; j++) {
                float *dst = vc + (i * 6 + j) * xs;
                for (int r = 0; r < rs.n; r++)
                    mxcc_store_mask_f32(dst + rs.off[r], V[j], mk[r]);
            }
        }
    }
}

/* `rows` whole tile rows of ntx tiles each (rows * ntx <= VL), their strips `6 ws` apart, in one pass of VL
 * lanes: row k's tiles in lanes [k ntx, (k + 1) ntx), its phases read from its strip shifted back by 4 k ntx
 * (other lanes of that read are another row's or unused floats of the strip region, never outside it). A
 * small plane's row fills a few of the lanes (14x14: 4 tiles of 16), and these passes were 16% of a 256 x 14
 * x 14 layer on one thread. */
static void strip_horizontal_rows(const plan *p, const float *strip, int ntx, int rows, long t, float *vc, long xs)
{
    const runs rs = runs_of(p, t, rows * ntx);
    mxcc_simd_mask mk[3], row[VL];
    for (int r = 0; r < rs.n; r++)
        mk[r] = mxcc_mask_lanes(rs.lo[r], rs.hi[r]);
    for (int k = 1; k < rows; k++)
        row[k] = mxcc_mask_lanes(k * ntx, (k + 1) * ntx);
    for (int i = 0; i < 6; i++) {
        mxcc_simd_f32 P[6], Q[6], V[6];
        phases(strip + i * p->ws, P);
        for (int k = 1; k < rows; k++) {
            phases(strip + (6L * k + i) * p->ws - 4L * ntx * k, Q);
            for (int m = 0; m < 6; m++)
                P[m] = mxcc_select_f32(row[k], Q[m], P[m]);
        }
        bt6(P, V);
        for (int j = 0; j < 6; j++) {
            float *dst = vc + (i * 6 + j) * xs;
            for (int r = 0; r < rs.n; r++)
                mxcc_store_mask_f32(dst + rs.off[r], V[j], mk[r]);
        }
    }
}
#else
static void strip_horizontal(const plan *p, const float *strip, int ntx, long t, float *vc, long xs)
{
    for (int i = 0; i < 6; i++) {
        const float *s = strip + i * p->ws;  /* (4 ntx + 2,) */
        for (int l = 0; l < ntx; l++) {
            const float *d = s + 4 * l;
            const float a = d[4] - 4.0f * d[2], b = d[3] - 4.0f * d[1];
            const float c = d[4] - d[2], e = 2.0f * (d[3] - d[1]);
            const float v[6] = {4.0f * d[0] - 5.0f * d[2] + d[4], a + b, a - b, c + e, c - e,
                                4.0f * d[1] - 5.0f * d[3] + d[5]};
            float *dst = vc + v_index(p, t + l);
            for (int j = 0; j < 6; j++)
                dst[(i * 6 + j) * xs] = v[j];
        }
    }
}
#endif

/* The tile rows of tiles [t0, t1): calls fn for each maximal run of one tile row. */
typedef struct tile_run {
    int n, ty, tx, ntx;
    long t;  /* global index of (n, ty, tx) */
} tile_run;

static int next_run(const plan *p, long t1, tile_run *r)
{
    if (r->t >= t1)
        return 0;
    const long per_image = (long)p->TH * p->TW;
    r->n = (int)(r->t / per_image);
    r->ty = (int)(r->t % per_image / p->TW);
    r->tx = (int)(r->t % p->TW);
    r->ntx = (int)min_l(p->TW - r->tx, t1 - r->t);
    return 1;
}

/* Prefetch rows [y0, y0 + nrows) of a plane (H, W), columns [x0, x0 + n) clipped to the image; write = 1
 * for rows about to be stored. */
static void prefetch_rows(const plan *p, const float *plane, int y0, int nrows, long x0, long n, int write)
{
    const long a = max_l(0, x0), b = min_l(p->W, x0 + n);
    for (int y = max_l(0, y0); y < min_l(p->H, (long)y0 + nrows); y++) {
        const float *row = plane + (long)y * p->W;
        for (long j = a; j < b; j += 16)
            write ? __builtin_prefetch(row + j, 1, 3) : __builtin_prefetch(row + j, 0, 3);
        if (b > a)
            write ? __builtin_prefetch(row + b - 1, 1, 3) : __builtin_prefetch(row + b - 1, 0, 3);
    }
}

/* V (the block's A panels, all 36 positions) of channels [c0, c1) for tiles [t0, t1), into v (the V region of
 * a scratch slot); s: this thread's scratch (its strip and zero row). */
static void input_block(const plan *p, const float *x, long t0, long t1, int c0, int c1, float *v, float *s)
{
    float *strip = s + p->strip_off;
    const float *zero = s + p->zero_off;
    const long xs = p->tb * p->C;  /* floats per position xi */
    const long nt = t1 - t0;
    if (nt % MR) {  /* rows past the last tile of the last panel: zero, so the micro-kernel adds zeros */
        const long rem = nt % MR;
        for (int xi = 0; xi < 36; xi++)
            for (int c = c0; c < c1; c++)
                memset(v + xi * xs + v_index(p, nt - rem) + (long)c * MR + rem, 0, (size_t)(MR - rem) * sizeof(float));
    }
    const long plane = (long)p->H * p->W;
    tile_run r = {.t = t0};
    for (; next_run(p, t1, &r); r.t += r.ntx) {
        /* the padding columns, and past the last tile up to what the vector groups read */
        const long width = 4 * round_up(r.ntx, 16) + 2;
        long lo, hi;
        strip_cols(p, r.tx, r.ntx, &lo, &hi);
#if MXCC_SIMD_VECTOR
        /* whole tile rows of a small plane: as many as fill the vector, in one pass (strip_horizontal_rows) */
        const int rows = r.tx == 0 && r.ntx == p->TW ? (int)min_l(p->row_group, (t1 - r.t) / p->TW) : 1;
        if (rows > 1) {
            tile_run rk[VL];
            for (int k = 0; k < rows; k++) {
                rk[k].t = r.t + (long)k * p->TW;
                next_run(p, t1, &rk[k]);
                for (int i = 0; i < 6; i++) {
                    memset(strip + (6L * k + i) * p->ws, 0, (size_t)lo * sizeof(float));
                    memset(strip + (6L * k + i) * p->ws + hi, 0, (size_t)(width - hi) * sizeof(float));
                }
            }
            for (int c = c0; c < c1; c++) {
                for (int k = 0; k < rows; k++)
                    strip_vertical(p, x + ((long)rk[k].n * p->C + c) * plane, zero, rk[k].ty, 0, p->TW,
                                   strip + 6L * k * p->ws);
                strip_horizontal_rows(p, strip, p->TW, rows, r.t - t0, v + (long)c * MR, xs);
            }
            r.ntx = rows * p->TW;   /* the loop steps past all of them */
            continue;
        }
#endif
        for (int i = 0; i < 6; i++) {
            memset(strip + i * p->ws, 0, (size_t)lo * sizeof(float));
            memset(strip + i * p->ws + hi, 0, (size_t)(width - hi) * sizeof(float));
        }
        for (int c = c0; c < c1; c++) {
            /* the next channel's rows: 6 short rows a plane apart, too scattered for the hardware prefetchers
             * once x is out of L2 (64@56 batch 16: 16.3 -> see docs) */
            if (c + 1 < c1)
                prefetch_rows(p, x + ((long)r.n * p->C + c + 1) * plane, 4 * r.ty - p->ph, 6,
                              4L * r.tx - p->pw + lo, hi - lo, 0);
            strip_vertical(p, x + ((long)r.n * p->C + c) * plane, zero, r.ty, r.tx, r.ntx, strip);
            strip_horizontal(p, strip, r.ntx, r.t - t0, v + (long)c * MR, xs);
        }
    }
}

#if defined(__AVX512F__)
/* The last tile panel of a block with few tiles (16 tiles = 14 + 2 at 256 x 14 x 14, batch 1): the 14x32
 * kernel computes all 14 rows whatever m is, so m <= 7 rows run here, M rows (a constant) of the same
 * packed panels: M x 2 accumulators, one B row load per k. Same contract as the micro-kernels. */
static inline __attribute__((always_inline)) void rows_x32(const int M, int k, const float *restrict ap,
                                                           const float *restrict bp, float *restrict c, long ldc,
                                                           int n, int beta)
{
    const __mmask16 m0 = n >= 16 ? 0xFFFF : (__mmask16)((1u << n) - 1);
    const __mmask16 m1 = n <= 16 ? 0 : n >= 32 ? 0xFFFF : (__mmask16)((1u << (n - 16)) - 1);
    __m512 acc[7][2];
    UNROLLED for (int i = 0; i < M; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int p = 0; p < k; p++) {
        const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
        UNROLLED for (int i = 0; i < M; i++) {
            const __m512 a = _mm512_set1_ps(ap[i]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
        }
        ap += MR;
        bp += NR;
    }
    UNROLLED for (int i = 0; i < M; i++) {
        float *row = c + i * ldc;
        __m512 x0 = acc[i][0], x1 = acc[i][1];
        if (beta) {
            x0 = _mm512_add_ps(x0, _mm512_maskz_loadu_ps(m0, row));
            x1 = _mm512_add_ps(x1, _mm512_maskz_loadu_ps(m1, row + 16));
        }
        _mm512_mask_storeu_ps(row, m0, x0);
        _mm512_mask_storeu_ps(row + 16, m1, x1);
    }
}

static void ukernel(int k, const float *ap, const float *bp, float *c, int ldc, int m, int n, int beta)
{
    switch (m) {
    case 1: rows_x32(1, k, ap, bp, c, ldc, n, beta); break;
    case 2: rows_x32(2, k, ap, bp, c, ldc, n, beta); break;
    case 3: rows_x32(3, k, ap, bp, c, ldc, n, beta); break;
    case 4: rows_x32(4, k, ap, bp, c, ldc, n, beta); break;
    case 5: rows_x32(5, k, ap, bp, c, ldc, n, beta); break;
    case 6: rows_x32(6, k, ap, bp, c, ldc, n, beta); break;
    case 7: rows_x32(7, k, ap, bp, c, ldc, n, beta); break;
    default: MXCC_UKERNEL_F32(k, ap, bp, c, ldc, m, n, beta);
    }
}
#define UKERNEL ukernel
#else
#define UKERNEL MXCC_UKERNEL_F32
#endif

/* ---- the 36 GEMMs: M_xi[t, o] = sum_c V_xi[t, c] U_xi[c, o] for the block's tiles and panels [q0, q1) --- */

static void gemm_block(const plan *p, const float *u, long nt, int q0, int q1, const float *v, float *s)
{
    float *m = s + p->m_off;
    const long xs = p->tb * p->C, upx = u_floats(p->C, p->O);
    const int C = p->C;
    const int nk = (int)ceil_div(C, MXCC_GEMM_KC);  /* k split only past the GEMM's KC (C > 512 on AVX-512) */
    for (int xi = 0; xi < 36; xi++) {
        const float *vx = v + xi * xs;              /* (tb / MR) panels of (C, MR) */
        const float *ux = u + xi * upx;             /* ceil(O / NR) panels of (C, NR) */
        float *mx = m + xi * p->tb * p->ob;         /* (tb, ob) */
        for (int q = q0; q < q1; q++) {
            const int n = (int)min_l(NR, p->O - (long)q * NR);
            const float *up = ux + (long)q * C * NR;
            float *mq = mx + (long)(q - q0) * NR;
            for (long tp = 0; tp * MR < nt; tp++) {
                const int mrows = (int)min_l(MR, nt - tp * MR);
                const float *vp = vx + tp * C * MR;
                for (int kk = 0; kk < nk; kk++) {
                    const int k0 = (int)((long)C * kk / nk), k1 = (int)((long)C * (kk + 1) / nk);
                    UKERNEL(k1 - k0, vp + (long)k0 * MR, up + (long)k0 * NR, mq + tp * MR * p->ob,
                            (int)p->ob, mrows, n, kk > 0);
                }
            }
        }
    }
}

/* The epilogue parts the output transforms apply to a tile before storing it (folded BatchNorm, bias,
 * residual, relu), in every build; other activations run over the rows afterwards, on values already stored.
 * So each residual element is read before the output element at its place is written, and y may be the
 * residual itself (an in-place residual: mxcc/ops/convolution.py, residual_in_place). The same operations in
 * the same order as mxcc_epilogue_apply_f32 (separate multiply and adds, relu as max(x, 0) with NaN -> 0), so
 * both give the same bits. Pointers are at the tile's first channel (and pixel, for res). */
typedef struct tile_ep {
    const float *scale, *shift, *bias;  /* (nch,) or NULL */
    const float *res;                   /* the residual at (channel o0, row 4 ty, column 4 tx), or NULL */
    long ld_res;                        /* floats between the residual's channels */
    int relu;
} tile_ep;

/* ---- output transform ----------------------------------------------------------------------------------
 * A^T = [1 1  1 1  1 0]    per row of M then per column:  a = m1 + m2, b = m1 - m2, c = m3 + m4, d = m3 - m4
 *       [0 1 -1 2 -2 0]    y0 = m0 + a + c, y1 = b + 2 d, y2 = a + 4 c, y3 = b + 8 d + m5
 *       [0 1  1 4  4 0]
 *       [0 1 -1 8 -8 1]
 * One tile, channels [0, nch) of the block: mt = M at the tile (position xi at mt[xi * mxs + o]);
 * yo = y at (channel o0, row 4 ty, column 4 tx); nrows x ncols of the 4x4 are inside the image. */

#if MXCC_SIMD_VECTOR
static inline __attribute__((always_inline)) void at6(const mxcc_simd_f32 m[6], mxcc_simd_f32 y[4])
{
    const mxcc_simd_f32 a = mxcc_add_f32(m[1], m[2]), b = mxcc_sub_f32(m[1], m[2]), c = mxcc_add_f32(m[3], m[4]), d = mxcc_sub_f32(m[3], m[4]);
    y[0] = mxcc_add_f32(mxcc_add_f32(m[0], a), c);
    y[1] = mxcc_fmadd_f32(mxcc_set1_f32(2.0f), d, b);
    y[2] = mxcc_fmadd_f32(mxcc_set1_f32(4.0f), c, a);
    y[3] = mxcc_add_f32(mxcc_fmadd_f32(mxcc_set1_f32(8.0f), d, b), m[5]);
}

/* y[i][q] = (A^T S)[i][q] for VL channels, S = M A (the caller's rows: s[i] = at6 of row i of M, computed
 * as each row is loaded: 36 loaded vectors would not fit the registers) */
static inline __attribute__((always_inline)) void at_cols(const mxcc_simd_f32 s[6][4], mxcc_simd_f32 y[4][4])
{
    UNROLLED for (int q = 0; q < 4; q++) {
        const mxcc_simd_f32 col[6] = {s[0][q], s[1][q], s[2][q], s[3][q], s[4][q], s[5][q]};
        mxcc_simd_f32 yq[4];
        at6(col, yq);
        UNROLLED for (int i = 0; i < 4; i++)
            y[i][q] = yq[i];
    }
}

/* 4x4 transposes within each 128-bit lane: r[q] = pixel q of a row for the VL channels -> z[c'] lane k =
 * that row's 4 pixels for channel 4k + c' */
static inline __attribute__((always_inline)) void lane_transpose4(const mxcc_simd_f32 r[4], mxcc_simd_f32 z[4])
{
    const mxcc_simd_f32 t0 = mxcc_unpacklo_f32(r[0], r[1]), t1 = mxcc_unpacklo_f32(r[2], r[3]);
    const mxcc_simd_f32 t2 = mxcc_unpackhi_f32(r[0], r[1]), t3 = mxcc_unpackhi_f32(r[2], r[3]);
    z[0] = mxcc_unpacklo_f32x2(t0, t1);
    z[1] = mxcc_unpackhi_f32x2(t0, t1);
    z[2] = mxcc_unpacklo_f32x2(t2, t3);
    z[3] = mxcc_unpackhi_f32x2(t2, t3);
}
#endif

#if defined(__AVX512F__)
/* FUSED, RES, RELU (constants at each call site in output_tile) keep the epilogue's tests out of the
 * unrolled store loops: with runtime tests there, 64@56 ran ~9% slower without an epilogue.
 * NOTE: the AVX-512 and AVX2 versions are twins (4 vs 2 row lanes per vector, k-register vs vector masks); a
 * merged version computed the same values but let the compiler swap the operands of some additions, which
 * changes which NaN comes out where two meet (the sign of a NaN in the output): kept apart so the results
 * stay the same bits. */
static inline __attribute__((always_inline)) void output_tile_impl(const float *mt, long mxs, int nch, float *yo,
                                                                   long ohw, int ow, int nrows, int ncols,
                                                                   const tile_ep *fe, const int FUSED,
                                                                   const int RES, const int RELU)
{
    const __mmask16 cols = (__mmask16)((1u << ncols) - 1);
    for (int o = 0; o < nch; o += 16) {
        const int nc = (int)min_l(16, nch - o);
        const mxcc_simd_mask lanes = mxcc_mask_tail(nc);
        mxcc_simd_f32 s[6][4], y[4][4];
        UNROLLED for (int i = 0; i < 6; i++) {
            mxcc_simd_f32 m[6];
            UNROLLED for (int j = 0; j < 6; j++)
                m[j] = _mm512_maskz_loadu_ps(lanes, mt + (i * 6 + j) * mxs + o);
            at6(m, s[i]);
        }
        at_cols(s, y);
        if (FUSED) {  /* per channel: the lanes */
            const float *vec[3] = {fe->scale, fe->shift, fe->bias};
            UNROLLED for (int e = 0; e < 3; e++) {
                if (!vec[e])
                    continue;
                const mxcc_simd_f32 v = _mm512_maskz_loadu_ps(lanes, vec[e] + o);
                UNROLLED for (int i = 0; i < 4; i++)
                    UNROLLED for (int q = 0; q < 4; q++)
                        y[i][q] = e == 0 ? _mm512_mul_ps(y[i][q], v) : _mm512_add_ps(y[i][q], v);
            }
        }
        /* to the constant 4 with tests, not loops to nrows and nc: y is indexed by constants only (UNROLLED) */
        UNROLLED for (int i = 0; i < 4; i++) {
            if (i >= nrows)
                continue;
            mxcc_simd_f32 z[4];  /* z[c'] lane k = row i (4 pixels) of channel o + 4k + c' */
            lane_transpose4(y[i], z);
            /* lane k of z[c'] as one 16-byte store (a masked 64-byte store at an offset pointer measured
             * slower: it spans two cache lines) */
            UNROLLED for (int k = 0; k < 4; k++) {
                UNROLLED for (int cc = 0; cc < 4; cc++) {
                    const int ch = o + 4 * k + cc;
                    if (ch - o >= nc)
                        continue;
                    const __m128 v = k == 0 ? _mm512_castps512_ps128(z[cc])
                                   : k == 1 ? _mm512_extractf32x4_ps(z[cc], 1)
                                   : k == 2 ? _mm512_extractf32x4_ps(z[cc], 2) : _mm512_extractf32x4_ps(z[cc], 3);
                    float *dst = yo + ch * ohw + (long)i * ow;
                    __m128 out = v;
                    if (RES)
                        out = _mm_add_ps(out, _mm_maskz_loadu_ps((__mmask8)cols, fe->res + ch * fe->ld_res + (long)i * ow));
                    if (RELU)
                        out = mxcc_relu_f32x4(out);
                    if (ncols == 4)
                        _mm_storeu_ps(dst, out);
                    else
                        _mm_mask_storeu_ps(dst, (__mmask8)cols, out);
                }
            }
        }
    }
}
#elif defined(__AVX2__) && defined(__FMA__)
static inline __attribute__((always_inline)) void output_tile_impl(const float *mt, long mxs, int nch, float *yo,
                                                                   long ohw, int ow, int nrows, int ncols,
                                                                   const tile_ep *fe, const int FUSED,
                                                                   const int RES, const int RELU)
{
    const __m128i cols = _mm_cmpgt_epi32(_mm_set1_epi32(ncols), _mm_setr_epi32(0, 1, 2, 3));
    for (int o = 0; o < nch; o += 8) {
        const int nc = (int)min_l(8, nch - o);
        const mxcc_simd_mask lanes = mxcc_mask_tail(nc);
        mxcc_simd_f32 s[6][4], y[4][4];
        UNROLLED for (int i = 0; i < 6; i++) {
            mxcc_simd_f32 m[6];
            UNROLLED for (int j = 0; j < 6; j++)
                m[j] = _mm256_maskload_ps(mt + (i * 6 + j) * mxs + o, lanes);
            at6(m, s[i]);
        }
        at_cols(s, y);
        if (FUSED) {
            const float *vec[3] = {fe->scale, fe->shift, fe->bias};
            UNROLLED for (int e = 0; e < 3; e++) {
                if (!vec[e])
                    continue;
                const mxcc_simd_f32 v = _mm256_maskload_ps(vec[e] + o, lanes);
                UNROLLED for (int i = 0; i < 4; i++)
                    UNROLLED for (int q = 0; q < 4; q++)
                        y[i][q] = e == 0 ? _mm256_mul_ps(y[i][q], v) : _mm256_add_ps(y[i][q], v);
            }
        }
        UNROLLED for (int i = 0; i < 4; i++) {  /* as in the AVX-512 build */
            if (i >= nrows)
                continue;
            mxcc_simd_f32 z[4];
            lane_transpose4(y[i], z);
            UNROLLED for (int k = 0; k < 2; k++) {
                UNROLLED for (int cc = 0; cc < 4; cc++) {
                    const int ch = o + 4 * k + cc;
                    if (ch - o >= nc)
                        continue;
                    __m128 row = k ? _mm256_extractf128_ps(z[cc], 1) : _mm256_castps256_ps128(z[cc]);
                    if (RES)
                        row = _mm_add_ps(row, _mm_maskload_ps(fe->res + ch * fe->ld_res + (long)i * ow, cols));
                    if (RELU)
                        row = mxcc_relu_f32x4(row);
                    _mm_maskstore_ps(yo + ch * ohw + (long)i * ow, cols, row);
                }
            }
        }
    }
}
#endif
#if MXCC_SIMD_VECTOR
static void output_tile(const float *mt, long mxs, int nch, float *yo, long ohw, int ow, int nrows, int ncols,
                        const tile_ep *fe)
{
    if (!fe)
        output_tile_impl(mt, mxs, nch, yo, ohw, ow, nrows, ncols, NULL, 0, 0, 0);
    else if (fe->res && fe->relu)
        output_tile_impl(mt, mxs, nch, yo, ohw, ow, nrows, ncols, fe, 1, 1, 1);
    else if (fe->res)
        output_tile_impl(mt, mxs, nch, yo, ohw, ow, nrows, ncols, fe, 1, 1, 0);
    else if (fe->relu)
        output_tile_impl(mt, mxs, nch, yo, ohw, ow, nrows, ncols, fe, 1, 0, 1);
    else
        output_tile_impl(mt, mxs, nch, yo, ohw, ow, nrows, ncols, fe, 1, 0, 0);
}
#else
static void output_tile(const float *mt, long mxs, int nch, float *yo, long ohw, int ow, int nrows, int ncols,
                        const tile_ep *fe)
{
    for (int o = 0; o < nch; o++) {
        float s[6][4], y[4][4];
        for (int i = 0; i < 6; i++) {
            const float *m = mt + i * 6 * mxs + o;  /* m[j * mxs] = M[i][j] */
            const float a = m[mxs] + m[2 * mxs], b = m[mxs] - m[2 * mxs];
            const float c = m[3 * mxs] + m[4 * mxs], d = m[3 * mxs] - m[4 * mxs];
            s[i][0] = m[0] + a + c;
            s[i][1] = b + 2.0f * d;
            s[i][2] = a + 4.0f * c;
            s[i][3] = b + 8.0f * d + m[5 * mxs];
        }
        for (int q = 0; q < 4; q++) {
            const float a = s[1][q] + s[2][q], b = s[1][q] - s[2][q];
            const float c = s[3][q] + s[4][q], d = s[3][q] - s[4][q];
            y[0][q] = s[0][q] + a + c;
            y[1][q] = b + 2.0f * d;
            y[2][q] = a + 4.0f * c;
            y[3][q] = b + 8.0f * d + s[5][q];
        }
        for (int i = 0; i < nrows; i++)
            for (int q = 0; q < ncols; q++) {
                float v = y[i][q];
                if (fe) {   /* the vector builds' order: x*scale + shift, + bias, + residual, relu */
                    if (fe->scale) v *= fe->scale[o];
                    if (fe->shift) v += fe->shift[o];
                    if (fe->bias) v += fe->bias[o];
                    if (fe->res) v += fe->res[o * fe->ld_res + (long)i * ow + q];
                    if (fe->relu) v = mxcc_relu(v);
                }
                yo[o * ohw + (long)i * ow + q] = v;
            }
    }
}
#endif

/* y for tiles [t0, t1) and channels [o0, o1) from M, then the epilogue on the rows written. */
static void output_block(const plan *p, long t0, long t1, int o0, int o1, const mxcc_epilogue *ep, float *y,
                         const float *s)
{
    const float *m = s + p->m_off;
    const long mxs = p->tb * p->ob, ohw = (long)p->OH * p->OW;
    /* every part of ep on the tile but an activation other than relu, which runs after on the stored rows */
    const int act_after = ep && ep->act != MXCC_ACT_NONE && ep->act != MXCC_ACT_RELU;
    tile_ep fe = {0};
    if (ep) {
        fe.scale = ep->scale ? ep->scale + o0 : NULL;
        fe.shift = ep->shift ? ep->shift + o0 : NULL;
        fe.bias = ep->bias ? ep->bias + o0 : NULL;
        fe.ld_res = ep->ld_residual;
        fe.relu = ep->act == MXCC_ACT_RELU;
    }
    tile_run r = {.t = t0};
    for (; next_run(p, t1, &r); r.t += r.ntx) {
        float *yrow = y + ((long)r.n * p->O + o0) * ohw + 4L * r.ty * p->OW;  /* (o1 - o0) channels, row 4 ty */
        const int nrows = (int)min_l(4, p->OH - 4L * r.ty);
        const float *res_row = ep && ep->residual  /* the residual at (n, o0, 4 ty, 0) */
                             ? ep->residual + ((long)r.n * p->O + o0) * ep->ld_residual + 4L * r.ty * p->OW : NULL;
        for (int l = 0; l < r.ntx; l++) {
            const int tx = r.tx + l;
            /* every 4 tiles, the next 64-byte line of each output row: the stores of a tile row go to
             * (o1 - o0) x 4 rows, more streams than the hardware prefetchers follow */
            for (long col = l == 0 ? 4L * tx : 4L * tx + 16; (l == 0 || tx % 4 == 0) && col <= 4L * tx + 16; col += 16)
                for (int ch = 0; ch < o1 - o0; ch++)
                    for (int i = 0; i < nrows; i++)
                        __builtin_prefetch(yrow + ch * ohw + (long)i * p->OW + min_l(col, p->OW - 1), 1, 3);
            fe.res = res_row ? res_row + 4L * tx : NULL;
            output_tile(m + (r.t - t0 + l) * p->ob, mxs, o1 - o0, yrow + 4L * tx, ohw, p->OW, nrows,
                        (int)min_l(4, p->OW - 4L * tx), ep ? &fe : NULL);
        }
        if (act_after) {  /* sigmoid, tanh, leaky, clip, ...: on the stored rows of this run */
            const long c0 = 4L * r.tx, c1 = min_l(p->OW, 4L * (r.tx + r.ntx));
            for (int ch = 0; ch < o1 - o0; ch++)
                for (int i = 0; i < nrows; i++)
                    mxcc_act_apply_f32(ep->act, ep->alpha, ep->lo, ep->hi,
                                       yrow + ch * ohw + (long)i * p->OW + c0, c1 - c0);
        }
    }
}

/* ---- driver ---------------------------------------------------------------------------------------- */


/* one thread's range of units (mxcc_parallel_chunks): tile blocks, or parts of their output channels */
typedef struct wino_job {
    const plan *p;
    const float *u, *x;
    const mxcc_epilogue *ep;
    float *y, *scratch;
    long units, nblocks;
    long grain;     /* block_tiles: the blocks' even shares are of this many tiles; 0: tb tiles each */
    int nparts, npanels, bpanels, parts, O;
    int shared;   /* 1: block b's V was made by transform_part into scratch slot b (two_phase) */
    int slices;   /* transform_part: channel slices per block */
} wino_job;

/* The GEMM rows a block of t tiles costs, by the micro-kernels' edge tiles: AVX-512 exactly t (rows_x32 up to
 * 7 rows, the 14x32 kernel's exact tails of 8..13), AVX2 3 for a last panel of up to 3 rows and 6 otherwise
 * (its kernel computes a tail of 4 or 5 rows exactly, but choose_units counts whole panels: counted exactly,
 * SqueezeNet's 13x13 layers on 8 threads would read 0.80 where another split gives 0.90), plain C whole
 * panels. codegen/splits.py (_winograd_gemm_rows) models this. */
static long gemm_rows(long t)
{
#if defined(__AVX512F__)
    return t;
#else
    const long tail = t % MR;
#if defined(__AVX2__) && defined(__FMA__)
    return t - tail + (tail == 0 ? 0 : tail <= 3 ? 3 : MR);
#else
    return t - tail + (tail == 0 ? 0 : MR);
#endif
#endif
}

/* How the blocks share the tiles (block_tiles): 0 for tb tiles each; else a grain, the blocks taking even shares
 * of grains (whole tile rows where blocks of tb tiles start on tile rows, as the input transform runs whole
 * rows in its vector passes; else single tiles), where that makes the busiest block compute fewer GEMM rows.
 * `<net>_bench --simulate-threads 16` of one layer, AMD Zen 4: 16 tiles (256 x 14 x 14) in 2 blocks are 8 + 8,
 * not 14 + 2, whose first block's parts were the busiest by 2.5x (best of 5: 126 -> 82 us); AVX2, 49 tiles
 * (128 x 28 x 28) in 2 blocks are 24 + 25, not 30 + 19 (medians of 6: 105 -> 96 us). 49 tiles in 4 blocks of
 * 14 on AVX-512 (2 tile rows each) stay 14 x 3 + 7: even single tiles, 12 + 12 + 12 + 13, a row less for the
 * busiest, measured 82 -> 96 us (medians of 8). */
static long block_grain(const plan *p, long nblocks, int nt)
{
    if (nblocks <= 1 || nt <= 1)   /* one thread: nothing to balance, plan_of's blocks */
        return 0;
    const long tw = ceil_div(p->OW, 4), grain = p->tb % tw == 0 ? tw : 1;   /* tiles: whole rows of tw */
    return gemm_rows(ceil_div(p->tiles / grain, nblocks) * grain) < gemm_rows(p->tb) ? grain : 0;
}

/* Block b's tiles [*t0, *t1), at most tb of them. */
static void block_tiles(const wino_job *j, long b, long *t0, long *t1)
{
    if (j->grain) {
        const long grains = j->p->tiles / j->grain;
        *t0 = j->grain * mxcc_split_at(grains, (int)j->nblocks, (int)b);
        *t1 = j->grain * mxcc_split_at(grains, (int)j->nblocks, (int)b + 1);
    } else {
        *t0 = b * j->p->tb;
        *t1 = min_l(j->p->tiles, *t0 + j->p->tb);
    }
}

static void wino_part(void *arg, long part, int worker)
{
    const wino_job *j = arg;
    const plan *p = j->p;
    float *s = j->scratch + worker * p->per_thread;
    memset(s + p->zero_off, 0, (size_t)p->W * sizeof(float));
    long have = -1;  /* the block whose V this thread's scratch holds */
    for (long un = mxcc_split_at(j->units, j->parts, (int)part); un < mxcc_split_at(j->units, j->parts, (int)part + 1);
         un++) {
        const long b = un / j->nparts;
        const int pp = (int)(un % j->nparts);
        long t0, t1;
        block_tiles(j, b, &t0, &t1);
        const float *v = j->shared ? j->scratch + b * p->per_thread + p->v_off : s + p->v_off;
        if (!j->shared && b != have) {
            input_block(p, j->x, t0, t1, 0, p->C, s + p->v_off, s);
            have = b;
        }
        const int pa = (int)((long)j->npanels * pp / j->nparts), pb = (int)((long)j->npanels * (pp + 1) / j->nparts);
        for (int q0 = pa; q0 < pb; q0 += j->bpanels) {
            const int q1 = (int)min_l(pb, q0 + j->bpanels);
            gemm_block(p, j->u, t1 - t0, q0, q1, v, s);
            output_block(p, t0, t1, q0 * NR, (int)min_l(j->O, (long)q1 * NR), j->ep, j->y, s);
        }
    }
}

/* The first phase of a two-phase call: block b's V, channels of slice `part % slices`, into scratch slot b. */
static void transform_part(void *arg, long part, int worker)
{
    const wino_job *j = arg;
    const plan *p = j->p;
    float *s = j->scratch + worker * p->per_thread;
    const long b = part / j->slices;
    const int k = (int)(part % j->slices);
    const int c0 = (int)mxcc_split_at(p->C, j->slices, k), c1 = (int)mxcc_split_at(p->C, j->slices, k + 1);
    memset(s + p->zero_off, 0, (size_t)p->W * sizeof(float));
    long t0, t1;
    block_tiles(j, b, &t0, &t1);
    if (c1 > c0)
        input_block(p, j->x, t0, t1, c0, c1, j->scratch + b * p->per_thread + p->v_off, s);
}

/* Tile blocks alone, one thread's each, rather than channel parts, where U is at most WHOLE_U_BYTES: each thread
 * then transforms the input rows it reads and writes the output rows of all channels, and nothing it reads was
 * made by another thread in the same call; channel parts of one block read that block's V, which all threads
 * made together (two_phase: a second job, and V crossing between cores), or each make it again. The price is U,
 * read whole by every thread instead of a part each: cheap while U stays in cache, not when it streams from
 * memory. AMD EPYC family 25 model 17 (1 MiB L2, 32 MiB L3), 2 threads, `<net>_bench --profile`, alternating,
 * 2026-11-28: ResNet-18 stage 2 (128 x 28 x 28, U 2.25 MiB: 49 tiles as 28 + 21 instead of 49 x 2 channel
 * halves) 434-441 -> 376-386 us, SqueezeNet 1.1's 27x27 and 13x13 expand layers (U 0.6-2.25 MiB) 141 -> 119,
 * 105 -> 88, 166 -> 137 us, but ResNet-18 stage 3 (256 x 14 x 14, U 9 MiB) 598-604 -> 633-645 us. */
#ifndef WHOLE_U_BYTES
#define WHOLE_U_BYTES (4L << 20)
#endif
/* The least balance, in MR-tile panels (an even share against the busiest thread's), that takes tile blocks alone.
 * The cases measured above are 1 by panels (49 tiles, 4 panels, as 2 + 2: 28 + 21 tiles); ResNet's 56x56 on 4
 * threads (14 panels as 4 + 4 + 4 + 2) and on 8 (14 blocks of 1) are 7/8, and measured only by the split simulator
 * (docs/performance.md, "Thread scaling"). */
#define WHOLE_MIN_EFF 0.875

/* How nt threads share the layer: units of (tile block, part of the output-channel panels). plan_of's
 * cache-sized blocks while they give every thread work (parts of the channels only when blocks are few, as
 * few as make 2 units per thread); otherwise (few tiles for many threads: 14x14 tiles on 16 threads) the
 * blocks and channel parts whose busiest thread has the least work, counted in MR-tile x NR-channel panels
 * (ties: larger blocks, then fewer channel parts, which transform the input once per block). The tile block
 * does not change any sum: the result is the same for every split. codegen/splits.py models this. */
static void balanced_units(long tiles, long tb0, int npanels, int nt, long *tb, int *nparts)
{
    const long tp = ceil_div(tiles, MR), nblocks0 = ceil_div(tiles, tb0);
    *tb = tb0;
    *nparts = nt > 1 && nblocks0 < 2L * nt ? (int)min_l(npanels, ceil_div(2L * nt, nblocks0)) : 1;
    double best = -1.0;
    long seen = -1;
    for (long bp = tb0 / MR; bp >= 1 && nt > 1; bp--) {
        const long nblocks = ceil_div(tp, bp);
        if (nblocks == seen) continue;   /* the same blocks as a larger bp */
        seen = nblocks;
        const long bpb = ceil_div(tp, nblocks);   /* panels per block, balanced */
        for (int np = 1; np <= npanels; np++) {
            if (np > 1 && ceil_div(npanels, np) == ceil_div(npanels, np - 1)) continue;
            const long units = nblocks * np;
            const double busiest = (double)ceil_div(units, nt) * bpb * ceil_div(npanels, np);
            const double eff = (double)tp * npanels / nt / busiest;
            if (bp == tb0 / MR && np == *nparts && eff >= 0.9) return;   /* plan_of's blocks do */
            if (eff > best + 1e-9) {
                best = eff;
                *tb = bpb * MR;
                *nparts = np;
            }
        }
    }
}

/* balanced_units, unless its channel parts would share V (as many blocks as threads at most, two_phase) where U is
 * small (whole_u: WHOLE_U_BYTES): then the largest tile blocks alone that give every thread one, if they balance to
 * WHOLE_MIN_EFF. */
static void choose_units(long tiles, long tb0, int npanels, int nt, int whole_u, long *tb, int *nparts)
{
    balanced_units(tiles, tb0, npanels, nt, tb, nparts);
    if (!whole_u || *nparts <= 1 || ceil_div(tiles, *tb) > nt)
        return;
    const long tp = ceil_div(tiles, MR);
    for (long bp = tb0 / MR; bp >= 1; bp--) {
        const long nblocks = ceil_div(tp, bp);
        if (nblocks < nt)
            continue;
        const long bpb = ceil_div(tp, nblocks);
        if ((double)tp / nt / ((double)ceil_div(nblocks, nt) * bpb) >= WHOLE_MIN_EFF) {
            *tb = bpb * MR;
            *nparts = 1;
        }
        return;
    }
}

void mxcc_winograd_f43_f32(const mxcc_conv_geom *g, int batch, int O, const float *x, const float *u,
                           const mxcc_epilogue *ep, float *y, float *scratch, int parallel)
{
    plan pl = plan_of(g, batch, O);
    if (pl.tiles <= 0 || O <= 0)
        return;
    if (mxcc_epilogue_is_noop(ep))
        ep = NULL;
    const int npanels = (int)ceil_div(O, NR);
    /* no flops rule: tiles are big */
    int nt = parallel && omp_get_level() == 0 && !mxcc_pool_in_chunk() ? mxcc_pool_threads(omp_get_max_threads()) : 1;
    long tb;
    int nparts;
    choose_units(pl.tiles, pl.tb, npanels, nt, 36L * pl.C * O * (long)sizeof(float) <= WHOLE_U_BYTES, &tb, &nparts);
    if (tb != pl.tb) {
        /* the scratch is sized for plan_of's blocks: smaller blocks take larger output-channel blocks (M_BYTES
         * of M), so those are cut back to what the scratch holds (SqueezeNet's 64 -> 256 at 13x13 on 32
         * threads, AVX2: 2 blocks of 12 tiles x 16 channel parts instead of 1 block of 18 x 16) */
        plan smaller = with_tb(pl, tb, LONG_MAX);
        if (smaller.per_thread > pl.per_thread) {
            const long room = pl.per_thread - (smaller.per_thread - (smaller.strip_off - smaller.m_off));
            const long ob_max = room / (36L * tb) / NR * NR;   /* M's room in the scratch, in whole panels */
            if (ob_max >= NR)
                smaller = with_tb(pl, tb, ob_max);
        }
        if (smaller.per_thread <= pl.per_thread)
            pl = smaller;
        else
            nparts = nt > 1 && ceil_div(pl.tiles, pl.tb) < 2L * nt
                   ? (int)min_l(npanels, ceil_div(2L * nt, ceil_div(pl.tiles, pl.tb))) : 1;
    }
    const plan *p = &pl;
    const long nblocks = ceil_div(p->tiles, p->tb), units = nblocks * nparts;
    const int bpanels = (int)(p->ob / NR);
    nt = (int)min_l(nt, units);
    wino_job job = {p, u, x, ep, y, scratch, units, nblocks, block_grain(p, nblocks, nt), nparts, npanels, bpanels, nt,
                    O, 0, 1};
    /* Channel parts of a block each need its whole V. Made by each part, the input transform is repeated by
     * every thread that has one (ResNet-18 stage 3, 256 x 14 x 14 on 2 threads: 1.01 ms of work for 0.83 on
     * one; on 4 threads 1.50): so first the threads make the blocks' V together, a slice of the channels each,
     * into the scratch slot of each block (two_phase: as many slots as blocks), then each part reads it. */
    if (nparts > 1 && nblocks <= nt) {
        job.shared = 1;
        job.slices = (int)ceil_div(nt, nblocks);
        const int tparts = (int)min_l(nt, nblocks * job.slices);
        mxcc_parallel_chunks(nblocks * job.slices, tparts, transform_part, &job);
    }
    mxcc_parallel_chunks(nt, nt, wino_part, &job);   /* a part per thread; a late thread's by the caller */
}
