"""Dead-node removal: keep only the nodes the heads depend on, renumbered in their original order.

Requires: a Graph. Guarantees: every node is reachable from a head or a gradient; ids are 0..n-1 in the old relative
order (so the result is still topological); `graph.inputs` keeps only surviving variables.
Does not: touch fusion groups (run it before fuse).
"""
from __future__ import annotations

from dataclasses import replace

from mxcc.graph.ir import Graph, Ref


def dce(graph: Graph) -> Graph:
    live: set[int] = set()
    stack = [h.node for h in graph.heads] + [r.node for _, r in graph.grads]
    while stack:
        i = stack.pop()
        if i in live:
            continue
        live.add(i)
        stack.extend(r.node for r in graph.nodes[i].inputs)
        stack.extend(graph.nodes[i].control_deps)
    return renumber(graph, sorted(live))


def renumber(graph: Graph, keep: list[int]) -> Graph:
    """The subgraph of the nodes `keep` (sorted ids), with ids and references remapped."""
    new_id = {old: new for new, old in enumerate(keep)}

    def ref(r: Ref) -> Ref:
        return replace(r, node=new_id[r.node])

    nodes = [replace(graph.nodes[old], id=new_id[old], inputs=tuple(ref(r) for r in graph.nodes[old].inputs),
                     control_deps=tuple(new_id[d] for d in graph.nodes[old].control_deps if d in new_id))
             for old in keep]
    names = {n.name for n in nodes if n.is_variable}
    return graph.with_nodes(nodes, heads=tuple(ref(h) for h in graph.heads),
                            grads=tuple((w, ref(r)) for w, r in graph.grads),
                            inputs=tuple(i for i in graph.inputs if i in names))
