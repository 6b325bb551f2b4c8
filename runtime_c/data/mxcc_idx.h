/* IDX files (MNIST's format), gzipped or not, for the standalone training executables. */
#ifndef MXCC_IDX_H
#define MXCC_IDX_H

#include <stddef.h>
#include <stdint.h>

typedef struct mxcc_idx {
    int ndim;
    long long dims[4];
    size_t count;        /* elements */
    uint8_t *data;       /* unsigned bytes (type code 0x08) */
} mxcc_idx;

/* 0 on success; on failure a message in err and -1. Only unsigned-byte IDX files (MNIST) are accepted. */
int mxcc_idx_read(const char *path, mxcc_idx *out, char *err, size_t errlen);
void mxcc_idx_free(mxcc_idx *idx);

#endif /* MXCC_IDX_H */
