/* The thread pool's simulation (runtime_c/pool/mxcc_pool.h, mxcc_pool_simulate): the claiming rule on fixed
 * chunk times (mxcc_pool_sim_schedule), then jobs under simulation: every chunk once, in the calling thread as
 * worker 0 with mxcc_pool_in_chunk() true, a nested job part of its chunk, the accumulators' counts and
 * bounds (no timing: only what holds whatever the chunks take), and the pool back to normal once it is off.
 * Built by tests/runtime/test_pool_simulate.py plain and with OpenMP (where the pool is not selected: a
 * simulation runs the job anyway). Prints "ok" or what failed, exit 1. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pool/mxcc_pool.h"

static int failed;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            printf("FAILED line %d: %s\n", __LINE__, #cond);                 \
            failed = 1;                                                      \
        }                                                                    \
    } while (0)

static void check_schedule(void)
{
    /* chunk c < threads on thread c; later chunks, in order, on the least loaded thread (lowest id of equals) */
    const uint64_t a[] = {5, 3, 4, 1};            /* t0 5, t1 3; 4 -> t1 (7); 1 -> t0 (6) */
    CHECK(mxcc_pool_sim_schedule(a, 4, 2) == 7);
    const uint64_t b[] = {1, 8, 2, 2, 2, 2};      /* t0 1, t1 8: every later chunk on t0 (3, 5, 7, 9) */
    CHECK(mxcc_pool_sim_schedule(b, 6, 2) == 9);
    CHECK(mxcc_pool_sim_schedule(b, 6, 1) == 17); /* one thread: the sum */
    CHECK(mxcc_pool_sim_schedule(b, 6, 0) == 17); /* at least one thread */
    CHECK(mxcc_pool_sim_schedule(b, 2, 64) == 8); /* no more threads than chunks: the longest chunk */
    CHECK(mxcc_pool_sim_schedule(b, 0, 4) == 0);
    const uint64_t ten[] = {10, 10, 10, 10, 10};  /* 5 equal chunks on 4 threads: one thread runs two */
    CHECK(mxcc_pool_sim_schedule(ten, 5, 4) == 20);
    CHECK(mxcc_pool_sim_schedule(ten, 4, 4) == 10);
    uint64_t many[64];
    for (int c = 0; c < 64; c++)
        many[c] = 3;
    CHECK(mxcc_pool_sim_schedule(many, 64, 16) == 12);
    CHECK(mxcc_pool_sim_schedule(many, 64, 255) == 3);
    /* the claim order, not the best packing: {6, 6} then {4, 4, 4} on 2 threads is 6+4+4 = 14 (best: 12) */
    const uint64_t c[] = {6, 6, 4, 4, 4};
    CHECK(mxcc_pool_sim_schedule(c, 5, 2) == 14);
}

typedef struct job {
    int hits[64];
    int bad;
    pthread_t caller;
    long nested;
} job;

static void nested_chunk(void *arg, long c, int worker)
{
    job *j = arg;
    j->nested += c + 1;
    if (worker != 0 || !mxcc_pool_in_chunk() || !pthread_equal(pthread_self(), j->caller))
        j->bad = 1;
}

static void chunk(void *arg, long c, int worker)
{
    job *j = arg;
    j->hits[c]++;
    if (worker != 0 || !mxcc_pool_in_chunk() || !pthread_equal(pthread_self(), j->caller))
        j->bad = 1;
    if (c == 1)              /* a job called from a chunk: part of this chunk, not a job of its own */
        mxcc_parallel_chunks(3, 8, nested_chunk, j);
    for (volatile int spin = 0; spin < 2000 * (int)(c + 1); spin++) {
    }
}

static int run(long chunks, int threads)
{
    job j;
    memset(&j, 0, sizeof j);
    j.caller = pthread_self();
    mxcc_parallel_chunks(chunks, threads, chunk, &j);
    int ok = !j.bad && !mxcc_pool_in_chunk() && j.nested == (chunks > 1 ? 6 : 0);
    for (long c = 0; c < chunks; c++)
        ok = ok && j.hits[c] == 1;
    return ok;
}

static void count_chunk(void *arg, long c, int worker)
{
    (void)worker;
    atomic_fetch_add(&((_Atomic int *)arg)[c], 1);
}

static void check_simulation(void)
{
    mxcc_pool_sim s;
    mxcc_pool_simulate(16);
    CHECK(mxcc_pool_simulating() == 16);
    CHECK(run(10, 4));
    CHECK(run(16, 16));
    CHECK(run(1, 8));
    mxcc_pool_sim_take(&s);
    CHECK(s.jobs == 3 && s.chunks == 27 && s.max_chunks == 16);
    CHECK(s.min_threads == 4 && s.max_threads == 16);
    CHECK(s.sim_ns <= s.serial_ns && s.sim_ns > 0);
    mxcc_pool_sim_take(&s);  /* taken: cleared */
    CHECK(s.jobs == 0 && s.chunks == 0 && s.serial_ns == 0 && s.sim_ns == 0 && s.max_threads == 0);
    CHECK(run(7, 1));        /* one thread: its time on one thread is its serial time */
    mxcc_pool_sim_take(&s);
    CHECK(s.jobs == 1 && s.sim_ns == s.serial_ns && s.min_threads == 1);
    CHECK(run(5, 2));
    mxcc_pool_simulate(0);   /* off, and the accumulators cleared */
    CHECK(mxcc_pool_simulating() == 0);
    mxcc_pool_sim_take(&s);
    CHECK(s.jobs == 0);
    mxcc_pool_enable(1);     /* a real job again, on the pool: every chunk once, nothing accumulated */
    _Atomic int hits[8] = {0};
    mxcc_parallel_chunks(8, 2, count_chunk, hits);
    for (int c = 0; c < 8; c++)
        CHECK(atomic_load(&hits[c]) == 1);
    mxcc_pool_sim_take(&s);
    CHECK(s.jobs == 0);
}

int main(void)
{
    check_schedule();
    check_simulation();
    if (failed)
        return 1;
    printf("ok\n");
    return 0;
}
