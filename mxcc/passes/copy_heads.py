"""Repeated outputs: every head after the first that names the same value reads a copy of its own.

A graph may list one value as several outputs (`Group([y, y])`, a Gluon block returning `x, x`, or `y` and
`Dropout(y)` once remove_dropout has run). Each output is a host slot the forward must write, and
plan_memory gives a value one location: without a copy the second slot would never be written.

Requires: bound, typed nodes; for inference run it after remove_dropout (which can make heads equal), for
training before autodiff (run_pipeline). Guarantees: no two heads are the same value, except heads that are
graph variables (rejected by the compiler: nothing computes them); the copy of a repeated head is a
`_copy` node (MXNet's identity, a view: fuse gives a view that is a head a copy kernel) named
`<node>_copy<k>`, appended after the existing nodes. Gradients: `_copy`'s gradient is its output gradient,
so autodiff sums the head gradients of all the repeats (the vector-Jacobian product; MXNet 1.9.1's symbolic
executor keeps only the last repeat's, hybridized Gluon sums them); a repeated loss head needs no head
gradient (the copy's gradient reaches a loss op that ignores it, and dce drops it with its input).
Does not: copy a value that is both a head and a gradient (autodiff does that).

    before: heads relu_output, relu_output
    after : relu_copy1 = _copy(relu); heads relu_output, relu_copy1_output
"""
from __future__ import annotations

from mxcc.graph.ir import Graph, Node, Ref
from mxcc.ops import attrs as attrs_parser
from mxcc.ops import get_op

COPY_OP = "_copy"


def copy_repeated_heads(graph: Graph) -> Graph:
    seen: dict[tuple[int, int], int] = {}
    nodes = list(graph.nodes)
    names = {n.name for n in nodes}
    heads = []
    for h in graph.heads:
        n = graph.nodes[h.node]
        k = seen.get(h.key, 0)
        seen[h.key] = k + 1
        if k == 0 or n.is_variable:
            heads.append(h)
            continue
        stem = n.name if h.index == 0 else f"{n.name}_{n.opdef.output_names(n.params)[h.index]}"
        name, j = f"{stem}_copy{k}", k
        while name in names:
            j += 1
            name = f"{stem}_copy{j}"
        names.add(name)
        op = get_op(COPY_OP, name)
        nodes.append(Node(id=len(nodes), name=name, op=COPY_OP, inputs=(h,),
                          params=attrs_parser.parse(op.attrs, {}, node=name, op=COPY_OP),
                          out_types=(graph.type_of(h),), phase=n.phase))
        heads.append(Ref(len(nodes) - 1, 0))
    if len(nodes) == len(graph.nodes):
        return graph
    return graph.with_nodes(nodes, heads=tuple(heads))
