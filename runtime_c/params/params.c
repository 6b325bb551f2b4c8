/* MXNet's .params reader (mxcc_params.h): a bounds-checked cursor over the bytes, one function per part of the
 * format, each check in the order mxcc/params.py makes it, so that both accept the same files. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxcc_params.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .params reader assumes a little-endian host (the file's byte order)"
#endif

#define TYPE_BF16 12
#define STYPE_DEFAULT 0

typedef struct cursor {
    const unsigned char *buf;
    size_t size, pos;
    char item[48];              /* what is being read: "header", "array #3", "name #2" (for messages) */
    char *err;
    size_t errlen;
    int failed;
} cursor;

static int fail(cursor *c, const char *fmt, ...)
{
    if (!c->failed && c->err && c->errlen) {
        int n = snprintf(c->err, c->errlen, "%s: ", c->item);
        if (n >= 0 && (size_t)n < c->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    c->failed = 1;
    return -1;
}

/* Reserve `n` bytes for `what`: their address, or NULL (error) when fewer are left. */
static const unsigned char *need(cursor *c, size_t n, const char *what)
{
    const size_t left = c->size - c->pos;
    if (n > left) {
        fail(c, "file truncated: %s needs %zu bytes at offset %zu, only %zu left", what, n, c->pos, left);
        return NULL;
    }
    const unsigned char *p = c->buf + c->pos;
    c->pos += n;
    return p;
}

/* `what` needs `count` x `unit` bytes, a product that may overflow: an overflow is more than any file holds. */
static const unsigned char *need_n(cursor *c, uint64_t count, uint64_t unit, const char *what)
{
    uint64_t n;
    if (__builtin_mul_overflow(count, unit, &n) || n > (uint64_t)SIZE_MAX) {
        fail(c, "file truncated: %s needs %llu x %llu bytes at offset %zu, only %zu left", what,
             (unsigned long long)count, (unsigned long long)unit, c->pos, c->size - c->pos);
        return NULL;
    }
    return need(c, (size_t)n, what);
}

static int rd_u32(cursor *c, uint32_t *v, const char *what)
{
    const unsigned char *p = need(c, 4, what);
    if (p)
        memcpy(v, p, 4);
    return p ? 0 : -1;
}

static int rd_i32(cursor *c, int32_t *v, const char *what)
{
    const unsigned char *p = need(c, 4, what);
    if (p)
        memcpy(v, p, 4);
    return p ? 0 : -1;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what)
{
    const unsigned char *p = need(c, 8, what);
    if (p)
        memcpy(v, p, 8);
    return p ? 0 : -1;
}

size_t mxcc_params_dtype_size(int dtype)
{
    static const unsigned char sizes[] = {4, 8, 2, 1, 4, 1, 8, 1, 2, 2, 4, 8};
    return dtype >= 0 && dtype < (int)sizeof sizes ? sizes[dtype] : 0;
}

const char *mxcc_params_dtype_name(int dtype)
{
    static const char *const names[] = {"float32", "float64", "float16", "uint8", "int32", "int8", "int64",
                                        "bool", "int16", "uint16", "uint32", "uint64", "bfloat16"};
    return dtype >= 0 && dtype <= TYPE_BF16 ? names[dtype] : "unknown";
}

/* ---- shapes: a growing pool of dims (shapes point into it once parsing is done) ---- */

typedef struct dims_pool {
    int64_t *v;
    size_t n, cap;
} dims_pool;

static int64_t *pool_take(cursor *c, dims_pool *p, size_t n)
{
    if (p->n + n > p->cap) {
        size_t cap = p->cap ? p->cap : 64;
        while (cap < p->n + n)
            cap *= 2;
        int64_t *v = realloc(p->v, cap * sizeof *v);
        if (!v) {
            fail(c, "out of memory reading %zu dims", n);
            return NULL;
        }
        p->v = v;
        p->cap = cap;
    }
    int64_t *out = p->v + p->n;
    p->n += n;
    return out;
}

typedef struct shape_ref {
    int known;                  /* 0: a "none" shape */
    size_t at, ndim;            /* dims pool [at, at + ndim) */
} shape_ref;

/* TShape: int32 ndim, ndim x int64. numpy: V3's semantics (ndim -1 or a dim -1: unknown, ndim 0: a scalar). */
static int read_shape(cursor *c, dims_pool *p, int numpy, shape_ref *s)
{
    int32_t ndim;
    s->known = 0;
    if (rd_i32(c, &ndim, "ndim"))
        return -1;
    if (numpy && ndim == -1)
        return 0;
    if (ndim < 0)
        return fail(c, "negative ndim %d", ndim);
    if (ndim == 0 && !numpy)
        return 0;
    const unsigned char *raw = need_n(c, (uint64_t)ndim, 8, "the int64 dims");
    if (!raw)
        return -1;
    s->at = p->n;
    s->ndim = (size_t)ndim;
    if (ndim == 0) {        /* a 0-d array (V3): one element */
        s->known = 1;
        return 0;
    }
    int64_t *d = pool_take(c, p, (size_t)ndim);
    if (!d)
        return -1;
    memcpy(d, raw, (size_t)ndim * 8);
    int unknown = 0;
    for (int32_t i = 0; i < ndim; i++)
        unknown |= numpy && d[i] == -1;
    if (unknown)            /* shape_is_known() is false: MXNet reads a "none" array */
        return 0;
    for (int32_t i = 0; i < ndim; i++)
        if (d[i] < 0)
            return fail(c, "negative dimension %lld in the shape", (long long)d[i]);
    s->known = 1;
    return 0;
}

/* The product of the dims (1 for none); *overflow: it does not fit in 64 bits. `nonzero`: of the nonzero ones. */
static uint64_t shape_prod(const dims_pool *p, const shape_ref *s, int nonzero, int *overflow)
{
    uint64_t n = 1;
    *overflow = 0;
    for (size_t i = 0; s->known && i < s->ndim; i++) {
        const uint64_t d = (uint64_t)p->v[s->at + i];
        if (nonzero && d == 0)
            continue;
        if (__builtin_mul_overflow(n, d, &n))
            *overflow = 1;
    }
    return n;
}

static int read_context(cursor *c)
{
    int32_t dev_type, dev_id;
    if (rd_i32(c, &dev_type, "the context (dev_type)") || rd_i32(c, &dev_id, "the context (dev_id)"))
        return -1;
    if (!(dev_type == 1 || dev_type == 2 || dev_type == 3 || dev_type == 5) || dev_id < 0)
        return fail(c, "bad context dev_type=%d dev_id=%d (expected dev_type 1, 2, 3 or 5)", dev_type, dev_id);
    return 0;
}

static const char SPARSE_REASON[] = "sparse storage (row_sparse or csr) is not supported; mxcc reads dense arrays "
                                    "only (convert with .tostype('default') in MXNet)";
static const char BF16_REASON[] = "dtype bfloat16 (type flag 12) cannot be loaded; convert the parameters to "
                                  "float32 in MXNet first";
static const char SPARSE_NO_SHAPE[] = "a sparse array without a shape";

/* Walk over a row_sparse/csr record (bounds-checked), as mxcc/params.py's _skip_sparse. */
static int skip_sparse(cursor *c, dims_pool *p, int32_t stype, mxcc_ndarray *a)
{
    shape_ref storage, shape, aux_shape[2];
    int32_t flags[3];
    const int n_aux = stype == 1 ? 1 : 2;
    if (read_shape(c, p, 0, &storage) || read_shape(c, p, 0, &shape))
        return -1;
    a->unusable = SPARSE_REASON;
    if (!shape.known) {
        a->unusable = SPARSE_NO_SHAPE;
        return 0;
    }
    if (read_context(c) || rd_i32(c, &flags[0], "the type flag"))
        return -1;
    for (int k = 0; k < n_aux; k++)
        if (rd_i32(c, &flags[1 + k], "an aux type flag") || read_shape(c, p, 0, &aux_shape[k]))
            return -1;
    for (int k = 0; k <= n_aux; k++) {
        const shape_ref *s = k == 0 ? &storage : &aux_shape[k - 1];
        if (flags[k] != TYPE_BF16 && !mxcc_params_dtype_size(flags[k]))
            return fail(c, "unknown type flag %d in a sparse record (expected 0..12)", flags[k]);
        int overflow;
        const uint64_t n = shape_prod(p, s, 0, &overflow);
        const size_t unit = flags[k] == TYPE_BF16 ? 2 : mxcc_params_dtype_size(flags[k]);
        if (overflow)
            return fail(c, "file truncated: sparse data needs more bytes than any file holds");
        if (!need_n(c, n, unit, "sparse data"))
            return -1;
    }
    return 0;
}

/* One record into *a (its shape as a pool reference in *s, fixed up at the end). */
static int read_record(cursor *c, dims_pool *p, mxcc_ndarray *a, shape_ref *s)
{
    uint32_t magic;
    memset(s, 0, sizeof *s);
    if (rd_u32(c, &magic, "the record magic"))
        return -1;
    if (magic == MXCC_PARAMS_V2_MAGIC || magic == MXCC_PARAMS_V3_MAGIC) {
        int32_t stype;
        if (rd_i32(c, &stype, "the storage type"))
            return -1;
        if (stype < 0 || stype > 2)
            return fail(c, "unknown storage type %d (expected 0 dense, 1 row_sparse, 2 csr)", stype);
        if (stype != STYPE_DEFAULT) {
            a->none = 1;         /* nothing of it is bound: treated as absent, with the reason */
            return skip_sparse(c, p, stype, a);
        }
        if (read_shape(c, p, magic == MXCC_PARAMS_V3_MAGIC, s))
            return -1;
    } else if (magic == MXCC_PARAMS_V1_MAGIC) {
        if (read_shape(c, p, 0, s))
            return -1;
    } else if (magic <= MXCC_PARAMS_LEGACY_MAX_NDIM) {   /* pre-V1: the "magic" is ndim, dims are uint32 */
        if (magic) {
            const unsigned char *raw = need_n(c, magic, 4, "the legacy uint32 dims");
            int64_t *d = raw ? pool_take(c, p, magic) : NULL;
            if (!d)
                return -1;
            for (uint32_t i = 0; i < magic; i++) {
                uint32_t v;
                memcpy(&v, raw + 4 * i, 4);
                d[i] = v;
            }
            s->known = 1;
            s->at = p->n - magic;
            s->ndim = magic;
        }
    } else {
        return fail(c, "bad record magic 0x%08x (expected 0x%x, 0x%x, 0x%x or a legacy ndim <= %u)", magic,
                    MXCC_PARAMS_V2_MAGIC, MXCC_PARAMS_V1_MAGIC, MXCC_PARAMS_V3_MAGIC, MXCC_PARAMS_LEGACY_MAX_NDIM);
    }
    if (!s->known) {
        a->none = 1;
        return 0;
    }
    int32_t flag;
    if (read_context(c) || rd_i32(c, &flag, "the type flag"))
        return -1;
    int overflow;
    const uint64_t n = shape_prod(p, s, 0, &overflow);
    if (flag == TYPE_BF16) {
        if (overflow)
            return fail(c, "file truncated: bfloat16 data needs more bytes than any file holds");
        if (!need_n(c, n, 2, "the bfloat16 data"))
            return -1;
        a->none = 1;
        a->unusable = BF16_REASON;
        return 0;
    }
    const size_t unit = mxcc_params_dtype_size(flag);
    if (!unit)
        return fail(c, "unknown type flag %d (expected 0..12)", flag);
    if (overflow)
        return fail(c, "file truncated: the data of the shape needs more bytes than any file holds");
    const unsigned char *data = need_n(c, n, unit, "the data");
    if (!data)
        return -1;
    if (n == 0) {        /* (0, 2**62, 2**62) holds no data, yet no array of that shape can exist */
        int big;
        const uint64_t nz = shape_prod(p, s, 1, &big);
        uint64_t bytes;
        if (big || __builtin_mul_overflow(nz, (uint64_t)unit, &bytes) || bytes > (uint64_t)INT64_MAX)
            return fail(c, "an empty shape with dimensions too large for any array");
    }
    a->dtype = flag;
    a->ndim = (int)s->ndim;
    a->size = (size_t)n;
    a->data = data;
    return 0;
}

/* Strict UTF-8 (what Python's bytes.decode("utf-8") accepts): no overlong forms, no surrogates, <= U+10FFFF. */
static int valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        const unsigned char b = s[i];
        size_t len;
        uint32_t cp;
        if (b < 0x80) {
            i++;
            continue;
        } else if (b >= 0xC2 && b <= 0xDF) {
            len = 2, cp = b & 0x1F;
        } else if (b >= 0xE0 && b <= 0xEF) {
            len = 3, cp = b & 0x0F;
        } else if (b >= 0xF0 && b <= 0xF4) {
            len = 4, cp = b & 0x07;
        } else {
            return 0;
        }
        if (n - i < len)
            return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

typedef struct name_ref {
    const char *s;
    size_t len;
} name_ref;

static int name_cmp(const void *x, const void *y)
{
    const name_ref *a = x, *b = y;
    const int c = memcmp(a->s, b->s, a->len < b->len ? a->len : b->len);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

/* The names: none, or one per array; stored NUL-terminated in list->names (a name may hold a NUL byte: its
 * length is kept for the duplicate check). */
static int read_names(cursor *c, mxcc_ndarray_list *list, size_t *name_len)
{
    uint64_t n_names;
    snprintf(c->item, sizeof c->item, "names");
    if (rd_u64(c, &n_names, "the name count"))
        return -1;
    if (n_names != 0 && n_names != list->count)
        return fail(c, "%llu names for %zu arrays (must be 0 or %zu)", (unsigned long long)n_names, list->count,
                    list->count);
    /* room: the bytes left (names come from them) plus a NUL each, or "0", "1", ... (at most 20 digits + NUL) */
    const size_t room = n_names ? (c->size - c->pos) + list->count + 1 : list->count * 21 + 1;
    list->named = n_names != 0;
    if (!(list->names = malloc(room)))
        return fail(c, "out of memory for the names");
    char *w = list->names;
    for (size_t i = 0; i < list->count; i++) {
        if (n_names) {
            uint64_t len;
            snprintf(c->item, sizeof c->item, "name #%zu", i);
            if (rd_u64(c, &len, "the name length"))
                return -1;
            const unsigned char *s = need_n(c, len, 1, "the name");
            if (!s)
                return -1;
            if (!valid_utf8(s, (size_t)len))
                return fail(c, "name is not valid UTF-8");
            memcpy(w, s, (size_t)len);
            name_len[i] = (size_t)len;
        } else {
            name_len[i] = (size_t)sprintf(w, "%zu", i);
        }
        w[name_len[i]] = '\0';
        list->arrays[i].name = w;
        list->arrays[i].name_len = name_len[i];
        w += name_len[i] + 1;
    }
    return 0;
}

static int check_unique(cursor *c, const mxcc_ndarray_list *list, const size_t *name_len)
{
    name_ref *refs = malloc((list->count ? list->count : 1) * sizeof *refs);
    if (!refs)
        return fail(c, "out of memory checking the names");
    for (size_t i = 0; i < list->count; i++)
        refs[i] = (name_ref){list->arrays[i].name, name_len[i]};
    qsort(refs, list->count, sizeof *refs, name_cmp);    /* a sort, not pairs: files may hold ~10^5 names */
    for (size_t i = 1; i < list->count; i++)
        if (!name_cmp(&refs[i - 1], &refs[i])) {
            snprintf(c->item, sizeof c->item, "names");
            fail(c, "the name '%s' occurs more than once", refs[i].s);
            free(refs);
            return -1;
        }
    free(refs);
    return 0;
}

int mxcc_params_parse(const void *bytes, size_t size, mxcc_ndarray_list *out, char *err, size_t errlen)
{
    cursor c = {.buf = bytes, .size = bytes ? size : 0, .err = err, .errlen = errlen};
    dims_pool pool = {0};
    shape_ref *shapes = NULL;
    size_t *name_len = NULL;
    uint64_t header, reserved, count;
    memset(out, 0, sizeof *out);
    snprintf(c.item, sizeof c.item, "header");
    if (rd_u64(&c, &header, "the 24-byte list header") || rd_u64(&c, &reserved, "the 24-byte list header") ||
        rd_u64(&c, &count, "the 24-byte list header"))
        goto fail;
    if (header != MXCC_PARAMS_LIST_MAGIC) {
        fail(&c, "not an MXNet .params file: header is 0x%llx, expected 0x%x", (unsigned long long)header,
             MXCC_PARAMS_LIST_MAGIC);
        goto fail;
    }
    if (count > (c.size - c.pos) / 4) {    /* a record is at least 4 bytes: a larger count is corruption */
        fail(&c, "file truncated or corrupted: array count %llu cannot fit in the %zu bytes left",
             (unsigned long long)count, c.size - c.pos);
        goto fail;
    }
    out->count = (size_t)count;
    out->arrays = calloc(out->count ? out->count : 1, sizeof *out->arrays);
    shapes = calloc(out->count ? out->count : 1, sizeof *shapes);
    name_len = calloc(out->count ? out->count : 1, sizeof *name_len);
    if (!out->arrays || !shapes || !name_len) {
        fail(&c, "out of memory for %zu arrays", out->count);
        goto fail;
    }
    for (size_t i = 0; i < out->count; i++) {
        snprintf(c.item, sizeof c.item, "array #%zu", i);
        if (read_record(&c, &pool, &out->arrays[i], &shapes[i]))
            goto fail;
    }
    if (read_names(&c, out, name_len))
        goto fail;
    if (c.pos != c.size) {
        snprintf(c.item, sizeof c.item, "end of file");
        fail(&c, "%zu unexpected bytes after the last name (corrupted file?)", c.size - c.pos);
        goto fail;
    }
    if (check_unique(&c, out, name_len))
        goto fail;
    out->dims = pool.v;
    for (size_t i = 0; i < out->count; i++)
        out->arrays[i].shape = out->arrays[i].none || !shapes[i].ndim ? NULL : pool.v + shapes[i].at;
    free(shapes);
    free(name_len);
    return 0;
fail:
    free(pool.v);
    free(shapes);
    free(name_len);
    out->dims = NULL;
    mxcc_params_free(out);
    return -1;
}

void mxcc_params_free(mxcc_ndarray_list *list)
{
    free(list->arrays);
    free(list->dims);
    free(list->names);
    memset(list, 0, sizeof *list);
}

int mxcc_params_read_file(const char *path, unsigned char **bytes, size_t *size, char *err, size_t errlen)
{
    *bytes = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open the params file", path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        unsigned char *bigger = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    const int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        snprintf(err, errlen, "%s: cannot read the params file%s", path, buf ? "" : " (out of memory)");
        return -1;
    }
    *bytes = buf;
    *size = n;
    return 0;
}

/* IEEE half -> float, exactly (every half is a float). */
static float half_to_float(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    uint32_t bits;
    if (exp == 0x1F) {
        bits = sign | 0x7F800000u | (man << 13);             /* inf, nan */
    } else if (exp) {
        bits = sign | ((exp + 112) << 23) | (man << 13);     /* normal: rebias 15 -> 127 */
    } else {
        const float v = (float)man * (1.0f / 16777216.0f);   /* subnormal: man x 2^-24 */
        return sign ? -v : v;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

int mxcc_params_to_f32(const mxcc_ndarray *a, float *dst)
{
    if (a->none || a->unusable)
        return -1;
    const unsigned char *p = a->data;
    const size_t n = a->size;
#define CONVERT(T)                                     \
    for (size_t i = 0; i < n; i++) {                   \
        T v;                                           \
        memcpy(&v, p + i * sizeof(T), sizeof(T));      \
        dst[i] = (float)v;                             \
    }                                                  \
    break;
    switch (a->dtype) {
    case 0:
        if (n)
            memcpy(dst, p, n * 4);
        break;
    case 1: CONVERT(double)
    case 2:
        for (size_t i = 0; i < n; i++) {
            uint16_t v;
            memcpy(&v, p + 2 * i, 2);
            dst[i] = half_to_float(v);
        }
        break;
    case 3: CONVERT(uint8_t)
    case 4: CONVERT(int32_t)
    case 5: CONVERT(int8_t)
    case 6: CONVERT(int64_t)
    case 7:
        for (size_t i = 0; i < n; i++)
            dst[i] = p[i] ? 1.0f : 0.0f;
        break;
    case 8: CONVERT(int16_t)
    case 9: CONVERT(uint16_t)
    case 10: CONVERT(uint32_t)
    case 11: CONVERT(uint64_t)
    default: return -1;
    }
#undef CONVERT
    return 0;
}
