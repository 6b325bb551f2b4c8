/* mxcc_conv_epilogue_f32: the GEMM epilogue (mxcc_gemm.h) on channel planes, for the convolution outputs no
 * GEMM tile epilogue reaches: Deconvolution's col2im result, the portable and reference depthwise kernels
 * (contract: mxcc_conv.h).
 *
 * It is mxcc_epilogue_apply_f32 (runtime_c/gemm/epilogue_f32.c) with the vectors indexed by channel: one
 * implementation of the epilogue's arithmetic, so a fused and an unfused convolution compute the same bits.
 */
#include "mxcc_conv.h"
#include "gemm/gemm_internal.h"

void mxcc_conv_epilogue_f32(const mxcc_epilogue *ep, float *y, int rows, long n, int row0)
{
    if (ep == NULL)
        return;
    mxcc_epilogue e = *ep;
    e.per_row = 1;   /* scale, shift and bias by channel (row), whatever the caller's per_row */
    /* NOTE: a plane (n floats) is the GEMM's row; its int leading dimension bounds n (2^31 floats) */
    mxcc_epilogue_apply_f32(&e, y, (int)n, row0, 0, rows, (int)n);
}
