/* MXPredCreate's check of the symbol JSON it is given against the symbol the library was compiled from
 * (mxcc_predict.h): a small JSON reader (bounded depth, every byte checked), the canonical form of attribute
 * values, and a walk from the heads that pairs the JSON's nodes with the compiled ones and stops at the first
 * difference. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mxcc_predict.h"

/* ---- JSON ---- */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };
#define J_MAX_DEPTH 64

typedef struct jv {
    int kind;
    double num;
    int is_int;               /* a number written without fraction or exponent, within int range */
    long long ival;
    char *str;                /* J_STR: decoded, NUL-terminated */
    size_t len;
    size_t n;                 /* J_ARR, J_OBJ: items */
    struct jv *items;
    char **keys;              /* J_OBJ */
} jv;

typedef struct jparser {
    const char *s;
    size_t pos, size;
    char *err;
    size_t errlen;
} jparser;

static int jfail(jparser *p, const char *what)
{
    if (p->err && p->errlen)
        snprintf(p->err, p->errlen, "the symbol JSON is malformed at byte %zu: %s", p->pos, what);
    return -1;
}

static void jfree(jv *v)
{
    if (v->kind == J_ARR || v->kind == J_OBJ) {
        for (size_t i = 0; i < v->n; i++) {
            jfree(&v->items[i]);
            if (v->keys)
                free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
    free(v->str);
    memset(v, 0, sizeof *v);
}

static void skip_ws(jparser *p)
{
    while (p->pos < p->size && strchr(" \t\r\n", p->s[p->pos]) && p->s[p->pos])
        p->pos++;
}

static int put_utf8(char *out, size_t *n, unsigned cp)
{
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xC0 | cp >> 6);
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xE0 | cp >> 12);
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*n)++] = (char)(0xF0 | cp >> 18);
        out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
    return 0;
}

static int hex4(jparser *p, unsigned *cp)
{
    *cp = 0;
    if (p->size - p->pos < 4)
        return jfail(p, "truncated \\u escape");
    for (int i = 0; i < 4; i++) {
        const char c = p->s[p->pos++];
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return jfail(p, "bad \\u escape");
        *cp = *cp * 16 + (unsigned)d;
    }
    return 0;
}

/* A string at p->pos (the opening quote): decoded (escapes, \u with surrogate pairs) into a new buffer. */
static int parse_string(jparser *p, char **out, size_t *len)
{
    p->pos++;
    size_t end = p->pos;
    while (end < p->size && p->s[end] != '"')
        end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->size)
        return jfail(p, "unterminated string");
    char *buf = malloc(end - p->pos + 1);   /* decoding never lengthens: \uXXXX (6) -> at most 3 bytes */
    size_t n = 0;
    if (!buf)
        return jfail(p, "out of memory");
    while (p->s[p->pos] != '"') {
        const unsigned char c = (unsigned char)p->s[p->pos++];
        if (c < 0x20) {
            free(buf);
            return jfail(p, "control character in a string");
        }
        if (c != '\\') {
            buf[n++] = (char)c;
            continue;
        }
        const char e = p->s[p->pos++];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *hit = e ? strchr(from, e) : NULL;
        if (hit) {
            buf[n++] = to[hit - from];
        } else if (e == 'u') {
            unsigned cp, lo;
            if (hex4(p, &cp)) {
                free(buf);
                return -1;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF && p->size - p->pos >= 6 && p->s[p->pos] == '\\' &&
                p->s[p->pos + 1] == 'u') {
                p->pos += 2;
                if (hex4(p, &lo)) {
                    free(buf);
                    return -1;
                }
                if (lo >= 0xDC00 && lo <= 0xDFFF)
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else
                    p->pos -= 6, cp = 0xFFFD;
            } else if (cp >= 0xD800 && cp <= 0xDFFF) {
                cp = 0xFFFD;      /* a lone surrogate */
            }
            put_utf8(buf, &n, cp);
        } else {
            free(buf);
            return jfail(p, "bad escape in a string");
        }
    }
    p->pos++;
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

static int parse_number(jparser *p, jv *v)
{
    const size_t start = p->pos;
    int integral = 1;
    if (p->s[p->pos] == '-')
        p->pos++;
    size_t digits = 0;
    while (p->pos < p->size && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
        p->pos++, digits++;
    if (!digits || (digits > 1 && p->s[p->pos - digits] == '0'))
        return jfail(p, "bad number");
    if (p->pos < p->size && p->s[p->pos] == '.') {
        integral = 0, p->pos++, digits = 0;
        while (p->pos < p->size && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            p->pos++, digits++;
        if (!digits)
            return jfail(p, "bad number");
    }
    if (p->pos < p->size && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integral = 0, p->pos++, digits = 0;
        if (p->pos < p->size && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
            p->pos++;
        while (p->pos < p->size && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
            p->pos++, digits++;
        if (!digits)
            return jfail(p, "bad number");
    }
    const size_t len = p->pos - start;
    char *text = malloc(len + 1);
    if (!text)
        return jfail(p, "out of memory");
    memcpy(text, p->s + start, len);
    text[len] = '\0';
    v->kind = J_NUM;
    v->num = strtod(text, NULL);
    if (integral && len <= 11) {
        v->ival = strtoll(text, NULL, 10);
        v->is_int = v->ival >= -2147483647LL - 1 && v->ival <= 2147483647LL;
    }
    free(text);
    return 0;
}

static int parse_value(jparser *p, jv *v, int depth);

/* An array (close = ']') or an object (close = '}'), growing its items as they come. */
static int parse_items(jparser *p, jv *v, char close, int depth)
{
    size_t cap = 0;
    v->kind = close == ']' ? J_ARR : J_OBJ;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->size && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    for (;;) {
        if (v->n == cap) {
            cap = cap ? cap * 2 : 4;
            jv *items = realloc(v->items, cap * sizeof *items);
            if (items)
                v->items = items;
            char **keys = close == '}' && items ? realloc(v->keys, cap * sizeof *keys) : NULL;
            if (keys)
                v->keys = keys;
            if (!items || (close == '}' && !keys))
                return jfail(p, "out of memory");
        }
        jv *item = &v->items[v->n];
        memset(item, 0, sizeof *item);
        if (close == '}') {
            size_t klen;
            skip_ws(p);
            if (p->pos >= p->size || p->s[p->pos] != '"')
                return jfail(p, "expected a string key");
            if (parse_string(p, &v->keys[v->n], &klen))
                return -1;
            skip_ws(p);
            if (p->pos >= p->size || p->s[p->pos] != ':') {
                v->n++;           /* owns the key: freed with the object */
                return jfail(p, "expected ':'");
            }
            p->pos++;
        }
        v->n++;
        if (parse_value(p, item, depth + 1))
            return -1;
        skip_ws(p);
        if (p->pos < p->size && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->size && p->s[p->pos] == close) {
            p->pos++;
            return 0;
        }
        return jfail(p, close == ']' ? "expected ',' or ']'" : "expected ',' or '}'");
    }
}

static int parse_value(jparser *p, jv *v, int depth)
{
    if (depth > J_MAX_DEPTH)
        return jfail(p, "nested too deeply to be a symbol file");
    skip_ws(p);
    if (p->pos >= p->size)
        return jfail(p, "unexpected end");
    const char c = p->s[p->pos];
    if (c == '{' || c == '[')
        return parse_items(p, v, c == '{' ? '}' : ']', depth);
    if (c == '"') {
        v->kind = J_STR;
        return parse_string(p, &v->str, &v->len);
    }
    if (c == '-' || (c >= '0' && c <= '9'))
        return parse_number(p, v);
    static const char *const words[] = {"null", "true", "false"};
    for (int w = 0; w < 3; w++) {
        const size_t n = strlen(words[w]);
        if (p->size - p->pos >= n && !memcmp(p->s + p->pos, words[w], n)) {
            p->pos += n;
            v->kind = w ? J_BOOL : J_NULL;
            v->num = w == 1;
            return 0;
        }
    }
    return jfail(p, "unexpected character");
}

static const jv *jget(const jv *obj, const char *key)
{
    if (!obj || obj->kind != J_OBJ)
        return NULL;
    for (size_t i = obj->n; i-- > 0;)     /* the last of repeated keys, as Python's json */
        if (!strcmp(obj->keys[i], key))
            return &obj->items[i];
    return NULL;
}

/* ---- canonical attribute values (mxcc/compiler/library.py: canonical) ---- */

static int is_delim(char c) { return c == '(' || c == ')' || c == ','; }

static int is_number(const char *t, size_t n)
{
    size_t i = 0, digits = 0;
    if (i < n && (t[i] == '+' || t[i] == '-'))
        i++;
    while (i < n && t[i] >= '0' && t[i] <= '9')
        i++, digits++;
    if (i < n && t[i] == '.') {
        i++;
        while (i < n && t[i] >= '0' && t[i] <= '9')
            i++, digits++;
    }
    if (!digits)
        return 0;
    if (i < n && (t[i] == 'e' || t[i] == 'E')) {
        size_t ed = 0;
        i++;
        if (i < n && (t[i] == '+' || t[i] == '-'))
            i++;
        while (i < n && t[i] >= '0' && t[i] <= '9')
            i++, ed++;
        if (!ed)
            return 0;
    }
    return i == n;
}

static int word_is(const char *t, size_t n, const char *w)
{
    if (strlen(w) != n)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((t[i] >= 'A' && t[i] <= 'Z' ? t[i] + 32 : t[i]) != w[i])
            return 0;
    return 1;
}

char *mxcc_attr_canonical(const char *text, size_t len)
{
    char *s = malloc(len + 1), *out = malloc(len * 24 + 32);
    size_t n = 0, o = 0;
    if (!s || !out) {
        free(s);
        free(out);
        return NULL;
    }
    for (size_t i = 0; i < len; i++) {
        const char c = text[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f')
            continue;
        s[n++] = c == '[' ? '(' : c == ']' ? ')' : c;
    }
    size_t a = 0, b = n;          /* strip parentheses around the whole value */
    while (b - a >= 2 && s[a] == '(') {
        size_t depth = 0, k = a;
        for (; k < b; k++) {
            depth += s[k] == '(';
            depth -= s[k] == ')';
            if (depth == 0)
                break;
        }
        if (k != b - 1)
            break;
        a++, b--;
    }
    for (size_t i = a; i < b;) {
        if (s[i] == ',') {        /* a run of commas before ')' or the end is dropped */
            size_t j = i;
            while (j < b && s[j] == ',')
                j++;
            if (!(j == b || s[j] == ')'))
                for (size_t k = i; k < j; k++)
                    out[o++] = ',';
            i = j;
        } else if (is_delim(s[i])) {
            out[o++] = s[i++];
        } else {
            size_t j = i;
            while (j < b && !is_delim(s[j]))
                j++;
            const char *t = s + i;
            const size_t tn = j - i;
            if (is_number(t, tn)) {
                char num[64], *copy = malloc(tn + 1);
                if (!copy) {
                    free(s);
                    free(out);
                    return NULL;
                }
                memcpy(copy, t, tn);
                copy[tn] = '\0';
                const double v = strtod(copy, NULL);
                free(copy);
                for (int prec = 15; prec <= 17; prec++) {
                    snprintf(num, sizeof num, "%.*g", prec, v);
                    if (strtod(num, NULL) == v || v != v)
                        break;
                }
                memcpy(out + o, num, strlen(num));
                o += strlen(num);
            } else if (word_is(t, tn, "true") || word_is(t, tn, "false")) {
                out[o++] = word_is(t, tn, "true") ? '1' : '0';
            } else {
                memcpy(out + o, t, tn);
                o += tn;
            }
            i = j;
        }
    }
    out[o] = '\0';
    free(s);
    return out;
}

/* ---- the check ---- */

typedef struct checker {
    const mxcc_symbol *want;
    const jv *nodes;          /* the JSON's "nodes" */
    int *json_of;             /* compiled node -> JSON node paired with it, or -1 */
    int *want_of;             /* JSON node -> compiled node, or -1 */
    int *queue;               /* compiled nodes to compare, in pairing order */
    int queued;
    char *err;
    size_t errlen;
} checker;

static const char *jstr(const jv *obj, const char *key)
{
    const jv *v = jget(obj, key);
    return v && v->kind == J_STR ? v->str : NULL;
}

static int differ(checker *c, const char *fmt, ...)
{
    if (c->err && c->errlen) {
        int n = snprintf(c->err, c->errlen, "the symbol is not the network this library was compiled for: ");
        if (n >= 0 && (size_t)n < c->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -1;
}

/* An entry [node, index] or [node, index, version] of `count` nodes: 0, or -1 if malformed. */
static int entry(const jv *e, size_t count, int *node, int *index)
{
    if (!e || e->kind != J_ARR || e->n < 2 || e->n > 3 || !e->items[0].is_int || !e->items[1].is_int ||
        e->items[0].ival < 0 || (size_t)e->items[0].ival >= count || e->items[1].ival < 0)
        return -1;
    *node = (int)e->items[0].ival;
    *index = (int)e->items[1].ival;
    return 0;
}

/* Pair JSON node j with compiled node d (as the same output `index` of both): a node paired otherwise is a
 * difference of wiring. */
static int pair(checker *c, int j, int d, const char *how)
{
    if (c->want_of[j] == d && c->json_of[d] == j)
        return 0;
    const char *jname = jstr(&c->nodes->items[j], "name");
    if (c->want_of[j] >= 0 || c->json_of[d] >= 0)
        return differ(c, "%s: node '%s' of the given symbol stands where the compiled network has node '%s', "
                      "whose other uses it does not share (different wiring)", how, jname ? jname : "?",
                      c->want->nodes[d].name);
    c->want_of[j] = d;
    c->json_of[d] = j;
    c->queue[c->queued++] = d;
    return 0;
}

static int op_spelled(const char *ops, const char *op)
{
    const size_t n = strlen(op);
    for (const char *p = ops; *p;) {
        const char *bar = strchr(p, '|');
        const size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && !memcmp(p, op, n))
            return 1;
        p += len + (bar != NULL);
    }
    return 0;
}

static int hidden_key(const char *key, const char *ignored)
{
    static const char *const legacy[] = {"ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage"};
    const size_t n = strlen(key);
    if (n >= 4 && !strncmp(key, "__", 2) && !strcmp(key + n - 2, "__"))
        return 1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(key, legacy[i]))
            return 1;
    return op_spelled(ignored, key);
}

/* The node's attribute `key` across its "param", "attr" and "attrs" objects (the later wins, as in nnvm). */
static const jv *attr_of(const jv *node, const char *key)
{
    const jv *v = NULL;
    static const char *const objs[] = {"param", "attr", "attrs"};
    for (int i = 0; i < 3; i++) {
        const jv *hit = jget(jget(node, objs[i]), key);
        v = hit ? hit : v;
    }
    return v;
}

static int compare_attrs(checker *c, const jv *node, const mxcc_sym_node *d, const char *jname)
{
    static const char *const objs[] = {"param", "attr", "attrs"};
    for (int o = 0; o < 3; o++) {             /* every attribute of the JSON node is one the compiled node has */
        const jv *obj = jget(node, objs[o]);
        for (size_t i = 0; obj && obj->kind == J_OBJ && i < obj->n; i++) {
            const char *key = obj->keys[i];
            if (hidden_key(key, d->ignored) || attr_of(node, key) != &obj->items[i])
                continue;
            const mxcc_sym_attr *a = NULL;
            for (int k = 0; k < d->num_attrs && !a; k++)
                if (!strcmp(c->want->attrs[d->first_attr + k].key, key))
                    a = &c->want->attrs[d->first_attr + k];
            if (!a)
                return differ(c, "node '%s' (%s) has attribute %s, which the compiled node '%s' does not have",
                              jname, jstr(node, "op"), key, d->name);
            if (obj->items[i].kind != J_STR)
                return differ(c, "node '%s': attribute %s is not a string", jname, key);
            char *canon = mxcc_attr_canonical(obj->items[i].str, obj->items[i].len);
            if (!canon)
                return differ(c, "out of memory");
            const int same = !strcmp(canon, a->value);
            free(canon);
            if (!same)
                return differ(c, "node '%s' (%s) has %s=%s, the compiled node '%s' has %s=%s", jname,
                              jstr(node, "op"), key, obj->items[i].str, d->name, key, a->value);
        }
    }
    for (int k = 0; k < d->num_attrs; k++) {  /* and the attributes it leaves out have their default values */
        const mxcc_sym_attr *a = &c->want->attrs[d->first_attr + k];
        if (!attr_of(node, a->key) && (!a->dflt || strcmp(a->dflt, a->value)))
            return differ(c, "node '%s' (%s) does not set %s, the compiled node '%s' has %s=%s", jname,
                          jstr(node, "op"), a->key, d->name, a->key, a->value);
    }
    return 0;
}

static int compare_node(checker *c, int d)
{
    const mxcc_sym_node *w = &c->want->nodes[d];
    const jv *node = &c->nodes->items[c->json_of[d]];
    const char *op = jstr(node, "op"), *name = jstr(node, "name");
    if (!op || !name)
        return differ(c, "node #%d of the given symbol has no string op and name", c->json_of[d]);
    const int variable = !strcmp(w->ops, "null");
    if (variable != !strcmp(op, "null") || (!variable && !op_spelled(w->ops, op))) {
        char first[128];
        snprintf(first, sizeof first, "%.*s", (int)strcspn(w->ops, "|"), w->ops);
        return differ(c, "node '%s' is %s '%s', the compiled network has %s '%s' there (node '%s')", name,
                      strcmp(op, "null") ? "an operator" : "a variable", op, variable ? "a variable" : "the operator",
                      variable ? w->name : first, w->name);
    }
    if (variable)
        return strcmp(name, w->name) ? differ(c, "variable '%s' is named '%s' in the compiled network", name,
                                              w->name) : 0;
    if (compare_attrs(c, node, w, name))
        return -1;
    const jv *inputs = jget(node, "inputs");
    const size_t n_in = inputs && inputs->kind == J_ARR ? inputs->n : 0;
    if (inputs && inputs->kind != J_ARR && inputs->kind != J_NULL)
        return differ(c, "node '%s': 'inputs' is not a list", name);
    if ((int)n_in != w->num_inputs)
        return differ(c, "node '%s' (%s) has %zu inputs, the compiled node '%s' has %d", name, op, n_in, w->name,
                      w->num_inputs);
    for (int k = 0; k < w->num_inputs; k++) {
        int jn, ji;
        const int *want = c->want->inputs[w->first_input + k];
        if (entry(&inputs->items[k], c->nodes->n, &jn, &ji))
            return differ(c, "node '%s': input %d is not [node, index] of an existing node", name, k);
        char how[160];
        snprintf(how, sizeof how, "input %d of node '%s'", k, name);
        if (ji != want[1])
            return differ(c, "%s is output %d of its node, the compiled network reads output %d", how, ji, want[1]);
        if (pair(c, jn, want[0], how))
            return -1;
    }
    return 0;
}

int mxcc_symbol_check(const mxcc_symbol *want, const char *json, char *err, size_t errlen)
{
    jparser p = {.s = json, .size = json ? strlen(json) : 0, .err = err, .errlen = errlen};
    jv doc = {0};
    int rc = -1;
    if (!json) {
        snprintf(err, errlen, "no symbol JSON given (NULL)");
        return -1;
    }
    if (parse_value(&p, &doc, 0)) {
        jfree(&doc);
        return -1;
    }
    skip_ws(&p);
    if (p.pos != p.size) {
        jfail(&p, "text after the JSON value");
        jfree(&doc);
        return -1;
    }
    const jv *nodes = jget(&doc, "nodes"), *heads = jget(&doc, "heads");
    checker c = {.want = want, .nodes = nodes, .err = err, .errlen = errlen};
    if (!nodes || nodes->kind != J_ARR || !heads || heads->kind != J_ARR) {
        snprintf(err, errlen, "not an MXNet symbol JSON (expected an object with 'nodes' and 'heads' lists)");
        goto done;
    }
    for (size_t i = 0; i < nodes->n; i++)
        if (nodes->items[i].kind != J_OBJ) {
            snprintf(err, errlen, "not an MXNet symbol JSON: node #%zu is not an object", i);
            goto done;
        }
    c.json_of = malloc((want->num_nodes ? (size_t)want->num_nodes : 1) * sizeof(int));
    c.queue = malloc((want->num_nodes ? (size_t)want->num_nodes : 1) * sizeof(int));
    c.want_of = malloc((nodes->n ? nodes->n : 1) * sizeof(int));
    if (!c.json_of || !c.queue || !c.want_of) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (int d = 0; d < want->num_nodes; d++)
        c.json_of[d] = -1;
    for (size_t j = 0; j < nodes->n; j++)
        c.want_of[j] = -1;
    if ((int)heads->n != want->num_heads) {
        differ(&c, "it has %zu outputs (heads), the compiled network %d", heads->n, want->num_heads);
        goto done;
    }
    for (int h = 0; h < want->num_heads; h++) {
        int jn, ji;
        char how[64];
        snprintf(how, sizeof how, "output %d", h);
        if (entry(&heads->items[h], nodes->n, &jn, &ji)) {
            differ(&c, "head %d is not [node, index] of an existing node", h);
            goto done;
        }
        if (ji != want->heads[h][1]) {
            differ(&c, "output %d is output %d of its node, the compiled network's is output %d", h, ji,
                   want->heads[h][1]);
            goto done;
        }
        if (pair(&c, jn, want->heads[h][0], how))
            goto done;
    }
    for (int q = 0; q < c.queued; q++)
        if (compare_node(&c, c.queue[q]))
            goto done;
    rc = 0;
done:
    free(c.json_of);
    free(c.queue);
    free(c.want_of);
    jfree(&doc);
    return rc;
}
