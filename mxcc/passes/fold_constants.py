"""Inference: constant folding of parameter-only subgraphs, computed once at bind time instead of every forward.

Params arrive at run time (Module.set_params), so nothing is evaluated here: a folded node is moved to the
"prepare" phase, fused and planned like any other (its values go to ctx->derived, outside the arena:
plan_memory), lowered with its own op's template and called by `<net>_prepare`, which runs every time the
params are bound (again after a second set_params; before every `<net>_forward_infer` of a training build,
whose updates change the params). The forward reads the folded values from ctx->derived.

Requires: bound, typed nodes of an inference graph (the pipeline skips it when training: there the params
change every step). Guarantees: a node has phase "prepare" iff it is a forward operator node, every input
of which is a parameter or aux state (a variable not in `graph.inputs`: no data input, no label) or a value
of another folded node, and it is not random (draws from the forward's RNG), not an inference identity
(Dropout), does not write its inputs, and is not a graph head (the forward must write heads into the
caller's arrays; a head's param-only inputs are still folded). A view of a constant (Reshape of a weight) is
marked too, so that its readers fold; it has no kernel and reads its source in place, as in the forward.
Does not: evaluate anything, or run in training graphs.

    before: fc = FullyConnected(data, _mulscalar0, b);  _mulscalar0 = _mul_scalar(w, scalar=0.5)
    after : _mulscalar0.phase == "prepare" (in <net>_prepare, value in ctx->derived); fc stays in the forward
"""
from __future__ import annotations

from dataclasses import replace

from mxcc.graph.ir import Graph

PREPARE = "prepare"      # the phase of folded nodes: run by <net>_prepare, not by the forward


def fold_constants(graph: Graph) -> Graph:
    heads = {h.node for h in graph.heads}
    const = {n.id for n in graph.variables if n.name not in graph.inputs}   # params and aux states
    folded: set[int] = set()
    for n in graph.nodes:
        if n.is_variable or n.id in heads or n.phase != "forward" or not foldable_op(n):
            continue
        if all(r.node in const for r in n.inputs):
            const.add(n.id)
            folded.add(n.id)
    if not folded:
        return graph
    return graph.with_nodes(replace(n, phase=PREPARE) if n.id in folded else n for n in graph.nodes)


def foldable_op(node) -> bool:
    """Whether the node's op computes the same values at bind time as in the forward: a pure function of
    its inputs (no RNG draws, no input written in place, not a train/infer-dependent identity)."""
    op = node.opdef
    return not (op.random or op.identity_in_inference or op.mutates(node.params))


def bind_time_inputs(graph: Graph, node) -> frozenset[str]:
    """Names of `node`'s inputs whose values are fixed once the params are bound (params, aux states and
    values folded from them), when `node` runs in the forward of an inference graph; empty in a training
    graph (every update changes the params). Such inputs may be transformed once by `<net>_prepare`
    (packed weights: codegen/lower.py LowerCtx.packed_input); the planner and the lowering both ask here."""
    if node.phase != "forward" or graph.has_backward:
        return frozenset()
    names = node.opdef.inputs(node.params)
    fixed = set()
    for name, r in zip(names, node.inputs):
        src = graph.nodes[r.node]
        if (src.is_variable and src.name not in graph.input_names) or src.phase == PREPARE:
            fixed.add(name)
    return frozenset(fixed)


def folded_nodes(graph: Graph) -> list[str]:
    """Names of the folded nodes, in node order (tests, --dump-after)."""
    return [n.name for n in graph.nodes if n.phase == PREPARE]
