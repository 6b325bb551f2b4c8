/* The C API of a network over its descriptor (mxcc_runtime.h, "The C API of a network"): params read from
 * MXNet's .params with the C reader (params/), inputs and outputs the context owns, every call checked.
 *
 * What a context keeps lives in ctx->host (struct api_host), created on first use and freed by mxcc_ctx_free:
 * one block holding every param and aux slot (64-byte aligned each), and a buffer per input or output slot the
 * API allocated. A clone's params are its base's (not owned). Nothing here is global: contexts in different
 * threads never share a writable byte. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxcc_runtime.h"

typedef struct api_host {
    float *params;           /* every param and aux slot, in slot order (NULL: none loaded) */
    int params_owned;        /* 0: a clone's, its base's block */
    void **owned;            /* per slot: the buffer this context allocated for an input or output, or NULL */
    int n_slots;
} api_host;

static int say(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static void host_free(void *p)
{
    api_host *h = p;
    if (!h)
        return;
    for (int s = 0; s < h->n_slots; s++)
        free(h->owned[s]);
    free(h->owned);
    if (h->params_owned)
        free(h->params);
    free(h);
}

static api_host *host_of(mxcc_ctx *ctx, char *err, size_t errlen)
{
    if (ctx->host)
        return ctx->host;
    api_host *h = calloc(1, sizeof *h);
    if (h && !(h->owned = calloc(ctx->n_slots > 0 ? (size_t)ctx->n_slots : 1, sizeof *h->owned))) {
        free(h);
        h = NULL;
    }
    if (!h) {
        say(err, errlen, "mxcc: out of memory");
        return NULL;
    }
    h->n_slots = ctx->n_slots;
    ctx->host = h;
    ctx->host_free = host_free;
    return h;
}

static size_t padded_floats(size_t n) { return (n + 15) / 16 * 16; }   /* 64 bytes */

static int is_weight(const mxcc_slot_info *s) { return !strcmp(s->kind, "param") || !strcmp(s->kind, "aux"); }

/* "(2, 1, 28, 28)", "(10,)" as Python prints shapes */
static const char *shape_str(char *buf, size_t n, int ndim, const long long *d64, const int64_t *d)
{
    size_t at = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < ndim && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? ", " : "", d64 ? d64[i] : (long long)d[i]);
    if (at < n)
        snprintf(buf + at, n - at, ndim == 1 ? ",)" : ")");
    return buf;
}

int mxcc_api_find_slot(const mxcc_net *net, const char *kind, const char *name)
{
    for (int s = 0; name && s < net->num_slots; s++)
        if ((!kind || !strcmp(net->slots[s].kind, kind)) && !strcmp(net->slots[s].name, name))
            return s;
    return -1;
}

int mxcc_api_num_outputs(const mxcc_net *net)
{
    int n = 0;
    for (int s = 0; s < net->num_slots; s++)
        n += !strcmp(net->slots[s].kind, "output");
    return n;
}

int mxcc_api_output_slot(const mxcc_net *net, int index)
{
    for (int s = 0; s < net->num_slots; s++)
        if (!strcmp(net->slots[s].kind, "output") && index-- == 0)
            return s;
    return -1;
}

/* The weight slot an array named `key` binds: "arg:NAME", "aux:NAME" or "NAME" (mxcc.params.split_arg_aux);
 * -1 none, -2 a prefix other than arg/aux (message in err). */
static int weight_slot(const mxcc_net *net, const char *key, char *err, size_t errlen)
{
    const char *colon = strchr(key, ':'), *name = key;
    if (colon) {
        if (!((colon - key == 3 && (!strncmp(key, "arg", 3) || !strncmp(key, "aux", 3)))))
            return say(err, errlen, "parameter '%s': unknown prefix '%.*s' (expected 'arg:' or 'aux:')", key,
                       (int)(colon - key), key), -2;
        name = colon + 1;
    }
    for (int s = 0; s < net->num_slots; s++)
        if (is_weight(&net->slots[s]) && !strcmp(net->slots[s].name, name))
            return s;
    return -1;
}

/* Which array of the list each weight slot takes (-1: none); -1 with a message on any fault. */
static int match(const mxcc_net *net, const mxcc_ndarray_list *list, int flags, int *take, char *err, size_t errlen)
{
    int extra = 0;
    char extras[160] = "";
    for (int s = 0; s < net->num_slots; s++)
        take[s] = -1;
    for (size_t i = 0; i < list->count; i++) {
        const mxcc_ndarray *a = &list->arrays[i];
        if (a->unusable)
            return say(err, errlen, "array #%zu ('%s'): %s", i, a->name, a->unusable);
        const int s = weight_slot(net, a->name, err, errlen);
        if (s == -2 && !(flags & MXCC_API_ALLOW_EXTRA))
            return -1;
        if (s < 0) {           /* -1, or -2 (another prefix) with MXCC_API_ALLOW_EXTRA: MXNet ignores those */
            if (a->none || mxcc_api_find_slot(net, "input", a->name) >= 0 || (flags & MXCC_API_ALLOW_EXTRA))
                continue;       /* a "none" array, or a data input saved with the params: nothing to bind */
            if (extra++ < 4)
                snprintf(extras + strlen(extras), sizeof extras - strlen(extras), "%s'%s'", extra > 1 ? ", " : "",
                         a->name);
            continue;
        }
        if (a->none)
            continue;          /* as if absent: it has no values */
        if (take[s] >= 0)
            return say(err, errlen, "parameter '%s' is given twice ('%s' and '%s')", net->slots[s].name,
                       list->arrays[take[s]].name, a->name);
        const mxcc_slot_info *slot = &net->slots[s];
        int same = a->ndim == slot->ndim;
        for (int d = 0; same && d < a->ndim; d++)
            same = a->shape[d] == slot->shape[d];
        if (!same) {
            char got[160], want[160];
            return say(err, errlen, "param '%s' has shape %s, expected %s", slot->name,
                       shape_str(got, sizeof got, a->ndim, NULL, a->shape),
                       shape_str(want, sizeof want, slot->ndim, slot->shape, NULL));
        }
        take[s] = (int)i;
    }
    if (extra)
        return say(err, errlen, "%d unexpected params: %s%s (not params of network '%s')", extra, extras,
                   extra > 4 ? ", ..." : "", net->name);
    int missing = 0;
    char names[200] = "";
    for (int s = 0; s < net->num_slots; s++)
        if (is_weight(&net->slots[s]) && take[s] < 0 && missing++ < 4) {
            char shp[120];
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s %s", missing > 1 ? ", " : "",
                     net->slots[s].name, shape_str(shp, sizeof shp, net->slots[s].ndim, net->slots[s].shape, NULL));
        }
    if (missing)
        return say(err, errlen, "%d params missing: %s%s", missing, names, missing > 4 ? ", ..." : "");
    return 0;
}

int mxcc_api_load_params_bytes(const mxcc_net *net, mxcc_ctx *ctx, const void *bytes, size_t size, int flags,
                               char *err, size_t errlen)
{
    api_host *h = host_of(ctx, err, errlen);
    if (!h)
        return -1;
    mxcc_ndarray_list list;
    if (mxcc_params_parse(bytes, size, &list, err, errlen))
        return -1;
    int *take = malloc((net->num_slots ? (size_t)net->num_slots : 1) * sizeof *take);
    if (!take) {
        mxcc_params_free(&list);
        return say(err, errlen, "mxcc: out of memory");
    }
    int rc = match(net, &list, flags, take, err, errlen);
    size_t total = 0;
    for (int s = 0; s < net->num_slots; s++)
        if (is_weight(&net->slots[s]))
            total += padded_floats(net->slots[s].size);
    float *block = NULL;
    if (rc == 0 && !(block = aligned_alloc(64, (total ? total : 16) * sizeof(float))))
        rc = say(err, errlen, "mxcc: out of memory for %zu bytes of params", total * sizeof(float));
    if (rc == 0) {
        float *at = block;
        for (int s = 0; s < net->num_slots; s++) {
            if (!is_weight(&net->slots[s]))
                continue;
            mxcc_params_to_f32(&list.arrays[take[s]], at);
            ctx->slots[s] = at;
            at += padded_floats(net->slots[s].size);
        }
        if (h->params_owned)
            free(h->params);
        h->params = block;
        h->params_owned = 1;
        net->prepare(ctx);
    }
    free(take);
    mxcc_params_free(&list);
    return rc;
}

int mxcc_api_load_params(const mxcc_net *net, mxcc_ctx *ctx, const char *path, int flags, char *err, size_t errlen)
{
    unsigned char *bytes;
    size_t size;
    if (!path)
        return say(err, errlen, "mxcc: no params file given");
    if (mxcc_params_read_file(path, &bytes, &size, err, errlen))
        return -1;
    char why[768];
    const int rc = mxcc_api_load_params_bytes(net, ctx, bytes, size, flags, why, sizeof why);
    if (rc)
        say(err, errlen, "%s: %s", path, why);
    free(bytes);
    return rc;
}

/* The buffer of slot s that this context owns (allocated on first use). */
static float *owned_buffer(const mxcc_net *net, mxcc_ctx *ctx, int s, char *err, size_t errlen)
{
    api_host *h = host_of(ctx, err, errlen);
    if (!h)
        return NULL;
    if (!h->owned[s] && !(h->owned[s] = aligned_alloc(64, padded_floats(net->slots[s].size ? net->slots[s].size : 1)
                                                               * sizeof(float)))) {
        say(err, errlen, "mxcc: out of memory for '%s'", net->slots[s].name);
        return NULL;
    }
    return h->owned[s];
}

size_t mxcc_api_slot_size(const mxcc_net *net, const mxcc_ctx *ctx, int s)
{
    const mxcc_slot_info *slot = &net->slots[s];
    if (net->max_batch && slot->batch_factor)
        return slot->size / (size_t)net->max_batch * (size_t)ctx->batch;
    return slot->size;
}

void mxcc_api_slot_shape(const mxcc_net *net, const mxcc_ctx *ctx, int s, long long shape[8])
{
    const mxcc_slot_info *slot = &net->slots[s];
    for (int d = 0; d < slot->ndim; d++)
        shape[d] = slot->shape[d];
    if (net->max_batch && slot->batch_factor)
        shape[slot->batch_axis] = (long long)slot->batch_factor * ctx->batch;
}

int mxcc_api_set_input(const mxcc_net *net, mxcc_ctx *ctx, const char *name, const float *data, size_t size,
                       char *err, size_t errlen)
{
    const int s = mxcc_api_find_slot(net, "input", name);
    if (s < 0) {
        char names[200] = "";
        for (int i = 0; i < net->num_slots; i++)
            if (!strcmp(net->slots[i].kind, "input"))
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", names[0] ? ", " : "",
                         net->slots[i].name);
        return say(err, errlen, "'%s' is not an input of network '%s' (its inputs: %s)", name ? name : "(null)",
                   net->name, names);
    }
    const mxcc_slot_info *slot = &net->slots[s];
    const size_t want = mxcc_api_slot_size(net, ctx, s);
    if (size != want) {
        char shp[160];
        long long shape[8];
        mxcc_api_slot_shape(net, ctx, s, shape);
        return say(err, errlen, "input '%s' was given %zu floats, expected %zu (shape %s)", name, size, want,
                   shape_str(shp, sizeof shp, slot->ndim, shape, NULL));
    }
    if (!data)
        return say(err, errlen, "input '%s': no data (NULL)", name);
    float *buf = owned_buffer(net, ctx, s, err, errlen);
    if (!buf)
        return -1;
    memcpy(buf, data, size * sizeof(float));
    ctx->slots[s] = buf;
    return 0;
}

int mxcc_api_run(const mxcc_net *net, mxcc_ctx *ctx, char *err, size_t errlen)
{
    for (int s = 0; s < net->num_slots; s++)      /* the params first: the likelier thing to have forgotten */
        if (!ctx->slots[s] && is_weight(&net->slots[s]))
            return say(err, errlen, "network '%s': params not loaded ('%s' is not bound; load an MXNet .params "
                       "file with %s_load_params first)", net->name, net->slots[s].name, net->name);
    for (int s = 0; s < net->num_slots; s++) {
        const mxcc_slot_info *slot = &net->slots[s];
        if (ctx->slots[s])
            continue;
        if (!strcmp(slot->kind, "output")) {
            if (!(ctx->slots[s] = owned_buffer(net, ctx, s, err, errlen)))
                return -1;
        } else if (!strcmp(slot->kind, "input")) {
            if (!slot->optional)
                return say(err, errlen, "network '%s': input '%s' is not set", net->name, slot->name);
        } else {
            return say(err, errlen, "network '%s': slot '%s' (%s) is not bound: the C API runs inference builds",
                       net->name, slot->name, slot->kind);
        }
    }
    net->forward(ctx);
    return 0;
}

int mxcc_api_get_output(const mxcc_net *net, mxcc_ctx *ctx, int index, float *dst, size_t size, char *err,
                        size_t errlen)
{
    const int s = mxcc_api_output_slot(net, index);
    if (s < 0)
        return say(err, errlen, "network '%s' has %d outputs, no output %d", net->name, mxcc_api_num_outputs(net),
                   index);
    const mxcc_slot_info *slot = &net->slots[s];
    const size_t have = mxcc_api_slot_size(net, ctx, s);
    if (size != have) {
        char shp[160];
        long long shape[8];
        mxcc_api_slot_shape(net, ctx, s, shape);
        return say(err, errlen, "output %d ('%s') has %zu floats (shape %s), the buffer given has room for %zu",
                   index, slot->name, have, shape_str(shp, sizeof shp, slot->ndim, shape, NULL), size);
    }
    if (!ctx->slots[s])
        return say(err, errlen, "output %d ('%s'): no forward has run", index, slot->name);
    if (!dst)
        return say(err, errlen, "output %d ('%s'): no buffer given (NULL)", index, slot->name);
    memcpy(dst, ctx->slots[s], size * sizeof(float));
    return 0;
}

mxcc_ctx *mxcc_api_ctx_clone(const mxcc_net *net, const mxcc_ctx *base, char *err, size_t errlen)
{
    mxcc_ctx *ctx = net->ctx_create_shared(base, err, errlen);
    if (!ctx)
        return NULL;
    api_host *h = host_of(ctx, err, errlen);
    if (!h) {
        net->ctx_free(ctx);
        return NULL;
    }
    const api_host *b = base->host;
    h->params = b ? b->params : NULL;
    h->params_owned = 0;
    for (int s = 0; s < net->num_slots; s++)
        if (is_weight(&net->slots[s]))
            ctx->slots[s] = base->slots[s];
    return ctx;
}
