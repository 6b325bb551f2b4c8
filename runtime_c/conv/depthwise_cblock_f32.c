/* Depthwise convolution, small planes in channel blocks (AVX-512 builds; see depthwise_internal.h).
 *
 * A 3x3 kernel over small planes (MobileNet's 14x14 and 7x7) leaves the per-plane kernels most of their lanes
 * idle or spends them on masks and deinterleaving (512x14x14 stride 2: 31 us, 205 cycles a plane, 1 thread;
 * ORT's NCHWc kernel 11 us). Here 16 planes at a time are turned on their side: a 16x16 transpose per 16
 * pixels puts each pixel's 16 channels in one vector, in a zero-bordered scratch (the padding), so that an
 * output vector is 9 plain FMAs of whole vectors, for any stride; the outputs go back through the same
 * transpose. 16 x 16 transposes are 64 shuffles each, once per 16 input and 16 output pixels.
 *
 * Each output sums its taps in the row-major tap order from zero, as the flat and row kernels do, so the
 * result is the same bits whichever kernel runs a plane (out-of-image taps add a zero product there and are
 * zeros of the border here). Planes [p0, p1) in groups of 16; the last group of a range may be short (its
 * missing lanes load zeros and store nothing). A residual is not taken (dw_cblock_fits): the callers' small
 * depthwise layers have none, and the flat kernel handles it.
 */
#include "depthwise_internal.h"

#if defined(MXCC_DEPTHWISE_SIMD) && defined(__AVX512F__)

#define CB_MAX_IN 324    /* padded input pixels of a plane (18 x 18: 16 x 16 with a border of 1) */
#define CB_MAX_OUT 256   /* output pixels of a plane */

/* r[i] = row i of a 16 x 16 block -> r[j] = column j (64 shuffles) */
static inline void cb_transpose16(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4b + j], 128-bit lane L: rows 4b..4b+3 of column 4L + j */
    for (int b = 0; b < 4; b++) {
        const __m512d t0 = _mm512_castps_pd(t[4 * b]), t1 = _mm512_castps_pd(t[4 * b + 1]);
        const __m512d t2 = _mm512_castps_pd(t[4 * b + 2]), t3 = _mm512_castps_pd(t[4 * b + 3]);
        u[4 * b] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
        u[4 * b + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
        u[4 * b + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
        u[4 * b + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
    }
    for (int j = 0; j < 4; j++) {
        const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);
        const __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        const __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
        r[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(v0, v2, 0xdd);
        r[4 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xdd);
    }
}

/* the padded scratch of g's planes: Hp x Wp pixels, the rows and columns the taps of every output read */
static inline void cb_padded(const mxcc_conv_geom *g, int *hp, int *wp)
{
    *hp = (g->out[1] - 1) * g->stride[1] + 3;
    *wp = (g->out[2] - 1) * g->stride[2] + 3;
}

static void dw_planes_cblock(const dw_call *a, long p0, long p1);

dw_planes_fn *mxcc_depthwise_cblock_kernel(const mxcc_conv_geom *g, const mxcc_epilogue *ep, long planes)
{
    int hp, wp;
    cb_padded(g, &hp, &wp);
    const int fits = planes >= 16 && g->k[1] == 3 && g->k[2] == 3 && g->dilate[1] == 1 && g->dilate[2] == 1 &&
           g->stride[1] == g->stride[2] && g->stride[1] <= 2 && g->pad[1] <= 2 && g->pad[2] <= 2 &&
           g->in[1] <= 16 && g->in[2] <= 16 && hp * wp <= CB_MAX_IN && g->out[1] * g->out[2] <= CB_MAX_OUT &&
           !(ep && ep->residual);
    return fits ? dw_planes_cblock : NULL;
}

static void dw_planes_cblock(const dw_call *a, long p0, long p1)
{
    const mxcc_conv_geom *g = a->g;
    const int C = g->channels, H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2], S = g->stride[1];
    const int ph = g->pad[1], pw = g->pad[2], HW = H * W, OHW = OH * OW;
    const long ys = mxcc_conv_y_plane(g);   /* output planes apart */
    int hp, wp;
    cb_padded(g, &hp, &wp);
    const dw_plane *b = &a->base;
    const mxcc_epilogue *ep = a->ep;
    __m512 xin[CB_MAX_IN];    /* (hp, wp) pixels x 16 planes; the border stays zero */
    __m512 yout[CB_MAX_OUT];  /* (OH, OW) pixels x 16 planes */
    for (int q = 0; q < hp * wp; q++)
        xin[q] = _mm512_setzero_ps();
    int dst[256];   /* input pixel q's place in xin, or -1: a row or column no tap reads (H, W <= 16) */
    for (int q = 0; q < HW; q++) {
        const int h = q / W + ph, w = q % W + pw;
        dst[q] = h < hp && w < wp ? h * wp + w : -1;
    }
    for (long i = p0; i < p1; i += 16) {
        const int n = p1 - i < 16 ? (int)(p1 - i) : 16;   /* planes in this group */
        /* per lane (plane i + l, channel c_l): the taps, by the same transpose (rows of 9), and the epilogue's
         * constants, loaded whole when the group's channels follow each other */
        const int c0 = (int)(i % C), along = c0 + 16 <= C;
        __m512 wv[16];
        for (int l = 0; l < 16; l++)
            wv[l] = _mm512_maskz_loadu_ps(0x1ff, a->w + (long)((i + (l < n ? l : 0)) % C) * 9);
        cb_transpose16(wv);   /* wv[t]: tap t of the 16 planes */
        __m512 mulv = _mm512_set1_ps(1.0f), addv = _mm512_setzero_ps();
        if (ep && along) {
            if (ep->scale) mulv = _mm512_loadu_ps(ep->scale + c0);
            if (ep->shift) addv = _mm512_loadu_ps(ep->shift + c0);
            if (ep->bias) addv = _mm512_add_ps(addv, _mm512_loadu_ps(ep->bias + c0));
        } else if (ep) {
            float mul[16], add[16];
            for (int l = 0; l < 16; l++) {
                const int c = (int)((i + (l < n ? l : 0)) % C);
                mul[l] = ep->scale ? ep->scale[c] : 1.0f;
                add[l] = (ep->shift ? ep->shift[c] : 0.0f) + (ep->bias ? ep->bias[c] : 0.0f);
            }
            mulv = _mm512_loadu_ps(mul), addv = _mm512_loadu_ps(add);
        }
        /* the input planes on their side: 16 pixels (flat index q0..) of the 16 planes per transpose */
        for (int q0 = 0; q0 < HW; q0 += 16) {
            const __mmask16 m = (__mmask16)(HW - q0 >= 16 ? 0xffff : (1u << (HW - q0)) - 1);
            __m512 r[16];
            for (int l = 0; l < 16; l++)
                r[l] = l < n ? _mm512_maskz_loadu_ps(m, a->x + (i + l) * HW + q0) : _mm512_setzero_ps();
            cb_transpose16(r);
            const int k1 = HW - q0 < 16 ? HW - q0 : 16;
            for (int k = 0; k < k1; k++)
                if (dst[q0 + k] >= 0)
                    xin[dst[q0 + k]] = r[k];
        }
        /* each output: its 9 taps in order, from zero (the epilogue on the way back) */
        for (int oh = 0; oh < OH; oh++) {
            const __m512 *x0 = xin + oh * S * wp;
            for (int ow = 0; ow < OW; ow++) {
                const __m512 *xp = x0 + ow * S;
                __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 3
                for (int kh = 0; kh < 3; kh++)
#pragma GCC unroll 3
                    for (int kw = 0; kw < 3; kw++)
                        acc = _mm512_fmadd_ps(wv[kh * 3 + kw], xp[kh * wp + kw], acc);
                yout[oh * OW + ow] = acc;
            }
        }
        /* back on their feet, through the epilogue: 16 output pixels of the 16 planes per transpose */
        for (int q0 = 0; q0 < OHW; q0 += 16) {
            const int k1 = OHW - q0 < 16 ? OHW - q0 : 16;
            const __mmask16 m = (__mmask16)(k1 == 16 ? 0xffff : (1u << k1) - 1);
            __m512 r[16];
            for (int k = 0; k < 16; k++)
                r[k] = k < k1 ? yout[q0 + k] : _mm512_setzero_ps();
            if (b->has_mul) {
                for (int k = 0; k < 16; k++) r[k] = _mm512_fmadd_ps(r[k], mulv, addv);
            } else if (b->has_add) {
                for (int k = 0; k < 16; k++) r[k] = _mm512_add_ps(r[k], addv);
            }
            mxcc_act_n_f32((mxcc_act)b->act, b->alpha, b->lo, b->hi, r, 16);
            cb_transpose16(r);
            for (int l = 0; l < n; l++)
                _mm512_mask_storeu_ps(a->y + (i + l) * ys + q0, m, r[l]);
        }
        for (int l = 0; l < n; l++)
            dw_act_after(a, a->y + (i + l) * ys, OHW);
    }
}

#endif /* AVX-512 */
