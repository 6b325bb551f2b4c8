/* Optimizer updates generated networks call once per parameter, MXNet's formulas exactly
 * (src/operator/optimizer_op-inl.h: sgd_update, sgd_mom_update, adam_update). clip < 0 means no clipping. */
#ifndef MXCC_OPTIM_H
#define MXCC_OPTIM_H

/* The hyper-parameters of one step, set by the host before each update (learning-rate schedules). */
enum { MXCC_H_LR, MXCC_H_WD, MXCC_H_MOMENTUM, MXCC_H_RESCALE, MXCC_H_CLIP, MXCC_H_BETA1, MXCC_H_BETA2,
       MXCC_H_EPSILON, MXCC_NUM_HYPER };

/* w = (1 - lr*wd)*w - lr*clip(rescale*g) */
void mxcc_sgd_update_f32(float *w, const float *g, long n, float lr, float wd, float rescale, float clip);
/* mom = momentum*mom - lr*wd*w - lr*clip(rescale*g); w += mom */
void mxcc_sgd_mom_update_f32(float *w, const float *g, float *mom, long n, float lr, float wd, float momentum,
                             float rescale, float clip);
/* g' = clip(rescale*g + wd*w); mean = b1*mean + (1-b1)*g'; var = b2*var + (1-b2)*g'^2;
 * w -= lr * mean / (sqrt(var) + eps)      (lr already carries Adam's bias correction) */
void mxcc_adam_update_f32(float *w, const float *g, float *mean, float *var, long n, float lr, float wd,
                          float beta1, float beta2, float eps, float rescale, float clip);

#endif /* MXCC_OPTIM_H */
