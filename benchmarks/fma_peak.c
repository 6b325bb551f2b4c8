/* The FMA ceiling of one core: 12 independent chains of AVX-512 FMAs (or AVX2 ones where AVX-512F is
 * absent), GFLOP/s of the best of 20 repetitions. The reference for "percent of peak" claims in
 * docs/performance.md.
 *
 *   gcc -O3 -march=native benchmarks/fma_peak.c -o /tmp/fma_peak && /tmp/fma_peak
 *
 * Each chain starts from a different value so that the compiler cannot merge them; 12 chains cover the
 * FMA latency (4 cycles) times the 2 FMA ports with room to spare. */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
#define ISA "AVX-512F"
static float hsum(vec v) { return _mm512_reduce_add_ps(v); }
#else
typedef __m256 vec;
#define LANES 8
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
#define ISA "AVX2+FMA"
static float hsum(vec v)
{
    float f[8];
    _mm256_storeu_ps(f, v);
    return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
#endif
#define CHAINS 12

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    (void)argv;
    const vec b = SET1(1.0000001f), c = SET1(1e-7f);
    vec a[CHAINS];
    for (int j = 0; j < CHAINS; j++) a[j] = SET1((float)(argc + j));
    double best = 0.0;
    for (int r = 0; r < 20; r++) {
        const long n = 20000000;
        double t = now();
        for (long i = 0; i < n; i++) {
#pragma GCC unroll 12
            for (int j = 0; j < CHAINS; j++) a[j] = FMA(a[j], b, c);
        }
        t = now() - t;
        const double gflops = 2.0 * LANES * CHAINS * n / t / 1e9;
        if (gflops > best) best = gflops;
    }
    float s = 0.0f;
    for (int j = 0; j < CHAINS; j++) s += hsum(a[j]);
    printf("%s FMA peak, 1 thread: %.1f GFLOP/s (best of 20; checksum %g)\n", ISA, best, s);
    return 0;
}
