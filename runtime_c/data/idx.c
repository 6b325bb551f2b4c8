/* IDX reader for the standalone training executables: zlib's gzread reads gzipped and plain files alike.
 * Every length is checked against what the header promises, so a truncated file is an error, not a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <zlib.h>

#include "mxcc_idx.h"

static int read_exact(gzFile f, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        const unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
        const int got = gzread(f, p, chunk);
        if (got <= 0)
            return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int mxcc_idx_read(const char *path, mxcc_idx *out, char *err, size_t errlen)
{
    unsigned char head[4];
    gzFile f = gzopen(path, "rb");
    out->data = NULL;
    if (!f) {
        snprintf(err, errlen, "%s: cannot open", path);
        return -1;
    }
    if (read_exact(f, head, 4) || head[0] || head[1] || head[2] != 0x08 || head[3] < 1 || head[3] > 4) {
        snprintf(err, errlen, "%s: not an unsigned-byte IDX file (bad magic)", path);
        gzclose(f);
        return -1;
    }
    out->ndim = head[3];
    out->count = 1;
    for (int i = 0; i < out->ndim; i++) {
        unsigned char d[4];
        if (read_exact(f, d, 4)) {
            snprintf(err, errlen, "%s: truncated header", path);
            gzclose(f);
            return -1;
        }
        out->dims[i] = ((long long)d[0] << 24) | (d[1] << 16) | (d[2] << 8) | d[3];
        out->count *= (size_t)out->dims[i];
    }
    out->data = malloc(out->count ? out->count : 1);
    if (!out->data || read_exact(f, out->data, out->count)) {
        snprintf(err, errlen, "%s: truncated data (expected %zu bytes)", path, out->count);
        free(out->data);
        out->data = NULL;
        gzclose(f);
        return -1;
    }
    gzclose(f);
    return 0;
}

void mxcc_idx_free(mxcc_idx *idx)
{
    free(idx->data);
    idx->data = NULL;
}
