/* MXNet's recurrent layers, forward and backward through time, one layer and one direction per call: the
 * contract is mxcc_rnn.h. Per step: a GEMM (runtime_c/gemm/) and one fused pass over its result, the gate
 * nonlinearities and the state update of `*_cells`, split over threads by (batch row, block of CELL_BLOCK
 * columns). A block's arithmetic does not depend on how blocks are shared out, so the bits do not depend on
 * the thread count. The gate math is vmath.h's (vectorized sigmoid/tanh).
 */
#include <string.h>

#include "mxcc_rnn.h"
#include "../vmath.h"
#include "../parallel.h"

typedef enum rnn_kind { RNN_LSTM, RNN_GRU, RNN_TANH, RNN_RELU } rnn_kind;

static const int GATES[] = {4, 3, 1, 1};
/* One cell update in flops for the thread-count rule (a sigmoid or tanh counts about 20) */
static const double CELL_FLOPS[] = {120.0, 90.0, 25.0, 2.0};

#define CELL_BLOCK 128   /* columns per unit of work: 8 AVX-512 vectors, one cache line per gate per row */

/* ---- forward ---------------------------------------------------------------------------------------------- */

/* One step t of one layer: the pointers of its rows */
typedef struct step {
    const mxcc_rnn_layer *l;
    float *gx;              /* (N, G*H) x_t . wx^T + bx, overwritten by the activated gates */
    const float *gh;        /* (N, G*H) h_{t-1} . wh^T + bh */
    const float *hprev;     /* (N, ldh) h_{t-1}; NULL: zeros */
    int ldh;
    const float *cprev;     /* LSTM (N, H) c_{t-1}; NULL: zeros. May be c itself (inference: updated in place) */
    float *c;               /* LSTM (N, H) c_t */
    float *mnh;             /* GRU (N, H) wh_n . h_{t-1} + bh_n kept for the backward; NULL: not kept */
    float *y;               /* (N, ldy) h_t, this direction's columns */
} step;

static void lstm_cells(const step *s, int n, int k0, int k1)
{
    const int H = s->l->H;
    float *g = s->gx + (long)n * 4 * H;                   /* i f g o, (4, H) */
    const float *q = s->gh + (long)n * 4 * H;
    const float *cp = s->cprev ? s->cprev + (long)n * H : NULL;
    float *c = s->c + (long)n * H, *h = s->y + (long)n * s->l->ldy;
    for (int k = k0; k < k1; k += RV) {
        const int m = k1 - k;
        const rv i = rv_sigmoid(mxcc_add_f32(rv_load(g + k, m), rv_load(q + k, m)));
        const rv f = rv_sigmoid(mxcc_add_f32(rv_load(g + H + k, m), rv_load(q + H + k, m)));
        const rv gg = rv_tanh(mxcc_add_f32(rv_load(g + 2 * H + k, m), rv_load(q + 2 * H + k, m)));
        const rv o = rv_sigmoid(mxcc_add_f32(rv_load(g + 3 * H + k, m), rv_load(q + 3 * H + k, m)));
        const rv ct = mxcc_fmadd_f32(f, cp ? rv_load(cp + k, m) : mxcc_set1_f32(0.0f), mxcc_mul_f32(i, gg));
        rv_store(c + k, ct, m);
        rv_store(h + k, mxcc_mul_f32(o, rv_tanh(ct)), m);
        rv_store(g + k, i, m);
        rv_store(g + H + k, f, m);
        rv_store(g + 2 * H + k, gg, m);
        rv_store(g + 3 * H + k, o, m);
    }
}

static void gru_cells(const step *s, int n, int k0, int k1)
{
    const int H = s->l->H;
    float *g = s->gx + (long)n * 3 * H;                   /* r z n, (3, H) */
    const float *q = s->gh + (long)n * 3 * H;
    const float *hp = s->hprev ? s->hprev + (long)n * s->ldh : NULL;
    float *h = s->y + (long)n * s->l->ldy;
    for (int k = k0; k < k1; k += RV) {
        const int m = k1 - k;
        const rv r = rv_sigmoid(mxcc_add_f32(rv_load(g + k, m), rv_load(q + k, m)));
        const rv z = rv_sigmoid(mxcc_add_f32(rv_load(g + H + k, m), rv_load(q + H + k, m)));
        const rv mn = rv_load(q + 2 * H + k, m);
        const rv nn = rv_tanh(mxcc_fmadd_f32(r, mn, rv_load(g + 2 * H + k, m)));
        const rv hprev = hp ? rv_load(hp + k, m) : mxcc_set1_f32(0.0f);
        rv_store(h + k, mxcc_fmadd_f32(z, hprev, mxcc_mul_f32(mxcc_sub_f32(mxcc_set1_f32(1.0f), z), nn)), m);
        rv_store(g + k, r, m);
        rv_store(g + H + k, z, m);
        rv_store(g + 2 * H + k, nn, m);
        if (s->mnh)
            rv_store(s->mnh + (long)n * H + k, mn, m);
    }
}

static void vanilla_cells(const step *s, int n, int k0, int k1, int relu)
{
    const int H = s->l->H;
    float *g = s->gx + (long)n * H;
    const float *q = s->gh + (long)n * H;
    float *h = s->y + (long)n * s->l->ldy;
    for (int k = k0; k < k1; k += RV) {
        const int m = k1 - k;
        const rv a = mxcc_add_f32(rv_load(g + k, m), rv_load(q + k, m));
        const rv v = relu ? rv_relu(a) : rv_tanh(a);
        rv_store(h + k, v, m);
        rv_store(g + k, v, m);
    }
}

/* The cells of one step, (batch row, block of CELL_BLOCK columns) at a time, split over threads: `cells(s, kind,
 * n, k0, k1)` is the forward's or the backward's dispatch on the kind. */
typedef void cells_fn(const void *s, rnn_kind kind, int n, int k0, int k1);
typedef struct cells_job {
    cells_fn *cells;
    const void *s;
    rnn_kind kind;
    int H, blocks_per_row, parts;
    long blocks;
} cells_job;

/* part `part` of the blocks: a contiguous range (a static schedule) */
static void cells_part(void *arg, long part, int worker)
{
    const cells_job *j = arg;
    (void)worker;
    const long b0 = mxcc_split_at(j->blocks, j->parts, (int)part), b1 = mxcc_split_at(j->blocks, j->parts, (int)part + 1);
    for (long b = b0; b < b1; b++) {
        const int n = (int)(b / j->blocks_per_row), k0 = (int)(b % j->blocks_per_row) * CELL_BLOCK;
        j->cells(j->s, j->kind, n, k0, k0 + CELL_BLOCK < j->H ? k0 + CELL_BLOCK : j->H);
    }
}

/* One job per step (mxcc_parallel_chunks: mxcc's pool, or an OpenMP region where OpenMP is the engine) */
static void for_cell_blocks(int N, int H, rnn_kind kind, cells_fn *cells, const void *s)
{
    const int blocks_per_row = (H + CELL_BLOCK - 1) / CELL_BLOCK;
    const long blocks = (long)N * blocks_per_row;
    int nt = mxcc_threads_for_call(1, CELL_FLOPS[kind] * N * H);
    if (nt > blocks) nt = (int)blocks;
    cells_job job = {cells, s, kind, H, blocks_per_row, nt, blocks};
    if (nt <= 1) {
        cells_part(&job, 0, 0);
        return;
    }
    mxcc_parallel_chunks(nt, nt, cells_part, &job);
}

static void forward_cells(const void *p, rnn_kind kind, int n, int k0, int k1)
{
    const step *s = p;
    switch (kind) {
    case RNN_LSTM: lstm_cells(s, n, k0, k1); break;
    case RNN_GRU: gru_cells(s, n, k0, k1); break;
    default: vanilla_cells(s, n, k0, k1, kind == RNN_RELU); break;
    }
}

static void run_cells(const step *s, rnn_kind kind)
{
    for_cell_blocks(s->l->N, s->l->H, kind, forward_cells, s);
}

/* gh (N, G*H) = h (N, H; ldh) . wh^T + bh, by the GEMM mxcc/ops/rnn.py chose */
static void step_gemm(mxcc_gemm_ws *ws, const mxcc_rnn_layer *l, int GH, const float *panels, const float *h,
                      int ldh, float *gh)
{
    const mxcc_epilogue ep = {.bias = l->bh};
    switch (l->step) {
    case MXCC_RNN_STEP_PACKED_ROW:
        mxcc_gemm_f32_small_m_packed_b(l->N, GH, l->H, h, ldh, panels, gh, GH, &ep, 1);
        break;
    case MXCC_RNN_STEP_PACKED:
        mxcc_gemm_f32_packed_b(ws, MXCC_NO_TRANS, l->N, GH, l->H, h, ldh, panels, 0.0f, gh, GH, &ep);
        break;
    default:
        mxcc_gemm_f32(ws, MXCC_NO_TRANS, MXCC_TRANS, l->N, GH, l->H, h, ldh, l->wh, l->H, 0.0f, gh, GH, &ep);
    }
}

static void forward(mxcc_gemm_ws *ws, const mxcc_rnn_layer *l, rnn_kind kind)
{
    const int T = l->T, N = l->N, H = l->H, GH = GATES[kind] * H;
    const long ystep = (long)N * l->ldy;
    /* gates (T*N, G*H) = x (T*N, I) . wx^T + bx: every step's input projection in one GEMM */
    const mxcc_epilogue bx = {.bias = l->bx};
    if (l->wx_packed)
        mxcc_gemm_f32_packed_b(ws, MXCC_NO_TRANS, T * N, GH, l->I, l->x, l->I, l->wx_packed, 0.0f, l->gates, GH, &bx);
    else
        mxcc_gemm_f32(ws, MXCC_NO_TRANS, MXCC_TRANS, T * N, GH, l->I, l->x, l->I, l->wx, l->I, 0.0f, l->gates, GH, &bx);
    const float *panels = l->wh_packed;
    if (!panels && l->step != MXCC_RNN_STEP_GEMM) {     /* once per call, not per step */
        mxcc_gemm_pack_b_f32(MXCC_TRANS, H, GH, l->wh, H, l->wh_pack);
        panels = l->wh_pack;
    }
    for (int s = 0; s < T; s++) {
        const int t = l->reverse ? T - 1 - s : s, tp = l->reverse ? t + 1 : t - 1;
        step st = {.l = l, .gx = l->gates + (long)t * N * GH, .gh = l->gh, .y = l->y + t * ystep,
                   .hprev = s ? l->y + tp * ystep : l->h0, .ldh = s ? l->ldy : H};
        if (kind == RNN_LSTM) {
            st.c = l->cell + t * l->cell_step;
            st.cprev = s ? l->cell + tp * l->cell_step : l->c0;
        } else if (kind == RNN_GRU && l->cell) {
            st.mnh = l->cell + t * l->cell_step;
        }
        if (st.hprev) {
            step_gemm(ws, l, GH, panels, st.hprev, st.ldh, l->gh);
        } else {                                       /* zero state: h . wh^T = 0 */
            for (int n = 0; n < N; n++)
                memcpy(l->gh + (long)n * GH, l->bh, (size_t)GH * sizeof(float));
        }
        run_cells(&st, kind);
    }
    const int last = l->reverse ? 0 : T - 1;
    if (l->hy)
        for (int n = 0; n < N; n++)
            memcpy(l->hy + (long)n * H, l->y + last * ystep + (long)n * l->ldy, (size_t)H * sizeof(float));
    if (l->cy)
        memcpy(l->cy, l->cell + last * l->cell_step, (size_t)N * H * sizeof(float));
}

void mxcc_rnn_lstm_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer *l) { forward(ws, l, RNN_LSTM); }
void mxcc_rnn_gru_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer *l) { forward(ws, l, RNN_GRU); }
void mxcc_rnn_tanh_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer *l) { forward(ws, l, RNN_TANH); }
void mxcc_rnn_relu_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer *l) { forward(ws, l, RNN_RELU); }

/* ---- backward through time -------------------------------------------------------------------------------- */

/* One step t, walked backward: the pointers of its rows */
typedef struct bstep {
    const mxcc_rnn_layer_grad *l;
    const float *g;         /* (N, G*H) activated gates of step t */
    const float *cell;      /* LSTM (N, H) c_t; GRU wh_n . h_{t-1} + bh_n */
    const float *cprev;     /* LSTM (N, H) c_{t-1}; NULL: zeros */
    const float *hprev;     /* GRU (N, ldh) h_{t-1}; NULL: zeros */
    int ldh;
    const float *y;         /* (N, ldy) h_t */
    const float *dy;        /* (N, ldy) gradient of h_t from above */
    float *dg;              /* (N, G*H) gradient of step t's x . wx^T + bx */
    float *dgh;             /* GRU (N, G*H) gradient of its h . wh^T + bh */
} bstep;

static void lstm_back_cells(const bstep *s, int n, int k0, int k1)
{
    const int H = s->l->H;
    const float *g = s->g + (long)n * 4 * H, *c = s->cell + (long)n * H;
    const float *cp = s->cprev ? s->cprev + (long)n * H : NULL, *dy = s->dy + (long)n * s->l->ldy;
    float *dg = s->dg + (long)n * 4 * H, *dh = s->l->dh + (long)n * H, *dc = s->l->dc + (long)n * H;
    const rv one = mxcc_set1_f32(1.0f);
    for (int k = k0; k < k1; k += RV) {
        const int m = k1 - k;
        const rv i = rv_load(g + k, m), f = rv_load(g + H + k, m);
        const rv gg = rv_load(g + 2 * H + k, m), o = rv_load(g + 3 * H + k, m);
        const rv tc = rv_tanh(rv_load(c + k, m));
        const rv dht = mxcc_add_f32(rv_load(dh + k, m), rv_load(dy + k, m));
        const rv dct = mxcc_fmadd_f32(mxcc_mul_f32(dht, o), mxcc_sub_f32(one, mxcc_mul_f32(tc, tc)),
                                      rv_load(dc + k, m));
        const rv cprev = cp ? rv_load(cp + k, m) : mxcc_set1_f32(0.0f);
        rv_store(dg + k, mxcc_mul_f32(mxcc_mul_f32(dct, gg), mxcc_mul_f32(i, mxcc_sub_f32(one, i))), m);
        rv_store(dg + H + k, mxcc_mul_f32(mxcc_mul_f32(dct, cprev), mxcc_mul_f32(f, mxcc_sub_f32(one, f))), m);
        rv_store(dg + 2 * H + k, mxcc_mul_f32(mxcc_mul_f32(dct, i), mxcc_sub_f32(one, mxcc_mul_f32(gg, gg))), m);
        rv_store(dg + 3 * H + k, mxcc_mul_f32(mxcc_mul_f32(dht, tc), mxcc_mul_f32(o, mxcc_sub_f32(one, o))), m);
        rv_store(dc + k, mxcc_mul_f32(dct, f), m);
    }
}

static void gru_back_cells(const bstep *s, int n, int k0, int k1)
{
    const int H = s->l->H;
    const float *g = s->g + (long)n * 3 * H, *mnh = s->cell + (long)n * H;
    const float *hp = s->hprev ? s->hprev + (long)n * s->ldh : NULL, *dy = s->dy + (long)n * s->l->ldy;
    float *dg = s->dg + (long)n * 3 * H, *dgh = s->dgh + (long)n * 3 * H, *dh = s->l->dh + (long)n * H;
    const rv one = mxcc_set1_f32(1.0f);
    for (int k = k0; k < k1; k += RV) {
        const int m = k1 - k;
        const rv r = rv_load(g + k, m), z = rv_load(g + H + k, m), nn = rv_load(g + 2 * H + k, m);
        const rv hprev = hp ? rv_load(hp + k, m) : mxcc_set1_f32(0.0f);
        const rv dht = mxcc_add_f32(rv_load(dh + k, m), rv_load(dy + k, m));
        /* h = (1 - z) n + z h_prev; n = tanh(a_n), a_n = x_n + r * mnh */
        const rv dan = mxcc_mul_f32(mxcc_mul_f32(dht, mxcc_sub_f32(one, z)), mxcc_sub_f32(one, mxcc_mul_f32(nn, nn)));
        const rv dar = mxcc_mul_f32(mxcc_mul_f32(dan, rv_load(mnh + k, m)), mxcc_mul_f32(r, mxcc_sub_f32(one, r)));
        const rv daz = mxcc_mul_f32(mxcc_mul_f32(dht, mxcc_sub_f32(hprev, nn)), mxcc_mul_f32(z, mxcc_sub_f32(one, z)));
        rv_store(dg + k, dar, m);
        rv_store(dg + H + k, daz, m);
        rv_store(dg + 2 * H + k, dan, m);
        rv_store(dgh + k, dar, m);
        rv_store(dgh + H + k, daz, m);
        rv_store(dgh + 2 * H + k, mxcc_mul_f32(dan, r), m);
        rv_store(dh + k, mxcc_mul_f32(dht, z), m);          /* the direct path; the step GEMM adds dgh . wh */
    }
}

static void vanilla_back_cells(const bstep *s, int n, int k0, int k1, int relu)
{
    const int H = s->l->H;
    const float *y = s->y + (long)n * s->l->ldy, *dy = s->dy + (long)n * s->l->ldy;
    float *dg = s->dg + (long)n * H, *dh = s->l->dh + (long)n * H;
    for (int k = k0; k < k1; k += RV) {
        const int m = k1 - k;
        const rv h = rv_load(y + k, m), dht = mxcc_add_f32(rv_load(dh + k, m), rv_load(dy + k, m));
        /* from the output: tanh 1 - h^2; relu h > 0 (mshadow_op::relu_grad) */
        const rv tanh_grad = mxcc_mul_f32(dht, mxcc_sub_f32(mxcc_set1_f32(1.0f), mxcc_mul_f32(h, h)));
        rv_store(dg + k, relu ? rv_where_pos(h, dht) : tanh_grad, m);
    }
}

static void backward_cells(const void *p, rnn_kind kind, int n, int k0, int k1)
{
    const bstep *s = p;
    switch (kind) {
    case RNN_LSTM: lstm_back_cells(s, n, k0, k1); break;
    case RNN_GRU: gru_back_cells(s, n, k0, k1); break;
    default: vanilla_back_cells(s, n, k0, k1, kind == RNN_RELU); break;
    }
}

static void run_back_cells(const bstep *s, rnn_kind kind)
{
    for_cell_blocks(s->l->N, s->l->H, kind, backward_cells, s);
}

/* out[j] = sum of a[r][j] over rows r, in row order */
static void column_sums(const float *a, long rows, int cols, float *out)
{
    memset(out, 0, (size_t)cols * sizeof(float));
    for (long r = 0; r < rows; r++) {
        const float *row = a + r * cols;
        #pragma omp simd
        for (int j = 0; j < cols; j++)
            out[j] += row[j];
    }
}

static void backward(mxcc_gemm_ws *ws, const mxcc_rnn_layer_grad *l, rnn_kind kind)
{
    const int T = l->T, N = l->N, I = l->I, H = l->H, GH = GATES[kind] * H;
    const long ystep = (long)N * l->ldy, rows = (long)T * N;
    float *dgh = kind == RNN_GRU ? l->dgh : l->dgates;    /* gradient of h . wh^T + bh: the same but for GRU */
    mxcc_gemm_pack_b_f32(MXCC_NO_TRANS, GH, H, l->wh, H, l->wh_pack);       /* wh (G*H, H) for dh = dgh . wh */
    if (l->dhy)
        memcpy(l->dh, l->dhy, (size_t)N * H * sizeof(float));
    else
        memset(l->dh, 0, (size_t)N * H * sizeof(float));
    if (kind == RNN_LSTM) {
        if (l->dcy)
            memcpy(l->dc, l->dcy, (size_t)N * H * sizeof(float));
        else
            memset(l->dc, 0, (size_t)N * H * sizeof(float));
    }
    for (int s = T - 1; s >= 0; s--) {
        const int t = l->reverse ? T - 1 - s : s, tp = l->reverse ? t + 1 : t - 1;
        bstep st = {.l = l, .g = l->gates + (long)t * N * GH, .y = l->y + t * ystep, .dy = l->dy + t * ystep,
                    .dg = l->dgates + (long)t * N * GH, .dgh = dgh + (long)t * N * GH,
                    .hprev = s ? l->y + tp * ystep : l->h0, .ldh = s ? l->ldy : H};
        if (kind == RNN_LSTM) {
            st.cell = l->cell + (long)t * N * H;
            st.cprev = s ? l->cell + (long)tp * N * H : l->c0;
        } else if (kind == RNN_GRU) {
            st.cell = l->cell + (long)t * N * H;
        }
        run_back_cells(&st, kind);
        /* dh (N, H) = dgh_t (N, G*H) . wh (G*H, H); GRU adds it to the direct path z * dh */
        if (s > 0 || l->dhx)
            mxcc_gemm_f32_packed_b(ws, MXCC_NO_TRANS, N, H, GH, st.dgh, GH, l->wh_pack, kind == RNN_GRU ? 1.0f : 0.0f,
                                   l->dh, H, NULL);
    }
    if (l->dhx)
        memcpy(l->dhx, l->dh, (size_t)N * H * sizeof(float));
    if (l->dcx)
        memcpy(l->dcx, l->dc, (size_t)N * H * sizeof(float));
    /* dwx (G*H, I) = dgates^T (G*H, T*N) . x (T*N, I): all steps in one GEMM */
    if (l->dwx)
        mxcc_gemm_f32(ws, MXCC_TRANS, MXCC_NO_TRANS, GH, I, (int)rows, l->dgates, GH, l->x, I, 0.0f, l->dwx, I, NULL);
    /* dwh (G*H, H) = sum over t of dgh_t^T . h_{t-1}: the steps whose h_{t-1} is a row of y in one GEMM, then h0 */
    if (l->dwh) {
        float beta = 0.0f;
        if (T > 1) {
            const float *a = l->reverse ? dgh : dgh + (long)N * GH, *b = l->reverse ? l->y + ystep : l->y;
            mxcc_gemm_f32(ws, MXCC_TRANS, MXCC_NO_TRANS, GH, H, (T - 1) * N, a, GH, b, l->ldy, 0.0f, l->dwh, H, NULL);
            beta = 1.0f;
        }
        if (l->h0)
            mxcc_gemm_f32(ws, MXCC_TRANS, MXCC_NO_TRANS, GH, H, N, dgh + (long)(l->reverse ? T - 1 : 0) * N * GH, GH,
                          l->h0, H, beta, l->dwh, H, NULL);
        else if (T == 1)
            memset(l->dwh, 0, (size_t)GH * H * sizeof(float));
    }
    if (l->dbx)
        column_sums(l->dgates, rows, GH, l->dbx);
    if (l->dbh)
        column_sums(dgh, rows, GH, l->dbh);
    /* dx (T*N, I) (+)= dgates (T*N, G*H) . wx (G*H, I) */
    if (l->dx)
        mxcc_gemm_f32(ws, MXCC_NO_TRANS, MXCC_NO_TRANS, (int)rows, I, GH, l->dgates, GH, l->wx, I,
                      l->dx_accumulate ? 1.0f : 0.0f, l->dx, I, NULL);
}

void mxcc_rnn_lstm_backward_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer_grad *l) { backward(ws, l, RNN_LSTM); }
void mxcc_rnn_gru_backward_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer_grad *l) { backward(ws, l, RNN_GRU); }
void mxcc_rnn_tanh_backward_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer_grad *l) { backward(ws, l, RNN_TANH); }
void mxcc_rnn_relu_backward_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer_grad *l) { backward(ws, l, RNN_RELU); }

/* ---- the gate functions, for tests ------------------------------------------------------------------------ */
void mxcc_rnn_act_f32(int which, const float *x, float *y, long n)
{
    for (long i = 0; i < n; i += RV) {
        const int m = n - i < RV ? (int)(n - i) : RV;
        const rv v = rv_load(x + i, m);
        rv_store(y + i, which == 0 ? rv_sigmoid(v) : which == 1 ? rv_tanh(v) : rv_exp(v), m);
    }
}
