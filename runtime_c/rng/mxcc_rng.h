/* mxcc counter-based random numbers: every draw is a pure function of (seed, step, stream, index).
 *
 *   key  = mxcc_rng_key(seed, step, stream)   one per (training step, random operator)
 *   bits = mxcc_rng_bits(key, i)               64 random bits for element i
 *
 * No state is shared between draws, so a kernel may draw its elements in any order and over any number
 * of threads and still get the same values, and a training run is reproducible from its seed alone.
 * `seed` is ctx->rng_seed (mxcc_ctx_set_seed; Executor.set_seed; `<net>_train --seed`), `step` is
 * ctx->rng_step (advanced once by every training forward), `stream` a 64-bit constant the compiler derives
 * from the node name, so two Dropout layers of one step draw independent masks.
 *
 * Mixing: SplitMix64's output function (Steele, Lea & Flood, "Fast splittable pseudorandom number
 * generators", OOPSLA 2014; java.util.SplittableRandom), which passes BigCrush. mxcc_rng_bits(key, i) is the
 * (i+1)-th output of SplitMix64 started from state `key`. tests/runtime/test_rng.py holds a numpy twin.
 *
 * NOTE: MXNet's own masks come from its global per-device generators and cannot be reproduced; tests
 * compare statistics and the consistency of output, mask and gradient instead.
 */
#ifndef MXCC_RNG_H
#define MXCC_RNG_H

#include <stdint.h>

#define MXCC_RNG_GOLDEN 0x9e3779b97f4a7c15ull   /* 2^64 / golden ratio: SplitMix64's increment */

/* SplitMix64's finalizer: a bijection of 64-bit words with full avalanche */
static inline uint64_t mxcc_rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The key of one random operator at one training step. */
static inline uint64_t mxcc_rng_key(uint64_t seed, uint64_t step, uint64_t stream)
{
    uint64_t k = mxcc_rng_mix(seed + MXCC_RNG_GOLDEN);
    k = mxcc_rng_mix(k ^ stream);
    return mxcc_rng_mix(k + (step + 1) * MXCC_RNG_GOLDEN);
}

/* 64 random bits for element i of the key's stream */
static inline uint64_t mxcc_rng_bits(uint64_t key, uint64_t i)
{
    return mxcc_rng_mix(key + (i + 1) * MXCC_RNG_GOLDEN);
}

/* uniform float in [0, 1) with 24 random bits (every float32 of the form k / 2^24) */
static inline float mxcc_rng_uniform(uint64_t key, uint64_t i)
{
    return (float)(mxcc_rng_bits(key, i) >> 40) * 0x1p-24f;
}

#endif /* MXCC_RNG_H */
