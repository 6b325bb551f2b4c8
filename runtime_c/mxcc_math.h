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
/* max/min that propagate a NaN from either side (mshadow's maximum/minimum reducers). */
static inline float mxcc_maxf(float acc, float x) { return (x > acc || x != x) ? x : acc; }
static inline float mxcc_minf(float acc, float x) { return (x < acc || x != x) ? x : acc; }
/* LeakyReLU act_types (mshadow_op::elu, selu, gelu): expm1 as MXNet, and the erf form of GELU. */
static inline float mxcc_elu(float x, float alpha) { return x > 0.0f ? x : alpha * expm1f(x); }
static inline float mxcc_selu(float x)
{
    return 1.0507009873554804934193349852946f * (x > 0.0f ? x : 1.6732632423543772848170429916717f * expm1f(x));
}
static inline float mxcc_gelu(float x) { return 0.5f * x * (1.0f + erff(x / 1.4142135623730950488016887242096f)); }

/* Derivatives, as MXNet's backward kernels compute them: dy is the output gradient, y the forward
 * output, x the forward input (mshadow_op::relu_grad, sigmoid_grad, tanh_grad, softrelu_grad, softsign_grad). */
static inline float mxcc_relu_grad(float dy, float y) { return y > 0.0f ? dy : 0.0f; }
static inline float mxcc_sigmoid_grad(float dy, float y) { return dy * y * (1.0f - y); }
static inline float mxcc_tanh_grad(float dy, float y) { return dy * (1.0f - y * y); }
static inline float mxcc_softrelu_grad(float dy, float y) { return dy * -expm1f(-y); }
static inline float mxcc_softsign_grad(float dy, float x)
{
    const float d = 1.0f + fabsf(x);
    return dy / (d * d);
}
static inline float mxcc_sign(float x) { return (float)((x > 0.0f) - (x < 0.0f)); }
/* LeakyReLU: leaky and elu from the output (mshadow_op::xelu_grad, elu_grad), selu from the output too (its
 * true derivative: MXNet 1.9.1's selu_grad is wrong for x < 0), gelu from the input. */
static inline float mxcc_leaky_grad(float dy, float y, float alpha) { return y > 0.0f ? dy : alpha * dy; }
static inline float mxcc_elu_grad(float dy, float y, float alpha) { return y > 0.0f ? dy : dy * (y + alpha); }
static inline float mxcc_selu_grad(float dy, float y)
{
    const float lambda = 1.0507009873554804934193349852946f, alpha = 1.6732632423543772848170429916717f;
    return y > 0.0f ? lambda * dy : dy * (y + lambda * alpha);
}
static inline float mxcc_gelu_grad(float dy, float x)
{
    const float cdf = 0.5f * (1.0f + erff(x / 1.4142135623730950488016887242096f));
    return dy * (cdf + x * expf(-0.5f * x * x) * 0.39894228040143267793994605993438f);   /* 1 / sqrt(2 pi) */
}

#endif /* MXCC_MATH_H */
