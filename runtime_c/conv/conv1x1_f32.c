/* Pointwise convolution (1x1, pad 0, one group) written straight into NCHW (contract: mxcc_conv.h).
 *
 *   y[n] (O, P) = W (O, C) . x[n] (C, P),   P = H*W pixels, then the per-channel epilogue
 *
 * With a stride (mxcc_conv1x1_strided_f32: ResNet's downsampling layers), P = OH*OW and every block of pixel
 * panels is gathered from x first (gather_block), then the same tiles run: the same bits as this kernel on
 * the subsampled image, and as the packed path (256->512 at 56x56 stride 2, 1 thread, AMD Zen 4: 2.0 ms
 * against the packed path's 2.2-2.5; from 14x14 outputs down the two tie).
 *
 * Output channels are the rows of the register tile (MR of them), pixels its columns (NR = NV vectors):
 * each tile row is a run of NR consecutive pixels of one channel plane, so the tile is stored into y as it
 * is (masked at the image's last pixels): no transposed store as in mxcc_conv_packed_f32 (pixels as rows), no
 * packing of the image per call as in the gemm path (MobileNet's 32->64@112 took 972 us there, ORT 602).
 *
 *   W  packed once at bind time by mxcc_conv1x1_pack_w_f32: weight_panels(O) panels (C, MR) sharing the O rows
 *      (panel_rows), rows past a panel's height zero;
 *      each k step broadcasts MR weights of one panel row.
 *   x  read in place: a full panel is NR consecutive pixels of each of the C rows (row stride P, or the ldx
 *      of mxcc_conv1x1_planes_f32). A panel with the image's last pixels (fewer than NR) is copied into a
 *      zero-padded (C, NR) panel of the thread's scratch, as all panels once were: reading in place saves
 *      that copy, 1-4% (C driver, 1 thread,
 *      AMD Zen 4, best of 15, in cache / caches flushed: 32->64@112 609/631 -> 596/627 us, 128->128@56
 *      987/1024 -> 948/963, 256->256@28 936/955 -> 925/939, 512->512@14 913/966 -> 906/966) where the rows
 *      start on cache lines; where they do not (14x14, 7x7; a depthwise layer before writes 14x14 planes 208
 *      floats apart instead), a block's panels are copied (run_range: PW_COPY_MIN_NB).
 *
 * Tile: AVX-512 12 channels x 32 pixels (24 zmm accumulators), AVX2+FMA 6 x 16 (12 ymm), plain C 4 x 16.
 * A panel's last pixels (fewer than NR) run as row tiles of one vector per row (AVX-512: 16 or 8 lanes) while
 * more than COL_MAX are left, then as column tiles (one vector of output channels per pixel); on AVX-512 up to
 * RIDE_MAX pixels after a row tile ride along it as such columns, and an image's last RIDE_MAX or fewer
 * pixels along its previous full panel (RIDE_MAX).
 * Loop nest per thread: block of pixel panels (C x PW_BLOCK_FLOATS / C floats, kept in L2) -> weight panel
 * (C x MR, from L1/L2) -> pixel panel -> tile over all C, epilogue on the accumulators, store. The tiles
 * prefetch the next weight panel, during a block's first weight panel its next pixel panel (read in place),
 * and during its last weight panel the next block's pixels. (The pixel panel outside the weight panels, BLIS's
 * order, measured 3-25% slower: docs/performance.md.)
 *
 * Threads: one job per call (mxcc_parallel_chunks), a part per thread. Work = (pixel panels of all images) x
 * (weight panels). It is split by pixel panels, by weight panels (7x7 and 14x14 images: 2 and 7 panels;
 * every thread then copies the image's last panel, C x NR floats), or as contiguous ranges of the grid of
 * both, whichever has the least busiest part counting its reads (mxcc_conv1x1_f32). Each output element is
 * one tile over the whole C whatever the split: the result does not depend on the thread count (bit for bit).
 */

#include <stdint.h>

#include "mxcc_conv.h"
#include "conv_internal.h"
#include "gemm/gemm_internal.h"
#include "gemm/epilogue_simd.h"
#include "../parallel.h"
#include "../simd.h"

/* MR_STEP: the tile heights compiled, for weight panels shorter than MR (panel_rows: O = 64 with MR = 12 is
 * four panels of 12 rows and two of 8) */
#if defined(__AVX512F__)
#define MR 12
#define MR_STEP 4
#elif defined(__AVX2__) && defined(__FMA__)
#define MR 6
#define MR_STEP 2
#else
#define MR 4
#define MR_STEP 4
#endif
/* RIDE_MAX: up to this many pixels after a row tile ride along it as columns (one 16-lane FMA chain per pixel,
 * lanes = the panel's MR output channels, the pixel's value broadcast) instead of running as a column tile of
 * their own afterwards: a column tile reads the whole weight panel again and the pixels a row (or a line) per
 * channel, and it cost out of all proportion (Intel Xeon model 167, 1 thread: 512->512 at 196 pixels 665 us
 * against 583 at 192, 1024->1024 at 49 pixels 793 against 663 at 48). An image whose last panel would hold no
 * more than RIDE_MAX pixels gives them to the panel before (14x14: 6 panels, the last of 36 pixels). AVX-512
 * only: the ride needs RIDE_MAX registers beside a full tile's 24 accumulators, and AVX2 has 16. */
#if defined(__AVX512F__)
#define RIDE_MAX 4
#else
#define RIDE_MAX 0
#endif
#define VL MXCC_SIMD_SIZE_F32   /* lanes of the build's vector (simd.h): 16, 8, 8 */
#define NV 2
#define NR (NV * VL)            /* pixels per tile */
/* The tiles' channel loop unrolled by CONV1X1_UNROLL (the pointer bumps, the prefetch addresses and the loop
 * branch shared by that many steps). MobileNet 1.0's pointwise layers alone, 1 thread, Intel Xeon model 167
 * (benchmarks/conv1x1.py, CP_FLAGS=-DCONV1X1_UNROLL=n), sum of the nine: 1 4944 us, 2 4687-4716, 4 4748
 * (128->128@56 slower by 15%), 8 4705-4714; the network 9.07 -> 8.79 ms on 1 thread. The AVX2 tiles the same: the
 * AVX2 build of MobileNet 1.0 on the same machine 16.4 -> 15.9 ms. */
#ifndef CONV1X1_UNROLL
#define CONV1X1_UNROLL 2
#endif
#define PRAGMA_(x) _Pragma(#x)
#define UNROLL_C(n) PRAGMA_(GCC unroll n)
#define NR_MAX 32               /* the widest NR of any build: sizes the scratch */
/* The loops over a tile's rows and vectors are unrolled before GCC decides where the accumulators live:
 * left to the late unroller they stay an array on the stack, zeroed there before the k loop and stored
 * and reloaded around the epilogue (32->48@32 in cache, 1 thread: 27% of the tile's time outside its k loop). */
#define UNROLLED _Pragma("GCC unroll 16")

/* Pixels per block (floats, C rows of it): every weight panel runs over all of a block's panels, so each
 * output row and each input row is walked in runs of several panels (32 channels: 2048 pixels), not 128-byte
 * pieces a plane apart; the block (256 KiB) stays in L2. At least one panel. Measured when blocks were packed:
 * C driver, 1 thread, best of 3 (us, data in cache / caches flushed before each call), one panel per block
 * vs 32K / 64K / 128K floats: 32->64@112 848/1179 vs 630/772, 833/754, 615/837; 64->128@56 525/804 vs
 * 529/616, 526/602, 528/626; 128->128@56 1006/1352 vs 1012/1207, 991/1106, 1002/1163; 256->256@28
 * 1048/1131 vs 959/1058, 962/1047, 952/1032. */
#ifndef PW_BLOCK_FLOATS
#define PW_BLOCK_FLOATS (64 * 1024)
#endif

/* Weight panels for O output channels: ceil(O / MR), one more where that is odd and at least 16 (taller tiles
 * than MR_STEP only), so that halves and most quarters of them hold the same rows. */
static int weight_panels(int O)
{
    return (int)MXCC_CONV1X1_PANELS(O, MR, MR_STEP);
}

/* The output channels of weight panel b: [*o0, *o0 + *h). The panels share the rows in steps of MR_STEP as
 * evenly as they go, the taller and shorter ones interleaved (b * steps / nb steps before panel b), so that a
 * split of the panels by count is one of the rows: O = 512 on AVX-512 is 44 panels, 40 of 12 rows and 4 of 8,
 * 22 and 256 rows a half (the taller first, 43 panels split 21 / 22 on 2 threads into 252 / 260 rows: the
 * weight split of MobileNet's 14x14 layers). No panel shorter than 2 steps where MR allows 3: O = 64 is
 * 8, 12, 12, 8, 12, 12, not five panels of 12 and one of 4 (a tile of 4 rows x 32 pixels has 8 accumulators
 * for its 6 loads per step, and 32->64@112 spent 9% of its time there for 6% of the multiply-adds). */
static void panel_rows(int O, int b, int *o0, int *h)
{
    const long nb = weight_panels(O), steps = (O + MR_STEP - 1) / MR_STEP;
    *o0 = (int)(b * steps / nb) * MR_STEP;
    *h = (int)((b + 1) * steps / nb) * MR_STEP - *o0;
    if (*o0 + *h > O) *h = O - *o0;
}

long mxcc_conv1x1_packed_w_floats(int C, int O)
{
    return (long)C * weight_panels(O) * MR;
}

void mxcc_conv1x1_pack_w_f32(int O, int C, const float *w, float *wp)
{
    const int nb = weight_panels(O);
    for (int b = 0; b < nb; b++) {
        float *d = wp + (long)b * C * MR;   /* (C, MR) panel b: rows [o0, o0 + h) of W, zeros after */
        int o0, h;
        panel_rows(O, b, &o0, &h);
        for (int c = 0; c < C; c++)
            for (int r = 0; r < MR; r++)
                d[(long)c * MR + r] = r < h ? w[(long)(o0 + r) * C + c] : 0.0f;
    }
}

void mxcc_conv1x1_scale_packed_w_f32(int O, int C, float *wp, const float *scale)
{
    const int nb = weight_panels(O);
    for (int b = 0; b < nb; b++) {
        float *d = wp + (long)b * C * MR;
        int o0, h;
        panel_rows(O, b, &o0, &h);
        for (int c = 0; c < C; c++)
            for (int r = 0; r < h; r++) d[(long)c * MR + r] *= scale[o0 + r];
    }
}

/* Pixel panels per block for C channels (the same for every build: NR_MAX) */
static long block_panels(long C)
{
    const long b = PW_BLOCK_FLOATS / (C * NR_MAX);
    return b < 1 ? 1 : b;
}

/* A thread's copies of a block's pixel panels: (C, NR) each, an image's last panel with ride columns (C, NR + 16) */
static long thread_floats(long C) { return mxcc_round16(block_panels(C) * C * NR_MAX + C * 16); }

long mxcc_conv1x1_scratch_floats(int C, int max_threads)
{
    return (long)mxcc_scratch_threads(max_threads) * thread_floats(C);
}

/* Rows of ld floats: bp (C, ld) = pixels [p0, p0 + np) of x (C, P), np <= ld, zeros past np (a short panel's
 * tiles read whole vectors). A row is a few vectors: inline copies, not a library call per row. */
static void pack_pixels(long C, long P, const float *restrict x, long p0, int np, float *restrict bp, int ld)
{
    x += p0;
#if defined(__AVX512F__)
    const __mmask16 k0 = mxcc_tail_f32x16(np), k1 = mxcc_tail_f32x16(np - 16), k2 = mxcc_tail_f32x16(np - 32);
    for (long c = 0; c < C; c++) {
        _mm512_storeu_ps(bp + c * ld, _mm512_maskz_loadu_ps(k0, x + c * P));
        _mm512_storeu_ps(bp + c * ld + 16, _mm512_maskz_loadu_ps(k1, x + c * P + 16));
        if (ld > 32) _mm512_storeu_ps(bp + c * ld + 32, _mm512_maskz_loadu_ps(k2, x + c * P + 32));
    }
#else
    for (long c = 0; c < C; c++)
        for (int j = 0; j < ld; j++) bp[c * ld + j] = j < np ? x[c * P + j] : 0.0f;
#endif
}

/* The epilogue of one tile: vectors at its first channel, the residual at its first (channel, pixel). */
typedef struct tile_ep {
    const float *scale, *shift, *bias;   /* (m,) or NULL */
    const float *res;                    /* (m, ld) or NULL */
    long ld;
    int act;                             /* MXCC_ACT_RELU / LEAKY / CLIP applied in registers, else none */
    float alpha, lo, hi;
    /* Prefetch streams into L2, one step per channel c: pf_w + c * MR (the next weight panel) and the two
     * lines at pf_x + c * pf_ld (the next block's pixels); pointers at the tile's own operands when there is
     * nothing to fetch (already in L1: a no-op). */
    const float *pf_w, *pf_x;
    long pf_ld;
    long ldb;                            /* row stride of the pixel panel: NR packed, P read in place */
} tile_ep;

/* The prefetches of step c: they overlap the next operands' trip from L3 or DRAM with this tile's FMAs
 * (packing a block and a weight panel's first tile otherwise wait for memory: 512->512@14 with x and W
 * flushed from the caches took 1015 us against 914 us in cache, in a network they mostly are not in L2). */
#define TILE_PREFETCH(c) do { \
        __builtin_prefetch(pf_w + (c) * MR, 0, 2); \
        __builtin_prefetch(pf_x + (c) * pf_ld, 0, 2); \
        __builtin_prefetch(pf_x + (c) * pf_ld + 16, 0, 2); \
    } while (0)

/* The epilogue of columns (scalar): racc[j][r] = channel r of pixel j, stored at y[r, j]; off = the columns'
 * offset in the tile (its residual). A column tile's and the ride columns'; the operations and their order
 * those of the row tiles. */
static inline __attribute__((always_inline)) void store_columns(int rc, float racc[][16], int m, float *restrict y,
                                                          long ldy, const tile_ep *e, int off)
{
    for (int r = 0; r < m; r++)
        for (int j = 0; j < rc; j++) {
            float v = racc[j][r];
            if (e->scale) v *= e->scale[r];
            if (e->shift) v += e->shift[r];
            if (e->bias) v += e->bias[r];
            if (e->res) v += e->res[r * e->ld + off + j];
            y[r * ldy + j] = mxcc_act_f32x1((mxcc_act)e->act, e->alpha, e->lo, e->hi, v);
        }
}

#if defined(__AVX2__) && defined(__FMA__)   /* also in AVX-512 builds: the quarter-width tile */
/* The full tiles' common epilogues in straight-line code (no per-vector tests, accumulators kept in registers;
 * 32->64@112, 1 thread: 598 -> 558 us): y[r, :] = act(acc[r] * mul[r] + add[r]), a NULL mul / add not
 * applied, act none, relu or clip (MobileNet v2's relu6: its 14x14 expansions 96->576 spent ~10% in the
 * general epilogue), the operations and their order those of the general epilogue. */
enum { EP_NONE, EP_RELU, EP_CLIP };
static inline __attribute__((always_inline)) void store256(int mr, int nv, __m256 acc[MR][NV], float *restrict y,
                                                        long ldy, const float *mul, const float *add, int act,
                                                        float lo, float hi)
{
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    UNROLLED for (int r = 0; r < mr; r++) {
        const __m256 s = mul ? _mm256_set1_ps(mul[r]) : _mm256_setzero_ps(), t = add ? _mm256_set1_ps(add[r])
                                                                                       : _mm256_setzero_ps();
        UNROLLED for (int v = 0; v < nv; v++) {
            __m256 a = acc[r][v];
            if (mul) a = _mm256_mul_ps(a, s);
            if (add) a = _mm256_add_ps(a, t);
            if (act == EP_RELU) a = mxcc_relu_f32x8(a);
            if (act == EP_CLIP) a = mxcc_clip_f32x8(a, vlo, vhi);
            _mm256_storeu_ps(y + r * ldy + 8 * v, a);
        }
    }
}

/* The straight-line epilogue's activation for act, or -1 when it takes the general one */
static inline int straight_act(mxcc_act act)
{
    return act == MXCC_ACT_NONE ? EP_NONE : act == MXCC_ACT_RELU ? EP_RELU : act == MXCC_ACT_CLIP ? EP_CLIP : -1;
}

/* The full tile's straight-line epilogue (BatchNorm, bias, or neither; no residual): whether it applied */
#define STRAIGHT_STORE(store, mr, nv, acc, y, ldy) ( \
    (scale && shift && !bias) ? (store(mr, nv, acc, y, ldy, scale, shift, sa, lo, hi), 1) : \
    (!scale && !shift && bias) ? (store(mr, nv, acc, y, ldy, NULL, bias, sa, lo, hi), 1) : \
    (!scale && !shift && !bias) ? (store(mr, nv, acc, y, ldy, NULL, NULL, sa, lo, hi), 1) : 0)

static inline __attribute__((always_inline)) void tile256(int mr, int nv, int rc, int pf, long C,
                                                       const float *restrict wp, const float *restrict bp, int m,
                                                       int n, float *restrict y, long ldy, const tile_ep *e)
{
    __m256 acc[MR][NV];
    UNROLLED for (int r = 0; r < mr; r++)
        UNROLLED for (int v = 0; v < nv; v++) acc[r][v] = _mm256_setzero_ps();
#if RIDE_MAX > 0   /* AVX-512 builds: the quarter-width tile's ride columns on 16-lane registers, as in tile512 */
    const int w8 = 8 * nv;
    __m512 ride[RIDE_MAX + 1];
    long roff[RIDE_MAX + 1];
    UNROLLED for (int j = 0; j < rc; j++) {
        ride[j] = _mm512_setzero_ps();
        roff[j] = w8 + (j < n - w8 ? j : n - w8 - 1);
    }
#else
    (void)rc;
#endif
    const long ldb = e->ldb, pf_ld = e->pf_ld;
    const float *const pf_w = e->pf_w, *const pf_x = e->pf_x;
    for (int r = 0; r < m; r++)   /* this tile's output lines, for writing: their misses overlap the FMAs */
        UNROLLED for (int v = 0; v < nv; v++) __builtin_prefetch(y + r * ldy + 8 * v, 1, 3);
    UNROLL_C(CONV1X1_UNROLL)
    for (long c = 0; c < C; c++) {
        if (pf) TILE_PREFETCH(c);
        __m256 b[NV];
        UNROLLED for (int v = 0; v < nv; v++) b[v] = _mm256_loadu_ps(bp + c * ldb + 8 * v);
        UNROLLED for (int r = 0; r < mr; r++) {
            const __m256 w = _mm256_broadcast_ss(wp + c * MR + r);
            UNROLLED for (int v = 0; v < nv; v++) acc[r][v] = _mm256_fmadd_ps(w, b[v], acc[r][v]);
        }
#if RIDE_MAX > 0
        if (rc) {
            const __m512 wv = _mm512_maskz_loadu_ps(mxcc_tail_f32x16(MR), wp + c * MR);
            UNROLLED for (int j = 0; j < rc; j++)
                ride[j] = _mm512_fmadd_ps(wv, _mm512_set1_ps(bp[c * ldb + roff[j]]), ride[j]);
        }
#endif
    }
#if RIDE_MAX > 0
    if (rc) {
        float racc[RIDE_MAX + 1][16];
        UNROLLED for (int j = 0; j < rc; j++) _mm512_storeu_ps(racc[j], ride[j]);
        store_columns(n - w8, racc, m, y + w8, ldy, e, w8);
        n = w8;
    }
#endif
    /* the epilogue's operands in locals: the stores to y could otherwise alias *e and reload them per vector */
    const float *const scale = e->scale, *const shift = e->shift, *const bias = e->bias, *const res = e->res;
    const long ld = e->ld;
    const mxcc_act act = (mxcc_act)e->act;
    const float alpha = e->alpha, lo = e->lo, hi = e->hi;
    const int sa = straight_act(act);   /* as in tile512 */
    if (m == mr && n == 8 * nv && !res && sa >= 0 && STRAIGHT_STORE(store256, mr, nv, acc, y, ldy))
        return;
    /* unrolled with tests, not loops to m and n: acc is indexed by constants only (UNROLLED) */
    UNROLLED for (int r = 0; r < mr; r++) {
        UNROLLED for (int v = 0; v < nv; v++) {
            const int left = n - 8 * v;
            if (r >= m || left <= 0) continue;
            const __m256i k = mxcc_tail_f32x8(left);
            __m256 a = acc[r][v];
            if (scale) a = _mm256_mul_ps(a, _mm256_set1_ps(scale[r]));
            if (shift) a = _mm256_add_ps(a, _mm256_set1_ps(shift[r]));
            if (bias) a = _mm256_add_ps(a, _mm256_set1_ps(bias[r]));
            if (res) a = _mm256_add_ps(a, _mm256_maskload_ps(res + r * ld + 8 * v, k));
            a = mxcc_act_f32x8(act, alpha, lo, hi, a);
            if (left >= 8) _mm256_storeu_ps(y + r * ldy + 8 * v, a);
            else _mm256_maskstore_ps(y + r * ldy + 8 * v, k, a);
        }
    }
}
#endif

#if defined(__AVX512F__)
/* store256 on 16 lanes */
static inline __attribute__((always_inline)) void store512(int mr, int nv, __m512 acc[MR][NV], float *restrict y,
                                                        long ldy, const float *mul, const float *add, int act,
                                                        float lo, float hi)
{
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    UNROLLED for (int r = 0; r < mr; r++) {
        const __m512 s = mul ? _mm512_set1_ps(mul[r]) : _mm512_setzero_ps(), t = add ? _mm512_set1_ps(add[r])
                                                                                       : _mm512_setzero_ps();
        UNROLLED for (int v = 0; v < nv; v++) {
            __m512 a = acc[r][v];
            if (mul) a = _mm512_mul_ps(a, s);
            if (add) a = _mm512_add_ps(a, t);
            if (act == EP_RELU) a = mxcc_relu_f32x16(a);
            if (act == EP_CLIP) a = mxcc_clip_f32x16(a, vlo, vhi);
            _mm512_storeu_ps(y + r * ldy + 16 * v, a);
        }
    }
}

/* y[r, 0:n] (row stride ldy) for r < m = wp (C, MR)^T . bp (C, NR), nv vectors per row (n <= nv * 16),
 * then the epilogue. */
static inline __attribute__((always_inline)) void tile512(int mr, int nv, int rc, int pf, long C,
                                                       const float *restrict wp, const float *restrict bp, int m,
                                                       int n, float *restrict y, long ldy, const tile_ep *e)
{
    __m512 acc[MR][NV], ride[RIDE_MAX + 1];
    const int w16 = 16 * nv;   /* the row part's pixels; n - w16 ride columns after them, on rc chains */
    long roff[RIDE_MAX + 1];
    UNROLLED for (int r = 0; r < mr; r++)
        UNROLLED for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
    UNROLLED for (int j = 0; j < rc; j++) {
        ride[j] = _mm512_setzero_ps();
        roff[j] = w16 + (j < n - w16 ? j : n - w16 - 1);   /* chains past the columns repeat the last one */
    }
    const long ldb = e->ldb, pf_ld = e->pf_ld;
    const float *const pf_w = e->pf_w, *const pf_x = e->pf_x;
    for (int r = 0; r < m; r++)   /* this tile's output lines, for writing: their misses overlap the FMAs */
        UNROLLED for (int v = 0; v < nv; v++) __builtin_prefetch(y + r * ldy + 16 * v, 1, 3);
    UNROLL_C(CONV1X1_UNROLL)
    for (long c = 0; c < C; c++) {
        if (pf) TILE_PREFETCH(c);
        /* the ride columns first, the panel row's MR weights times each pixel (one FMA chain per pixel): their
         * weight vector is dead before the row part's pixels load. A full tile with 3 or 4 ride columns needs
         * 31 of the 32 registers and GCC 12 keeps one or two accumulators on the stack; it still beats a
         * column tile by far (see RIDE_MAX). */
        if (rc) {
            const __m512 wv = _mm512_maskz_loadu_ps(mxcc_tail_f32x16(MR), wp + c * MR);
            UNROLLED for (int j = 0; j < rc; j++)
                ride[j] = _mm512_fmadd_ps(wv, _mm512_set1_ps(bp[c * ldb + roff[j]]), ride[j]);
        }
        __m512 b[NV];
        UNROLLED for (int v = 0; v < nv; v++) b[v] = _mm512_loadu_ps(bp + c * ldb + 16 * v);
        UNROLLED for (int r = 0; r < mr; r++) {
            const __m512 w = _mm512_set1_ps(wp[c * MR + r]);
            UNROLLED for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(w, b[v], acc[r][v]);
        }
    }
    if (rc) {
        float racc[RIDE_MAX + 1][16];
        UNROLLED for (int j = 0; j < rc; j++) _mm512_storeu_ps(racc[j], ride[j]);
        store_columns(n - w16, racc, m, y + w16, ldy, e, w16);
        n = w16;
    }
    /* the epilogue's operands in locals: the stores to y could otherwise alias *e and reload them per vector */
    const float *const scale = e->scale, *const shift = e->shift, *const bias = e->bias, *const res = e->res;
    const long ld = e->ld;
    const mxcc_act act = (mxcc_act)e->act;
    const float alpha = e->alpha, lo = e->lo, hi = e->hi;
    /* the common full tiles in straight-line code, the same operations in the same order */
    const int sa = straight_act(act);
    if (m == mr && n == 16 * nv && !res && sa >= 0 && STRAIGHT_STORE(store512, mr, nv, acc, y, ldy))
        return;
    /* as in tile256 */
    UNROLLED for (int r = 0; r < mr; r++) {
        UNROLLED for (int v = 0; v < nv; v++) {
            const int left = n - 16 * v;
            if (r >= m || left <= 0) continue;
            const __mmask16 k = mxcc_tail_f32x16(left);
            __m512 a = acc[r][v];
            if (scale) a = _mm512_mul_ps(a, _mm512_set1_ps(scale[r]));
            if (shift) a = _mm512_add_ps(a, _mm512_set1_ps(shift[r]));
            if (bias) a = _mm512_add_ps(a, _mm512_set1_ps(bias[r]));
            if (res) a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(k, res + r * ld + 16 * v));
            a = mxcc_act_f32(act, alpha, lo, hi, a);   /* the build's vector: 16 lanes */
            _mm512_mask_storeu_ps(y + r * ldy + 16 * v, k, a);
        }
    }
}
#endif

#if !defined(__AVX512F__) && !(defined(__AVX2__) && defined(__FMA__))
/* Plain C: the accumulators in an array the compiler may vectorize; the epilogue after the store. */
static inline void tile(int mr, int nv, int rc, int pf, long C, const float *restrict wp, const float *restrict bp,
                        int m, int n, float *restrict y, long ldy, const tile_ep *e)
{
    float acc[MR][NR];
    const int w = nv * VL;
    const long ldb = e->ldb;
    (void)mr; (void)rc; (void)pf;   /* MR_STEP = MR: one height; no ride columns (RIDE_MAX 0); nothing prefetched */
    for (int r = 0; r < MR; r++)
        for (int j = 0; j < w; j++) acc[r][j] = 0.0f;
    for (long c = 0; c < C; c++)
        for (int r = 0; r < MR; r++) {
            const float a = wp[c * MR + r];
            for (int j = 0; j < w; j++) acc[r][j] += a * bp[c * ldb + j];
        }
    for (int r = 0; r < m; r++) {
        float *yr = y + r * ldy;   /* (n,) */
        for (int j = 0; j < n; j++) {
            float a = acc[r][j];
            if (e->scale) a *= e->scale[r];
            if (e->shift) a += e->shift[r];
            if (e->bias) a += e->bias[r];
            if (e->res) a += e->res[r * e->ld + j];
            yr[j] = mxcc_act_f32x1((mxcc_act)e->act, e->alpha, e->lo, e->hi, a);
        }
    }
}
#endif

/* The instances: every height MR_STEP, 2*MR_STEP, .., MR, in every width class: one 8-lane vector, then on
 * AVX-512 one and two 16-lane vectors, on AVX2 two 8-lane vectors. */
typedef void tile_fn(long C, const float *wp, const float *bp, int m, int n, float *y, long ldy, const tile_ep *e);
#define TILE_FN(kernel, name, mr, nv) \
    static __attribute__((noinline)) void name(long C, const float *wp, const float *bp, int m, int n, float *y, \
                                               long ldy, const tile_ep *e) \
    { kernel(mr, nv, 0, 1, C, wp, bp, m, n, y, ldy, e); }
/* A full tile whose prefetch pointers are its own operands (most tiles: neither a block's first nor its last
 * weight panel, nor a weight panel's first pixel panel) runs without the three no-op prefetches per channel:
 * MobileNet 1.0's pointwise shapes alone 2-4% faster without them. */
#define TILE_FN_NOPF(kernel, name, mr, nv) \
    static __attribute__((noinline)) void name##_np(long C, const float *wp, const float *bp, int m, int n, \
                                                    float *y, long ldy, const tile_ep *e) \
    { kernel(mr, nv, 0, 0, C, wp, bp, m, n, y, ldy, e); }
/* A row tile with ride columns after it (n = its width + 1..RIDE_MAX) on rc FMA chains: one column on 1, two to
 * four on 4 (the chains past the columns repeat the last one, discarded): two instances per tile, not four
 * (the 36 of heights 4, 8, 12 x 3 widths x 4 counts took conv1x1_f32.c's compile from 3 s to 14). Heights 8
 * and 12 only: a 4-row panel (O <= 4) takes a column tile. RIDE_INDEX: the instance for a count. */
#define RIDE_FN(kernel, name, mr, nv, rc) \
    static __attribute__((noinline)) void name##_r##rc(long C, const float *wp, const float *bp, int m, int n, \
                                                       float *y, long ldy, const tile_ep *e) \
    { kernel(mr, nv, rc, 1, C, wp, bp, m, n, y, ldy, e); }
#define RIDE_FNS(kernel, name, mr, nv) RIDE_FN(kernel, name, mr, nv, 1) RIDE_FN(kernel, name, mr, nv, 4)
#define RIDES(name) {name##_r1, name##_r4}
#define RIDE_INDEX(cols) ((cols) > 1)
#if defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define WIDTHS 3
TILE_FN(tile256, t4q, 4, 1) TILE_FN(tile512, t4h, 4, 1) TILE_FN(tile512, t4f, 4, 2)
TILE_FN(tile256, t8q, 8, 1) TILE_FN(tile512, t8h, 8, 1) TILE_FN(tile512, t8f, 8, 2)
TILE_FN(tile256, t12q, 12, 1) TILE_FN(tile512, t12h, 12, 1) TILE_FN(tile512, t12f, 12, 2)
static tile_fn *const TILES[][WIDTHS] = {{t4q, t4h, t4f}, {t8q, t8h, t8f}, {t12q, t12h, t12f}};
TILE_FN_NOPF(tile512, t4f, 4, 2) TILE_FN_NOPF(tile512, t8f, 8, 2) TILE_FN_NOPF(tile512, t12f, 12, 2)
static tile_fn *const FULL_NOPF[] = {t4f_np, t8f_np, t12f_np};
RIDE_FNS(tile256, t8q, 8, 1) RIDE_FNS(tile512, t8h, 8, 1) RIDE_FNS(tile512, t8f, 8, 2)
RIDE_FNS(tile256, t12q, 12, 1) RIDE_FNS(tile512, t12h, 12, 1) RIDE_FNS(tile512, t12f, 12, 2)
static tile_fn *const RIDE_TILES[][WIDTHS][2] = {
    {{0, 0}, {0, 0}, {0, 0}}, {RIDES(t8q), RIDES(t8h), RIDES(t8f)}, {RIDES(t12q), RIDES(t12h), RIDES(t12f)}};
#elif defined(__AVX512F__)
#define WIDTHS 2
TILE_FN(tile512, t4h, 4, 1) TILE_FN(tile512, t4f, 4, 2) TILE_FN(tile512, t8h, 8, 1) TILE_FN(tile512, t8f, 8, 2)
TILE_FN(tile512, t12h, 12, 1) TILE_FN(tile512, t12f, 12, 2)
static tile_fn *const TILES[][WIDTHS] = {{t4h, t4f}, {t8h, t8f}, {t12h, t12f}};
TILE_FN_NOPF(tile512, t4f, 4, 2) TILE_FN_NOPF(tile512, t8f, 8, 2) TILE_FN_NOPF(tile512, t12f, 12, 2)
static tile_fn *const FULL_NOPF[] = {t4f_np, t8f_np, t12f_np};
RIDE_FNS(tile512, t8h, 8, 1) RIDE_FNS(tile512, t8f, 8, 2) RIDE_FNS(tile512, t12h, 12, 1) RIDE_FNS(tile512, t12f, 12, 2)
static tile_fn *const RIDE_TILES[][WIDTHS][2] = {{{0, 0}, {0, 0}}, {RIDES(t8h), RIDES(t8f)}, {RIDES(t12h), RIDES(t12f)}};
#elif defined(__AVX2__) && defined(__FMA__)
#define WIDTHS 2
TILE_FN(tile256, t2h, 2, 1) TILE_FN(tile256, t2f, 2, 2) TILE_FN(tile256, t4h, 4, 1) TILE_FN(tile256, t4f, 4, 2)
TILE_FN(tile256, t6h, 6, 1) TILE_FN(tile256, t6f, 6, 2)
static tile_fn *const TILES[][WIDTHS] = {{t2h, t2f}, {t4h, t4f}, {t6h, t6f}};
TILE_FN_NOPF(tile256, t2f, 2, 2) TILE_FN_NOPF(tile256, t4f, 4, 2) TILE_FN_NOPF(tile256, t6f, 6, 2)
static tile_fn *const FULL_NOPF[] = {t2f_np, t4f_np, t6f_np};
#else
#define WIDTHS 2
TILE_FN(tile, t4h, 4, 1) TILE_FN(tile, t4f, 4, 2)
static tile_fn *const TILES[][WIDTHS] = {{t4h, t4f}};
static tile_fn *const FULL_NOPF[] = {t4f};   /* the plain C tile prefetches nothing */
#endif

/* ---- column tiles: a panel's last few pixels ------------------------------------------------------------------
 * Up to COL_MAX pixels, each one vector of the MR output channels (the weight panel's row c is MR contiguous
 * floats) times the pixel's value broadcast: 1 FMA per pixel and channel, where the narrowest row tile costs 6
 * (AVX-512: 12 rows x one 8-lane vector = 6 zmm-equivalents). 7x7 images: 49 = 32 + 16 + 1 pixels run as 37
 * FMAs per channel and weight panel, not the 48 of 64 lanes; 14x14: 196 = 6 x 32 + 4.
 * Fewer than 4 pixels would be one FMA chain each, bound by the FMA latency (4 cycles per channel): the sum
 * over c is split into COL_SPLIT(t) partial sums (channels c = s mod S), added at the end, so that at least 4
 * chains run (7x7 images: 10% of a 1024->1024 layer was the one-pixel tile's chain). */
#define COL_MAX 5
#define COL_SPLIT(t) ((t) == 1 ? 4 : (t) <= 3 ? 2 : 1)

static inline __attribute__((always_inline)) void cols(int t, long C, const float *restrict wp,
                                                       const float *restrict bp, int m, float *restrict y,
                                                       long ldy, const tile_ep *e)
{
    float acc[COL_MAX][16];   /* acc[j][r]: pixel j, channel r */
    const int S = COL_SPLIT(t);
    const long ldb = e->ldb;   /* NR for a copied panel; P (or NR + 16) for an image's last panel with rides */
    const long C0 = C / S * S;   /* channels [0, C0) in the S chains, then the rest in chain 0 */
#if defined(__AVX512F__)
    const __mmask16 rows = mxcc_tail_f32x16(MR);
    __m512 a[4][COL_MAX];   /* a[s][j]: chain s of pixel j */
    UNROLLED for (int s = 0; s < S; s++)
        UNROLLED for (int j = 0; j < t; j++) a[s][j] = _mm512_setzero_ps();
    for (long c = 0; c < C0; c += S)
        UNROLLED for (int s = 0; s < S; s++) {
            const __m512 w = _mm512_maskz_loadu_ps(rows, wp + (c + s) * MR);
            UNROLLED for (int j = 0; j < t; j++)
                a[s][j] = _mm512_fmadd_ps(w, _mm512_set1_ps(bp[(c + s) * ldb + j]), a[s][j]);
        }
    for (long c = C0; c < C; c++) {
        const __m512 w = _mm512_maskz_loadu_ps(rows, wp + c * MR);
        UNROLLED for (int j = 0; j < t; j++) a[0][j] = _mm512_fmadd_ps(w, _mm512_set1_ps(bp[c * ldb + j]), a[0][j]);
    }
    UNROLLED for (int j = 0; j < t; j++) {
        if (S == 4) a[0][j] = _mm512_add_ps(_mm512_add_ps(a[0][j], a[1][j]), _mm512_add_ps(a[2][j], a[3][j]));
        else if (S == 2) a[0][j] = _mm512_add_ps(a[0][j], a[1][j]);
        _mm512_storeu_ps(acc[j], a[0][j]);
    }
#elif defined(__AVX2__) && defined(__FMA__)
    const __m256i rows = mxcc_tail_f32x8(MR);
    __m256 a[4][COL_MAX];
    UNROLLED for (int s = 0; s < S; s++)
        UNROLLED for (int j = 0; j < t; j++) a[s][j] = _mm256_setzero_ps();
    for (long c = 0; c < C0; c += S)
        UNROLLED for (int s = 0; s < S; s++) {
            const __m256 w = _mm256_maskload_ps(wp + (c + s) * MR, rows);
            UNROLLED for (int j = 0; j < t; j++)
                a[s][j] = _mm256_fmadd_ps(w, _mm256_set1_ps(bp[(c + s) * ldb + j]), a[s][j]);
        }
    for (long c = C0; c < C; c++) {
        const __m256 w = _mm256_maskload_ps(wp + c * MR, rows);
        UNROLLED for (int j = 0; j < t; j++) a[0][j] = _mm256_fmadd_ps(w, _mm256_set1_ps(bp[c * ldb + j]), a[0][j]);
    }
    UNROLLED for (int j = 0; j < t; j++) {
        if (S == 4) a[0][j] = _mm256_add_ps(_mm256_add_ps(a[0][j], a[1][j]), _mm256_add_ps(a[2][j], a[3][j]));
        else if (S == 2) a[0][j] = _mm256_add_ps(a[0][j], a[1][j]);
        _mm256_storeu_ps(acc[j], a[0][j]);
    }
#else
    (void)S; (void)C0;
    for (int j = 0; j < t; j++)
        for (int r = 0; r < MR; r++) acc[j][r] = 0.0f;
    for (long c = 0; c < C; c++)
        for (int j = 0; j < t; j++)
            for (int r = 0; r < MR; r++) acc[j][r] += wp[c * MR + r] * bp[c * ldb + j];
#endif
    store_columns(t, acc, m, y, ldy, e, 0);
}

#define COLS_FN(t) \
    static __attribute__((noinline)) void cols_##t(long C, const float *wp, const float *bp, int m, int n, float *y, \
                                                   long ldy, const tile_ep *e) \
    { (void)n; cols(t, C, wp, bp, m, y, ldy, e); }
COLS_FN(1) COLS_FN(2) COLS_FN(3) COLS_FN(4) COLS_FN(5)
static tile_fn *const COLS[COL_MAX + 1] = {0, cols_1, cols_2, cols_3, cols_4, cols_5};

/* One weight panel (rows [o0, o0 + m)) over one pixel panel of np pixels: a full tile (with np - NR ride
 * columns: an image's last panel of NR + up to RIDE_MAX pixels), or for a panel's last pixels row tiles of 16 /
 * 8 pixels (the narrowest that fit, AVX2: 8) while more than COL_MAX are left, a remainder of up to RIDE_MAX
 * pixels riding along the last of them, then column tiles. */
static void panel(long C, const float *w, const float *bp, int m, int np, float *y, long ldy, const tile_ep *e0)
{
    tile_fn *const *row = TILES[(m - 1) / MR_STEP];
    if (np == NR) {
        if (e0->pf_w == w && e0->pf_x == bp)   /* nothing to fetch */
            FULL_NOPF[(m - 1) / MR_STEP](C, w, bp, m, np, y, ldy, e0);
        else
            row[WIDTHS - 1](C, w, bp, m, np, y, ldy, e0);
        return;
    }
#if RIDE_MAX > 0
    tile_fn *const full_ride = np > NR ? RIDE_TILES[(m - 1) / MR_STEP][WIDTHS - 1][RIDE_INDEX(np - NR)] : 0;
    if (full_ride) {   /* a full tile with ride columns (as one 16-lane tile and one with the ride: 512->512 at
                        * 196 pixels 651 -> 683 us, 1 thread) */
        full_ride(C, w, bp, m, np, y, ldy, e0);
        return;
    }
#endif
    tile_ep e = *e0;
    for (int j = 0; j < np;) {
        const int left = np - j;
        int take, width = -1;
        tile_fn *fn;
        if (left <= COL_MAX) {
            take = left;
            fn = COLS[left];
        } else if (WIDTHS == 3 && left >= 16) {   /* AVX-512: one 16-lane vector per row */
            take = 16;
            width = 1;
            fn = row[1];
        } else {                                   /* one 8-lane vector per row */
            take = left < 8 ? left : 8;
            width = 0;
            fn = row[0];
        }
#if RIDE_MAX > 0
        if (width >= 0 && left - take > 0 && left - take <= RIDE_MAX &&
            RIDE_TILES[(m - 1) / MR_STEP][width][RIDE_INDEX(left - take)]) {
            fn = RIDE_TILES[(m - 1) / MR_STEP][width][RIDE_INDEX(left - take)];
            take = left;
        }
#else
        (void)width;
#endif
        e.res = e0->res ? e0->res + j : NULL;
        fn(C, w, bp + j, m, take, y + j, ldy, &e);
        j += take;
    }
}

/* ---- driver ------------------------------------------------------------------------------------------------ */

typedef struct problem {
    long C, P, ldx;          /* ldx >= P: the distance between x's planes (strided: H * W) */
    int O, panels;           /* pixel panels per image */
    int H, W, sh, sw, OW;    /* a strided layer (sh or sw > 1): x's planes (H, W), output pixel (oh, ow) reads
                              * (oh * sh, ow * sw), P = OH * OW; else sh = sw = 1 */
    const float *x, *wp;     /* (N, C, P) planes ldx apart; packed weight */
    const mxcc_epilogue *ep; /* NULL or not a no-op */
    float *y;                /* (N, O, P) */
} problem;

/* Pixel panels per image: NR pixels each, the last one the rest (fewer than NR, or NR + up to RIDE_MAX) */
static int image_panels(long P)
{
    const long r = P % NR;
    return (int)(P > NR && r > 0 && r <= RIDE_MAX ? P / NR : (P + NR - 1) / NR);
}

/* The pixels of panel q of an image of P pixels in `panels` panels */
static int panel_pixels(long P, int panels, long q)
{
    return (int)(q == panels - 1 ? P - q * NR : NR);
}

/* One output row's run of n pixels of a strided 1x1 layer into d: d[i] = s[i * sw]. Stride 2 by vectors (AVX-512:
 * the even lanes of two masked loads; AVX2: whole groups of 8), reading no float past the run's last one. */
static inline void gather_run(const float *restrict s, int sw, int n, float *restrict d)
{
    int i = 0;
#if defined(__AVX512F__)
    if (sw == 2) {
        for (; i < n; i += 16) {
            const int m = n - i < 16 ? n - i : 16, f = 2 * m - 1;   /* outputs; floats read */
            const __m512 lo = _mm512_maskz_loadu_ps(mxcc_tail_f32x16(f), s + 2 * i);
            const __m512 hi = _mm512_maskz_loadu_ps(mxcc_tail_f32x16(f - 16), s + 2 * i + 16);
            _mm512_mask_storeu_ps(d + i, mxcc_tail_f32x16(m), mxcc_even_f32(lo, hi));
        }
        return;
    }
#elif defined(__AVX2__)
    if (sw == 2) {
        for (; i + 8 < n; i += 8)   /* 16 floats read for 15 needed: only where the 16th is the run's too */
            _mm256_storeu_ps(d + i, mxcc_even_f32(_mm256_loadu_ps(s + 2 * i), _mm256_loadu_ps(s + 2 * i + 8)));
    }
#endif
    for (; i < n; i++) d[i] = s[(long)i * sw];
}

/* A strided layer's block of pixel panels q0 .. q0 + k - 1 of image xn (C, H, W) into bp (panel j at j * C * NR,
 * (C, ld) each; ld NR, or NR + 16 for an image's last panel with ride columns), output pixel (oh, ow) from
 * input (oh * sh, ow * sw), zeros past each panel's pixels as pack_pixels. Channel by channel over the whole
 * block, each channel's rows in order (panel by panel, every channel each time, measured the same). The gather
 * reads the layer's input once per call, the cost the packed path's own gather has (256 x 56x56 stride 2:
 * ~100 us of either path, AMD Zen 4, 1 thread); a software prefetch of a later channel's rows did not help. */
static void gather_block(const problem *pb, const float *restrict xn, long q0, long k, float *restrict bp)
{
    const long C = pb->C, hw = (long)pb->H * pb->W;
    const int OW = pb->OW;
    for (long c = 0; c < C; c++) {
        const float *xc = xn + c * hw;
        for (long j = 0; j < k; j++) {
            const long p0 = (q0 + j) * NR;
            const int np = panel_pixels(pb->P, pb->panels, q0 + j), ld = np > NR ? NR + 16 : NR;
            float *d = bp + j * C * NR + c * ld;
            for (int i = 0; i < np;) {   /* the panel's runs within output rows */
                const long p = p0 + i;
                const int ow = (int)(p % OW), n = OW - ow < np - i ? OW - ow : np - i;
                gather_run(xc + p / OW * pb->sh * pb->W + (long)ow * pb->sw, pb->sw, n, d + i);
                i += n;
            }
            for (int i = np; i < ld; i++) d[i] = 0.0f;
        }
    }
}

/* Pixel panels [u0, u1) of the batch (unit u = image u / panels, panel u % panels) x weight panels [b0, b1). */
static void run_range(const problem *pb, float *restrict bp, long u0, long u1, int b0, int b1)
{
    const long C = pb->C, P = pb->P, ldx = pb->ldx;
    const mxcc_epilogue *ep = pb->ep;
    tile_ep e = {0};
    if (ep) {
        e.ld = ep->ld_residual;
        if (mxcc_act_in_registers(ep->act)) {
            e.act = ep->act; e.alpha = ep->alpha; e.lo = ep->lo; e.hi = ep->hi;
        }
    }
    const long bpn = block_panels(C);
    /* Rows that do not start on a cache line (14x14 and 7x7 images: 784 and 196 bytes apart, or a misaligned
     * input) make 3 in 4 of the tiles' pixel loads split over two lines: a block's panels are copied into
     * aligned (C, NR) panels first, once for all its weight panels (Intel Xeon model 167, 1 thread:
     * 512->512 over 192 of 196-float rows 637 us in place, 580 over 192-float rows), when there are
     * PW_COPY_MIN_NB of those to pay for the copy (copied / in place: 960->320@7 208 / 212 us, 960->160@7
     * 110 / 110, 576->96@14 142 / 137, SqueezeNet's 64->16@55 65 / 53). Aligned rows are read in place (an
     * image's short last panel is copied all the same: its vectors would run past the row), among them the
     * planes a depthwise layer wrote 16 floats apart for this kernel (mxcc_conv1x1_planes_f32), whose last panel
     * with ride columns is read in place too. */
#ifndef PW_COPY_MIN_NB
#define PW_COPY_MIN_NB 12
#endif
    /* a strided layer's panels are gathered, every one, once per block */
    const int strided = pb->sh > 1 || pb->sw > 1;
    const int aligned = !strided && ldx % 16 == 0 && ((uintptr_t)pb->x & 63) == 0;   /* rows start on cache lines */
    const int copy_all = strided || (!aligned && b1 - b0 >= PW_COPY_MIN_NB);
    for (long u = u0; u < u1;) {
        /* block: panels [u, u + k) of image n; copied to bp at j * C * NR as copy_all or a short panel asks */
        const long n = u / pb->panels, q0 = u % pb->panels;
        long k = pb->panels - q0;
        if (k > bpn) k = bpn;
        if (k > u1 - u) k = u1 - u;
        if (strided)
            gather_block(pb, pb->x + n * C * ldx, q0, k, bp);
        else for (long j = 0; j < k; j++) {
            const long p0 = (q0 + j) * NR;
            const int np = panel_pixels(P, pb->panels, q0 + j);
            if (np == NR && !copy_all) continue;   /* a full panel is read in place */
            if (np > NR && aligned) continue;
            /* with ride columns (the image's last panel, also the block's last) rows of NR + 16 */
            pack_pixels(C, ldx, pb->x + n * C * ldx, p0, np, bp + j * C * NR, np > NR ? NR + 16 : NR);
        }
        /* the next block (its first k2 panels from image n2, panel q2), fetched during the last weight panel */
        const long u2 = u + k, n2 = u2 / pb->panels, q2 = u2 % pb->panels;
        long k2 = u2 < u1 ? pb->panels - q2 : 0;
        if (k2 > bpn) k2 = bpn;
        if (k2 > u1 - u2) k2 = u1 - u2;
        for (int b = b0; b < b1; b++) {
            int o0, m;
            panel_rows(pb->O, b, &o0, &m);
            const float *w = pb->wp + (long)b * C * MR;   /* (C, MR) */
            /* the weight panel after this one: b + 1, or b0 again when another block follows */
            const float *w_next = b + 1 < b1 ? w + C * MR : k2 ? pb->wp + (long)b0 * C * MR : w;
            for (long j = 0; j < k; j++) {
                const long p0 = (q0 + j) * NR;
                const int np = panel_pixels(P, pb->panels, q0 + j);
                float *y = pb->y + (n * pb->O + o0) * P + p0;   /* (m, np) at row stride P */
                if (ep) {
                    e.scale = ep->scale ? ep->scale + o0 : NULL;
                    e.shift = ep->shift ? ep->shift + o0 : NULL;
                    e.bias = ep->bias ? ep->bias + o0 : NULL;
                    e.res = ep->residual ? ep->residual + (n * pb->O + o0) * (long)ep->ld_residual + p0 : NULL;
                }
                /* a full panel in place (rows ldx apart), else from its copy */
                const int copied = np > NR ? !aligned : copy_all || np < NR;
                const float *src = copied ? bp + j * C * NR : pb->x + n * C * ldx + p0;
                e.ldb = !copied ? ldx : np > NR ? NR + 16 : NR;
                e.pf_w = j == 0 ? w_next : w;
                e.pf_x = src;
                e.pf_ld = e.ldb;
                if (b == b0 && j + 1 < k && !copy_all) {   /* first touch of the block: its next panel */
                    e.pf_x = pb->x + n * C * ldx + p0 + NR;
                    e.pf_ld = ldx;
                } else if (b == b1 - 1 && j < k2) {  /* the next block (strided: its panel's first input pixel) */
                    const long p2 = (q2 + j) * NR;
                    e.pf_x = pb->x + n2 * C * ldx
                             + (strided ? p2 / pb->OW * pb->sh * pb->W + p2 % pb->OW * pb->sw : p2);
                    e.pf_ld = ldx;
                }
                panel(C, w, src, m, np, y, P, &e);
                if (ep && !mxcc_act_in_registers(ep->act)) {   /* sigmoid, tanh, ...: on the stored tile */
                    for (int r = 0; r < m; r++)
                        mxcc_act_apply_f32(ep->act, ep->alpha, ep->lo, ep->hi, y + (long)r * P, np);
                }
            }
        }
        u += k;
    }
}

/* The time of one weight panel over a pixel panel of np pixels, in 1/24 of a full tile (24 FMA vectors per
 * channel): its pieces as panel() runs them. A full tile 24; a row tile of 16 lanes 12, of 8 lanes 6 on
 * AVX-512 (quarter width) or 12 on AVX2 and C (NR / 2); a column tile of t pixels t (at least 4 FMA chains,
 * COL_SPLIT: bound by the FMA throughput, not its latency). */
static long panel_cost(int np)
{
    if (np >= NR) return 24 + (np - NR);   /* ride columns: one FMA per pixel and channel, as a column tile's */
    long cost = 0;
    for (int left = np; left > 0;) {
        if (left <= COL_MAX) return cost + left;   /* at least 4 chains (COL_SPLIT): throughput-bound */
        const int take = WIDTHS == 3 && left >= 16 ? 16 : left < 8 ? left : 8;
        cost += WIDTHS == 3 ? (take == 16 ? 12 : 6) : 12;
        left -= take;
    }
    return cost;
}

/* The cost of pixel panels [u0, u1) per weight panel: full ones 24 each, the short last panel of each image
 * (unit panels - 1 of every image; there are u1 / panels - u0 / panels of them in the range) `tail`. */
static long units_cost(long u0, long u1, long panels, long tail)
{
    const long tails = u1 / panels - u0 / panels;
    return (u1 - u0 - tails) * 24 + tails * tail;
}

/* What a part pays to read a pixel unit's input (C x NR floats, warm from the layer before) and a weight panel
 * (C x MR floats, cold: a network's weights are read once per forward), in panel_cost's units (a full tile's
 * C steps cost 24). A layer with few output channels is bound by reading its input, and a split of its 2
 * weight panels had each thread read all of it (SqueezeNet's 64 -> 16 squeeze at 55x55 on 2 threads: 120 us
 * split by weights, 38 us by pixels, 59 us on one thread); a layer with many is bound by its weights, which
 * a pixel split has every thread read (MobileNet's 512 -> 512 at 14x14 on 2 threads: 6% of the network
 * slower by pixels). */
#define READ_UNIT 8
#define READ_PANEL 24
/* A strided layer's pixel unit is gathered (gather_block), not read: 8 times READ_UNIT by the gather's time on
 * one thread (AMD Zen 4, C driver: 256->128@56 stride 2 557 us against 451 on the subsampled image, 25 units of
 * 11 tiles: 64 a gathered unit; 64->128@56 49, 512->256@28 78). Counted so, the split stops having several
 * threads gather the same pixels: ResNet-50's 256->128@56 on 16 threads was 4 pixel groups x 4 weight groups,
 * each thread gathering a quarter of the 3.2 MB input that all cores wrote, and is now the grid, 2-3 units a
 * part (16-core Xeon model 207, per layer over 100 forwards, two runs: 158 / 162 -> 140 / 128 us; ResNet-18's
 * 64->128@56 52 / 49 -> 43 / 41). On 2 threads the split is the pixel split either way. */
#define READ_GATHER 64

/* The grid of pixel units x weight panels (unit-major) split into parts of contiguous tiles with the least
 * busiest part: grid_fill packs tiles greedily into parts of capacity cap (each part takes tiles while they
 * fit) and returns how many parts that takes, writing their first tiles to at[0..parts] when it fits in
 * `parts`; grid_split bisects on cap (whole cost units) for the least that fits, up to `most`. Each unit's
 * tiles cost the same (24, or the short last panel's `tail`), so a part takes whole full units at once:
 * O(parts + images) a try. */
static int grid_fill(long units, int nb, long panels, long tail, long read_unit, long cap, int parts, long *at)
{
    int p = 0;
    long load = 0, a = 0;
    at[0] = 0;
    const long whole = read_unit + 24L * nb;   /* a full unit that a part takes whole */
    for (long u = 0; u < units; u++) {
        const long c = u % panels == panels - 1 ? tail : 24;
        if (u % panels != panels - 1 && load + whole <= cap) {
            /* as many whole full units as fit, up to the image's short last one: the loop below would take
             * them one by one (O(units) a try, 20-60 us a call for 56x56 and 112x112 on 16 threads) */
            const long run = panels - 1 - u % panels < units - u ? panels - 1 - u % panels : units - u;
            long k = (cap - load) / whole;
            k = k < run ? k : run;
            load += k * whole;
            a += k * nb;
            u += k - 1;
            continue;
        }
        load += read_unit;   /* this part starts on the unit */
        for (long left = nb; left > 0;) {
            long fit = (cap - load) / c;
            if (fit <= 0) {
                if (++p >= parts) return parts + 1;
                at[p] = a;
                load = read_unit;
                fit = (cap - load) / c;
            }
            const long take = fit < left ? fit : left;
            load += take * c;
            left -= take;
            a += take;
        }
    }
    for (int q = p + 1; q <= parts; q++) at[q] = a;
    return p + 1;
}

static long grid_split(long units, int nb, long panels, long tail, long read_unit, int parts, long most, long *at)
{
    const long total = units_cost(0, units, panels, tail) * nb + units * read_unit;
    long lo = (total + parts - 1) / parts, hi = total + (long)parts * read_unit;
    if (lo < 24 + read_unit) lo = 24 + read_unit;   /* a part holds at least one tile */
    if (hi > most) hi = most;   /* a larger cap would not be taken: fewer tries */
    if (hi < lo || grid_fill(units, nb, panels, tail, read_unit, hi, parts, at) > parts)
        return most + 1;
    while (lo < hi) {
        const long mid = lo + (hi - lo) / 2;
        if (grid_fill(units, nb, panels, tail, read_unit, mid, parts, at) <= parts) hi = mid;
        else lo = mid + 1;
    }
    grid_fill(units, nb, panels, tail, read_unit, lo, parts, at);
    return lo;
}

/* one thread's part of a split (mxcc_parallel_chunks): pixel units, weight panels, or a range of the grid of both */
enum { BY_BLOCKS, BY_GRID };
typedef struct split_job {
    const problem *pb;
    float *scratch;
    long per_thread, units;
    const long *at;   /* BY_GRID: part p is the grid's tiles [at[p], at[p + 1]) */
    int nb, pw, how;  /* BY_BLOCKS: part p is pixel group p / pw (of parts / pw) x weight group p % pw (of pw) */
    int parts;
} split_job;

static void run_part(void *arg, long part, int worker)
{
    const split_job *j = arg;
    float *s = j->scratch + worker * j->per_thread;
    const int t = (int)part;
    if (j->how == BY_BLOCKS) {
        const int pu = j->parts / j->pw, g = t / j->pw, w = t % j->pw;
        const int b0 = (int)mxcc_split_at(j->nb, j->pw, w), b1 = (int)mxcc_split_at(j->nb, j->pw, w + 1);
        const long u0 = mxcc_split_at(j->units, pu, g), u1 = mxcc_split_at(j->units, pu, g + 1);
        if (b1 > b0 && u1 > u0) run_range(j->pb, s, u0, u1, b0, b1);
    } else {
        mxcc_rect r[3];
        const int n = mxcc_range_rects(j->at[part], j->at[part + 1], j->nb, r);
        for (int i = 0; i < n; i++) run_range(j->pb, s, r[i].r0, r[i].r1, (int)r[i].c0, (int)r[i].c1);
    }
}

void mxcc_conv1x1_f32(int batch, int C, int P, int O, const float *x, const float *wp, const mxcc_epilogue *ep,
                      float *y, float *scratch, int parallel)
{
    mxcc_conv1x1_planes_f32(batch, C, P, P, O, x, wp, ep, y, scratch, parallel);
}

static void conv1x1_run(int batch, const problem pb, float *scratch, int parallel);

void mxcc_conv1x1_planes_f32(int batch, int C, int P, long ldx, int O, const float *x, const float *wp,
                             const mxcc_epilogue *ep, float *y, float *scratch, int parallel)
{
    if (batch <= 0 || P <= 0 || O <= 0) return;
    const problem pb = {C, P, ldx > P ? ldx : P, O, image_panels(P), 1, 1, 1, 1, P, x, wp,
                        ep && !mxcc_epilogue_is_noop(ep) ? ep : NULL, y};
    conv1x1_run(batch, pb, scratch, parallel);
}

void mxcc_conv1x1_strided_f32(int batch, int C, int H, int W, int sh, int sw, int O, const float *x, const float *wp,
                              const mxcc_epilogue *ep, float *y, float *scratch, int parallel)
{
    const int OH = (H - 1) / sh + 1, OW = (W - 1) / sw + 1, P = OH * OW;
    if (batch <= 0 || H <= 0 || W <= 0 || O <= 0) return;
    const problem pb = {C, P, (long)H * W, O, image_panels(P), H, W, sh, sw, OW, x, wp,
                        ep && !mxcc_epilogue_is_noop(ep) ? ep : NULL, y};
    conv1x1_run(batch, pb, scratch, parallel);
}

/* The split of the problem over the threads, and its run. */
static void conv1x1_run(int batch, const problem pb, float *scratch, int parallel)
{
    const long C = pb.C, P = pb.P;
    const int O = pb.O, panels = pb.panels, nb = weight_panels(O);
    const long units = (long)batch * panels;
    const long per_thread = thread_floats(C);
    /* as many threads as get MIN_FLOPS_PER_THREAD each (parallel.h) */
    const int nt = mxcc_threads_for_call(parallel, 2.0 * batch * P * (double)O * C);
    if (nt == 1) {
        run_range(&pb, scratch, 0, units, 0, nb);
        return;
    }
    /* the split whose busiest thread takes the least time (panel_cost, and the reads of its pixel units and
     * weight panels): blocks of pixel units x weight panels, from all pixels (a weight split) to all weights (a
     * pixel split); on a tie the more pixel groups (each thread then reads its own pixels). Between the two,
     * a block reads a share of both: ResNet-50's 1024 -> 256 @ 14x14 on 16 threads, 6 pixel units x 22 weight
     * panels, is 2 x 8 blocks of 3 units x 3 panels (9 tiles) where a weight split gave each thread 6 x 2 (12
     * tiles) and all of the input (800 KB, written by every core in the layer before). The grid only
     * when its busiest thread is 3% faster still: its parts each stream every weight panel (MobileNet's
     * 512 -> 512 @ 14x14 on 2 threads, weights 22 + 21 panels vs the grid's 3.5 pixel panels each: 2.4%
     * slower by the grid, 5.18 vs 5.05 ms for the network).
     * Counting panels alike, the 7x7 images' panels of 32 and 17 pixels went one to each thread and one waited
     * 17% of 1024->1024@7 on 2 threads (608 -> 522 us split by weights). The grid balances to one tile when
     * units and weight panels are both few for the threads (14x14 on 16 threads), its parts as even in cost as
     * contiguous ranges allow (grid_split: a short last panel per image costs less). codegen/splits.py models
     * this choice. */
    const long tail = panel_cost(panel_pixels(P, panels, panels - 1));
    const long total = units_cost(0, units, panels, tail);
    const long read_unit = pb.sh > 1 || pb.sw > 1 ? READ_GATHER : READ_UNIT;
    /* pu pixel groups x pw = nt / pu weight groups; no more groups than items (a larger count leaves groups
     * empty, and fewer pixel groups let more weight groups in) */
    long plain = -1;
    int best_pw = 1, best_parts = 1;
    for (int pu = nt < units ? nt : (int)units; pu >= 1; pu--) {
        const int pw = nt / pu < nb ? nt / pu : nb;
        long busiest = 0;
        for (int g = 0; g < pu; g++) {
            const long c = units_cost(mxcc_split_at(units, pu, g), mxcc_split_at(units, pu, g + 1), panels, tail);
            if (c > busiest) busiest = c;
        }
        const long share = (nb + pw - 1) / pw;
        const long cost = busiest * share + (units + pu - 1) / pu * read_unit + share * READ_PANEL;
        if (plain < 0 || cost < plain) {
            plain = cost;
            best_pw = pw;
            best_parts = pu * pw;
        }
    }
    long at[nt + 1];
    /* the grid is weighed only when the blocks lose 3% or more; a grid part reads about as many weight
     * panels as it has tiles (at most all): they stream from memory for it as for a part of a weight split,
     * the parts of other units reading them at the same time */
    const long tiles_per_part = (units * nb + nt - 1) / nt, grid_panels = tiles_per_part < nb ? tiles_per_part : nb;
    /* the largest cap of the grid's parts that would be taken: the search stops there (most + 1: none below) */
    const long most = (97 * plain + 99) / 100 - grid_panels * READ_PANEL - 1;
    const long grid = 100 * (total * nb + units * read_unit) < 97 * plain * nt
                    ? grid_split(units, nb, panels, tail, read_unit, nt, most, at) + grid_panels * READ_PANEL : plain;
    const int how = 100 * grid < 97 * plain ? BY_GRID : BY_BLOCKS;
    const int parts = how == BY_GRID ? nt : best_parts;
    split_job job = {&pb, scratch, per_thread, units, at, nb, best_pw, how, parts};
    mxcc_parallel_chunks(parts, nt, run_part, &job);   /* a part per thread; a late thread's part is the caller's */
}
