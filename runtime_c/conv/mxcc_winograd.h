/* Winograd F(4x4, 3x3) convolution for 3x3, stride-1, dilation-1, one-group 2-D layers
 * (runtime_c/conv/winograd_f32.c).
 *
 * Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (2015), with the interpolation points
 * 0, 1, -1, 2, -2 and infinity (the matrices NNPACK, ncnn and oneDNN use):
 *   U = G g G^T        6x6 per (output channel o, input channel c), from the 3x3 kernel g (in double)
 *   V = B^T d B        6x6 per (input tile d: 6x6 pixels at stride 4, overlapping by 2; channel c)
 *   M_xi = V_xi . U_xi 36 independent GEMMs (tiles x C) . (C x O), xi = one of the 6x6 positions
 *   Y = A^T M A        4x4 output pixels per (tile, o), cropped at the image edge
 * 36 multiplies per 4x4 output tile and input channel instead of 144; the price is the transforms and a
 * float32 error ~1e-6 of sum |w||x| (tests/runtime/test_winograd.py states the measured bound).
 *
 * Geometry as in mxcc_conv.h (in[0] = out[0] = k[0] = 1, k = 3x3, stride = dilate = 1, any pad; out =
 * in + 2 pad - 2). Tensors are NCHW: x (batch, C, H, W), y (batch, O, OH, OW).
 */
#ifndef MXCC_WINOGRAD_H
#define MXCC_WINOGRAD_H

#include "mxcc_conv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* u = the weight (O, C, 3, 3) transformed, as 36 matrices U_xi (C x O) each packed as the GEMM's B panels
 * (mxcc_gemm_pack_b_f32's layout: ceil(O / NR) panels of (C, NR), padding columns zero). NR depends on the
 * build's ISA, so mxcc_winograd_f43_weight_floats(O, C) is the exact size and
 * MXCC_WINOGRAD_F43_WEIGHT_FLOATS_MAX(O, C) a bound a compiler can size buffers with without knowing it.
 * Computed in double, rounded once to float. Every float of u is written. */
#define MXCC_WINOGRAD_F43_WEIGHT_FLOATS_MAX(O, C) (36L * MXCC_GEMM_PACKED_B_FLOATS_MAX(C, O))
long mxcc_winograd_f43_weight_floats(int O, int C);
void mxcc_winograd_f43_weight_f32(int O, int C, const float *w, float *u);
/* u's output channel o times scale[o] (O,): the transform is linear in each (o, c) kernel, so this is the
 * transform of the scaled weight (up to rounding): an inference BatchNorm's scale folded in */
void mxcc_winograd_f43_scale_weight_f32(int O, int C, float *u, const float *scale);

/* Floats of scratch for mxcc_winograd_f43_f32 on this geometry with up to max_threads threads: per thread
 * one block of transformed tiles (all 36 positions, all channels) and its GEMM results for a block of
 * output channels, plus a few rows: <= ~1.5 MiB per thread for C <= 128; beyond, the block keeps >= 56 tiles
 * (to reuse U) and V grows as 36 C 56 floats (4.4 MiB per thread at C = 512, 8.4 at C = 1024); never more
 * with the batch or the image size. */
long mxcc_winograd_f43_scratch_floats(const mxcc_conv_geom *g, int batch, int O, int max_threads);

/* y (batch, O, OH, OW) = conv3x3(x (batch, C, H, W), weight) then the epilogue, from u (see above).
 * ep: scale/shift/bias per output channel (whatever ep->per_row says), residual laid out like y (element
 * (n, o, p) at ep->residual[(n * O + o) * ep->ld_residual + p]), activation; NULL = none. The residual may be
 * y itself (ld_residual = OH * OW): each of its elements is read, with the tile that computes the same output
 * element, before that element is stored.
 * scratch: mxcc_winograd_f43_scratch_floats(g, batch, O, max_threads) floats, 64-byte aligned.
 * parallel: 0 = this thread only; 1 = one OpenMP parallel region of omp_get_max_threads() threads, which
 * must not exceed the max_threads the scratch was sized for (none when called inside a parallel region).
 * Threads split blocks of tiles (and output channels when tiles are few), never a sum: the result is the
 * same bits for any thread count. */
void mxcc_winograd_f43_f32(const mxcc_conv_geom *g, int batch, int O, const float *x, const float *u,
                           const mxcc_epilogue *ep, float *y, float *scratch, int parallel);

#ifdef __cplusplus
}
#endif
#endif /* MXCC_WINOGRAD_H */
