/* mxcc's thread pool: a kernel's work in chunks that any thread may take, the caller included.
 *
 *   mxcc_parallel_chunks(chunks, threads, fn, arg)   fn(arg, c, worker) for every c in [0, chunks), on up to
 *                                                    `threads` threads; returns when all are done
 *
 * Why not an OpenMP region: a region's join waits for every thread of the team to arrive, so a thread whose
 * core is busy with another process delays every region by that process's time slice (a 2-thread forward
 * 2-40x slower on a loaded 2-vCPU machine: docs/performance.md, "OpenMP under contention"). Here the chunks
 * are claimed from one atomic word; the caller claims too and then waits only for chunks that another thread
 * has begun, never for a thread that has not started (a thread's own chunk claimed and not begun, its thread
 * preempted in between, the caller takes back; one of the extra chunks beyond `threads` is waited for once
 * claimed): a late worker finds nothing left.
 * With as many chunks as threads, a quiet machine runs the same split as before, one chunk per thread.
 *
 * Workers spin briefly for the next job (kernels follow each other within microseconds), then sleep on a
 * futex. `worker` is 0 for the caller and 1.. for pool threads, always < threads: it indexes per-thread
 * scratch. A call made from inside a chunk, from inside an OpenMP region, while another thread's job runs,
 * or with threads <= 1, runs its chunks serially in the calling thread (worker 0), so results never depend
 * on who runs a chunk as long as each chunk writes its own part. The pool is process-wide, as OpenMP's
 * threads are; it follows mxcc_set_num_threads (threads are made as the first job that needs them starts).
 *
 * Simulation (mxcc_pool_simulate, <net>_bench --simulate-threads T): how a network's parallel work would split
 * over T threads, measured on a machine with fewer cores. Every job runs serially in the caller, each chunk
 * timed, and the job's time on its threads is computed under the claiming rule above (mxcc_pool_sim_schedule).
 */
#ifndef MXCC_POOL_H
#define MXCC_POOL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*mxcc_chunk_fn)(void *arg, long chunk, int worker);

/* A generated kernel run in parts (templates/_kernel.c.j2): its context and how many parts. Part p of a loop
 * of n iterations is [mxcc_part_begin(n, p, parts), mxcc_part_begin(n, p + 1, parts)). */
typedef struct mxcc_parts {
    struct mxcc_ctx *ctx;
    long parts;
} mxcc_parts;

static inline long mxcc_part_begin(long n, long part, long parts)
{
    return n * part / parts;
}

void mxcc_parallel_chunks(long chunks, int threads, mxcc_chunk_fn fn, void *arg);

/* Which engine runs a job: mxcc's pool, or an OpenMP region (thread t runs chunk t: the split the kernels
 * had). The pool is what a loaded machine needs (a late thread's chunks are the caller's), but only where no
 * OpenMP team runs beside it: libgomp's threads spin for a while after each region (GOMP_SPINCOUNT) and take
 * the cores the pool's workers need (MobileNet 1.0 b1, 2 threads, with one OpenMP region left in its forward:
 * 5.3 ms as OpenMP regions, 8.1 ms on the pool). So a generated network selects the pool for its calls
 * (mxcc_pool_select, this thread, returns the previous choice) when none of its kernels opens an OpenMP
 * region (codegen/render.py), and OpenMP regions otherwise. mxcc_pool_enable overrides that for the process:
 * 1 always the pool, 0 never, -1 (the default) as selected. */
void mxcc_pool_enable(int mode);
int mxcc_pool_select(int on);
/* Whether this thread's jobs run on the pool now (the selection, or mxcc_pool_enable's override). */
int mxcc_pool_selected(void);

/* How many threads a kernel about to run should split its work for, of `threads` (omp_get_max_threads()):
 * one fewer while the pool finds the machine oversubscribed and `threads` >= 4 (pool.c), else `threads`. */
int mxcc_pool_threads(int threads);

/* Whether this thread runs a chunk (of a job of its own or as a pool worker): a kernel called here runs
 * serially, with buffers of its own (as inside an OpenMP region). */
int mxcc_pool_in_chunk(void);

/* How many jobs ran with more than one thread, and in how many of those the caller ran every chunk itself
 * (no worker came in time, or the caller took back what they had claimed): for tests and benchmarks. */
void mxcc_pool_stats(long *jobs, long *caller_only);

/* How many jobs found a worker asleep and woke it (a futex wake-up: in a VM the worker runs 10-15 us later):
 * few on a quiet machine, where workers poll between jobs; most of a dozing pool's (pool.c). */
long mxcc_pool_wakeups(void);

/* How many chunks the caller took back from a worker that had claimed them and not yet begun (pool.c,
 * take_back): 0 on a quiet machine, where a claimer begins at once. */
long mxcc_pool_takes(void);

/* How many times the pool found the machine oversubscribed (pool.c) and split for a thread fewer (jobs of 4
 * threads or more) or let its workers sleep between jobs (fewer): 0 on a quiet machine, whatever its thread
 * count. */
long mxcc_pool_caps(void);

/* ---- simulation ----
 * mxcc_pool_simulate(T), T > 0: from now on every job (not one called from inside a chunk) runs its chunks
 * serially in the calling thread, as the serial fallback does (worker 0, mxcc_pool_in_chunk() true), timing
 * each (CLOCK_MONOTONIC), whatever the pool selection. The job's simulated time is the largest load of its
 * threads under the pool's claiming rule (mxcc_pool_sim_schedule), on the job's own `threads` argument
 * (clamped to its chunk count): what the pool would run it on. T is what the caller simulates: it also sets
 * the thread count to T (mxcc_set_num_threads) before contexts are made, so that the kernels split for T.
 * 0 (the default) turns simulation off; either call clears the accumulators. Single-threaded use only: the
 * accumulators are plain process-wide globals.
 *
 * What a simulation cannot see: each chunk runs on one core after the chunk before it, so its caches hold
 * what that chunk left (not what the same thread ran in the kernel before), and no two chunks compete for
 * memory bandwidth; a kernel's own OpenMP regions (a network that does not run on the pool) really run, on
 * as many threads as the machine gives them, and count as time outside jobs. */
typedef struct mxcc_pool_sim {
    long jobs;              /* jobs run */
    long chunks;            /* their chunks, all together */
    long max_chunks;        /* the most chunks of one job */
    int min_threads;        /* the fewest and most threads a job asked for (its `threads` argument); 0: no job */
    int max_threads;
    uint64_t serial_ns;     /* the chunks' times, summed */
    uint64_t sim_ns;        /* each job's simulated time (its threads' largest load), summed */
} mxcc_pool_sim;

void mxcc_pool_simulate(int threads);
int mxcc_pool_simulating(void);     /* the T of mxcc_pool_simulate, 0 when off */
/* The accumulators since the last take (or mxcc_pool_simulate), then cleared. */
void mxcc_pool_sim_take(mxcc_pool_sim *out);
/* Add the jobs of `from` to `to` (counts and times summed, the thread and chunk ranges widened). */
void mxcc_pool_sim_add(mxcc_pool_sim *to, const mxcc_pool_sim *from);
/* The claiming rule, as a pure function: chunk c < threads runs on thread c, each later chunk, in order, on the
 * thread that is free first (the least loaded; the lowest id of equals). threads is clamped to [1, chunks].
 * The largest load: the job's time on `threads` threads when chunk c takes chunk_ns[c]. */
uint64_t mxcc_pool_sim_schedule(const uint64_t *chunk_ns, long chunks, int threads);

#ifdef __cplusplus
}
#endif
#endif /* MXCC_POOL_H */
