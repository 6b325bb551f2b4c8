/* The profiler's event buffer: one begin/end pair per kernel call, recorded at the call site.
 *
 * Generated code brackets each fused-node call with mxcc_prof_begin/end: when profiling is off that is a
 * load and a predictable branch; compiled with profile=False the calls are not generated at all. Events
 * carry only the kernel index, phase and batch; names, ops, shapes and FLOPs come from the network's tables.
 * A full buffer counts dropped events, it never grows or crashes. */
#ifndef MXCC_PROF_H
#define MXCC_PROF_H

#include <stdint.h>
#include <time.h>

enum { MXCC_PHASE_FORWARD = 0, MXCC_PHASE_BACKWARD = 1, MXCC_PHASE_UPDATE = 2 };

typedef struct mxcc_prof_event {
    int32_t kernel;      /* index into <net>_node_names */
    int32_t phase;       /* MXCC_PHASE_* */
    uint64_t t0_ns;      /* CLOCK_MONOTONIC */
    uint64_t t1_ns;
    int32_t batch;       /* the call's batch (a dynamic-batch network: ctx->batch); 0: compiled for one batch */
    int32_t reserved;
} mxcc_prof_event;

typedef struct mxcc_prof {
    int enabled;                 /* checked at every call site */
    uint32_t capacity;
    uint32_t count;
    uint64_t dropped;            /* events lost because the buffer was full */
    mxcc_prof_event *events;
    /* When set, called with each event as its call ends, recorded or dropped (mxcc_prof_set_hook): the bench's
     * --simulate-threads takes the thread pool's accumulators there, kernel by kernel. */
    void (*hook)(void *arg, const mxcc_prof_event *ev);
    void *hook_arg;
} mxcc_prof;

static inline uint64_t mxcc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Record the event of a kernel call that began at t0 and ends now (out of line: a network has a call site per
 * kernel, and gcc would otherwise compile this body at each of them). */
void mxcc_prof_push(mxcc_prof *p, int kernel, int phase, uint64_t t0, long batch);

#endif /* MXCC_PROF_H */
