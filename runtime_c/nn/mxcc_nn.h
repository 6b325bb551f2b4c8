/* Row kernels of the runtime that generated code calls where a generated loop cannot vectorize (a libm call
 * per element): softmax_f32.c. */
#ifndef MXCC_NN_H
#define MXCC_NN_H

/* softmax (log = 0) or log-softmax (log = 1) of each of `rows` contiguous rows of n floats, temperature t
 * (1: none); x and y may be the same buffer; parallel: split the rows over threads when worth it */
void mxcc_softmax_rows_f32(const float *x, float *y, long rows, long n, float t, int log, int parallel);

#endif /* MXCC_NN_H */
