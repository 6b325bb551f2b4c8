/* The standalone benchmark of every network: <net>_bench is this file, linked with the network and a main of
 * one line (templates/bench.c.j2) that passes the network's descriptor (<net>_net, mxcc_net).
 *   <net>_bench [--iters N | --seconds S] [--warmup N] [--threads T] [--pool | --no-pool] [--batch N] [--params FILE]
 *               [--input [NAME=]X.npy]...
 *               [--output [NAME=]Y.npy]... [--timeline FILE] [--profile FILE]
 *               [--simulate-threads T [--simulate-json FILE]]
 * Binds every input and parameter to deterministic pseudo-random values in [-0.5, 0.5) (the time of a
 * forward does not depend on the values), unless --params (an MXNet .params file, read by the C reader and
 * checked against the network: runtime_c/params/) and --input (a float32 .npy of the input's shape; NAME= for
 * a network of several inputs, else the first input) give real ones. Runs warm-up forwards, then times N
 * forwards (or as many as fit in S seconds); --output writes an output of the last forward as .npy (NAME= or
 * its index, else the first output). --timeline appends each kernel call's [t0, t1) (CLOCK_MONOTONIC ns, raw
 * mxcc_prof_event records) to FILE: `mxcc perf` uses it to place every perf sample, OpenMP workers' too, in its
 * kernel. --pool runs every kernel's parallel work on mxcc's thread pool, --no-pool as OpenMP regions (default:
 * the network's choice, runtime_c/pool/mxcc_pool.h); with --pool the pool's job counts are printed. --batch N: a
 * network compiled with a dynamic batch runs batch N (default: its maximum); --input and --output files then
 * have that batch. --simulate-threads T: how the forward's parallel work would split over T threads, on a
 * machine of any size (simulate.c): the kernels split for T threads, every job's chunks run one after another
 * here, timed, and a table gives each kernel's time on one thread and on T; --simulate-json FILE ("-": standard
 * output) writes it as JSON too. Outputs are those of a normal run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxcc_driver.h"

#define MAX_FILES 16

static int arg_int(int argc, char **argv, const char *flag, int dflt)
{
    const char *v = mxcc_arg_str(argc, argv, flag, NULL);
    return v ? atoi(v) : dflt;
}

/* One forward; with a timeline, its events go to the file. */
static void bench_forward(const mxcc_net *net, mxcc_ctx *ctx, mxcc_timeline *timeline, mxcc_simulation *sim)
{
    net->forward(ctx);
    mxcc_timeline_drain(timeline, ctx);
    if (sim->threads)
        mxcc_simulate_after_forward(sim, ctx);
}

/* "NAME=FILE" names a slot of `kind`; plain "FILE" takes the first one (of the inputs: not a label). *file is
 * the path. The slot, or -1 (message printed). */
static int slot_of(const mxcc_net *net, const char *kind, const char *arg, const char **file, const char *prog)
{
    const char *eq = strchr(arg, '=');
    *file = arg;
    if (eq) {
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - arg), arg);
        int s = mxcc_api_find_slot(net, kind, name);
        if (s < 0 && !strcmp(kind, "output")) {      /* an output by index */
            char *end;
            const long i = strtol(name, &end, 10);
            s = *end ? -1 : mxcc_api_output_slot(net, (int)i);
        }
        if (s >= 0) {
            *file = eq + 1;
            return s;
        }
    }
    for (int s = 0; s < net->num_slots; s++)
        if (!strcmp(net->slots[s].kind, kind) && !net->slots[s].optional)
            return s;
    fprintf(stderr, "%s: network '%s' has no %s for %s\n", prog, net->name, kind, arg);
    return -1;
}

/* The shape of slot s at batch n (a dynamic batch; n <= 0: the compiled shape). */
static void shape_at(const mxcc_slot_info *slot, long n, long long shape[8])
{
    for (int d = 0; d < slot->ndim; d++)
        shape[d] = slot->shape[d];
    if (n > 0 && slot->batch_factor)
        shape[slot->batch_axis] = (long long)slot->batch_factor * n;
}

/* Bind the --input files; owned[s] takes the buffers. 0, or 1 (message printed). */
static int bind_inputs(const mxcc_net *net, void **slots, void **owned, long batch, int argc, char **argv)
{
    const char *args[MAX_FILES];
    const int n = mxcc_arg_all(argc, argv, "--input", args, MAX_FILES);
    for (int i = 0; i < n && i < MAX_FILES; i++) {
        const char *file;
        const int s = slot_of(net, "input", args[i], &file, argv[0]);
        if (s < 0)
            return 1;
        float *data;
        int ndim;
        long long shape[8];
        char err[512];
        if (mxcc_npy_read_f32(file, &data, &ndim, shape, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", argv[0], err);
            return 1;
        }
        const mxcc_slot_info *slot = &net->slots[s];
        long long want[8];
        shape_at(slot, batch, want);
        int same = ndim == slot->ndim;
        for (int d = 0; same && d < ndim; d++)
            same = shape[d] == want[d];
        if (!same) {
            fprintf(stderr, "%s: %s: the shape of input '%s' is not the %s one (%d dims:", argv[0], file,
                    slot->name, batch > 0 ? "--batch" : "compiled", slot->ndim);
            for (int d = 0; d < slot->ndim; d++)
                fprintf(stderr, " %lld", want[d]);
            fprintf(stderr, ")\n");
            free(data);
            return 1;
        }
        free(owned[s]);
        slots[s] = owned[s] = data;
    }
    return 0;
}

static int write_outputs(const mxcc_net *net, void **slots, long batch, int argc, char **argv)
{
    const char *args[MAX_FILES];
    const int n = mxcc_arg_all(argc, argv, "--output", args, MAX_FILES);
    for (int i = 0; i < n && i < MAX_FILES; i++) {
        const char *file;
        const int s = slot_of(net, "output", args[i], &file, argv[0]);
        char err[512];
        if (s < 0)
            return 1;
        long long shape[8];
        shape_at(&net->slots[s], batch, shape);
        if (mxcc_npy_write_f32(file, slots[s], net->slots[s].ndim, shape, err, sizeof err)) {
            fprintf(stderr, "%s: %s\n", argv[0], err);
            return 1;
        }
    }
    return 0;
}

int mxcc_bench_main(const mxcc_net *net, int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s [--iters N | --seconds S] [--warmup N] [--threads T] [--pool | --no-pool] [--batch N] [--params FILE]"
                   " [--input [NAME=]X.npy]... [--output [NAME=]Y.npy]... [--timeline FILE] [--profile FILE]"
                   " [--simulate-threads T [--simulate-json FILE]]\n",
                   argv[0]);
            return 0;
        }
    const int iters = arg_int(argc, argv, "--iters", 100);
    const int warmup = arg_int(argc, argv, "--warmup", 10);
    const int threads = arg_int(argc, argv, "--threads", 0);
    const double seconds = atof(mxcc_arg_str(argc, argv, "--seconds", "0"));
    const char *params = mxcc_arg_str(argc, argv, "--params", NULL);
    mxcc_timeline timeline;
    mxcc_timeline_args(&timeline, argc, argv);
    const long batch = arg_int(argc, argv, "--batch", 0);
    if (batch && (!net->max_batch || batch < 1 || batch > net->max_batch)) {
        if (net->max_batch)
            fprintf(stderr, "%s: --batch %ld: expected 1..%ld, the maximum batch '%s' was compiled for\n", argv[0],
                    batch, net->max_batch, net->name);
        else
            fprintf(stderr, "%s: --batch: '%s' was compiled for one batch (compile with --dynamic-batch)\n", argv[0],
                    net->name);
        return 2;
    }
    if (iters <= 0 || warmup < 0 || seconds < 0) {
        fprintf(stderr, "%s: --iters must be positive, --warmup and --seconds non-negative\n", argv[0]);
        return 2;
    }
    mxcc_simulation sim;
    if (mxcc_simulate_args(&sim, argc, argv))
        return 2;
    int pool = -1;   /* --pool 1, --no-pool 0: over the network's choice (pool/mxcc_pool.h) */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--pool") || !strcmp(argv[i], "--no-pool"))
            pool = !strcmp(argv[i], "--pool");
    /* a simulation: the kernels split for T threads (and the context's per-thread buffers have room for T) */
    mxcc_set_num_threads(sim.threads ? sim.threads : threads);
    mxcc_pool_enable(sim.threads ? 1 : pool);
    mxcc_pool_simulate(sim.threads);
    char err[1024];
    mxcc_ctx *ctx = net->ctx_create(err, sizeof err);
    void **owned = calloc((size_t)net->num_slots + 1, sizeof *owned);   /* the buffers this program allocated */
    if (!ctx || !owned) {
        fprintf(stderr, "%s\n", ctx ? "out of memory" : err);
        return 1;
    }
    void **slots = mxcc_ctx_slots(ctx);
    if (params && mxcc_api_load_params(net, ctx, params, 0, err, sizeof err)) {   /* the context owns them */
        fprintf(stderr, "%s: %s\n", argv[0], err);
        return 1;
    }
    if (batch)
        net->set_batch(ctx, batch);
    if (bind_inputs(net, slots, owned, batch, argc, argv))
        return 1;
    unsigned seed = 12345u;
    for (int s = 0; s < net->num_slots; s++) {
        if (slots[s])
            continue;
        /* at --batch N, inputs and outputs of N samples exactly (a sanitizer build sees any access past them) */
        size_t size = net->slots[s].size;
        if (batch && net->slots[s].batch_factor)
            size = size / (size_t)net->max_batch * (size_t)batch;
        float *p = aligned_alloc(64, (size * sizeof(float) + 63) / 64 * 64);
        if (!p) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < size; i++) {
            seed = seed * 1664525u + 1013904223u;
            p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
            if (!strcmp(net->slots[s].kind, "aux"))
                p[i] += 1.0f;       /* moving variances must be positive */
        }
        slots[s] = owned[s] = p;
    }
    if (!params)
        net->prepare(ctx);
    if (mxcc_timeline_start(&timeline, net, ctx, argv[0])
        || (sim.threads && mxcc_simulate_start(&sim, net, ctx, timeline.file != NULL, argv[0])))
        return 1;
    for (int i = 0; i < warmup; i++)
        bench_forward(net, ctx, &timeline, &sim);
    if (sim.threads)
        mxcc_simulate_reset(&sim);
    const double t0 = mxcc_now_seconds();
    int done = 0;
    if (seconds > 0) {   /* run until S seconds have passed (at least one forward) */
        const double end = t0 + seconds;
        do {
            bench_forward(net, ctx, &timeline, &sim);
            done++;
        } while (mxcc_now_seconds() < end);
    } else {
        for (; done < iters; done++)
            bench_forward(net, ctx, &timeline, &sim);
    }
    const double us = (mxcc_now_seconds() - t0) * 1e6 / done;
    if (net->max_batch)
        printf("%s: %.3f us per forward (%d iters, %d threads, batch %ld of at most %ld)\n", net->name, us, done,
               mxcc_get_num_threads(), batch ? batch : net->max_batch, net->max_batch);
    else
        printf("%s: %.3f us per forward (%d iters, %d threads)\n", net->name, us, done, mxcc_get_num_threads());
    if (sim.threads && mxcc_simulate_report(&sim, net, done, us, argv[0]))
        return 1;
    if (pool == 1 && !sim.threads) {
        long jobs, alone;
        mxcc_pool_stats(&jobs, &alone);
        printf("pool: %ld jobs on several threads, %ld of them run by the caller alone, %ld woke a sleeping "
               "worker, %ld chunks taken back from a worker that lost its core; machine found oversubscribed %ld times "
               "(a thread fewer from 4 threads, workers sleeping between jobs below)\n", jobs, alone,
               mxcc_pool_wakeups(), mxcc_pool_takes(), mxcc_pool_caps());
    }
    if (mxcc_timeline_finish(&timeline, net, argv[0]) || write_outputs(net, slots, batch, argc, argv))
        return 1;
    for (int s = 0; s < net->num_slots; s++)
        free(owned[s]);
    free(owned);
    net->ctx_free(ctx);
    return 0;
}
