/* A C client of MXNet's predict API that knows nothing of mxcc: it includes <mxnet/c_predict_api.h> and links
 * whatever library implements it (tests/capi/test_predict_api.py builds it against a network's lib<net>.a and
 * lib<net>.so).
 *
 *   predict_client run     SYMBOL PARAMS NAME SHAPE IN.bin OUT.bin   forward IN (raw float32), write the output
 *   predict_client create  SYMBOL PARAMS NAME SHAPE                  "created", or "refused: <MXGetLastError>"
 *   predict_client badsize SYMBOL PARAMS NAME SHAPE                  MXPredSetInput with one float too few
 *   predict_client threads SYMBOL PARAMS NAME SHAPE IN.bin OUT.bin N MXPredCreateMultiThread: N threads, each
 *       running 20 forwards on its own predictor at once; every output must equal OUT.bin (written by run)
 *   predict_client api     SYMBOL PARAMS NAME SHAPE IN.bin OUT.bin OUTKEY MEAN.nd   the rest of the API: one line
 *       per call, "ok <what>" or "refused <what>: <message>"
 * SHAPE is "2,1,28,28". Exit status 0 when the API behaved as the mode expects. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mxnet/c_predict_api.h>

static char *read_file(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)*size + 1);
    if (fread(buf, 1, (size_t)*size, f) != (size_t)*size) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(2);
    }
    buf[*size] = '\0';
    fclose(f);
    return buf;
}

typedef struct net_args {
    char *json, *params;
    long params_size;
    const char *name;
    mx_uint shape[8], ndim, size;
} net_args;

static void parse(net_args *a, char **argv)
{
    long n;
    a->json = read_file(argv[2], &n);
    a->params = read_file(argv[3], &a->params_size);
    a->name = argv[4];
    a->ndim = 0;
    a->size = 1;
    for (char *p = argv[5]; *p && a->ndim < 8; p = strchr(p, ',') ? strchr(p, ',') + 1 : p + strlen(p)) {
        a->shape[a->ndim] = (mx_uint)strtoul(p, NULL, 10);
        a->size *= a->shape[a->ndim++];
    }
}

static int create(const net_args *a, int count, PredictorHandle *out)
{
    const char *keys[1] = {a->name};
    const mx_uint indptr[2] = {0, a->ndim};
    if (count == 1)
        return MXPredCreate(a->json, a->params, (int)a->params_size, 1, 0, 1, keys, indptr, a->shape, out);
    return MXPredCreateMultiThread(a->json, a->params, (int)a->params_size, 1, 0, 1, keys, indptr, a->shape, count,
                                   out);
}

/* One forward of `in`; the output (its size in *n) in a new buffer. */
static float *predict(PredictorHandle h, const net_args *a, const float *in, mx_uint *n)
{
    mx_uint *shape, ndim;
    if (MXPredSetInput(h, a->name, in, a->size) || MXPredForward(h) || MXPredGetOutputShape(h, 0, &shape, &ndim)) {
        fprintf(stderr, "predict failed: %s\n", MXGetLastError());
        return NULL;
    }
    *n = 1;
    for (mx_uint d = 0; d < ndim; d++)
        *n *= shape[d];
    float *out = malloc(*n * sizeof(float));
    if (MXPredGetOutput(h, 0, out, *n)) {
        fprintf(stderr, "MXPredGetOutput failed: %s\n", MXGetLastError());
        return NULL;
    }
    return out;
}

typedef struct job {
    PredictorHandle h;
    const net_args *a;
    const float *in, *expect;
    mx_uint n;
    int ok;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    j->ok = 1;
    for (int it = 0; it < 20 && j->ok; it++) {
        mx_uint n;
        float *out = predict(j->h, j->a, j->in, &n);
        j->ok = out && n == j->n && !memcmp(out, j->expect, n * sizeof(float));
        free(out);
    }
    return NULL;
}

static void report(const char *what, int rc)
{
    if (rc)
        printf("refused %s: %s\n", what, MXGetLastError());
    else
        printf("ok %s\n", what);
}

static void monitor(const char *name, NDArrayHandle arr, void *user) { (void)name, (void)arr, (void)user; }

/* Every other call of the API, once each. */
static int api_tour(const net_args *a, const float *in, const char *expect_path, const char *out_key,
                    const char *mean_path)
{
    const char *keys[1] = {a->name};
    const mx_uint indptr[2] = {0, a->ndim};
    const char *dtype_names[1] = {a->name};
    int dtype = 0, step_left = -1;
    long out_size, mean_size;
    float *expect = (float *)read_file(expect_path, &out_size);
    PredictorHandle h = NULL, h2 = NULL, h3 = NULL;
    mx_uint n;

    report("dev_type 2", MXPredCreate(a->json, a->params, (int)a->params_size, 2, 0, 1, keys, indptr, a->shape, &h));
    report("CreateEx float32", MXPredCreateEx(a->json, a->params, (int)a->params_size, 1, 0, 1, keys, indptr,
                                              a->shape, 1, dtype_names, &dtype, &h));
    MXPredFree(h);
    dtype = 2;
    report("CreateEx float16", MXPredCreateEx(a->json, a->params, (int)a->params_size, 1, 0, 1, keys, indptr,
                                              a->shape, 1, dtype_names, &dtype, &h));
    const char *bad_out[1] = {"no_such_node"}, *good_out[1] = {out_key};
    report("PartialOut no_such_node", MXPredCreatePartialOut(a->json, a->params, (int)a->params_size, 1, 0, 1, keys,
                                                             indptr, a->shape, 1, bad_out, &h));
    report("PartialOut output", MXPredCreatePartialOut(a->json, a->params, (int)a->params_size, 1, 0, 1, keys,
                                                       indptr, a->shape, 1, good_out, &h));
    report("GetOutputType", MXPredGetOutputType(h, 0, &dtype) || dtype != 0);
    report("GetOutputType index 1", MXPredGetOutputType(h, 1, &dtype));
    report("SetMonitorCallback", MXPredSetMonitorCallback(h, monitor, NULL, true));
    report("PartialForward step 0", MXPredSetInput(h, a->name, in, a->size) || MXPredPartialForward(h, 0, &step_left)
                                    || step_left != 0);
    report("PartialForward step 1", MXPredPartialForward(h, 1, &step_left));
    float *out = predict(h, a, in, &n);
    report("PartialOut output equals", !out || (long)n * 4 != out_size || memcmp(out, expect, (size_t)out_size));
    free(out);
    report("Reshape same shape", MXPredReshape(1, keys, indptr, a->shape, h, &h2));
    MXPredFree(h);          /* the reshaped predictor keeps the weights */
    out = predict(h2, a, in, &n);
    report("Reshape output equals", !out || memcmp(out, expect, (size_t)out_size));
    free(out);
    mx_uint other[8];
    memcpy(other, a->shape, sizeof other);
    other[0] += 1;
    report("Reshape other batch", MXPredReshape(1, keys, indptr, other, h2, &h3));
    MXPredFree(h2);
    char *mean = read_file(mean_path, &mean_size);
    NDListHandle l;
    mx_uint len, ndim;
    const char *key;
    const mx_float *data;
    const mx_uint *shape;
    report("NDListCreate", MXNDListCreate(mean, (int)mean_size, &l, &len) || len != 1);
    report("NDListGet", MXNDListGet(l, 0, &key, &data, &shape, &ndim));
    printf("ndlist %s %u", key, ndim);
    for (mx_uint d = 0; d < ndim; d++)
        printf(" %u", shape[d]);
    printf(" %.6f\n", data[0]);
    report("NDListGet index 1", MXNDListGet(l, 1, &key, &data, &shape, &ndim));
    MXNDListFree(l);
    report("NDListCreate truncated", MXNDListCreate(mean, (int)mean_size - 3, &l, &len));
    free(mean);
    free(expect);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: %s run|create|badsize|threads SYMBOL PARAMS NAME SHAPE [IN OUT [N]]\n", argv[0]);
        return 2;
    }
    net_args a;
    parse(&a, argv);
    const char *mode = argv[1];
    PredictorHandle h = NULL;
    if (!strcmp(mode, "create") || !strcmp(mode, "badsize")) {
        if (create(&a, 1, &h)) {
            printf("refused: %s\n", MXGetLastError());
            return !strcmp(mode, "create") ? 0 : 1;
        }
        if (!strcmp(mode, "create")) {
            printf("created\n");
            return MXPredFree(h);
        }
        float *in = calloc(a.size, sizeof(float));
        const int rc = MXPredSetInput(h, a.name, in, a.size - 1);
        printf(rc ? "refused: %s\n" : "accepted%s\n", rc ? MXGetLastError() : "");
        MXPredFree(h);
        free(in);
        return rc ? 0 : 1;
    }
    if (argc < 8)
        return 2;
    long in_size;
    float *in = (float *)read_file(argv[6], &in_size);
    if ((mx_uint)(in_size / 4) != a.size) {
        fprintf(stderr, "%s has %ld floats, the shape %u\n", argv[6], in_size / 4, a.size);
        return 2;
    }
    if (!strcmp(mode, "run")) {
        mx_uint n, *shape, ndim;
        if (create(&a, 1, &h)) {
            fprintf(stderr, "MXPredCreate failed: %s\n", MXGetLastError());
            return 1;
        }
        float *out = predict(h, &a, in, &n);
        if (!out || MXPredGetOutputShape(h, 0, &shape, &ndim))
            return 1;
        printf("output shape");
        for (mx_uint d = 0; d < ndim; d++)
            printf(" %u", shape[d]);
        printf("\n");
        FILE *f = fopen(argv[7], "wb");
        fwrite(out, sizeof(float), n, f);
        fclose(f);
        free(out);
        return MXPredFree(h);
    }
    if (!strcmp(mode, "api") && argc >= 10)
        return api_tour(&a, in, argv[7], argv[8], argv[9]);
    if (!strcmp(mode, "threads") && argc >= 9) {
        const int count = atoi(argv[8]);
        long out_size;
        float *expect = (float *)read_file(argv[7], &out_size);
        PredictorHandle *hs = calloc((size_t)count, sizeof *hs);
        job *jobs = calloc((size_t)count, sizeof *jobs);
        pthread_t *th = calloc((size_t)count, sizeof *th);
        if (create(&a, count, hs)) {
            fprintf(stderr, "MXPredCreateMultiThread failed: %s\n", MXGetLastError());
            return 1;
        }
        for (int i = 0; i < count; i++) {
            jobs[i] = (job){hs[i], &a, in, expect, (mx_uint)(out_size / 4), 0};
            pthread_create(&th[i], NULL, run_job, &jobs[i]);
        }
        int ok = 1;
        for (int i = 0; i < count; i++) {
            pthread_join(th[i], NULL);
            ok &= jobs[i].ok;
        }
        for (int i = 0; i < count; i++)     /* freed first to last: the first predictor holds the weights */
            MXPredFree(hs[i]);
        printf(ok ? "threads ok\n" : "threads differ\n");
        return !ok;
    }
    return 2;
}
