/* MNIST digits classified by the compiled MLP, in C alone: the network's library and its C API (mlp.h), MXNet's
 * .params read in C, the IDX test images read with zlib.
 *
 * Build the network (any batch size) and this program, then run it:
 *
 *   python examples/mnist_mlp.py          # trains the MLP, writes build/mnist_mlp/ (libmlp.a, include/, params)
 *   cc -O2 examples/c/mnist_predict.c -I build/mnist_mlp/include build/mnist_mlp/libmlp.a -fopenmp -lm -lz \
 *      -o mnist_predict
 *   ./mnist_predict build/mnist_mlp/params.params examples/data/mnist/t10k-images-idx3-ubyte.gz \
 *                   examples/data/mnist/t10k-labels-idx1-ubyte.gz
 *
 * (or `mxcc compile examples/data/mlp/mlp-symbol.json --shape X=100,784 -o build/mlp` and its untrained params.)
 * Prints the accuracy over the images and the time per image; --out FILE writes every image's 10 probabilities
 * (float32, image-major), --first I --count N classify images [I, I + N) only. Pixels are scaled to [0, 1], as
 * MXNet's MNISTIter does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "mlp.h"

#define CLASSES 10
#define PIXELS 784

/* An IDX file of unsigned bytes (gzipped or not): its dims and data, or NULL. */
static unsigned char *read_idx(const char *path, int want_ndim, long *count)
{
    gzFile f = gzopen(path, "rb");
    unsigned char head[4], d[4];
    long n = 1;
    if (!f || gzread(f, head, 4) != 4 || head[0] || head[1] || head[2] != 0x08 || head[3] != want_ndim) {
        fprintf(stderr, "%s: not an IDX file of %d-dim unsigned bytes\n", path, want_ndim);
        return NULL;
    }
    for (int i = 0; i < want_ndim; i++) {
        if (gzread(f, d, 4) != 4)
            return NULL;
        const long dim = (long)d[0] << 24 | d[1] << 16 | d[2] << 8 | d[3];
        n *= dim;
        if (i == 0)
            *count = dim;
    }
    unsigned char *data = malloc((size_t)n);
    if (!data || gzread(f, data, (unsigned)n) != (int)n) {
        fprintf(stderr, "%s: truncated\n", path);
        return NULL;
    }
    gzclose(f);
    return data;
}

static const char *arg(int argc, char **argv, const char *flag, const char *dflt)
{
    for (int i = 4; i + 1 < argc; i++)
        if (!strcmp(argv[i], flag))
            return argv[i + 1];
    return dflt;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s PARAMS IMAGES LABELS [--out FILE] [--first I] [--count N]\n", argv[0]);
        return 2;
    }
    /* the compiled input: its name and batch size (mlp.h's tables) */
    const mxcc_slot_info *input = &mlp_slots[MLP_SLOT_input_X];
    const long batch = (long)input->shape[0];
    if (input->size != (size_t)batch * PIXELS || mlp_slots[MLP_SLOT_output_softmaxoutput0_output].size
                                                 != (size_t)batch * CLASSES) {
        fprintf(stderr, "this program needs the MNIST MLP (784 inputs, 10 classes)\n");
        return 2;
    }
    long n_images, n_labels;
    unsigned char *images = read_idx(argv[2], 3, &n_images), *labels = read_idx(argv[3], 1, &n_labels);
    if (!images || !labels || n_images != n_labels)
        return 1;
    const long first = atol(arg(argc, argv, "--first", "0"));
    long count = atol(arg(argc, argv, "--count", "0"));
    if (count <= 0 || first + count > n_images)
        count = n_images - first;
    if (first < 0 || count <= 0) {
        fprintf(stderr, "no images in [%ld, %ld)\n", first, first + count);
        return 2;
    }

    char err[512];
    mxcc_ctx *ctx = mlp_ctx_create(err, sizeof err);
    if (!ctx || mlp_load_params(ctx, argv[1], err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    float *x = calloc((size_t)batch * PIXELS, sizeof(float)), *probs = malloc((size_t)count * CLASSES * sizeof(float));
    float *y = malloc((size_t)batch * CLASSES * sizeof(float));
    long correct = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long at = 0; at < count; at += batch) {
        const long n = count - at < batch ? count - at : batch;   /* the last batch may be partial: zeros after */
        memset(x, 0, (size_t)batch * PIXELS * sizeof(float));
        for (long i = 0; i < n * PIXELS; i++)
            x[i] = images[(first + at) * PIXELS + i] / 255.0f;
        if (mlp_set_input(ctx, input->name, x, (size_t)batch * PIXELS, err, sizeof err) || mlp_run(ctx, err, sizeof err)
            || mlp_get_output(ctx, 0, y, (size_t)batch * CLASSES, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        for (long i = 0; i < n; i++) {
            int best = 0;
            for (int c = 1; c < CLASSES; c++)
                best = y[i * CLASSES + c] > y[i * CLASSES + best] ? c : best;
            correct += best == labels[first + at + i];
        }
        memcpy(probs + at * CLASSES, y, (size_t)n * CLASSES * sizeof(float));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-3) / (double)count;
    printf("accuracy: %.2f%% on %ld images (%ld correct), %.2f us per image (batch %ld, %d threads)\n",
           100.0 * (double)correct / (double)count, count, correct, us, batch, mxcc_get_num_threads());
    const char *out = arg(argc, argv, "--out", NULL);
    if (out) {
        FILE *f = fopen(out, "wb");
        if (!f || fwrite(probs, sizeof(float), (size_t)count * CLASSES, f) != (size_t)count * CLASSES || fclose(f)) {
            fprintf(stderr, "cannot write %s\n", out);
            return 1;
        }
    }
    mlp_ctx_free(ctx);
    free(x), free(y), free(probs), free(images), free(labels);
    return 0;
}
