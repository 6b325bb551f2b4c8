/* mxcc convolution runtime: the parts of a convolution that are not a GEMM, and the convolution kernels.
 *
 *   mxcc_im2col_f32            image (C, D, H, W) -> columns (C*KD*KH*KW, OD*OH*OW), so that
 *                              out (O, OD*OH*OW) = weight (O, C*KD*KH*KW) . columns   (one GEMM per group)
 *   mxcc_im2col_block_f32      a block of those columns [j0, j0 + nj): the convolution runs block by block
 *                              (im2col of a block, then a GEMM writing the block's output columns), so its
 *                              scratch is one block, sized by the compiler to stay in L2
 *                              (mxcc/ops/convolution.py: COL_BLOCK_BYTES)
 *   mxcc_col2im_f32            the adjoint: columns summed back into an image (Deconvolution = W^T.X, col2im)
 *   mxcc_col2im_block_acc_f32  a block's columns added into an image (the blocked data gradient)
 *                              (all four: conv/im2col_f32.c)
 *   mxcc_conv_depthwise_f32    direct depthwise convolution (groups == C_in == C_out), epilogue inline
 *                              (conv/depthwise_f32.c: the driver; depthwise_rows_f32.c, depthwise_flat_f32.c: the
 *                              vector kernels)
 *   mxcc_conv_depthwise_backward_f32   its gradients: data (a col2im-style scatter of ograd through the
 *                              kernel taps) and weight (per channel, summed over the batch)
 *                              (conv/depthwise_backward_f32.c)
 *   mxcc_conv_epilogue_f32     the GEMM epilogue contract (mxcc_gemm.h) on channel planes (rows = channels)
 *                              (conv/conv_epilogue_f32.c)
 *   mxcc_conv_packed_f32, mxcc_conv1x1_f32, mxcc_conv_direct_f32   whole convolutions with weights packed at bind
 *                              time (below, each with its file); Winograd: mxcc_winograd.h
 *
 * im2col, col2im and the depthwise kernels each have a plain reference twin (`_ref`, same signature): the
 * oracles of tests/runtime/test_conv.py and nothing else.
 *
 * Geometry. The compiler writes one `mxcc_conv_geom` per layer as constants. Spatial arrays are
 * (depth, height, width); a 2-D convolution has in[0] = out[0] = k[0] = stride[0] = dilate[0] = 1 and
 * pad[0] = 0, a 1-D one the same for index 1 too. Row r of the column matrix is (c, kd, kh, kw) in that
 * order (the weight's layout), column j is (od, oh, ow); input position = o * stride - pad + k * dilate;
 * positions outside the image read as 0 (im2col) or are dropped (col2im).
 */
#ifndef MXCC_CONV_H
#define MXCC_CONV_H

#include "gemm/mxcc_gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mxcc_conv_geom {
    int channels;      /* C: channels of the image */
    int in[3];         /* image size (D, H, W): the convolution's input */
    int out[3];        /* convolution output size (OD, OH, OW) */
    int k[3];          /* kernel */
    int stride[3];
    int pad[3];        /* both sides */
    int dilate[3];
    int y_plane;       /* depthwise forward only: the distance between the output's planes, >= OD*OH*OW floats
                        * (0: OD*OH*OW, dense), for a pointwise layer that reads them aligned
                        * (mxcc_conv1x1_planes_f32); the floats between planes are not written */
} mxcc_conv_geom;

/* The distance between the output planes of a depthwise forward (mxcc_conv_geom.y_plane) */
static inline long mxcc_conv_y_plane(const mxcc_conv_geom *g)
{
    const long dense = (long)g->out[0] * g->out[1] * g->out[2];
    return g->y_plane > dense ? g->y_plane : dense;
}

/* col (C*KD*KH*KW, OD*OH*OW) = im2col(x (C, D, H, W)). parallel: split the rows over OpenMP threads. */
void mxcc_im2col_f32(const mxcc_conv_geom *g, const float *x, float *col, int parallel);
void mxcc_im2col_f32_ref(const mxcc_conv_geom *g, const float *x, float *col, int parallel);

/* col (rows, nj) = columns j0 .. j0 + nj - 1 of im2col(x), rows = C*KD*KH*KW (row stride nj: the block is
 * a dense matrix). A column index j is (od, oh, ow) = (j / (OH*OW), j / OW % OH, j % OW); a block may start
 * and end anywhere in an output row. parallel: split the rows over OpenMP threads. */
void mxcc_im2col_block_f32(const mxcc_conv_geom *g, const float *x, long j0, long nj, float *col, int parallel);
void mxcc_im2col_block_f32_ref(const mxcc_conv_geom *g, const float *x, long j0, long nj, float *col, int parallel);

/* x (C, D, H, W) += the columns col (rows, nj) (columns j0 .. j0 + nj - 1 of a column matrix) at their
 * positions. Calling it on consecutive blocks of a zeroed x gives mxcc_col2im_f32 up to the order of each
 * pixel's sum (blocks first, rows within a block). parallel: split the channels over OpenMP threads. */
void mxcc_col2im_block_acc_f32(const mxcc_conv_geom *g, const float *col, long j0, long nj, float *x, int parallel);
void mxcc_col2im_block_acc_f32_ref(const mxcc_conv_geom *g, const float *col, long j0, long nj, float *x,
                                   int parallel);

/* x (C, D, H, W) = sum of the columns col (C*KD*KH*KW, OD*OH*OW) at their positions (x is overwritten,
 * not accumulated into). parallel: split the channels over OpenMP threads. */
void mxcc_col2im_f32(const mxcc_conv_geom *g, const float *col, float *x, int parallel);
void mxcc_col2im_f32_ref(const mxcc_conv_geom *g, const float *col, float *x, int parallel);

/* y (N, C, OH, OW) = depthwise conv of x (N, C, H, W) with w (C, KH, KW), then the epilogue (vectors
 * indexed by channel; NULL = none; a residual's rows are channels too, so call once per image when the
 * epilogue has one). 1-D/2-D only (in[0] = k[0] = 1). parallel: split the N*C planes over OpenMP threads. */
void mxcc_conv_depthwise_f32(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                             const mxcc_epilogue *ep, float *y, int parallel);
/* The same with the plane kernel chosen by the caller (a tuned build's path): MXCC_DW_AUTO as above (AVX-512:
 * small 3x3 planes 16 channels at a time, depthwise_cblock_f32.c, except on the CPUs where that is slower,
 * depthwise_f32.c), MXCC_DW_PLANES the per-plane kernels only (flat where it fits, else rows), MXCC_DW_CBLOCK 16
 * channels at a time wherever they fit, whatever the CPU (the tests). All give the same bits. */
enum { MXCC_DW_AUTO = 0, MXCC_DW_PLANES = 1, MXCC_DW_CBLOCK = 2 };
void mxcc_conv_depthwise_kernel_f32(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                                    const mxcc_epilogue *ep, float *y, int parallel, int kernel);
void mxcc_conv_depthwise_f32_ref(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                                 const mxcc_epilogue *ep, float *y, int parallel);

/* Gradients of mxcc_conv_depthwise_f32 (no epilogue: the caller applied the activation's gradient):
 *   dx (N, C, H, W) = sum over taps (kh, kw) of w[c, kh, kw] * dy[n, c, oh, ow] scattered to the input
 *                     position it read (dx is overwritten; NULL: not wanted, e.g. the first layer)
 *   dw (C, KH, KW)  = sum over n, oh, ow of dy[n, c, oh, ow] * x[n, c, ih, iw]   (overwritten)
 * parallel: split the N*C planes (dx) and the C channels (dw) over OpenMP threads; each thread owns what it
 * writes, so the sums never race and do not depend on the thread count. */
void mxcc_conv_depthwise_backward_f32(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                                      const float *dy, float *dx, float *dw, int parallel);
void mxcc_conv_depthwise_backward_f32_ref(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                                          const float *dy, float *dx, float *dw, int parallel);

/* The epilogue of mxcc_gemm.h applied to y (rows, n), row r being channel row0 + r: scale/shift/bias are
 * per channel whatever ep->per_row says; the residual is indexed [(row0 + r) * ld_residual + j].
 * NULL ep = nothing. */
void mxcc_conv_epilogue_f32(const mxcc_epilogue *ep, float *y, int rows, long n, int row0);

/* The epilogue for rows row0.. of a per-row epilogue: a group's slice of the output channels. */
static inline mxcc_epilogue mxcc_epilogue_rows(const mxcc_epilogue *ep, int row0)
{
    mxcc_epilogue e = *ep;
    if (e.bias) e.bias += row0;
    if (e.scale) e.scale += row0;
    if (e.shift) e.shift += row0;
    if (e.residual) e.residual += (long)row0 * e.ld_residual;
    return e;
}

/* The epilogue for columns j0.. of the output (a block of output pixels): only the residual moves; its rows
 * keep their leading dimension (the whole image's OD*OH*OW), like the output the GEMM writes with ldc. */
static inline mxcc_epilogue mxcc_epilogue_cols(const mxcc_epilogue *ep, long j0)
{
    mxcc_epilogue e = *ep;
    if (e.residual) e.residual += j0;
    return e;
}

/* y (batch, O, OD*OH*OW) = conv(x (batch, C, D, H, W)) for one group, any kernel/stride/pad/dilation,
 * computed as one GEMM with output pixels as rows (runtime_c/conv/conv_packed_f32.c):
 *   out^T (batch*P, O) = im2col(x)^T (batch*P, K) . W^T (K, O),   K = C*KD*KH*KW, P = OD*OH*OW
 * wp: the weight (O, K) packed once by mxcc_gemm_pack_b_f32(MXCC_TRANS, K, O, w, K, wp).
 * ep: per-channel epilogue (scale/shift/bias indexed by output channel, whatever ep->per_row says; residual
 * laid out like y, all images: element (n, o, p) at ep->residual[(n * O + o) * ep->ld_residual + p]), or NULL.
 * scratch: mxcc_conv_packed_scratch_floats(g, batch, O, max_threads) floats, 64-byte aligned, owned by the
 * caller; a parallel call must run with omp_get_max_threads() <= that max_threads (0 there: the value of
 * omp_get_max_threads() at sizing time). parallel: 0 = this thread only; 1 = one OpenMP parallel region
 * for the whole layer. The result does not depend on the thread count (bit for bit). */
long mxcc_conv_packed_scratch_floats(const mxcc_conv_geom *g, int batch, int O, int max_threads);
void mxcc_conv_packed_f32(const mxcc_conv_geom *g, int batch, int O, const float *x, const float *wp,
                          const mxcc_epilogue *ep, float *y, float *scratch, int parallel);

/* ---- pointwise convolution: 1x1, pad 0, one group, stride 1 (or strided below) (runtime_c/conv/conv1x1_f32.c) -
 *   y[n] (O, P) = W (O, C) . x[n] (C, P) for n < batch, P = pixels per image, then the epilogue; y (batch, O, P)
 *   is written directly (NCHW), every element exactly once.
 * wp: W (O, C) packed once by mxcc_conv1x1_pack_w_f32 into mxcc_conv1x1_packed_w_floats(C, O) floats (the
 * build's tile height MR: 12 / 6 / 4 output channels), never more than MXCC_CONV1X1_PACKED_W_FLOATS_MAX(C, O),
 * the bound a compiler sizes buffers with without knowing the ISA.
 * ep: per-channel epilogue (scale/shift/bias indexed by output channel whatever ep->per_row says; residual
 * laid out like y, all images: element (n, o, p) at ep->residual[(n * O + o) * ep->ld_residual + p]), or NULL.
 * The residual may be y itself (ld_residual = P; mxcc/ops/convolution.py: residual_in_place): each element of it
 * is read, by the tile that computes the same element of y, before that element is stored, and read nowhere
 * else. (The tile functions keep y `restrict`: dropping it rewrote a fifth of the AVX-512 object code; no load
 * of a residual element can move past the store that needs its value.)
 * scratch: mxcc_conv1x1_scratch_floats(C, max_threads) floats owned by the caller; a parallel call must run
 * with omp_get_max_threads() <= that max_threads (0 there: the value of omp_get_max_threads() at sizing time).
 * parallel: 0 = this thread only; 1 = one OpenMP parallel region. The result does not depend on the thread
 * count (bit for bit). */
/* The weight panels of MR rows (tiles compiled in heights of STEP) for O output channels: ceil(O / MR), one more
 * where that is odd and at least 16 and MR > STEP (conv1x1_f32.c weight_panels; codegen/splits.pw_weight_panels). */
#define MXCC_CONV1X1_PANELS(O, MR, STEP) MXCC_CONV1X1_PANELS_OF_(((long)(O) + (MR) - 1) / (MR), MR, STEP)
#define MXCC_CONV1X1_PANELS_OF_(n, MR, STEP) ((n) + ((MR) > (STEP) && (n) >= 16 && (n) % 2))
/* AVX-512's 12-row panels take the most floats of any build (AVX2's 6-row panels round the same way and take at
 * most twice as many, C's 4-row panels are ceil(O / 4)) */
#define MXCC_CONV1X1_PACKED_W_FLOATS_MAX(C, O) ((long)(C) * 12 * MXCC_CONV1X1_PANELS(O, 12, 4))
long mxcc_conv1x1_packed_w_floats(int C, int O);
void mxcc_conv1x1_pack_w_f32(int O, int C, const float *w, float *wp);
/* wp's output channel o times scale[o] (O,): an inference BatchNorm's scale folded into the packed weight */
void mxcc_conv1x1_scale_packed_w_f32(int O, int C, float *wp, const float *scale);
long mxcc_conv1x1_scratch_floats(int C, int max_threads);
void mxcc_conv1x1_f32(int batch, int C, int P, int O, const float *x, const float *wp, const mxcc_epilogue *ep,
                      float *y, float *scratch, int parallel);
/* The same over x's planes ldx >= P floats apart (x (batch, C, ldx), the first P of each plane read): planes a
 * depthwise layer wrote at a distance of a multiple of 16 (mxcc_conv_geom.y_plane) are read in place where
 * P floats apart would not start on cache lines (14x14, 7x7) and be copied first. */
void mxcc_conv1x1_planes_f32(int batch, int C, int P, long ldx, int O, const float *x, const float *wp,
                             const mxcc_epilogue *ep, float *y, float *scratch, int parallel);
/* A 1x1 layer with stride (sh, sw) and no padding: y[n] (O, OH * OW) = W . x[n] at pixels (oh * sh, ow * sw) of
 * x (batch, C, H, W), OH = (H - 1) / sh + 1, OW = (W - 1) / sw + 1 (ResNet's downsampling 1x1 layers). Each block
 * of pixel panels is gathered once for all weight panels; then the same tiles, the same bits as
 * mxcc_conv1x1_f32 on the subsampled image. wp, ep (laid out like y), scratch, parallel: as mxcc_conv1x1_f32. */
void mxcc_conv1x1_strided_f32(int batch, int C, int H, int W, int sh, int sw, int O, const float *x, const float *wp,
                              const mxcc_epilogue *ep, float *y, float *scratch, int parallel);

/* ---- direct convolution for few input channels (runtime_c/conv/conv_direct_f32.c) ------------------------
 * y (batch, O, OH, OW) = conv(x (batch, C, H, W)) for one group, 1-D or 2-D (in[0] = k[0] = 1), any kernel,
 * stride, pad and dilation: vectorized over the output pixels of a row, a block of output channels in
 * registers, each input row staged once per block of output rows (zero-padded, split into stride phases).
 * Made for the first layers (C = 1..4), where K = C*KH*KW is too small for the GEMM paths.
 * wp: the weight (O, K), K = C*KH*KW, packed once by mxcc_conv_direct_pack_f32 into (K, O rounded up to
 * MXCC_CONV_DIRECT_OB) floats: one tap's channels side by side, zeros past O.
 * ep, scratch (mxcc_conv_direct_scratch_floats), parallel: as mxcc_conv_packed_f32. The result does not
 * depend on the thread count (bit for bit). */
#define MXCC_CONV_DIRECT_OB 8
void mxcc_conv_direct_pack_f32(int K, int O, const float *w, float *wp);
/* wp's output channel o times scale[o] (O,), as mxcc_conv1x1_scale_packed_w_f32 */
void mxcc_conv_direct_scale_packed_f32(int K, int O, float *wp, const float *scale);
long mxcc_conv_direct_scratch_floats(const mxcc_conv_geom *g, int batch, int O, int max_threads);
void mxcc_conv_direct_f32(const mxcc_conv_geom *g, int batch, int O, const float *x, const float *wp,
                          const mxcc_epilogue *ep, float *y, float *scratch, int parallel);

#ifdef __cplusplus
}
#endif
#endif /* MXCC_CONV_H */
