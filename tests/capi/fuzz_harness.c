/* The C readers of untrusted input, run over many files in one process (tests/capi/test_fuzz.py builds this with
 * AddressSanitizer and UBSan and feeds it mutated files): the .params reader (runtime_c/params/), binding params
 * to a network's slots (runtime_c/capi/api.c), MXNDListCreate, the symbol JSON check (runtime_c/capi/symbol.c)
 * and the canonical attribute form.
 *
 *   fuzz_harness params LIST   one line per file named in LIST: what the reader made of it (compared with
 *                              mxcc.params.load_params by the test), then the binding's and MXNDListCreate's result
 *   fuzz_harness json LIST     one line per file: 0 if the symbol check accepts it, else -1
 *   fuzz_harness canon FILE    the canonical form of each line of FILE, one per line
 *
 * The network is fz_net (tests' generated fz_net.c: slots without kernels) with the symbol of fz_lib.c, rendered
 * from templates/lib.c.j2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capi/include/mxnet/c_predict_api.h"
#include "capi/mxcc_predict.h"

static unsigned char *slurp(const char *path, size_t *size)
{
    char err[256];
    unsigned char *bytes;
    if (mxcc_params_read_file(path, &bytes, size, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    return bytes;
}

/* sum of byte i x (i % 65521 + 1), mod 2^64: a checksum numpy computes as fast */
static unsigned long long checksum(const unsigned char *p, size_t n)
{
    unsigned long long h = 0;
    for (size_t i = 0; i < n; i++)
        h += (unsigned long long)p[i] * (i % 65521 + 1);
    return h;
}

/* "ok N" then per array "name_hex:dtype:dims:checksum(raw):checksum(float32)" ("none" / "unusable"), or "error" */
static void describe(const unsigned char *bytes, size_t size)
{
    char err[512];
    mxcc_ndarray_list list;
    if (mxcc_params_parse(bytes, size, &list, err, sizeof err)) {
        printf("error");
        return;
    }
    printf("ok %zu", list.count);
    for (size_t i = 0; i < list.count; i++) {
        const mxcc_ndarray *a = &list.arrays[i];
        printf(" ");
        for (size_t c = 0; c < a->name_len; c++)
            printf("%02x", (unsigned char)a->name[c]);
        if (a->unusable) {
            printf(":unusable");
            continue;
        }
        if (a->none) {
            printf(":none");
            continue;
        }
        printf(":%d:", a->dtype);
        for (int d = 0; d < a->ndim; d++)
            printf("%s%lld", d ? "x" : "", (long long)a->shape[d]);
        float *f = malloc((a->size ? a->size : 1) * sizeof(float));
        if (!f || mxcc_params_to_f32(a, f)) {
            printf(":convert-failed");
            free(f);
            continue;
        }
        printf(":%016llx:%016llx", checksum(a->data, a->size * mxcc_params_dtype_size(a->dtype)),
               checksum((const unsigned char *)f, a->size * sizeof(float)));
        free(f);
    }
    mxcc_params_free(&list);
}

extern const mxcc_net fz_net;

static int bind(const unsigned char *bytes, size_t size, int flags)
{
    char err[512];
    mxcc_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.n_slots = fz_net.num_slots;
    ctx.slots = calloc((size_t)ctx.n_slots, sizeof(void *));
    int rc = mxcc_api_load_params_bytes(&fz_net, &ctx, bytes, size, flags, err, sizeof err);
    if (rc == 0) {           /* every param slot bound */
        for (int s = 0; s < fz_net.num_slots; s++)
            if (!strcmp(fz_net.slots[s].kind, "param") || !strcmp(fz_net.slots[s].kind, "aux"))
                rc |= ctx.slots[s] == NULL;
        rc |= mxcc_api_load_params_bytes(&fz_net, &ctx, bytes, size, flags, err, sizeof err);   /* again: swap */
    }
    if (ctx.host_free)
        ctx.host_free(ctx.host);
    free(ctx.slots);
    return rc;
}

static int ndlist(const unsigned char *bytes, size_t size)
{
    NDListHandle h;
    mx_uint n;
    if (size > 0x7fffffff || MXNDListCreate((const char *)bytes, (int)size, &h, &n))
        return -1;
    for (mx_uint i = 0; i < n; i++) {
        const char *key;
        const mx_float *data;
        const mx_uint *shape;
        mx_uint ndim;
        if (MXNDListGet(h, i, &key, &data, &shape, &ndim) || strlen(key) > size)
            return MXNDListFree(h), -2;
    }
    MXNDListFree(h);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    FILE *list = fopen(argv[2], "r");
    if (!list)
        return 2;
    char line[8192];
    while (fgets(line, sizeof line, list)) {
        line[strcspn(line, "\n")] = '\0';
        if (!strcmp(argv[1], "canon")) {
            char *c = mxcc_attr_canonical(line, strlen(line));
            printf("%s\n", c ? c : "(oom)");
            free(c);
            continue;
        }
        size_t size;
        unsigned char *bytes = slurp(line, &size);
        if (!strcmp(argv[1], "params")) {
            describe(bytes, size);
            printf(" | bind %d %d | ndlist %d\n", bind(bytes, size, 0), bind(bytes, size, MXCC_API_ALLOW_EXTRA),
                   ndlist(bytes, size));
        } else {
            char *text = malloc(size + 1);
            memcpy(text, bytes, size);
            text[size] = '\0';
            char err[1024];
            printf("%d\n", mxcc_symbol_check(mxcc_pred_library_model.symbol, text, err, sizeof err));
            free(text);
        }
        free(bytes);
    }
    fclose(list);
    return 0;
}
