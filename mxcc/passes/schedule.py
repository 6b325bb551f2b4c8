"""Scheduling: order the forward's kernels so that fewer activation bytes are live at once.

Fusion leaves `graph.groups` in the graph's node order, which is one topological order among many. Where
the network branches (SqueezeNet's fire modules, Inception blocks, ResNet's projection shortcuts, several
heads), another order can free a large tensor before the next one is made. This pass builds one greedily
(list scheduling, as in TVM's and XLA's memory-aware schedulers): among the kernels whose inputs are all
computed, run the one that grows the live arena bytes least (outputs and scratch it adds, minus inputs it
is the last reader of), the graph's order breaking ties. It keeps whichever of the two orders has the lower
peak, the graph's order on a tie, so it never makes a plan worse and leaves straight-line networks as they
were.

Requires: a fused graph (`groups`). Guarantees: `groups` is a permutation of the input's in which every
kernel comes after the kernels that write what it reads; folded ("prepare") groups keep their place and
order; the peak of live arena bytes (plan_memory's lower bound) is at most the input order's. Runs on
inference graphs only: a training graph's forward and backward phases are called separately, so their
order stays the autodiff pass's. Does not: place buffers (plan_memory) or change any kernel.

    before: groups [a, big1, big2, small1, small2, concat]   (big1 is read by small1 only, big2 by small2)
    after : groups [a, big1, small1, big2, small2, concat]   big1 is freed before big2 is made
"""
from __future__ import annotations

from mxcc.graph.ir import Graph
from mxcc.passes.fold_constants import PREPARE
from mxcc.passes.plan_memory import _align, _live_ranges, _view_source, grouped_nodes


def schedule(graph: Graph, enabled: bool = True) -> Graph:
    assert graph.groups is not None, "schedule requires the fuse pass"
    folded = [g for g in graph.groups if graph.nodes[g.anchor].phase == PREPARE]
    groups = [g for g in graph.groups if graph.nodes[g.anchor].phase != PREPARE]
    if not enabled or len(groups) < 3:
        return graph
    order = _greedy(graph, groups)
    if order == groups or peak_bytes(graph, order) >= peak_bytes(graph, groups):
        return graph
    return graph.with_nodes(graph.nodes, groups=tuple(folded + order))


def _host_keys(graph: Graph) -> set:
    """Values written straight into the caller's arrays (heads, gradients): not in the arena."""
    return {h.key for h in graph.heads} | {r.key for _, r in graph.grads}


def peak_bytes(graph: Graph, groups: list) -> int:
    """The most arena bytes live at one step when the forward runs `groups` in this order."""
    g = graph.with_nodes(graph.nodes, groups=tuple(groups))
    host = _host_keys(graph)
    live = [0] * len(groups)
    for key, (_, nbytes, lo, hi) in _live_ranges(g).items():
        if key not in host:
            for s in range(lo, hi + 1):
                live[s] += _align(nbytes)
    return max(live, default=0)


def _greedy(graph: Graph, groups: list) -> list:
    full = graph.with_nodes(graph.nodes, groups=tuple(groups))
    host = _host_keys(graph)
    writer = {r.key: i for i, g in enumerate(groups) for r in g.outputs}
    reads: list[set] = []
    grouped = grouped_nodes(full)
    for g in groups:
        inside = set(g.members)
        reads.append({_view_source(full, r, grouped).key for m in g.members for r in graph.nodes[m].inputs
                      if r.node not in inside} & writer.keys())
    readers: dict = {}
    for i, keys in enumerate(reads):
        for k in keys:
            readers.setdefault(k, set()).add(i)
    scratch = {}
    for key, (_, nbytes, lo, _) in _live_ranges(full).items():
        if key[1] == -1:
            scratch[lo] = _align(nbytes)
    size = {r.key: (0 if r.key in host else _align(graph.type_of(r).nbytes)) for g in groups for r in g.outputs}

    def growth(i: int) -> int:
        freed = sum(size[k] for k in reads[i] if readers[k] - done == {i})
        return sum(size[r.key] for r in groups[i].outputs) + scratch.get(i, 0) - freed

    done: set[int] = set()
    order = []
    # the groups whose inputs are all written, kept up to date as groups finish (not rescanned: a 5,000-node
    # chain would make that quadratic)
    waiting = [len({writer[k] for k in reads[i]}) for i in range(len(groups))]
    dependents: dict[int, set] = {}
    for i in range(len(groups)):
        for k in reads[i]:
            dependents.setdefault(writer[k], set()).add(i)
    ready = {i for i in range(len(groups)) if not waiting[i]}
    while len(order) < len(groups):
        best = min(ready, key=lambda i: (growth(i), i))
        ready.discard(best)
        done.add(best)
        order.append(groups[best])
        for j in dependents.get(best, ()):
            waiting[j] -= 1
            if not waiting[j]:
                ready.add(j)
    return order
