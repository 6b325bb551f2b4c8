"""Sampled call stacks -> folded stacks, time per layer and self time per symbol.

Input: the text of `perf script` (or folded `a;b;c N` lines such as `py-spy record -f raw` writes), the
network's kernels from module.json and, when the benchmark wrote one, its timeline (each kernel call's
[t0, t1) in CLOCK_MONOTONIC ns, the clock `perf record -k CLOCK_MONOTONIC` stamps samples with).
Output: a `Profile`: canonical folded stacks (`<prog>;<net>_forward;<net>_<node>;...`), per-layer inclusive
samples and wall time, per-symbol self samples. Pure functions over text and plain data, so every rule is
unit-tested on canned samples; running perf and writing files is mxcc/perf/record.py's job.

Why a timeline: GCC outlines `#pragma omp parallel` into `<fn>._omp_fn.N`, and libgomp keeps no frame
pointers, so an OpenMP worker's stack ends in garbage above `mxcc_gemm_f32._omp_fn.0`: it names the runtime
function but not the layer that called it. The master thread is inside that layer at the same instant, so
the sample's time finds it. Without a timeline such samples are split over the layers that call the same
runtime function, in proportion to the samples whose stacks do show the layer (flagged as an estimate).
"""
from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field


def prof_event_dtype():
    """runtime_c/prof.h's mxcc_prof_event as a numpy dtype (the timelines of --timeline, Module's profiler)."""
    import numpy as np   # here: the rest of this module needs no numpy
    return np.dtype([("kernel", "<i4"), ("phase", "<i4"), ("t0_ns", "<u8"), ("t1_ns", "<u8"), ("batch", "<i4"),
                     ("reserved", "<i4")])


def read_events(data: bytes):
    """A raw timeline's whole events (a torn last record is dropped) as a structured array."""
    import numpy as np
    dt = prof_event_dtype()
    return np.frombuffer(data[: len(data) // dt.itemsize * dt.itemsize], dt)

# GCC clone suffixes (IPA-SRA, constant propagation, hot/cold split) that keep the source function's identity.
_CLONE = re.compile(r"(\.(isra|constprop|part|cold|lto_priv|localalias)(\.\d+)?)+$|@@?(?!plt$)[A-Za-z_][\w.]*$")
_OMP = re.compile(r"^(?P<parent>.+?)\._omp_fn\.\d+$")
_HEADER = re.compile(r"^(?P<comm>\S.*?)\s+(?:(?P<pid>-?\d+)/)?(?P<tid>-?\d+)\s+(?:\[\d+\]\s+)?"
                     r"(?P<time>\d+\.\d+):\s*(?:(?P<period>\d+)\s+)?(?P<event>[\w:./-]+):\s*(?P<rest>.*)$")
_FRAME = re.compile(r"^\s*(?P<addr>[0-9a-fA-F]+)\s+(?P<sym>.+?)\s+\((?P<dso>[^()]*)\)\s*$")
_FOLDED_FRAME = re.compile(r"^(?P<name>.*?)(?: \((?P<loc>[^()]*)\))?$")
# Frames that only say how a thread started; dropped from stacks placed by time.
_THREAD_START = {"_start", "__libc_start_main", "__libc_start_main_impl", "__libc_start_call_main", "main",
                 "clone", "clone3", "start_thread", "bench_forward", "[unknown]"}


@dataclass(frozen=True)
class Frame:
    sym: str           # function name, "[unknown]" when the symbolizer had none
    dso: str = ""      # the binary (or, from py-spy, the source file); "" or "[unknown]" when unknown


@dataclass(frozen=True)
class Sample:
    frames: tuple[Frame, ...]      # root first
    pid: int = 0
    tid: int = 0
    time_ns: int | None = None
    period: float = 1.0            # what one sample stands for (ns of cpu-clock from perf)
    count: int = 1                 # how many identical samples this record stands for (folded input)
    comm: str = ""


@dataclass(frozen=True)
class Kernel:
    index: int
    name: str
    function: str
    members: tuple[str, ...]
    ops: tuple[str, ...]
    flops: int
    phase: str = "forward"


def kernels_from_meta(meta: dict, batch: int | None = None) -> list[Kernel]:
    """The kernels listed in module.json, in their index order (the timeline's `kernel` field). `batch`: the
    batch of the run (a dynamic batch), whose FLOPs are module.json's flops_batch a*N + b at it."""
    def flops(k):
        ab = k.get("flops_batch")
        return int(ab[0] * batch + ab[1]) if batch and ab else int(k.get("flops", 0))
    return [Kernel(i, k["name"], k["function"], tuple(k.get("members", ())), tuple(k.get("ops", ())),
                   flops(k), k.get("phase", "forward"))
            for i, k in enumerate(meta.get("kernels", []))]


# -- parsing ---------------------------------------------------------------------------------------------
def _time_ns(text: str) -> int:
    sec, _, frac = text.partition(".")
    return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])


def _frame(m: re.Match) -> Frame:
    sym = re.sub(r"\+0x[0-9a-fA-F]+$", "", m["sym"])
    return Frame(sym, m["dso"])


def parse_perf_script(text: str) -> list[Sample]:
    """`perf script` output (default fields, or -F comm,pid,tid,time,period,event,ip,sym,dso) -> samples."""
    samples: list[Sample] = []
    head, frames = None, []

    def flush():
        if head is not None:
            pid = int(head["pid"]) if head["pid"] is not None else int(head["tid"])
            samples.append(Sample(tuple(reversed(frames)), pid, int(head["tid"]), _time_ns(head["time"]),
                                  float(head["period"] or 1), 1, head["comm"]))

    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            m = _HEADER.match(line)
            if m is None:
                continue                      # perf's own warnings
            flush()
            head, frames = m, []
            inline = _FRAME.match(" " + m["rest"]) if m["rest"] else None   # no -g: the ip on the header line
            if inline:
                frames.append(_frame(inline))
        elif head is not None:
            fm = _FRAME.match(line)
            if fm and fm["dso"] != "inlined":      # inline frames (perf script --inline) belong to their caller
                frames.append(_frame(fm))
    flush()
    return samples


def parse_folded(text: str, period: float = 1.0) -> list[Sample]:
    """Folded stacks (`a;b;c N`, e.g. `py-spy record --native -f raw`) -> samples (one per distinct stack)."""
    out = []
    for line in text.splitlines():
        stack, _, n = line.rstrip().rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = []
        for part in stack.split(";"):
            m = _FOLDED_FRAME.match(part)
            name, loc = m["name"], (m["loc"] or "")
            if re.fullmatch(r"0x[0-9a-fA-F]+", name):
                name = "[unknown]"
            where = loc.rsplit(":", 1)[0] if re.search(r":\d+$", loc) else loc
            if where.endswith(".h"):       # py-spy reports inlined header functions (intrinsics) as frames
                continue
            frames.append(Frame(name, where))
        out.append(Sample(tuple(frames), period=period, count=int(n)))
    return out


# -- naming ----------------------------------------------------------------------------------------------
def base_name(sym: str) -> str:
    """`mlp_softmaxoutput0.isra.0` -> `mlp_softmaxoutput0`, `memcpy@@GLIBC_2.14` -> `memcpy`; keeps `._omp_fn.N`."""
    return _CLONE.sub("", sym)


def omp_parent(sym: str) -> str | None:
    """`mxcc_gemm_f32._omp_fn.0` -> `mxcc_gemm_f32` (GCC's outlined OpenMP region of that function)."""
    m = _OMP.match(base_name(sym))
    return base_name(m["parent"]) if m else None


def dso_short(dso: str) -> str:
    """`/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0` -> `libgomp`; `[kernel.kallsyms]` -> `kernel`."""
    d = dso.rsplit("/", 1)[-1]
    if d in ("", "[unknown]", "?"):
        return "unknown"
    if d.startswith("[kernel"):
        return "kernel"
    return re.sub(r"\.so(\.[\d.]+)?$", "", d.strip("[]"))


def is_garbage(f: Frame) -> bool:
    """A frame pointer chain that ran into data: no symbol and no binary."""
    return f.sym == "[unknown]" and dso_short(f.dso) == "unknown"


def label(f: Frame) -> str:
    """The frame as folded stacks show it; kernel frames get flamegraph.pl's `_[k]` suffix."""
    if f.sym == "[unknown]":
        return f"[{dso_short(f.dso)}]"
    return base_name(f.sym) + ("_[k]" if dso_short(f.dso) == "kernel" else "")


def category(f: Frame, net: str) -> str:
    """generated | runtime | bench | openmp | libc | kernel | python | other (for the self-time table)."""
    sym, d = base_name(f.sym), dso_short(f.dso)
    fn = omp_parent(sym) or sym
    if fn.startswith(net + "_"):
        return "generated"
    if fn.endswith("@plt"):
        return "libc"
    if fn in ("main", "bench_forward"):
        return "bench"
    if fn.startswith("_cffi_") or d.startswith("libpython") or d.endswith(".py") or d.startswith("<frozen"):
        return "python"
    if fn.startswith("mxcc_") or d.endswith((".c", ".h", "_bench", "_train")) or d.startswith("_mxcc_"):
        return "runtime"      # the runtime's own functions, also its static helpers (gemm_loops, ...)
    if d.startswith("libgomp") or fn.startswith(("GOMP_", "gomp_", "omp_")):
        return "openmp"
    if d == "kernel":
        return "kernel"
    if d.startswith(("libc", "libm", "ld-linux", "libpthread", "vdso")):
        return "libc"
    return "other"


def self_key(f: Frame, net: str) -> tuple[str, str]:
    """The row a leaf frame's self time goes to: (name, category); OpenMP regions join their function."""
    cat = category(f, net)
    if cat == "openmp":
        return "libgomp (OpenMP runtime)", cat
    if cat == "kernel":
        return "[kernel]", cat
    if cat == "python":
        return "python interpreter", cat
    name = label(f)
    return (omp_parent(name) or name), cat


# -- the timeline ----------------------------------------------------------------------------------------
@dataclass
class Timeline:
    """Kernel calls [t0, t1) of the master thread, sorted; forwards are runs of increasing kernel index."""
    t0: list[int]
    t1: list[int]
    kernel: list[int]
    forward: list[int]

    @classmethod
    def from_events(cls, events) -> "Timeline":
        """events: iterable of (kernel, phase, t0_ns, t1_ns), e.g. the bench's --timeline records."""
        ev = sorted((int(e[2]), int(e[3]), int(e[0])) for e in events)
        fwd, prev, n = [], None, -1
        for _, _, k in ev:
            if prev is None or k <= prev:
                n += 1
            fwd.append(n)
            prev = k
        return cls([e[0] for e in ev], [e[1] for e in ev], [e[2] for e in ev], fwd)

    @classmethod
    def from_bytes(cls, data: bytes) -> "Timeline":
        arr = read_events(data)
        return cls.from_events(zip(arr["kernel"].tolist(), arr["phase"].tolist(), arr["t0_ns"].tolist(),
                                   arr["t1_ns"].tolist()))

    def __len__(self) -> int:
        return len(self.t0)

    def locate(self, t: int) -> tuple[int | None, bool]:
        """(kernel running at t or None, whether t is inside a forward)."""
        i = bisect.bisect_right(self.t0, t) - 1
        if i < 0:
            return None, False
        if t < self.t1[i]:
            return self.kernel[i], True
        return None, i + 1 < len(self.t0) and self.forward[i + 1] == self.forward[i]

    def calls(self) -> Counter:
        return Counter(self.kernel)

    def wall_ns(self) -> Counter:
        w: Counter = Counter()
        for a, b, k in zip(self.t0, self.t1, self.kernel):
            w[k] += b - a
        return w

    def forwards(self) -> int:
        return self.forward[-1] + 1 if self.forward else 0

    def forward_wall_ns(self) -> int:
        first, last = {}, {}
        for a, b, f in zip(self.t0, self.t1, self.forward):
            first.setdefault(f, a)
            last[f] = b
        return sum(last[f] - first[f] for f in first)


# -- attribution -----------------------------------------------------------------------------------------
GLUE = "(forward, between kernels)"
UNKNOWN = "(layer unknown)"


@dataclass
class LayerRow:
    kernel: Kernel
    samples: float = 0.0          # inclusive, every thread (fractional only where estimated)
    cpu_ns: float = 0.0
    master_ns: float = 0.0        # the calling thread's share: the wall-time estimate without a timeline
    estimated: float = 0.0        # samples given by the proportional split, not by stack or time
    wall_ns: float | None = None  # from the timeline
    calls: int | None = None      # from the timeline


@dataclass
class Profile:
    net: str
    root: str
    folded: Counter = field(default_factory=Counter)
    layers: list[LayerRow] = field(default_factory=list)
    glue: float = 0.0                      # forward samples outside every kernel
    unknown: float = 0.0                   # forward samples no rule could place in a layer
    self_rows: list[tuple[str, str, float, float]] = field(default_factory=list)   # name, category, samples, ns
    total: float = 0.0
    total_ns: float = 0.0
    forward: float = 0.0
    forward_ns: float = 0.0
    worker_wait: float = 0.0               # outside: OpenMP workers waiting for work (placeable only by time)
    threads: int = 0
    placed_by: Counter = field(default_factory=Counter)    # "stack" | "time" | "split" -> samples
    timeline: Timeline | None = None
    phases: Counter = field(default_factory=Counter)       # training: PHASES -> samples (attribute_train)
    phase_ns: Counter = field(default_factory=Counter)


def _tidy(labels: list[str]) -> list[str]:
    """Drop libgomp frames between a function and its own OpenMP region; collapse repeated frames."""
    out: list[str] = []
    for lab in labels:
        parent = omp_parent(lab)
        if parent is not None:
            for j in range(len(out) - 1, -1, -1):
                if out[j] == parent:
                    del out[j + 1:]
                    break
        if not out or out[-1] != lab:
            out.append(lab)
    return out


def _place(s: Sample, net: str, fn2k: dict[str, int], timeline: Timeline | None):
    """-> (kernel index | None, in_forward, how, tail frames below the layer/forward, pending parent fn)."""
    labels = [label(f) for f in s.frames if not is_garbage(f)]
    fwd = f"{net}_forward"
    layer_at = next((i for i, lab in enumerate(labels) if (omp_parent(lab) or lab) in fn2k), None)
    if layer_at is not None:
        lab = labels[layer_at]
        tail = labels[layer_at:]
        if omp_parent(lab):                    # a worker in the layer's own parallel region
            tail = [omp_parent(lab)] + tail
        return fn2k[tail[0]], True, "stack", _tidy(tail)[1:], None
    omp_at = next((i for i, lab in enumerate(labels) if omp_parent(lab)), None)
    fwd_at = next((i for i, lab in enumerate(labels) if lab == fwd), None)
    if omp_at is not None:
        tail = [omp_parent(labels[omp_at])] + labels[omp_at:]
    elif fwd_at is not None:
        tail = labels[fwd_at + 1:]
    else:
        tail = labels
    if timeline is not None and s.time_ns is not None:
        k, in_fwd = timeline.locate(s.time_ns)
        if k is not None:
            if omp_at is None and fwd_at is None:
                while tail and tail[0] in _THREAD_START:
                    tail = tail[1:]
            return k, True, "time", _tidy(tail), None
        if in_fwd or fwd_at is not None:
            return None, True, None, _tidy(tail), None
        return None, False, None, labels, None
    if omp_at is not None:          # a runtime parallel region, caller unknown: split later
        return None, True, "split", _tidy(tail), tail[0]
    if fwd_at is not None:
        return None, True, None, _tidy(tail), None
    return None, False, None, labels, None


def _waiting(frames: list[Frame], net: str) -> bool:
    """Only libgomp (plus how the thread started and the kernel): an OpenMP worker between regions."""
    cats = {category(f, net) for f in frames if label(f) not in _THREAD_START}
    return "openmp" in cats and cats <= {"openmp", "kernel", "libc"}


def _count_totals(prof: Profile, samples: list[Sample], net: str) -> None:
    """What does not depend on where a sample is placed: totals, threads, self time per leaf symbol."""
    selfc: Counter = Counter()
    self_ns: Counter = Counter()
    cats: dict[str, str] = {}
    tids = set()
    for s in samples:
        n, ns = s.count, s.count * s.period
        prof.total += n
        prof.total_ns += ns
        tids.add(s.tid)
        frames = [f for f in s.frames if not is_garbage(f)]
        if frames:
            key, cat = self_key(frames[-1], net)
            selfc[key] += n
            self_ns[key] += ns
            cats[key] = cat
    prof.self_rows = sorted(((name, cats[name], c, self_ns[name]) for name, c in selfc.items()),
                            key=lambda r: (-r[2], r[0]))
    prof.threads = len(tids)


def attribute(samples: list[Sample], kernels: list[Kernel], net: str, timeline: Timeline | None = None,
              root: str | None = None) -> Profile:
    """Place every sample in a layer (by its stack, else by its time, else by a proportional split)."""
    fn2k = {k.function: k.index for k in kernels if k.function.startswith(net + "_")}
    if timeline is not None and len(timeline) == 0:
        timeline = None
    prof = Profile(net, root or next((s.comm for s in samples if s.comm), net), timeline=timeline)
    rows = {k.index: LayerRow(k) for k in kernels}
    fwd = f"{net}_forward"
    _count_totals(prof, samples, net)
    pending: dict[str, list[tuple[Sample, list[str]]]] = defaultdict(list)
    callers: dict[str, Counter] = defaultdict(Counter)     # runtime fn -> layer -> samples calling it
    for s in samples:
        n, ns = s.count, s.count * s.period
        frames = [f for f in s.frames if not is_garbage(f)]
        k, in_fwd, how, tail, parent = _place(s, net, fn2k, timeline)
        if not in_fwd:
            prof.folded[";".join([prof.root] + _tidy(tail))] += n
            if s.tid != s.pid and _waiting(frames, net):
                prof.worker_wait += n
            continue
        prof.forward += n
        prof.forward_ns += ns
        if k is not None:
            row = rows[k]
            row.samples += n
            row.cpu_ns += ns
            if s.tid == s.pid:
                row.master_ns += ns
            prof.placed_by[how] += n
            prof.folded[";".join([prof.root, fwd, row.kernel.function] + tail)] += n
            for lab in set(tail):
                callers[lab][k] += n
        elif how == "split":
            pending[parent].append((s, tail))
            prof.folded[";".join([prof.root, fwd, UNKNOWN] + tail)] += n
        else:
            prof.glue += n
            prof.folded[";".join([prof.root, fwd] + tail)] += n
    for parent, items in pending.items():
        weights = callers.get(parent)
        for s, _ in items:
            n, ns = s.count, s.count * s.period
            if not weights:
                prof.unknown += n
                continue
            tot = sum(weights.values())
            for k, w in weights.items():
                rows[k].samples += n * w / tot
                rows[k].estimated += n * w / tot
                rows[k].cpu_ns += ns * w / tot
                if s.tid == s.pid:
                    rows[k].master_ns += ns * w / tot
            prof.placed_by["split"] += n
    if timeline is not None:
        calls, wall = timeline.calls(), timeline.wall_ns()
        for k, row in rows.items():
            row.calls, row.wall_ns = calls.get(k, 0), float(wall.get(k, 0))
    prof.layers = [rows[k.index] for k in kernels if k.phase == "forward" or rows[k.index].samples]
    return prof


# -- training ------------------------------------------------------------------------------------------
PHASES = ("data loading", "forward", "backward", "update", "other")
_PHASE_FN = {"forward": "forward", "backward": "backward", "update": "update"}


def attribute_train(samples: list[Sample], kernels: list[Kernel], net: str, timeline: Timeline | None = None,
                    root: str | None = None) -> Profile:
    """Place every sample of a `<net>_train` run in a phase (data loading, forward, backward, update, other)
    and, inside the last three, in a kernel or parameter update: by its stack (`mxcc_train_load_batch` and
    `mxcc_idx_read` (and zlib, which only it calls) are data loading, a kernel's function its kernel,
    `<net>_forward`/`_forward_infer`, `_backward`, `_update` their phase), else by its time in the timeline
    (OpenMP workers, whose stacks end in libgomp). Folded stacks are canonical: `<prog>;<net>_<phase>;<kernel fn>;...`,
    `<prog>;mxcc_train_load_batch;...`, anything else as sampled. Profile.forward counts the step's samples
    (forward + backward + update), Profile.layers every kernel and update entry."""
    fn2k = {k.function: k.index for k in kernels if k.function.startswith(net + "_")}
    if timeline is not None and len(timeline) == 0:
        timeline = None
    prof = Profile(net, root or next((s.comm for s in samples if s.comm), net), timeline=timeline)
    rows = {k.index: LayerRow(k) for k in kernels}
    loaders = {"mxcc_train_load_batch", "mxcc_idx_read"}
    phase_frames = {f"{net}_forward": "forward", f"{net}_forward_infer": "forward", f"{net}_backward": "backward",
                    f"{net}_update": "update"}
    _count_totals(prof, samples, net)
    for s in samples:
        n, ns = s.count, s.count * s.period
        frames = [f for f in s.frames if not is_garbage(f)]
        labels = [label(f) for f in frames]
        phase, k, how, tail = None, None, None, None
        load_at = next((i for i, lab in enumerate(labels) if lab in loaders), None)
        layer_at = next((i for i, lab in enumerate(labels) if (omp_parent(lab) or lab) in fn2k), None)
        ph_at = max((i for i, lab in enumerate(labels) if lab in phase_frames), default=None)
        unzip_at = next((i for i, f in enumerate(frames) if dso_short(f.dso) == "libz"), None)
        if load_at is not None:
            phase, how, tail = "data loading", "stack", labels[load_at:]
        elif unzip_at is not None:     # zlib keeps no frame pointers; only mxcc_idx_read inflates
            phase, how, tail = "data loading", "stack", ["mxcc_idx_read"] + labels[unzip_at:]
        elif layer_at is not None:
            lab = labels[layer_at]
            tail = ([omp_parent(lab)] if omp_parent(lab) else []) + labels[layer_at:]
            k, how = fn2k[tail[0]], "stack"
            phase = kernels[k].phase if kernels[k].phase in _PHASE_FN else "forward"
        else:
            omp_at = next((i for i, lab in enumerate(labels) if omp_parent(lab)), None)
            if omp_at is not None:
                tail = [omp_parent(labels[omp_at])] + labels[omp_at:]
            elif ph_at is not None:
                tail = labels[ph_at + 1:]
            else:
                tail = [lab for lab in labels if lab not in _THREAD_START]
            if ph_at is not None:
                phase, how = phase_frames[labels[ph_at]], "stack"
            if timeline is not None and s.time_ns is not None:
                kt, _ = timeline.locate(s.time_ns)
                if kt is not None and kt < len(kernels) and (phase is None or kernels[kt].phase == phase
                                                             or kernels[kt].phase not in _PHASE_FN):
                    k = kt
                    if phase is None:
                        phase, how = (kernels[kt].phase if kernels[kt].phase in _PHASE_FN else "forward"), "time"
                elif kt is not None and kt >= len(kernels) and phase is None:
                    phase, how = "forward", "time"        # an inference-mode kernel (validation pass)
        tail = _tidy(tail)
        if phase is None:
            phase = "other"
            prof.folded[";".join([prof.root] + _tidy(labels))] += n
            if s.tid != s.pid and _waiting(frames, net):
                prof.worker_wait += n
        elif phase == "data loading":
            prof.folded[";".join([prof.root] + tail)] += n
        else:
            head = [prof.root, f"{net}_{_PHASE_FN[phase]}"]
            if k is not None:
                fn = kernels[k].function
                if tail and tail[0] == fn:
                    tail = tail[1:]
                head.append(fn)
                row = rows[k]
                row.samples += n
                row.cpu_ns += ns
                if s.tid == s.pid:
                    row.master_ns += ns
            prof.folded[";".join(head + tail)] += n
            prof.forward += n
            prof.forward_ns += ns
        prof.phases[phase] += n
        prof.phase_ns[phase] += ns
        if how:
            prof.placed_by[how] += n
    if timeline is not None:
        calls, wall = timeline.calls(), timeline.wall_ns()
        for k, row in rows.items():
            row.calls, row.wall_ns = calls.get(k, 0), float(wall.get(k, 0))
    prof.layers = [rows[k.index] for k in kernels]
    return prof


def folded_text(folded: Counter) -> str:
    """`a;b;c count` lines, sorted (the interchange format of flamegraph.pl, inferno, speedscope)."""
    return "".join(f"{stack} {int(round(n))}\n" for stack, n in sorted(folded.items()) if round(n) > 0)
