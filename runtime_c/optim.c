/* Optimizer updates: one pass over a parameter, vectorizable, parallel when large. */
#include <math.h>

#include "optim.h"

#define PARALLEL_MIN 65536   /* below this the OpenMP fork costs more than the loop */

static inline float clipf(float x, float c)
{
    return c < 0.0f ? x : (x > c ? c : (x < -c ? -c : x));
}

void mxcc_sgd_update_f32(float *w, const float *g, long n, float lr, float wd, float rescale_grad,
                         float clip_gradient)
{
    #pragma omp parallel for simd if (n >= PARALLEL_MIN) schedule(static)
    for (long i = 0; i < n; i++)
        w[i] = (1.0f - lr * wd) * w[i] - lr * clipf(rescale_grad * g[i], clip_gradient);
}

void mxcc_sgd_mom_update_f32(float *w, const float *g, float *mom, long n, float lr, float wd, float momentum,
                             float rescale_grad, float clip_gradient)
{
    #pragma omp parallel for simd if (n >= PARALLEL_MIN) schedule(static)
    for (long i = 0; i < n; i++) {
        mom[i] = momentum * mom[i] - lr * wd * w[i] - lr * clipf(rescale_grad * g[i], clip_gradient);
        w[i] += mom[i];
    }
}

void mxcc_adam_update_f32(float *w, const float *g, float *mean, float *var, long n, float lr, float wd,
                          float beta1, float beta2, float epsilon, float rescale_grad, float clip_gradient)
{
    #pragma omp parallel for simd if (n >= PARALLEL_MIN) schedule(static)
    for (long i = 0; i < n; i++) {
        const float gi = clipf(rescale_grad * g[i] + wd * w[i], clip_gradient);
        mean[i] = beta1 * mean[i] + (1.0f - beta1) * gi;
        var[i] = beta2 * var[i] + (1.0f - beta2) * gi * gi;
        w[i] -= lr * mean[i] / (sqrtf(var[i]) + epsilon);
    }
}

void mxcc_rmsprop_update_f32(float *w, const float *g, float *var, long n, float lr, float gamma1, float epsilon,
                             float wd, float rescale_grad, float clip_gradient, float clip_weights)
{
    #pragma omp parallel for simd if (n >= PARALLEL_MIN) schedule(static)
    for (long i = 0; i < n; i++) {
        const float gi = clipf(rescale_grad * g[i] + wd * w[i], clip_gradient);
        var[i] = (1.0f - gamma1) * (gi * gi) + gamma1 * var[i];
        w[i] = clipf(w[i] - lr * (gi / sqrtf(var[i] + epsilon)), clip_weights);
    }
}

void mxcc_rmspropalex_update_f32(float *w, const float *g, float *var, float *mean, float *delta, long n, float lr,
                                 float gamma1, float gamma2, float epsilon, float wd, float rescale_grad,
                                 float clip_gradient, float clip_weights)
{
    #pragma omp parallel for simd if (n >= PARALLEL_MIN) schedule(static)
    for (long i = 0; i < n; i++) {
        const float gi = clipf(rescale_grad * g[i] + wd * w[i], clip_gradient);
        var[i] = (1.0f - gamma1) * gi * gi + gamma1 * var[i];
        mean[i] = (1.0f - gamma1) * gi + gamma1 * mean[i];
        delta[i] = gamma2 * delta[i] - lr * gi / sqrtf(var[i] - mean[i] * mean[i] + epsilon);
        w[i] = clipf(w[i] + delta[i], clip_weights);
    }
}
