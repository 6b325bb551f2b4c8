/* Depthwise convolution, small planes as flat ranges (vector builds; see depthwise_internal.h).
 *
 * Small planes, rows too narrow for the vectors (OW <= VL / 2: the row path would leave more than half the
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
 *     instead of 7 of 7 lanes): 35.3 -> 30.7 us, 1 thread.
 */
#include "depthwise_internal.h"

#ifdef MXCC_DEPTHWISE_SIMD

/* dw_store_halves: lanes [0, VL/2) to lo, [VL/2, VL) to hi; dw_split_even_odd: the even lanes of a to the low
 * half, the odd ones to the high half (one permute) */
#if defined(__AVX512F__)
static inline void dw_store_halves(float *lo, float *hi, mxcc_simd_f32 a)
{
    _mm256_storeu_ps(lo, _mm512_castps512_ps256(a));
    _mm256_storeu_ps(hi, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}
static inline mxcc_simd_f32 dw_split_even_odd(mxcc_simd_f32 a)
{
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15), a);
}
#else
static inline void dw_store_halves(float *lo, float *hi, mxcc_simd_f32 a)
{
    _mm_storeu_ps(lo, _mm256_castps256_ps128(a));
    _mm_storeu_ps(hi, _mm256_extractf128_ps(a, 1));
}
static inline mxcc_simd_f32 dw_split_even_odd(mxcc_simd_f32 a)
{
    return _mm256_permutevar8x32_ps(a, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
}
#endif

#define DW_FLAT_GROUP 4

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
static int dw_flat_tables(const mxcc_conv_geom *g, mxcc_simd_mask *mask, long *off)
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
            mask[v * taps + t] = mxcc_mask_bits(bits);
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
    const mxcc_simd_mask row = mxcc_mask_lanes(0, W);
    const long pitch = dw_phase_pitch(OH, OW);
    for (int ih = 0; ih < H; ih++) {
        const mxcc_simd_f32 v = dw_split_even_odd(mxcc_load_mask_f32(x + (long)ih * W, row));
        float *dst = ph + (ih % 2) * 2 * pitch + (long)(ih / 2) * OW;   /* phase (ih % 2, 0), row ih / 2 */
        dw_store_halves(dst, dst + pitch, v);
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
    const mxcc_simd_mask *mask = a->flat_mask;
    for (long i = p0; i < p1; i++) {
        dw_plane_at(p, a, i);
        const float *src = p->x;   /* (OH, OW) the plane the offsets start from: the input or its phases */
        if (a->flat_s2) {
            dw_phases(p->x, p->H, p->W, p->OH, p->OW, phases);
            src = phases;
        }
        for (int v0 = 0; v0 < a->flat_vecs; v0 += G) {
            mxcc_simd_f32 acc[DW_FLAT_GROUP];
            for (int v = 0; v < G; v++)
                acc[v] = mxcc_zero_f32();
#pragma GCC unroll 9
            for (int t = 0; t < taps; t++) {
                const mxcc_simd_f32 wt = mxcc_set1_f32(p->w[t]);
                const float *xt = src + off[t] + v0 * VL;   /* may point before the source plane: masked */
                for (int v = 0; v < G; v++)
                    acc[v] = mxcc_fmadd_f32(wt, mxcc_load_mask_f32(xt + v * VL, mask[(v0 + v) * taps + t]), acc[v]);
            }
            mxcc_simd_mask sm[DW_FLAT_GROUP];
            for (int v = 0; v < G; v++)
                sm[v] = mxcc_mask_lanes(0, n - (v0 + v) * VL);
            dw_affine(p, acc, G);
            if (p->res)
                for (int v = 0; v < G; v++)
                    acc[v] = mxcc_add_f32(acc[v], mxcc_load_mask_f32(p->res + (v0 + v) * VL, sm[v]));
            dw_act(p, acc, G);
            for (int v = 0; v < G; v++)
                mxcc_store_mask_f32(p->y + (v0 + v) * VL, acc[v], sm[v]);
        }
        dw_act_after(a, p->y, (long)n);
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

int mxcc_depthwise_flat_fits(const mxcc_conv_geom *g) { return dw_flat_fits(g); }

dw_planes_fn *mxcc_depthwise_flat_kernel(const mxcc_conv_geom *g, dw_call *a, mxcc_simd_mask *mask, long *off)
{
    if (!dw_flat_fits(g))
        return NULL;
    a->flat_vecs = dw_flat_tables(g, mask, off);
    a->flat_mask = mask, a->flat_off = off;
    a->flat_s2 = g->stride[2] == 2;
    return g->k[1] * g->k[2] != 9 ? (a->flat_vecs <= 2 ? dw_planes_flat_1 : dw_planes_flat)
           : a->flat_vecs == 1 ? dw_planes_flat_3x3_1 : a->flat_vecs == 2 ? dw_planes_flat_3x3_2
           : dw_planes_flat_3x3;
}

#endif /* MXCC_DEPTHWISE_SIMD */
