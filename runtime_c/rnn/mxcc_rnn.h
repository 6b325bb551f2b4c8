/* mxcc recurrent layers: MXNet's RNN operator (LSTM, GRU, vanilla relu/tanh), one layer and one direction per
 * call, forward and backward through time. Generated code calls these once per layer and direction with
 * constant sizes (templates/kernels/rnn.c.j2, rnn_backward.c.j2); mxcc/ops/rnn.py decides every size, offset
 * and which GEMM a step uses.
 *
 * Layout (MXNet's, src/operator/rnn_impl.h): sequences are (T, N, features) row-major, "TNC". The G gates of
 * a layer are stacked in its weights, G*H rows: LSTM i, f, g, o (G = 4), GRU r, z, n (G = 3), vanilla one.
 *   LSTM   c' = f * c + i * g,  h' = o * tanh(c')          i, f, o = sigmoid(.), g = tanh(.)
 *   GRU    r, z = sigmoid(.), n = tanh(Wx_n + bx_n + r * (Wh_n h + bh_n)),  h' = (1 - z) * n + z * h
 *   tanh   h' = tanh(.),  relu  h' = max(., 0)
 * where a gate's (.) is its row of x . wx^T + bx + h . wh^T + bh.
 *
 * Forward, per layer and direction: ONE GEMM for the input projection of all T steps (T*N x G*H, bx in its
 * epilogue), then per step one GEMM h . wh^T (+ bh in its epilogue) and the gate nonlinearities and state
 * update fused in one pass over its result, split over threads by (row, block of columns). The second
 * direction (reverse = 1) walks t from T - 1 down to 0 and writes its H columns of the same y rows (ldy = 2H).
 * Nothing here depends on the thread count: same bits on any number of threads.
 *
 * Backward (BPTT), per layer and direction, given the forward's saved gates: steps walked backward, one GEMM per
 * step for the recurrent gradient dh = dgates_t . wh; then the weight gradients as one GEMM each over all
 * steps (dwx = dgates^T . x, dwh = dgates_h^T . h_prev), the bias gradients as column sums, and
 * dx = dgates . wx (added to dx for the second direction).
 */
#ifndef MXCC_RNN_H
#define MXCC_RNN_H

#include "../gemm/mxcc_gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the GEMM of one step, h (N, H) . wh^T, runs (mxcc/ops/rnn.py step_gemm chooses) */
typedef enum mxcc_rnn_step_gemm {
    MXCC_RNN_STEP_GEMM = 0,     /* mxcc_gemm_f32 on wh as it is (its small-M path reads wh's rows) */
    MXCC_RNN_STEP_PACKED,       /* mxcc_gemm_f32_packed_b on wh's GEMM B panels */
    MXCC_RNN_STEP_PACKED_ROW,   /* mxcc_gemm_f32_small_m_packed_b (batch 1) on wh's panels */
} mxcc_rnn_step_gemm;

/* One layer, one direction, forward. G = 4 (LSTM), 3 (GRU), 1 (vanilla). */
typedef struct mxcc_rnn_layer {
    int T, N, I, H;             /* steps, batch, input features, hidden units */
    int ldy;                    /* floats between rows of y: D * H */
    int reverse;                /* the second direction: t from T - 1 down to 0 */
    mxcc_rnn_step_gemm step;
    const float *x;             /* (T, N, I) */
    const float *wx;            /* (G*H, I) i2h weight */
    const float *wh;            /* (G*H, H) h2h weight */
    const float *bx, *bh;       /* (G*H,) i2h and h2h biases */
    const float *h0;            /* (N, H) begin state; NULL: zeros */
    const float *c0;            /* (N, H) LSTM begin cell state; NULL: zeros */
    float *y;                   /* (T, N, ldy): this direction's H columns of the layer's output */
    float *hy, *cy;             /* (N, H) final state and cell state; NULL: not wanted */
    float *gates;               /* (T, N, G*H): x . wx^T + bx, overwritten by the activated gates */
    float *gh;                  /* (N, G*H) scratch: h . wh^T + bh of one step */
    float *cell;                /* LSTM cell states, GRU's wh_n . h + bh_n (training), at cell + t * cell_step
                                 * ((N, H) each); LSTM inference: one (N, H) buffer (cell_step 0); else NULL */
    long cell_step;
    const float *wx_packed;     /* wx^T as GEMM B panels made at bind time, or NULL (the GEMM packs per call) */
    const float *wh_packed;     /* wh^T likewise (steps PACKED, PACKED_ROW), or NULL */
    float *wh_pack;             /* scratch for wh^T's panels when the step needs them and wh_packed is NULL */
} mxcc_rnn_layer;

void mxcc_rnn_lstm_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer *l);
void mxcc_rnn_gru_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer *l);
void mxcc_rnn_tanh_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer *l);
void mxcc_rnn_relu_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer *l);

/* One layer, one direction, backward through time, from the forward's gates and cell (its training call). */
typedef struct mxcc_rnn_layer_grad {
    int T, N, I, H, ldy, reverse;
    const float *x;             /* (T, N, I) the layer's input */
    const float *wx, *wh;       /* (G*H, I), (G*H, H) */
    const float *h0, *c0;       /* (N, H) begin states; NULL: zeros */
    const float *y;             /* (T, N, ldy) the layer's output, this direction's columns */
    const float *gates;         /* (T, N, G*H) the activated gates */
    const float *cell;          /* (T, N, H) LSTM cell states / GRU wh_n . h + bh_n; vanilla: NULL */
    const float *dy;            /* (T, N, ldy) gradient of y, this direction's columns */
    const float *dhy, *dcy;     /* (N, H) gradients of the final states; NULL: zeros */
    float *dx;                  /* (T, N, I) gradient of x; NULL: not wanted */
    int dx_accumulate;          /* add into dx (the second direction) instead of writing it */
    float *dwx, *dwh;           /* (G*H, I), (G*H, H) weight gradients; NULL: not wanted */
    float *dbx, *dbh;           /* (G*H,) bias gradients; NULL: not wanted */
    float *dhx, *dcx;           /* (N, H) gradients of the begin states; NULL: not wanted */
    float *dgates;              /* (T, N, G*H) scratch: gradient of x . wx^T + bx */
    float *dgh;                 /* GRU: (T, N, G*H) scratch, gradient of h . wh^T + bh; else NULL (= dgates) */
    float *dh, *dc;             /* (N, H) scratch: running gradients of h and (LSTM) c */
    float *wh_pack;             /* scratch: wh (G*H x H) as GEMM B panels, mxcc_gemm_packed_b_floats(G*H, H) */
} mxcc_rnn_layer_grad;

void mxcc_rnn_lstm_backward_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer_grad *l);
void mxcc_rnn_gru_backward_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer_grad *l);
void mxcc_rnn_tanh_backward_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer_grad *l);
void mxcc_rnn_relu_backward_f32(mxcc_gemm_ws *ws, const mxcc_rnn_layer_grad *l);

/* The gate functions of these kernels over an array, for tests against libm: which = 0 sigmoid, 1 tanh, 2 exp */
void mxcc_rnn_act_f32(int which, const float *x, float *y, long n);

#ifdef __cplusplus
}
#endif
#endif /* MXCC_RNN_H */
