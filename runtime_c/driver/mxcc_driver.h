/* The standalone executables of every network, as plain C over its descriptor (mxcc_net, mxcc_runtime.h).
 * A generated <net>_bench.c or <net>_train.c is a main of one line that calls one of these with <net>_net
 * (and, for training, the program's constants): the code is written, read and tested once, here.
 *
 *   bench.c   <net>_bench: times forwards on pseudo-random inputs and params, or real ones (--params, --input);
 *             --output, --timeline / --profile
 *   train.c   <net>_train: MXNet's C++ MLP example (MNIST, one step per batch, accuracy per epoch)
 *   simulate.c  the bench's --simulate-threads: how the forward's parallel work would split over T threads
 *   common.c  what both share: options, the timeline and the trace, .npy files
 */
#ifndef MXCC_DRIVER_H
#define MXCC_DRIVER_H

#include <stdio.h>

#include "mxcc_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

int mxcc_bench_main(const mxcc_net *net, int argc, char **argv);

/* ---- shared by both programs (common.c) ---- */

const char *mxcc_arg_str(int argc, char **argv, const char *flag, const char *dflt);   /* "--flag VALUE" */
/* Every VALUE of a repeated "--flag VALUE", up to max, into out; how many there are. */
int mxcc_arg_all(int argc, char **argv, const char *flag, const char **out, int max);
double mxcc_now_seconds(void);                                                         /* CLOCK_MONOTONIC */

/* --timeline FILE: each kernel call's (and parameter update's) [t0, t1) as raw mxcc_prof_event records, drained
 * from the context after every forward or step; --profile FILE: a Chrome trace made from that timeline. */
typedef struct mxcc_timeline {
    const char *path, *profile;      /* NULL: not asked for */
    char own_path[4096];             /* "<profile>.timeline" when only --profile is given (removed at the end) */
    FILE *file;
    mxcc_prof_event *events;         /* one forward's or step's events */
    uint32_t capacity;
} mxcc_timeline;
void mxcc_timeline_args(mxcc_timeline *t, int argc, char **argv);
int mxcc_timeline_start(mxcc_timeline *t, const mxcc_net *net, mxcc_ctx *ctx, const char *prog);   /* 0: ok */
void mxcc_timeline_drain(mxcc_timeline *t, mxcc_ctx *ctx);
int mxcc_timeline_finish(mxcc_timeline *t, const mxcc_net *net, const char *prog);                 /* 0: ok */

/* --simulate-threads T (simulate.c): the pool runs every job's chunks serially, timed (mxcc_pool_simulate), and
 * the profiler's hook takes its accumulators at each kernel call's end, summing them per kernel; after the timed
 * forwards, a table (and with --simulate-json FILE, the same as JSON; FILE "-": standard output). Jobs that end
 * between two kernel calls count towards the next call; those after the forward's last call, towards no kernel. */
typedef struct mxcc_sim_kernel {
    mxcc_pool_sim jobs;              /* its jobs, summed over the forwards since the last reset */
    uint64_t wall_ns;                /* its calls' time, summed (the profiler's events) */
} mxcc_sim_kernel;
typedef struct mxcc_simulation {
    int threads;                     /* T; 0: not asked for */
    const char *json;                /* --simulate-json FILE, or NULL */
    int num_kernels;                 /* the network's num_names */
    mxcc_sim_kernel *kernels;        /* by kernel index */
    mxcc_pool_sim between;           /* jobs that ended outside every kernel call */
    mxcc_prof_event *events;         /* a forward's events, drained after it when no timeline drains them */
    uint32_t capacity;
} mxcc_simulation;
/* The options; 0, or 2 (a usage error, printed). The caller then sets the thread count to T, selects the pool
 * and starts the simulation (mxcc_pool_simulate) before it creates the context (whose per-thread buffers are
 * sized for the thread count). */
int mxcc_simulate_args(mxcc_simulation *s, int argc, char **argv);
/* Profiling on (with a buffer of its own when there is no timeline) and the hook set; 0, or 1 (printed). */
int mxcc_simulate_start(mxcc_simulation *s, const mxcc_net *net, mxcc_ctx *ctx, int timeline, const char *prog);
void mxcc_simulate_after_forward(mxcc_simulation *s, mxcc_ctx *ctx);
void mxcc_simulate_reset(mxcc_simulation *s);     /* forget the forwards so far (the warm-up) */
/* The table of `forwards` forwards that took forward_us each, and the JSON; 0, or 1 (printed). Frees s. */
int mxcc_simulate_report(mxcc_simulation *s, const mxcc_net *net, long forwards, double forward_us, const char *prog);

/* s as a JSON string, quoted and escaped (prof_trace.c). */
void mxcc_json_string(FILE *f, const char *s);

/* How <net>_train initialises one parameter or aux state (mxcc/codegen/lower.py, lower_train_program). */
typedef enum { MXCC_INIT_ZEROS, MXCC_INIT_ONES, MXCC_INIT_UNIFORM } mxcc_init_kind;
typedef struct mxcc_train_init {
    int slot;
    mxcc_init_kind kind;
    double scale;            /* MXCC_INIT_UNIFORM: U(-scale, scale) (Xavier: sqrt(3 / ((fan_in + fan_out) / 2))) */
} mxcc_train_init;

/* One float of ctx->hyper, in the optimizer update's order (mxcc/train/optimizer.py). */
typedef struct mxcc_train_hyper {
    const char *name;
    const char *flag;        /* the option that overrides it ("--lr"), or NULL: fixed */
    double value;            /* the default: the optimizer's first update */
} mxcc_train_hyper;

/* What <net>_train knows about its network: a classifier with one image input, one label per image and one
 * [batch, classes] output. */
typedef struct mxcc_train_config {
    int data_slot, label_slot, output_slot;
    long batch, sample, classes;     /* sample: values per image */
    const char *optimizer;
    int num_inits;
    const mxcc_train_init *inits;
    int num_hyper;
    const mxcc_train_hyper *hyper;
    int num_unused_flags;
    const char *const *unused_flags; /* options of the program this optimizer has no hyper-parameter for */
} mxcc_train_config;

int mxcc_train_main(const mxcc_net *net, const mxcc_train_config *cfg, int argc, char **argv);

/* NumPy .npy files of float32 (the benchmark's --input and --output): C order, little-endian '<f4' (a '<f8'
 * file is read and converted). 0, or -1 with a message in err; *data is malloc'd, shape has room for 8 dims. */
int mxcc_npy_read_f32(const char *path, float **data, int *ndim, long long *shape, char *err, size_t errlen);
int mxcc_npy_write_f32(const char *path, const float *data, int ndim, const long long *shape, char *err,
                       size_t errlen);

#ifdef __cplusplus
}
#endif
#endif /* MXCC_DRIVER_H */
