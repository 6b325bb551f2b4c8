/* What both standalone programs share: their options, the --timeline / --profile recording and .npy files
 * (mxcc_driver.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mxcc_driver.h"

const char *mxcc_arg_str(int argc, char **argv, const char *flag, const char *dflt)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], flag))
            return argv[i + 1];
    return dflt;
}

int mxcc_arg_all(int argc, char **argv, const char *flag, const char **out, int max)
{
    int n = 0;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], flag)) {
            if (n < max)
                out[n] = argv[i + 1];
            n++;
            i++;
        }
    return n;
}

double mxcc_now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void mxcc_timeline_args(mxcc_timeline *t, int argc, char **argv)
{
    memset(t, 0, sizeof *t);
    t->path = mxcc_arg_str(argc, argv, "--timeline", NULL);
    /* --profile FILE (or MXCC_PROFILER_AUTOSTART=1: profile.json): a Chrome trace of every kernel call */
    const char *autostart = getenv("MXCC_PROFILER_AUTOSTART");
    t->profile = mxcc_arg_str(argc, argv, "--profile", autostart && !strcmp(autostart, "1") ? "profile.json" : NULL);
    if (t->profile && !t->path) {   /* the trace is made from a timeline of its own, removed once written */
        snprintf(t->own_path, sizeof t->own_path, "%s.timeline", t->profile);
        t->path = t->own_path;
    }
}

int mxcc_timeline_start(mxcc_timeline *t, const mxcc_net *net, mxcc_ctx *ctx, const char *prog)
{
    if (!t->path)
        return 0;
    t->file = fopen(t->path, "wb");
    t->events = malloc((size_t)(net->num_names ? net->num_names : 1) * sizeof *t->events);
    t->capacity = (uint32_t)net->num_names;
    if (!t->file || !t->events || mxcc_prof_set_capacity(ctx, t->capacity) != 0) {
        fprintf(stderr, "%s: cannot write the timeline to %s\n", prog, t->path);
        return 1;
    }
    mxcc_prof_set_enabled(ctx, 1);
    return 0;
}

void mxcc_timeline_drain(mxcc_timeline *t, mxcc_ctx *ctx)
{
    if (t->file) {
        const uint32_t n = mxcc_prof_drain(ctx, t->events, t->capacity);
        fwrite(t->events, sizeof t->events[0], n, t->file);
    }
}

int mxcc_timeline_finish(mxcc_timeline *t, const mxcc_net *net, const char *prog)
{
    free(t->events);
    t->events = NULL;
    if (t->file && fclose(t->file) != 0) {
        fprintf(stderr, "%s: cannot write the timeline to %s\n", prog, t->path);
        return 1;
    }
    t->file = NULL;
    if (t->profile) {
        if (mxcc_prof_write_trace(t->path, t->profile, net->name, net->node_names, net->num_names)) {
            fprintf(stderr, "%s: cannot write the trace to %s\n", prog, t->profile);
            return 1;
        }
        if (t->path == t->own_path)
            remove(t->own_path);
        printf("%s: trace written to %s\n", net->name, t->profile);
    }
    return 0;
}

/* ---- .npy (NumPy's format 1.0-3.0: magic, version, header length, a Python dict literal, the data) ---- */

static int npy_fail(char *err, size_t errlen, const char *path, const char *why)
{
    snprintf(err, errlen, "%s: %s", path, why);
    return -1;
}

/* The value after 'key': in the header dict, or NULL. */
static const char *npy_field(const char *header, const char *key)
{
    const char *p = strstr(header, key);
    if (!p)
        return NULL;
    p = strchr(p + strlen(key), ':');
    if (!p)
        return NULL;
    p++;
    while (*p == ' ')
        p++;
    return p;
}

int mxcc_npy_read_f32(const char *path, float **data, int *ndim, long long *shape, char *err, size_t errlen)
{
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return npy_fail(err, errlen, path, "cannot open");
    unsigned char pre[12];
    int rc = -1;
    char *header = NULL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) || pre[6] < 1 || pre[6] > 3) {
        npy_fail(err, errlen, path, "not a .npy file");
        goto done;
    }
    size_t hlen = pre[8] | (size_t)pre[9] << 8;
    if (pre[6] >= 2) {          /* a 4-byte header length */
        if (fread(pre + 10, 1, 2, f) != 2) {
            npy_fail(err, errlen, path, "truncated header");
            goto done;
        }
        hlen |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    }
    if (hlen > (1u << 20) || !(header = calloc(hlen + 1, 1)) || fread(header, 1, hlen, f) != hlen) {
        npy_fail(err, errlen, path, "truncated or oversized header");
        goto done;
    }
    const char *descr = npy_field(header, "'descr'"), *order = npy_field(header, "'fortran_order'"),
               *shp = npy_field(header, "'shape'");
    int f64 = 0;
    if (descr && !strncmp(descr, "'<f8'", 5))
        f64 = 1;
    else if (!descr || strncmp(descr, "'<f4'", 5)) {
        npy_fail(err, errlen, path, "not float32 ('<f4'): save it with x.astype(np.float32)");
        goto done;
    }
    if (!order || strncmp(order, "False", 5)) {
        npy_fail(err, errlen, path, "Fortran order: save it with np.ascontiguousarray(x)");
        goto done;
    }
    if (!shp || *shp != '(') {
        npy_fail(err, errlen, path, "no shape in the header");
        goto done;
    }
    *ndim = 0;
    size_t count = 1;
    for (const char *p = shp + 1; *p && *p != ')';) {
        char *end;
        const long long d = strtoll(p, &end, 10);
        if (end == p || d < 0 || *ndim >= 8 || (d && count > SIZE_MAX / 8 / (size_t)d)) {
            npy_fail(err, errlen, path, "a shape of more than 8 dims, or a bad one");
            goto done;
        }
        shape[(*ndim)++] = d;
        count *= (size_t)d;
        p = end;
        while (*p == ',' || *p == ' ')
            p++;
    }
    const size_t unit = f64 ? 8 : 4;
    unsigned char *raw = malloc(count * unit + 1);
    if (!raw || fread(raw, unit, count, f) != count) {
        free(raw);
        npy_fail(err, errlen, path, "truncated data");
        goto done;
    }
    if (f64) {
        float *out = malloc(count * sizeof(float) + 1);
        for (size_t i = 0; out && i < count; i++) {
            double v;
            memcpy(&v, raw + 8 * i, 8);
            out[i] = (float)v;
        }
        free(raw);
        raw = (unsigned char *)out;
        if (!out) {
            npy_fail(err, errlen, path, "out of memory");
            goto done;
        }
    }
    *data = (float *)raw;
    rc = 0;
done:
    free(header);
    fclose(f);
    return rc;
}

int mxcc_npy_write_f32(const char *path, const float *data, int ndim, const long long *shape, char *err,
                       size_t errlen)
{
    char dict[512];
    size_t n = (size_t)snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    size_t count = 1;
    for (int d = 0; d < ndim && n < sizeof dict; d++) {
        n += (size_t)snprintf(dict + n, sizeof dict - n, "%lld%s", shape[d], d + 1 < ndim ? ", " : ndim == 1 ? "," : "");
        count *= (size_t)shape[d];
    }
    if (n < sizeof dict)
        n += (size_t)snprintf(dict + n, sizeof dict - n, "), }");
    if (n + 64 >= sizeof dict)
        return npy_fail(err, errlen, path, "shape too long for a header");
    while ((10 + n + 1) % 64)     /* the data starts 64-byte aligned, as numpy writes it */
        dict[n++] = ' ';
    dict[n++] = '\n';
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xFF), (unsigned char)(n >> 8)};
    FILE *f = fopen(path, "wb");
    if (!f)
        return npy_fail(err, errlen, path, "cannot write");
    const int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, n, f) == n &&
                   fwrite(data, sizeof(float), count, f) == count;
    if (fclose(f) != 0 || !ok)
        return npy_fail(err, errlen, path, "cannot write");
    return 0;
}
