"""Inference: fix the kernel of the nodes named in CompileOptions.conv_paths (a tuned build's choices, or the
user's), so that every later stage (the planner's workspace sizes, the lowering) sees the same one.

Requires: a typed inference graph after fold_constants (the bind-time inputs are final: they decide which
kernels a node can take). Guarantees: each named node's attrs carry `chosen_path` = its path, which is one of
the node's candidates (OpDef.paths); every other node is unchanged. A name that is no node, a node whose op has
no choice of kernels, or a path that is not a candidate is a ShapeError naming the node and its candidates.
"""
from __future__ import annotations

from dataclasses import replace

from mxcc.errors import ShapeError, name_list
from mxcc.graph.ir import Graph
from mxcc.passes.fold_constants import bind_time_inputs


def choose_paths(graph: Graph, choices: dict[str, str]) -> Graph:
    if not choices:
        return graph
    by_name = {n.name: n for n in graph.nodes if not n.is_variable}
    unknown = sorted(set(choices) - set(by_name))
    if unknown:
        raise ShapeError(f"conv_paths names {name_list(unknown)}, which the inference graph does not have",
                         names=unknown)
    nodes = list(graph.nodes)
    for name, chosen in choices.items():
        n = by_name[name]
        if n.opdef.paths is None:
            raise ShapeError(f"conv_paths gives it the path {chosen!r}, but {n.op} has one kernel", node=name,
                             op=n.op)
        legal, _ = n.opdef.paths(n.params, [graph.type_of(r) for r in n.inputs], bind_time_inputs(graph, n))
        if chosen not in legal:
            raise ShapeError(f"conv_paths gives it the path {chosen!r}; its candidates: {', '.join(legal)}",
                             node=name, op=n.op, expected=legal, got=chosen)
        nodes[n.id] = replace(n, params=replace(n.params, chosen_path=chosen))
    return graph.with_nodes(nodes)
