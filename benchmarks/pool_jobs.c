/* What a parallel job costs on this machine at 1..T threads, apart from the kernels: the split simulator
 * (`<net>_bench --simulate-threads T`) times chunks one at a time on one core, so it leaves out what running
 * them at once costs. Per thread count, microseconds per job of T chunks (median of 7 runs):
 *
 *   empty   chunks that do nothing: the pool's hand-off and join
 *   fma     each chunk ~20 us of AVX-512 (or AVX2) FMAs on registers; "x" is the time over 1 thread's: a clock
 *           that drops with more busy cores, or two threads sharing one core (SMT), shows here
 *   local   each chunk sums and rewrites its own 128 KB slice (in its core's cache from the job before)
 *   remote  each chunk sums the slice the next thread wrote in the job before, then writes its own: the layer
 *           handing its output to the next one on other cores; "remote - local" is the cost of the hand-off
 *
 *   gcc -O3 -march=native -pthread -Iruntime_c/pool benchmarks/pool_jobs.c runtime_c/pool/pool.c \
 *       -o /tmp/pool_jobs && /tmp/pool_jobs [MAX_THREADS]
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mxcc_pool.h"

#define SLICE (128 * 1024 / 4)   /* floats per chunk's slice */
#define RUNS 7

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

typedef struct job {
    int kind, threads;
    long iters, round;
    float *buf;
    volatile float sink[256];
} job;

#if defined(__AVX512F__)
typedef __m512 vec;
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
#define LOAD _mm512_load_ps
#define STORE _mm512_store_ps
static float first(vec v) { return _mm512_cvtss_f32(v); }
#else
typedef __m256 vec;
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
#define LOAD _mm256_load_ps
#define STORE _mm256_store_ps
static float first(vec v) { return _mm256_cvtss_f32(v); }
#endif

static void chunk(void *arg, long c, int worker)
{
    job *j = arg;
    (void)worker;
    if (j->kind == 1) {   /* fma: 12 independent chains */
        vec a[12];
        const vec m = SET1(0.999f), b = SET1(0.001f);
        for (int i = 0; i < 12; i++) a[i] = SET1((float)(i + c));
        for (long n = 0; n < j->iters; n++)
            for (int i = 0; i < 12; i++) a[i] = FMA(a[i], m, b);
        float s = 0;
        for (int i = 0; i < 12; i++) s += first(a[i]);
        j->sink[c % 256] = s;
    } else if (j->kind >= 2) {   /* local (2): its own slice; remote (3): the next thread's */
        const long T = j->threads, in = j->round % 2 * T, out = (1 - j->round % 2) * T;
        const float *src = j->buf + (in + (j->kind == 2 ? c : (c + 1) % T)) * SLICE;
        const int L = sizeof(vec) / sizeof(float);
        vec a0 = SET1(0), a1 = SET1(0), a2 = SET1(0), a3 = SET1(0), one = SET1(1.0f);
        for (long i = 0; i < SLICE; i += 4 * L) {   /* 4 chains: bound by the reads, not the adds */
            a0 = FMA(LOAD(src + i), one, a0);
            a1 = FMA(LOAD(src + i + L), one, a1);
            a2 = FMA(LOAD(src + i + 2 * L), one, a2);
            a3 = FMA(LOAD(src + i + 3 * L), one, a3);
        }
        const float s = first(a0) + first(a1) + first(a2) + first(a3);
        float *dst = j->buf + (out + c) * SLICE;   /* read by the next job */
        const vec v = SET1(s * 1e-9f);
        for (long i = 0; i < SLICE; i += L) STORE(dst + i, v);
        j->sink[c % 256] = s;
    }
}

/* the kind's median microseconds per job over RUNS runs of `jobs` jobs on T threads */
static double per_job(job *j, int T, int kind, long jobs)
{
    double t[RUNS];
    j->kind = kind;
    j->threads = T;
    for (int r = 0; r < RUNS; r++) {
        const double t0 = now_us();
        for (long k = 0; k < jobs; k++, j->round++)   /* what a job writes, the next one reads */
            mxcc_parallel_chunks(T, T, chunk, j);
        t[r] = (now_us() - t0) / jobs;
    }
    for (int a = 0; a < RUNS; a++)
        for (int b = a + 1; b < RUNS; b++)
            if (t[b] < t[a]) { const double x = t[a]; t[a] = t[b]; t[b] = x; }
    return t[RUNS / 2];
}

int main(int argc, char **argv)
{
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const int max_t = argc > 1 ? atoi(argv[1]) : (int)cpus;
    job *j = calloc(1, sizeof *j);
    j->buf = aligned_alloc(64, (size_t)2 * max_t * SLICE * sizeof(float));
    for (long i = 0; i < 2L * max_t * SLICE; i++) j->buf[i] = 1.0f;
    /* ~20 us of FMAs on one core: calibrate */
    j->iters = 1000;
    j->kind = 1;
    double t0 = now_us();
    for (int k = 0; k < 50; k++) chunk(j, 0, 0);
    const double one = (now_us() - t0) / 50;
    j->iters = (long)(1000 * 20.0 / one);
    printf("%ld CPUs; an fma chunk takes 20 us on one thread alone; slices of %d KB\n", cpus, SLICE * 4 / 1024);
    printf("%7s %9s %9s %6s %9s %9s %14s\n", "threads", "empty us", "fma us", "x", "local us", "remote us",
           "remote-local");
    double fma1 = 0;
    for (int T = 1; T <= max_t; T = T < max_t && T * 2 > max_t ? max_t : T * 2) {
        const double e = per_job(j, T, 0, 20000), f = per_job(j, T, 1, 500);
        if (T == 1) fma1 = f;
        const double l = per_job(j, T, 2, 300), r = per_job(j, T, 3, 300);
        printf("%7d %9.2f %9.2f %6.2f %9.2f %9.2f %14.2f\n", T, e, f, f / fma1, l, r, r - l);
        if (T == max_t) break;
    }
    return 0;
}
