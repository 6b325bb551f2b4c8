/* Helpers shared by the convolution kernels of runtime_c/conv/ (not part of the contract, mxcc_conv.h).
 *
 *   mxcc_conv_valid_range   the output positions whose input position falls inside the image, for one
 *                           kernel offset: the bounds that let the inner loops run without a test per element
 *   mxcc_conv_clampi        v clamped to [lo, hi]
 *   mxcc_round16            floats rounded up to a multiple of 16 (64 bytes): per-thread scratch layouts
 */
#ifndef MXCC_CONV_INTERNAL_H
#define MXCC_CONV_INTERNAL_H

/* Output positions o in [0, n_out) with 0 <= o * stride + off < n_in: [*lo, *hi) (empty: lo == hi). */
static inline void mxcc_conv_valid_range(int n_out, int n_in, int stride, int off, int *lo, int *hi)
{
    int a = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int b = n_in - 1 - off < 0 ? 0 : (n_in - 1 - off) / stride + 1;
    if (b > n_out) b = n_out;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

static inline int mxcc_conv_clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

static inline long mxcc_round16(long n) { return (n + 15) / 16 * 16; }

#endif /* MXCC_CONV_INTERNAL_H */
