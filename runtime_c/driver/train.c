/* The standalone training program of every classifier: <net>_train is this file, linked with the network and
 * a main of one line (templates/train.c.j2) that passes the network (<net>_net) and the program's constants
 * (mxcc_train_config). MXNet's C++ MLP example compiled whole: read MNIST (IDX, gzipped or not; pixels * 1/256
 * as MXNet's MNISTIter), initialise the parameters (Xavier for weights, as mxcc.initializer.Xavier(magnitude=3):
 * U(-s, s), s = sqrt(3 / ((fan_in + fan_out) / 2)); zero biases and means, unit gammas and variances), then per
 * epoch one step (forward + backward + optimizer update) per batch and an accuracy pass over the validation
 * images, printing the C++ example's line "Epoch: N X samples/sec Accuracy: Y".
 *
 *   <net>_train --images FILE --labels FILE [--epochs 10] [--train 8000] [--val 2000] [--lr 0.1]
 *               [--wd 0.01] [--momentum 0.9] [--seed 1] [--threads T] [--shuffle 0|1|2] [--timeline FILE]
 *               [--profile FILE]
 * The first --train images train, the last --val images validate. --shuffle: 1 (default) shuffles the
 * training images once, as MXNet's MNISTIter(shuffle=True) does; 2 reshuffles every epoch; 0 keeps the order.
 * --timeline appends each kernel call's and parameter update's [t0, t1) (CLOCK_MONOTONIC ns, raw mxcc_prof_event
 * records, phase forward/backward/update) to FILE, as the bench's option does: `mxcc perf --train` places
 * every perf sample, OpenMP workers' too, by it. mxcc_train_load_batch stays its own frame in profiles. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxcc_driver.h"
#include "mxcc_idx.h"

/* The program's random numbers (initial weights, then the shuffles): SplitMix64 from --seed, its n-th output
 * being mxcc_rng_bits(seed, n - 1) (rng/mxcc_rng.h). */
typedef struct {
    uint64_t seed, drawn;
} train_rng;

static double rng_uniform(train_rng *r)   /* [0, 1), 53 bits */
{
    return (double)(mxcc_rng_bits(r->seed, r->drawn++) >> 11) / 9007199254740992.0;
}

/* images [count, sample] u8 -> one batch of floats in [0, 1], and its labels; order[] maps batch positions to
 * image indices (the shuffled training order, or NULL: the images from `first` on, for validation) */
MXCC_NOINLINE void mxcc_train_load_batch(const mxcc_idx *im, const mxcc_idx *lb, const long *order, long first,
                                         long batch, long sample, float *x, float *y)
{
    for (long b = 0; b < batch; b++) {
        const long k = order ? order[first + b] : first + b;
        const uint8_t *src = im->data + k * sample;
        if (b + 2 < batch) {   /* shuffled images are scattered over the file: fetch two ahead */
            const uint8_t *next = im->data + (order ? order[first + b + 2] : first + b + 2) * sample;
            for (long j = 0; j < sample; j += 64)
                __builtin_prefetch(next + j);
        }
        float *dst = x + b * sample;
        for (long j = 0; j < sample; j++)
            dst[j] = src[j] * (1.0f / 256.0f);   /* MXNet's MNISTIter scaling */
        y[b] = (float)lb->data[k];
    }
}

/* Fisher-Yates with the seeded generator */
static void shuffle(train_rng *r, long *order, long n)
{
    for (long i = n - 1; i > 0; i--) {
        const long j = (long)(rng_uniform(r) * (i + 1));
        const long t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* The parameters and aux states, as mxcc.initializer would set them, drawing from r in slot order. */
static void init_params(const mxcc_net *net, const mxcc_train_config *cfg, void **slots, train_rng *r)
{
    for (int p = 0; p < cfg->num_inits; p++) {
        const mxcc_train_init *in = &cfg->inits[p];
        float *w = slots[in->slot];
        const size_t n = net->slots[in->slot].size;
        for (size_t i = 0; i < n; i++)
            w[i] = in->kind == MXCC_INIT_UNIFORM ? (float)((2.0 * rng_uniform(r) - 1.0) * in->scale)
                 : in->kind == MXCC_INIT_ONES ? 1.0f : 0.0f;
    }
}

/* The index of the largest of n values (the first on ties) */
static long argmax(const float *v, long n)
{
    long best = 0;
    for (long c = 1; c < n; c++)
        if (v[c] > v[best])
            best = c;
    return best;
}

int mxcc_train_main(const mxcc_net *net, const mxcc_train_config *cfg, int argc, char **argv)
{
    const char *images = mxcc_arg_str(argc, argv, "--images", NULL), *labels = mxcc_arg_str(argc, argv, "--labels", NULL);
    if (!images || !labels) {
        fprintf(stderr, "usage: %s --images FILE --labels FILE [--epochs N] [--train N] [--val N] [--lr F] "
                        "[--wd F] [--momentum F] [--seed N] [--threads T] [--shuffle 0|1|2] [--timeline FILE] "
                        "[--profile FILE]\n", argv[0]);
        return 2;
    }
    const long batch = cfg->batch, sample = cfg->sample, classes = cfg->classes;
    const int epochs = atoi(mxcc_arg_str(argc, argv, "--epochs", "10"));
    const long n_train = atol(mxcc_arg_str(argc, argv, "--train", "8000"));
    const long n_val = atol(mxcc_arg_str(argc, argv, "--val", "2000"));
    train_rng rng = { strtoull(mxcc_arg_str(argc, argv, "--seed", "1"), NULL, 10), 0 };
    mxcc_set_num_threads(atoi(mxcc_arg_str(argc, argv, "--threads", "0")));

    char err[512];
    mxcc_idx im, lb;
    if (mxcc_idx_read(images, &im, err, sizeof err) || mxcc_idx_read(labels, &lb, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if ((long long)im.count != im.dims[0] * (long long)sample || lb.dims[0] != im.dims[0]
            || n_val < 0 || n_train + n_val > im.dims[0] || n_train < batch) {
        fprintf(stderr, "%s: expected %ld-value images, as many labels, and %ld <= --train, "
                        "--train + --val <= %lld images\n", images, sample, batch, im.dims[0]);
        return 1;
    }
    mxcc_ctx *ctx = net->ctx_create(err, sizeof err);
    if (!ctx) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    void **slots = mxcc_ctx_slots(ctx);
    for (int s = 0; s < net->num_slots; s++) {
        slots[s] = calloc(net->slots[s].size ? net->slots[s].size : 1, sizeof(float));
        if (!slots[s]) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
    }
    init_params(net, cfg, slots, &rng);
    net->prepare(ctx);
    mxcc_ctx_set_seed(ctx, rng.seed);   /* training Dropout masks */
    /* the optimizer update's hyper-parameters, in its order (mxcc/train/optimizer.py), for every step */
    float *hyper = mxcc_ctx_hyper(ctx);
    for (int h = 0; h < cfg->num_hyper; h++) {
        const char *v = cfg->hyper[h].flag ? mxcc_arg_str(argc, argv, cfg->hyper[h].flag, NULL) : NULL;
        hyper[h] = (float)(v ? atof(v) : cfg->hyper[h].value);
    }
    for (int f = 0; f < cfg->num_unused_flags; f++)
        if (mxcc_arg_str(argc, argv, cfg->unused_flags[f], NULL))
            fprintf(stderr, "%s: %s ignored: the %s update has no such hyper-parameter\n", argv[0],
                    cfg->unused_flags[f], cfg->optimizer);

    const int shuffling = atoi(mxcc_arg_str(argc, argv, "--shuffle", "1"));
    long *order = malloc(n_train * sizeof *order);
    if (!order) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (long i = 0; i < n_train; i++)
        order[i] = i;
    if (shuffling)
        shuffle(&rng, order, n_train);
    mxcc_timeline timeline;     /* events of every step and validation forward; phases forward/backward/update */
    mxcc_timeline_args(&timeline, argc, argv);
    if (mxcc_timeline_start(&timeline, net, ctx, argv[0]))
        return 1;
    float *x = slots[cfg->data_slot], *y = slots[cfg->label_slot];
    const float *prob = slots[cfg->output_slot];     /* [batch, classes] */
    for (int epoch = 0; epoch < epochs; epoch++) {
        if (shuffling == 2 && epoch > 0)
            shuffle(&rng, order, n_train);
        const double t0 = mxcc_now_seconds();
        long seen = 0;
        /* a network compiled with a dynamic batch also runs the last, shorter batch (with the same rescale_grad,
         * as MXNet's executor reshaped for it); one compiled for a single batch drops it */
        for (long first = 0; first < n_train; first += batch) {
            const long n = first + batch <= n_train ? batch : net->max_batch ? n_train - first : 0;
            if (!n)
                break;
            if (net->max_batch)
                net->set_batch(ctx, n);
            mxcc_train_load_batch(&im, &lb, order, first, n, sample, x, y);
            net->step(ctx);
            mxcc_timeline_drain(&timeline, ctx);
            seen += n;
        }
        const double dt = mxcc_now_seconds() - t0;
        long correct = 0, total = 0;
        for (long first = im.dims[0] - n_val; first < im.dims[0]; first += batch) {
            const long n = first + batch <= im.dims[0] ? batch : net->max_batch ? im.dims[0] - first : 0;
            if (!n)
                break;
            if (net->max_batch)
                net->set_batch(ctx, n);
            mxcc_train_load_batch(&im, &lb, NULL, first, n, sample, x, y);
            net->forward_infer(ctx);   /* inference mode: moving statistics, no dropout */
            mxcc_timeline_drain(&timeline, ctx);
            for (long b = 0; b < n; b++, total++)
                correct += argmax(prob + b * classes, classes) == (long)y[b];
        }
        /* mlp_cpu.cpp: LG << "Epoch: " << iter << " " << samples/duration << " samples/sec Accuracy: " << acc */
        printf("Epoch: %d %g samples/sec Accuracy: %g\n", epoch, (float)(seen / dt),
               (float)(total ? (double)correct / total : 0.0));
        fflush(stdout);
    }
    if (mxcc_timeline_finish(&timeline, net, argv[0]))
        return 1;
    for (int s = 0; s < net->num_slots; s++)
        free(slots[s]);
    free(order);
    net->ctx_free(ctx);
    mxcc_idx_free(&im);
    mxcc_idx_free(&lb);
    return 0;
}
