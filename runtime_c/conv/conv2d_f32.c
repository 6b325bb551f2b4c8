/* Convolution helpers: im2col / col2im around the runtime GEMM, the direct depthwise kernel, and the
 * per-channel epilogue. Contracts and the geometry convention are in mxcc_conv.h.
 *
 * The fast versions compute, for each kernel offset, the range of output columns whose input position
 * falls inside the image ([lo, hi) below), so the inner loops have no bounds tests and (stride 1)
 * vectorize or become memcpy. The `_ref` twins are the plain loops with a bounds test per element.
 */
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#else
static inline int omp_get_num_threads(void) { return 1; }
static inline int omp_get_thread_num(void) { return 0; }
#endif

#include "mxcc_conv.h"
#include "mxcc_math.h"

/* Output positions o in [0, n_out) with 0 <= o * stride + off < n_in: [*lo, *hi) (empty: lo == hi). */
static void valid_range(int n_out, int n_in, int stride, int off, int *lo, int *hi)
{
    int a = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int b = n_in - 1 - off < 0 ? 0 : (n_in - 1 - off) / stride + 1;
    if (b > n_out) b = n_out;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* ---- im2col ------------------------------------------------------------------------------------------ */

/* A block holds the columns [j0, j0 + nj) of the column matrix; both im2col and col2im walk it as segments
 * of one output row (od, oh) each: block columns [at, at + ow1 - ow0) are output columns (od, oh, ow0..ow1-1). */
typedef struct segment { int od, oh, ow0, ow1; } segment;

static inline segment segment_at(int OH, int OW, long j0, long nj, long at)
{
    const long j = j0 + at, row = j / OW;   /* row = od * OH + oh */
    segment s = {(int)(row / OH), (int)(row % OH), (int)(j - row * OW), OW};
    if (nj - at < s.ow1 - s.ow0)
        s.ow1 = s.ow0 + (int)(nj - at);
    return s;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

void mxcc_im2col_block_f32(const mxcc_conv_geom *g, const float *x, long j0, long nj, float *col, int parallel)
{
    const int D = g->in[0], H = g->in[1], W = g->in[2];
    const int OH = g->out[1], OW = g->out[2];
    const int KD = g->k[0], KH = g->k[1], KW = g->k[2];
    const int rows = g->channels * KD * KH * KW;
    const int sw = g->stride[2];
#pragma omp parallel for schedule(static) if (parallel)
    for (int r = 0; r < rows; r++) {
        const int kw = r % KW, kh = (r / KW) % KH, kd = (r / (KW * KH)) % KD, c = r / (KW * KH * KD);
        const float *xc = x + (long)c * D * H * W;   /* (D, H, W) channel c */
        float *dst = col + (long)r * nj;             /* (nj,) row r of the block */
        const int off_w = kw * g->dilate[2] - g->pad[2];
        int lo, hi;
        valid_range(OW, W, sw, off_w, &lo, &hi);
        for (long at = 0; at < nj;) {
            const segment sg = segment_at(OH, OW, j0, nj, at);
            const int od = sg.od, oh = sg.oh, ow0 = sg.ow0, ow1 = sg.ow1;
            const int id = od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
            const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
            /* loops, not memset/memcpy: segments are one output row (tens of floats), shorter than a
             * libc call is worth */
            float *restrict d = dst + at;   /* (ow1 - ow0,): d[ow - ow0] is column (od, oh, ow) */
            if (id < 0 || id >= D || ih < 0 || ih >= H) {
                for (int i = 0; i < ow1 - ow0; i++) d[i] = 0.0f;
            } else {
                const float *restrict xr = xc + ((long)id * H + ih) * W;   /* (W,) input row */
                const int a = clampi(lo, ow0, ow1), b = clampi(hi, a, ow1);
                for (int i = 0; i < a - ow0; i++) d[i] = 0.0f;
                float *restrict dv = d + (a - ow0);                    /* (b - a,) the valid columns */
                if (sw == 1) {
                    const float *restrict xs = xr + a + off_w;         /* (b - a,) */
                    for (int i = 0; i < b - a; i++) dv[i] = xs[i];
                } else {
                    for (int ow = a; ow < b; ow++) dv[ow - a] = xr[(long)ow * sw + off_w];
                }
                for (int i = b - ow0; i < ow1 - ow0; i++) d[i] = 0.0f;
            }
            at += ow1 - ow0;
        }
    }
}

void mxcc_im2col_block_f32_ref(const mxcc_conv_geom *g, const float *x, long j0, long nj, float *col, int parallel)
{
    (void)parallel;
    const int D = g->in[0], H = g->in[1], W = g->in[2];
    const int OH = g->out[1], OW = g->out[2];
    long r = 0;
    for (int c = 0; c < g->channels; c++)
        for (int kd = 0; kd < g->k[0]; kd++)
            for (int kh = 0; kh < g->k[1]; kh++)
                for (int kw = 0; kw < g->k[2]; kw++, r++)
                    for (long j = j0; j < j0 + nj; j++) {
                        const int ow = (int)(j % OW), oh = (int)(j / OW % OH), od = (int)(j / OW / OH);
                        const int id = od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
                        const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                        const int iw = ow * g->stride[2] - g->pad[2] + kw * g->dilate[2];
                        const int inside = id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W;
                        col[r * nj + (j - j0)] = inside ? x[(((long)c * D + id) * H + ih) * W + iw] : 0.0f;
                    }
}

void mxcc_im2col_f32(const mxcc_conv_geom *g, const float *x, float *col, int parallel)
{
    mxcc_im2col_block_f32(g, x, 0, (long)g->out[0] * g->out[1] * g->out[2], col, parallel);
}

void mxcc_im2col_f32_ref(const mxcc_conv_geom *g, const float *x, float *col, int parallel)
{
    mxcc_im2col_block_f32_ref(g, x, 0, (long)g->out[0] * g->out[1] * g->out[2], col, parallel);
}

/* ---- col2im ------------------------------------------------------------------------------------------ */

void mxcc_col2im_block_acc_f32(const mxcc_conv_geom *g, const float *col, long j0, long nj, float *x, int parallel)
{
    const int D = g->in[0], H = g->in[1], W = g->in[2];
    const int OH = g->out[1], OW = g->out[2];
    const int KD = g->k[0], KH = g->k[1], KW = g->k[2];
    const int sw = g->stride[2];
    /* one channel per iteration: a thread owns its channel's whole image, so the sums never race; each
     * pixel receives its rows' contributions in row order, as in the reference */
#pragma omp parallel for schedule(static) if (parallel)
    for (int c = 0; c < g->channels; c++) {
        float *xc = x + (long)c * D * H * W;   /* (D, H, W) */
        for (int kd = 0; kd < KD; kd++)
            for (int kh = 0; kh < KH; kh++)
                for (int kw = 0; kw < KW; kw++) {
                    const float *src = col + ((((long)c * KD + kd) * KH + kh) * KW + kw) * nj;   /* (nj,) */
                    const int off_w = kw * g->dilate[2] - g->pad[2];
                    int lo, hi;
                    valid_range(OW, W, sw, off_w, &lo, &hi);
                    for (long at = 0; at < nj;) {
                        const segment sg = segment_at(OH, OW, j0, nj, at);
                        const int od = sg.od, oh = sg.oh, ow0 = sg.ow0, ow1 = sg.ow1;
                        const int id = od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
                        const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                        if (id >= 0 && id < D && ih >= 0 && ih < H) {
                            const float *s = src + at;                           /* (ow1 - ow0,) */
                            float *xr = xc + ((long)id * H + ih) * W;            /* (W,) */
                            const int a = clampi(lo, ow0, ow1), b = clampi(hi, a, ow1);
                            for (int ow = a; ow < b; ow++)
                                xr[(long)ow * sw + off_w] += s[ow - ow0];
                        }
                        at += ow1 - ow0;
                    }
                }
    }
}

void mxcc_col2im_block_acc_f32_ref(const mxcc_conv_geom *g, const float *col, long j0, long nj, float *x,
                                   int parallel)
{
    (void)parallel;
    const int D = g->in[0], H = g->in[1], W = g->in[2];
    const int OH = g->out[1], OW = g->out[2];
    long r = 0;
    for (int c = 0; c < g->channels; c++)
        for (int kd = 0; kd < g->k[0]; kd++)
            for (int kh = 0; kh < g->k[1]; kh++)
                for (int kw = 0; kw < g->k[2]; kw++, r++)
                    for (long j = j0; j < j0 + nj; j++) {
                        const int ow = (int)(j % OW), oh = (int)(j / OW % OH), od = (int)(j / OW / OH);
                        const int id = od * g->stride[0] - g->pad[0] + kd * g->dilate[0];
                        const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                        const int iw = ow * g->stride[2] - g->pad[2] + kw * g->dilate[2];
                        if (id >= 0 && id < D && ih >= 0 && ih < H && iw >= 0 && iw < W)
                            x[(((long)c * D + id) * H + ih) * W + iw] += col[r * nj + (j - j0)];
                    }
}

void mxcc_col2im_f32(const mxcc_conv_geom *g, const float *col, float *x, int parallel)
{
    memset(x, 0, (size_t)g->channels * g->in[0] * g->in[1] * g->in[2] * sizeof(float));
    mxcc_col2im_block_acc_f32(g, col, 0, (long)g->out[0] * g->out[1] * g->out[2], x, parallel);
}

void mxcc_col2im_f32_ref(const mxcc_conv_geom *g, const float *col, float *x, int parallel)
{
    memset(x, 0, (size_t)g->channels * g->in[0] * g->in[1] * g->in[2] * sizeof(float));
    mxcc_col2im_block_acc_f32_ref(g, col, 0, (long)g->out[0] * g->out[1] * g->out[2], x, parallel);
}

/* ---- epilogue on channel planes ------------------------------------------------------------------------ */

/* act(x) on x[0:n] in place; the switch is outside the loop so relu/leaky/clip vectorize. */
static void activate(const mxcc_epilogue *ep, float *restrict x, long n)
{
    switch (ep->act) {
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
        for (long j = 0; j < n; j++) x[j] = mxcc_leaky(x[j], ep->alpha);
        break;
    case MXCC_ACT_CLIP:
        for (long j = 0; j < n; j++) x[j] = mxcc_clip(x[j], ep->lo, ep->hi);
        break;
    }
}

void mxcc_conv_epilogue_f32(const mxcc_epilogue *ep, float *y, int rows, long n, int row0)
{
    if (ep == NULL)
        return;
    for (int r = 0; r < rows; r++) {
        float *restrict x = y + (long)r * n;   /* (n,) channel row0 + r */
        const int c = row0 + r;
        if (ep->scale) { const float s = ep->scale[c]; for (long j = 0; j < n; j++) x[j] *= s; }
        if (ep->shift) { const float t = ep->shift[c]; for (long j = 0; j < n; j++) x[j] += t; }
        if (ep->bias)  { const float b = ep->bias[c];  for (long j = 0; j < n; j++) x[j] += b; }
        if (ep->residual) {
            const float *res = ep->residual + (long)c * ep->ld_residual;   /* (n,) */
            for (long j = 0; j < n; j++) x[j] += res[j];
        }
        activate(ep, x, n);
    }
}

/* ---- depthwise ---------------------------------------------------------------------------------------- */

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
                valid_range(OW, W, sw, off, &lo, &hi);
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

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>

/* Vectors of VL output columns. vm is a lane mask: masked loads read only the lanes inside the row (the
 * others are 0 and never touched, so a vector may start before a row or end past it), masked stores write
 * only the lanes inside the output row. v_even / v_odd deinterleave 2*VL consecutive floats (stride 2). */
#if defined(__AVX512F__)
#define VL 16
typedef __m512 vf;
typedef __mmask16 vm;
static inline vf v_zero(void) { return _mm512_setzero_ps(); }
static inline vf v_set1(float a) { return _mm512_set1_ps(a); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void v_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf v_load_m(const float *p, vm m) { return _mm512_maskz_loadu_ps(m, p); }
static inline void v_store_m(float *p, vf v, vm m) { _mm512_mask_storeu_ps(p, m, v); }
static inline vm v_lanes(int lo, int hi)   /* lanes l with lo <= l < hi */
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > VL ? VL : hi;
    return hi <= lo ? 0 : (vm)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}
static inline vm v_mask_bits(unsigned bits) { return (vm)bits; }   /* lane l: bit l */
static inline vf v_even(vf a, vf b)
{
    return _mm512_permutex2var_ps(a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);
}
static inline vf v_odd(vf a, vf b)
{
    return _mm512_permutex2var_ps(a, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), b);
}
/* v_even / v_odd without crossing 128-bit lanes (vshufps): the outputs come in the order v_pi, lane 4k + i
 * holding output (i < 2 ? 2k + i : 8 + 2k + i - 2); v_from_pi puts them back in order (one vpermps per
 * accumulator instead of three vpermt2ps per input row: 64x112x112 s2 124.9 -> 118.2 us, 1 thread) */
static inline vf v_even_pi(vf a, vf b) { return _mm512_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); }
static inline vf v_odd_pi(vf a, vf b) { return _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)); }
static inline vf v_from_pi(vf a)
{
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15), a);
}
/* lanes 0..7 to lo[0..7], 8..15 to hi[0..7] */
static inline void v_store_halves(float *lo, float *hi, vf a)
{
    _mm256_storeu_ps(lo, _mm512_castps512_ps256(a));
    _mm256_storeu_ps(hi, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}
/* lanes 0..7: the even lanes of a, 8..15: the odd ones */
static inline vf v_split_even_odd(vf a)
{
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15), a);
}
/* the activations of mxcc_math.h, NaN included: max/min return their second operand when one is NaN */
static inline vf v_relu(vf x) { return _mm512_max_ps(x, _mm512_setzero_ps()); }
static inline vf v_clip(vf x, vf lo, vf hi) { return _mm512_min_ps(hi, _mm512_max_ps(lo, x)); }
static inline vf v_leaky(vf x, vf alpha)
{
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GT_OQ), _mm512_mul_ps(alpha, x), x);
}
#else
#define VL 8
typedef __m256 vf;
typedef __m256i vm;
static inline vf v_zero(void) { return _mm256_setzero_ps(); }
static inline vf v_set1(float a) { return _mm256_set1_ps(a); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf v_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void v_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf v_load_m(const float *p, vm m) { return _mm256_maskload_ps(p, m); }
static inline void v_store_m(float *p, vf v, vm m) { _mm256_maskstore_ps(p, m, v); }
static inline vm v_lanes(int lo, int hi)
{
    const __m256i l = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_si256(_mm256_cmpgt_epi32(l, _mm256_set1_epi32(lo - 1)), _mm256_cmpgt_epi32(_mm256_set1_epi32(hi), l));
}
static inline vm v_mask_bits(unsigned bits)
{
    const __m256i b = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), b), b);
}
/* per 128-bit lane (a0 a2 b0 b2 | a4 a6 b4 b6), then the 64-bit pairs in the order 0 2 1 3 */
static inline vf v_even(vf a, vf b)
{
    const __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
static inline vf v_odd(vf a, vf b)
{
    const __m256 t = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
/* in 128-bit lanes only: outputs in the order 0 1 4 5 | 2 3 6 7 (v_pi); v_from_pi: the 64-bit pairs 0 2 1 3 */
static inline vf v_even_pi(vf a, vf b) { return _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); }
static inline vf v_odd_pi(vf a, vf b) { return _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)); }
static inline vf v_from_pi(vf a)
{
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(a), _MM_SHUFFLE(3, 1, 2, 0)));
}
static inline void v_store_halves(float *lo, float *hi, vf a)
{
    _mm_storeu_ps(lo, _mm256_castps256_ps128(a));
    _mm_storeu_ps(hi, _mm256_extractf128_ps(a, 1));
}
static inline vf v_split_even_odd(vf a)
{
    return _mm256_permutevar8x32_ps(a, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
}
static inline vf v_relu(vf x) { return _mm256_max_ps(x, _mm256_setzero_ps()); }
static inline vf v_clip(vf x, vf lo, vf hi) { return _mm256_min_ps(hi, _mm256_max_ps(lo, x)); }
static inline vf v_leaky(vf x, vf alpha)
{
    return _mm256_blendv_ps(_mm256_mul_ps(alpha, x), x, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ));
}
#endif

#define DW_INLINE static inline __attribute__((always_inline))
/* DW_S2A: a stride-2 3x3 row (AVX-512) from three loads at the block's column b = c0 + 1 (b - 16, b, b + 16)
 * and three lane permutes (tap 1 = even lanes of the last two, tap 2 = odd lanes, tap 0 = tap 2 moved up one
 * lane with the column before b), in natural lane order, instead of two pairs of loads one float apart (all
 * split across cache lines) and in-lane shuffles put back in order at the end. 1 thread, in cache:
 * 64x112x112 104 -> 93 us, 128x56x56 51 -> 45-49, 256x28x28 32 -> 29-30; in MobileNet 1.0 (1 thread) conv3
 * 113 -> 98 us, conv7 55 -> 49, conv11 34 -> 32. */
#ifndef DW_S2A
#if defined(__AVX512F__)
#define DW_S2A 1
#else
#define DW_S2A 0
#endif
#endif

/* Register blocks per ISA: R rows x U vectors of accumulators next to the KW loaded vectors and the
 * broadcast taps (32 zmm / 16 ymm registers). AVX-512 runs 3x3 kernels in blocks of DW_R_TALL = 7 rows
 * where that wastes no more rows past the output than blocks of 4 (MobileNet's 112..7: multiples of 7):
 * 9 input rows feed 7 output rows instead of 6 feeding 4 (14x14 stride 1: 54 vs 42 GFLOP/s, 28x28: 57 vs
 * 50, in L2 on this machine). Stride 2 stays at 4 rows x 1 vector (1 thread, 7x2 -> 4x1: 64x112x112 118 ->
 * 104 us, 128x56x56 58 -> 51, 256x28x28 35 -> 31; 4x2 106, 52, 30; 2x1, 3x1, 5x2, 6x2 slower): there an
 * input row feeds at most 2 output rows, and 7x2 accumulators leave too few registers for the deinterleave.
 * DW_R is the largest R. */
#if defined(__AVX512F__)
#define DW_R 7
#define DW_R_TALL 7
#define DW_U 2
#else
#define DW_R 4
#define DW_R_TALL 4
#define DW_U 1
#endif
/* Rows per block of the stride-1 3x3 kernel where DW_R_TALL does not apply. AVX2 has 16 ymm registers: 4 rows
 * (4 accumulators + 3 loaded vectors + 9 broadcast taps) spilled; 3 rows, 1 thread, AVX2 build: 32x112x112
 * 212 -> 178 us, 128x56x56 230 -> 203 us, 512x14x14 103 -> 104 (2 rows: 185, 214, 109). */
#if defined(__AVX512F__)
#define DW_R_S1 4
#else
#define DW_R_S1 3
#endif

/* One channel plane and its epilogue, as the vector kernels read them: the geometry and epilogue kind are
 * the call's, the pointers and the channel's constants are set per plane (dw_plane_at). */
typedef struct dw_plane {
    const float *x;       /* (H, W) input plane */
    const float *w;       /* (KH, KW) the channel's taps */
    float *y;             /* (OH, OW) output plane */
    const float *res;     /* (OH, OW) residual plane, or NULL */
    int H, W, OH, OW, ph, pw;
    int has_mul, has_add; /* y = acc * mul + add: scale, shift + bias */
    float mul, add;
    int act;              /* applied on the registers: NONE, RELU, LEAKY, CLIP; others after the plane */
    float alpha, lo, hi;
} dw_plane;

/* What the planes of one call share. */
typedef struct dw_call {
    const mxcc_conv_geom *g;
    const float *x, *w;       /* (N, C, H, W), (C, KH, KW) */
    float *y;                 /* (N, C, OH, OW) */
    const mxcc_epilogue *ep;  /* NULL: none */
    int act_after;            /* an activation without a vector form: activate() over each finished plane */
    dw_plane base;            /* the geometry and the epilogue kind, no plane yet */
    const vm *flat_mask;      /* dw_planes_flat: [vector * taps + tap] */
    const long *flat_off;     /* dw_planes_flat: [tap] */
    int flat_s2;              /* dw_planes_flat: stride 2, the taps read the input's phases */
    int flat_vecs;            /* dw_planes_flat: vectors per plane, a multiple of DW_FLAT_GROUP */
} dw_call;

/* p's pointers and channel constants for plane i = (n, c) of the call. */
DW_INLINE void dw_plane_at(dw_plane *p, const dw_call *a, long i)
{
    const mxcc_conv_geom *g = a->g;
    const int c = (int)(i % g->channels);
    p->x = a->x + i * g->in[1] * g->in[2];
    p->w = a->w + (long)c * g->k[1] * g->k[2];
    p->y = a->y + i * g->out[1] * g->out[2];
    const mxcc_epilogue *ep = a->ep;
    if (ep) {
        p->mul = ep->scale ? ep->scale[c] : 1.0f;
        p->add = (ep->shift ? ep->shift[c] : 0.0f) + (ep->bias ? ep->bias[c] : 0.0f);
        p->res = ep->residual ? ep->residual + (long)c * ep->ld_residual : NULL;
    }
}

/* The epilogue on n accumulators, each test once per block rather than per vector: y = acc * mul + add
 * (dw_affine), + residual (the caller's), then the activation (dw_act). */
DW_INLINE void dw_affine(const dw_plane *p, vf *acc, const int n)
{
    if (p->has_mul) {
        const vf mul = v_set1(p->mul), add = v_set1(p->add);
#pragma GCC unroll 16
        for (int i = 0; i < n; i++) acc[i] = v_fma(acc[i], mul, add);
    } else if (p->has_add) {
        const vf add = v_set1(p->add);
#pragma GCC unroll 16
        for (int i = 0; i < n; i++) acc[i] = v_add(acc[i], add);
    }
}

DW_INLINE void dw_act(const dw_plane *p, vf *acc, const int n)
{
    switch (p->act) {
    case MXCC_ACT_RELU:
#pragma GCC unroll 16
        for (int i = 0; i < n; i++) acc[i] = v_relu(acc[i]);
        break;
    case MXCC_ACT_LEAKY: {
        const vf alpha = v_set1(p->alpha);
#pragma GCC unroll 16
        for (int i = 0; i < n; i++) acc[i] = v_leaky(acc[i], alpha);
        break;
    }
    case MXCC_ACT_CLIP: {
        const vf lo = v_set1(p->lo), hi = v_set1(p->hi);
#pragma GCC unroll 16
        for (int i = 0; i < n; i++) acc[i] = v_clip(acc[i], lo, hi);
        break;
    }
    default:
        break;
    }
}

/* A block's accumulators (R rows x U vectors at (oh0, ow0)) through the epilogue into y: rows past OH are
 * dropped, lanes past OW too (masked). */
DW_INLINE void dw_store(const dw_plane *p, vf acc[DW_R * DW_U], int oh0, int ow0, const int R, const int U,
                        const int masked)
{
    const int nr = p->OH - oh0 < R ? p->OH - oh0 : R;   /* rows of the block inside the output */
    vm sm[DW_U];
#pragma GCC unroll 16
    for (int u = 0; u < U; u++)
        sm[u] = v_lanes(0, masked ? p->OW - (ow0 + u * VL) : VL);
    dw_affine(p, acc, R * U);
    if (p->res) {
#pragma GCC unroll 16
        for (int r = 0; r < R; r++)
#pragma GCC unroll 16
            for (int u = 0; u < U; u++) {
                if (r >= nr)   /* not in the loop bound: a constant trip count unrolls, acc stays in registers */
                    break;
                const float *res = p->res + (long)(oh0 + r) * p->OW + ow0 + u * VL;
                acc[r * U + u] = v_add(acc[r * U + u], masked ? v_load_m(res, sm[u]) : v_load(res));
            }
    }
    dw_act(p, acc, R * U);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        if (r >= nr)
            break;
#pragma GCC unroll 16
        for (int u = 0; u < U; u++) {
            float *y = p->y + (long)(oh0 + r) * p->OW + ow0 + u * VL;
            /* AVX2: a masked block's whole vectors stored plainly, vmaskmovps stores are slow on AMD (1 thread,
             * AVX2 build: 512x14x14 105 -> 81 us, 256x28x28 143 -> 123, 32x112x112 178 -> 164, 256x28x28
             * stride 2 65 -> 58); AVX-512's masked stores cost nothing more (the test cost 2% at 512x14x14) */
#if defined(__AVX512F__)
            if (masked)
#else
            if (masked && ow0 + (u + 1) * VL > p->OW)
#endif
                v_store_m(y, acc[r * U + u], sm[u]);
            else
                v_store(y, acc[r * U + u]);
        }
    }
}

/* A block of R output rows (oh0..) x U vectors (columns ow0.. in steps of VL) of a KH x KW, stride S,
 * dilation 1 depthwise convolution, all of them compile-time constants of the caller (the loops unroll, the
 * accumulators live in registers). Register blocking in H: each input row is loaded once (KW shifted
 * vectors, or for stride 2 the even and odd lanes of KW/2 + 1 pairs of vectors) and feeds every output
 * row of the block whose window covers it (up to KH of them for stride 1). Input rows outside the image are
 * skipped (the zero padding adds nothing); output rows past OH are computed and dropped. masked: some load
 * crosses a row end or the block crosses OW (lane masks, computed once per block); else plain loads. */
DW_INLINE void dw_block(const dw_plane *p, const vf *wv, int oh0, int ow0, const int KH, const int KW, const int S,
                        const int R, const int U, const int masked)
{
    /* fixed sizes (not [R][U]: a variable-length array stays in memory); R <= DW_R, U <= DW_U, KW <= 5 */
    vf acc[DW_R * DW_U];   /* acc[r * U + u] */
    vm lm[DW_U][6];   /* load masks: stride 1 per tap; stride 2 per half of each pair (S2A: the 3 vectors) */
    const int W = p->W, c00 = ow0 * S - p->pw;   /* input column of block lane 0, tap 0 */
    const int s2a = DW_S2A && S == 2 && KW == 3;
#pragma GCC unroll 8
    for (int u = 0; u < U; u++) {
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            acc[r * U + u] = v_zero();
        if (masked && s2a) {   /* columns [b - 16, b), [b, b + 16), [b + 16, b + 32), b = c0 + 1 */
            const int b = c00 + u * VL * S + 1;
#pragma GCC unroll 3
            for (int q = 0; q < 3; q++) lm[u][q] = v_lanes(-(b + (q - 1) * VL), W - (b + (q - 1) * VL));
        } else if (masked) {
            const int c0 = c00 + u * VL * S;
#pragma GCC unroll 8
            for (int kw = 0; kw < KW; kw++) {
                if (S == 1)
                    lm[u][kw] = v_lanes(-(c0 + kw), W - (c0 + kw));
                else if (kw % 2 == 0) {
                    lm[u][kw] = v_lanes(-(c0 + kw), W - (c0 + kw));
                    lm[u][kw + 1] = v_lanes(-(c0 + kw + VL), W - (c0 + kw + VL));
                }
            }
        }
    }
    const int ih0 = oh0 * S - p->ph;
#pragma GCC unroll 32
    for (int j = 0; j < (R - 1) * S + KH; j++) {   /* the input rows of the block */
        if (ih0 + j < 0 || ih0 + j >= p->H)
            continue;
        const float *xr = p->x + (long)(ih0 + j) * W + c00;   /* lane 0, tap 0: may be before the row */
#pragma GCC unroll 8
        for (int u = 0; u < U; u++) {
            vf in[5];   /* the row's values under tap kw for the VL outputs (stride 2: lanes in v_pi order) */
            const float *xu = xr + u * VL * S;
#if DW_S2A
            if (s2a) {   /* in natural order: tap 1 the even lanes of (b, b+16), tap 2 the odd, tap 0 the odd
                          * shifted up one lane with the column before b */
                const float *xb = xu + 1;
                const vf a0 = masked ? v_load_m(xb - VL, lm[u][0]) : v_load(xb - VL);
                const vf a1 = masked ? v_load_m(xb, lm[u][1]) : v_load(xb);
                const vf a2 = masked ? v_load_m(xb + VL, lm[u][2]) : v_load(xb + VL);
                in[1] = _mm512_permutex2var_ps(a1, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), a2);
                in[2] = _mm512_permutex2var_ps(a1, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), a2);
                in[0] = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(in[2]), _mm512_castps_si512(a0), 15));
            } else
#endif
#pragma GCC unroll 8
            for (int kw = 0; kw < KW; kw++) {
                if (S == 1)
                    in[kw] = masked ? v_load_m(xu + kw, lm[u][kw]) : v_load(xu + kw);
                else if (kw % 2 == 0) {
                    const vf a = masked ? v_load_m(xu + kw, lm[u][kw]) : v_load(xu + kw);
                    const vf b = masked ? v_load_m(xu + kw + VL, lm[u][kw + 1]) : v_load(xu + kw + VL);
                    in[kw] = v_even_pi(a, b);
                    if (kw + 1 < KW)
                        in[kw + 1] = v_odd_pi(a, b);
                }
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const int kh = j - r * S;   /* output row oh0 + r reads this row with tap row kh */
                if (kh < 0 || kh >= KH)
                    continue;
#pragma GCC unroll 8
                for (int kw = 0; kw < KW; kw++)
                    acc[r * U + u] = v_fma(wv[kh * KW + kw], in[kw], acc[r * U + u]);
            }
        }
    }
    if (S == 2 && !s2a) {
#pragma GCC unroll 16
        for (int i = 0; i < R * U; i++)
            acc[i] = v_from_pi(acc[i]);
    }
    dw_store(p, acc, oh0, ow0, R, U, masked);
}

/* Planes p0 .. p1-1 by dw_block: per block of R rows, the columns in vectors; blocks of U vectors without
 * masks where every load of the block stays inside the input row and the block inside the output row,
 * single masked vectors elsewhere (the edges, and rows narrower than a vector). */
DW_INLINE void dw_planes_blocked(const dw_call *a, long p0, long p1, const int KH, const int KW, const int S,
                                 const int R, const int U)
{
    dw_plane pl = a->base, *p = &pl;   /* a local copy: the stores to y cannot change it */
    /* columns a vector starting at ow reads: [ow*S - pw - before, ow*S - pw + span) */
    const int s2a = DW_S2A && S == 2 && KW == 3, before = s2a ? VL - 1 : 0;
    const int span = S == 1 ? KW - 1 + VL : s2a ? 2 * VL + 1 : (KW - 1) / 2 * 2 + 2 * VL;
    const int ow_lo = (p->pw + before + S - 1) / S;
    int ow_hi = p->W + p->pw - span >= 0 ? (p->W + p->pw - span) / S : -1;   /* last unmasked vector start */
    if (ow_hi > p->OW - VL)
        ow_hi = p->OW - VL;
    for (long i = p0; i < p1; i++) {
        dw_plane_at(p, a, i);
        vf wv[25];   /* the taps, broadcast once per plane */
#pragma GCC unroll 25
        for (int t = 0; t < KH * KW; t++)
            wv[t] = v_set1(p->w[t]);
        for (int oh0 = 0; oh0 < p->OH; oh0 += R) {
            int ow = 0;
            while (ow < p->OW) {
                if (ow >= ow_lo && ow + (U - 1) * VL <= ow_hi) {
                    dw_block(p, wv, oh0, ow, KH, KW, S, R, U, 0);
                    ow += U * VL;
                } else if (ow >= ow_lo && ow <= ow_hi) {
                    dw_block(p, wv, oh0, ow, KH, KW, S, R, 1, 0);
                    ow += VL;
                } else {
                    dw_block(p, wv, oh0, ow, KH, KW, S, R, 1, 1);
                    ow += VL;
                }
            }
        }
        if (a->act_after)
            activate(a->ep, p->y, (long)p->OH * p->OW);
    }
}

static void dw_planes_3x3s1(const dw_call *a, long p0, long p1) { dw_planes_blocked(a, p0, p1, 3, 3, 1, DW_R_S1, DW_U); }
static void dw_planes_3x3s2(const dw_call *a, long p0, long p1) { dw_planes_blocked(a, p0, p1, 3, 3, 2, 4, 1); }
static void dw_planes_5x5s1(const dw_call *a, long p0, long p1) { dw_planes_blocked(a, p0, p1, 5, 5, 1, 4, DW_U); }
static void dw_planes_5x5s2(const dw_call *a, long p0, long p1) { dw_planes_blocked(a, p0, p1, 5, 5, 2, 4, DW_U); }
#if DW_R_TALL != 4
static void dw_planes_3x3s1_tall(const dw_call *a, long p0, long p1)
{
    dw_planes_blocked(a, p0, p1, 3, 3, 1, DW_R_TALL, DW_U);
}
#else
#define dw_planes_3x3s1_tall dw_planes_3x3s1
#endif

/* Small planes, rows too narrow for the vectors (OW <= VL / 2: the row path would leave more than half the
 * lanes idle). The output plane is one flat array, q = oh * OW + ow, and so is each source plane the taps
 * read, with the output's row pitch, so that tap t reads source q + off[t] and the vectors run over q across
 * row ends (7x7: 4 vectors instead of 7); a mask per (vector, tap), computed once per call, keeps the lanes
 * whose input is inside the image. DW_FLAT_GROUP vectors at a time: that many FMA chains.
 *   stride 1, "same" size (OH == H, OW == W: 2 * pad = dilate * (k - 1)): the source is the input plane,
 *     off = (kh * dh - ph) * W + kw * dw - pw.
 *   stride 2, odd kernel, pad (k - 1) / 2, no dilation (OH = ceil(H / 2), OW = ceil(W / 2)): the input plane
 *     deinterleaved into its four phases (row parity, column parity), each OH x OW, phase (a, b) element
 *     (i, j) = input (2i + a, 2j + b); tap (kh, kw) reads phase ((kh - ph) mod 2, (kw - pw) mod 2) at
 *     (oh + floor((kh - ph) / 2), ow + floor((kw - pw) / 2)). 512x14x14 s2 3x3 (7x7 out, 4 vectors
 *     instead of 7 of 7 lanes): 35.3 -> 30.7 us, 1 thread. */
#define DW_FLAT_GROUP 4
#define DW_FLAT_VECS 8
#define DW_FLAT_TAPS 25

static int dw_flat_fits(const mxcc_conv_geom *g)
{
    const int H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    if (OW > VL / 2 || (OH * OW + VL - 1) / VL > DW_FLAT_VECS || g->k[1] * g->k[2] > DW_FLAT_TAPS)
        return 0;
    if (g->stride[1] == 1 && g->stride[2] == 1)
        return OH == H && OW == W && 2 * g->pad[1] == g->dilate[1] * (g->k[1] - 1) &&
               2 * g->pad[2] == g->dilate[2] * (g->k[2] - 1);
    /* stride 2 only from 3 vectors on: below, deinterleaving costs more than the idle lanes (64x8x8 s2:
     * 2.7 us flat vs 2.4 by rows) */
    return (OH * OW + VL - 1) / VL >= 3 && g->stride[1] == 2 && g->stride[2] == 2 && g->dilate[1] == 1 &&
           g->dilate[2] == 1 && g->k[1] % 2 && g->k[2] % 2 && 2 * g->pad[1] == g->k[1] - 1 &&
           2 * g->pad[2] == g->k[2] - 1 && OH == (H + 1) / 2 && OW == (W + 1) / 2;
}

/* Vectors per plane of n outputs: 1, 2, or whole groups of DW_FLAT_GROUP */
static inline int dw_flat_vecs(int n)
{
    const int v = (n + VL - 1) / VL;
    return v <= 2 ? v : (v + DW_FLAT_GROUP - 1) / DW_FLAT_GROUP * DW_FLAT_GROUP;
}

/* The distance between the phase planes of a stride-2 flat plane (dw_phases): OH * OW and room for the
 * half-vector stores past the last row */
static inline long dw_phase_pitch(int OH, int OW) { return (long)OH * OW + VL / 2; }

static inline int floor_div2(int v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

/* The masks and offsets of dw_planes_flat for g (stride 2: from the first phase, so that the offset picks
 * the phase too): vectors rounded up to whole groups (the extra ones have empty masks, so they load and
 * store nothing). */
static int dw_flat_tables(const mxcc_conv_geom *g, vm *mask, long *off)
{
    const int H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2], n = OH * OW;
    const int KH = g->k[1], KW = g->k[2], taps = KH * KW, s2 = g->stride[2] == 2;
    const int vecs = dw_flat_vecs(n);
    for (int t = 0; t < taps; t++) {
        /* tap t reads source element (oh + dr, ow + dc) of a source plane with rows of OW, valid below
         * (rows, cols); its input position is (s * (oh + dr) + a, s * (ow + dc) + b) */
        const int eh = t / KW * g->dilate[1] - g->pad[1], ew = t % KW * g->dilate[2] - g->pad[2];
        const int dr = s2 ? floor_div2(eh) : eh, dc = s2 ? floor_div2(ew) : ew;
        const int ra = s2 ? eh - 2 * dr : 0, cb = s2 ? ew - 2 * dc : 0;
        off[t] = (2 * ra + cb) * dw_phase_pitch(OH, OW) + (long)dr * OW + dc;
        for (int v = 0; v < vecs; v++) {
            unsigned bits = 0;
            for (int l = 0; l < VL; l++) {
                const int q = v * VL + l, r = q / OW + dr, c = q % OW + dc;
                const int ih = s2 ? 2 * r + ra : r, iw = s2 ? 2 * c + cb : c;
                if (q < n && r >= 0 && r < OH && c >= 0 && c < OW && ih < H && iw < W)
                    bits |= 1u << l;
            }
            mask[v * taps + t] = v_mask_bits(bits);
        }
    }
    return vecs;
}

/* The four phases of an (H, W) plane, W <= VL, as dw_planes_flat reads them: ph + (2a + b) * pitch is
 * phase (a, b), (OH, OW), element (i, j) = x[2i + a][2j + b]. One vector per input row: its even columns to
 * lanes 0.., its odd ones to lanes VL/2.. (one permute), each half stored whole (VL/2 >= OW elements; rows
 * in increasing order, so the next row overwrites the extra ones, and the pitch leaves room after the last
 * row). Unmasked half stores instead of two masked ones: 512x14x14 s2 30.7 -> 25.4 us. Rows past the last
 * image row are not written (the masks never read them). */
static void dw_phases(const float *x, int H, int W, int OH, int OW, float *ph)
{
    const vm row = v_lanes(0, W);
    const long pitch = dw_phase_pitch(OH, OW);
    for (int ih = 0; ih < H; ih++) {
        const vf v = v_split_even_odd(v_load_m(x + (long)ih * W, row));
        float *dst = ph + (ih % 2) * 2 * pitch + (long)(ih / 2) * OW;   /* phase (ih % 2, 0), row ih / 2 */
        v_store_halves(dst, dst + pitch, v);
    }
}

/* TAPS: the kernel's taps, a compile-time constant for 3x3 (the tap loop unrolls), else 0: taps of the call.
 * G: vectors at a time, DW_FLAT_GROUP, or 1 or 2 when the plane has no more (a 4x4 plane: one vector) */
DW_INLINE void dw_planes_flat_k(const dw_call *a, long p0, long p1, const int TAPS, const int G)
{
    dw_plane pl = a->base, *p = &pl;
    const int taps = TAPS ? TAPS : a->g->k[1] * a->g->k[2], n = p->OH * p->OW;
    float phases[4 * (DW_FLAT_VECS * VL + VL / 2)];   /* 4 x (OH, OW) and slack: dw_phase_pitch */
    const long *off = a->flat_off;
    const vm *mask = a->flat_mask;
    for (long i = p0; i < p1; i++) {
        dw_plane_at(p, a, i);
        const float *src = p->x;   /* (OH, OW) the plane the offsets start from: the input or its phases */
        if (a->flat_s2) {
            dw_phases(p->x, p->H, p->W, p->OH, p->OW, phases);
            src = phases;
        }
        for (int v0 = 0; v0 < a->flat_vecs; v0 += G) {
            vf acc[DW_FLAT_GROUP];
            for (int v = 0; v < G; v++)
                acc[v] = v_zero();
#pragma GCC unroll 9
            for (int t = 0; t < taps; t++) {
                const vf wt = v_set1(p->w[t]);
                const float *xt = src + off[t] + v0 * VL;   /* may point before the source plane: masked */
                for (int v = 0; v < G; v++)
                    acc[v] = v_fma(wt, v_load_m(xt + v * VL, mask[(v0 + v) * taps + t]), acc[v]);
            }
            vm sm[DW_FLAT_GROUP];
            for (int v = 0; v < G; v++)
                sm[v] = v_lanes(0, n - (v0 + v) * VL);
            dw_affine(p, acc, G);
            if (p->res)
                for (int v = 0; v < G; v++)
                    acc[v] = v_add(acc[v], v_load_m(p->res + (v0 + v) * VL, sm[v]));
            dw_act(p, acc, G);
            for (int v = 0; v < G; v++)
                v_store_m(p->y + (v0 + v) * VL, acc[v], sm[v]);
        }
        if (a->act_after)
            activate(a->ep, p->y, (long)n);
    }
}

static void dw_planes_flat(const dw_call *a, long p0, long p1) { dw_planes_flat_k(a, p0, p1, 0, DW_FLAT_GROUP); }
static void dw_planes_flat_1(const dw_call *a, long p0, long p1) { dw_planes_flat_k(a, p0, p1, 0, 1); }
static void dw_planes_flat_3x3(const dw_call *a, long p0, long p1)
{
    dw_planes_flat_k(a, p0, p1, 9, DW_FLAT_GROUP);
}
static void dw_planes_flat_3x3_1(const dw_call *a, long p0, long p1) { dw_planes_flat_k(a, p0, p1, 9, 1); }
static void dw_planes_flat_3x3_2(const dw_call *a, long p0, long p1) { dw_planes_flat_k(a, p0, p1, 9, 2); }

/* Any other geometry with column stride 1 or 2 (other kernel sizes, dilation, unequal strides): one output
 * row and one masked vector at a time, the taps in loops. */
static void dw_planes_any(const dw_call *a, long p0, long p1)
{
    const mxcc_conv_geom *g = a->g;
    const int KH = g->k[1], KW = g->k[2], sh = g->stride[1], sw = g->stride[2];
    const int dh = g->dilate[1], dw = g->dilate[2];
    dw_plane pl = a->base, *p = &pl;
    const int W = p->W;
    for (long i = p0; i < p1; i++) {
        dw_plane_at(p, a, i);
        for (int oh = 0; oh < p->OH; oh++) {
            const int ih0 = oh * sh - p->ph;
            for (int ow = 0; ow < p->OW; ow += VL) {
                vf acc = v_zero();
                for (int kh = 0; kh < KH; kh++) {
                    const int ih = ih0 + kh * dh;
                    if (ih < 0 || ih >= p->H)
                        continue;
                    const float *xr = p->x + (long)ih * W;   /* (W,) */
                    for (int kw = 0; kw < KW; kw++) {
                        const int c = ow * sw - p->pw + kw * dw;   /* input column of lane 0 */
                        vf in = v_load_m(xr + c, v_lanes(-c, W - c));
                        if (sw == 2)
                            in = v_even(in, v_load_m(xr + c + VL, v_lanes(-c - VL, W - c - VL)));
                        acc = v_fma(v_set1(p->w[kh * KW + kw]), in, acc);
                    }
                }
                const long at = (long)oh * p->OW + ow;
                const vm sm = v_lanes(0, p->OW - ow);
                dw_affine(p, &acc, 1);
                if (p->res)
                    acc = v_add(acc, v_load_m(p->res + at, sm));
                dw_act(p, &acc, 1);
                v_store_m(p->y + at, acc, sm);
            }
        }
        if (a->act_after)
            activate(a->ep, p->y, (long)p->OH * p->OW);
    }
}
#define HAVE_DEPTHWISE_VEC 1
#endif

void mxcc_conv_depthwise_f32(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                             const mxcc_epilogue *ep, float *y, int parallel)
{
    const int C = g->channels, H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KH = g->k[1], KW = g->k[2];
    const long planes = (long)batch * C;
#ifdef HAVE_DEPTHWISE_VEC
    if (g->stride[2] <= 2) {
        const mxcc_act act = ep ? ep->act : MXCC_ACT_NONE;
        dw_call a = {.g = g, .x = x, .w = w, .y = y, .ep = ep,
                     .act_after = act != MXCC_ACT_NONE && act != MXCC_ACT_RELU && act != MXCC_ACT_LEAKY &&
                                  act != MXCC_ACT_CLIP,
                     .base = {.H = H, .W = W, .OH = OH, .OW = OW, .ph = g->pad[1], .pw = g->pad[2], .mul = 1.0f}};
        if (ep) {
            a.base.has_mul = ep->scale != NULL;
            a.base.has_add = ep->shift || ep->bias;
            a.base.act = act;
            a.base.alpha = ep->alpha, a.base.lo = ep->lo, a.base.hi = ep->hi;
        }
        /* the specialized kernels: square 3x3 / 5x5, equal strides 1 or 2, no dilation */
        const int sq = KH == KW && g->stride[1] == g->stride[2] && g->dilate[1] == 1 && g->dilate[2] == 1;
        const int s = g->stride[2];
        /* tall blocks unless they waste more rows past the output than blocks of 4 */
        const int tall = (OH + DW_R_TALL - 1) / DW_R_TALL * DW_R_TALL - OH <= (OH + 3) / 4 * 4 - OH;
        void (*planes_fn)(const dw_call *, long, long) =
            !sq ? dw_planes_any
            : KH == 3 ? (s == 1 ? (tall ? dw_planes_3x3s1_tall : dw_planes_3x3s1)
                                : dw_planes_3x3s2)
            : KH == 5 ? (s == 1 ? dw_planes_5x5s1 : dw_planes_5x5s2) : dw_planes_any;
        vm flat_mask[DW_FLAT_VECS * DW_FLAT_TAPS];
        long flat_off[DW_FLAT_TAPS];
        if (dw_flat_fits(g)) {
            a.flat_vecs = dw_flat_tables(g, flat_mask, flat_off);
            a.flat_mask = flat_mask, a.flat_off = flat_off;
            a.flat_s2 = s == 2;
            planes_fn = KH * KW != 9 ? (a.flat_vecs <= 2 ? dw_planes_flat_1 : dw_planes_flat)
                        : a.flat_vecs == 1 ? dw_planes_flat_3x3_1 : a.flat_vecs == 2 ? dw_planes_flat_3x3_2
                        : dw_planes_flat_3x3;
        }
        /* the planes split over the threads in equal ranges, as schedule(static) would */
#pragma omp parallel if (parallel)
        {
            const long nt = omp_get_num_threads(), t = omp_get_thread_num();
            planes_fn(&a, planes * t / nt, planes * (t + 1) / nt);
        }
        return;
    }
#endif
#pragma omp parallel for schedule(static) if (parallel)
    for (long p = 0; p < planes; p++) {
        const int c = (int)(p % C);
        const float *xp = x + p * H * W;           /* (H, W) plane (n, c) */
        const float *wc = w + (long)c * KH * KW;   /* (KH, KW) */
        float *yp = y + p * OH * OW;               /* (OH, OW) */
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
                y[(p * OH + oh) * OW + ow] = acc;
            }
        mxcc_conv_epilogue_f32(ep, y + p * OH * OW, 1, (long)OH * OW, c);
    }
}

/* ---- depthwise backward ------------------------------------------------------------------------------- */

void mxcc_conv_depthwise_backward_f32(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                                      const float *dy, float *dx, float *dw, int parallel)
{
    const int C = g->channels, H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KH = g->k[1], KW = g->k[2], sh = g->stride[1], sw = g->stride[2];
    const long planes = (long)batch * C;
    if (dx) {
        /* dx: each plane (n, c) gathers from its own dy plane; the taps scatter along valid ranges */
#pragma omp parallel for schedule(static) if (parallel)
        for (long p = 0; p < planes; p++) {
            const int c = (int)(p % C);
            const float *wc = w + (long)c * KH * KW;    /* (KH, KW) */
            const float *dyp = dy + p * OH * OW;        /* (OH, OW) */
            float *dxp = dx + p * H * W;                /* (H, W) */
            memset(dxp, 0, (size_t)H * W * sizeof(float));
            for (int oh = 0; oh < OH; oh++) {
                const float *restrict dyr = dyp + (long)oh * OW;   /* (OW,) */
                for (int kh = 0; kh < KH; kh++) {
                    const int ih = oh * sh - g->pad[1] + kh * g->dilate[1];
                    if (ih < 0 || ih >= H)
                        continue;
                    float *restrict dxr = dxp + (long)ih * W;       /* (W,) */
                    for (int kw = 0; kw < KW; kw++) {
                        const float wv = wc[kh * KW + kw];
                        const int off = kw * g->dilate[2] - g->pad[2];
                        int lo, hi;
                        valid_range(OW, W, sw, off, &lo, &hi);
                        for (int ow = lo; ow < hi; ow++)
                            dxr[(long)ow * sw + off] += wv * dyr[ow];
                    }
                }
            }
        }
    }
    /* dw: one channel per iteration, images in order; each output row's products summed in float, the
     * rows in double (a channel sums N*OH*OW products) */
#pragma omp parallel for schedule(static) if (parallel)
    for (int c = 0; c < C; c++) {
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                const int off = kw * g->dilate[2] - g->pad[2];
                int lo, hi;
                valid_range(OW, W, sw, off, &lo, &hi);
                double acc = 0.0;
                for (int n = 0; n < batch; n++) {
                    const long p = (long)n * C + c;
                    for (int oh = 0; oh < OH; oh++) {
                        const int ih = oh * sh - g->pad[1] + kh * g->dilate[1];
                        if (ih < 0 || ih >= H)
                            continue;
                        const float *restrict dyr = dy + (p * OH + oh) * OW;   /* (OW,) */
                        const float *restrict xr = x + (p * H + ih) * W;       /* (W,) */
                        float row = 0.0f;
                        for (int ow = lo; ow < hi; ow++)
                            row += dyr[ow] * xr[(long)ow * sw + off];
                        acc += row;
                    }
                }
                dw[((long)c * KH + kh) * KW + kw] = (float)acc;
            }
    }
}

void mxcc_conv_depthwise_backward_f32_ref(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                                          const float *dy, float *dx, float *dw, int parallel)
{
    (void)parallel;
    const int C = g->channels, H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KH = g->k[1], KW = g->k[2];
    if (dx)
        memset(dx, 0, (size_t)batch * C * H * W * sizeof(float));
    memset(dw, 0, (size_t)C * KH * KW * sizeof(float));
    for (int c = 0; c < C; c++)
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                double acc = 0.0;
                for (int n = 0; n < batch; n++) {
                    const long p = (long)n * C + c;
                    for (int oh = 0; oh < OH; oh++)
                        for (int ow = 0; ow < OW; ow++) {
                            const int ih = oh * g->stride[1] - g->pad[1] + kh * g->dilate[1];
                            const int iw = ow * g->stride[2] - g->pad[2] + kw * g->dilate[2];
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                continue;
                            const float d = dy[(p * OH + oh) * OW + ow];
                            acc += (double)d * x[(p * H + ih) * W + iw];
                            if (dx)
                                dx[(p * H + ih) * W + iw] += w[((long)c * KH + kh) * KW + kw] * d;
                        }
                }
                dw[((long)c * KH + kh) * KW + kw] = (float)acc;
            }
}
