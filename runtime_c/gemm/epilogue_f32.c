/* The GEMM epilogue: bias, folded BatchNorm scale/shift, residual and activation, applied to a finished
 * block of C. One implementation, called by the fast driver on each tile while it is in L1 and by the
 * reference GEMM on the whole matrix, so both paths agree on every rounding and on NaN handling.
 *
 * Order (mxcc_gemm.h): x = x*scale + shift; x = x + bias; x = x + residual; x = act(x).
 * Activations follow MXNet's mshadow_op definitions (src/operator/mshadow_op.h), with libm expf/tanhf/
 * log1pf and IEEE semantics (mxcc never builds with -ffast-math).
 */
#include <math.h>

#include "gemm_internal.h"

int mxcc_epilogue_is_noop(const mxcc_epilogue *ep)
{
    return ep == NULL || (ep->bias == NULL && ep->scale == NULL && ep->shift == NULL &&
                          ep->residual == NULL && ep->act == MXCC_ACT_NONE);
}

/* Activation on one row segment x[0:n], in place. The switch sits outside the element loop so the
 * cheap cases (relu, leaky, clip, softsign) vectorize. */
static void activate(mxcc_act act, float alpha, float lo, float hi, float *x /* (n,) */, int n)
{
    switch (act) {
    case MXCC_ACT_NONE:
        break;
    case MXCC_ACT_RELU:  /* mshadow_op::relu: a > 0 ? a : 0 (NaN -> 0) */
        for (int j = 0; j < n; j++) x[j] = x[j] > 0.0f ? x[j] : 0.0f;
        break;
    case MXCC_ACT_SIGMOID:  /* mshadow_op::sigmoid: 1 / (1 + exp(-a)) */
        for (int j = 0; j < n; j++) x[j] = 1.0f / (1.0f + expf(-x[j]));
        break;
    case MXCC_ACT_TANH:
        for (int j = 0; j < n; j++) x[j] = tanhf(x[j]);
        break;
    case MXCC_ACT_SOFTRELU:  /* mshadow_op::softrelu: a > 20 ? a : log1p(exp(a)); exp would overflow */
        for (int j = 0; j < n; j++) x[j] = x[j] > 20.0f ? x[j] : log1pf(expf(x[j]));
        break;
    case MXCC_ACT_SOFTSIGN:  /* mshadow_op::softsign: a / (1 + |a|) */
        for (int j = 0; j < n; j++) x[j] = x[j] / (1.0f + fabsf(x[j]));
        break;
    case MXCC_ACT_LEAKY:  /* LeakyReLU(act_type='leaky'): a > 0 ? a : slope * a */
        for (int j = 0; j < n; j++) x[j] = x[j] > 0.0f ? x[j] : alpha * x[j];
        break;
    case MXCC_ACT_CLIP:  /* mshadow_op::clip as in clip(a, lo, hi): lo if a < lo, hi if a > hi, else a */
        for (int j = 0; j < n; j++) x[j] = x[j] < lo ? lo : (x[j] > hi ? hi : x[j]);
        break;
    }
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
