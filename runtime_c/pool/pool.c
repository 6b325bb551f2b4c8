/* mxcc's thread pool (mxcc_pool.h): one job at a time.
 *
 * Chunks 0 .. threads-1 belong first to the thread of that id (the caller is 0): each thread claims its own
 * chunk, so a quiet machine runs the same split every call (a layer's rows stay in the cache of the core that
 * wrote them in the layer before, as with OpenMP's static schedule). A chunk is claimed by a compare-and-swap
 * of its tag `tag[c].own` from an older job's number to this job's; once a thread is done with its own chunk it
 * takes the chunks beyond `threads` from the claim word, then any other thread's chunk that thread has not
 * claimed: a thread that lost its core before claiming delays nothing. Nor one that lost it between claiming its
 * chunk and beginning it (the scheduler preempts on the way back from a system call or an interrupt, and the
 * claim is often the first thing a woken worker does): a chunk c < threads is begun by a compare-and-swap of
 * `tag[c].begun` from an older job's number to this job's, before anything of the job is read, and the caller, out
 * of work and waiting twice its own chunk time (TAKE_NS at least), swaps a claimed, not begun chunk's word to
 * "taken" and runs the chunk itself (take_back); the claimer, back, fails to begin and leaves the job alone. A
 * begun chunk is waited for: its thread is writing it. AMD EPYC family 25 model 17 2-vCPU VM, one busy process,
 * `<net>_bench --threads 2 --seconds 2 --pool`, three alternations, 2026-11-28: ResNet-18 21.5-25.4 -> 18.9-23.3
 * ms, ResNet-50 55.8-56.9 -> 49.8-50.3, MobileNet v2 7.3-7.8 -> 5.3-5.5, MobileNet 1.0 10.8-11.2 -> 8.6-10.8,
 * SqueezeNet 5.9-6.8 -> 4.3-6.7, MLP b64 133-138 -> 93-98 us, b256 372-383 -> 373-379 (3-4 chunks taken back a
 * run); quiet, 0-1 chunks a run and no time changed (a claimer begins within nanoseconds). The claim word holds
 * the next chunk (bits 0-23), the chunk count (24-47), the thread count (48-55) and the job number's low bits
 * (56-63): a compare-and-swap from i to i + 1 claims chunk i of the job the word describes.
 *
 * The job's fields (function, argument, counts) are published under a sequence number (a seqlock: odd while
 * the caller writes them): a thread reads them, claims a chunk, and runs it only if the sequence number is
 * still the one it read. A job cannot end while a chunk of it is claimed and not done, and the caller writes
 * the next job's fields only after the last chunk is done, so a claimed chunk always runs with its own job's
 * fields. The caller then bumps `wake`, the futex word sleeping workers wait on.
 *
 * Fewer threads while the machine is oversubscribed: with another process busy on one of 2 cores, 3 runnable
 * threads share 2 cores and the scheduler preempts each in turn; a job whose chunk is held by a preempted
 * thread waits out the time slice, and 2 threads run slower than 1 (MobileNet 1.0 b1, Intel Xeon 2-vCPU VM,
 * one core busy: 10.3-12.0 ms on 2 threads, 8.5 ms on 1). Every SAMPLE_EVERY-th job, each thread times its
 * chunks by the clock and by its own CPU time (what it ran, preemption excluded); over a window of such chunks
 * (WINDOW_NS of all threads' and THREAD_WINDOW_NS a thread) the caller takes each thread's lost share,
 * (clock - CPU) / clock. A process busy on one core takes about half the time of the thread that shares it,
 * and keeps doing so (on 2 cores, 2 threads lost 1.2-1.6 cores together, ResNet-50 b1). A quiet machine
 * loses a little everywhere and now and then more: 0.01-0.05 of a core over all threads on the 2-vCPU VM (a
 * daemon's moment: up to 0.56 in one window); ~5% of every thread on a 16-vCPU VM, 0.8 cores together, which
 * one thread fewer would not give back (a rule on the cores lost in total capped that machine, quiet, in 9
 * of 44 one-second runs), and there 30% of one thread's 1.25 ms of chunks twice in a row now and then (20 ms
 * windows whatever the thread count: 12 of 55 runs; 5 ms a thread: 0 of 20, and 2 caps in each 2-second run
 * with one busy process). Sampling one job in 8 keeps the clocks cheap (a thread's CPU clock is a system call,
 * 0.2-0.5 us) but the windows long where jobs are short: the MLP b64 on 2 threads (60 us jobs, Zen 4 VM, one
 * core busy) filled two in 130-180 ms, and ran at 1-thread speed or worse until then. So a sampled chunk that
 * lost LOST_SHARE of its time, and SUSPECT_NS at least (a slice, not an interrupt), has every job sampled
 * until a window ends with no thread over (or the pool acts); and a window also lasts WINDOW_WALL_NS of the
 * clock, so that two in a row still outlast a daemon's moment. 2-thread jobs of 50 us chunks, one spinning
 * thread beside them: found oversubscribed after 34-45 ms against 54-121 sampling one job in 8; the MLP b64
 * from Python, its first 0.25 s: median 105-119 us against 128, mean 116-118 against 147. No doze found on
 * a quiet machine either way. So when a thread lost LOST_SHARE or more of its time in two windows in a row, the
 * highest-numbered thread sits out (mxcc_pool_threads: the kernels split for one thread fewer; another one if two
 * more windows lose as much) for a while, then all threads are tried again. That for jobs of CAP_MIN_THREADS or
 * more; below, all threads stay and the workers sleep as soon as a job is done instead of polling for the next
 * (`doze`). Either lasts ACT_MIN_NS the first time and twice as long as the last when found again within CAP_NS, up
 * to CAP_NS (act_length): a doze of CAP_NS whatever set it cost a passing load dearly (another pool's threads
 * spinning for ~50 ms after its run, ONNX Runtime's in benchmarks/scaling.py, benchmarks/after_ort.py: the MLP b64
 * on 2 threads 93-96 us a call for the whole second against 69, AMD Zen 4 VM). A worker polling while the machine is
 * oversubscribed takes time the scheduler then charges to it; one that slept is back when woken (~13 us later in a VM,
 * which the median of short calls from Python pays: a 15 us poll cost more by mean than it saved, docs/performance.md
 * "Shared machines"). Intel Xeon 2-vCPU VM, one core busy, `<net>_bench --threads 2 --seconds 2`, mean per forward,
 * three alternations: the cap to 1 thread / 2 threads polling / 2 threads dozing: MLP b256 362-369 / 501-527 / 319-340
 * us, MobileNet 1.0 8.9-9.1 / 11.5-12.7 / 8.6-8.8 ms, ResNet-18 24.0-24.8 / 29.6-30.9 / 23.0-24.7 ms; dozing workers
 * that first polled 20 us were slower than either, MLP b256 398-421 us. A dozing worker also keeps off the CPU the
 * caller posted the job from (keep_off: its own affinity less that CPU, its own again when the doze ends): woken by the
 * caller, the scheduler may place it on the caller's CPU, where it runs only while the caller does not, and there it
 * stayed (Linux 6.18, AMD Zen 4 2-vCPU VM, one core busy, MLP b256 on 2 threads: runs of 150-270 calls at 1-thread
 * speed, 60% of the calls). Kept off, the worker shares the busy process's core or has one alone: `<net>_bench
 * --threads 2 --seconds 2`, 3 alternations, mean per forward, ResNet-18 21.7-22.2 -> 20.8-21.4 ms, MobileNet 1.0
 * 10.6-10.9 -> 9.9-10.2 ms, MLP b64 unchanged (134-139 us); MLP b256 per call from Python, median 504-507 -> 283-284
 * us, mean 442-456 -> 374-382. (The time the caller waits is no measure: an uneven split makes
 * it wait on a quiet machine, 5% of a network's job time on 2 threads, 35-46% on 16 by the split simulator.) The
 * kernels split whole units of work (parallel.h), so no result changes.
 *
 * Simulation (mxcc_pool_simulate) bypasses all of this: the caller runs and times every chunk (simulate) and
 * places it on a thread as the claims above would on a quiet machine (sim_assign). The normal path pays one
 * relaxed load of sim_threads and a branch that is never taken. */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "mxcc_pool.h"

#define MAX_THREADS 255
#define MAX_CHUNKS 0xffffffL
/* How long an idle worker polls for the next job before it sleeps: longer than the serial stretches between a
 * network's parallel kernels (a concat, a small layer), or the next job finds it asleep and a futex wake-up
 * (tens of microseconds in a VM) late. SqueezeNet 1.1 b1, 2 threads, Intel Xeon VM: 4.08-4.39 ms polling 45 us,
 * 3.92-4.11 ms polling 450 us (OpenMP regions: 4.03-4.18). A time, not a count: a pause lasts 11 ns on one
 * x86 CPU and 140 on another. */
#define SPIN_NS 500000L
/* The oversubscription test (above): every SAMPLE_EVERY-th job sampled; a window of WINDOW_NS of sampled chunk
 * time (all threads), THREAD_WINDOW_NS per thread where that is more; LOST_SHARE in percent of a thread's
 * sampled time, and WINDOW_WALL_NS of the clock at least; a cap (jobs of CAP_MIN_THREADS or more) or a doze
 * (fewer) lasts ACT_MIN_NS to CAP_NS. A sampled chunk that lost SUSPECT_NS and LOST_SHARE has every job
 * sampled until the window ends. A thread's CPU clock costs 0.2-0.5 us to read (a system call), 2 of the 4
 * reads per chunk of a sampled job. */
#ifndef SAMPLE_EVERY
#define SAMPLE_EVERY 8
#endif
#ifndef WINDOW_NS
#define WINDOW_NS 20000000L
#endif
#ifndef THREAD_WINDOW_NS
#define THREAD_WINDOW_NS 5000000L
#endif
#ifndef LOST_SHARE
#define LOST_SHARE 30
#endif
#ifndef CAP_NS
#define CAP_NS 1000000000L
#endif
/* The first cap or doze lasts ACT_MIN_NS; found oversubscribed again before CAP_NS has passed since the last one
 * ended (or while it lasts), twice as long as the last, CAP_NS at most (act_length). While it lasts, a window in
 * which a thread lost RENEW_SHARE percent of its time renews it for its length: a dozing worker beside a busy
 * process lost 24-51% a window (AMD Zen 4 2-vCPU VM, MLP b64), over LOST_SHARE in only 1-5 of 6-7 windows; quiet
 * after ONNX Runtime's run 7-9%; every thread of a quiet 16-vCPU VM ~5%. Where the doze gives the worker its
 * core back (MLP b256 beside a busy process: 3-4% lost while dozing, and one window in 125 ms at most) it lapses
 * and is found again two windows later, for twice as long: 4 finds in the first 2 s against 2 for a CAP_NS doze,
 * one a second after that as before. */
#ifndef ACT_MIN_NS
#define ACT_MIN_NS (CAP_NS / 8)
#endif
#ifndef RENEW_SHARE
#define RENEW_SHARE 15
#endif
#ifndef WINDOW_WALL_NS
#define WINDOW_WALL_NS 20000000L
#endif
#ifndef SUSPECT_NS
#define SUSPECT_NS 20000L
#endif
/* The caller takes back a worker's claimed, not begun chunk (take_back) once it has waited twice its own chunk
 * time, TAKE_NS at least: a claimer about to begin gets there first on a quiet machine. */
#ifndef TAKE_NS
#define TAKE_NS 20000L
#endif
#ifndef CAP_MIN_THREADS
#define CAP_MIN_THREADS 4
#endif

#define NEXT(v) ((long)((v) & 0xffffff))
#define LIMIT(v) ((long)(((v) >> 24) & 0xffffff))
#define THREADS(v) ((int)(((v) >> 48) & 0xff))

static struct {
    /* the job: written by the caller once per job, read by every thread as it starts */
    _Atomic uint64_t seq;        /* 2 x the job number; odd while the caller writes the job's fields */
    _Atomic long chunks;         /* the current job's: written under seq, relaxed (a seqlock's fields) */
    _Atomic int threads;
    _Atomic int sampled;         /* the current job's chunks are timed: written under seq, relaxed */
    _Atomic(mxcc_chunk_fn) fn;
    _Atomic(void *) arg;
    _Atomic uint32_t wake;       /* bumped per job; polling workers watch it, sleeping ones wait on it */
    _Atomic int sleepers;
    /* the words several threads write, each group on a cache line of its own: a line the threads take turns
     * writing moves between their cores at each write, and a thread reading anything else on it waits for it */
    _Alignas(64) _Atomic uint64_t claim;   /* chunks threads .. chunks-1 */
    _Alignas(64) _Atomic long done;        /* chunks of the current job finished */
    _Atomic long clock_ns;       /* the window's sampled chunk time, all threads */
    _Atomic int suspect;         /* a sampled chunk lost LOST_SHARE: every job sampled until the window ends */
    _Alignas(64) pthread_mutex_t busy;     /* held by the caller of the running job */
    _Atomic long jobs, caller_only;
    pthread_mutex_t grow;        /* held while workers are made */
    _Atomic int workers;         /* pool threads made: ids 1..workers */
    int forked;                  /* pthread_atfork handler installed */
    _Atomic long wakeups;        /* jobs posted to a sleeping worker (mxcc_pool_wakeups) */
    _Atomic long caps;           /* times the cap was set (mxcc_pool_caps) */
    _Atomic long takes;          /* chunks the caller took back (mxcc_pool_takes) */
    _Atomic int cap;             /* threads a job may use while oversubscribed (0: no cap) */
    _Atomic int doze;            /* workers sleep as soon as a job is done, no polling (oversubscribed) */
    _Atomic int caller_cpu;      /* while dozing: the CPU the caller posted its last job from (-1: unknown) */
    _Atomic long cap_until;      /* now_ns() when the cap or the doze is lifted */
    long act_ns;                 /* how long the last cap or doze was set for (the caller's, under busy) */
    long window_start;           /* now_ns() when the window began (the caller's, under busy) */
    int window_threads;          /* the most threads a job of the window had (the caller's, under busy) */
    unsigned char over[MAX_THREADS];   /* per thread: windows in a row it lost LOST_SHARE (the caller's) */
} pool = {.busy = PTHREAD_MUTEX_INITIALIZER, .grow = PTHREAD_MUTEX_INITIALIZER, .caller_cpu = -1};

/* chunk c < threads, on a cache line of its own (its claimer writes both words; 2-16 claimers at once):
 * own: the sequence number of the job that claimed it; begun: 2 x the sequence number of the job whose chunk c
 * was begun by its claimer, + 1 where the caller took it back (take_back) */
static struct {
    _Alignas(64) _Atomic uint64_t own;
    _Atomic uint64_t begun;
} tag[MAX_THREADS];

/* each thread's sampled chunk time in the window, by the clock and by its CPU clock: its own cache line */
static struct {
    _Alignas(64) _Atomic long clock_ns;
    _Atomic long cpu_ns;
} by_thread[MAX_THREADS];

static _Thread_local int in_chunk;   /* a pool worker, or a caller running its job: nested calls run serially */
static _Atomic int forced = -1;      /* mxcc_pool_enable: 1 pool, 0 OpenMP regions, -1 as the caller selects */
static _Thread_local int selected;   /* mxcc_pool_select: the running network's choice */
static _Atomic int sim_threads;      /* mxcc_pool_simulate's T; 0: off */
static mxcc_pool_sim sim;            /* its accumulators (simulation is single-threaded) */

static inline long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

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

/* Claim chunk c (< threads) of the job whose sequence number is `seq`: 1 if this thread now holds it. */
static int claim_own(long c, uint64_t seq)
{
    uint64_t v = atomic_load_explicit(&tag[c].own, memory_order_acquire);
    while (v < seq)
        if (atomic_compare_exchange_weak_explicit(&tag[c].own, &v, seq, memory_order_acq_rel, memory_order_acquire))
            return 1;
    return 0;        /* taken in this job, or a newer job has begun (this one is over) */
}

static inline long thread_cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* Begin chunk c (< threads), claimed in the job `seq`: 1 if this thread may run it, 0 if the caller took it back
 * (take_back). Strictly older values only: a claim of an older job that was taken back must not begin a newer
 * job's chunk c, whose fields it never read. */
static int begin(long c, uint64_t seq)
{
    uint64_t v = atomic_load_explicit(&tag[c].begun, memory_order_acquire);
    while (v >> 1 < seq)
        if (atomic_compare_exchange_weak_explicit(&tag[c].begun, &v, seq << 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return 1;
    return 0;
}

#ifdef TEST_STALL_NS
/* tests/runtime/pool_sanity.c "take": a worker stopped between claiming its chunk and beginning it */
static void test_stall(int worker, uint64_t seq, int own)
{
    if (own && worker && (seq >> 1) % TEST_STALL_EVERY == 0)
        nanosleep(&(struct timespec){0, TEST_STALL_NS}, NULL);
}
#else
#define test_stall(worker, seq, own) ((void)0)
#endif

/* fn(arg, c, worker), timed into the window when the job is sampled; a thread's own chunk (`own`, c < threads)
 * only once begun (begin). 1 if it ran. A claimer that lost its chunk to the caller counts the time from the
 * claim as lost: the scheduler held it there (the doze's windows must see it). */
static inline int run_chunk(mxcc_chunk_fn fn, void *arg, long c, int worker, int sampled, uint64_t seq, int own)
{
    if (!sampled) {
        test_stall(worker, seq, own);
        if (own && !begin(c, seq))
            return 0;
        fn(arg, c, worker);
        return 1;
    }
    const long t0 = now_ns(), c0 = thread_cpu_ns();
    test_stall(worker, seq, own);
    const int ran = !own || begin(c, seq);
    if (ran)
        fn(arg, c, worker);
    const long c1 = thread_cpu_ns(), t1 = now_ns();
    atomic_fetch_add_explicit(&pool.clock_ns, t1 - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&by_thread[worker].clock_ns, t1 - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&by_thread[worker].cpu_ns, c1 - c0, memory_order_relaxed);
    /* preempted in this chunk: make the window count every job from now (not once the pool already acts) */
    const long lost = (t1 - t0) - (c1 - c0);
    const int acting = atomic_load_explicit(&pool.doze, memory_order_relaxed)
                       || atomic_load_explicit(&pool.cap, memory_order_relaxed);
    if (lost >= SUSPECT_NS && 100 * lost >= LOST_SHARE * (t1 - t0) && !acting)
        atomic_store_explicit(&pool.suspect, 1, memory_order_relaxed);
    return ran;
}

static void finish(void)
{
    atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
}

/* Take part in the current job as `worker`: its own chunk, the claim word's, then chunks of threads that have
 * not started theirs. The number of chunks run. */
static long run_job(int worker)
{
    const uint64_t seq = atomic_load_explicit(&pool.seq, memory_order_acquire);
    if (seq & 1)
        return 0;                      /* being written: the wake that follows brings this thread back */
    const mxcc_chunk_fn fn = atomic_load_explicit(&pool.fn, memory_order_relaxed);
    void *const arg = atomic_load_explicit(&pool.arg, memory_order_relaxed);
    const int threads = atomic_load_explicit(&pool.threads, memory_order_relaxed);
    const int sampled = atomic_load_explicit(&pool.sampled, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&pool.seq, memory_order_relaxed) != seq || worker >= threads)
        return 0;                      /* a newer job (its wake brings us back), or not one of its threads */
    long ran = 0;
    /* a claim made here runs only if the job is still `seq`: then it cannot end before this chunk is done */
#define STILL_THIS_JOB() (atomic_load_explicit(&pool.seq, memory_order_acquire) == seq)
    if (claim_own(worker, seq) && STILL_THIS_JOB() && run_chunk(fn, arg, worker, worker, sampled, seq, 1)) {
        ran++;
        finish();
    }
    uint64_t v = atomic_load_explicit(&pool.claim, memory_order_acquire);
    while (NEXT(v) < LIMIT(v) && worker < THREADS(v)) {
        if (!atomic_compare_exchange_weak_explicit(&pool.claim, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;                  /* v now holds the word as it is: try again */
        /* the claimed job's fields: it cannot end before this chunk is done */
        run_chunk(atomic_load_explicit(&pool.fn, memory_order_relaxed),
                  atomic_load_explicit(&pool.arg, memory_order_relaxed), NEXT(v), worker,
                  atomic_load_explicit(&pool.sampled, memory_order_relaxed), 0, 0);
        ran++;
        finish();
        v = atomic_load_explicit(&pool.claim, memory_order_acquire);
    }
    for (int c = 0; c < threads; c++) {
        if (c != worker && claim_own(c, seq) && STILL_THIS_JOB() && run_chunk(fn, arg, c, worker, sampled, seq, 1)) {
            ran++;
            finish();
        }
    }
#undef STILL_THIS_JOB
    return ran;
}

/* While the pool dozes, the worker's CPUs are `home` less the caller's (*off: that CPU + 1); `home` again
 * after. One system call when the caller's CPU changes, none otherwise. */
static void keep_off(const cpu_set_t *home, int *off)
{
    const int doze = atomic_load_explicit(&pool.doze, memory_order_relaxed);
    const int cpu = atomic_load_explicit(&pool.caller_cpu, memory_order_relaxed);
    if (doze && cpu >= 0 && cpu < CPU_SETSIZE && *off != cpu + 1 && CPU_ISSET(cpu, home) && CPU_COUNT(home) > 1) {
        cpu_set_t m = *home;
        CPU_CLR(cpu, &m);
        if (sched_setaffinity(0, sizeof m, &m) == 0)
            *off = cpu + 1;
    } else if (!doze && *off) {
        sched_setaffinity(0, sizeof *home, home);
        *off = 0;
    }
}

static void *worker_main(void *p)
{
    const int id = (int)(intptr_t)p;
    in_chunk = 1;
    uint32_t seen = atomic_load(&pool.wake);
    cpu_set_t home;   /* the CPUs this worker may run on, as created (the process's) */
    int off = sched_getaffinity(0, sizeof home, &home) == 0 ? 0 : -1;   /* -1: never moved */
    for (;;) {
        run_job(id);
        if (off >= 0)
            keep_off(&home, &off);
        uint32_t w;
        /* a thread the cap leaves out, or any while dozing, sleeps at once: its core is wanted elsewhere */
        const int cap = atomic_load_explicit(&pool.cap, memory_order_relaxed);
        const int doze = atomic_load_explicit(&pool.doze, memory_order_relaxed);
        long spins = 0, until = (cap && id >= cap) || doze ? 0 : now_ns() + SPIN_NS;
        while ((w = atomic_load_explicit(&pool.wake, memory_order_acquire)) == seen) {
            if (++spins % 256 || now_ns() < until) {
                cpu_relax();
                continue;
            }
            /* sleep: announce it, then look once more (the caller bumps wake, then reads sleepers) */
            atomic_fetch_add(&pool.sleepers, 1);
            if (atomic_load(&pool.wake) == seen)
                futex_wait(&pool.wake, seen);
            atomic_fetch_sub(&pool.sleepers, 1);
            until = now_ns() + SPIN_NS;
        }
        seen = w;
    }
    return NULL;
}

/* How long to cap or doze when found oversubscribed at `now`, the last cap or doze having been set for last_ns
 * (0: never) to end at last_until: ACT_MIN_NS, or twice last_ns (CAP_NS at most) when `now` is before
 * last_until + CAP_NS. A passing load (another pool's threads spinning out after its run, ~50 ms) costs an eighth
 * of what a CAP_NS doze did; a lasting one is found again within a few windows and soon has the full CAP_NS. */
static long act_length(long now, long last_until, long last_ns)
{
    const long first = ACT_MIN_NS < CAP_NS ? ACT_MIN_NS : CAP_NS;
    if (last_ns <= 0 || now >= last_until + CAP_NS)
        return first;
    return 2 * last_ns < CAP_NS ? 2 * last_ns : CAP_NS;
}

/* A forked child has none of the parent's threads: it starts a pool of its own. */
static void after_fork_child(void)
{
    pthread_mutex_init(&pool.busy, NULL);
    pthread_mutex_init(&pool.grow, NULL);
    pool.workers = 0;
    atomic_store(&pool.claim, 0);
    atomic_store(&pool.seq, 0);
    for (int c = 0; c < MAX_THREADS; c++) {
        atomic_store(&tag[c].own, 0);
        atomic_store(&tag[c].begun, 0);
    }
    atomic_store(&pool.sleepers, 0);
    /* a window half measured by the parent's threads, or its cap, says nothing of the child's */
    atomic_store(&pool.clock_ns, 0);
    atomic_store(&pool.suspect, 0);
    pool.window_start = 0;
    atomic_store(&pool.cap, 0);
    atomic_store(&pool.doze, 0);
    atomic_store(&pool.cap_until, 0);
    pool.act_ns = 0;
    atomic_store(&pool.caller_cpu, -1);
    pool.window_threads = 0;
    for (int t = 0; t < MAX_THREADS; t++) {
        pool.over[t] = 0;
        atomic_store(&by_thread[t].clock_ns, 0);
        atomic_store(&by_thread[t].cpu_ns, 0);
    }
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

/* ---- simulation (mxcc_pool.h) ---- */

/* Chunk c, taking ns, onto the loads of `threads` threads: its own thread's if c < threads (each thread claims
 * its own chunk first), else the thread free first (the least loaded, the lowest id of equals), as the claim
 * word hands the chunks beyond `threads` to whichever thread is done first. */
static inline void sim_assign(uint64_t *load, int threads, long c, uint64_t ns)
{
    int t = 0;
    if (c < threads)
        t = (int)c;
    else
        for (int i = 1; i < threads; i++)
            if (load[i] < load[t])
                t = i;
    load[t] += ns;
}

static uint64_t max_load(const uint64_t *load, int threads)
{
    uint64_t m = 0;
    for (int t = 0; t < threads; t++)
        m = load[t] > m ? load[t] : m;
    return m;
}

/* The threads a job of `chunks` chunks asking for `threads` runs on: 1 .. min(chunks, MAX_THREADS). */
static int job_threads(long chunks, int threads)
{
    if (threads > chunks)
        threads = (int)chunks;
    return threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
}

uint64_t mxcc_pool_sim_schedule(const uint64_t *chunk_ns, long chunks, int threads)
{
    if (chunks <= 0)
        return 0;
    threads = job_threads(chunks, threads);
    uint64_t load[MAX_THREADS] = {0};
    for (long c = 0; c < chunks; c++)
        sim_assign(load, threads, c, chunk_ns[c]);
    return max_load(load, threads);
}

/* A job under simulation: every chunk in the caller (as serial() runs them), timed and placed as it ends. */
static void simulate(long chunks, int asked, mxcc_chunk_fn fn, void *arg)
{
    const int threads = job_threads(chunks, asked);
    uint64_t load[MAX_THREADS] = {0};
    uint64_t serial_ns = 0;
    const int was = in_chunk;
    in_chunk = 1;
    for (long c = 0; c < chunks; c++) {
        const long t0 = now_ns();
        fn(arg, c, 0);
        const uint64_t ns = (uint64_t)(now_ns() - t0);
        sim_assign(load, threads, c, ns);
        serial_ns += ns;
    }
    in_chunk = was;
    const mxcc_pool_sim job = {.jobs = 1, .chunks = chunks, .max_chunks = chunks, .min_threads = asked,
                               .max_threads = asked, .serial_ns = serial_ns, .sim_ns = max_load(load, threads)};
    mxcc_pool_sim_add(&sim, &job);
}

void mxcc_pool_sim_add(mxcc_pool_sim *to, const mxcc_pool_sim *from)
{
    if (!from->jobs)
        return;
    to->jobs += from->jobs;
    to->chunks += from->chunks;
    to->max_chunks = from->max_chunks > to->max_chunks ? from->max_chunks : to->max_chunks;
    to->min_threads = to->min_threads && to->min_threads <= from->min_threads ? to->min_threads : from->min_threads;
    to->max_threads = from->max_threads > to->max_threads ? from->max_threads : to->max_threads;
    to->serial_ns += from->serial_ns;
    to->sim_ns += from->sim_ns;
}

void mxcc_pool_simulate(int threads)
{
    atomic_store(&sim_threads, threads < 0 ? 0 : threads > MAX_THREADS ? MAX_THREADS : threads);
    sim = (mxcc_pool_sim){0};
}

int mxcc_pool_simulating(void)
{
    return atomic_load_explicit(&sim_threads, memory_order_relaxed);
}

void mxcc_pool_sim_take(mxcc_pool_sim *out)
{
    *out = sim;
    sim = (mxcc_pool_sim){0};
}

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

#ifdef _OPENMP
static int use_pool(void)
{
    const int f = atomic_load_explicit(&forced, memory_order_relaxed);
    return f < 0 ? selected : f;
}
#endif

/* The caller, out of work: run every chunk c < threads of the job `seq` that a worker claimed and has not begun
 * (its thread lost its core between the two: the scheduler gave it to another process). The claimer, back, fails
 * to begin (begin) and leaves the job alone. A chunk already begun is waited for: its thread may be writing it;
 * so is one from the claim word (c >= threads: no begun word, which would take one per chunk). */
static long take_back(mxcc_chunk_fn fn, void *arg, uint64_t seq, int threads)
{
    long taken = 0;
    for (int c = 0; c < threads; c++) {   /* chunk 0 too: a worker may have claimed the caller's */
        uint64_t v = atomic_load_explicit(&tag[c].begun, memory_order_acquire);
        if (v >> 1 >= seq || atomic_load_explicit(&tag[c].own, memory_order_acquire) != seq
            || !atomic_compare_exchange_strong_explicit(&tag[c].begun, &v, seq << 1 | 1, memory_order_acq_rel,
                                                        memory_order_acquire))
            continue;
        fn(arg, c, 0);
        taken++;
        finish();
    }
    if (taken)
        atomic_fetch_add_explicit(&pool.takes, taken, memory_order_relaxed);
    return taken;
}

void mxcc_parallel_chunks(long chunks, int threads, mxcc_chunk_fn fn, void *arg)
{
    if (chunks <= 0)
        return;
    if (threads > MAX_THREADS)
        threads = MAX_THREADS;
    const int asked = threads < 1 ? 1 : threads;   /* what a simulation records */
    if (threads > chunks)
        threads = (int)chunks;
    int nested = in_chunk;
#ifdef _OPENMP
    nested = nested || omp_in_parallel();
#endif
    if (__builtin_expect(atomic_load_explicit(&sim_threads, memory_order_relaxed) != 0, 0) && !nested) {
        simulate(chunks, asked, fn, arg);
        return;
    }
#ifdef _OPENMP
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
    /* publish: the fields under an odd sequence number, then the claim word, then the even number */
    const uint64_t seq = atomic_load_explicit(&pool.seq, memory_order_relaxed) + 2;
    atomic_store_explicit(&pool.seq, seq - 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&pool.fn, fn, memory_order_relaxed);
    atomic_store_explicit(&pool.arg, arg, memory_order_relaxed);
    atomic_store_explicit(&pool.chunks, chunks, memory_order_relaxed);
    atomic_store_explicit(&pool.threads, threads, memory_order_relaxed);
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.sampled, (seq >> 1) % SAMPLE_EVERY == 0
                          || atomic_load_explicit(&pool.suspect, memory_order_relaxed), memory_order_relaxed);
    atomic_store_explicit(&pool.claim, (seq >> 1 & 0xff) << 56 | (uint64_t)threads << 48 | (uint64_t)chunks << 24
                                       | (uint64_t)threads, memory_order_release);
    atomic_store_explicit(&pool.seq, seq, memory_order_release);
    if (atomic_load_explicit(&pool.doze, memory_order_relaxed))
        atomic_store_explicit(&pool.caller_cpu, sched_getcpu(), memory_order_relaxed);   /* keep_off */
    atomic_fetch_add(&pool.wake, 1);
    if (atomic_load(&pool.sleepers) > 0) {
        futex_wake_all(&pool.wake);
        atomic_fetch_add_explicit(&pool.wakeups, 1, memory_order_relaxed);
    }
    in_chunk = 1;
    const long t_post = now_ns();
    long mine = run_job(0);
    /* only chunks another thread claimed are left: wait for them, and take back one claimed and not begun */
    if (atomic_load_explicit(&pool.done, memory_order_acquire) < chunks) {
        const long t_idle = now_ns();
        const long per_chunk = mine ? (t_idle - t_post) / mine : 0;
        const long take_at = t_idle + (2 * per_chunk > TAKE_NS ? 2 * per_chunk : TAKE_NS);
        for (long spins = 0; atomic_load_explicit(&pool.done, memory_order_acquire) < chunks; spins++) {
            if (spins % 64 == 63 && now_ns() >= take_at)
                mine += take_back(fn, arg, seq, threads);
            if (spins < 100000)
                cpu_relax();
            else
                sched_yield();     /* the thread running it lost its core: give it ours */
        }
    }
    in_chunk = 0;
    /* every chunk is done, so every sampled one is counted: the window (its sums are the caller's under busy) */
    if (threads > pool.window_threads)
        pool.window_threads = threads;
    const long clock_ns = atomic_load_explicit(&pool.clock_ns, memory_order_relaxed);
    const int had = pool.window_threads;
    const long t_end = clock_ns >= WINDOW_NS && clock_ns >= THREAD_WINDOW_NS * had ? now_ns() : 0;
    if (t_end && t_end - pool.window_start >= WINDOW_WALL_NS) {
        pool.window_start = t_end;
        int cap = 0, renew = 0;
        /* acting: a cap or doze not yet over (the flags are cleared lazily, by the next job or kernel after it) */
        const int acting = (atomic_load_explicit(&pool.doze, memory_order_relaxed)
                            || atomic_load_explicit(&pool.cap, memory_order_relaxed))
                           && t_end < atomic_load_explicit(&pool.cap_until, memory_order_relaxed);
        for (int t = 0; t < had; t++) {
            const long c = atomic_load_explicit(&by_thread[t].clock_ns, memory_order_relaxed);
            const long lost = c - atomic_load_explicit(&by_thread[t].cpu_ns, memory_order_relaxed);
            /* a thread with little time in the window (a few small chunks) says nothing either way */
            if (c >= clock_ns / 8 / had) {
                pool.over[t] = 100 * lost >= LOST_SHARE * c ? pool.over[t] + 1 : 0;
                renew |= acting && 100 * lost >= RENEW_SHARE * c;
            }
            cap |= pool.over[t] >= 2;   /* two windows in a row: one is a daemon's moment */
            atomic_store_explicit(&by_thread[t].clock_ns, 0, memory_order_relaxed);
            atomic_store_explicit(&by_thread[t].cpu_ns, 0, memory_order_relaxed);
        }
        if (cap) {
            pool.act_ns = act_length(t_end, atomic_load_explicit(&pool.cap_until, memory_order_relaxed), pool.act_ns);
            atomic_store_explicit(&pool.cap_until, t_end + pool.act_ns, memory_order_relaxed);
            /* counted once per cap or doze: a doze that goes on is only extended */
            if (had >= CAP_MIN_THREADS)
                atomic_store_explicit(&pool.cap, had - 1, memory_order_relaxed);
            if (had >= CAP_MIN_THREADS || !atomic_exchange_explicit(&pool.doze, 1, memory_order_relaxed))
                atomic_fetch_add_explicit(&pool.caps, 1, memory_order_relaxed);
            for (int t = 0; t < had; t++)
                pool.over[t] = 0;
        } else if (renew) {
            /* still losing time while the pool acts: it goes on for the length it was set to (act_length) */
            const long until = t_end + pool.act_ns;
            if (until > atomic_load_explicit(&pool.cap_until, memory_order_relaxed))
                atomic_store_explicit(&pool.cap_until, until, memory_order_relaxed);
        }
        atomic_store_explicit(&pool.clock_ns, 0, memory_order_relaxed);
        pool.window_threads = 0;
        /* sample every job while a thread's last window lost time and the pool has not acted on it yet */
        int suspect = 0;
        for (int t = 0; t < had; t++)
            suspect |= pool.over[t] > 0;
        atomic_store_explicit(&pool.suspect, suspect && !atomic_load_explicit(&pool.doze, memory_order_relaxed)
                                             && !atomic_load_explicit(&pool.cap, memory_order_relaxed),
                              memory_order_relaxed);
    }
    if (atomic_load_explicit(&pool.doze, memory_order_relaxed)
        && now_ns() >= atomic_load_explicit(&pool.cap_until, memory_order_relaxed))
        atomic_store_explicit(&pool.doze, 0, memory_order_relaxed);   /* poll again */
    atomic_fetch_add_explicit(&pool.jobs, 1, memory_order_relaxed);
    if (mine == chunks)
        atomic_fetch_add_explicit(&pool.caller_only, 1, memory_order_relaxed);
    pthread_mutex_unlock(&pool.busy);
}

int mxcc_pool_selected(void)
{
#ifdef _OPENMP
    return use_pool();
#else
    return 1;
#endif
}

int mxcc_pool_threads(int threads)
{
    const int cap = atomic_load_explicit(&pool.cap, memory_order_relaxed);
    if (!cap || threads <= cap)
        return threads;
#ifdef _OPENMP
    if (!use_pool())
        return threads;   /* an OpenMP region: no thread of its team can be left out */
#endif
    if (now_ns() < atomic_load_explicit(&pool.cap_until, memory_order_relaxed))
        return cap;
    /* lifted: all threads again. Cleared under the job lock, which a window's evaluation (the only writer of a
     * new cap) holds: a plain store here could land just after another thread's job set a new cap, and undo it.
     * A job running now: cleared by a later call. */
    if (pthread_mutex_trylock(&pool.busy) == 0) {
        if (now_ns() >= atomic_load_explicit(&pool.cap_until, memory_order_relaxed))
            atomic_store_explicit(&pool.cap, 0, memory_order_relaxed);
        pthread_mutex_unlock(&pool.busy);
    }
    return threads;
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

long mxcc_pool_wakeups(void)
{
    return atomic_load(&pool.wakeups);
}

long mxcc_pool_takes(void)
{
    return atomic_load(&pool.takes);
}

long mxcc_pool_caps(void)
{
    return atomic_load(&pool.caps);
}
