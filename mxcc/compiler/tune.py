"""Tuning: each convolution's kernel chosen by timing every candidate on this host, once, cached per CPU and layer.

Input: an untuned inference Plan, the thread count and engine (mxcc's pool or OpenMP regions) its module will run
with. Output: a `Tuning`, the path chosen for every node with a choice of kernels (OpDef.paths: Convolution's
candidates) and what plan.json records of it; the driver passes the changed ones on as CompileOptions.conv_paths
(passes/choose_paths.py), so that the planner and the lowering see the same kernel.

How a layer is measured. The layers the cache lacks become one tuning network: per layer one input of its real
shape (batch included) and, per candidate, a relu of that input (so that the layer reads it from cache, as it
reads its producer's output in a network), a copy of the node (its own MXNet attributes, its weight a param,
so prepacked at bind time as in the real build) with its path forced, and a `sum` of its output (so that
nothing large is an output). That network is compiled by the ordinary pipeline (the real lowering, templates
and runtime, cached like any build) and its `<net>_bench` runs it with random data, `--threads T`, the
network's engine and a `--timeline` of every kernel call: WARMUP forwards, then forwards for about BUDGET_S
per kernel (at least one). One forward runs every candidate of every layer once, so a slow phase of a shared
machine hits them alike; each candidate's time is the best of its calls after the warm-up. A layer keeps its
heuristic path unless another candidate is at least MARGIN faster; when one would leave it, the bench runs
CONFIRM times more (a second or so later each) and every time is the best over all runs, so that a burst of
load during one run cannot decide alone. Checked against the same layers timed in
their networks (every layer forced to each candidate in turn), SqueezeNet 1.1 at 1 thread and ResNet-18 at 2:
the tuner found the faster path of 22 of 26 and 13 of 14 layers (a shared, loaded 2-vCPU Xeon). SqueezeNet's
4 others were within 5% in its measurement (so they kept the heuristic's path) and 1.2x apart in the network
(Winograd at 13x13); ResNet's stem was measured in a slow phase of the machine, and agreed in 3 reruns.

Cache: $MXCC_CACHE_DIR/tune/<cpu>_<isa>/<label>-<key16>.json, one JSON object per layer (`entry()`), written
atomically (mxcc/files.py). The key hashes what the timing depends on: the op and its typed attributes, every
input's shape (the batch included) and whether it is fixed at bind time, the candidates, the thread count, the
engine, the runtime's cache key (mxcc version, compiler, flags, target CPU, every runtime source) and the op's
module source (its lowering and thresholds). An entry that does not parse or does not match its key is
measured again and rewritten (with a warning). Measuring holds a lock per host directory: a second process
tuning the same layers waits, then reads what the first wrote; both succeed. A read-only cache still tunes (a
warning says the results are not kept).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import functools
import hashlib
import inspect
import json
import math
import os
import platform
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mxcc._version import __version__
from mxcc.compiler.build import _runtime_plan, _warn, build, target_cpu
from mxcc.files import atomic_write, cpuinfo, resource_dir
from mxcc.graph.ir import Graph, Node, Ref
from mxcc.options import CompileOptions, cache_dir
from mxcc.passes import run_pipeline
from mxcc.perf.stacks import read_events
from mxcc.passes.fold_constants import bind_time_inputs
from mxcc.plan import Plan

FORMAT = 2           # of the entries and of how they were measured: a change to either is a new key
MARGIN = 0.05        # another candidate replaces the heuristic's only when at least 5% faster: shared machines
                     # are noisy, and a choice that flips between builds helps no one
WARMUP = 2           # forwards before timing: pool threads made, pages touched, weights packed and in cache
BUDGET_S = 0.03      # timed forwards: about this many seconds per kernel of the tuning network (at least one)
MIN_SECONDS = 0.25
CONFIRM = 2          # runs more when a layer would leave its heuristic's path: a burst of another process's work
                     # can slow one kernel's every call in a run of a fraction of a second (ResNet-18's stem
                     # direct, 2 threads on a loaded 2-vCPU machine: 1617 us in one run, 817 us in its network)


@dataclass(frozen=True)
class Layer:
    """A node with a choice of kernels, as the tuner measures it."""
    node: str
    op: str
    attrs: tuple                     # its raw MXNet attributes (the tuning network's copies take them)
    inputs: tuple                    # (name, shape, fixed at bind time) per input
    candidates: tuple[str, ...]
    heuristic: str
    desc: dict                       # what the key hashes
    key: str
    label: str                       # a readable file name prefix


@dataclass(frozen=True)
class LayerChoice:
    node: str
    candidates: tuple[str, ...]
    heuristic: str
    chosen: str
    times_us: dict                   # candidate -> best time (us)
    source: str                      # "measured" | "cache"
    entry: str                       # the cache file's name

    def to_json(self) -> dict:
        return dict(node=self.node, candidates=list(self.candidates), heuristic=self.heuristic, chosen=self.chosen,
                    times_us=self.times_us, source=self.source, entry=self.entry)


@dataclass(frozen=True)
class Tuning:
    threads: int
    engine: str                      # "pool" | "openmp"
    cpu: str
    directory: str                   # the host's cache directory
    layers: tuple[LayerChoice, ...]
    seconds: float                   # the time tuning took (lookups, and the measuring if any)

    @property
    def measured(self) -> int:
        return sum(1 for c in self.layers if c.source == "measured")

    def overrides(self) -> dict[str, str]:
        """The layers whose path is not the heuristics' (what CompileOptions.conv_paths gets)."""
        return {c.node: c.chosen for c in self.layers if c.chosen != c.heuristic}

    def to_json(self) -> dict:
        return dict(threads=self.threads, engine=self.engine, cpu=self.cpu, cache=self.directory,
                    margin=MARGIN, seconds=round(self.seconds, 3), measured=self.measured,
                    changed=len(self.overrides()), layers=[c.to_json() for c in self.layers])


# ---- the host ----

def openmp_threads() -> int:
    """The OpenMP default of this process (what a Module runs with unless told otherwise): libgomp's
    omp_get_max_threads(), which sees OMP_NUM_THREADS, the affinity mask and mxcc's set_num_threads; without
    libgomp, OMP_NUM_THREADS or the CPUs this process may use."""
    try:
        n = int(_libgomp().omp_get_max_threads())
        if n > 0:
            return n
    except (OSError, AttributeError):
        pass
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@functools.lru_cache(maxsize=None)
def _libgomp():
    return ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1")


@functools.lru_cache(maxsize=None)
def cpu_model() -> str:
    """The CPU's model name with its family and model numbers (clouds often hide the name: "Intel(R) Xeon(R)
    Processor" is every generation)."""
    fields = cpuinfo()
    name = fields.get("model name") or platform.processor() or platform.machine() or "cpu"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']} model {fields['model']})"
    return name


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm)\)", "", text, flags=re.I)
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "cpu"


def host_dir(opts: CompileOptions) -> Path:
    """$MXCC_CACHE_DIR/tune/<cpu model>_<what -march=opts.isa means here>/."""
    return Path(cache_dir()) / "tune" / f"{_slug(cpu_model())}_{_slug(target_cpu(opts.cc, opts.isa))}"


# ---- layers, keys, entries ----

def _typed_attrs(params) -> dict:
    internal = set(getattr(type(params), "INTERNAL", ()))
    return {f.name: _plain(getattr(params, f.name)) for f in dataclasses.fields(params) if f.name not in internal}


def _plain(v):
    """A value as JSON holds it (tuples as lists; enums and the like by their str)."""
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    return v if v is None or isinstance(v, (bool, int, float, str)) else str(v)


def _op_source_hash(opdef) -> str:
    try:
        return hashlib.sha256(Path(inspect.getsourcefile(opdef.lower)).read_bytes()).hexdigest()
    except (TypeError, OSError):
        return __version__


def layers_of(plan: Plan, opts: CompileOptions, threads: int, engine: str) -> list[Layer]:
    """The forward nodes of `plan` with more than one candidate kernel, but those opts.conv_paths fixes."""
    g = plan.graph
    fixed = dict(opts.conv_paths)
    runtime = _runtime_plan(opts)[0]
    out = []
    for n in g.nodes:
        if n.is_variable or n.opdef.paths is None or n.phase != "forward" or n.name in fixed:
            continue
        const = bind_time_inputs(g, n)
        ins = [g.type_of(r) for r in n.inputs]
        cands, heuristic = n.opdef.paths(n.params, ins, const)
        if len(cands) < 2:
            continue
        names = n.opdef.inputs(n.params)
        inputs = tuple((name, tuple(t.shape), name in const) for name, t in zip(names, ins))
        desc = dict(format=FORMAT, op=n.op, attrs=_typed_attrs(n.params), inputs=[list(map(_plain, i)) for i in inputs],
                    candidates=list(cands), threads=threads, engine=engine, runtime=runtime,
                    op_source=_op_source_hash(n.opdef))
        key = hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()
        x = inputs[0][1]
        label = f"{n.op.lower()}-{'x'.join(map(str, x[1:]))}-o{n.out_types[0].shape[1]}-b{x[0]}-t{threads}"
        out.append(Layer(n.name, n.op, n.attrs, inputs, cands, heuristic, desc, key, _slug(label)))
    return out


def choose(times: dict, heuristic: str, margin: float = MARGIN) -> str:
    """The fastest candidate, if it beats the heuristic's by at least `margin`; else the heuristic's."""
    best = min(times, key=lambda p: (times[p], p != heuristic))
    return best if times[best] <= (1.0 - margin) * times[heuristic] else heuristic


def entry_path(directory: Path, layer: Layer) -> Path:
    return directory / f"{layer.label}-{layer.key[:16]}.json"


def read_entry(path: Path, layer: Layer) -> dict | None:
    """The measured times of `layer` from its cache entry; None when there is none. A damaged entry (no JSON,
    another key, a candidate's time missing or not a positive number) is reported and treated as missing."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as e:
        why = e.strerror or str(e)
    else:
        why = _damage(text, layer)
        if why is None:
            return {p: float(t) for p, t in json.loads(text)["times_us"].items() if p in layer.candidates}
    _warn(f"mxcc: the tuning cache entry {path} is damaged ({why}); measuring {layer.node} again")
    return None


def _damage(text: str, layer: Layer) -> str | None:
    try:
        e = json.loads(text)
    except ValueError as err:
        return f"not JSON: {err}"
    if not isinstance(e, dict) or e.get("key") != layer.key:
        return "another key or format"
    times = e.get("times_us")
    if not isinstance(times, dict):
        return "no times_us"
    for p in layer.candidates:
        t = times.get(p)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            return f"no valid time for {p}"
    return None


def entry(layer: Layer, times: dict, reps: int) -> dict:
    """A cache entry: the key and what it hashes, the times, and the choice they give (recomputed on every read,
    so an entry edited by hand decides)."""
    return dict(key=layer.key, desc=layer.desc, times_us=times, reps=reps, heuristic=layer.heuristic,
                chosen=choose(times, layer.heuristic), cpu=cpu_model(), mxcc_version=__version__,
                measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))


# ---- measuring ----

def tuning_network(layers: list[Layer]) -> tuple[Graph, dict, dict]:
    """The graph that times `layers`: (graph, input shapes, {node name: (layer index, candidate)})."""
    nodes: list[Node] = []
    heads, shapes, variants = [], {}, {}

    def add(name, op="null", attrs=(), inputs=()):
        nodes.append(Node(id=len(nodes), name=name, op=op, attrs=tuple(attrs), inputs=tuple(inputs)))
        return Ref(len(nodes) - 1)

    for i, layer in enumerate(layers):
        refs = []
        for name, shape, fixed in layer.inputs:
            refs.append(add(f"l{i}_{name}"))
            if not fixed:
                shapes[f"l{i}_{name}"] = shape
        for p in layer.candidates:
            # the layer's computed inputs made by a kernel just before it (a relu, as most convolutions read), so
            # that it finds them in cache as it does in its network: read cold from memory, the same kernel took
            # up to 3x as long (SqueezeNet's 96->16 1x1 @55, pointwise, 1 thread: 151 us vs 54 us hot)
            ins = [r if fixed else add(f"l{i}_{p}_{name}", "relu", (), [r])
                   for r, (name, _, fixed) in zip(refs, layer.inputs)]
            out = add(f"l{i}_{p}", layer.op, layer.attrs, ins)
            variants[f"l{i}_{p}"] = (i, p)
            heads.append(add(f"l{i}_{p}_sum", "sum", (), [out]))
    return Graph(nodes=tuple(nodes), heads=tuple(heads)), shapes, variants


def measure(layers: list[Layer], opts: CompileOptions, threads: int, engine: str, log=None) -> list[tuple[dict, int]]:
    """(best time in us per candidate, timed calls of each) for each layer: its tuning network built and its bench
    run; CONFIRM more runs when a layer would leave its heuristic's path, each candidate's best taken over all."""
    bench, kernel_of = _tuning_bench(layers, opts, log)
    calls = {k: np.empty(0) for k in kernel_of}
    for run in range(1 + CONFIRM):
        for k, d in _run(bench, threads, engine, len(kernel_of)).items():
            if k in calls:
                calls[k] = np.concatenate([calls[k], d])
        results: list[tuple[dict, int]] = [({}, 0) for _ in layers]
        for k, (i, p) in kernel_of.items():
            if len(calls[k]) == 0:
                raise AssertionError(f"the tuning benchmark recorded no timed call of {layers[i].node}'s {p}")
            times, reps = results[i]
            times[p] = round(float(calls[k].min()) / 1e3, 3)
            results[i] = (times, len(calls[k]) if not reps else min(reps, len(calls[k])))
        if all(choose(t, l.heuristic) == l.heuristic for l, (t, _) in zip(layers, results)):
            break
    return results


def _tuning_bench(layers: list[Layer], opts: CompileOptions, log=None) -> tuple[Path, dict]:
    """The tuning network's `<net>_bench`, built (or from the compile cache), and {kernel index: (layer, path)}."""
    from mxcc.codegen.lower import lower, lower_folded
    from mxcc.codegen.render import render
    graph, shapes, variants = tuning_network(layers)
    topts = CompileOptions(cc=opts.cc, isa=opts.isa, opt_level=opts.opt_level, profile=True,
                           conv_paths=tuple(sorted((v, p) for v, (_, p) in variants.items())))
    plan = run_pipeline(graph, shapes, topts)
    name = "mxcc_tune"
    calls, folded = lower(plan, name), lower_folded(plan, name)
    src = render(plan, calls, name, template_dir=str(resource_dir("templates")), source="<tuning network>",
                 options="tuning network", profile=True, folded=folded, folded_bytes=plan.derived_bytes)
    built = build(name, src.c, src.h, src.cdef, src.bench, topts, parts=src.parts, log=log)
    return built.bench, {c.node_index: variants[s] for c in calls for s in c.sources if s in variants}


def _run(bench: Path, threads: int, engine: str, kernels: int) -> dict:
    """One run of the tuning bench: {kernel index: its calls' times in ns, warm-up calls left out}."""
    seconds = max(MIN_SECONDS, BUDGET_S * kernels)
    with tempfile.TemporaryDirectory(prefix="mxcc-tune-") as tmp:
        tl = Path(tmp) / "timeline.bin"
        cmd = [str(bench), "--warmup", str(WARMUP), "--seconds", f"{seconds:.3f}", "--threads", str(threads),
               "--pool" if engine == "pool" else "--no-pool", "--timeline", str(tl)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            from mxcc.errors import BuildError
            raise BuildError(f"the tuning benchmark failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                             f"{proc.stderr.strip()[-2000:]}")
        data = tl.read_bytes()
    ev = read_events(data)
    ev = ev[np.argsort(ev["t0_ns"], kind="stable")]
    return {int(k): (ev["t1_ns"][ev["kernel"] == k] - ev["t0_ns"][ev["kernel"] == k])[WARMUP:].astype(np.float64)
            for k in np.unique(ev["kernel"])}


@contextlib.contextmanager
def _lock(directory: Path):
    """One process at a time measures on this host (a second would time the first's load, then measure again)."""
    import fcntl
    try:
        f = open(directory / ".lock", "a")
    except OSError:
        yield
        return
    with f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def tune_plan(plan: Plan, opts: CompileOptions, threads: int, engine: str, log=None) -> Tuning:
    """Each tunable layer of `plan` (layers_of) from the cache, or measured (then cached)."""
    t0 = time.perf_counter()
    directory = host_dir(opts)
    layers = layers_of(plan, opts, threads, engine)
    found = {l.key: read_entry(entry_path(directory, l), l) for l in layers}
    missing = list({l.key: l for l in layers if found[l.key] is None}.values())    # one per distinct key
    source = {}
    if missing:
        writable = True
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            _warn(f"mxcc: cannot create the tuning cache {directory}: {e.strerror or e}; the measurements are "
                  f"used but not kept")
            writable = False
        with _lock(directory) if writable else contextlib.nullcontext():
            for l in missing:           # another process may have measured them while we waited
                found[l.key] = read_entry(entry_path(directory, l), l) if writable else None
            todo = [l for l in missing if found[l.key] is None]
            if todo:
                for l, (times, reps) in zip(todo, measure(todo, opts, threads, engine, log)):
                    found[l.key] = times
                    source[l.key] = "measured"
                    if not writable:
                        continue
                    try:
                        atomic_write(entry_path(directory, l), json.dumps(entry(l, times, reps), indent=1) + "\n")
                    except OSError as e:
                        _warn(f"mxcc: cannot write the tuning cache at {directory}: {e.strerror or e}; "
                              f"the measurements are used but not kept")
                        writable = False
    choices = tuple(LayerChoice(l.node, l.candidates, l.heuristic, choose(found[l.key], l.heuristic), found[l.key],
                                source.get(l.key, "cache"), entry_path(directory, l).name) for l in layers)
    return Tuning(threads, engine, cpu_model(), str(directory), choices, time.perf_counter() - t0)
