"""Static memory planning: host-bound slots, and one arena for every intermediate.

Requires: a fused graph (`groups` in execution order). Guarantees: every value a kernel touches has a
Location; graph inputs, parameters, aux states and outputs are host-bound slots (never in the arena); every
other group output gets a 64-byte aligned arena range that overlaps no other buffer live at the same step
(live = from the step that writes it to the last step that reads it, through views). Two placement
strategies are tried (greedy by size, greedy by definition order; both first-fit on offsets, as TFLite's
"offset calculation") and the smaller arena wins. With plan=False every buffer gets its own range (naive).
Sizes use each value's real dtype. Does not: in-place reuse yet (TODO(5)).
"""
from __future__ import annotations

from mxcc.graph.ir import Graph, Ref
from mxcc.plan import BufferSlot, Location, Plan, Slot

ALIGN = 64


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def host_slots(graph: Graph) -> tuple[Slot, ...]:
    """Inputs (in graph.inputs order), then params and aux states (node order), then outputs (heads)."""
    aux_ids: set[int] = set()
    label_ids: set[int] = set()
    for n in graph.nodes:
        if n.is_variable:
            continue
        names = n.opdef.inputs(n.params)
        for name, r in zip(names, n.inputs):
            if name in n.opdef.aux(n.params):
                aux_ids.add(r.node)
            if name in n.opdef.labels:
                label_ids.add(r.node)
    by_name = {n.name: n for n in graph.variables}
    slots: list[Slot] = []
    for name in graph.inputs:
        n = by_name[name]
        slots.append(Slot(len(slots), name, "input", n.out_types[0].shape, optional=n.id in label_ids))
    for n in graph.variables:
        if n.name not in graph.inputs:
            slots.append(Slot(len(slots), n.name, "aux" if n.id in aux_ids else "param", n.out_types[0].shape))
    for i, h in enumerate(graph.heads):
        slots.append(Slot(len(slots), graph.output_name(h), "output", graph.type_of(h).shape))
    return tuple(slots)


def _view_source(graph: Graph, r: Ref) -> Ref:
    """Follow view ops without a kernel (Flatten, Dropout) back to the value that owns the storage."""
    grouped = {i for g in graph.groups for i in g.members}
    while True:
        n = graph.nodes[r.node]
        if n.is_variable or n.id in grouped or not n.opdef.view:
            return r
        r = n.inputs[0]


def plan_memory(graph: Graph, enabled: bool = True) -> Plan:
    assert graph.groups is not None, "plan_memory requires the fuse pass"
    slots = host_slots(graph)
    slot_of = {s.name: s.index for s in slots if s.kind != "output"}
    locations: dict[tuple[int, int], Location] = {}
    for n in graph.variables:
        if n.name in slot_of:
            locations[(n.id, 0)] = Location(slot=slot_of[n.name])
    out_slot = {}
    for s, h in zip([s for s in slots if s.kind == "output"], graph.heads):
        out_slot.setdefault(h.key, s.index)
    # live ranges of group outputs, in kernel steps
    start: dict[tuple[int, int], int] = {}
    end: dict[tuple[int, int], int] = {}
    ws_bytes: dict[tuple[int, int], int] = {}
    for step, g in enumerate(graph.groups):
        for r in g.outputs:
            start[r.key] = end[r.key] = step
        for m in g.members:
            for r in graph.nodes[m].inputs:
                src = _view_source(graph, r).key
                if src in end:
                    end[src] = max(end[src], step)
    # scratch space a kernel asks for (im2col...): live during its own step only; key (anchor, -1)
    for step, g in enumerate(graph.groups):
        anchor = graph.nodes[g.anchor]
        if anchor.opdef.workspace is not None:
            nbytes = anchor.opdef.workspace(anchor.params, [graph.type_of(r) for r in anchor.inputs],
                                            anchor.out_types)
            if nbytes > 0:
                start[(anchor.id, -1)] = end[(anchor.id, -1)] = step
                ws_bytes[(anchor.id, -1)] = nbytes
    buffers = []
    for key in start:
        if key in out_slot:
            locations[key] = Location(slot=out_slot[key])
            continue
        if key in ws_bytes:
            buffers.append(BufferSlot(f"{graph.nodes[key[0]].name}_workspace", -1, ws_bytes[key], start[key], end[key]))
            continue
        t = graph.type_of(Ref(*key))
        buffers.append(BufferSlot(graph.output_name(Ref(*key)), -1, t.nbytes, start[key], end[key]))
    placed, strategy = _place(buffers, enabled)
    keys = [k for k in start if k not in out_slot]
    for key, b in zip(keys, placed):
        locations[key] = Location(offset=b.offset)
    # views resolve to their source's location
    for n in graph.nodes:
        if not n.is_variable and (n.id, 0) not in locations and n.opdef.view:
            src = _view_source(graph, Ref(n.id, 0))
            if src.key in locations:
                locations[(n.id, 0)] = locations[src.key]
    arena = max((b.offset + _align(b.nbytes) for b in placed), default=0)
    naive = sum(_align(b.nbytes) for b in buffers)
    steps = len(graph.groups)
    lower = max((sum(_align(b.nbytes) for b in buffers if b.start <= s <= b.end) for s in range(steps)), default=0)
    return Plan(graph=graph, slots=slots, buffers=tuple(placed), locations=locations, arena_bytes=arena,
                naive_bytes=naive, lower_bound_bytes=lower, strategy=strategy)


def _place(buffers: list[BufferSlot], enabled: bool) -> tuple[list[BufferSlot], str]:
    from dataclasses import replace
    if not enabled:
        out, off = [], 0
        for b in buffers:
            out.append(replace(b, offset=off))
            off += _align(b.nbytes)
        return out, "naive"
    best = None
    for strategy, order in (("greedy_by_size", lambda i: (-buffers[i].nbytes, buffers[i].start, i)),
                            ("greedy_by_start", lambda i: (buffers[i].start, -buffers[i].nbytes, i))):
        offsets = _first_fit(buffers, sorted(range(len(buffers)), key=order))
        arena = max((o + _align(b.nbytes) for o, b in zip(offsets, buffers)), default=0)
        if best is None or arena < best[0]:
            best = (arena, offsets, strategy)
    return [replace(b, offset=o) for b, o in zip(buffers, best[1])], best[2]


def _first_fit(buffers: list[BufferSlot], order: list[int]) -> list[int]:
    """Lowest aligned offset for each buffer (in `order`) that overlaps no placed, time-overlapping one."""
    offsets = [-1] * len(buffers)
    placed: list[int] = []
    for i in order:
        b = buffers[i]
        busy = sorted((offsets[j], offsets[j] + _align(buffers[j].nbytes)) for j in placed
                      if buffers[j].start <= b.end and b.start <= buffers[j].end)
        off = 0
        for lo, hi in busy:
            if off + _align(b.nbytes) <= lo:
                break
            off = max(off, hi)
        offsets[i] = off
        placed.append(i)
    return offsets
