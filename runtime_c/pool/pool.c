/* mxcc's thread pool (mxcc_pool.h): one job at a time, its chunks claimed from one atomic word.
 *
 * The claim word holds the next chunk (bits 0-23), the job's chunk count (24-47), its thread count (48-55)
 * and a job number (56-63). A thread claims chunk i by a compare-and-swap from i to i + 1 on the whole word,
 * so a claim can only succeed for the job the word describes, whatever the thread saw before; the job's
 * function and argument are read after the claim, when the job cannot end (its chunk is not done) and so
 * cannot be replaced. The caller publishes a job by storing the word (release), then bumps `wake`, the
 * futex word sleeping workers wait on. */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "mxcc_pool.h"

#define MAX_THREADS 255
#define MAX_CHUNKS 0xffffffL
#define SPIN 4000            /* polls of `wake` (with a pause each, ~50-100 us) before a worker sleeps */

#define NEXT(v) ((long)((v) & 0xffffff))
#define LIMIT(v) ((long)(((v) >> 24) & 0xffffff))
#define THREADS(v) ((int)(((v) >> 48) & 0xff))

static struct {
    _Atomic uint64_t claim;
    _Atomic long done;           /* chunks of the current job finished */
    _Atomic uint32_t wake;       /* bumped per job; sleeping workers wait on it */
    _Atomic int sleepers;
    mxcc_chunk_fn fn;            /* the current job's: written before `claim` publishes it */
    void *arg;
    pthread_mutex_t busy;        /* held by the caller of the running job */
    pthread_mutex_t grow;        /* held while workers are made */
    _Atomic int workers;         /* pool threads made: ids 1..workers */
    int forked;                  /* pthread_atfork handler installed */
    _Atomic long jobs, caller_only;
} pool = {.busy = PTHREAD_MUTEX_INITIALIZER, .grow = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int in_chunk;   /* a pool worker, or a caller running its job: nested calls run serially */
static _Atomic int forced = -1;      /* mxcc_pool_enable: 1 pool, 0 OpenMP regions, -1 as the caller selects */
static _Thread_local int selected;   /* mxcc_pool_select: the running network's choice */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(_Atomic uint32_t *word, uint32_t seen)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, seen, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Claim and run chunks of the job in the claim word until none is left (or this worker is not in it);
 * the number run. */
static long run_chunks(int worker)
{
    long ran = 0;
    uint64_t v = atomic_load_explicit(&pool.claim, memory_order_acquire);
    while (NEXT(v) < LIMIT(v) && worker < THREADS(v)) {
        if (!atomic_compare_exchange_weak_explicit(&pool.claim, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;                            /* v now holds the word as it is: try again */
        pool.fn(pool.arg, NEXT(v), worker);
        ran++;
        atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
        v = atomic_load_explicit(&pool.claim, memory_order_acquire);
    }
    return ran;
}

static void *worker_main(void *p)
{
    const int id = (int)(intptr_t)p;
    in_chunk = 1;
    uint32_t seen = atomic_load(&pool.wake);
    for (;;) {
        run_chunks(id);
        uint32_t w;
        int spins = 0;
        while ((w = atomic_load_explicit(&pool.wake, memory_order_acquire)) == seen) {
            if (++spins < SPIN) {
                cpu_relax();
                continue;
            }
            /* sleep: announce it, then look once more (the caller bumps wake, then reads sleepers) */
            atomic_fetch_add(&pool.sleepers, 1);
            if (atomic_load(&pool.wake) == seen)
                futex_wait(&pool.wake, seen);
            atomic_fetch_sub(&pool.sleepers, 1);
            spins = 0;
        }
        seen = w;
    }
    return NULL;
}

/* A forked child has none of the parent's threads: it starts a pool of its own. */
static void after_fork_child(void)
{
    pthread_mutex_init(&pool.busy, NULL);
    pthread_mutex_init(&pool.grow, NULL);
    pool.workers = 0;
    atomic_store(&pool.claim, 0);
    atomic_store(&pool.sleepers, 0);
    in_chunk = 0;
}

/* At least n pool threads; 0, or -1 when one cannot be made (the job then runs serially). */
static int ensure_workers(int n)
{
    if (n <= pool.workers)
        return 0;
    pthread_mutex_lock(&pool.grow);
    if (!pool.forked) {
        pthread_atfork(NULL, NULL, after_fork_child);
        pool.forked = 1;
    }
    int rc = 0;
    while (pool.workers < n) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &attr, worker_main, (void *)(intptr_t)(pool.workers + 1));
        pthread_attr_destroy(&attr);
        if (rc)
            break;
        pool.workers++;
    }
    pthread_mutex_unlock(&pool.grow);
    return rc ? -1 : 0;
}

static void serial(long chunks, mxcc_chunk_fn fn, void *arg)
{
    const int was = in_chunk;
    in_chunk = 1;               /* what a chunk calls runs serially too, whoever runs the chunk */
    for (long c = 0; c < chunks; c++)
        fn(arg, c, 0);
    in_chunk = was;
}

#ifdef _OPENMP
/* The job as an OpenMP region (the default while the generated kernels' own loops are OpenMP regions: two
 * thread teams would spin against each other): thread t runs chunk t, then claims any left, so with as many
 * chunks as threads this is the static split the kernels had. */
static void omp_region(long chunks, int threads, mxcc_chunk_fn fn, void *arg)
{
    _Atomic long next = threads;
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num();
        in_chunk = 1;
        if (t < chunks)
            fn(arg, t, t);
        for (long c; (c = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed)) < chunks;)
            fn(arg, c, t);
        in_chunk = 0;
    }
}
#endif

void mxcc_pool_enable(int mode)
{
    atomic_store(&forced, mode < 0 ? -1 : mode != 0);
}

int mxcc_pool_select(int on)
{
    const int was = selected;
    selected = on;
    return was;
}

static int use_pool(void)
{
    const int f = atomic_load_explicit(&forced, memory_order_relaxed);
    return f < 0 ? selected : f;
}

void mxcc_parallel_chunks(long chunks, int threads, mxcc_chunk_fn fn, void *arg)
{
    if (chunks <= 0)
        return;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    if (threads > chunks)
        threads = (int)chunks;
    int nested = in_chunk;
#ifdef _OPENMP
    nested = nested || omp_in_parallel();
    if (threads > 1 && !nested && !use_pool()) {
        omp_region(chunks, threads, fn, arg);
        return;
    }
#endif
    if (threads <= 1 || nested || chunks > MAX_CHUNKS || ensure_workers(threads - 1)
        || pthread_mutex_trylock(&pool.busy)) {
        serial(chunks, fn, arg);
        return;
    }
    pool.fn = fn;
    pool.arg = arg;
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    const uint64_t job = ((atomic_load_explicit(&pool.claim, memory_order_relaxed) >> 56) + 1) & 0xff;
    atomic_store_explicit(&pool.claim, job << 56 | (uint64_t)threads << 48 | (uint64_t)chunks << 24,
                          memory_order_release);
    atomic_fetch_add(&pool.wake, 1);
    if (atomic_load(&pool.sleepers) > 0)
        futex_wake_all(&pool.wake);
    in_chunk = 1;
    const long mine = run_chunks(0);
    in_chunk = 0;
    /* only chunks another thread claimed and is running are left: wait for them */
    for (long spins = 0; atomic_load_explicit(&pool.done, memory_order_acquire) < chunks; spins++) {
        if (spins < 100000)
            cpu_relax();
        else
            sched_yield();     /* the thread running it lost its core: give it ours */
    }
    atomic_fetch_add_explicit(&pool.jobs, 1, memory_order_relaxed);
    if (mine == chunks)
        atomic_fetch_add_explicit(&pool.caller_only, 1, memory_order_relaxed);
    pthread_mutex_unlock(&pool.busy);
}

int mxcc_pool_in_chunk(void)
{
    return in_chunk;
}

void mxcc_pool_stats(long *jobs, long *caller_only)
{
    *jobs = atomic_load(&pool.jobs);
    *caller_only = atomic_load(&pool.caller_only);
}
