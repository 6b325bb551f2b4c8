/* The random numbers and buffers of the sanitizer drivers (conv_sanity.c, conv_packed_sanity.c,
 * winograd_sanity.c): xorshift64*, and heap blocks of exactly the asked size so that ASan guards their end. */
#ifndef MXCC_SANITY_RNG_H
#define MXCC_SANITY_RNG_H

#include <stdlib.h>

static unsigned long long next_u64(unsigned long long *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}
static inline int rand_int(unsigned long long *s, int lo, int hi) { return lo + (int)(next_u64(s) % (unsigned)(hi - lo + 1)); }
static inline float rand_float(unsigned long long *s) { return (float)(next_u64(s) >> 40) / (float)(1 << 24) * 2.0f - 1.0f; }

static inline float *rand_buf(unsigned long long *s, long n)
{
    float *x = malloc((size_t)n * sizeof(float) + 1);   /* exact size: ASan guards the end */
    for (long i = 0; i < n; i++) x[i] = rand_float(s);
    return x;
}

#endif /* MXCC_SANITY_RNG_H */
