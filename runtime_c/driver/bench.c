/* The standalone benchmark of every network: <net>_bench is this file, linked with the network and a main of
 * one line (templates/bench.c.j2) that passes the network's descriptor (<net>_net, mxcc_net).
 *   <net>_bench [--iters N | --seconds S] [--warmup N] [--threads T] [--timeline FILE] [--profile FILE]
 * Binds every input and parameter to deterministic pseudo-random values in [-0.5, 0.5) (the time of a
 * forward does not depend on the values), runs warm-up forwards, then times N forwards (or as many as fit
 * in S seconds). --timeline appends each kernel call's [t0, t1) (CLOCK_MONOTONIC ns, raw mxcc_prof_event
 * records) to FILE: `mxcc perf` uses it to place every perf sample, OpenMP workers' too, in its kernel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxcc_driver.h"

static int arg_int(int argc, char **argv, const char *flag, int dflt)
{
    const char *v = mxcc_arg_str(argc, argv, flag, NULL);
    return v ? atoi(v) : dflt;
}

/* One forward; with a timeline, its events go to the file. */
static void bench_forward(const mxcc_net *net, mxcc_ctx *ctx, mxcc_timeline *timeline)
{
    net->forward(ctx);
    mxcc_timeline_drain(timeline, ctx);
}

int mxcc_bench_main(const mxcc_net *net, int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: %s [--iters N | --seconds S] [--warmup N] [--threads T] [--timeline FILE]"
                   " [--profile FILE]\n", argv[0]);
            return 0;
        }
    const int iters = arg_int(argc, argv, "--iters", 100);
    const int warmup = arg_int(argc, argv, "--warmup", 10);
    const int threads = arg_int(argc, argv, "--threads", 0);
    const double seconds = atof(mxcc_arg_str(argc, argv, "--seconds", "0"));
    mxcc_timeline timeline;
    mxcc_timeline_args(&timeline, argc, argv);
    if (iters <= 0 || warmup < 0 || seconds < 0) {
        fprintf(stderr, "%s: --iters must be positive, --warmup and --seconds non-negative\n", argv[0]);
        return 2;
    }
    mxcc_set_num_threads(threads);
    char err[256];
    mxcc_ctx *ctx = net->ctx_create(err, sizeof err);
    if (!ctx) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    void **slots = mxcc_ctx_slots(ctx);
    unsigned seed = 12345u;
    for (int s = 0; s < net->num_slots; s++) {
        float *p = aligned_alloc(64, (net->slots[s].size * sizeof(float) + 63) / 64 * 64);
        if (!p) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < net->slots[s].size; i++) {
            seed = seed * 1664525u + 1013904223u;
            p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
            if (!strcmp(net->slots[s].kind, "aux"))
                p[i] += 1.0f;       /* moving variances must be positive */
        }
        slots[s] = p;
    }
    net->prepare(ctx);
    if (mxcc_timeline_start(&timeline, net, ctx, argv[0]))
        return 1;
    for (int i = 0; i < warmup; i++)
        bench_forward(net, ctx, &timeline);
    const double t0 = mxcc_now_seconds();
    int done = 0;
    if (seconds > 0) {   /* run until S seconds have passed (at least one forward) */
        const double end = t0 + seconds;
        do {
            bench_forward(net, ctx, &timeline);
            done++;
        } while (mxcc_now_seconds() < end);
    } else {
        for (; done < iters; done++)
            bench_forward(net, ctx, &timeline);
    }
    const double us = (mxcc_now_seconds() - t0) * 1e6 / done;
    printf("%s: %.3f us per forward (%d iters, %d threads)\n", net->name, us, done, mxcc_get_num_threads());
    if (mxcc_timeline_finish(&timeline, net, argv[0]))
        return 1;
    for (int s = 0; s < net->num_slots; s++)
        free(slots[s]);
    net->ctx_free(ctx);
    return 0;
}
