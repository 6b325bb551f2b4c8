/* Block sizes of the mxcc f32 GEMM: the only place MR, NR, MC, KC, NC appear.
 *
 * Chosen for the machine we measure on, not for the one in the issue. The issue says "AMD Zen 3:
 * 32 KiB L1d, 512 KiB L2 per core"; the development/CI machine reports (lscpu, /sys/.../cache) an Intel
 * Xeon of the Sapphire Rapids class: 48 KiB L1d (12-way), 2 MiB L2 (16-way) per core, a large shared L3,
 * 2 FMA ports, 2.3 GHz nominal (~2.7 GHz measured under an AVX2 FMA loop). The numbers below are the
 * fastest we measured with benchmarks/gemm.py there (see docs/performance.md); each comment also says
 * what the size means so it can be re-derived for another cache hierarchy.
 *
 * Session 5 ran on a different guest, an AMD EPYC Zen 4 (32 KiB L1d, 1 MiB L2 per core, 32 MiB L3, AVX-512 on
 * 256-bit datapaths, 117 GFLOP/s per core measured by benchmarks/fma_peak.c). The sizes were kept and re-checked
 * there, not re-tuned: with them the squares 256..2048 run at 0.94-0.99x numpy on 1 thread and 0.96-1.06x on 2
 * (83-86% of the peak; benchmarks/gemm.py --rounds 3, docs/performance.md). On that cache hierarchy the AVX-512
 * A block (MC x KC = 224 KiB) is 22% of L2 and the B micro-panel (64 KiB) is twice L1d, fed from L2 as on
 * the first machine.
 *
 * Loop nest (BLIS): jc step NC -> pc step KC -> ic step MC -> jr step NR -> ir step MR -> micro-kernel.
 * The driver balances the actual steps (e.g. K = 784 runs as 2 x 392, not 384 + 384 + 16), so these are
 * upper bounds and the workspace sizes.
 */
#ifndef MXCC_GEMM_CONFIG_H
#define MXCC_GEMM_CONFIG_H

/* ---- register tile: the packed-panel geometry shared by every micro-kernel of a build ----------------
 * One geometry per build, chosen by the ISA the compiler targets: pack routines, the build's optimized
 * micro-kernel and the reference kernel all read MXCC_GEMM_MR x MXCC_GEMM_NR, so the reference is the
 * oracle of whichever kernel is active, on the same packed panels.
 *
 * AVX-512F (mxcc_ukernel_f32_14x32_avx512f): 14 x 32 = 28 zmm accumulators (14 rows x 2 vectors of 16
 * lanes) + 2 zmm for the B row + 1 for the A broadcast = 31 of the 32 zmm registers. Per k step: 28 FMAs
 * for 2 vector loads + 14 broadcast loads, so both 512-bit FMA ports stay busy and the 16 loads fit the
 * load ports. Alternatives timed alone (the same kernel source at each tile; k = 384, one B micro-panel
 * against ~280 rows of packed A, 1 thread, GFLOP/s, best of 7 x 0.2 s, two runs; a loop of independent
 * AVX-512 FMAs runs at 165-169 here): 14x32 159.5/164.9, 12x32 158.3/168.4, 8x32 155.6/159.4,
 * 6x64 168.4/165.8, 8x48 162.3/157.8, 4x64 165.2/153.6. All are at the FMA ceiling within this machine's
 * noise, so the choice is made by the whole GEMM: NR = 32 divides the layer widths (N = 64, 128, 512) and
 * keeps a B micro-panel at 128 B per k (6x64 would need 256 B per k: 64 KiB at KC = 256, more than L1);
 * MR = 14 reads each B row for 14 rows (the most reuse that fits the registers) and pads M = 64 to 70,
 * 100 to 112, 256 to 266 (12 would pad them to 72, 108, 264).
 *
 * AVX2 + FMA (mxcc_ukernel_f32_6x16_avx2fma) and the plain-C build: 6 x 16 = 12 ymm accumulators (6 rows x
 * 2 vectors of 8 lanes) + 2 ymm for the B row + 1 for the A broadcast = 15 of the 16 ymm registers: the
 * largest tile that fits AVX2 (BLIS haswell sgemm uses the same). Per k step it issues 12 FMAs for 2 vector
 * loads + 6 broadcasts, so two FMA ports stay busy.
 * Alternatives timed alone (k = 384, one B micro-panel against 288 rows of packed A, 1 thread, GFLOP/s,
 * two runs; AVX2 FMA peak ~88 here): 6x16 87.6/88.3, 4x24 89.0/85.8, 12x8 87.7/74.8, 8x8 73.3/70.7.
 * 6x16 and 4x24 tie; 16 columns waste nothing on the layer widths mxcc sees most (N = 64, 128, 512),
 * where 24 would pad N = 64 and 128 by 11% (3 and 6 panels), so 6 x 16 stays. */
#if defined(__AVX512F__)
#define MXCC_GEMM_MR 14
#define MXCC_GEMM_NR 32
#else
#define MXCC_GEMM_MR 6
#define MXCC_GEMM_NR 16
#endif

/* ---- AVX-512F (mxcc_ukernel_f32_14x32_avx512f) ---------------------------------------------------------
 * KC: the B micro-panel (KC x NR x 4 B = 128 B per k) is the operand the ir loop re-reads; the C tile
 *     (56 vectors) is loaded and stored once per KC step.
 *     KC = 512 -> a 64 KiB B micro-panel, more than the 48 KiB L1d: the kernel alone still ran at the FMA
 *     ceiling with a 48 KiB one (k = 384 above), L2 refilling what L1 loses, and the longer k loop halves
 *     the passes over C against 256. Measured on a quiet machine (1 thread, one process alternating with
 *     numpy, best of many calls, GFLOP/s, two runs; KC 256 / 384 / 512): 1024^3 141-140 / 143-142 /
 *     145-146, 2048^3 143-138 / 142-138 / 143-141, 512^3 144-144 / 144-141 / 148-149, 256^3 131-132 /
 *     133-131 / 135-135 (numpy 150-157); FullyConnected shapes within 3% either way (K = 784, 800 run as
 *     2 steps of 392, 400).
 * MC: the packed A block (MC x KC x 4 B) stays in L2 while the jr loop walks the B panel past it.
 *     MC = 112 (8 micro-panels) -> 224 KiB, a ninth of the 2 MiB L2 (measured with KC = 512 above).
 *     With KC = 256, MC = 140/280/420/560 measured within noise of each other on 512-2048.
 * NC: the packed B panel (KC x NC x 4 B) lives in L3 (each thread's share of it in a jr split):
 *     3072 -> 6 MiB, so the layer shapes and squares up to 2048 pack B once per pc step. NC = 512 and
 *     1024 measured within noise of 3072 on 1024^3 and 2048^3 (KC = 256). */
#define MXCC_GEMM_AVX512F_MC 112
#define MXCC_GEMM_AVX512F_KC 512
#define MXCC_GEMM_AVX512F_NC 3072

/* ---- AVX2 + FMA (mxcc_ukernel_f32_6x16_avx2fma) --------------------------------------------------------
 * KC: one B micro-panel (KC x NR x 4 B) must stay in L1 while the ir loop streams A micro-panels past it.
 *     KC = 384 -> 24 KiB = half of the 48 KiB L1d, leaving the other half for the A micro-panel
 *     (6 x 384 x 4 = 9 KiB) and the C tile. Longer KC also amortizes the C load/store of each tile.
 * MC: the packed A block (MC x KC x 4 B) stays in L2 while the jr loop walks the B panel.
 *     MC = 144 -> 216 KiB, about a tenth of the 2 MiB L2. MC = 72..576 and KC = 256..512 measured within
 *     the machine's noise of each other on square and layer shapes (best of 5 alternating runs, 1 thread);
 *     KC = 256 and MC = 72 were a few % slower on 1024^3.
 * NC: the packed B panel (KC x NC x 4 B) lives in L2/L3 (each thread's share of it in a jr split).
 *     NC = 3072 -> 4.5 MiB; most layer shapes fit in one jc step, so B is packed once per pc.
 *     NC = 768..1536 measured within noise of 3072 on squares, FullyConnected and conv shapes (2 threads). */
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

/* ---- small-M path (FullyConnected with a small batch) --------------------------------------------------
 * M <= SMALLM_MAX with B transposed (the FullyConnected weight W, N x K): C = A . W^T as dot products of
 * rows of A with rows of W, no packing (mxcc_ukernel_f32_rowdot_avx512f / _avx2fma). Each group of 4 rows
 * of W is read once and meets all M rows of A, which stay in L1/L2.
 * AVX2 build, against the 6x16 packed path (1 thread, best of 3 alternating runs, GFLOP/s): M = 8,
 * 784->128: 72 vs 35; M = 16: 79 vs 56; M = 32: 82 vs 65; M = 32, 800->512: 64 vs 57; M = 16, 4096->512:
 * 58 vs 44. At M = 64 it still wins for N = 128 (82 vs 76) but loses for N = 512 (65 vs 73): A (M x K)
 * no longer stays in L2 while W streams past it.
 * AVX-512 build, against the 14x32 packed path (1 thread, best of 8 alternating rounds in one process,
 * GFLOP/s): 784->128 M = 16: 93 vs 61, 32: 96 vs 90, 40: 97 vs 113, 48: 132 vs 107, 64: 97 vs 118;
 * 800->512 M = 32: 94 vs 91, 40: 126 vs 113, 48: 132 vs 108, 64: 96 vs 120; 128->64 M = 32: 69 vs 77,
 * 64: 70 vs 102. The crossover lies at M = 32-48 (noisy: the same shape measured 96 and 130 in two
 * runs), and the packed path wins from 64 on every shape, so 32 stays the bound for both builds.
 * SMALLM_MAX_A bounds A (M x K floats, 1 MiB = half the L2) for the same reason. */
#define MXCC_GEMM_SMALLM_MAX 32
#define MXCC_GEMM_SMALLM_MAX_A (1 << 18)

/* ---- a few rows against B packed at bind time (mxcc_gemm_f32_packed_b, M <= SMALLM_MAX) ------------------
 * mxcc/ops/fully_connected.py packs a constant weight for 4..32 rows too (GEMM_PACKED_FROM_M, with the data).
 * A last row panel of 1 or 2 rows (AVX2 and plain C: M = 7, 8, 13, 14, ...; any build: M <= 2; AVX-512 balances
 * its panel heights instead, gemm_f32.c row_height) would be an edge tile computing 3 (AVX2), 4 (AVX-512) or 6
 * (plain C) rows; those
 * rows take the panel kernel of smallm_packed_f32.c instead, which computes rows in pairs (so up to 2 rows: a
 * third costs a second pass). Zen 4, 1 thread: AVX2 1024->1000 M = 8 202 -> 165 us; AVX-512 M = 2 75 -> 46. */
#define MXCC_GEMM_SMALLM_PACKED_TAIL 2

/* ---- threading -----------------------------------------------------------------------------------------
 * Below MIN_FLOPS_PER_THREAD floating point operations per thread, the fork/join and barrier cost
 * (~1-3 us with libgomp) outweighs the split: the driver uses fewer threads (serial under 2x this).
 * The small-M path counts its work as 2 * max(M, 16) * N * K: below M = 16 it is bound by reading W, not by
 * FMAs, and two threads read two halves of W from two L2s: batch-1 784 -> 128 (401 KB of W) on 2 threads
 * 3.55 us against 4.14 us on one (best of 10 alternating rounds; with max(M, 8) it stayed on one thread).
 * 2^19 rather than 2^20 (Zen 4, benchmarks/gemm.py --quick --threads 2 --rounds 3): 128->64 b64 12.9 -> 10.7 us,
 * b100 21.4 -> 13.5 us (0.96x -> 1.56x numpy), which 2^20 kept on one thread; larger shapes unchanged. */
#define MXCC_GEMM_MIN_FLOPS_PER_THREAD (1 << 19)

#endif /* MXCC_GEMM_CONFIG_H */
