/* The only header generated C includes: the context, the slot table, and the runtime kernels.
 *
 * A context owns everything one run needs (arena, GEMM packing buffers, host-bound pointers), so two
 * contexts can run in two threads at once; there is no global mutable state in the runtime. */
#ifndef MXCC_RUNTIME_H
#define MXCC_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>

#include "gemm/mxcc_gemm.h"
#include "conv/mxcc_conv.h"
#include "conv/mxcc_winograd.h"
#include "mxcc_math.h"
#include "prof.h"
#include "optim.h"
#include "rng/mxcc_rng.h"
#include "rnn/mxcc_rnn.h"
#include "nn/mxcc_nn.h"
#include "params/mxcc_params.h"
#include "pool/mxcc_pool.h"

#define MXCC_NOINLINE __attribute__((noinline))
#define MXCC_RESTRICT restrict
/* Floats in ctx->hyper: at least the most hyper-parameters an update of mxcc/train/optimizer.py's UPDATES
 * takes (its NUM_HYPER; each generated <net>_update checks its own with a _Static_assert). */
#define MXCC_NUM_HYPER 8

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mxcc_ctx {
    unsigned char *arena;     /* every intermediate, at offsets fixed by the planner; 64-byte aligned */
    size_t arena_bytes;
    unsigned char *derived;   /* values computed from params at bind time (<net>_prepare): folded BatchNorm */
    size_t derived_bytes;
    int derived_shared;       /* derived belongs to another context (mxcc_ctx_create_shared): not freed here */
    void **slots;             /* host-bound tensors: inputs, params, aux states, outputs (plan order) */
    int n_slots;
    mxcc_gemm_ws *gemm;       /* GEMM packing buffers, one slot per thread */
    float *scratch;           /* per-thread buffers of the kernels that keep one (packed convolutions): outside
                               * the arena, like the GEMM's */
    size_t scratch_floats;
    int scratch_threads;      /* the GEMM slots and the scratch have room for this many OpenMP threads; a kernel
                               * asked to run with more runs serially (mxcc_ctx_reserve_threads makes room) */
    mxcc_prof prof;           /* profiler event buffer (empty until enabled) */
    float hyper[MXCC_NUM_HYPER];  /* optimizer hyper-parameters of the next update (training) */
    uint64_t rng_seed;        /* random operators (training Dropout): see rng/mxcc_rng.h */
    uint64_t rng_step;        /* training forwards run since the seed was set */
    void *host;               /* what the C API (runtime_c/capi/api.c) keeps for this context: its params, inputs and
                               * outputs; NULL until it is used. mxcc_ctx_free calls host_free(host). */
    void (*host_free)(void *host);
    long batch;               /* a dynamic-batch network's batch for the next calls (<net>_set_batch); kernels read it
                               * as N. Unused by networks compiled for one batch. */
} mxcc_ctx;

/* What a generated network says about each host-bound tensor (for the standalone executables). */
typedef struct mxcc_slot_info {
    const char *name;
    const char *kind;         /* "input" | "param" | "aux" | "output" */
    int ndim;
    long long shape[8];
    size_t size;              /* elements */
    int optional;             /* an input the inference forward does not read (a loss head's label) */
    int batch_axis;           /* a dynamic batch (mxcc_net.max_batch > 0): shape[batch_axis] is batch_factor * the  */
    int batch_factor;         /* maximum, batch_factor * N at batch N; batch_factor 0: the same shape at every batch */
} mxcc_slot_info;

/* A generated network, as one value: its tables and entry points (`const mxcc_net <net>_net`, in <net>.c).
 * The drivers of runtime_c/driver/ (the benchmark, the training program) take one, so the same C runs every
 * network. Entry points a build does not have (forward_infer, backward, update, step without training) are NULL. */
typedef struct mxcc_net {
    const char *name;
    int num_slots;
    const mxcc_slot_info *slots;
    int num_names;                          /* kernels, one per parameter update, inference-mode kernels */
    const char *const *node_names;          /* kernel index -> its fused group's name (profiler) */
    size_t arena_bytes;
    long max_batch;                         /* a dynamic batch's maximum; 0: compiled for one batch */
    int (*set_batch)(mxcc_ctx *ctx, long n);
    mxcc_ctx *(*ctx_create)(char *err, size_t errlen);
    mxcc_ctx *(*ctx_create_shared)(const mxcc_ctx *base, char *err, size_t errlen);
    int (*ctx_reserve_threads)(mxcc_ctx *ctx, int threads);
    void (*ctx_free)(mxcc_ctx *ctx);
    void (*prepare)(mxcc_ctx *ctx);
    void (*forward)(mxcc_ctx *ctx);
    void (*forward_infer)(mxcc_ctx *ctx);
    void (*backward)(mxcc_ctx *ctx);
    void (*update)(mxcc_ctx *ctx);
    void (*step)(mxcc_ctx *ctx);
} mxcc_net;

/* The C API of a network, over its descriptor (runtime_c/capi/api.c; the generated <net>_load_params, ... call
 * these with <net>_net). The context owns what these functions allocate: the params (one block, read from an
 * MXNet .params file), the inputs set with mxcc_api_set_input and the outputs; mxcc_ctx_free frees them.
 * Each returns 0, or -1 with a message in err (never exits, never prints). One context runs one call at a
 * time; any number of contexts of one network may run at once in as many threads. */
/* Params by name (arg:/aux: prefixes or none), each checked against the network's param and aux slots: every
 * one present once, shapes equal, any dtype but bfloat16 (converted to float32), nothing unusable in the file.
 * MXCC_API_ALLOW_EXTRA: names the network does not have are ignored (MXNet's predict API does so); otherwise
 * they are an error. On failure the context keeps the params it had. Then <net>_prepare runs. */
enum { MXCC_API_ALLOW_EXTRA = 1 };
int mxcc_api_load_params(const mxcc_net *net, mxcc_ctx *ctx, const char *path, int flags, char *err, size_t errlen);
int mxcc_api_load_params_bytes(const mxcc_net *net, mxcc_ctx *ctx, const void *bytes, size_t size, int flags,
                               char *err, size_t errlen);
/* Copy `size` floats (the input's size exactly) into the context's buffer of input `name`. */
int mxcc_api_set_input(const mxcc_net *net, mxcc_ctx *ctx, const char *name, const float *data, size_t size,
                       char *err, size_t errlen);
/* The forward, once every param and every input but the optional ones is bound (outputs the caller did not
 * bind get buffers of the context's). */
int mxcc_api_run(const mxcc_net *net, mxcc_ctx *ctx, char *err, size_t errlen);
/* Copy output `index` (0: the first of the network's outputs) into dst[size]; size must be the output's. */
int mxcc_api_get_output(const mxcc_net *net, mxcc_ctx *ctx, int index, float *dst, size_t size, char *err,
                        size_t errlen);
/* Another context of the same network sharing base's params and bind-time weights (read-only), with an arena,
 * inputs and outputs of its own: for another thread. base must outlive it and keep its params meanwhile. */
mxcc_ctx *mxcc_api_ctx_clone(const mxcc_net *net, const mxcc_ctx *base, char *err, size_t errlen);
/* The slot of `kind` ("input", "param", "aux", "output"; NULL: any) named `name`, or -1. */
int mxcc_api_find_slot(const mxcc_net *net, const char *kind, const char *name);
/* Index of the slot of output `index`, or -1. */
int mxcc_api_output_slot(const mxcc_net *net, int index);
int mxcc_api_num_outputs(const mxcc_net *net);
/* Slot s's shape and size at the context's batch (a network compiled with a dynamic batch: <net>_set_batch;
 * otherwise the compiled ones). set_input and get_output take buffers of this size. */
size_t mxcc_api_slot_size(const mxcc_net *net, const mxcc_ctx *ctx, int s);
void mxcc_api_slot_shape(const mxcc_net *net, const mxcc_ctx *ctx, int s, long long shape[8]);

/* NULL on failure, with a message in err. Per-thread buffers are sized for `threads` threads (<= 0:
 * mxcc_default_threads()); scratch_floats is the kernels' scratch for that many. */
mxcc_ctx *mxcc_ctx_create(size_t arena_bytes, size_t derived_bytes, int n_slots, size_t scratch_floats,
                          int threads, char *err, size_t errlen);
/* Room for `threads` threads (scratch_floats: the kernels' scratch for that many); no-op if there is room.
 * 0, or -1 out of memory (the context is unchanged). Not while the context runs. */
int mxcc_ctx_reserve_threads(mxcc_ctx *ctx, size_t scratch_floats, int threads);
/* A context for running the same network in another thread at the same time as `base`: an arena, slots and
 * per-thread buffers of its own, and base's ctx->derived (the bind-time packed weights and folded values)
 * shared read-only, so N threads cost N arenas but one copy of the weights. `base` must outlive it, and
 * <net>_prepare must not run on base while this context runs. Its param slots start empty: bind them. */
mxcc_ctx *mxcc_ctx_create_shared(const mxcc_ctx *base, size_t arena_bytes, int n_slots, size_t scratch_floats,
                                 int threads, char *err, size_t errlen);
/* Tests (CompileOptions.poison): fill `bytes` at p with 0xFF, a float32 NaN, so that a read of memory no
 * kernel wrote shows up as NaN in a result. */
void mxcc_poison(void *p, size_t bytes);
/* The context's per-thread scratch, poisoned likewise. */
void mxcc_ctx_poison_scratch(mxcc_ctx *ctx);
/* dst[i] += src[i]: a gradient with MXNet's grad_req 'add' accumulated into the caller's array. */
void mxcc_accumulate_f32(float *dst, const float *src, long n);
/* The threads a new context makes room for: OpenMP's current count or the processors, whichever is more
 * (so raising the count to the machine's size later never falls back to serial kernels). */
int mxcc_default_threads(void);
void mxcc_ctx_free(mxcc_ctx *ctx);
void **mxcc_ctx_slots(mxcc_ctx *ctx);
int mxcc_ctx_threads(const mxcc_ctx *ctx);   /* the threads its per-thread buffers have room for */
float *mxcc_ctx_hyper(mxcc_ctx *ctx);
/* Seed the context's random operators and restart their step count (a new context has seed 0). */
void mxcc_ctx_set_seed(mxcc_ctx *ctx, uint64_t seed);
void mxcc_set_num_threads(int n);
int mxcc_get_num_threads(void);

/* Call-site hooks of generated code (inline: off = one load and branch). */
uint64_t mxcc_prof_now_ns(void);   /* mxcc_now_ns out of line: what the call sites use */
static inline uint64_t mxcc_prof_begin(const mxcc_ctx *ctx)
{
    return ctx->prof.enabled ? mxcc_prof_now_ns() : 0;
}
static inline void mxcc_prof_end(mxcc_ctx *ctx, int kernel, int phase, uint64_t t0)
{
    if (ctx->prof.enabled)
        mxcc_prof_push(&ctx->prof, kernel, phase, t0, ctx->batch);
}

/* Host control: capacity in events (allocates; 0 frees), on/off, read and clear. */
int mxcc_prof_set_capacity(mxcc_ctx *ctx, uint32_t capacity);
void mxcc_prof_set_enabled(mxcc_ctx *ctx, int enabled);
/* Copies up to max events into out (oldest first), removes them, returns how many. */
uint32_t mxcc_prof_drain(mxcc_ctx *ctx, mxcc_prof_event *out, uint32_t max);
uint64_t mxcc_prof_dropped(const mxcc_ctx *ctx);
/* Call hook(arg, event) at the end of every profiled call (while profiling is enabled); NULL: none. */
void mxcc_prof_set_hook(mxcc_ctx *ctx, void (*hook)(void *arg, const mxcc_prof_event *ev), void *arg);
/* The executables' --profile: a raw timeline file (mxcc_prof_event records) -> Chrome trace JSON at
 * json_path (written atomically). names: <net>_node_names. 0 on success. */
int mxcc_prof_write_trace(const char *timeline_path, const char *json_path, const char *net,
                          const char *const *names, int n_names);

#ifdef __cplusplus
}
#endif
#endif /* MXCC_RUNTIME_H */
