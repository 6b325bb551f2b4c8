/* Depthwise convolution (groups == C_in == C_out), forward: y (N, C, OH, OW) = each channel plane of x
 * convolved with its own KH x KW taps, then the epilogue (contract: mxcc_conv.h, mxcc_conv_depthwise_f32).
 *
 * The driver: in vector builds (AVX-512F, AVX2 + FMA) with column stride 1 or 2 it describes the call once
 * (dw_call, depthwise_internal.h), picks a plane kernel (AVX-512: depthwise_cblock_f32.c for small 3x3
 * planes unless the caller asks for the per-plane kernels, MXCC_DW_PLANES; depthwise_flat_f32.c for small
 * planes, depthwise_rows_f32.c otherwise) and splits the N*C planes over the threads in equal contiguous ranges;
 * every other case (plain C, column stride > 2) runs the portable plane below, then mxcc_conv_epilogue_f32.
 * A plane is computed by one thread, so the result does not depend on the thread count.
 * mxcc_conv_depthwise_f32_ref: the plain loops with a bounds test per tap, the oracle of tests/runtime/test_conv.py.
 */
#include "mxcc_conv.h"
#include "conv_internal.h"
#include "depthwise_internal.h"
#include "../parallel.h"

/* The portable plane: per output row, each tap adds a weighted input row over its valid range. Any
 * stride; the path of machines without AVX2+FMA and of strides > 2. */
static void depthwise_plane_c(const mxcc_conv_geom *g, const float *xp, const float *wc, float *yp)
{
    const int H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KH = g->k[1], KW = g->k[2], sh = g->stride[1], sw = g->stride[2];
    for (int oh = 0; oh < OH; oh++) {
        float *restrict yr = yp + (long)oh * OW;   /* (OW,) */
        for (int ow = 0; ow < OW; ow++)
            yr[ow] = 0.0f;
        for (int kh = 0; kh < KH; kh++) {
            const int ih = oh * sh - g->pad[1] + kh * g->dilate[1];
            if (ih < 0 || ih >= H)
                continue;
            const float *restrict xr = xp + (long)ih * W;   /* (W,) */
            for (int kw = 0; kw < KW; kw++) {
                const float wv = wc[kh * KW + kw];
                const int off = kw * g->dilate[2] - g->pad[2];
                int lo, hi;
                mxcc_conv_valid_range(OW, W, sw, off, &lo, &hi);
                if (sw == 1) {
                    for (int ow = lo; ow < hi; ow++)
                        yr[ow] += wv * xr[ow + off];
                } else {
                    for (int ow = lo; ow < hi; ow++)
                        yr[ow] += wv * xr[(long)ow * sw + off];
                }
            }
        }
    }
}


#if defined(MXCC_DEPTHWISE_SIMD) && defined(__AVX512F__)
/* Whether 16 planes on their side pay on the CPU this runs on (mxcc_conv_depthwise_kernel_f32): not on AMD
 * family 25. The CPU's, not the compiler's: a build for one x86 machine may run on another. */
static int cblock_pays(void)
{
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __builtin_cpu_init();
    return !__builtin_cpu_is("amdfam19h");
#else
    return 1;
#endif
}
#endif

#ifdef MXCC_DEPTHWISE_SIMD
/* one thread's range of planes (mxcc_parallel_chunks) */
typedef struct dw_job {
    const dw_call *a;
    dw_planes_fn *fn;
    long planes, grain;   /* the split's unit: grain planes (the last unit the rest) */
    int parts;
} dw_job;

static void dw_part(void *arg, long part, int worker)
{
    const dw_job *j = arg;
    (void)worker;
    const long units = (j->planes + j->grain - 1) / j->grain;
    const long u0 = mxcc_split_at(units, j->parts, (int)part), u1 = mxcc_split_at(units, j->parts, (int)part + 1);
    j->fn(j->a, u0 * j->grain, u1 * j->grain < j->planes ? u1 * j->grain : j->planes);
}
#endif
void mxcc_conv_depthwise_f32(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                             const mxcc_epilogue *ep, float *y, int parallel)
{
    mxcc_conv_depthwise_kernel_f32(g, batch, x, w, ep, y, parallel, MXCC_DW_AUTO);
}

void mxcc_conv_depthwise_kernel_f32(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                                    const mxcc_epilogue *ep, float *y, int parallel, int kernel)
{
    (void)kernel;   /* a choice only in AVX-512 builds */
    const int C = g->channels, H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KH = g->k[1], KW = g->k[2];
    const long planes = (long)batch * C;
#ifdef MXCC_DEPTHWISE_SIMD
    if (g->stride[2] <= 2) {
        const mxcc_act act = ep ? ep->act : MXCC_ACT_NONE;
        dw_call a = {.g = g, .x = x, .w = w, .y = y, .ep = ep, .act_after = !mxcc_act_in_registers(act),
                     .base = {.H = H, .W = W, .OH = OH, .OW = OW, .ph = g->pad[1], .pw = g->pad[2], .mul = 1.0f}};
        if (ep) {
            a.base.has_mul = ep->scale != NULL;
            a.base.has_add = ep->shift || ep->bias;
            a.base.act = act;
            a.base.alpha = ep->alpha, a.base.lo = ep->lo, a.base.hi = ep->hi;
        }
        mxcc_simd_mask flat_mask[DW_FLAT_VECS * DW_FLAT_TAPS];
        long flat_off[DW_FLAT_TAPS];
        long grain = 1;   /* planes per unit of the split */
        dw_planes_fn *planes_fn = NULL;
#if defined(__AVX512F__)
        /* where the flat kernel would run, 16 planes on their side run faster on Intel (model 167, 1 thread:
         * 512x14x14 stride 2 31 -> 20 us, 1024x7x7 33 -> 24), slower on AMD family 25 (Zen 3/4), whose 512-bit
         * shuffles take two 256-bit halves, and the more so the larger the batch (MobileNet 1.0, 1 thread, per
         * image, on their side / flat, AMD EPYC family 25 model 17, 2026-11-28: batch 1 41.4 / 33.7 and 38.7 /
         * 34.8 us, batch 4 44.5 / 28.9 and 39.3 / 33.2, batch 32 66.3 / 29.7 and 51.1 / 32.8): there MXCC_DW_AUTO
         * keeps the flat kernel (cblock_pays), as a tuned build does. Not on wider planes, where the rows
         * kernel's vectors are full (512x14x14 stride 1: 38 us by rows, 49 on their side). */
        if (kernel != MXCC_DW_PLANES && (kernel == MXCC_DW_CBLOCK || cblock_pays()) && mxcc_depthwise_flat_fits(g)
            && (planes_fn = mxcc_depthwise_cblock_kernel(g, ep, planes)) != NULL)
            grain = DW_CBLOCK;
#endif
        if (planes_fn == NULL)
            planes_fn = mxcc_depthwise_flat_kernel(g, &a, flat_mask, flat_off);
        if (planes_fn == NULL)
            planes_fn = mxcc_depthwise_rows_kernel(g);
        /* the planes split over the threads in equal ranges of whole units, as schedule(static) would */
        const int nt = parallel && !omp_in_parallel() && !mxcc_pool_in_chunk()
                     ? mxcc_pool_threads(omp_get_max_threads()) : 1;
        dw_job job = {&a, planes_fn, planes, grain, nt};
        mxcc_parallel_chunks(nt, nt, dw_part, &job);   /* a part per thread; a late thread's by the caller */
        return;
    }
#endif
#pragma omp parallel for schedule(static) if (parallel)
    for (long p = 0; p < planes; p++) {
        const int c = (int)(p % C);
        const float *xp = x + p * H * W;           /* (H, W) plane (n, c) */
        const float *wc = w + (long)c * KH * KW;   /* (KH, KW) */
        float *yp = y + p * mxcc_conv_y_plane(g);  /* (OH, OW) */
        depthwise_plane_c(g, xp, wc, yp);
        mxcc_conv_epilogue_f32(ep, yp, 1, (long)OH * OW, c);
    }
}

void mxcc_conv_depthwise_f32_ref(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                                 const mxcc_epilogue *ep, float *y, int parallel)
{
    (void)parallel;
    const int C = g->channels, H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KH = g->k[1], KW = g->k[2];
    for (long p = 0; p < (long)batch * C; p++) {
        const int c = (int)(p % C);
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                float acc = 0.0f;
                for (int kh = 0; kh < KH; kh++)
                    for (int kw = 0; kw < KW; kw++) {
                        const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                        const int iw = ow * g->stride[2] - g->pad[2] + kw * g->dilate[2];
                        if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                            acc += w[((long)c * KH + kh) * KW + kw] * x[(p * H + ih) * W + iw];
                    }
                y[p * mxcc_conv_y_plane(g) + (long)oh * OW + ow] = acc;
            }
        mxcc_conv_epilogue_f32(ep, y + p * mxcc_conv_y_plane(g), 1, (long)OH * OW, c);
    }
}
