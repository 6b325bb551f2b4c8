"""What the profiler writes, from raw kernel events: Chrome trace JSON events and MXNet's aggregate table.

Input: the runtime's event records (kernel, phase, t0_ns, t1_ns; CLOCK_MONOTONIC) of one compiled network
and that network's module metadata (kernel table, arena buffers with live ranges). Output: JSON text per
trace event (see mxcc.profiler for the file's shape), per-kernel duration statistics, and MXNet 1.9's
`dumps()` text/JSON. Pure functions plus `NetTables` (static per network) and `PassState` (what the
serializer must remember between drains); mxcc.profiler owns all state, threads and files.
"""
from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import numpy as np

from mxcc.passes.plan_memory import ALIGN

PHASES = ("forward", "backward", "update")          # = MXCC_PHASE_*; the trace's tid is the index + 1
# NOTE: pid 0 and tid 0 are the kernel's swapper to Perfetto (google/perfetto#394, #560): ids start at 1.
MEMORY_CATEGORIES = ("Device Storage", "Pool Memory")  # MXNet prints these in kB without a Time column
_J = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def layer_name(kernel: dict) -> str:
    """A fused kernel is named after all of its member nodes (`conv1+bn1+relu1`), a single node after itself."""
    members = kernel.get("members") or []
    return "+".join(members) if len(members) > 1 else kernel["name"]


def op_type(kernel: dict) -> str:
    return "+".join(kernel.get("ops") or []) or kernel["name"]


def _arena_buffers(meta: dict) -> list[dict]:
    """The planner's arena buffers; for module.json files older than meta["buffers"], each arena output
    on its own (no in-place sharing, no workspaces: an over-estimate)."""
    if meta.get("buffers") is not None:
        return meta["buffers"]
    out = []
    for k in meta.get("kernels", []):
        for j, (shape, live) in enumerate(zip(k.get("outputs", []), k.get("live", []))):
            if live:
                out.append(dict(name=f"{k['name']}_output{j}", nbytes=4 * math.prod(shape), live=live))
    return out


class NetTables:
    """Static facts about one compiled network, per kernel index: names, FLOPs, the arena's live set.

    Arena accounting follows the planner: a buffer occupies its 64-byte aligned size from the step that
    writes it to the last step that reads it. `during[s]` is the arena in use while kernel s runs (its
    maximum over s is plan.json's lower_bound_bytes), `after[s]` what stays live once kernel s is done."""

    def __init__(self, meta: dict):
        kernels = meta.get("kernels", [])
        self.net = meta["name"]
        self.kernels = kernels
        self.layers = [layer_name(k) for k in kernels]
        self.types = [op_type(k) for k in kernels]
        # what a pass is made of: the kernel's own phase (an Executor's inference forward records as
        # MXCC_PHASE_FORWARD but is a pass of its own, "infer")
        self.pass_names = [k.get("phase") or "forward" for k in kernels]
        names = sorted(set(self.pass_names))
        self.pass_group = np.array([names.index(n) for n in self.pass_names] or [0])
        self.flops = np.array([float(k.get("flops") or 0) for k in kernels] or [0.0])
        # a dynamic batch: FLOPs a*N + b at the call's batch N (kernels whose work does not depend on it: a = 0)
        self.flops_n = np.array([k.get("flops_batch") or [0.0, float(k.get("flops") or 0)] for k in kernels]
                                or [[0.0, 0.0]], dtype=np.float64)
        self.dynamic = any("flops_batch" in k for k in kernels)
        self.bytes = np.array([float(k.get("bytes") or 0) for k in kernels] or [0.0])
        bufs = _arena_buffers(meta)
        steps = max(len(kernels), 1)
        self.tensors = [b["name"] for b in bufs]
        self.during = np.zeros((steps, len(bufs)), np.int64)
        self.after = np.zeros((steps, len(bufs)), np.int64)
        for j, b in enumerate(bufs):
            first, last = b["live"]
            size = (b["nbytes"] + ALIGN - 1) // ALIGN * ALIGN
            self.during[first:last + 1, j] = size
            self.after[first:last, j] = size
        self.during_total = self.during.sum(axis=1)
        self.after_total = self.after.sum(axis=1)
        self._prefix: dict[tuple[int, int, int], str] = {}

    def x_format(self, pid: int, kernel: int, phase: int, batch: int = 0, flops: float = 0.0) -> str:
        """The %-format of kernel's X event (ts, dur, GFLOP/s, GB/s left open): built once, reused. `batch`
        (a dynamic batch's call, > 0): args `batch` and the FLOPs at it."""
        key = (pid, kernel, phase, batch)
        fmt = self._prefix.get(key)
        if fmt is None:
            k = self.kernels[kernel]
            live = [t for t, b in zip(self.tensors, self.during[kernel]) if b]
            args = dict(phase=PHASES[phase], kernel=kernel, function=k.get("function"),
                        members=k.get("members", []), inputs=k.get("inputs", []),
                        outputs=k.get("outputs", []), flops=k.get("flops", 0), bytes=k.get("bytes", 0),
                        arena_live_bytes=int(self.during_total[kernel]), arena_live=live)
            if batch:
                args.update(batch=batch, flops=int(flops))
            fmt = (f'{{"name":{_J(self.layers[kernel])},"cat":{_J(self.types[kernel])},"ph":"X",'
                   f'"pid":{pid},"tid":{phase + 1},"ts":\x00,"dur":\x00,"args":{_J(args)[:-1]},'
                   f'"GFLOP/s":\x00,"GB/s":\x00}}}}').replace("%", "%%").replace("\x00", "%.3f")
            self._prefix[key] = fmt
        return fmt


class PassState:
    """What serializing one module's events must carry from one drained chunk to the next."""

    def __init__(self):
        self.passes = [0] * len(PHASES)          # passes seen per phase (numbers the pass slices)
        self.snapshot_done = [False] * len(PHASES)   # per-tensor memory series written for the first pass


def trace_events(ev: np.ndarray, net: NetTables, pid: int, origin_ns: int, state: PassState,
                 memory: bool) -> tuple[list[str], int]:
    """JSON text of the trace events for events that end at a pass boundary (a drain, or a cut made by
    pass_starts), and the number of kernel events among them. Per module: one X event per kernel call on
    the thread of its phase, preceded by an X "pass" slice around each forward/backward/update; with
    `memory`, the "arena in use" counter at each kernel's start and at the end of each pass (what stays
    live), and during the first pass of each phase one counter series per arena tensor at those moments."""
    ev = ev[(ev["t0_ns"] >= origin_ns) & (ev["t1_ns"] >= ev["t0_ns"])
            & (ev["kernel"] >= 0) & (ev["kernel"] < len(net.kernels))
            & (ev["phase"] >= 0) & (ev["phase"] < len(PHASES))]
    k_arr = ev["kernel"].astype(np.int64)
    dur_ns = (ev["t1_ns"] - ev["t0_ns"]).astype(np.int64)
    start_ns = (ev["t0_ns"] - np.uint64(origin_ns)).astype(np.int64)
    per_ns = 1.0 / np.maximum(dur_ns, 1)
    new_pass = np.zeros(len(k_arr), bool)
    new_pass[pass_starts(ev, net.pass_group)] = True
    batch = ev["batch"].astype(np.int64) if net.dynamic and "batch" in ev.dtype.names else np.zeros(len(k_arr), np.int64)
    flops = np.where(batch > 0, net.flops_n[k_arr, 0] * batch + net.flops_n[k_arr, 1], net.flops[k_arr])
    rows = zip(k_arr.tolist(), ev["phase"].tolist(), (start_ns / 1e3).tolist(), (dur_ns / 1e3).tolist(),
               (flops * per_ns).tolist(), (net.bytes[k_arr] * per_ns).tolist(), new_pass.tolist(), batch.tolist(),
               flops.tolist())
    x_out: list[str] = []
    c_out: list[str] = []
    pending: list[str] = []          # the current pass's kernel events, written after its slice
    cur = None                       # [phase, last kernel, ts of first, end of last, count, snapshot, batch]
    name_net = _J(net.net)
    arena_fmt = f'{{"name":"arena in use","cat":"memory","ph":"C","pid":{pid},"tid":1,"ts":%.3f,"args":{{"bytes":%d}}}}'

    def tensors(ts: float, values) -> None:
        args = ",".join(f"{_J(t)}:{int(v)}" for t, v in zip(net.tensors, values))
        c_out.append(f'{{"name":"arena tensors","cat":"memory","ph":"C","pid":{pid},"tid":1,'
                     f'"ts":{ts:.3f},"args":{{{args}}}}}')

    def close():
        if cur is None:
            return
        ph, k, a, b, n, snap, nb = cur
        state.passes[ph] += 1
        name = net.pass_names[k]
        if memory:
            c_out.append(arena_fmt % (b, net.after_total[k]))
            if snap:
                tensors(b, net.after[k])
        x_out.append(f'{{"name":{_J(name)},"cat":"pass","ph":"X","pid":{pid},"tid":{ph + 1},'
                     f'"ts":{a:.3f},"dur":{b - a:.3f},'
                     f'"args":{{"net":{name_net},"pass":{state.passes[ph]},"kernels":{n}'
                     + (f',"batch":{nb}' if nb else "") + '}}')
        x_out.extend(pending)
        pending.clear()

    for k, ph, ts, dur, gflops, gbytes, first, nb, fl in rows:
        if first:
            close()
            snap = memory and bool(net.tensors) and not state.snapshot_done[ph]
            state.snapshot_done[ph] = state.snapshot_done[ph] or snap
            cur = [ph, k, ts, ts + dur, 0, snap, nb]
        cur[1], cur[3], cur[4] = k, ts + dur, cur[4] + 1
        pending.append(net.x_format(pid, k, ph, nb, fl) % (ts, dur, gflops, gbytes))
        if memory:
            c_out.append(arena_fmt % (ts, net.during_total[k]))
            if cur[5]:
                tensors(ts, net.during[k])
    close()
    return x_out + c_out, len(k_arr)


def pass_starts(ev: np.ndarray, pass_group: np.ndarray) -> np.ndarray:
    """Indices of the events (valid kernel indices) that begin a pass, i.e. a C call's run of kernels of
    one phase: the phase or the kernel's pass group changes, or the kernel index does not grow."""
    if not len(ev):
        return np.zeros(0, np.int64)
    k, ph = ev["kernel"].astype(np.int64), ev["phase"]
    g = pass_group[k]
    return np.flatnonzero(np.r_[True, (k[1:] <= k[:-1]) | (ph[1:] != ph[:-1]) | (g[1:] != g[:-1])])


def kernel_stats(ev: np.ndarray, n_kernels: int) -> tuple[np.ndarray, ...]:
    """Per kernel index: (count, total ns, min ns, max ns) of the chunk's events."""
    k = ev["kernel"].astype(np.int64)
    ok = (k >= 0) & (k < n_kernels) & (ev["t1_ns"] >= ev["t0_ns"])
    k = k[ok]
    d = (ev["t1_ns"][ok] - ev["t0_ns"][ok]).astype(np.float64)
    count = np.bincount(k, minlength=n_kernels)
    total = np.bincount(k, weights=d, minlength=n_kernels)
    lo = np.full(n_kernels, np.inf)
    hi = np.zeros(n_kernels)
    np.minimum.at(lo, k, d)
    np.maximum.at(hi, k, d)
    return count, total, lo, hi


class Stat:
    """One row of MXNet's aggregate table: a duration (ns) or a memory counter (bytes)."""
    __slots__ = ("count", "total", "min", "max", "last")

    def __init__(self):
        self.count, self.total, self.min, self.max, self.last = 0, 0.0, math.inf, 0.0, 0.0

    def add(self, count: int, total: float, lo: float, hi: float, last: float = 0.0) -> None:
        self.count += count
        self.total += total
        self.min, self.max, self.last = min(self.min, lo), max(self.max, hi), last


def _row(cat: str, name: str, s: Stat) -> dict:
    """The numbers MXNet prints: ms for durations; kB (1000 bytes) for memory, where Avg is the mean of
    the counter's samples (MXNet prints (max - min) / 2 there) and Total, used to sort, is the last value."""
    if cat in MEMORY_CATEGORIES:
        return dict(name=name, count=s.count, total=s.last / 1e3, min=s.min / 1e3, max=s.max / 1e3,
                    avg=s.total / s.count / 1e3 if s.count else 0.0)
    return dict(name=name, count=s.count, total=s.total / 1e6, min=s.min / 1e6, max=s.max / 1e6,
                avg=s.total / s.count / 1e6 if s.count else 0.0)


def _sorted_rows(cat: str, stats: dict[str, Stat], sort_by: str, ascending: bool) -> list[dict]:
    # MXNet pops a max-heap of (value, name): descending by value, equal values by name descending;
    # ascending negates the value only.
    rows = [_row(cat, n, s) for n, s in stats.items() if s.count]
    sign = -1.0 if ascending else 1.0
    return sorted(rows, key=lambda r: (sign * r[sort_by], r["name"]), reverse=True)


def format_table(cats: dict[str, dict[str, Stat]], sort_by: str, ascending: bool) -> str:
    """MXNet 1.9's `AggregateStats::DumpTable`, column for column (src/profiler/aggregate_stats.cc)."""
    lines = ["", "Profile Statistics:", "\tNote the difference in units for different entries."]
    for cat in sorted(cats):
        rows = _sorted_rows(cat, cats[cat], sort_by, ascending)
        if not rows:
            continue
        memory = cat in MEMORY_CATEGORIES
        lines += [cat, "=" * 17]
        if memory:
            lines.append(f"{'Name':<25}{'Total Count':>16} {'Min Use  (kB)':>16} {'Max Use  (kB)':>16} "
                         f"{'Avg Use  (kB)':>16}")
            lines.append(f"{'----':<25}{'-----------':>16} {'-------------':>16} {'-------------':>16} "
                         f"{'-------------':>16}")
        else:
            lines.append(f"{'Name':<25}{'Total Count':>16} {'Time (ms)':>16} {'Min Time (ms)':>16} "
                         f"{'Max Time (ms)':>16} {'Avg Time (ms)':>16}")
            lines.append(f"{'----':<25}{'-----------':>16} {'---------':>16} {'-------------':>16} "
                         f"{'-------------':>16} {'-------------':>16}")
        for r in rows:
            total = "" if memory else f"{r['total']:>16.4f} "
            lines.append(f"{r['name']:<25}{r['count']:>16} {total}{r['min']:>16.4f} {r['max']:>16.4f} "
                         f"{r['avg']:>16.4f}")
        lines.append("")
    return "\n".join(lines) + "\n"


def format_json(cats: dict[str, dict[str, Stat]], sort_by: str, ascending: bool) -> str:
    """MXNet's `DumpJson` layout ({"Time": ..., "Memory": ..., "Unit": ...}), as valid JSON."""
    out: dict = {"Time": {}, "Memory": {}, "Unit": {"Time": "ms", "Memory": "kB"}}
    for cat in sorted(cats):
        rows = _sorted_rows(cat, cats[cat], sort_by, ascending)
        if not rows:
            continue
        memory = cat in MEMORY_CATEGORIES
        keys = ("count", "min", "max", "avg") if memory else ("count", "total", "min", "max", "avg")
        out["Memory" if memory else "Time"][cat] = {
            r["name"]: {k.capitalize(): (r[k] if k == "count" else round(r[k], 6)) for k in keys} for r in rows}
    return json.dumps(out, indent=4)


def named_stats(stats: dict[str, dict]) -> dict[str, dict[str, Stat]]:
    """Row names for the table: the layer, qualified `net:layer` once several networks were profiled;
    arenas `Memory: <net> arena`, with `#pid` when one network was profiled in several modules."""
    out = {}
    for cat, rows in stats.items():
        if cat == "operator":
            multi = len({net for net, _ in rows}) > 1
            out[cat] = {(f"{net}:{layer}" if multi else layer): s for (net, layer), s in rows.items()}
        elif cat == "Device Storage":
            nets = [net for net, _ in rows]
            out[cat] = {f"Memory: {net if nets.count(net) == 1 else f'{net}#{pid}'} arena": s
                        for (net, pid), s in rows.items()}
        else:
            out[cat] = dict(rows)
    return out


def metadata_events(scope_threads: list[tuple[int, str]], modules: list[tuple[int, str, list]]) -> list[str]:
    """M events: process 1 "mxcc" with one thread per Python thread that opened a scope; one process per
    module (pid, title) with a thread per phase it ran (phases: name or None per PHASES index)."""
    out = []

    def meta(name, pid, args, tid=None):
        out.append(_J({"name": name, "ph": "M", "pid": pid, **({} if tid is None else {"tid": tid}), "args": args}))

    if scope_threads:
        meta("process_name", 1, {"name": "mxcc"})
        meta("process_sort_index", 1, {"sort_index": 1})
        for tid, name in scope_threads:
            meta("thread_name", 1, {"name": name}, tid)
    for pid, title, phases in modules:
        meta("process_name", pid, {"name": title})
        meta("process_sort_index", pid, {"sort_index": pid})
        for tid, phase in enumerate(phases, start=1):
            if phase:                           # no track for a phase the module never ran
                meta("thread_name", pid, {"name": phase}, tid)
                meta("thread_sort_index", pid, {"sort_index": tid}, tid)
    return out


def write_trace(path: Path, parts: list[str], other_data: dict) -> None:
    """Write {"traceEvents": [parts...], "displayTimeUnit", "otherData"} to a new file beside `path` and
    rename it over `path`: readers, and a process killed at any moment, only ever see a whole document."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write('{"traceEvents":[\n')
            for i, part in enumerate(p for p in parts if p):
                if i:
                    f.write(",\n")
                f.write(part)
            f.write('\n],\n"displayTimeUnit":"ns",\n"otherData":')
            f.write(json.dumps(other_data))
            f.write("}\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
