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
/* erf(x) as x P(x^2) / Q(x^2) on |x| <= 3.925 (beyond, erf rounds to +-1 in float): a rational fit (minimax by
 * reweighted least squares against float64 erf) whose float evaluation is within 2.8e-7 of erf (about 2-4 ulp;
 * glibc's erff: 1), held to [-1, 1]. Plain arithmetic, so that gcc vectorizes the loops that call it (it cannot vectorize erff):
 * GELU runs on every activation of a transformer's feed-forward. A NaN x stays NaN. */
static inline float mxcc_erf(float x)
{
    const float c = x > 3.925f ? 3.925f : (x < -3.925f ? -3.925f : x);
    const float z = c * c;
    const float p = ((((((-1.33617128e-08f * z + 4.72265046e-06f) * z + 3.80550831e-04f) * z + 3.83296709e-03f) * z
                       + 5.42826430e-02f) * z + 1.84702839e-01f) * z + 1.12837918e+00f);
    const float q = (((((6.34645574e-05f * z + 1.30538799e-03f) * z + 1.54327625e-02f) * z + 1.13779882e-01f) * z
                      + 4.97022159e-01f) * z + 1.0f);
    const float r = c * p / q;
    return r > 1.0f ? 1.0f : (r < -1.0f ? -1.0f : r);     /* |erf| <= 1 as erff: 1 + erf(x) never < 0 */
}
static inline float mxcc_gelu(float x) { return 0.5f * x * (1.0f + mxcc_erf(x / 1.4142135623730950488016887242096f)); }

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
