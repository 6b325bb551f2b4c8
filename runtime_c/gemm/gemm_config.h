/* Block sizes of the mxcc f32 GEMM: the only place MR, NR, MC, KC, NC appear.
 *
 * Chosen for the machine we measure on, not for the one in the issue. The issue says "AMD Zen 3:
 * 32 KiB L1d, 512 KiB L2 per core"; the development/CI machine reports (lscpu, /sys/.../cache) an Intel
 * Xeon of the Sapphire Rapids class: 48 KiB L1d (12-way), 2 MiB L2 (16-way) per core, a large shared L3,
 * 2 FMA ports, 2.3 GHz nominal (~2.7 GHz measured under an AVX2 FMA loop). The numbers below are the
 * fastest we measured with benchmarks/gemm.py there (see docs/performance.md); each comment also says
 * what the size means so it can be re-derived for another cache hierarchy.
 *
 * Loop nest (BLIS): jc step NC -> pc step KC -> ic step MC -> jr step NR -> ir step MR -> micro-kernel.
 * The driver balances the actual steps (e.g. K = 784 runs as 2 x 392, not 384 + 384 + 16), so these are
 * upper bounds and the workspace sizes.
 */
#ifndef MXCC_GEMM_CONFIG_H
#define MXCC_GEMM_CONFIG_H

/* ---- register tile: the packed-panel geometry shared by every micro-kernel ---------------------------
 * 6 x 16 = 12 ymm accumulators (6 rows x 2 vectors of 8 lanes) + 2 ymm for the B row + 1 for the A
 * broadcast = 15 of the 16 ymm registers: the largest tile that fits AVX2 (BLIS haswell sgemm uses the
 * same). Per k step it issues 12 FMAs for 2 vector loads + 6 broadcasts, so two FMA ports stay busy.
 * 4 x 24 (also 12 accumulators, 3 + 4 loads) measured slower in the full GEMM, see docs/performance.md.
 * The reference kernel uses the same MR x NR, so it reads the same packed panels and is the oracle of
 * the AVX2 kernel. A kernel with another tile needs its own MR/NR here and pack routines for it. */
#define MXCC_GEMM_MR 6
#define MXCC_GEMM_NR 16

/* ---- AVX2 + FMA (mxcc_ukernel_f32_6x16_avx2fma) --------------------------------------------------------
 * KC: one B micro-panel (KC x NR x 4 B) must stay in L1 while the ir loop streams A micro-panels past it.
 *     KC = 384 -> 24 KiB = half of the 48 KiB L1d, leaving the other half for the A micro-panel
 *     (6 x 384 x 4 = 9 KiB) and the C tile. Longer KC also amortizes the C load/store of each tile.
 * MC: the packed A block (MC x KC x 4 B) stays in L2 while the jr loop walks the B panel.
 *     MC = 144 -> 216 KiB, about a tenth of the 2 MiB L2. Larger MC (up to ~1 MiB of A) measured no
 *     faster, and a small MC gives two threads more blocks to share when M is a few hundred rows.
 * NC: the packed B panel (KC x NC x 4 B) is shared by all threads and lives in L2/L3.
 *     NC = 3072 -> 4.5 MiB; most layer shapes fit in one jc step, so B is packed once per pc. */
#define MXCC_GEMM_AVX2FMA_MC 144
#define MXCC_GEMM_AVX2FMA_KC 384
#define MXCC_GEMM_AVX2FMA_NC 3072

/* ---- portable reference (mxcc_ukernel_f32_ref) ---------------------------------------------------------
 * The non-AVX2 fallback. Same reasoning with a conservative 32 KiB L1 / 256 KiB L2 machine in mind:
 * KC x NR x 4 = 16 KiB (half of L1), MC x KC x 4 = 96 KiB (under half of L2). Not tuned: this path exists
 * for portability and as the oracle, not for speed. */
#define MXCC_GEMM_REF_MC 96
#define MXCC_GEMM_REF_KC 256
#define MXCC_GEMM_REF_NC 2048

/* ---- small-M path (batch-1 inference) -------------------------------------------------------------------
 * M <= SMALLM_MAX with B transposed (FullyConnected weight, N x K): C = A . W^T as dot products of rows of
 * A with rows of W, no packing. Up to 8 rows the weight is read from memory once per 4-row group of W
 * and the packed path's B packing (a transpose of the whole weight) costs more than it saves. */
#define MXCC_GEMM_SMALLM_MAX 8

/* ---- threading -----------------------------------------------------------------------------------------
 * Below MIN_FLOPS_PER_THREAD floating point operations per thread the fork/join and barrier cost
 * (~1-3 us with libgomp) outweighs the split: the driver uses fewer threads (serial under 2x this).
 * SMALLM_MIN_WORK_PER_THREAD is the same for the small-M path, counted in weight elements (N x K). */
#define MXCC_GEMM_MIN_FLOPS_PER_THREAD (1 << 20)
#define MXCC_GEMM_SMALLM_MIN_WORK_PER_THREAD (1 << 16)

#endif /* MXCC_GEMM_CONFIG_H */
