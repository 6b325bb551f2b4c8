"""Fusion: group nodes into kernels, with TVM's pattern kinds declared by each op.

Requires: bound, typed nodes (infer_shapes). Guarantees: `graph.groups` lists every operator node that needs
a kernel exactly once, in topological order; each group's members run in order and only its last member's
outputs leave the group. Rules:
  - an ANCHOR (FullyConnected, Convolution) absorbs the single-reader ops after it that its GEMM epilogue
    can do, in the epilogue's order: an inference BatchNorm (folded: scale/shift per channel, the scale into
    a weight packed at bind time), a residual
    `elemwise_add`, then one activation/clip;
  - a run of ELEMWISE ops where each value has exactly one reader becomes one loop;
  - a `view` op (Flatten, surviving Dropout) needs no kernel unless its output is a graph head (then it is a
    copy kernel of its own);
  - with fuse=False every kernel-needing node is its own group (finer profiling, easier debugging).
Values read by a head (or holding a gradient) or by two nodes always end a group; a group never mixes
phases (forward, backward, and "prepare": nodes folded by fold_constants; a forward group may read them
as it reads params, even when it comes first in `groups`: plan_memory moves the prepare groups to
`plan.folded`, which `<net>_prepare` runs before any forward). Does not: reorder nodes (schedule) or place
buffers (plan_memory).

    before: fullyconnected0 = FullyConnected(X, w0, b0); activation0 = Activation(fullyconnected0)
    after : group fullyconnected0: fullyconnected0 + activation0
"""
from __future__ import annotations

from mxcc.graph.ir import FusedGroup, Graph, Ref
from mxcc.ops.base import Fusion
from mxcc.passes.fold_constants import PREPARE


def fuse(graph: Graph, enabled: bool = True) -> Graph:
    readers = graph.consumers()
    heads = {h.key for h in graph.heads} | {r.key for _, r in graph.grads}   # values the host receives
    taken: set[int] = set()
    groups = []
    for n in graph.nodes:
        if n.is_variable or n.id in taken:
            continue
        op = n.opdef
        if op.view_of(n.params) and (n.id, 0) not in heads:
            continue
        members = [n.id]
        if enabled and op.fusion_of(n.params) in (Fusion.ANCHOR, Fusion.ELEMWISE):
            _grow(graph, members, readers, heads, taken)
        taken.update(members)
        last = graph.nodes[members[-1]]
        outs = tuple(Ref(last.id, i) for i in range(len(last.out_types) - last.opdef.num_hidden(last.params)))
        groups.append(FusedGroup(name=n.name, members=tuple(members), outputs=outs))
    return graph.with_nodes(graph.nodes, groups=tuple(groups))


def _foldable_batch_norm(graph: Graph, anchor, members: list[int], bn) -> bool:
    """An inference BatchNorm directly after an anchor, normalizing the axis the anchor's epilogue vectors
    index, with its gamma/beta/moving stats bound by the host or folded from params (read at bind time,
    after the folded values: <net>_prepare runs those first)."""
    step = bn.opdef.epilogue(bn.params) if bn.opdef.epilogue else None
    axis = anchor.opdef.epilogue_axis
    if step is None or not step.batch_norm or axis is None or graph.grads or len(members) != 1:
        return False
    ndim = len(bn.out_types[0].shape)
    return (bn.params.axis % ndim == axis % ndim and bn.inputs[0].node == anchor.id
            and all(graph.nodes[r.node].is_variable or graph.nodes[r.node].phase == PREPARE
                    for r in bn.inputs[1:]))


def _grow(graph: Graph, members: list[int], readers, heads, taken: set[int]) -> None:
    """Absorb readers while allowed; a reader's other inputs must already be computed (variables, or
    outputs of earlier groups), so the group can run where it starts."""
    anchor = graph.nodes[members[0]]
    has_act = has_residual = False
    while True:
        key = (members[-1], 0)
        rs = readers.get(key, [])
        if key in heads or len(rs) != 1:
            return
        nxt = graph.nodes[rs[0]]
        ready = all(r.node in members or r.node in taken or graph.nodes[r.node].is_variable
                    or (graph.nodes[r.node].phase == PREPARE != anchor.phase)      # computed at bind time
                    for r in nxt.inputs)
        if not ready or nxt.phase != anchor.phase:     # forward and backward run in separate entry points
            return
        if nxt.out_types[0] != graph.nodes[members[-1]].out_types[0]:
            return
        if nxt.opdef.fusion_of(nxt.params) is not Fusion.ELEMWISE and not _foldable_batch_norm(graph, anchor, members, nxt):
            return
        if anchor.opdef.fusion_of(anchor.params) is Fusion.ANCHOR:
            # the GEMM epilogue order is fixed: (+ residual) then one activation
            step = nxt.opdef.epilogue(nxt.params) if nxt.opdef.epilogue else None
            if step is None or has_act:
                return
            if step.batch_norm:
                if len(members) != 1:
                    return          # BN's scale/shift come first in the epilogue: only right after the GEMM
            elif step.residual:
                chain = Ref(members[-1], 0)
                others = [r for r in nxt.inputs if r.key != chain.key]
                if has_residual or len(nxt.inputs) != 2 or len(others) != 1 \
                        or graph.type_of(others[0]) != nxt.out_types[0]:
                    return
                has_residual = True
            elif len(nxt.inputs) != 1:
                return
            else:
                has_act = True
        elif any(graph.type_of(r) != nxt.out_types[0] for r in nxt.inputs):
            return          # broadcasting readers are not part of a plain elementwise loop
        members.append(nxt.id)
