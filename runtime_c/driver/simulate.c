/* <net>_bench --simulate-threads T [--simulate-json FILE]: how a forward's parallel work would split over T
 * threads, measured on a machine of fewer cores (mxcc_driver.h). The pool runs each job's chunks one after
 * another in the caller, timing each, and places them as its claims would on T quiet cores
 * (mxcc_pool_simulate, runtime_c/pool/mxcc_pool.h); the profiler's hook takes those sums at the end of every
 * kernel call, so each kernel gets its own jobs. Per kernel with jobs:
 *   serial   its chunks' time: what one thread spends in its jobs
 *   sim      the jobs' time on their threads: the largest load of each job, summed
 *   eff.     (serial / T) / sim: 1 when every job splits into T equal loads
 *   lost     sim - serial / T: what the split costs over a perfect one, per forward
 *   outside  the call's time outside its jobs (packing, a serial tail): one thread in a real run too
 * The total adds the time outside every job (serial kernels, the calls' own serial parts), which a real run at
 * T threads spends too: outside + sim estimates a forward at T threads on a machine that has them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxcc_driver.h"

int mxcc_simulate_args(mxcc_simulation *s, int argc, char **argv)
{
    memset(s, 0, sizeof *s);
    const char *t = mxcc_arg_str(argc, argv, "--simulate-threads", NULL);
    s->json = mxcc_arg_str(argc, argv, "--simulate-json", NULL);
    if (!t) {
        if (!s->json)
            return 0;
        fprintf(stderr, "%s: --simulate-json needs --simulate-threads T\n", argv[0]);
        return 2;
    }
    char *end;
    const long v = strtol(t, &end, 10);
    if (*end || v < 1 || v > 255) {
        fprintf(stderr, "%s: --simulate-threads %s: expected 1..255 threads\n", argv[0], t);
        return 2;
    }
    int conflict = mxcc_arg_str(argc, argv, "--threads", NULL) != NULL;
    for (int i = 1; i < argc; i++)
        conflict |= !strcmp(argv[i], "--no-pool");
    if (conflict) {
        fprintf(stderr, "%s: --simulate-threads T sets the thread count to T and runs on the pool: drop --threads "
                        "and --no-pool\n", argv[0]);
        return 2;
    }
    s->threads = (int)v;
    return 0;
}

/* The profiler's hook: a kernel call has ended; the jobs since the last take are its own. */
static void on_call_end(void *arg, const mxcc_prof_event *ev)
{
    mxcc_simulation *s = arg;
    mxcc_pool_sim j;
    mxcc_pool_sim_take(&j);
    if (ev->kernel < 0 || ev->kernel >= s->num_kernels) {
        mxcc_pool_sim_add(&s->between, &j);
        return;
    }
    mxcc_pool_sim_add(&s->kernels[ev->kernel].jobs, &j);
    s->kernels[ev->kernel].wall_ns += ev->t1_ns - ev->t0_ns;
}

int mxcc_simulate_start(mxcc_simulation *s, const mxcc_net *net, mxcc_ctx *ctx, int timeline, const char *prog)
{
    s->num_kernels = net->num_names;
    s->kernels = calloc((size_t)(net->num_names > 0 ? net->num_names : 1), sizeof *s->kernels);
    int ok = s->kernels != NULL;
    if (ok && !timeline) {       /* the timeline's buffer serves otherwise (drained by it) */
        s->capacity = (uint32_t)(net->num_names > 0 ? net->num_names : 1);
        ok = (s->events = malloc(s->capacity * sizeof *s->events)) && mxcc_prof_set_capacity(ctx, s->capacity) == 0;
    }
    if (!ok) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return 1;
    }
    mxcc_prof_set_hook(ctx, on_call_end, s);
    mxcc_prof_set_enabled(ctx, 1);
    return 0;
}

void mxcc_simulate_after_forward(mxcc_simulation *s, mxcc_ctx *ctx)
{
    if (s->events)
        mxcc_prof_drain(ctx, s->events, s->capacity);
    mxcc_pool_sim j;             /* jobs after the forward's last kernel call */
    mxcc_pool_sim_take(&j);
    mxcc_pool_sim_add(&s->between, &j);
}

void mxcc_simulate_reset(mxcc_simulation *s)
{
    memset(s->kernels, 0, (size_t)s->num_kernels * sizeof *s->kernels);
    memset(&s->between, 0, sizeof s->between);
    mxcc_pool_sim discard;
    mxcc_pool_sim_take(&discard);
}

/* (serial / T) / sim: 1 for a perfect split (and for no time at all) */
static double efficiency(const mxcc_pool_sim *j, int threads)
{
    return j->sim_ns ? (double)j->serial_ns / threads / (double)j->sim_ns : 1.0;
}

static void print_table(const mxcc_simulation *s, const mxcc_net *net, long forwards, double forward_us,
                        const mxcc_pool_sim *all)
{
    const int T = s->threads;
    const double per = 1e-3 / (double)forwards;     /* ns summed over the forwards -> us per forward */
    printf("%s: simulated on %d threads, %ld forwards (chunks timed one by one here, placed as the pool claims them); "
           "us per forward\n", net->name, T, forwards);
    printf("%6s  %-36s %6s %6s %7s %10s %10s %6s %9s %9s\n", "kernel", "name", "jobs", "chunks", "threads",
           "serial", "sim", "eff.", "lost", "outside");
    for (int k = 0; k < s->num_kernels; k++) {
        const mxcc_sim_kernel *r = &s->kernels[k];
        if (!r->jobs.jobs)
            continue;
        char threads[24];
        if (r->jobs.min_threads == r->jobs.max_threads)
            snprintf(threads, sizeof threads, "%d", r->jobs.max_threads);
        else
            snprintf(threads, sizeof threads, "%d-%d", r->jobs.min_threads, r->jobs.max_threads);
        const double outside = r->wall_ns > r->jobs.serial_ns ? (double)(r->wall_ns - r->jobs.serial_ns) * per : 0;
        printf("%6d  %-36s %6.3g %6ld %7s %10.1f %10.1f %6.3f %9.1f %9.1f\n", k, net->node_names[k],
               (double)r->jobs.jobs / (double)forwards, r->jobs.max_chunks, threads, (double)r->jobs.serial_ns * per,
               (double)r->jobs.sim_ns * per, efficiency(&r->jobs, T),
               ((double)r->jobs.sim_ns - (double)r->jobs.serial_ns / T) * per, outside);
    }
    if (s->between.jobs)
        printf("%6s  %-36s %6.3g %6ld %7s %10.1f %10.1f %6.3f\n", "-", "(after the last kernel call)",
               (double)s->between.jobs / (double)forwards, s->between.max_chunks, "", (double)s->between.serial_ns * per,
               (double)s->between.sim_ns * per, efficiency(&s->between, T));
    const double serial = (double)all->serial_ns * per, sim = (double)all->sim_ns * per;
    const double outside = forward_us > serial ? forward_us - serial : 0;
    printf("%6s  %-36s %6.3g %6ld %7s %10.1f %10.1f %6.3f %9.1f\n", "total", "", (double)all->jobs / (double)forwards,
           all->max_chunks, "", serial, sim, efficiency(all, T), sim - serial / T);
    printf("jobs: %.1f us here, %.1f us on %d threads (%.2fx); outside jobs: %.1f us (one thread at any T); "
           "forward: %.1f us here, about %.1f us on %d threads (%.2fx)\n", serial, sim, T, sim > 0 ? serial / sim : 1.0,
           outside, forward_us, outside + sim, T, forward_us / (outside + sim > 0 ? outside + sim : 1.0));
}

static void json_jobs(FILE *f, const mxcc_pool_sim *j, int threads, long forwards)
{
    const double per = 1e-3 / (double)forwards;
    fprintf(f, "\"jobs\": %.6g, \"chunks\": %ld, \"threads\": %d, \"min_threads\": %d, \"serial_us\": %.3f, "
               "\"sim_us\": %.3f, \"efficiency\": %.6f", (double)j->jobs / (double)forwards, j->max_chunks, j->max_threads,
            j->min_threads, (double)j->serial_ns * per, (double)j->sim_ns * per, efficiency(j, threads));
}

static int write_json(const mxcc_simulation *s, const mxcc_net *net, long forwards, double forward_us,
                      const mxcc_pool_sim *all, const char *prog)
{
    FILE *f = strcmp(s->json, "-") ? fopen(s->json, "w") : stdout;
    if (!f) {
        fprintf(stderr, "%s: cannot write %s\n", prog, s->json);
        return 1;
    }
    const double per = 1e-3 / (double)forwards;
    const double serial = (double)all->serial_ns * per, sim = (double)all->sim_ns * per;
    const double outside = forward_us > serial ? forward_us - serial : 0;
    fprintf(f, "{\"network\": ");
    mxcc_json_string(f, net->name);
    fprintf(f, ", \"threads\": %d, \"forwards\": %ld, \"forward_us\": %.3f, \"serial_us\": %.3f, \"sim_us\": %.3f, "
               "\"speedup\": %.4f, \"outside_us\": %.3f, \"estimate_us\": %.3f,\n \"kernels\": [",
            s->threads, forwards, forward_us, serial, sim, sim > 0 ? serial / sim : 1.0, outside, outside + sim);
    const char *sep = "\n  ";
    for (int k = 0; k < s->num_kernels; k++) {
        const mxcc_sim_kernel *r = &s->kernels[k];
        if (!r->jobs.jobs)
            continue;
        fprintf(f, "%s{\"index\": %d, \"name\": ", sep, k);
        mxcc_json_string(f, net->node_names[k]);
        fprintf(f, ", ");
        json_jobs(f, &r->jobs, s->threads, forwards);
        fprintf(f, ", \"outside_us\": %.3f}",
                r->wall_ns > r->jobs.serial_ns ? (double)(r->wall_ns - r->jobs.serial_ns) * per : 0.0);
        sep = ",\n  ";
    }
    fprintf(f, "],\n \"unattributed\": {");
    json_jobs(f, &s->between, s->threads, forwards);
    fprintf(f, "}}\n");
    if (f != stdout ? fclose(f) != 0 : fflush(f) != 0) {
        fprintf(stderr, "%s: cannot write %s\n", prog, s->json);
        return 1;
    }
    return 0;
}

int mxcc_simulate_report(mxcc_simulation *s, const mxcc_net *net, long forwards, double forward_us, const char *prog)
{
    mxcc_pool_sim all = s->between;
    for (int k = 0; k < s->num_kernels; k++)
        mxcc_pool_sim_add(&all, &s->kernels[k].jobs);
    print_table(s, net, forwards, forward_us, &all);
    const int rc = s->json ? write_json(s, net, forwards, forward_us, &all, prog) : 0;
    free(s->kernels);
    free(s->events);
    s->kernels = NULL;
    s->events = NULL;
    return rc;
}
