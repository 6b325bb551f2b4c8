/* MXNet's predict API (include/mxnet/c_predict_api.h) for the one network a library holds
 * (mxcc_pred_library_model, from the library's generated <net>_lib.c), on the network's C API (api.c).
 *
 * A predictor is a context of the network. The predictors made together (MXPredCreateMultiThread) or from one
 * another (MXPredReshape) share one `weights`: the first context, which holds the params and the bind-time
 * weights; the others are its clones (mxcc_api_ctx_clone). It is reference-counted, so predictors may be freed
 * in any order. Errors go to a per-thread message (MXGetLastError), never to stderr or exit(). Only this file
 * of the runtime refers to the library's network: it is linked into the library, not into the Python module
 * or the executables. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/mxnet/c_predict_api.h"
#include "mxcc_predict.h"

static _Thread_local char last_error[1024];

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return -1;
}

const char *MXGetLastError(void) { return last_error; }

typedef struct weights {
    atomic_int refs;              /* predictors using it */
    mxcc_ctx *base;               /* holds the params and the bind-time weights; the first predictor's context */
} weights;

typedef struct predictor {
    const mxcc_net *net;
    weights *w;
    mxcc_ctx *ctx;                /* w->base, or a clone of it */
    int num_outputs;
    int outputs[64];              /* the network's output index of each of this predictor's outputs */
    uint32_t shape[8];            /* MXPredGetOutputShape's answer */
} predictor;

#define MAX_OUTPUTS ((int)(sizeof ((predictor *)0)->outputs / sizeof(int)))

static const char *shape_text(char *buf, size_t n, const uint32_t *d32, const long long *d64, int ndim)
{
    size_t at = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < ndim && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? ", " : "", d32 ? (long long)d32[i] : d64[i]);
    if (at < n)
        snprintf(buf + at, n - at, ndim == 1 ? ",)" : ")");
    return buf;
}

/* The input shapes a create or reshape asks for: each key an input of the network, each shape the compiled one. */
/* The shapes given for the inputs: the compiled ones, or with a dynamic batch the same batch 1..max on each
 * input's batch axis (*batch: it; the maximum when no given input carries it). */
static int check_inputs(const mxcc_net *net, uint32_t n, const char **keys, const uint32_t *indptr,
                        const uint32_t *data, long *batch)
{
    *batch = net->max_batch;
    const char *first = NULL;
    if (n && (!keys || !indptr || !data))
        return fail("mxcc: input_keys, input_shape_indptr and input_shape_data must not be NULL");
    if (n && indptr[0] != 0)
        return fail("mxcc: input_shape_indptr[0] must be 0, got %u", indptr[0]);
    for (uint32_t i = 0; i < n; i++) {
        const int s = mxcc_api_find_slot(net, "input", keys[i]);
        if (s < 0) {
            char names[256] = "";
            for (int k = 0; k < net->num_slots; k++)
                if (!strcmp(net->slots[k].kind, "input"))
                    snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", names[0] ? ", " : "",
                             net->slots[k].name);
            return fail("mxcc: '%s' is not an input of network '%s' (its inputs: %s)", keys[i] ? keys[i] : "(null)",
                        net->name, names);
        }
        if (indptr[i + 1] < indptr[i])
            return fail("mxcc: input_shape_indptr must not decrease (input '%s')", keys[i]);
        const mxcc_slot_info *slot = &net->slots[s];
        const uint32_t ndim = indptr[i + 1] - indptr[i];
        int same = ndim == (uint32_t)slot->ndim;
        if (same && net->max_batch && slot->batch_factor) {     /* a dynamic batch: this input's says which */
            const uint32_t b = data[indptr[i] + slot->batch_axis];
            const long nb = b % (uint32_t)slot->batch_factor ? 0 : (long)(b / (uint32_t)slot->batch_factor);
            if (nb < 1 || nb > net->max_batch)
                return fail("mxcc: input '%s' has batch %u on axis %d: this library runs batches 1..%ld", keys[i], b,
                            slot->batch_axis, net->max_batch);
            if (first && nb != *batch)
                return fail("mxcc: input '%s' has batch %ld but '%s' has %ld: every input has the same batch",
                            keys[i], nb, first, *batch);
            *batch = nb;
            first = keys[i];
        }
        for (uint32_t d = 0; same && d < ndim; d++)
            same = data[indptr[i] + d] == (uint64_t)slot->shape[d]
                   || (net->max_batch && slot->batch_factor && (int)d == slot->batch_axis);
        if (!same) {
            char got[200], want[200];
            return fail(net->max_batch ? "mxcc: input '%s' has shape %s; this library was compiled for %s, any batch "
                        "up to it" : "mxcc: input '%s' has shape %s; this library was compiled for %s (it runs the "
                        "compiled shape only: compile the network again with that shape, or with --dynamic-batch)",
                        keys[i],
                        shape_text(got, sizeof got, data + indptr[i], NULL, ndim > 8 ? 8 : (int)ndim),
                        shape_text(want, sizeof want, NULL, slot->shape, slot->ndim));
        }
    }
    return 0;
}

/* Every input bound to zeros (MXNet's predictors start from zero-filled arrays): a label nobody sets, too. */
static int zero_inputs(const mxcc_net *net, mxcc_ctx *ctx)
{
    char err[512];
    for (int s = 0; s < net->num_slots; s++) {
        if (strcmp(net->slots[s].kind, "input"))
            continue;
        const size_t size = mxcc_api_slot_size(net, ctx, s);   /* at the context's batch */
        float *zeros = calloc(size ? size : 1, sizeof(float));
        const int rc = zeros ? mxcc_api_set_input(net, ctx, net->slots[s].name, zeros, size, err, sizeof err) : -1;
        free(zeros);
        if (rc)
            return fail("mxcc: %s", zeros ? err : "out of memory");
    }
    return 0;
}

static predictor *new_predictor(const mxcc_net *net, weights *w, mxcc_ctx *ctx, const predictor *like)
{
    predictor *p = calloc(1, sizeof *p);
    if (!p) {
        fail("mxcc: out of memory");
        return NULL;
    }
    p->net = net;
    p->w = w;
    p->ctx = ctx;
    p->num_outputs = like->num_outputs;
    memcpy(p->outputs, like->outputs, sizeof p->outputs);
    atomic_fetch_add(&w->refs, 1);
    return p;
}

static void release(weights *w, const mxcc_net *net)
{
    if (atomic_fetch_sub(&w->refs, 1) == 1) {
        net->ctx_free(w->base);
        free(w);
    }
}

/* A clone predictor of `like` (same weights and outputs), its inputs zeros. */
/* A predictor of like's network and outputs on a context of its own, at `batch` (a dynamic batch; else 0). */
static predictor *clone_of(const predictor *like, long batch)
{
    char err[512];
    mxcc_ctx *ctx = mxcc_api_ctx_clone(like->net, like->w->base, err, sizeof err);
    if (!ctx) {
        fail("mxcc: %s", err);
        return NULL;
    }
    if (batch)
        like->net->set_batch(ctx, batch);
    if (zero_inputs(like->net, ctx)) {
        like->net->ctx_free(ctx);
        return NULL;
    }
    predictor *p = new_predictor(like->net, like->w, ctx, like);
    if (!p)
        like->net->ctx_free(ctx);
    return p;
}

static int select_outputs(const mxcc_net *net, uint32_t n, const char **keys, predictor *p)
{
    const int total = mxcc_api_num_outputs(net);
    if (!keys || n == 0) {
        p->num_outputs = total < MAX_OUTPUTS ? total : MAX_OUTPUTS;
        for (int i = 0; i < p->num_outputs; i++)
            p->outputs[i] = i;
        return 0;
    }
    if (n > (uint32_t)MAX_OUTPUTS)
        return fail("mxcc: at most %d output keys", MAX_OUTPUTS);
    for (uint32_t k = 0; k < n; k++) {
        int found = -1;
        for (int i = 0; i < total && found < 0 && keys[k]; i++) {
            const char *name = net->slots[mxcc_api_output_slot(net, i)].name;
            const size_t kl = strlen(keys[k]);
            if (!strcmp(name, keys[k]) || (!strncmp(name, keys[k], kl) && !strcmp(name + kl, "_output")))
                found = i;
        }
        if (found < 0) {
            char names[256] = "";
            for (int i = 0; i < total; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", i ? ", " : "",
                         net->slots[mxcc_api_output_slot(net, i)].name);
            return fail("mxcc: output '%s' is not an output of the compiled network (its outputs: %s; mxcc computes "
                        "the outputs it was compiled with)", keys[k] ? keys[k] : "(null)", names);
        }
        p->outputs[k] = found;
    }
    p->num_outputs = (int)n;
    return 0;
}

/* MXPredCreate and its variants: check everything, load the params into the first context, clone the rest. */
static int create(const char *json, const void *param_bytes, int param_size, int dev_type, uint32_t num_inputs,
                  const char **keys, const uint32_t *indptr, const uint32_t *data, uint32_t num_outputs,
                  const char **output_keys, int count, PredictorHandle *out)
{
    const mxcc_pred_model *model = &mxcc_pred_library_model;
    const mxcc_net *net = model->net;
    char err[1024];
    if (!out)
        return fail("mxcc: the output handle pointer is NULL");
    if (dev_type != 1)
        return fail("mxcc: dev_type %d is not available: this library runs on the CPU only (dev_type 1)", dev_type);
    if (count < 1)
        return fail("mxcc: num_threads must be at least 1, got %d", count);
    if (param_size < 0 || (param_size > 0 && !param_bytes))
        return fail("mxcc: no params (param_bytes %p, param_size %d)", param_bytes, param_size);
    if (mxcc_symbol_check(model->symbol, json, err, sizeof err))
        return fail("mxcc: %s", err);
    long batch;
    if (check_inputs(net, num_inputs, keys, indptr, data, &batch))
        return -1;
    predictor first = {.net = net};
    if (select_outputs(net, num_outputs, output_keys, &first))
        return -1;
    weights *w = calloc(1, sizeof *w);
    if (!w)
        return fail("mxcc: out of memory");
    atomic_init(&w->refs, 0);
    if (!(w->base = net->ctx_create(err, sizeof err))) {
        free(w);
        return fail("mxcc: %s", err);
    }
    if (batch)
        net->set_batch(w->base, batch);
    int rc = mxcc_api_load_params_bytes(net, w->base, param_bytes, (size_t)param_size, MXCC_API_ALLOW_EXTRA, err,
                                        sizeof err);
    if (rc)
        fail("mxcc: the params: %s", err);
    if (rc || zero_inputs(net, w->base)) {
        net->ctx_free(w->base);
        free(w);
        return -1;
    }
    predictor *p0 = new_predictor(net, w, w->base, &first);
    if (!p0) {
        net->ctx_free(w->base);
        free(w);
        return -1;
    }
    out[0] = p0;
    for (int i = 1; i < count; i++) {
        if (!(out[i] = clone_of(p0, batch))) {
            char why[sizeof last_error];
            memcpy(why, last_error, sizeof why);
            for (int k = 0; k < i; k++)
                MXPredFree(out[k]);
            return fail("%s", why);
        }
    }
    return 0;
}

int MXPredCreate(const char *symbol_json_str, const void *param_bytes, int param_size, int dev_type, int dev_id,
                 uint32_t num_input_nodes, const char **input_keys, const uint32_t *input_shape_indptr,
                 const uint32_t *input_shape_data, PredictorHandle *out)
{
    (void)dev_id;
    return create(symbol_json_str, param_bytes, param_size, dev_type, num_input_nodes, input_keys,
                  input_shape_indptr, input_shape_data, 0, NULL, 1, out);
}

int MXPredCreateEx(const char *symbol_json_str, const void *param_bytes, int param_size, int dev_type, int dev_id,
                   const uint32_t num_input_nodes, const char **input_keys, const uint32_t *input_shape_indptr,
                   const uint32_t *input_shape_data, const uint32_t num_provided_arg_dtypes,
                   const char **provided_arg_dtype_names, const int *provided_arg_dtypes, PredictorHandle *out)
{
    (void)dev_id;
    const mxcc_net *net = mxcc_pred_library_model.net;
    for (uint32_t i = 0; i < num_provided_arg_dtypes; i++) {
        const char *name = provided_arg_dtype_names ? provided_arg_dtype_names[i] : NULL;
        if (mxcc_api_find_slot(net, NULL, name) < 0)
            return fail("mxcc: '%s' (given a dtype) is not an argument of network '%s'", name ? name : "(null)",
                        net->name);
        if (!provided_arg_dtypes || provided_arg_dtypes[i] != 0)
            return fail("mxcc: '%s' is given dtype %d; this library computes in float32 (type flag 0) only", name,
                        provided_arg_dtypes ? provided_arg_dtypes[i] : -1);
    }
    return create(symbol_json_str, param_bytes, param_size, dev_type, num_input_nodes, input_keys,
                  input_shape_indptr, input_shape_data, 0, NULL, 1, out);
}

int MXPredCreatePartialOut(const char *symbol_json_str, const void *param_bytes, int param_size, int dev_type,
                           int dev_id, uint32_t num_input_nodes, const char **input_keys,
                           const uint32_t *input_shape_indptr, const uint32_t *input_shape_data,
                           uint32_t num_output_nodes, const char **output_keys, PredictorHandle *out)
{
    (void)dev_id;
    return create(symbol_json_str, param_bytes, param_size, dev_type, num_input_nodes, input_keys,
                  input_shape_indptr, input_shape_data, num_output_nodes, output_keys, 1, out);
}

int MXPredCreateMultiThread(const char *symbol_json_str, const void *param_bytes, int param_size, int dev_type,
                            int dev_id, uint32_t num_input_nodes, const char **input_keys,
                            const uint32_t *input_shape_indptr, const uint32_t *input_shape_data, int num_threads,
                            PredictorHandle *out)
{
    (void)dev_id;
    return create(symbol_json_str, param_bytes, param_size, dev_type, num_input_nodes, input_keys,
                  input_shape_indptr, input_shape_data, 0, NULL, num_threads, out);
}

static predictor *handle(PredictorHandle h)
{
    if (!h)
        fail("mxcc: the predictor handle is NULL");
    return h;
}

int MXPredReshape(uint32_t num_input_nodes, const char **input_keys, const uint32_t *input_shape_indptr,
                  const uint32_t *input_shape_data, PredictorHandle h, PredictorHandle *out)
{
    predictor *p = handle(h);
    if (!p)
        return -1;
    if (!out)
        return fail("mxcc: the output handle pointer is NULL");
    long batch;
    if (check_inputs(p->net, num_input_nodes, input_keys, input_shape_indptr, input_shape_data, &batch))
        return -1;
    return (*out = clone_of(p, batch)) ? 0 : -1;
}

int MXPredGetOutputShape(PredictorHandle h, uint32_t index, uint32_t **shape_data, uint32_t *shape_ndim)
{
    predictor *p = handle(h);
    if (!p)
        return -1;
    if (index >= (uint32_t)p->num_outputs)
        return fail("mxcc: output index %u out of range (this predictor has %d outputs)", index, p->num_outputs);
    if (!shape_data || !shape_ndim)
        return fail("mxcc: MXPredGetOutputShape: NULL result pointer");
    const int s = mxcc_api_output_slot(p->net, p->outputs[index]);
    const mxcc_slot_info *slot = &p->net->slots[s];
    long long shape[8];
    mxcc_api_slot_shape(p->net, p->ctx, s, shape);     /* at the predictor's batch */
    for (int d = 0; d < slot->ndim; d++)
        p->shape[d] = (uint32_t)shape[d];
    *shape_data = p->shape;
    *shape_ndim = (uint32_t)slot->ndim;
    return 0;
}

int MXPredGetOutputType(PredictorHandle h, uint32_t out_index, int *out_dtype)
{
    predictor *p = handle(h);
    if (!p)
        return -1;
    if (out_index >= (uint32_t)p->num_outputs)
        return fail("mxcc: output index %u out of range (this predictor has %d outputs)", out_index,
                    p->num_outputs);
    if (!out_dtype)
        return fail("mxcc: MXPredGetOutputType: NULL result pointer");
    *out_dtype = 0;   /* float32 */
    return 0;
}

int MXPredSetInput(PredictorHandle h, const char *key, const float *data, uint32_t size)
{
    char err[512];
    predictor *p = handle(h);
    if (!p)
        return -1;
    return mxcc_api_set_input(p->net, p->ctx, key, data, size, err, sizeof err) ? fail("mxcc: %s", err) : 0;
}

int MXPredForward(PredictorHandle h)
{
    char err[512];
    predictor *p = handle(h);
    if (!p)
        return -1;
    return mxcc_api_run(p->net, p->ctx, err, sizeof err) ? fail("mxcc: %s", err) : 0;
}

int MXPredPartialForward(PredictorHandle h, int step, int *step_left)
{
    if (!handle(h))
        return -1;
    if (!step_left)
        return fail("mxcc: MXPredPartialForward: step_left is NULL");
    if (step != 0)
        return fail("mxcc: step %d out of range: the compiled forward is one step (step 0)", step);
    *step_left = 0;
    return MXPredForward(h);
}

int MXPredGetOutput(PredictorHandle h, uint32_t index, float *data, uint32_t size)
{
    char err[512];
    predictor *p = handle(h);
    if (!p)
        return -1;
    if (index >= (uint32_t)p->num_outputs)
        return fail("mxcc: output index %u out of range (this predictor has %d outputs)", index, p->num_outputs);
    return mxcc_api_get_output(p->net, p->ctx, p->outputs[index], data, size, err, sizeof err)
         ? fail("mxcc: %s", err) : 0;
}

int MXPredFree(PredictorHandle h)
{
    predictor *p = h;
    if (!p)
        return 0;
    if (p->ctx != p->w->base)
        p->net->ctx_free(p->ctx);
    release(p->w, p->net);
    free(p);
    return 0;
}

int MXPredSetMonitorCallback(PredictorHandle h, PredMonitorCallback callback, void *callback_handle,
                             bool monitor_all)
{
    (void)h, (void)callback, (void)callback_handle, (void)monitor_all;
    return fail("mxcc: MXPredSetMonitorCallback is not supported: the compiled network's fused kernels have no "
                "per-operator outputs to report");
}

/* ---- NDArray lists (mean images) ---- */

typedef struct ndlist {
    uint32_t count;
    char **keys;
    float **data;
    uint32_t **shapes;
    uint32_t *ndims;
} ndlist;

int MXNDListFree(NDListHandle h)
{
    ndlist *l = h;
    if (!l)
        return 0;
    for (uint32_t i = 0; i < l->count; i++) {
        free(l->keys ? l->keys[i] : NULL);
        free(l->data ? l->data[i] : NULL);
        free(l->shapes ? l->shapes[i] : NULL);
    }
    free(l->keys);
    free(l->data);
    free(l->shapes);
    free(l->ndims);
    free(l);
    return 0;
}

int MXNDListCreate(const char *nd_file_bytes, int nd_file_size, NDListHandle *out, uint32_t *out_length)
{
    char err[512];
    mxcc_ndarray_list list;
    if (!out || !out_length)
        return fail("mxcc: MXNDListCreate: NULL result pointer");
    if (nd_file_size < 0 || (nd_file_size > 0 && !nd_file_bytes))
        return fail("mxcc: MXNDListCreate: no bytes (size %d)", nd_file_size);
    if (mxcc_params_parse(nd_file_bytes, (size_t)nd_file_size, &list, err, sizeof err))
        return fail("mxcc: %s", err);
    if (list.count > UINT32_MAX) {
        mxcc_params_free(&list);
        return fail("mxcc: too many arrays");
    }
    ndlist *l = calloc(1, sizeof *l);
    const size_t n = list.count ? list.count : 1;
    if (!l || !(l->keys = calloc(n, sizeof *l->keys)) || !(l->data = calloc(n, sizeof *l->data)) ||
        !(l->shapes = calloc(n, sizeof *l->shapes)) || !(l->ndims = calloc(n, sizeof *l->ndims))) {
        MXNDListFree(l);
        mxcc_params_free(&list);
        return fail("mxcc: out of memory");
    }
    l->count = (uint32_t)list.count;
    for (size_t i = 0; i < list.count; i++) {
        const mxcc_ndarray *a = &list.arrays[i];
        if (a->unusable || a->none) {
            fail("mxcc: array #%zu ('%s'): %s", i, a->name, a->unusable ? a->unusable : "it has no shape");
            MXNDListFree(l);
            mxcc_params_free(&list);
            return -1;
        }
        const char *key = list.named ? a->name : "";
        l->keys[i] = malloc(strlen(key) + 1);
        l->data[i] = malloc((a->size ? a->size : 1) * sizeof(float));
        l->shapes[i] = malloc((a->ndim ? (size_t)a->ndim : 1) * sizeof(uint32_t));
        int fits = 1;
        for (int d = 0; d < a->ndim; d++)
            fits &= a->shape[d] <= (int64_t)UINT32_MAX;
        if (!l->keys[i] || !l->data[i] || !l->shapes[i] || !fits) {
            MXNDListFree(l);
            mxcc_params_free(&list);
            return fail(fits ? "mxcc: out of memory" : "mxcc: array #%zu: a dimension does not fit in 32 bits", i);
        }
        strcpy(l->keys[i], key);
        mxcc_params_to_f32(a, l->data[i]);
        for (int d = 0; d < a->ndim; d++)
            l->shapes[i][d] = (uint32_t)a->shape[d];
        l->ndims[i] = (uint32_t)a->ndim;
    }
    mxcc_params_free(&list);
    *out = l;
    *out_length = l->count;
    return 0;
}

int MXNDListGet(NDListHandle h, uint32_t index, const char **out_key, const float **out_data,
                const uint32_t **out_shape, uint32_t *out_ndim)
{
    ndlist *l = h;
    if (!l)
        return fail("mxcc: the NDList handle is NULL");
    if (index >= l->count)
        return fail("mxcc: index %u out of range (the list has %u arrays)", index, l->count);
    if (!out_key || !out_data || !out_shape || !out_ndim)
        return fail("mxcc: MXNDListGet: NULL result pointer");
    *out_key = l->keys[index];
    *out_data = l->data[index];
    *out_shape = l->shapes[index];
    *out_ndim = l->ndims[index];
    return 0;
}
