"""Inference: drop operators that are the identity at inference time (Dropout).

Requires: bound nodes. Guarantees: no node whose op has `identity_in_inference` is read by any node or head
(their readers read the op's input instead), except a head that would become a bare variable: that op
stays (lowered as a copy). The dead nodes are left for dce.
"""
from __future__ import annotations

from dataclasses import replace

from mxcc.graph.ir import Graph, Ref


def remove_dropout(graph: Graph) -> Graph:
    forward: dict[int, Ref] = {}
    for n in graph.nodes:
        if not n.is_variable and n.opdef.identity_in_inference:
            src = n.inputs[0]
            forward[n.id] = forward.get(src.node, src) if src.index == 0 else src

    def ref(r: Ref) -> Ref:
        return forward[r.node] if r.node in forward and r.index == 0 else r

    if not forward:
        return graph
    def head(r: Ref) -> Ref:       # a head must stay computed: keep the op (a copy) if it would be a variable
        new = ref(r)
        return r if graph.nodes[new.node].is_variable else new

    nodes = [replace(n, inputs=tuple(ref(r) for r in n.inputs)) for n in graph.nodes]
    return graph.with_nodes(nodes, heads=tuple(head(h) for h in graph.heads))
