/* mxcc's own C API of one network (lenet.h: lenet_load_params, lenet_set_input, lenet_run, lenet_get_output,
 * lenet_ctx_clone), every error path, and contexts in threads (tests/capi/test_c_api.py).
 *
 *   api_client PARAMS BAD_SHAPE_PARAMS OTHER_PARAMS IN.bin OUT.bin
 *
 * Writes lenet's output for IN to OUT, and prints one line per refused call ("refused <what>: <message>") and
 * "threads ok" when 4 contexts in 4 threads (a base, two clones sharing its weights, one loading its own) gave
 * OUT bit for bit, 20 forwards each. Exit status 0 when every call behaved as expected. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lenet.h"

#define IN_SIZE (2 * 1 * 28 * 28)
#define OUT_SIZE (2 * 10)

static int failures;

static void refused(const char *what, int rc, const char *err)
{
    if (rc == 0) {
        printf("ACCEPTED %s\n", what);
        failures++;
    } else {
        printf("refused %s: %s\n", what, err);
    }
}

static void *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        exit(2);
    fseek(f, 0, SEEK_END);
    *size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(*size);
    if (fread(p, 1, *size, f) != *size)
        exit(2);
    fclose(f);
    return p;
}

typedef struct job {
    mxcc_ctx *ctx;
    const float *in, *expect;
    int ok;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    char err[512];
    float out[OUT_SIZE];
    j->ok = 1;
    for (int it = 0; it < 20 && j->ok; it++)
        j->ok = !lenet_set_input(j->ctx, "data", j->in, IN_SIZE, err, sizeof err) && !lenet_run(j->ctx, err, sizeof err)
             && !lenet_get_output(j->ctx, 0, out, OUT_SIZE, err, sizeof err) && !memcmp(out, j->expect, sizeof out);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    char err[1024];
    size_t n;
    float *in = read_all(argv[4], &n), out[OUT_SIZE], again[OUT_SIZE];
    mxcc_ctx *ctx = lenet_ctx_create(err, sizeof err);
    if (!ctx || n != IN_SIZE * sizeof(float))
        return 2;

    refused("run before params", lenet_run(ctx, err, sizeof err), err);
    refused("missing file", lenet_load_params(ctx, "/nonexistent/lenet.params", err, sizeof err), err);
    refused("another network's params", lenet_load_params(ctx, argv[3], err, sizeof err), err);
    refused("a param of the wrong shape", lenet_load_params(ctx, argv[2], err, sizeof err), err);
    unsigned char *bytes = read_all(argv[1], &n);
    refused("truncated bytes", lenet_load_params_bytes(ctx, bytes, n - 7, err, sizeof err), err);
    refused("no bytes", lenet_load_params_bytes(ctx, NULL, 0, err, sizeof err), err);
    if (lenet_load_params_bytes(ctx, bytes, n, err, sizeof err) || lenet_load_params(ctx, argv[1], err, sizeof err)) {
        printf("load failed: %s\n", err);
        return 1;
    }
    refused("run before the input", lenet_run(ctx, err, sizeof err), err);
    refused("an input that is not one", lenet_set_input(ctx, "date", in, IN_SIZE, err, sizeof err), err);
    refused("a wrong input size", lenet_set_input(ctx, "data", in, IN_SIZE - 1, err, sizeof err), err);
    if (lenet_set_input(ctx, "data", in, IN_SIZE, err, sizeof err) || lenet_run(ctx, err, sizeof err) ||
        lenet_get_output(ctx, 0, out, OUT_SIZE, err, sizeof err)) {
        printf("forward failed: %s\n", err);
        return 1;
    }
    refused("a wrong output size", lenet_get_output(ctx, 0, out, OUT_SIZE + 1, err, sizeof err), err);
    refused("an output that is not one", lenet_get_output(ctx, 1, out, OUT_SIZE, err, sizeof err), err);
    /* a failed load leaves the params the context had */
    refused("a param of the wrong shape, after a good load", lenet_load_params(ctx, argv[2], err, sizeof err), err);
    if (lenet_run(ctx, err, sizeof err) || lenet_get_output(ctx, 0, again, OUT_SIZE, err, sizeof err) ||
        memcmp(out, again, sizeof out)) {
        printf("the params changed after a failed load\n");
        failures++;
    }
    FILE *f = fopen(argv[5], "wb");
    fwrite(out, sizeof(float), OUT_SIZE, f);
    fclose(f);

    /* threads: ctx, two clones of it and a context of its own, all at once */
    mxcc_ctx *ctxs[4] = {ctx, lenet_ctx_clone(ctx, err, sizeof err), lenet_ctx_clone(ctx, err, sizeof err),
                         lenet_ctx_create(err, sizeof err)};
    if (!ctxs[1] || !ctxs[2] || !ctxs[3] || lenet_load_params(ctxs[3], argv[1], err, sizeof err)) {
        printf("contexts: %s\n", err);
        return 1;
    }
    pthread_t th[4];
    job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){ctxs[i], in, out, 0};
        pthread_create(&th[i], NULL, run_job, &jobs[i]);
    }
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ok &= jobs[i].ok;
    }
    printf(ok ? "threads ok\n" : "threads differ\n");
    for (int i = 3; i >= 0; i--)          /* clones before their base */
        lenet_ctx_free(ctxs[i]);
    free(in);
    free(bytes);
    return failures || !ok;
}
