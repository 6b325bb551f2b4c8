/* Convolution helpers: im2col / col2im around the runtime GEMM, the direct depthwise kernel, and the
 * per-channel epilogue. Contracts and the geometry convention are in mxcc_conv.h.
 *
 * The fast versions compute, for each kernel offset, the range of output columns whose input position
 * falls inside the image ([lo, hi) below), so the inner loops have no bounds tests and (stride 1)
 * vectorize or become memcpy. The `_ref` twins are the plain loops with a bounds test per element.
 */
#include <string.h>

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

/* A vector of VL output columns: v_load reads VL consecutive floats, v_load_s2 every other one of 2*VL
 * (stride 2: the even lanes of two loads). */
/* UNROLL vectors per step: independent FMA chains to cover the FMA latency (4 cycles, 2 ports), within the
 * register file (32 zmm, 16 ymm) next to the broadcast weight and the loads. */
#if defined(__AVX512F__)
#define VL 16
#define UNROLL 8
typedef __m512 vf;
static inline vf v_zero(void) { return _mm512_setzero_ps(); }
static inline vf v_set1(float a) { return _mm512_set1_ps(a); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void v_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf v_load_s2(const float *p)
{
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(_mm512_loadu_ps(p), even, _mm512_loadu_ps(p + 16));
}
#else
#define VL 8
#define UNROLL 4
typedef __m256 vf;
static inline vf v_zero(void) { return _mm256_setzero_ps(); }
static inline vf v_set1(float a) { return _mm256_set1_ps(a); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void v_store(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline vf v_load_s2(const float *p)
{
    /* per 128-bit lane: (p0 p2 p8 p10 | p4 p6 p12 p14), then the 64-bit pairs in order 0 2 1 3 */
    const __m256 t = _mm256_shuffle_ps(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8), _MM_SHUFFLE(2, 0, 2, 0));
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(t), _MM_SHUFFLE(3, 1, 2, 0)));
}
#endif

/* Output columns [ow, ow + U*VL) of row oh, taps kh in [kh0, kh1): U accumulators so U FMA chains run
 * side by side (one chain of KH*KW dependent FMAs would wait on the FMA latency). */
#define DEPTHWISE_CHUNK(U, LOAD)                                                                  \
    do {                                                                                          \
        vf acc[U];                                                                                \
        for (int u = 0; u < U; u++) acc[u] = v_zero();                                            \
        for (int kh = kh0; kh < kh1; kh++) {                                                      \
            const long row = (long)(ih0 + kh * dh) * W + (long)ow * sw - pw;   /* >= 0: ow >= a */  \
            for (int kw = 0; kw < KW; kw++) {                                                     \
                const vf wv = v_set1(wc[kh * KW + kw]);                                           \
                const float *xs = xp + row + kw * dw;                                             \
                for (int u = 0; u < U; u++) acc[u] = v_fma(wv, LOAD(xs + u * VL * sw), acc[u]);   \
            }                                                                                     \
        }                                                                                         \
        for (int u = 0; u < U; u++) v_store(yr + ow + u * VL, acc[u]);                            \
    } while (0)

/* Planes whose zero-padded copy fits FLAT_MAX floats, stride (s, s) with s <= 2, at most FLAT_TAPS taps.
 * The copy P (rows of pitch Wp = W + 2 pw) turns every tap into a flat offset: output (oh, ow) reads
 * P[s * (oh * Wp + ow) + kh * dh * Wp + kw * dw], so all of q = oh * Wp + ow runs in vectors with no bounds
 * test, and the columns ow >= OW of each row (Wp - OW of them per row: (s - 1) / s of the work for
 * stride s, 2 pw / Wp for stride 1) are computed and dropped. z holds q's results, then each row's OW
 * columns are copied out. Both buffers are on the stack: 2 x 16 KiB, in the 48 KiB L1 together (and a
 * small stack frame for OpenMP worker threads); 56x56 planes (stride 1 and 2) still fit. */
#define FLAT_MAX 4096
#define FLAT_TAPS 32

static int flat_fits(const mxcc_conv_geom *g)
{
    const int s = g->stride[2], Wp = g->in[2] + 2 * g->pad[2];
    const long nq = ((long)(g->out[1] - 1) * Wp + g->out[2] + VL - 1) / VL * VL;   /* q rounded up to VL */
    const long len = s * nq + (long)(g->k[1] - 1) * g->dilate[1] * Wp + (long)(g->k[2] - 1) * g->dilate[2] + s;
    return g->stride[1] == s && s <= 2 && (long)g->k[1] * g->k[2] <= FLAT_TAPS && nq <= FLAT_MAX && len <= FLAT_MAX;
}

static void depthwise_plane_flat(const mxcc_conv_geom *g, const float *xp, const float *wc, float *yp)
{
    const int H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2], KH = g->k[1], KW = g->k[2];
    const int s = g->stride[2], ph = g->pad[1], pw = g->pad[2], Wp = W + 2 * pw;
    const long nq = ((long)(OH - 1) * Wp + OW + VL - 1) / VL * VL;
    const long len = s * nq + (long)(KH - 1) * g->dilate[1] * Wp + (long)(KW - 1) * g->dilate[2] + s;
    float P[FLAT_MAX], z[FLAT_MAX];   /* (len,) padded plane; (nq,) outputs at pitch Wp */
    memset(P, 0, (size_t)len * sizeof(float));
    /* row copies as loops: a memcpy call per row of tens of floats costs more than the copy */
    for (int ih = 0; ih < H && (long)(ih + ph) * Wp + pw + W <= len; ih++) {   /* rows past len: never read */
        float *restrict dst = P + (long)(ih + ph) * Wp + pw;
        const float *restrict src = xp + (long)ih * W;
        for (int j = 0; j < W; j++) dst[j] = src[j];
    }
    long toff[FLAT_TAPS];
    const int taps = KH * KW;
    for (int t = 0; t < taps; t++)
        toff[t] = (long)(t / KW) * g->dilate[1] * Wp + (long)(t % KW) * g->dilate[2];
    long q = 0;
#define FLAT_CHUNK(U, LOAD)                                                                       \
    do {                                                                                          \
        vf acc[U];                                                                                \
        for (int u = 0; u < U; u++) acc[u] = v_zero();                                            \
        for (int t = 0; t < taps; t++) {                                                          \
            const vf wv = v_set1(wc[t]);                                                          \
            const float *ps = P + s * q + toff[t];                                                \
            for (int u = 0; u < U; u++) acc[u] = v_fma(wv, LOAD(ps + u * VL * s), acc[u]);        \
        }                                                                                         \
        for (int u = 0; u < U; u++) v_store(z + q + u * VL, acc[u]);                              \
    } while (0)
    if (s == 1) {
        for (; q + UNROLL * VL <= nq; q += UNROLL * VL) FLAT_CHUNK(UNROLL, v_load);
        for (; q < nq; q += VL) FLAT_CHUNK(1, v_load);
    } else {
        for (; q + UNROLL * VL <= nq; q += UNROLL * VL) FLAT_CHUNK(UNROLL, v_load_s2);
        for (; q < nq; q += VL) FLAT_CHUNK(1, v_load_s2);
    }
#undef FLAT_CHUNK
    for (int oh = 0; oh < OH; oh++) {
        float *restrict dst = yp + (long)oh * OW;
        const float *restrict src = z + (long)oh * Wp;
        for (int j = 0; j < OW; j++) dst[j] = src[j];
    }
}

/* Output column j of a row whose taps kh0..kh1-1 are inside the image (input row ih0 + kh * dilate). */
static inline float depthwise_point(const mxcc_conv_geom *g, const float *xp, const float *wc, int ih0, int kh0,
                                    int kh1, int j)
{
    const int W = g->in[2], KW = g->k[2];
    float s = 0.0f;
    for (int kh = kh0; kh < kh1; kh++) {
        const float *xr = xp + (long)(ih0 + kh * g->dilate[1]) * W;   /* (W,) */
        for (int kw = 0; kw < KW; kw++) {
            const int iw = j * g->stride[2] - g->pad[2] + kw * g->dilate[2];
            if (iw >= 0 && iw < W)
                s += wc[kh * KW + kw] * xr[iw];
        }
    }
    return s;
}

/* Stride 1 or 2 planes too large for depthwise_plane_flat. Columns [a, b) read only inside the input row
 * for every tap, including the stride-2 load's last, unused element; they run in vectors (the last one
 * shifted back to end at b, recomputing a few columns), the edge columns one by one. */
static void depthwise_plane_vec(const mxcc_conv_geom *g, const float *xp, const float *wc, float *yp)
{
    const int H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KH = g->k[1], KW = g->k[2], sh = g->stride[1], sw = g->stride[2];
    const int dh = g->dilate[1], dw = g->dilate[2], pw = g->pad[2];
    const int off_max = (KW - 1) * dw - pw;
    int a = (pw + sw - 1) / sw;                                      /* ow * sw - pw >= 0 */
    int b = W - off_max >= 0 ? (W - off_max) / sw : 0;               /* (ow + 1) * sw - 1 + off_max < W */
    if (b > OW) b = OW;
    if (a > b) a = b;
    for (int oh = 0; oh < OH; oh++) {
        float *yr = yp + (long)oh * OW;   /* (OW,) */
        const int ih0 = oh * sh - g->pad[1];
        int kh0 = 0, kh1 = KH;            /* the taps whose input row ih0 + kh * dh is inside the image */
        while (kh0 < KH && ih0 + kh0 * dh < 0) kh0++;
        while (kh1 > kh0 && ih0 + (kh1 - 1) * dh >= H) kh1--;
        int ow = a;
        if (sw == 1) {
            for (; ow + 4 * VL <= b; ow += 4 * VL) DEPTHWISE_CHUNK(4, v_load);
            for (; ow + VL <= b; ow += VL) DEPTHWISE_CHUNK(1, v_load);
            if (ow < b && b - a >= VL) { ow = b - VL; DEPTHWISE_CHUNK(1, v_load); ow = b; }   /* overlaps: stores only */
        } else {
            for (; ow + 4 * VL <= b; ow += 4 * VL) DEPTHWISE_CHUNK(4, v_load_s2);
            for (; ow + VL <= b; ow += VL) DEPTHWISE_CHUNK(1, v_load_s2);
            if (ow < b && b - a >= VL) { ow = b - VL; DEPTHWISE_CHUNK(1, v_load_s2); ow = b; }
        }
        /* the rest: [0, a) and [ow, OW), with a bounds test per tap */
        for (int j = 0; j < a; j++)
            yr[j] = depthwise_point(g, xp, wc, ih0, kh0, kh1, j);
        for (int j = ow; j < OW; j++)
            yr[j] = depthwise_point(g, xp, wc, ih0, kh0, kh1, j);
    }
}
#undef DEPTHWISE_CHUNK
#define HAVE_DEPTHWISE_VEC 1
#endif

void mxcc_conv_depthwise_f32(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                             const mxcc_epilogue *ep, float *y, int parallel)
{
    const int C = g->channels, H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2];
    const int KH = g->k[1], KW = g->k[2];
    const long planes = (long)batch * C;
#ifdef HAVE_DEPTHWISE_VEC
    const int flat = flat_fits(g);
#endif
#pragma omp parallel for schedule(static) if (parallel)
    for (long p = 0; p < planes; p++) {
        const int c = (int)(p % C);
        const float *xp = x + p * H * W;           /* (H, W) plane (n, c) */
        const float *wc = w + (long)c * KH * KW;   /* (KH, KW) */
        float *yp = y + p * OH * OW;               /* (OH, OW) */
#ifdef HAVE_DEPTHWISE_VEC
        if (flat)
            depthwise_plane_flat(g, xp, wc, yp);
        else if (g->stride[2] <= 2)
            depthwise_plane_vec(g, xp, wc, yp);
        else
#endif
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
