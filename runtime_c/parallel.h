/* How the runtime's kernels split work over OpenMP threads: one thread count rule and one range split, shared
 * by the GEMM (runtime_c/gemm/) and the convolutions (runtime_c/conv/).
 *
 *   mxcc_threads_for(flops, max)        as many threads, up to max, as get MXCC_GEMM_MIN_FLOPS_PER_THREAD each
 *   mxcc_threads_for_call(par, flops)   the same for a kernel's `parallel` argument: 1 when it is 0 or when
 *                                       the call is made inside an active parallel region; max is what the
 *                                       pool allows now (mxcc_pool_threads: fewer on an oversubscribed machine)
 *   mxcc_split_at(n, parts, part)       where part `part` of n items split into `parts` contiguous ranges
 *                                       begins: part p is [split_at(p), split_at(p + 1)), sizes differ by <= 1
 *   mxcc_thread_num(), mxcc_num_threads()   this thread and its team (0 and 1 in a build without OpenMP)
 *   mxcc_scratch_threads(max)           the threads a per-thread scratch is sized for: max, or OpenMP's current
 *                                       maximum when max <= 0; at least 1
 *
 * A kernel whose result must not depend on the thread count splits whole units of work (rows, panels,
 * planes), never a sum, so that any split gives the same bits.
 */
#ifndef MXCC_PARALLEL_H
#define MXCC_PARALLEL_H

#ifdef _OPENMP
#include <omp.h>
#endif

#include "gemm/gemm_config.h"   /* MXCC_GEMM_MIN_FLOPS_PER_THREAD */
#include "pool/mxcc_pool.h"     /* mxcc_parallel_chunks: the kernels' parallel loops */

/* Below MIN_FLOPS_PER_THREAD per thread the fork/join costs more than the split saves (gemm_config.h):
 * serial under twice that, then one more thread per MIN_FLOPS_PER_THREAD. */
static inline int mxcc_threads_for(double flops, int max_threads)
{
    const double fit = flops / MXCC_GEMM_MIN_FLOPS_PER_THREAD;
    return fit < 2.0 ? 1 : (fit < max_threads ? (int)fit : max_threads);
}

static inline int mxcc_threads_for_call(int parallel, double flops)
{
#ifdef _OPENMP
    if (parallel && !omp_in_parallel() && !mxcc_pool_in_chunk())
        return mxcc_threads_for(flops, mxcc_pool_threads(omp_get_max_threads()));
#endif
    (void)parallel;
    (void)flops;
    return 1;
}

static inline long mxcc_split_at(long n, int parts, int part)
{
    return n * part / parts;
}

/* A grid of rows x cols units (e.g. pixel panels x weight panels) split into parts of whole units in row-major
 * order: part p is units [split_at(rows * cols, parts, p), split_at(.., p + 1)), balanced to one unit whatever
 * the grid's shape (a split of the rows alone leaves threads idle when rows are few: 14 pixel panels on 16
 * threads). Its units as at most 3 rectangles [r0, r1) x [c0, c1): a partial first row, whole rows, a partial
 * last row; returns how many. mxcc_range_rects: the same for any range [u0, u1) of the grid's units (a split
 * balanced by cost rather than count). */
typedef struct mxcc_rect {
    long r0, r1;
    long c0, c1;
} mxcc_rect;

static inline int mxcc_range_rects(long u0, long u1, long cols, mxcc_rect out[3])
{
    int n = 0;
    long u = u0;
    if (u < u1 && u % cols != 0) {   /* a partial first row */
        const long r = u / cols, end = (r + 1) * cols < u1 ? (r + 1) * cols : u1;
        out[n++] = (mxcc_rect){r, r + 1, u - r * cols, end - r * cols};
        u = end;
    }
    if (u1 - u >= cols) {            /* whole rows */
        const long r0 = u / cols, r1 = u1 / cols;
        out[n++] = (mxcc_rect){r0, r1, 0, cols};
        u = r1 * cols;
    }
    if (u < u1) {                    /* a partial last row */
        const long r = u / cols;
        out[n++] = (mxcc_rect){r, r + 1, 0, u1 - r * cols};
    }
    return n;
}

static inline int mxcc_grid_rects(long rows, long cols, int parts, int part, mxcc_rect out[3])
{
    return mxcc_range_rects(mxcc_split_at(rows * cols, parts, part), mxcc_split_at(rows * cols, parts, part + 1), cols,
                            out);
}

static inline int mxcc_thread_num(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static inline int mxcc_num_threads(void)
{
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

static inline int mxcc_scratch_threads(int max_threads)
{
#ifdef _OPENMP
    if (max_threads <= 0)
        max_threads = omp_get_max_threads();
#endif
    return max_threads < 1 ? 1 : max_threads;
}

#endif /* MXCC_PARALLEL_H */
