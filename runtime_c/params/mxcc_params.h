/* MXNet's .params files (NDArray lists) read in C: the C twin of mxcc/params.py's reader.
 *
 * Layout (shared/design/formats.md, section 2.2; every integer little-endian):
 *
 *   uint64 0x112, uint64 reserved, uint64 n_arrays, n_arrays x record, uint64 n_names (0 or n_arrays),
 *   n_names x (uint64 length, length bytes of UTF-8)
 *
 *   record V2 (0xF993FAC9) / V3 (0xF993FACA, NumPy shape semantics): uint32 magic, int32 storage type,
 *     [sparse: storage shape], shape (int32 ndim, ndim x int64), int32 dev_type, int32 dev_id, int32 type flag,
 *     [sparse: aux type flags and shapes], the data (C order), [sparse: aux data]
 *   record V1 (0xF993FAC8): the same without the storage type
 *   legacy record (no magic): uint32 ndim (<= 32), ndim x uint32 dims, context, type flag, data
 *
 * Everything is checked before it is used: the magics, the counts against the bytes left (so no count makes
 * the reader allocate or loop beyond the file), ndim and dims (negative ones, products that overflow),
 * contexts, type flags, every length against the bytes left (a truncated file is an error, never a read past
 * the end), the names (UTF-8, 0 or one per array, no name twice) and bytes after the last name. It accepts
 * exactly the files mxcc.params.load_params accepts (tests/capi/test_params_reader.py checks that on mutated
 * files, under AddressSanitizer and UBSan): records that parse but cannot be bound (sparse storage,
 * bfloat16) are kept with the reason, and binding them is the error, as in Python.
 *
 * No global state; the parsed list points into the caller's bytes, which must outlive it. */
#ifndef MXCC_PARAMS_H
#define MXCC_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MXCC_PARAMS_LIST_MAGIC 0x112u
#define MXCC_PARAMS_V1_MAGIC 0xF993FAC8u
#define MXCC_PARAMS_V2_MAGIC 0xF993FAC9u
#define MXCC_PARAMS_V3_MAGIC 0xF993FACAu
#define MXCC_PARAMS_LEGACY_MAX_NDIM 32u   /* a first word above this is a bad magic, not a legacy ndim */

/* One array of the file. */
typedef struct mxcc_ndarray {
    const char *name;             /* as stored ("arg:w", "aux:bn_moving_var", "w"); "0", "1", ... when unnamed */
    size_t name_len;              /* its bytes (UTF-8 may hold a NUL byte) */
    int none;                     /* a "none" array (no shape: an uninitialized NDArray); nothing below is set */
    const char *unusable;         /* NULL, or why it cannot be bound (sparse storage, bfloat16) */
    int dtype;                    /* MXNet type flag: 0 f32, 1 f64, 2 f16, 3 u8, 4 i32, 5 i8, 6 i64, 7 bool, 8 i16,
                                   * 9 u16, 10 u32, 11 u64 (12 bf16 is unusable) */
    int ndim;                     /* 0: a 0-d array (V3 records), one element */
    const int64_t *shape;         /* ndim dims, each >= 0 (NULL when ndim is 0) */
    size_t size;                  /* elements */
    const unsigned char *data;    /* size x the dtype's bytes, little-endian, in the caller's buffer (unaligned) */
} mxcc_ndarray;

typedef struct mxcc_ndarray_list {
    size_t count;
    int named;                    /* the file has names (else each array's name is its position) */
    mxcc_ndarray *arrays;
    int64_t *dims;                /* storage of the shapes */
    char *names;                  /* storage of the names, NUL-terminated */
} mxcc_ndarray_list;

/* Parse `size` bytes of a .params file. 0, or -1 with a message in err (what and where: "array #3: file
 * truncated: ..."); on failure *out is empty. Free a parsed list with mxcc_params_free. */
int mxcc_params_parse(const void *bytes, size_t size, mxcc_ndarray_list *out, char *err, size_t errlen);
void mxcc_params_free(mxcc_ndarray_list *list);

/* A file's bytes: 0, or -1 with a message naming the path. Free *bytes with free(). */
int mxcc_params_read_file(const char *path, unsigned char **bytes, size_t *size, char *err, size_t errlen);

/* Bytes of one element of a usable type flag; 0 for an unknown one. */
size_t mxcc_params_dtype_size(int dtype);
const char *mxcc_params_dtype_name(int dtype);

/* The array's values as float32 (as numpy's astype(float32): round to nearest; bool: 0 or 1) into dst[size].
 * 0, or -1 if it is none or unusable. */
int mxcc_params_to_f32(const mxcc_ndarray *a, float *dst);

#ifdef __cplusplus
}
#endif
#endif /* MXCC_PARAMS_H */
