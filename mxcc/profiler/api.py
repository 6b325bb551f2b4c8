"""MXNet's profiler API (`mxnet.profiler`) on compiled networks: per-layer events, always-valid traces.

Every Module registers itself here when created (a weak reference: modules can be freed). While the
profiler runs, each module's C context records one (kernel, phase, t0, t1) event per fused-kernel call
(runtime_c/prof.h); events are drained into this process at dump()/dumps(), by a collector thread (every
min(dump_period, 0.25) s; with continuous_dump it also rewrites the file every dump_period s), and when
a profiled module is freed. `dump()` writes a Chrome trace; `dumps()`
prints MXNet 1.9's aggregate table. Differences from MXNet, on purpose: events are named after the
layer (the fused group `conv1+relu1`, not the op type), the trace file is complete JSON after every
dump (a new file written beside it, then os.replace), a dump after dump(finished=True) works, and
`dumps()` works without aggregate_stats (the statistics cost nothing while the network runs).

Trace file (JSON object format; the C executables' --trace should write the same shape):
  {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {"producer", "format": "mxcc-trace-1",
   "clock": "CLOCK_MONOTONIC", "origin_ns", "finished", "dropped_events", "dropped_by_module",
   "events_not_written", "modules": [{"pid", "name", "inputs", "arena_bytes", "lower_bound_bytes",
   "kernels", "profile_compiled"}], "config"}}
  ts/dur: microseconds (floats, ns precision) since origin_ns, the moment profiling started.
  pid 1 "mxcc": one thread (tid 1, 2, ...) per Python thread holding `scope(name)` slices (X, cat "scope").
  pid N >= 2, one per profiled Module, process_name "<net> (<input shapes>)":
    tid 1/2/3 = forward/backward/update (thread_name M events). X events: a "pass" slice (cat "pass",
    name = the kernels' phase: forward, backward, update, or infer for an Executor's inference forward;
    args net/pass/kernels) around the kernel events of each C call's phase, then one X per
    kernel call: name = layer, cat = op types joined by "+", args = phase, kernel, function, members,
    inputs, outputs (shapes), flops, bytes, arena_live_bytes, arena_live (tensor names), GFLOP/s, GB/s.
    With profile_memory, C counters (tid 1): "arena in use" {"bytes"} at each kernel's start (the arena
    bytes live during it) and at the end of each pass (what stays live), and during the first pass of
    each phase "arena tensors" {<tensor>: bytes, ...} with one series per arena buffer (the plan is
    static, so every pass repeats it). Sizes are 64-byte aligned as the planner counts them: the peak
    of "arena in use" equals plan.json's lower_bound_bytes, which is <= arena_bytes.
  NOTE: ts is in µs whatever displayTimeUnit says ("ns" only makes chrome://tracing print ns; Perfetto
  follows the spec since 2022, google/perfetto#274).

Threads: a module's event buffer (that of its first context) is drained only under the module's
`_prof_lock`, its `_primary_lock`, which every call on that context holds; while profiling is on, Module.forward
runs its calls on that context only, one at a time (`_prof_lock` is None otherwise: one attribute test per
call), and Executor's entry points always run there. The simplest correct design: the C buffer stays a plain
array (no atomics), a drain never overlaps a forward, and only a collector drain can delay a forward (by a
memcpy).
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
import warnings
import weakref
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from mxcc._version import __version__
from mxcc.errors import MxccError
from mxcc.profiler.report import (PHASES, NetTables, PassState, Stat, format_json, format_table,
                                  kernel_stats, metadata_events, named_stats, pass_starts, trace_events,
                                  write_trace)

__all__ = ["set_config", "set_state", "pause", "resume", "dump", "dumps", "scope", "profiler_set_config",
           "profiler_set_state", "dump_profile"]

log = logging.getLogger("mxcc.profiler")
SORT_KEYS = ("total", "avg", "min", "max", "count")
_SLICE = 512            # events serialized between two GIL hand-backs of the collector (about a millisecond)
DRAIN_EVERY = 0.25      # s: a module's default buffer then holds 1M kernel calls per second


@dataclass(frozen=True)
class Config:
    """`set_config` keys with MXNet 1.9's defaults (`ProfileConfigParam`), plus two of mxcc's own."""
    profile_all: bool = False
    profile_symbolic: bool = True       # compiled modules count as both symbolic and imperative work:
    profile_imperative: bool = True     # kernels are recorded if either (or profile_all) is on
    profile_memory: bool = True         # the arena counters and the "Device Storage" rows
    profile_api: bool = True            # accepted; mxcc has no C API calls of its own to trace
    filename: str = "profile.json"
    continuous_dump: bool = True
    dump_period: float = 1.0
    aggregate_stats: bool = False       # accepted; dumps() always works (see the module docstring)
    profile_process: str = "worker"
    gpu_memory_profile_filename_prefix: str = "gpu_memory_profile"   # accepted (MXNet 2.0), unused
    event_capacity: int = 1 << 18       # mxcc: events each module's C buffer holds between drains
    max_trace_events: int = 1_000_000   # mxcc: kernel events kept for the trace file (dumps() counts all)

    @property
    def operators(self) -> bool:
        return self.profile_all or self.profile_symbolic or self.profile_imperative

    @property
    def memory(self) -> bool:
        return self.profile_all or self.profile_memory


def _as_bool(key: str, v) -> bool:
    if isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and v in (0, 1)):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("true", "false", "1", "0"):
        return v.strip().lower() in ("true", "1")
    raise TypeError(f"set_config: {key} must be True or False, got {v!r}")


def _config(**kwargs) -> Config:
    known = {f.name: f for f in fields(Config)}
    unknown = sorted(set(kwargs) - set(known))
    if unknown:
        raise TypeError(f"set_config: unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")
    cfg = {}
    for key, v in kwargs.items():
        if known[key].type == "bool":
            cfg[key] = _as_bool(key, v)
        elif key in ("dump_period",):
            if not isinstance(v, (int, float, str)) or float(v) <= 0:
                raise TypeError(f"set_config: dump_period must be a positive number of seconds, got {v!r}")
            cfg[key] = float(v)
        elif key in ("event_capacity", "max_trace_events"):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 < v < 2 ** 32:
                raise TypeError(f"set_config: {key} must be a positive integer below 2**32, got {v!r}")
            cfg[key] = int(v)
        else:
            cfg[key] = os.fspath(v) if key == "filename" else str(v)
    if cfg.get("profile_process", "worker") != "worker":
        raise MxccError(f"set_config: profile_process={cfg['profile_process']!r} is not supported "
                        f"(mxcc has no kvstore server); use 'worker'")
    return Config(**cfg)


class _Source:
    """One profiled module: its static tables, its lock, and the events drained but not yet consumed."""

    def __init__(self, mod):
        self.ref = weakref.ref(mod)
        self.pid: int | None = None              # given with its first events (Profiler._pids)
        self.meta = mod.meta
        self.net = NetTables(mod.meta)
        self.title = f"{mod.name} ({', '.join(f'{n}={s}' for n, s in mod.input_shapes.items())})"
        self.lock = mod._primary_lock            # held by every call on the context this reads
        self.scratch = np.empty(0, type(mod).PROF_DTYPE)
        self.to_trace: list[np.ndarray] = []     # drained, not yet serialized
        self.to_stats: list[np.ndarray] = []     # drained, not yet in the aggregate table
        self.state = PassState()
        self.dropped_base = mod._prof_dropped()
        self.dropped = 0
        self.warned = False
        self.has_events = False
        self.capacity = 0                        # of the module's C buffer

    def drain(self, ffi, lib, ctx, capacity: int) -> int:
        """Move the C buffer's events here; the caller holds self.lock or the module is gone."""
        if len(self.scratch) < capacity:
            self.scratch = np.empty(capacity, self.scratch.dtype)
        n = lib.mxcc_prof_drain(ctx, ffi.from_buffer("mxcc_prof_event[]", self.scratch), len(self.scratch))
        if n:
            chunk = self.scratch[:n].copy()
            self.to_trace.append(chunk)
            self.to_stats.append(chunk)
            self.has_events = True
        self.dropped = int(lib.mxcc_prof_dropped(ctx)) - self.dropped_base
        return n


class Profiler:
    """The process's profiler state (MXNet's API is process-global, so there is exactly one)."""

    def __init__(self, autostart: bool = False):
        self._lock = threading.RLock()
        self._modules: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # Module -> _Source|None
        self._tls = threading.local()
        self._freed: list[tuple] = []              # (source, ffi, lib, ctx) of freed modules to drain
        self._new_session(Config(continuous_dump=False))    # MXNet's constructor: no continuous dump
        self._autostart = autostart
        if autostart:
            self.set_state("run")

    # -- session ---------------------------------------------------------------------------------------
    def _new_session(self, config: Config) -> None:
        self.config = config
        self.path = Path(config.filename).absolute()
        self.running = self.paused = self.finished = False
        self.origin_ns: int | None = None
        self.sources: list[_Source] = []          # every module profiled this session, alive or not
        for mod in list(self._modules.keys()):   # live modules start the new session without a source
            self._modules[mod] = None
        self.body: list[str] = []                 # serialized events, in drain order
        self.next_pid = 2                         # pid 1 holds the scopes
        self.trace_kernel_events = self.not_written = 0
        self.scopes: list[tuple] = []             # (tid, t0, -duration, JSON): each thread's slices in order
        self.scope_tids: dict[int, tuple[int, str]] = {}
        self.stats: dict[str, dict] = {}          # category -> key -> Stat
        self.unwritten = False
        self._collector_stop: threading.Event | None = None

    def set_config(self, **kwargs) -> None:
        with self._lock:
            if self.running:
                raise MxccError("profiler.set_config: the profiler is running; call set_state('stop') first")
            config = _config(**kwargs)
            self._drain_all()                 # events of the old session go nowhere, not into the new one
            self._new_session(config)
            try:
                self.path.unlink()            # as MXNet does: no stale trace can pass for this run's
            except FileNotFoundError:
                pass

    def set_state(self, state: str = "stop") -> None:
        if state not in ("run", "stop"):
            raise ValueError(f"profiler.set_state: state must be 'run' or 'stop', got {state!r}")
        with self._lock:
            if state == "run":
                if self.origin_ns is None:
                    self.origin_ns = time.monotonic_ns()     # the same clock as the C events
                self.running, self.paused, self.finished = True, False, False
                self._start_collector()
            elif self.running:
                self.running = False
                self._stop_collector()
            self._apply_all()
            if state == "stop":
                self._drain_all()
                if self.config.continuous_dump and self.origin_ns is not None and not self.finished:
                    self._write(finished=False)

    def set_paused(self, paused: bool) -> None:
        with self._lock:
            self.paused = paused
            self._apply_all()

    # -- modules ---------------------------------------------------------------------------------------
    def register(self, mod) -> None:
        with self._lock:
            self._modules[mod] = None
            if self.running:
                self._apply(mod)

    def _source(self, mod) -> _Source | None:
        src = self._modules.get(mod)
        if src is None and mod.meta.get("profile", True) and mod.kernels:
            src = _Source(mod)
            self.sources.append(src)
            self._modules[mod] = src
            weakref.finalize(mod, self._finalized, src, mod._ffi, mod._lib, mod._ctx).atexit = False
        return src

    def _apply(self, mod) -> None:
        """Make mod record exactly when the profiler runs, unpaused, with operator profiling on."""
        want = self.running and not self.paused and self.config.operators
        if not mod.meta.get("profile", True):
            if want and not getattr(mod, "_prof_warned", False):
                mod._prof_warned = True
                warnings.warn(f"mxcc.profiler: module {mod.name!r} was compiled with profile=False; "
                              f"its kernels are not recorded", RuntimeWarning, stacklevel=4)
            return
        src = self._modules.get(mod) if not want else self._source(mod)
        if src is None:
            return
        if want:
            mod._prof_lock = src.lock
        with src.lock:
            if want and 0 < mod._prof_capacity < self.config.event_capacity:
                src.drain(mod._ffi, mod._lib, mod._ctx, mod._prof_capacity)   # resizing drops the buffer
            mod._prof_enable(want, self.config.event_capacity)
            src.capacity = mod._prof_capacity
            if not want:
                if src.capacity:
                    src.drain(mod._ffi, mod._lib, mod._ctx, src.capacity)
                mod._prof_lock = None

    def _apply_all(self) -> None:
        for mod in list(self._modules.keys()):
            self._apply(mod)

    def _finalized(self, src: _Source, ffi, lib, ctx) -> None:
        """A profiled module was freed: keep the events its context (kept alive until then) still holds.
        NOTE: a finalizer runs wherever the garbage collector does; never block it on self._lock, whose
        holder may be waiting for a module lock held by this very thread. Leave it to _drain_all then."""
        self._freed.append((src, ffi, lib, ctx))
        if self._lock.acquire(blocking=False):
            try:
                self._drain_freed()
            finally:
                self._lock.release()

    def _drain_freed(self) -> None:
        while self._freed:
            src, ffi, lib, ctx = self._freed.pop()
            if src in self.sources and src.capacity:
                src.drain(ffi, lib, ctx, src.capacity)
                if not src.has_events:
                    self.sources.remove(src)

    def _drain_all(self) -> None:
        self._drain_freed()
        for src in self.sources:
            mod = src.ref()
            if mod is not None and src.capacity:
                with src.lock:
                    src.drain(mod._ffi, mod._lib, mod._ctx, src.capacity)
            if src.to_trace:
                self.unwritten = True
            if src.dropped and not src.warned:
                src.warned = True
                warnings.warn(f"mxcc.profiler: {src.dropped} events of {src.title} were dropped: its event "
                              f"buffer ({src.capacity} events) filled between drains; raise "
                              f"set_config(event_capacity=...) or lower dump_period", RuntimeWarning)

    # -- collector thread ------------------------------------------------------------------------------
    def _start_collector(self) -> None:
        if self._collector_stop is not None:
            return
        stop = self._collector_stop = threading.Event()
        threading.Thread(target=self._collect, args=(stop, self.config.dump_period), daemon=True,
                         name="mxcc-profiler").start()

    def _stop_collector(self) -> None:
        # NOTE: no join: the collector may be waiting for self._lock, which our caller holds. It checks
        # its event after taking the lock and exits without touching anything.
        if self._collector_stop is not None:
            self._collector_stop.set()
            self._collector_stop = None

    def _collect(self, stop: threading.Event, period: float) -> None:
        """Drain the C buffers every min(period, DRAIN_EVERY) s so that they rarely fill; with
        continuous_dump, rewrite the trace file every `period` s."""
        last_write = time.monotonic()
        while not stop.wait(min(period, DRAIN_EVERY)):
            with self._lock:
                if stop.is_set():
                    return
                try:
                    self._drain_all()
                    if self.config.continuous_dump and not self.finished \
                            and time.monotonic() - last_write >= period * 0.999:
                        last_write = time.monotonic()
                        self._write(finished=False, background=True)
                except Exception as e:     # a full disk must not kill the collector (or the program)
                    log.warning("mxcc.profiler: continuous dump failed: %s", e)

    # -- consuming events ------------------------------------------------------------------------------
    def _pids(self) -> None:
        """Number the modules that recorded something, in the order they were registered: 2, 3, ..."""
        for src in self.sources:
            if src.has_events and src.pid is None:
                src.pid, self.next_pid = self.next_pid, self.next_pid + 1

    def _serialize(self, background: bool = False) -> None:
        self._pids()
        for src in self.sources:
            chunks, src.to_trace = src.to_trace, []
            for chunk in chunks:
                room = self.config.max_trace_events - self.trace_kernel_events
                if room <= 0:
                    self.not_written += len(chunk)
                    continue
                if len(chunk) > room:
                    self.not_written += len(chunk) - room
                    chunk = chunk[:room]
                # slices end where a pass begins (a pass slice needs all of its kernels); between slices
                # the collector hands the GIL back, so forwards in other threads wait for one slice at most
                chunk = chunk[(chunk["kernel"] >= 0) & (chunk["kernel"] < len(src.net.kernels))]
                starts = pass_starts(chunk, src.net.pass_group)
                cuts = np.unique(starts[np.searchsorted(starts, np.arange(_SLICE, len(chunk), _SLICE))
                                        .clip(max=len(starts) - 1)]) if len(starts) else []
                for part in np.split(chunk, cuts):
                    text, n = trace_events(part, src.net, src.pid, self.origin_ns or 0, src.state,
                                           self.config.memory)
                    if text:
                        self.body.append(",\n".join(text))
                    self.trace_kernel_events += n
                    if background:
                        time.sleep(0)

    def _aggregate(self) -> None:
        """Fold the drained events into self.stats: category -> key -> Stat, keyed (net, layer) for
        layers and (net, pid) for arenas so that names are chosen when printing (named_stats)."""
        self._pids()
        for src in self.sources:
            chunks, src.to_stats = src.to_stats, []
            if not chunks:
                continue
            ev = np.concatenate(chunks)
            net = src.net
            count, total, lo, hi = kernel_stats(ev, len(net.kernels))
            for k in np.nonzero(count)[0]:
                for cat, name in (("operator", (net.net, net.layers[k])), ("operator (by type)", net.types[k])):
                    self.stats.setdefault(cat, {}).setdefault(name, Stat()).add(
                        int(count[k]), total[k], lo[k], hi[k])
            if self.config.memory and len(net.tensors):
                # the trace's "arena in use" samples: each kernel's start, and each pass's end
                ev = ev[(ev["kernel"] >= 0) & (ev["kernel"] < len(net.kernels))]
                k = ev["kernel"]
                ends = np.r_[pass_starts(ev, net.pass_group)[1:] - 1, len(k) - 1] if len(k) else np.zeros(0, int)
                samples = np.concatenate([net.during_total[k], net.after_total[k[ends]]])
                if len(samples):
                    self.stats.setdefault("Device Storage", {}).setdefault((net.net, src.pid), Stat()).add(
                        len(samples), float(samples.sum()), float(samples.min()), float(samples.max()),
                        float(net.after_total[k[-1]]))

    # -- output ----------------------------------------------------------------------------------------
    def dump(self, finished: bool = True) -> None:
        with self._lock:
            self._drain_all()
            self._write(finished=finished)
            if finished:
                self.finished = True      # no more continuous dumps until set_state('run')

    def dumps(self, reset: bool = False, format: str = "table", sort_by: str = "total",
              ascending: bool = False) -> str:
        if format not in ("table", "json"):
            raise ValueError(f"profiler.dumps: format must be 'table' or 'json', got {format!r}")
        if sort_by not in SORT_KEYS:
            raise ValueError(f"profiler.dumps: sort_by must be one of {SORT_KEYS}, got {sort_by!r}")
        with self._lock:
            self._drain_all()
            self._aggregate()
            text = (format_table if format == "table" else format_json)(named_stats(self.stats), sort_by,
                                                                         bool(ascending))
            if reset:
                self.stats = {}
            return text

    def _other_data(self, finished: bool) -> dict:
        live = list(self._modules.keys())
        return {
            "producer": f"mxcc {__version__}", "format": "mxcc-trace-1", "clock": "CLOCK_MONOTONIC",
            "origin_ns": self.origin_ns or 0, "finished": finished,
            "dropped_events": sum(s.dropped for s in self.sources),
            "dropped_by_module": {f"{s.pid}:{s.title}": s.dropped for s in self.sources if s.dropped},
            "events_not_written": self.not_written,
            "modules": [dict(pid=s.pid, name=s.net.net, inputs=s.title, arena_bytes=s.meta.get("arena_bytes"),
                             lower_bound_bytes=s.meta.get("lower_bound_bytes"), kernels=len(s.net.kernels),
                             profile_compiled=True) for s in self.sources if s.has_events]
            + [dict(pid=None, name=m.name, profile_compiled=False) for m in live if not m.meta.get("profile", True)],
            "config": asdict(self.config),
        }

    def _write(self, finished: bool, background: bool = False) -> None:
        self._serialize(background)
        scope_threads = [(tid, f"scopes ({name})") for tid, name in self.scope_tids.values()] if self.scopes else []
        modules = [(s.pid, s.title, [PHASES[i] if n else None for i, n in enumerate(s.state.passes)])
                   for s in self.sources if s.has_events]
        events = metadata_events(scope_threads, modules) + [text for *_, text in sorted(self.scopes)]
        write_trace(self.path, [",\n".join(events), *self.body], self._other_data(finished))
        self.unwritten = False

    # -- scopes ----------------------------------------------------------------------------------------
    def scope_enter(self, name: str, append_mode: bool) -> tuple:
        with self._lock:
            started = not self.running
            if started:
                self.set_state("run")
            stack = getattr(self._tls, "stack", None)
            if stack is None:
                stack = self._tls.stack = []
            full = (stack[-1] + name) if (append_mode and stack) else name
            stack.append(full)
            ident = threading.get_ident()
            if ident not in self.scope_tids:
                self.scope_tids[ident] = (len(self.scope_tids) + 1, threading.current_thread().name)
            return started, json.dumps(full), self.scope_tids[ident][0], time.monotonic_ns()

    def scope_exit(self, token: tuple) -> None:
        started, name, tid, t0 = token
        t1 = time.monotonic_ns()
        with self._lock:
            self._tls.stack.pop()
            if self.running and not self.paused and self.origin_ns is not None:
                self.scopes.append((tid, t0, t0 - t1,
                                    f'{{"name":{name},"cat":"scope","ph":"X","pid":1,"tid":{tid},'
                                    f'"ts":{(t0 - self.origin_ns) / 1e3:.3f},"dur":{(t1 - t0) / 1e3:.3f}}}'))
                self.unwritten = True
            if started:
                self.set_state("stop")

    # -- process exit ----------------------------------------------------------------------------------
    def at_exit(self) -> None:
        """MXNet's destructor writes the trace of a profiler that ran; so does this, and autostart's."""
        try:
            with self._lock:
                self._stop_collector()
                if self.running:
                    self.running = False
                    self._apply_all()
                self._drain_all()
                if self._autostart or (self.origin_ns is not None and self.unwritten):
                    self._write(finished=True)
        except Exception as e:      # never turn a clean exit into a traceback
            log.warning("mxcc.profiler: writing %s at exit failed: %s", self.path, e)

    def reset(self) -> None:
        """Forget everything (tests): stop, disable every module, unconfigured defaults, no autostart."""
        with self._lock:
            self.running = False
            self._stop_collector()
            self._apply_all()
            self._autostart = False
            self._new_session(Config(continuous_dump=False))


def _env_on(name: str) -> bool:
    # NOTE: the one environment read below the CLI: MXNet's MXNET_PROFILER_AUTOSTART is process-global too.
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


_PROFILER = Profiler(autostart=_env_on("MXCC_PROFILER_AUTOSTART"))
atexit.register(_PROFILER.at_exit)


# -- MXNet's API ---------------------------------------------------------------------------------------------
def set_config(**kwargs) -> None:
    """Configure the profiler (keyword arguments only; every call starts from MXNet's defaults).

    Keys: profile_all, profile_symbolic, profile_imperative, profile_memory, profile_api, filename
    ("profile.json"; deleted now, as MXNet does), continuous_dump (True), dump_period (1.0 s),
    aggregate_stats, profile_process ("worker"), and mxcc's event_capacity (events per module between
    drains, default 262144) and max_trace_events (1,000,000). Not while the profiler runs."""
    _PROFILER.set_config(**kwargs)


def set_state(state: str = "stop", profile_process: str = "worker") -> None:
    """'run' starts recording every compiled module (and un-pauses); 'stop' stops and collects."""
    _check_process(profile_process)
    _PROFILER.set_state(state)


def pause(profile_process: str = "worker") -> None:
    """Stop recording until resume(); kernels run while paused leave no events."""
    _check_process(profile_process)
    _PROFILER.set_paused(True)


def resume(profile_process: str = "worker") -> None:
    _check_process(profile_process)
    _PROFILER.set_paused(False)


def dump(finished: bool = True, profile_process: str = "worker") -> None:
    """Write the Chrome trace of everything recorded so far to the configured filename (a complete JSON
    file every time). `finished` marks the trace final and stops continuous dumps; dumping again works."""
    _check_process(profile_process)
    _PROFILER.dump(finished=finished)


def dumps(reset: bool = False, format: str = "table", sort_by: str = "total", ascending: bool = False) -> str:
    """MXNet's aggregate statistics: categories "operator" (one row per layer), "operator (by type)" (per
    op type or fused type) and "Device Storage" (each module's arena), as MXNet 1.9 prints them."""
    return _PROFILER.dumps(reset=reset, format=format, sort_by=sort_by, ascending=ascending)


class scope:
    """`with profiler.scope("epoch 1"): ...` runs the profiler for the block (if it was not running) and
    records the block as a slice named `name` (nested names are joined when append_mode, as MXNet 2.0's
    scope joins them)."""

    def __init__(self, name: str = "<unk>:", append_mode: bool = True):
        self.name, self.append_mode = str(name), append_mode
        self._tokens: list[tuple] = []

    def __enter__(self):
        self._tokens.append(_PROFILER.scope_enter(self.name, self.append_mode))
        return self

    def __exit__(self, *exc) -> None:
        _PROFILER.scope_exit(self._tokens.pop())


def _check_process(profile_process: str) -> None:
    if profile_process != "worker":
        raise MxccError(f"profile_process={profile_process!r} is not supported (mxcc has no kvstore server)")


# MXNet's deprecated spellings
def profiler_set_config(mode: str = "symbolic", filename: str = "profile.json") -> None:
    if mode not in ("symbolic", "all"):
        raise ValueError(f"profiler_set_config: mode must be 'symbolic' or 'all', got {mode!r}")
    set_config(profile_all=mode == "all", filename=filename)


def profiler_set_state(state: str = "stop") -> None:
    set_state(state)


def dump_profile() -> None:
    dump(True)


def _register(mod) -> None:
    """Module.__init__ calls this: the module records whenever the profiler runs (now, if it does)."""
    _PROFILER.register(mod)


def _reset() -> None:
    _PROFILER.reset()
