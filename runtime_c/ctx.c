/* Context create/free: the arena and the GEMM workspace, allocated once per context. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "mxcc_runtime.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

/* The arena and the bind-time weights: from 2 MiB up on 2 MiB boundaries and advised as huge pages (Linux,
 * transparent huge pages in "madvise" mode, the common default), so a layer's weights and activations take a
 * few TLB entries instead of one per 4 KiB. Smaller buffers: 64-byte aligned.
 * On Linux the big ones are a mapping of their own (mmap), not malloc's: once a large block is freed, glibc
 * raises its mmap threshold (up to 32 MiB) and serves the next large blocks from heap pages already mapped
 * 4 KiB each, where the advice changes nothing. A model created after another was freed then ran on small
 * pages (MobileNet 1.0 after ResNet-50 in one process, 1 thread: 11.3 ms against 10.9 alone, AMD Zen 4);
 * the fresh pages of a new mapping fault in huge. */
#define HUGE_BYTES ((size_t)2 << 20)
static size_t huge_round(size_t bytes) { return (bytes + HUGE_BYTES - 1) / HUGE_BYTES * HUGE_BYTES; }

static void *big_alloc(size_t bytes)
{
    if (bytes < HUGE_BYTES)
        return aligned_alloc(64, (bytes + 63) / 64 * 64);
    const size_t n = huge_round(bytes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    /* map one huge page more, then give back the ends around the 2 MiB-aligned n bytes */
    unsigned char *m = mmap(NULL, n + HUGE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    unsigned char *p = (unsigned char *)(((uintptr_t)m + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1));
    if (p > m)
        munmap(m, (size_t)(p - m));
    munmap(p + n, (size_t)(m + HUGE_BYTES - p));   /* p - m < HUGE_BYTES: some tail is always left */
    (void)madvise(p, n, MADV_HUGEPAGE);   /* advice only: without it the pages are 4 KiB, nothing else */
    return p;
#else
    return aligned_alloc(HUGE_BYTES, n);
#endif
}

static void big_free(void *p, size_t bytes)
{
    if (!p)
        return;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= HUGE_BYTES) {
        munmap(p, huge_round(bytes));
        return;
    }
#endif
    (void)bytes;
    free(p);
}

int mxcc_default_threads(void)
{
#ifdef _OPENMP
    const int now = omp_get_max_threads(), procs = omp_get_num_procs();
    return now > procs ? now : procs;
#else
    return 1;
#endif
}

mxcc_ctx *mxcc_ctx_create(size_t arena_bytes, size_t derived_bytes, int n_slots, size_t scratch_floats,
                          int threads, char *err, size_t errlen)
{
    if (threads <= 0)
        threads = mxcc_default_threads();
    mxcc_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        goto oom;
    ctx->arena_bytes = arena_bytes;
    /* NOTE: aligned_alloc needs a size that is a multiple of the alignment; the planner rounds up too. */
    if (arena_bytes && !(ctx->arena = big_alloc(arena_bytes)))
        goto oom;
    ctx->derived_bytes = derived_bytes;
    if (derived_bytes && !(ctx->derived = big_alloc(derived_bytes)))
        goto oom;
    ctx->n_slots = n_slots;
    if (!(ctx->slots = calloc(n_slots > 0 ? (size_t)n_slots : 1, sizeof(void *))))
        goto oom;
    if (!(ctx->gemm = mxcc_gemm_ws_create(threads)))
        goto oom;
    ctx->scratch_floats = scratch_floats;
    ctx->scratch_threads = threads;
    if (scratch_floats && !(ctx->scratch = aligned_alloc(64, (scratch_floats * sizeof(float) + 63) / 64 * 64)))
        goto oom;
    return ctx;
oom:
    if (err && errlen)
        snprintf(err, errlen, "mxcc: out of memory creating a context (arena %zu bytes)", arena_bytes);
    mxcc_ctx_free(ctx);
    return NULL;
}

int mxcc_ctx_reserve_threads(mxcc_ctx *ctx, size_t scratch_floats, int threads)
{
    if (threads <= ctx->scratch_threads)
        return 0;
    mxcc_gemm_ws *gemm = mxcc_gemm_ws_create(threads);
    float *scratch = NULL;
    if (!gemm || (scratch_floats && !(scratch = aligned_alloc(64, (scratch_floats * sizeof(float) + 63) / 64 * 64)))) {
        mxcc_gemm_ws_free(gemm);
        return -1;      /* the context keeps its buffers: still usable with as many threads as before */
    }
    mxcc_gemm_ws_free(ctx->gemm);
    free(ctx->scratch);
    ctx->gemm = gemm;
    ctx->scratch = scratch;
    ctx->scratch_floats = scratch_floats;
    ctx->scratch_threads = threads;
    return 0;
}

mxcc_ctx *mxcc_ctx_create_shared(const mxcc_ctx *base, size_t arena_bytes, int n_slots, size_t scratch_floats,
                                 int threads, char *err, size_t errlen)
{
    mxcc_ctx *ctx = mxcc_ctx_create(arena_bytes, 0, n_slots, scratch_floats, threads, err, errlen);
    if (!ctx)
        return NULL;
    ctx->derived = base->derived;
    ctx->derived_bytes = base->derived_bytes;
    ctx->derived_shared = 1;
    return ctx;
}

void mxcc_ctx_free(mxcc_ctx *ctx)
{
    if (!ctx)
        return;
    if (ctx->host_free)
        ctx->host_free(ctx->host);
    mxcc_gemm_ws_free(ctx->gemm);
    free(ctx->scratch);
    free(ctx->prof.events);
    free(ctx->slots);
    big_free(ctx->arena, ctx->arena_bytes);
    if (!ctx->derived_shared)
        big_free(ctx->derived, ctx->derived_bytes);
    free(ctx);
}

void mxcc_poison(void *p, size_t bytes)
{
    if (p && bytes)
        memset(p, 0xFF, bytes);
}

void mxcc_ctx_poison_scratch(mxcc_ctx *ctx)
{
    if (ctx->scratch)
        mxcc_poison(ctx->scratch, ctx->scratch_floats * sizeof(float));
}

void mxcc_accumulate_f32(float *dst, const float *src, long n)
{
    #pragma omp parallel for simd schedule(static) if (n >= (1L << 16))
    for (long i = 0; i < n; i++)
        dst[i] += src[i];
}

void **mxcc_ctx_slots(mxcc_ctx *ctx) { return ctx->slots; }
int mxcc_ctx_threads(const mxcc_ctx *ctx) { return ctx->scratch_threads; }

float *mxcc_ctx_hyper(mxcc_ctx *ctx) { return ctx->hyper; }

void mxcc_ctx_set_seed(mxcc_ctx *ctx, uint64_t seed)
{
    ctx->rng_seed = seed;
    ctx->rng_step = 0;
}

void mxcc_set_num_threads(int n)
{
#ifdef _OPENMP
    if (n > 0)
        omp_set_num_threads(n);
#else
    (void)n;
#endif
}

int mxcc_get_num_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int mxcc_prof_set_capacity(mxcc_ctx *ctx, uint32_t capacity)
{
    mxcc_prof_event *ev = NULL;
    if (capacity && !(ev = malloc((size_t)capacity * sizeof *ev)))
        return -1;
    free(ctx->prof.events);
    ctx->prof.events = ev;
    ctx->prof.capacity = capacity;
    ctx->prof.count = 0;
    if (!capacity)
        ctx->prof.enabled = 0;
    return 0;
}

void mxcc_prof_set_enabled(mxcc_ctx *ctx, int enabled)
{
    ctx->prof.enabled = enabled && ctx->prof.capacity > 0;
}

uint32_t mxcc_prof_drain(mxcc_ctx *ctx, mxcc_prof_event *out, uint32_t max)
{
    const uint32_t n = ctx->prof.count < max ? ctx->prof.count : max;
    memcpy(out, ctx->prof.events, (size_t)n * sizeof *out);
    memmove(ctx->prof.events, ctx->prof.events + n, (size_t)(ctx->prof.count - n) * sizeof *out);
    ctx->prof.count -= n;
    return n;
}

uint64_t mxcc_prof_dropped(const mxcc_ctx *ctx) { return ctx->prof.dropped; }

uint64_t mxcc_prof_now_ns(void) { return mxcc_now_ns(); }

void mxcc_prof_push(mxcc_prof *p, int kernel, int phase, uint64_t t0, long batch)
{
    const mxcc_prof_event ev = { kernel, phase, t0, mxcc_now_ns(), (int32_t)batch, 0 };
    if (p->count < p->capacity)
        p->events[p->count++] = ev;
    else
        p->dropped++;
    if (p->hook)
        p->hook(p->hook_arg, &ev);
}

void mxcc_prof_set_hook(mxcc_ctx *ctx, void (*hook)(void *arg, const mxcc_prof_event *ev), void *arg)
{
    ctx->prof.hook = hook;
    ctx->prof.hook_arg = arg;
}
