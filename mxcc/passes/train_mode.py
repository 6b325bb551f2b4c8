"""Training mode: mode-dependent operators take their training form (MXNet's forward(is_train=True)).

Requires: bound, typed nodes (infer_shapes). Guarantees: every node whose op names a training form for its
attributes (`OpDef.train_op`) runs that op instead, with the same name, attributes, inputs and output types:
BatchNorm -> `_train_BatchNorm` (batch statistics; unless use_global_stats), Dropout -> `_train_Dropout`
(a random mask). The training forms have no hidden outputs: the batch mean/var and the mask are real values
the backward reads. Does not: differentiate (autodiff runs after it) or touch the inference variant a
training compile also builds (that one is planned from the original graph, see compiler.py).

    before: bn = BatchNorm(conv, gamma, beta, moving_mean, moving_var)
    after : bn = _train_BatchNorm(conv, gamma, beta, moving_mean, moving_var) -> output, mean, invstd
"""
from __future__ import annotations

from dataclasses import replace

from mxcc.graph.ir import Graph
from mxcc.ops import get_op


def train_mode(graph: Graph) -> Graph:
    nodes = []
    for n in graph.nodes:
        if not n.is_variable and n.opdef.train_op is not None:
            name = n.opdef.train_op(n.params)
            if name is not None:
                op = get_op(name, n.name)
                assert op.attrs is n.opdef.attrs, f"{name} must take {n.op}'s attributes"
                n = replace(n, op=name)
        nodes.append(n)
    return graph.with_nodes(nodes)


def mode_dependent(graph: Graph) -> bool:
    """Whether training changes this graph's forward (it has a node with a training form)."""
    return any(not n.is_variable and n.opdef.train_op is not None and n.opdef.train_op(n.params) is not None
               for n in graph.nodes)
