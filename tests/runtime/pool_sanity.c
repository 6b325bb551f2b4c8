/* The thread pool (runtime_c/pool/) alone: every chunk runs exactly once, worker ids stay below the job's
 * thread count, a nested call and a second caller run serially, and many short jobs from several caller
 * threads at once lose nothing. Built plain, with ThreadSanitizer and with AddressSanitizer by
 * tests/runtime/test_pool.py (and with OpenMP: argument "pool" runs the jobs on the pool, none as OpenMP
 * regions); prints "ok <pool jobs> <those the caller ran alone>" or exits 1. Argument "cap" (a build with a short
 * CAP_NS and CAP_MIN_THREADS 2; exit 77 where two spinning threads do not get two CPUs): an uneven split
 * alone does not make the pool split for fewer threads
 * (mxcc_pool_threads); three times as many spinning threads as CPUs do, a child forked then is not capped, and
 * all threads come back once the cap's time is over. Argument "nocap" (a default build): 2-thread jobs stay on
 * 2 threads however oversubscribed the machine, and the pool finds it oversubscribed (its workers doze); while
 * it dozes the worker keeps off one CPU (the caller's) and sleeps between jobs, and it may run anywhere again
 * once the doze is over (exit 77 where that does not come while two spinning threads do not get two CPUs: a host
 * holding its vCPUs back keeps the doze going, rightly).
 * Argument "take" (a build with TEST_STALL_NS and TEST_STALL_EVERY: every TEST_STALL_EVERY-th job's workers stop
 * TEST_STALL_NS between claiming their own chunk and beginning it): the caller takes those chunks back, each
 * chunk still runs once, and a claimer back after its job is over (the job's memory freed) touches nothing of it.
 * Argument "transient" (a default build): spinning threads only until the pool first finds the machine
 * oversubscribed; its doze is then the short first one (pool.c ACT_MIN_NS, an eighth of CAP_NS), over well
 * before CAP_NS. */
#define _GNU_SOURCE
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pool/mxcc_pool.h"

#define MAX_CHUNKS 4096
#ifndef CAP_NS
#define CAP_NS 1000000000L   /* pool.c's */
#endif

typedef struct job {
    _Atomic int hits[MAX_CHUNKS];
    _Atomic int bad_worker;
    int threads;
    long chunks;
    _Atomic long nested_sum;
} job;

static void nested_chunk(void *arg, long c, int worker)
{
    job *j = arg;
    if (worker != 0)        /* a nested call runs serially in the calling thread */
        atomic_store(&j->bad_worker, 1);
    atomic_fetch_add(&j->nested_sum, c + 1);
}

static void chunk(void *arg, long c, int worker)
{
    job *j = arg;
    atomic_fetch_add(&j->hits[c], 1);
    if (worker < 0 || worker >= j->threads)
        atomic_store(&j->bad_worker, 1);
    if (c == 0) {           /* a call from inside a chunk */
        job inner = {.threads = 4, .chunks = 3};
        mxcc_parallel_chunks(3, 4, nested_chunk, &inner);
        if (atomic_load(&inner.nested_sum) != 6 || atomic_load(&inner.bad_worker))
            atomic_store(&j->bad_worker, 1);
    }
}

static int run_one(int threads, long chunks)
{
    job *j = calloc(1, sizeof *j);
    j->threads = threads;
    j->chunks = chunks;
    mxcc_parallel_chunks(chunks, threads, chunk, j);
    int ok = !atomic_load(&j->bad_worker);
    for (long c = 0; c < chunks; c++)
        ok = ok && atomic_load(&j->hits[c]) == 1;
    free(j);
    return ok;
}

static void *caller(void *arg)
{
    unsigned long seed = (unsigned long)arg;
    long bad = 0;
    for (int i = 0; i < 3000; i++) {
        seed = seed * 1103515245 + 12345;
        const int threads = 1 + (int)((seed >> 16) % 4);
        const long chunks = 1 + (long)((seed >> 8) % 64);
        bad += !run_one(threads, chunks);
    }
    return (void *)bad;
}

static long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* a chunk of 50 us of clock time on the caller, 200 us on a worker (an uneven split) */
static void uneven_chunk(void *arg, long c, int worker)
{
    (void)arg;
    (void)c;
    const long until = now_ns() + (worker ? 200000 : 50000);
    while (now_ns() < until) {}
}

/* a chunk of 10 us of clock time */
static void short_chunk(void *arg, long c, int worker)
{
    (void)arg;
    (void)c;
    (void)worker;
    const long until = now_ns() + 10000;
    while (now_ns() < until) {}
}

/* `n` 2-thread jobs of 10 us chunks, `gap_ns` apart: how many of them woke a sleeping worker */
static long wakeups_of_jobs(int n, long gap_ns)
{
    const long w0 = mxcc_pool_wakeups();
    for (int i = 0; i < n; i++) {
        mxcc_parallel_chunks(2, 2, short_chunk, NULL);
        const long until = now_ns() + gap_ns;
        while (now_ns() < until) {}
    }
    return mxcc_pool_wakeups() - w0;
}

static _Atomic int hogging;
static void *hog(void *arg)
{
    (void)arg;
    while (atomic_load_explicit(&hogging, memory_order_relaxed)) {}
    return NULL;
}

/* 2-thread jobs for up to `ns`: whether the pool capped them to one thread on the way */
static int capped_within(long ns)
{
    const long start = now_ns();
    while (now_ns() - start < ns) {
        mxcc_parallel_chunks(2, 2, uneven_chunk, NULL);
        if (mxcc_pool_threads(2) != 2)
            return 1;
    }
    return 0;
}

/* 2-thread jobs for up to `ns`, or (until_found) until the pool first finds the machine oversubscribed: whether
 * it did */
static int found_within(long ns)
{
    const long start = now_ns();
    while (now_ns() - start < ns) {
        mxcc_parallel_chunks(2, 2, uneven_chunk, NULL);
        if (mxcc_pool_caps() > 0)
            return 1;
    }
    return 0;
}

/* 2-thread jobs for up to `ns` with three times as many spinning threads as CPUs (the pool's threads get
 * about a third of a core each): whether the pool capped them (until_found: whether it found the machine
 * oversubscribed, stopping the spinning threads as soon as it did) */
static int capped_while_oversubscribed(long ns, int until_found)
{
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN), nhogs = 3 * (cpus > 0 ? cpus : 1);
    pthread_t *hogs = malloc(sizeof *hogs * (size_t)nhogs);
    atomic_store(&hogging, 1);
    for (long i = 0; i < nhogs; i++)
        pthread_create(&hogs[i], NULL, hog, NULL);
    const int capped = until_found ? found_within(ns) : capped_within(ns);
    atomic_store(&hogging, 0);
    for (long i = 0; i < nhogs; i++)
        pthread_join(hogs[i], NULL);
    free(hogs);
    return capped;
}

/* The threads of this process whose CPUs are fewer than the main thread's (a dozing worker keeps off one) */
static int narrowed_threads(void)
{
    cpu_set_t all, m;
    if (sched_getaffinity(0, sizeof all, &all))
        return -1;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.' && sched_getaffinity((pid_t)atoi(e->d_name), sizeof m, &m) == 0
            && CPU_COUNT(&m) < CPU_COUNT(&all))
            n++;
    closedir(d);
    return n;
}

/* 2-thread jobs until narrowed_threads() is `want` or `ns` have passed: whether it got there */
static int narrowed_within(int want, long ns)
{
    const long start = now_ns();
    while (now_ns() - start < ns) {
        mxcc_parallel_chunks(2, 2, uneven_chunk, NULL);
        if (narrowed_threads() == want)
            return 1;
    }
    return 0;
}

/* A spinning thread for 200 ms: the clock time it waited for a CPU, in percent */
static void *spin_lost(void *arg)
{
    struct timespec c;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
    const long t0 = now_ns(), c0 = c.tv_sec * 1000000000L + c.tv_nsec;
    while (now_ns() - t0 < 200000000L) {}
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
    const long t1 = now_ns(), c1 = c.tv_sec * 1000000000L + c.tv_nsec;
    *(long *)arg = 100 * ((t1 - t0) - (c1 - c0)) / (t1 - t0);
    return NULL;
}

/* Whether two threads each get a CPU now: a VM's host can hold its vCPUs back (two spinning threads getting
 * 0.5-0.8 of a CPU each, docs/performance.md), and then the pool finds the machine oversubscribed, rightly */
static int two_cpus_free(void)
{
    long lost[2] = {0, 0};
    pthread_t t;
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2 || pthread_create(&t, NULL, spin_lost, &lost[1]))
        return 0;
    spin_lost(&lost[0]);
    pthread_join(t, NULL);
    return lost[0] < 10 && lost[1] < 10;
}

static int cap_test(void)
{
    /* an uneven split keeps the caller waiting, but no thread loses its core: no cap (where the machine gives
     * two threads two CPUs: else exit 77, which the test reports as a skip) */
    if (!two_cpus_free()) {
        fprintf(stderr, "two spinning threads do not get two CPUs here\n");
        return 77;
    }
    if (mxcc_pool_threads(2) != 2 || capped_within(300000000L)) {
        fprintf(stderr, "capped on an uneven split, no thread preempted\n");
        return 1;
    }
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN), nhogs = 3 * (cpus > 0 ? cpus : 1);
    if (!capped_while_oversubscribed(5000000000L, 0)) {
        fprintf(stderr, "5 s of jobs on an oversubscribed machine (%ld spinning threads, %ld CPUs), still 2 threads\n",
                nhogs, cpus);
        return 1;
    }
    const long t = now_ns();
    if (mxcc_pool_threads(4) != 1 || mxcc_pool_threads(1) != 1) {
        fprintf(stderr, "capped: %d threads of 4, %d of 1 (expected 1, 1)\n", mxcc_pool_threads(4),
                mxcc_pool_threads(1));
        return 1;
    }
    /* a child forked while the parent is capped starts a pool of its own, uncapped, and loses no chunk */
    const pid_t child = fork();
    if (child == 0) {
        int ok = mxcc_pool_threads(2) == 2;
        for (int th = 1; th <= 4 && ok; th++)
            for (long c = 1; c <= 40 && ok; c += 7)
                ok = run_one(th, c);
        _exit(ok ? 0 : 1);
    }
    int status = 1;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) {
        fprintf(stderr, "a child forked while capped: still capped, or a chunk lost or repeated\n");
        return 1;
    }
    while (mxcc_pool_threads(2) == 1) {
        if (now_ns() - t > 20 * (long)CAP_NS) {
            fprintf(stderr, "the cap outlived CAP_NS 20 times over\n");
            return 1;
        }
    }
    printf("ok capped, lifted after %.0f ms\n", (now_ns() - t) / 1e6);
    return 0;
}

/* a chunk of 50 us of clock time that counts its runs */
static void slow_chunk(void *arg, long c, int worker)
{
    job *j = arg;
    atomic_fetch_add(&j->hits[c], 1);
    if (worker < 0 || worker >= j->threads)
        atomic_store(&j->bad_worker, 1);
    const long until = now_ns() + 50000;
    while (now_ns() < until) {}
}

static int take_test(void)
{
    const long t0 = mxcc_pool_takes();
    for (int i = 0; i < 300; i++) {
        job *j = calloc(1, sizeof *j);
        j->threads = 2 + i % 3;
        j->chunks = j->threads + i % 2;      /* and one from the claim word every other job */
        mxcc_parallel_chunks(j->chunks, j->threads, slow_chunk, j);
        int ok = !atomic_load(&j->bad_worker);
        for (long c = 0; c < j->chunks; c++)
            ok = ok && atomic_load(&j->hits[c]) == 1;
        free(j);                             /* a late claimer that ran it anyway: AddressSanitizer says so */
        if (!ok) {
            fprintf(stderr, "job %d (%d threads): a chunk ran twice, never, or on a worker id >= threads\n", i,
                    2 + i % 3);
            return 1;
        }
    }
    const long taken = mxcc_pool_takes() - t0;
    if (taken == 0) {
        if (!two_cpus_free()) {
            fprintf(stderr, "two spinning threads do not get two CPUs here (no worker claimed a chunk in time)\n");
            return 77;
        }
        fprintf(stderr, "300 jobs, every third with its workers stopped between claim and begin: nothing taken back\n");
        return 1;
    }
    printf("ok take, %ld chunks taken back\n", taken);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "take") == 0)
        return take_test();
    if (argc > 1 && argv[1][0] == 'c')
        return cap_test();
    if (argc > 1 && argv[1][0] == 'n') {   /* "nocap": 2-thread jobs are below CAP_MIN_THREADS: they doze */
        if (capped_while_oversubscribed(2000000000L, 0)) {
            fprintf(stderr, "2-thread jobs capped (CAP_MIN_THREADS is 4 unless the build sets it)\n");
            return 1;
        }
        if (mxcc_pool_caps() < 1) {
            fprintf(stderr, "2 s of 2-thread jobs on an oversubscribed machine: never found oversubscribed\n");
            return 1;
        }
        /* the doze lasts CAP_NS after the last window that lost time: the worker is kept off the caller's CPU
         * (where there is another), then allowed everywhere again */
        cpu_set_t all;
        const int cpus = sched_getaffinity(0, sizeof all, &all) == 0 ? CPU_COUNT(&all) : 0;
        if (cpus > 1 && !narrowed_within(1, 100000000L)) {
            fprintf(stderr, "dozing on %d CPUs: %d threads kept off a CPU (expected the worker)\n", cpus,
                    narrowed_threads());
            return 1;
        }
        /* and it sleeps between jobs (it does not poll SPIN_NS): jobs 100 us apart wake it */
        const long woke = wakeups_of_jobs(400, 100000);
        if (woke < 300) {
            fprintf(stderr, "dozing: %ld of 400 jobs 100 us apart woke a sleeping worker (expected >= 300)\n", woke);
            return 1;
        }
        if (!narrowed_within(0, 20 * 1000000000L)) {
            if (!two_cpus_free()) {   /* a machine that loses time without the load keeps the doze going */
                fprintf(stderr, "two spinning threads do not get two CPUs here: the pool rightly still dozes\n");
                return 77;
            }
            fprintf(stderr, "20 s after the machine was busy: a worker still kept off a CPU\n");
            return 1;
        }
        printf("ok not capped, found oversubscribed %ld times, %ld of 400 jobs 100 us apart woke the worker\n",
               mxcc_pool_caps(), woke);
        return 0;
    }
    if (argc > 1 && argv[1][0] == 't') {   /* "transient": a passing load gets the short first doze */
        cpu_set_t all;
        const int cpus = sched_getaffinity(0, sizeof all, &all) == 0 ? CPU_COUNT(&all) : 0;
        /* a machine that loses time without the load would keep the doze going (rightly): skip there */
        if (cpus < 2 || !two_cpus_free()) {
            fprintf(stderr, "two spinning threads do not get two CPUs here\n");
            return 77;
        }
        if (!capped_while_oversubscribed(5000000000L, 1)) {
            fprintf(stderr, "5 s of 2-thread jobs on an oversubscribed machine: never found oversubscribed\n");
            return 1;
        }
        const long t = now_ns();
        /* the doze began when the pool found the load: the worker keeps off the caller's CPU from its next job */
        if (!narrowed_within(1, 100000000L)) {
            fprintf(stderr, "found oversubscribed, but no worker kept off the caller's CPU\n");
            return 1;
        }
        /* ... and the doze ends an eighth of CAP_NS after it began: within half of CAP_NS allows for a window
         * or two of the load's tail */
        if (!narrowed_within(0, CAP_NS / 2 - (now_ns() - t))) {
            fprintf(stderr, "a worker still kept off a CPU %.0f ms after a passing load (CAP_NS %.0f ms)\n",
                    (now_ns() - t) / 1e6, CAP_NS / 1e6);
            return 1;
        }
        printf("ok transient, found oversubscribed %ld times, doze over after %.0f ms\n", mxcc_pool_caps(),
               (now_ns() - t) / 1e6);
        return 0;
    }
    if (argc > 1 && argv[1][0] == 'p')   /* "pool": jobs on the pool (an OpenMP build runs OpenMP regions otherwise) */
        mxcc_pool_enable(1);
    for (int t = 1; t <= 8; t++)
        for (long c = 1; c <= 40; c += 3)
            if (!run_one(t, c)) {
                fprintf(stderr, "threads %d chunks %ld: a chunk ran twice, never, or on a worker id >= threads\n", t, c);
                return 1;
            }
    if (!run_one(4, MAX_CHUNKS)) {
        fprintf(stderr, "4096 chunks: lost or repeated\n");
        return 1;
    }
    pthread_t t[3];
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, caller, (void *)(i + 1));
    long bad = 0;
    for (int i = 0; i < 3; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    if (bad) {
        fprintf(stderr, "%ld jobs from concurrent callers went wrong\n", bad);
        return 1;
    }
    long jobs, caller_only;
    mxcc_pool_stats(&jobs, &caller_only);
    printf("ok %ld %ld\n", jobs, caller_only);
    return 0;
}
