/* MXNet's predict API for one compiled network (c_predict_api.c) and what it knows of the network: the
 * descriptor, and the structure of the symbol it was compiled from, which MXPredCreate compares with the
 * symbol JSON it is given (symbol.c). A library's generated <net>_lib.c defines mxcc_pred_library_model.
 *
 * The structure is the compiled graph as MXNet JSON describes it, nodes in the graph's order:
 * variables by name, operators by op (any spelling of it: "_Plus" is "elemwise_add") and attributes, and the
 * wiring (which output of which node each input is, and the heads). Operator nodes' names are not compared,
 * variables' are (they bind params and inputs). Attribute values are compared in a canonical form
 * (mxcc_attr_canonical; mxcc/compiler/library.py is its Python twin, which wrote the values below), so that
 * "(3, 3)", "[3,3]" and "(3,3,)" agree, as do "1e-05" and "0.00001", "True" and "true"; an attribute the JSON
 * leaves out must have its default value. Hidden attributes (__shape__, lr_mult, ...) and those the op ignores
 * (workspace, cudnn_tune, ...) are not compared. */
#ifndef MXCC_PREDICT_H
#define MXCC_PREDICT_H

#include <stddef.h>

#include "mxcc_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mxcc_sym_attr {
    const char *key;
    const char *value;        /* canonical */
    const char *dflt;         /* canonical default, or NULL: a required attribute */
} mxcc_sym_attr;

typedef struct mxcc_sym_node {
    const char *name;
    const char *ops;          /* "null" for a variable, else the op's spellings, '|'-separated, the compiled one first */
    const char *ignored;      /* attribute keys the op accepts and ignores, '|'-separated ("": none) */
    int first_input, num_inputs;    /* inputs[first_input ..] */
    int first_attr, num_attrs;      /* attrs[first_attr ..] */
} mxcc_sym_node;

typedef struct mxcc_symbol {
    int num_nodes;
    const mxcc_sym_node *nodes;
    const int (*inputs)[2];   /* (node, output index) */
    const mxcc_sym_attr *attrs;
    int num_heads;
    const int (*heads)[2];
} mxcc_symbol;

typedef struct mxcc_pred_model {
    const mxcc_net *net;
    const mxcc_symbol *symbol;
} mxcc_pred_model;

/* The network a library's MXPred* functions run (defined by its generated <net>_lib.c). */
extern const mxcc_pred_model mxcc_pred_library_model;

/* 0 when `json` (MXNet symbol JSON, NUL-terminated) has the structure `want`; else -1 and a message in err that
 * names the first difference (or why the JSON cannot be read). */
int mxcc_symbol_check(const mxcc_symbol *want, const char *json, char *err, size_t errlen);

/* The canonical form of an attribute value: whitespace dropped, [] read as (), outer parentheses and trailing
 * commas dropped, each number printed as the shortest of %.15g/%.16g/%.17g that reads back the same, true and
 * false (any case) as 1 and 0. A malloc'd string (NULL out of memory). */
char *mxcc_attr_canonical(const char *text, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* MXCC_PREDICT_H */
