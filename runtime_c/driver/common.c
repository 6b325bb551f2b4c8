/* What both standalone programs share: their options and the --timeline / --profile recording
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
