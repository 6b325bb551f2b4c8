/* Vector math on the build's vector (simd.h; rv, RV lanes): exp, sigmoid and tanh for the kernels that apply
 * them to every element (the RNN gates, rnn/rnn_f32.c; softmax rows, nn/softmax_f32.c), in registers rather
 * than a libm call per element (glibc's expf/tanhf do not vectorize without -ffast-math, which mxcc never uses):
 *   exp(x)      Cephes' expf: x = n ln2 + r (n = round(x / ln2), ln2 in two parts so r is exact), e^r by
 *               its degree-6 polynomial, times 2^n written into the exponent bits; x clamped to
 *               [-87.3, 88.3] so 2^n stays a normal float (NaN passes through), and 0 below -87.3 (where
 *               expf's results are subnormal or 0). About 1 ulp.
 *   sigmoid(x)  1 / (1 + exp(-x))                 (mshadow_op::sigmoid's formula)
 *   tanh(x)     |x| < 0.625: Cephes' tanhf polynomial x + x^3 P(x^2); else sign(x) (1 - 2 / (exp(2|x|) + 1)).
 *               About 2 ulp.
 * mxcc_rnn_act_f32 (rnn_f32.c) exposes them for tests against libm. Written once on simd.h's vector, so the
 * three builds (AVX-512F, AVX2 + FMA, plain C) compute the same formulas lane by lane.
 */
#ifndef MXCC_VMATH_H
#define MXCC_VMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "simd.h"

#define RV_INLINE static inline __attribute__((always_inline))

/* simd.h's vector, whole or its first n lanes (n <= RV; lanes past n read as 0 and are never touched) */
#define RV MXCC_SIMD_SIZE_F32
typedef mxcc_simd_f32 rv;
RV_INLINE rv rv_load(const float *p, int n) { return n >= RV ? mxcc_loadu_f32(p) : mxcc_load_tail_f32(p, n); }
RV_INLINE void rv_store(float *p, rv v, int n)
{
    if (n >= RV)
        mxcc_storeu_f32(p, v);
    else
        mxcc_store_tail_f32(p, v, n);
}
/* min(hi, max(lo, x)) keeping a NaN x (minps/maxps return their second operand when either is NaN) */
RV_INLINE rv rv_clamp(rv x, float lo, float hi)
{
    return mxcc_max_f32(mxcc_set1_f32(lo), mxcc_min_f32(mxcc_set1_f32(hi), x));
}
RV_INLINE rv rv_lt_select(rv x, float c, rv a, rv b)    /* x < c ? a : b */
{
    return mxcc_select_f32(mxcc_cmplt_f32(x, mxcc_set1_f32(c)), a, b);
}
RV_INLINE rv rv_where_pos(rv x, rv a)                    /* x > 0 ? a : 0 (NaN x -> 0) */
{
    return mxcc_select_f32(mxcc_cmpgt_f32(x, mxcc_zero_f32()), a, mxcc_zero_f32());
}

/* relu as mshadow_op::relu, x > 0 ? x : 0 (NaN -> 0); its gradient from the output y: y > 0 ? dy : 0 */
RV_INLINE rv rv_relu(rv x) { return rv_where_pos(x, x); }

RV_INLINE rv rv_exp(rv x0)
{
    const rv x = rv_clamp(x0, -87.3f, 88.3f);
    /* n: the clamped x without its NaN (a NaN x keeps r NaN, so the result is NaN) */
    const rv n = mxcc_round_f32(rv_clamp(mxcc_mul_f32(x, mxcc_set1_f32(1.44269504088896341f)), -126.0f, 127.0f));
    const rv safe = rv_lt_select(n, 200.0f, n, mxcc_set1_f32(0.0f));        /* NaN compares false: 2^0 */
    rv r = mxcc_fmadd_f32(n, mxcc_set1_f32(-0.693359375f), x);
    r = mxcc_fmadd_f32(n, mxcc_set1_f32(2.12194440e-4f), r);
    rv p = mxcc_set1_f32(1.9875691500e-4f);
    p = mxcc_fmadd_f32(p, r, mxcc_set1_f32(1.3981999507e-3f));
    p = mxcc_fmadd_f32(p, r, mxcc_set1_f32(8.3334519073e-3f));
    p = mxcc_fmadd_f32(p, r, mxcc_set1_f32(4.1665795894e-2f));
    p = mxcc_fmadd_f32(p, r, mxcc_set1_f32(1.6666665459e-1f));
    p = mxcc_fmadd_f32(p, r, mxcc_set1_f32(5.0000001201e-1f));
    p = mxcc_add_f32(mxcc_fmadd_f32(p, mxcc_mul_f32(r, r), r), mxcc_set1_f32(1.0f));
    return rv_lt_select(x0, -87.3f, mxcc_zero_f32(), mxcc_mul_f32(p, mxcc_exp2i_f32(safe)));
}

RV_INLINE rv rv_sigmoid(rv x)
{
    const rv one = mxcc_set1_f32(1.0f);
    return mxcc_div_f32(one, mxcc_add_f32(one, rv_exp(mxcc_sub_f32(mxcc_zero_f32(), x))));
}

RV_INLINE rv rv_tanh(rv x)
{
    const rv ax = mxcc_abs_f32(x), z = mxcc_mul_f32(x, x);
    rv p = mxcc_set1_f32(-5.70498872745e-3f);
    p = mxcc_fmadd_f32(p, z, mxcc_set1_f32(2.06390887954e-2f));
    p = mxcc_fmadd_f32(p, z, mxcc_set1_f32(-5.37397155531e-2f));
    p = mxcc_fmadd_f32(p, z, mxcc_set1_f32(1.33314422036e-1f));
    p = mxcc_fmadd_f32(p, z, mxcc_set1_f32(-3.33332819422e-1f));
    const rv small = mxcc_fmadd_f32(mxcc_mul_f32(p, z), x, x);
    const rv e = rv_exp(mxcc_add_f32(ax, ax));
    const rv one = mxcc_set1_f32(1.0f);
    const rv big = mxcc_signof_f32(x, mxcc_sub_f32(one, mxcc_div_f32(mxcc_set1_f32(2.0f), mxcc_add_f32(e, one))));
    return rv_lt_select(ax, 0.625f, small, big);
}

#endif /* MXCC_VMATH_H */
