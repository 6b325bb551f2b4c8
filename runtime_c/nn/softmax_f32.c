/* Softmax and log-softmax over contiguous rows (the last axis: attention scores, classifier outputs), on the
 * build's vector with vmath.h's exp. Per row, as MXNet's softmax: m = max_j x_j; e_j = exp((x_j - m) / t);
 * y_j = e_j / sum_j e_j, or for log-softmax y_j = (x_j - m) / t - log(sum_j e_j). The sum is taken in RV
 * partial sums, then added across (a different rounding order from a sequential float loop, within an ulp or
 * two of it). NaN in a row: the max skips it (as `x > m ? x : m`) and the row's outputs are NaN. */
#include "../vmath.h"
#include "../mxcc_math.h"
#include "../parallel.h"

static float hsum(rv v)
{
    float lanes[RV];
    rv_store(lanes, v, RV);
    float s = 0.0f;
    for (int i = 0; i < RV; i++)
        s += lanes[i];
    return s;
}

static float hmax(rv v)
{
    float lanes[RV];
    rv_store(lanes, v, RV);
    float m = lanes[0];
    for (int i = 1; i < RV; i++)
        m = lanes[i] > m ? lanes[i] : m;
    return m;
}

static void softmax_row(const float *x, float *y, long n, float t, int log)
{
    rv vm = mxcc_set1_f32(-INFINITY);
    long j = 0;
    for (; j + RV <= n; j += RV)
        vm = mxcc_max_f32(mxcc_loadu_f32(x + j), vm);      /* maxps(x, m): m where x is NaN */
    float m = hmax(vm);
    for (; j < n; j++)
        m = x[j] > m ? x[j] : m;
    const rv vmax = mxcc_set1_f32(m), vt = mxcc_set1_f32(t);
    rv vs = mxcc_zero_f32();
    for (j = 0; j < n; j += RV) {
        const int k = n - j < RV ? (int)(n - j) : RV;
        const rv e = rv_exp(mxcc_div_f32(mxcc_sub_f32(rv_load(x + j, k), vmax), vt));
        if (!log)
            rv_store(y + j, e, k);
        vs = mxcc_add_f32(vs, k == RV ? e : mxcc_select_f32(mxcc_mask_tail(k), e, mxcc_zero_f32()));
    }
    const float sum = hsum(vs);
    if (log) {
        const rv lse = mxcc_set1_f32(logf(sum));
        for (j = 0; j < n; j += RV) {
            const int k = n - j < RV ? (int)(n - j) : RV;
            rv_store(y + j, mxcc_sub_f32(mxcc_div_f32(mxcc_sub_f32(rv_load(x + j, k), vmax), vt), lse), k);
        }
    } else {
        const rv inv = mxcc_set1_f32(1.0f / sum);
        for (j = 0; j < n; j += RV) {
            const int k = n - j < RV ? (int)(n - j) : RV;
            rv_store(y + j, mxcc_mul_f32(rv_load(y + j, k), inv), k);
        }
    }
}

/* one thread's range of rows (mxcc_parallel_chunks) */
typedef struct rows_job {
    const float *x;
    float *y;
    long rows, n;
    float t;
    int log, parts;
} rows_job;

static void rows_part(void *arg, long part, int worker)
{
    const rows_job *j = arg;
    (void)worker;
    for (long r = mxcc_split_at(j->rows, j->parts, (int)part); r < mxcc_split_at(j->rows, j->parts, (int)part + 1); r++)
        softmax_row(j->x + r * j->n, j->y + r * j->n, j->n, j->t, j->log);
}

void mxcc_softmax_rows_f32(const float *x, float *y, long rows, long n, float t, int log, int parallel)
{
    const int nt = parallel ? mxcc_threads_for_call(1, 20.0 * (double)rows * n) : 1;
    const rows_job job = {x, y, rows, n, t, log, nt};
    mxcc_parallel_chunks(nt, nt, rows_part, (void *)&job);
}
