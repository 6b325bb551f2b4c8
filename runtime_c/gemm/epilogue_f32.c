/* The GEMM epilogue: bias, folded BatchNorm scale/shift, residual and activation, applied to a finished
 * block of C. One implementation, called by the fast driver on each tile while it is in L1 and by the
 * reference GEMM on the whole matrix, so both paths agree on every rounding and on NaN handling.
 *
 * Order (mxcc_gemm.h): x = x*scale + shift; x = x + bias; x = x + residual; x = act(x).
 * Activations are mxcc_math.h's scalar definitions (MXNet's mshadow_op, src/operator/mshadow_op.h), the ones
 * generated elementwise loops use, with libm expf/tanhf/log1pf and IEEE semantics (mxcc never builds with
 * -ffast-math); the kernels that activate on registers (epilogue_simd.h) give the same bits.
 */
#include "gemm_internal.h"
#include "../mxcc_math.h"

int mxcc_epilogue_is_noop(const mxcc_epilogue *ep)
{
    return ep == NULL || (ep->bias == NULL && ep->scale == NULL && ep->shift == NULL &&
                          ep->residual == NULL && ep->act == MXCC_ACT_NONE);
}

/* act on x[0:n] in place. The switch sits outside the element loops so the cheap cases (relu, leaky, clip,
 * softsign) vectorize; inlined into the epilogue's row loop below (a call per row would cost ~1% of a small
 * GEMM tile), exported as mxcc_act_apply_f32 for the kernels that activate a stored piece. */
static inline __attribute__((always_inline)) void activate(mxcc_act act, float alpha, float lo, float hi,
                                                           float *x /* (n,) */, long n)
{
    switch (act) {
    case MXCC_ACT_NONE:
        break;
    case MXCC_ACT_RELU:
        for (long j = 0; j < n; j++) x[j] = mxcc_relu(x[j]);
        break;
    case MXCC_ACT_SIGMOID:
        for (long j = 0; j < n; j++) x[j] = mxcc_sigmoid(x[j]);
        break;
    case MXCC_ACT_TANH:
        for (long j = 0; j < n; j++) x[j] = mxcc_tanh(x[j]);
        break;
    case MXCC_ACT_SOFTRELU:
        for (long j = 0; j < n; j++) x[j] = mxcc_softrelu(x[j]);
        break;
    case MXCC_ACT_SOFTSIGN:
        for (long j = 0; j < n; j++) x[j] = mxcc_softsign(x[j]);
        break;
    case MXCC_ACT_LEAKY:
        for (long j = 0; j < n; j++) x[j] = mxcc_leaky(x[j], alpha);
        break;
    case MXCC_ACT_CLIP:
        for (long j = 0; j < n; j++) x[j] = mxcc_clip(x[j], lo, hi);
        break;
    }
}

void mxcc_act_apply_f32(mxcc_act act, float alpha, float lo, float hi, float *x, long n)
{
    activate(act, alpha, lo, hi, x, n);
}

void mxcc_epilogue_apply_f32(const mxcc_epilogue *ep, float *c, int ldc, int i0, int j0, int m, int n)
{
    if (mxcc_epilogue_is_noop(ep)) {
        return;
    }
    for (int r = 0; r < m; r++) {
        float *x = c + (long)r * ldc;  /* (n,) row i0 + r of C, columns j0 .. j0+n-1 */
        if (ep->per_row) {
            /* one scale/shift/bias for the whole row: output channel i0 + r of a convolution */
            const int i = i0 + r;
            if (ep->scale) { const float s = ep->scale[i]; for (int j = 0; j < n; j++) x[j] *= s; }
            if (ep->shift) { const float t = ep->shift[i]; for (int j = 0; j < n; j++) x[j] += t; }
            if (ep->bias)  { const float b = ep->bias[i];  for (int j = 0; j < n; j++) x[j] += b; }
        } else {
            /* vectors indexed by column: output unit j0 + j of a FullyConnected layer */
            const float *s = ep->scale ? ep->scale + j0 : NULL;  /* (n,) */
            const float *t = ep->shift ? ep->shift + j0 : NULL;  /* (n,) */
            const float *b = ep->bias ? ep->bias + j0 : NULL;    /* (n,) */
            if (s) for (int j = 0; j < n; j++) x[j] *= s[j];
            if (t) for (int j = 0; j < n; j++) x[j] += t[j];
            if (b) for (int j = 0; j < n; j++) x[j] += b[j];
        }
        if (ep->residual) {
            const float *res = ep->residual + (long)(i0 + r) * ep->ld_residual + j0;  /* (n,) */
            for (int j = 0; j < n; j++) x[j] += res[j];
        }
        activate(ep->act, ep->alpha, ep->lo, ep->hi, x, n);
    }
}
