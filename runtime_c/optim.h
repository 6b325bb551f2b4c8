/* Optimizer updates generated networks call once per parameter, MXNet's formulas exactly
 * (src/operator/optimizer_op-inl.h: sgd_update, sgd_mom_update, adam_update, rmsprop_update,
 * rmspropalex_update). A negative clip_gradient or clip_weights means no clipping.
 *
 * Each is one entry of mxcc/train/optimizer.py's UPDATES, which names this function, its states and its
 * float parameters in this order and with these names (tests/train_libs/test_optimizer_table.py checks the
 * declarations below against it): `float *w, const float *g, float *<state>..., long n, float <hyper>...`. The
 * generated <net>_update passes ctx->hyper[i] as hyper-parameter i (lr and wd times the parameter's lr_mult
 * and wd_mult). */
#ifndef MXCC_OPTIM_H
#define MXCC_OPTIM_H

/* w = (1 - lr*wd)*w - lr*clip(rescale_grad*g) */
void mxcc_sgd_update_f32(float *w, const float *g, long n, float lr, float wd, float rescale_grad,
                         float clip_gradient);
/* mom = momentum*mom - lr*wd*w - lr*clip(rescale_grad*g); w += mom */
void mxcc_sgd_mom_update_f32(float *w, const float *g, float *mom, long n, float lr, float wd, float momentum,
                             float rescale_grad, float clip_gradient);
/* g' = clip(rescale_grad*g + wd*w); mean = b1*mean + (1-b1)*g'; var = b2*var + (1-b2)*g'^2;
 * w -= lr * mean / (sqrt(var) + epsilon)      (lr already carries Adam's bias correction) */
void mxcc_adam_update_f32(float *w, const float *g, float *mean, float *var, long n, float lr, float wd,
                          float beta1, float beta2, float epsilon, float rescale_grad, float clip_gradient);
/* RMSProp (Tieleman & Hinton): g' = clip(rescale_grad*g + wd*w); var = (1-gamma1)*g'^2 + gamma1*var;
 * w = clip_weights(w - lr * g'/sqrt(var + epsilon))      (MXNet's state n is var) */
void mxcc_rmsprop_update_f32(float *w, const float *g, float *var, long n, float lr, float gamma1, float epsilon,
                             float wd, float rescale_grad, float clip_gradient, float clip_weights);
/* RMSProp centered (Graves 2013, eq. 38-45): g' as above; var = (1-gamma1)*g'^2 + gamma1*var;
 * mean = (1-gamma1)*g' + gamma1*mean; delta = gamma2*delta - lr*g'/sqrt(var - mean^2 + epsilon);
 * w = clip_weights(w + delta)      (MXNet's states n, g, delta are var, mean, delta) */
void mxcc_rmspropalex_update_f32(float *w, const float *g, float *var, float *mean, float *delta, long n, float lr,
                                 float gamma1, float gamma2, float epsilon, float wd, float rescale_grad,
                                 float clip_gradient, float clip_weights);

#endif /* MXCC_OPTIM_H */
