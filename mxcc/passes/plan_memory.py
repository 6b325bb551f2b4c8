"""Static memory planning: host-bound slots, and one arena for every intermediate.

Requires: a fused graph (`groups` in execution order). Guarantees: every value a kernel touches has a
Location; graph inputs, parameters, aux states and outputs are host-bound slots (never in the arena); every
other group output gets a 64-byte aligned arena range that overlaps no other buffer live at the same step
(live = from the step that writes it to the last step that reads it, through views). Three placement
strategies are tried (greedy by size, greedy by definition order, greedy by size with the longer-lived first
among equal sizes; all first-fit on offsets, as TFLite's "offset calculation") and the smallest arena wins;
then, within that arena, each buffer moves to the free range used least recently (`_least_recently_used`: no
kernel writes over what the one before it read, which costs cross-core invalidations on several threads). With plan=False every buffer gets its own range (naive).
Elementwise kernels reuse the storage of an input that dies at their step (in-place, `plan.inplace`), and a
convolution whose kernel reads each residual element before writing its own (OpDef.residual_in_place) the
storage of a fused residual that dies there.
With `concat_in_place` (inference plans of a fixed batch), a concatenation whose inputs are each one contiguous
range of its output (nothing but 1s before the axis) has them written there by the kernels that compute them
(`plan.slices`): its copies vanish (codegen/lower.py drops a copy whose source is its destination).
With `planes_apart` (inference plans of a fixed batch), a value that one kernel writes and one other reads,
both able to (OpDef.planes_apart: a depthwise layer and the pointwise layer after it), whose planes of H*W floats
would not start on cache lines (14x14, 7x7), has its planes 16-float aligned (`plan.plane_strides`): the
pointwise kernel reads its rows in place instead of copying them.
Sizes use each value's real dtype. Folded groups (phase "prepare", passes/fold_constants.py) leave
`graph.groups` for `plan.folded`: their values are placed the same way in ctx->derived (`plan.derived_buffers`,
Location.derived), never in the arena; those the forward reads stay live to the end.
"""
from __future__ import annotations

import numpy as np

from mxcc.graph.ir import Graph, Ref
from mxcc.passes.fold_constants import PREPARE, bind_time_inputs
from mxcc.plan import BufferSlot, Location, Plan, Slot, Workspace
from mxcc.types import DType

ALIGN = 64
LRU_MAX_BUFFERS = 256   # _least_recently_used's bound (ResNet-50 inference: 55 buffers, 2 ms)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def host_slots(graph: Graph, state_names: tuple[str, ...] = (), accumulate: frozenset[str] = frozenset()
               ) -> tuple[Slot, ...]:
    """Inputs (in graph.inputs order), then params and aux states (node order), then outputs (heads), then
    gradients (graph.grads order, named after their variable), then optimizer states, then for the gradients
    in `accumulate` (MXNet's grad_req 'add') the slot the backward computes them into ("grad_fresh"), which
    the backward then adds to their "grad" slot."""
    aux_ids: set[int] = set()
    label_ids: set[int] = set()
    other_reads: set[int] = set()
    for n in graph.nodes:
        if n.is_variable:
            continue
        names = n.opdef.inputs(n.params)
        for name, r in zip(names, n.inputs):
            if name in n.opdef.aux(n.params):
                aux_ids.add(r.node)
            if name in n.opdef.labels:
                label_ids.add(r.node)
            else:
                other_reads.add(r.node)
    label_ids -= other_reads          # a label the backward reads is required (training)
    by_name = {n.name: n for n in graph.variables}
    head_grad_of = {v: out for out, v in graph.head_grads}
    slots: list[Slot] = []
    for name in graph.inputs:
        n = by_name[name]
        if name in head_grad_of:
            slots.append(Slot(len(slots), name, "head_grad", n.out_types[0].shape, output=head_grad_of[name]))
        else:
            slots.append(Slot(len(slots), name, "input", n.out_types[0].shape, optional=n.id in label_ids))
    for n in graph.variables:
        if n.name not in graph.inputs:
            slots.append(Slot(len(slots), n.name, "aux" if n.id in aux_ids else "param", n.out_types[0].shape))
    for i, h in enumerate(graph.heads):
        slots.append(Slot(len(slots), graph.output_name(h), "output", graph.type_of(h).shape))
    for name, r in graph.grads:
        slots.append(Slot(len(slots), name, "grad", graph.type_of(r).shape))
    for name, r in graph.grads:          # optimizer states (momentum, Adam's mean/var), one per parameter
        if name not in graph.inputs:
            for st in state_names:
                slots.append(Slot(len(slots), f"{name}_{st}", "state", graph.type_of(r).shape))
    for name, r in graph.grads:
        if name in accumulate:
            slots.append(Slot(len(slots), name, "grad_fresh", graph.type_of(r).shape))
    return tuple(slots)


def grouped_nodes(graph: Graph) -> frozenset[int]:
    """The nodes some kernel computes (members of graph.groups): what _view_source stops at."""
    return frozenset(i for g in graph.groups for i in g.members)


def _view_source(graph: Graph, r: Ref, grouped: frozenset[int] | None = None) -> Ref:
    """Follow view ops without a kernel (Flatten, Dropout) back to the value that owns the storage.
    `grouped`: grouped_nodes(graph), computed once by callers that ask for many values."""
    if grouped is None:
        grouped = grouped_nodes(graph)
    while True:
        n = graph.nodes[r.node]
        if n.is_variable or n.id in grouped or not n.opdef.view_of(n.params):
            return r
        r = n.inputs[0]


def plan_memory(graph: Graph, enabled: bool = True, state_names: tuple[str, ...] = (),
                accumulate: frozenset[str] = frozenset(), concat_in_place: bool = False,
                planes_apart: bool = False) -> Plan:
    assert graph.groups is not None, "plan_memory requires the fuse pass"
    folded = tuple(g for g in graph.groups if graph.nodes[g.anchor].phase == PREPARE)
    graph = graph.with_nodes(graph.nodes, groups=tuple(g for g in graph.groups if g not in folded))
    slots = host_slots(graph, state_names, accumulate)
    slot_of = {s.name: s.index for s in slots if s.kind in ("input", "head_grad", "param", "aux")}
    locations: dict[tuple[int, int], Location] = {}
    for n in graph.variables:
        if n.name in slot_of:
            locations[(n.id, 0)] = Location(slot=slot_of[n.name])
    out_slot = {}
    for s, h in zip([s for s in slots if s.kind == "output"], graph.heads):
        # one value in two output slots would leave the second unwritten: passes/copy_heads.py copies repeats
        # (a variable head is rejected by the compiler: nothing computes it)
        assert h.key not in out_slot or graph.nodes[h.node].is_variable, \
            f"output {s.name!r} repeats an earlier output: run copy_repeated_heads before planning"
        out_slot.setdefault(h.key, s.index)
    written = {s.name: s.index for s in slots if s.kind == "grad"}
    written.update({s.name: s.index for s in slots if s.kind == "grad_fresh"})
    for name, r in graph.grads:
        out_slot.setdefault(r.key, written[name])
    strides = _planes_apart(graph, set(out_slot)) if planes_apart else {}
    vals = _live_ranges(graph, strides)
    for key in list(vals):
        if key in out_slot:
            locations[key] = Location(slot=out_slot[key])
            del vals[key]
    slices = _concat_slices(graph, vals) if enabled and concat_in_place else {}
    placed, offset, strategy, inplace = _allocate(graph, vals, enabled, slices)
    for key in vals:
        locations[key] = Location(offset=offset[key])
    derived, dvals, doffset, dinplace = _plan_derived(graph, folded, enabled)
    for key in dvals:
        locations[key] = Location(derived=doffset[key])
    # views resolve to their source's location
    grouped = grouped_nodes(graph)
    for n in graph.nodes:
        if not n.is_variable and (n.id, 0) not in locations and n.opdef.view_of(n.params):
            src = _view_source(graph, Ref(n.id, 0), grouped)
            if src.key in locations:
                locations[(n.id, 0)] = locations[src.key]
    # scratch is keyed (anchor, -1) in here; the Plan gives it its own table
    sizes = {**dvals, **vals}
    workspaces = {k[0]: Workspace(locations.pop(k), sizes[k][1], sizes[k][2]) for k in list(locations) if k[1] == -1}
    arena = max((b.offset + _align(b.nbytes) for b in placed), default=0)
    naive = sum(_align(v[1]) for v in vals.values())
    steps = len(graph.groups)
    lower = _peak_bytes(placed, steps)
    return Plan(graph=graph, slots=slots, buffers=tuple(placed), locations=locations, workspaces=workspaces,
                arena_bytes=arena, naive_bytes=naive, lower_bound_bytes=lower, strategy=strategy,
                inplace=inplace + dinplace, live={k: (v[2], v[3]) for k, v in vals.items() if k[1] >= 0},
                slices=tuple((vals[k][0], vals[o][0], off) for k, (o, off) in slices.items()),
                folded=folded, derived_buffers=tuple(derived),
                derived_bytes=max((b.offset + _align(b.nbytes) for b in derived), default=0),
                plane_strides=strides)


PLANE_ALIGN = 16   # floats: a 64-byte cache line
# Planes of fewer floats stay dense: at 7x7 (1 full pixel panel of the pointwise kernel's 2, the other copied
# either way) the depthwise layers wrote 64-float planes slower (MobileNet 1.0, AMD Zen 4, 1 thread: 512@14
# stride 2 35 -> 41 us, 1024@7 37 -> 47) and the pointwise layers after gained nothing (917 -> 936 us); at 14x14
# (196 of 208 floats) the pointwise layers gain 1-3% (2 threads 471 -> 456 us), the depthwise ones the same.
PLANES_APART_MIN = 128


def _planes_apart(graph: Graph, outputs: set) -> dict:
    """value key -> floats between its planes (H*W rounded up to PLANE_ALIGN): each value (N, C, H, W) of
    float32, H*W at least PLANES_APART_MIN and not a multiple of PLANE_ALIGN, that the anchor of one kernel
    writes, whose kernel takes "out" planes apart (OpDef.planes_apart) and has no fused residual, and the anchor
    of one other kernel reads, once, as its input "data", taking "data" planes apart; not an output."""
    anchor_of = {g.anchor: g for g in graph.groups}
    readers = graph.consumers()

    def takes(node, which: str) -> bool:   # the node's kernel takes `which` ("out" / "data") planes apart
        hook = node.opdef.planes_apart
        return hook is not None and which in hook(node.params, [graph.type_of(r) for r in node.inputs],
                                                  bind_time_inputs(graph, node))

    strides = {}
    for g in graph.groups:
        anchor = graph.nodes[g.anchor]
        if len(g.outputs) != 1 or anchor.opdef.planes_apart is None or g.outputs[0].key in outputs:
            continue
        v = g.outputs[0]
        t = graph.type_of(v)
        hw = t.shape[2] * t.shape[3] if len(t.shape) == 4 else 0
        if t.dtype != DType.float32 or hw % PLANE_ALIGN == 0 or hw < PLANES_APART_MIN:
            continue
        members = [graph.nodes[m] for m in g.members[1:]]
        if any(m.opdef.epilogue and getattr(m.opdef.epilogue(m.params), "residual", False) for m in members):
            continue
        if not takes(anchor, "out"):
            continue
        users = readers.get(v.key, [])
        if len(users) != 1 or users[0] not in anchor_of:
            continue
        reader = graph.nodes[users[0]]
        reads = [name for name, r in zip(reader.opdef.inputs(reader.params), reader.inputs) if r.key == v.key]
        if reads != ["data"] or not takes(reader, "data"):
            continue
        strides[v.key] = -(-hw // PLANE_ALIGN) * PLANE_ALIGN
    return strides


def _peak_bytes(buffers, steps: int) -> int:
    """The most bytes live at one step (the lower bound of any placement): a sweep over the steps."""
    delta = [0] * (max([steps, *(b.end + 1 for b in buffers)]) + 1)
    for b in buffers:
        delta[b.start] += _align(b.nbytes)
        delta[b.end + 1] -= _align(b.nbytes)
    live = peak = 0
    for d in delta[:steps]:
        live += d
        peak = max(peak, live)
    return peak


def _allocate(graph: Graph, vals: dict, enabled: bool, slices: dict | None = None):
    """Place `vals` ((node, index) -> (name, bytes, first step, last step)) in one region: in-place chains
    share a buffer, a chain ending in a value of `slices` (value -> (concatenation output, byte offset)) lives
    at its offset in that output's buffer (live from the chain's first write), then first-fit.
    -> (placed buffers, key -> offset, strategy, in-place name pairs)."""
    slices = slices or {}
    # a sliced value, and an output holding slices, lend their bytes to no later elementwise kernel: it would
    # write over a slice another value still holds
    keep = frozenset(slices) | frozenset(o for o, _ in slices.values())
    root = _inplace_roots(graph, vals, keep) if enabled else {k: k for k in vals}
    home = {root[k]: where for k, where in slices.items()}   # chain -> (output, offset): the sliced value ends it

    def base(k):   # (the buffer's key, byte offset in it); nested concatenations add their offsets
        r = root[k]
        if r not in home:
            return r, 0
        b, off = base(home[r][0])
        return b, off + home[r][1]

    where = {k: base(k) for k in vals}
    merged: dict[tuple, list] = {}
    for key, (name, nbytes, lo, hi) in vals.items():
        b = where[key][0]
        r = merged.setdefault(b, [vals[b][0], vals[b][1], lo, hi])
        r[2], r[3] = min(r[2], lo), max(r[3], hi)
    roots = list(merged)
    buffers = [BufferSlot(m[0], -1, m[1], m[2], m[3]) for m in (merged[r] for r in roots)]
    placed, strategy = _place(buffers, enabled)
    offset = {r: b.offset for r, b in zip(roots, placed)}
    inplace = tuple(sorted((vals[k][0], vals[root[k]][0]) for k in vals if root[k] != k))
    return placed, {k: offset[where[k][0]] + where[k][1] for k in vals}, strategy, inplace


def _concat_slices(graph: Graph, vals: dict) -> dict:
    """value key -> (output key, byte offset): the inputs of each kernel of one node whose op places every input
    in one contiguous range of its output (OpDef.input_slices: Concat), all computed by kernels into the arena,
    distinct, on 64-byte boundaries, and none already a slice of another. All of a node's inputs or none."""
    grouped = grouped_nodes(graph)
    slices: dict = {}
    for g in graph.groups:
        node = graph.nodes[g.anchor]
        if len(g.members) != 1 or node.opdef.input_slices is None or g.outputs[0].key not in vals:
            continue
        out = g.outputs[0].key
        in_types = [graph.type_of(r) for r in node.inputs]
        offs = node.opdef.input_slices(node.params, in_types, graph.type_of(g.outputs[0]))
        srcs = [_view_source(graph, r, grouped).key for r in node.inputs]
        if (offs is None or len(set(srcs)) != len(srcs)
                or any(s not in vals or s in slices or o % ALIGN or vals[s][1] != graph.type_of(r).nbytes
                       for s, o, r in zip(srcs, offs, node.inputs))):
            continue
        for src, o in zip(srcs, offs):
            slices[src] = (out, o)
    return slices


def _plan_derived(graph: Graph, folded: tuple, enabled: bool):
    """The folded groups' values (and workspaces) in ctx->derived, over the steps of <net>_prepare: a value
    the forward reads stays live to the end (the forward runs many times after one prepare); one only other
    folded kernels read can share its bytes with later ones. `graph` holds the forward's groups."""
    if not folded:
        return [], {}, {}, ()
    prep = graph.with_nodes(graph.nodes, groups=folded)
    vals = {k: list(v) for k, v in _live_ranges(prep).items()}
    grouped = grouped_nodes(prep)
    for grp in graph.groups:
        for m in grp.members:
            for r in graph.nodes[m].inputs:
                src = _view_source(prep, r, grouped).key
                if src in vals:
                    vals[src][3] = len(folded)
    vals = {k: tuple(v) for k, v in vals.items()}
    placed, offset, _, inplace = _allocate(prep, vals, enabled)
    return placed, vals, offset, inplace


def _live_ranges(graph: Graph, strides: dict | None = None) -> dict[tuple[int, int], tuple[str, int, int, int]]:
    """(node, index) -> (name, bytes, first step, last step) for every value a kernel writes (planes `strides`
    apart: its N*C planes of that many floats), and (anchor, -1) for each kernel's scratch workspace (live during
    its own step only)."""
    vals: dict[tuple[int, int], list] = {}
    grouped = grouped_nodes(graph)
    for step, g in enumerate(graph.groups):
        for m in g.members:
            for r in graph.nodes[m].inputs:
                src = _view_source(graph, r, grouped).key
                if src in vals:
                    vals[src][3] = max(vals[src][3], step)
        for r in g.outputs:
            t = graph.type_of(r)
            nbytes = t.nbytes if not strides or r.key not in strides else t.shape[0] * t.shape[1] * strides[r.key] * 4
            vals[r.key] = [graph.output_name(r), nbytes, step, step]
        anchor = graph.nodes[g.anchor]
        if anchor.opdef.workspace is not None:
            nbytes = anchor.opdef.workspace(anchor.params, [graph.type_of(r) for r in anchor.inputs],
                                            anchor.out_types, bind_time_inputs(graph, anchor))
            if nbytes > 0:
                vals[(anchor.id, -1)] = [f"{anchor.name}_workspace", nbytes, step, step]
    return {k: tuple(v) for k, v in vals.items()}


def _residual_input(graph: Graph, members: list, grouped) -> tuple | None:
    """The value a fused residual add reads (its input from outside the kernel) when the anchor's kernel may
    write over it (OpDef.residual_in_place) and no other member reads it, else None."""
    anchor = members[0]
    if anchor.opdef.residual_in_place is None or len(members) < 2:
        return None
    inside = {m.id for m in members}
    adds = [m for m in members[1:] if m.opdef.epilogue and getattr(m.opdef.epilogue(m.params), "residual", False)]
    if len(adds) != 1:
        return None
    outer = [r for r in adds[0].inputs if r.node not in inside]
    if len(outer) != 1:
        return None
    src = _view_source(graph, outer[0], grouped).key
    read_elsewhere = any(_view_source(graph, r, grouped).key == src for m in members for r in m.inputs
                         if m is not adds[0])
    if read_elsewhere or not anchor.opdef.residual_in_place(
            anchor.params, [graph.type_of(r) for r in anchor.inputs], bind_time_inputs(graph, anchor)):
        return None
    return src


def _inplace_roots(graph: Graph, vals, keep: frozenset = frozenset()) -> dict:
    """Kernels write over an input that dies at their step (same size): out shares its slot.

    Elementwise kernels whose every member declares `inplace` (pure elementwise: out[i] depends on in[i]
    alone), over any such input; an anchor with a fused residual its kernel reads element by element before
    writing (OpDef.residual_in_place), over the residual. Never over a value in `keep`."""
    root = {k: k for k in vals}
    grouped = grouped_nodes(graph)
    for step, g in enumerate(graph.groups):
        members = [graph.nodes[m] for m in g.members]
        if len(g.outputs) != 1:
            continue
        out = g.outputs[0].key
        if out not in vals:
            continue
        if all(m.opdef.inplace for m in members):
            inside = set(g.members)
            candidates = [_view_source(graph, r, grouped).key for m in members for r in m.inputs
                          if r.node not in inside]
        else:
            residual = _residual_input(graph, members, grouped)
            candidates = [residual] if residual is not None else []
        for src in candidates:
            if (src in vals and src not in keep and vals[src][3] == step and vals[src][1] == vals[out][1]
                    and root[out] == out):
                root[out] = root[src]
    # path-compress chains (a <- b <- c)
    for k in root:
        while root[root[k]] != root[k]:
            root[k] = root[root[k]]
    return root


def _place(buffers: list[BufferSlot], enabled: bool) -> tuple[list[BufferSlot], str]:
    from dataclasses import replace
    if not enabled:
        out, off = [], 0
        for b in buffers:
            out.append(replace(b, offset=off))
            off += _align(b.nbytes)
        return out, "naive"
    best = None
    overlaps = _time_overlaps(buffers)
    # ties keep the earlier strategy; the third breaks greedy-by-size's ties by the longer lifetime first, which
    # packs DenseNet's equal-sized concatenation inputs without the gaps the first leaves (arena 1.11 -> 1.00
    # of the lower bound)
    for strategy, order in (("greedy_by_size", lambda i: (-buffers[i].nbytes, buffers[i].start, i)),
                            ("greedy_by_start", lambda i: (buffers[i].start, -buffers[i].nbytes, i)),
                            ("greedy_by_size_lifetime",
                             lambda i: (-buffers[i].nbytes, buffers[i].start - buffers[i].end, i))):
        offsets = _first_fit(buffers, sorted(range(len(buffers)), key=order), overlaps)
        arena = max((o + _align(b.nbytes) for o, b in zip(offsets, buffers)), default=0)
        if best is None or arena < best[0]:
            best = (arena, offsets, strategy)
    offsets = _least_recently_used(buffers, best[1], best[0])
    strategy = best[2] + ("+lru" if offsets != best[1] else "")
    return [replace(b, offset=o) for b, o in zip(buffers, offsets)], strategy


def _least_recently_used(buffers: list[BufferSlot], offsets: list[int], arena: int) -> list[int]:
    """The offsets after moving each buffer, in the order they are written and within the arena the placement
    needed, onto the free range whose memory was last used longest ago.

    First fit packs a chain of layers into two ranges, so a kernel writes over what the kernel before it read.
    When threads split those two kernels differently (a pointwise layer split by output channels reads all of
    its input on every core) every core still holds those lines, and each write first waits for the others
    to drop their copy: MobileNet's 512-channel 14x14 depthwise layers took 40 us on 2 threads writing there
    and 20 us writing over memory untouched for several layers (a C driver: 16 us over lines one core held,
    40 us over lines both held). On one thread the same (MobileNet 1.0: 11663 vs 11697 us summed over its
    kernels). Each move keeps every constraint of the placement (checked against all other buffers), so the
    arena does not grow. Cubic in the buffers: skipped past LRU_MAX_BUFFERS."""
    offsets = list(offsets)
    if len(buffers) > LRU_MAX_BUFFERS or arena >= 1 << 62:      # (beyond int64: no machine has such an arena)
        return offsets
    start = np.array([b.start for b in buffers])
    end = np.array([b.end for b in buffers])
    size_of = np.array([_align(b.nbytes) for b in buffers])
    for i in sorted(range(len(buffers)), key=lambda i: buffers[i].start):
        b, size = buffers[i], int(size_of[i])
        lo = np.array(offsets)
        hi = lo + size_of
        others = np.arange(len(buffers)) != i
        live = others & (start <= b.end) & (b.start <= end)
        past = others & (end < b.start)
        cands = np.array(sorted({0, *hi[live].tolist(), *lo[past].tolist(), *hi[past].tolist()}))
        # per candidate offset (rows) and buffer (columns): do their byte ranges meet?
        meets = (lo[None, :] < cands[:, None] + size) & (cands[:, None] < hi[None, :])
        fits = (cands + size <= arena) & ~(meets & live[None, :]).any(axis=1)
        last = np.where(meets & past[None, :], end[None, :], -1).max(axis=1, initial=-1)
        if fits.any():
            # the first candidate whose range was last used longest ago (np.argmin: the first of equals)
            offsets[i] = int(cands[int(np.argmin(np.where(fits, last, np.iinfo(np.int64).max)))])
    return offsets


def _time_overlaps(buffers: list[BufferSlot]) -> list[list[int]]:
    """For each buffer, the others live at some same step (a sweep by start: linear in the pairs, not
    quadratic in the buffers, for the long chains where each buffer meets only its neighbours)."""
    by_start = sorted(range(len(buffers)), key=lambda i: buffers[i].start)
    out: list[list[int]] = [[] for _ in buffers]
    active: list[int] = []
    for i in by_start:
        b = buffers[i]
        active = [j for j in active if buffers[j].end >= b.start]
        for j in active:
            out[i].append(j)
            out[j].append(i)
        active.append(i)
    return out


def _first_fit(buffers: list[BufferSlot], order: list[int], overlaps: list[list[int]] | None = None) -> list[int]:
    """Lowest aligned offset for each buffer (in `order`) that overlaps no placed, time-overlapping one."""
    overlaps = _time_overlaps(buffers) if overlaps is None else overlaps
    offsets = [-1] * len(buffers)
    for i in order:
        b = buffers[i]
        busy = sorted((offsets[j], offsets[j] + _align(buffers[j].nbytes)) for j in overlaps[i] if offsets[j] >= 0)
        off = 0
        for lo, hi in busy:
            if off + _align(b.nbytes) <= lo:
                break
            off = max(off, hi)
        offsets[i] = off
    return offsets
