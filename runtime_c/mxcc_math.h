/* Scalar math shared by generated elementwise loops and the GEMM epilogue, so that a fused and an unfused
 * network compute the same float for the same op. Definitions follow MXNet's mshadow_op.h. */
#ifndef MXCC_MATH_H
#define MXCC_MATH_H

#include <math.h>

static inline float mxcc_relu(float x) { return x > 0.0f ? x : 0.0f; }
static inline float mxcc_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float mxcc_tanh(float x) { return tanhf(x); }
/* log(1 + e^x), exact for large x where expf would overflow (mshadow_op::softrelu). */
static inline float mxcc_softrelu(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
static inline float mxcc_softsign(float x) { return x / (1.0f + fabsf(x)); }
static inline float mxcc_leaky(float x, float alpha) { return x > 0.0f ? x : alpha * x; }
static inline float mxcc_clip(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

#endif /* MXCC_MATH_H */
