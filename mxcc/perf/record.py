"""`mxcc perf`: run a compiled network's benchmark under Linux perf and show where the time goes, per layer.

    mxcc perf DIR [--iters N | --seconds S] [--threads T] [--batch N] [--call-graph fp|dwarf] [-o OUT] [--stat] [--py]
    mxcc perf DIR --train [--epochs N] [--images F --labels F] [--threads T] [--call-graph fp|dwarf] [-o OUT]

DIR is what `mxcc compile -o DIR` wrote (module.json, `<net>_bench`). Into OUT (default DIR/perf/) go
`perf.data`, `timeline.bin` (the bench's kernel intervals), `stacks.folded`, `flame.svg` and `layers.txt`;
`--stat` writes `stat.txt` instead (perf stat counters), `--py` samples a Python process that calls the module
with py-spy (`pyspy.raw`) instead of running perf. Parsing and attribution are in mxcc.perf.stacks, the SVG in
mxcc.perf.flamegraph; this module runs the tools, turns their failures into one-line errors and writes the report.
`--train` runs the standalone training program `<net>_train` (compiled with train=True) instead, on MNIST by
default, and the report adds where the time goes between data loading, forward, backward and update.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from mxcc.compiler.artifacts import params_file
from mxcc.errors import MxccError
from mxcc.runtime.module import load
from mxcc.files import atomic_write
from mxcc.perf.flamegraph import render_svg
from mxcc.perf.stacks import (GLUE, PHASES, UNKNOWN, Profile, Timeline, attribute, attribute_train, folded_text,
                         kernels_from_meta, parse_folded, parse_perf_script)

FREQ = 999            # Hz: not a multiple of common timer ticks, so samples do not lock onto periodic work
WARMUP = 10
DEFAULT_SECONDS = 2.0
EPOCH_LINE = re.compile(r"^Epoch: (?P<epoch>\d+) (?P<rate>[\d.e+-]+) samples/sec Accuracy: (?P<acc>[\d.e+-]+)",
                        re.M)
BENCH_LINE = re.compile(r"^(?P<net>\S+): (?P<us>[\d.]+) us per forward \((?P<iters>\d+) iters, "
                        r"(?P<threads>\d+) threads(?:, batch \d+ of at most \d+)?\)", re.M)
STAT_EVENTS = ("task-clock", "context-switches", "cpu-migrations", "page-faults", "cycles", "instructions",
               "branches", "branch-misses")


class PerfError(MxccError):
    """perf or py-spy is missing, not permitted, or failed."""


# -- can we profile here? --------------------------------------------------------------------------------
def _paranoid() -> int | None:
    try:
        return int(Path("/proc/sys/kernel/perf_event_paranoid").read_text().strip())
    except (OSError, ValueError):
        return None


def perf_problem() -> str | None:
    """Why `perf record` cannot run here (one line: what to install or set), or None if it can."""
    exe = shutil.which("perf")
    if exe is None:
        return ("perf is not installed: install it with `apt-get install linux-perf` (Debian; "
                "`linux-tools-$(uname -r)` on Ubuntu)")
    try:
        v = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"perf does not run ({e}): reinstall it with `apt-get install linux-perf`"
    if v.returncode != 0:
        msg = (v.stderr or v.stdout).strip().splitlines()
        return (f"perf does not work: {msg[0] if msg else 'exit ' + str(v.returncode)} "
                f"(install the perf matching your kernel: `apt-get install linux-perf`)")
    level = _paranoid()
    if level is None:
        return "this kernel has no perf events (no /proc/sys/kernel/perf_event_paranoid)"
    if os.geteuid() != 0 and level > 2:
        return (f"perf is not permitted: kernel.perf_event_paranoid is {level}, profiling your own programs "
                f"needs 2 or less: run `sysctl kernel.perf_event_paranoid=2` as root, or run mxcc perf as root")
    return None


def _require_perf() -> str:
    problem = perf_problem()
    if problem:
        raise PerfError(problem)
    return shutil.which("perf")


def _tool_failure(what: str, proc: subprocess.CompletedProcess) -> PerfError:
    text = ((proc.stderr or "") + "\n" + (proc.stdout or "")).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("[ perf record")]
    low = text.lower()
    if any(k in low for k in ("permission", "perf_event_paranoid", "not permitted", "no access")):
        return PerfError(f"{what}: perf is not permitted here ({lines[0] if lines else 'permission denied'}); "
                         f"run `sysctl kernel.perf_event_paranoid=2` as root, or run mxcc perf as root")
    return PerfError(f"{what} failed (exit {proc.returncode}): {lines[-1] if lines else 'no output'}")


# -- the network and its benchmark -----------------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    """What was run and what the benchmark said about it."""
    tool: str               # "perf" | "py-spy"
    command: str            # what ran, as shown in the report
    forwards: int           # warm-up included: every forward the samples can fall in
    us_per_forward: float
    threads: int
    wall_s: float
    freq: int
    call_graph: str


def load_meta(directory) -> dict:
    d = Path(directory)
    try:
        return json.loads((d / "module.json").read_text())
    except FileNotFoundError:
        raise PerfError(f"{d} is not a compiled mxcc module (no module.json); create it with "
                        f"`mxcc compile NET.json --shape ... -o {d}`") from None


def _bench_args(iters, seconds, threads, warmup=WARMUP, batch: int = 0) -> list[str]:
    args = ["--warmup", str(warmup)] + (["--batch", str(batch)] if batch else [])
    args += ["--iters", str(iters)] if iters else ["--seconds", str(seconds or DEFAULT_SECONDS)]
    return args + (["--threads", str(threads)] if threads else [])


def _bench_result(proc, what: str, warmup: int) -> tuple[int, float, int]:
    m = BENCH_LINE.search(proc.stdout or "")
    if m is None:
        raise _tool_failure(what, proc)
    return int(m["iters"]) + warmup, float(m["us"]), int(m["threads"])


def _out_dir(directory, out) -> Path:
    o = Path(out) if out else Path(directory) / "perf"
    o.mkdir(parents=True, exist_ok=True)
    return o


# -- perf record -> report -------------------------------------------------------------------------------
def record(directory, *, iters: int | None = None, seconds: float | None = None, threads: int = 0,
           call_graph: str | None = None, out=None, freq: int = FREQ,
           warmup: int = WARMUP, batch: int = 0) -> tuple[Profile, Run, Path]:
    """Run the bench under `perf record`, then write stacks.folded, flame.svg and layers.txt into OUT.

    call_graph None picks: frame pointers when the build has the profiler's call sites (the bench's timeline
    then places OpenMP worker samples), else DWARF, whose complete master-thread stacks are what the
    proportional split of worker samples needs."""
    perf = _require_perf()
    meta = load_meta(directory)
    if call_graph is None:
        call_graph = "fp" if meta.get("profile", True) else "dwarf"
    if call_graph not in ("fp", "dwarf"):
        raise PerfError(f"--call-graph must be fp or dwarf, got {call_graph!r}")
    bench = Path(directory) / meta["bench"]
    if not bench.exists():
        raise PerfError(f"{bench} is missing: recompile with `mxcc compile ... -o {directory}`")
    o = _out_dir(directory, out)
    data, tl = o / "perf.data", o / "timeline.bin"
    for old in (data, o / "perf.data.old", tl):  # perf would keep the previous run as perf.data.old
        if old.exists():
            old.unlink()
    event = "cpu-clock" if os.geteuid() == 0 else "cpu-clock:u"
    cmd = [perf, "record", "-e", event, "-F", str(freq), "-k", "CLOCK_MONOTONIC", "--call-graph", call_graph,
           "-o", str(data), "--", str(bench.resolve()), *_bench_args(iters, seconds, threads, warmup, batch),
           "--timeline", str(tl.resolve())]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0 or not data.exists():
        raise _tool_failure("perf record", proc)
    forwards, us, nthreads = _bench_result(proc, "perf record", warmup)
    script = _perf_script(perf, data)
    run = Run("perf", " ".join(_shown(cmd)), forwards, us, nthreads, wall, freq, call_graph)
    timeline = Timeline.from_bytes(tl.read_bytes()) if tl.exists() else None
    prof = attribute(parse_perf_script(script), kernels_from_meta(meta, batch or None), meta["name"], timeline,
                     root=bench.name)
    write_report(o, prof, run, meta)
    return prof, run, o


def mnist_files() -> tuple[Path, Path]:
    """The MNIST test split shipped with mxcc (examples/data/mnist, next to the package or in the repo)."""
    here = Path(__file__).resolve().parent.parent          # the mxcc package
    for d in (here.parent / "examples" / "data" / "mnist", here / "examples" / "data" / "mnist",
              Path.cwd() / "examples" / "data" / "mnist"):
        im, lb = d / "t10k-images-idx3-ubyte.gz", d / "t10k-labels-idx1-ubyte.gz"
        if im.exists() and lb.exists():
            return im, lb
    raise PerfError("no MNIST files found (examples/data/mnist): pass --images FILE --labels FILE")


def record_train(directory, *, epochs: int | None = None, images=None, labels=None, threads: int = 0,
                 call_graph: str | None = None, out=None, freq: int = FREQ) -> tuple[Profile, Run, Path]:
    """Run `<net>_train` under `perf record` (with its --timeline), then write the same files as record()."""
    perf = _require_perf()
    meta = load_meta(directory)
    prog = meta.get("train_program")
    if not prog:
        raise PerfError(f"{directory} has no training program: compile with train=True (and an optimizer), "
                        f"for a classifier with one image input")
    exe = Path(directory) / prog
    if not exe.exists():
        raise PerfError(f"{exe} is missing: recompile with train=True")
    if call_graph is None:
        call_graph = "fp" if meta.get("profile", True) else "dwarf"
    if call_graph not in ("fp", "dwarf"):
        raise PerfError(f"--call-graph must be fp or dwarf, got {call_graph!r}")
    if (images is None) != (labels is None):
        raise PerfError("--images and --labels go together")
    if images is None:
        images, labels = mnist_files()
    epochs = epochs or 1
    if epochs <= 0:
        raise PerfError("--epochs must be positive")
    o = _out_dir(directory, out)
    data, tl = o / "perf.data", o / "timeline.bin"
    for old in (data, o / "perf.data.old", tl):
        if old.exists():
            old.unlink()
    event = "cpu-clock" if os.geteuid() == 0 else "cpu-clock:u"
    args = ["--images", str(Path(images).resolve()), "--labels", str(Path(labels).resolve()),
            "--epochs", str(epochs)] + (["--threads", str(threads)] if threads else [])
    cmd = [perf, "record", "-e", event, "-F", str(freq), "-k", "CLOCK_MONOTONIC", "--call-graph", call_graph,
           "-o", str(data), "--", str(exe.resolve()), *args, "--timeline", str(tl.resolve())]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    epochs_seen = EPOCH_LINE.findall(proc.stdout or "")
    if proc.returncode != 0 or not data.exists() or not epochs_seen:
        raise _tool_failure("perf record", proc)
    rate = float(epochs_seen[-1][1])
    batch = meta.get("batch") or _batch(meta)
    us = batch / rate * 1e6 if rate and batch else 0.0
    timeline = Timeline.from_bytes(tl.read_bytes()) if tl.exists() else None
    steps = _steps(timeline, meta) if timeline else 0
    script = _perf_script(perf, data)
    run = Run("perf", " ".join(_shown(cmd)), steps, us, threads or os.cpu_count() or 1, wall, freq, call_graph)
    prof = attribute_train(parse_perf_script(script), kernels_from_meta(meta), meta["name"], timeline,
                           root=exe.name)
    atomic_write(o / "stacks.folded", folded_text(prof.folded))
    sub = (f"perf, {prof.total:,.0f} samples at {freq} Hz, {epochs} epoch(s), last "
           f"{rate:,.0f} samples/sec, accuracy {float(epochs_seen[-1][2]):.3f}")
    atomic_write(o / "flame.svg", render_svg(prof.folded, title=f"mxcc perf --train: {meta['name']}",
                                             subtitle=sub, net=meta["name"]))
    atomic_write(o / "layers.txt", format_train_report(prof, run, meta, epochs_seen))
    return prof, run, o


def _batch(meta: dict) -> int:
    for s in meta.get("slots", []):
        if s.get("kind") == "input" and s.get("shape"):
            return int(s["shape"][0])
    return 0


def _steps(timeline: Timeline, meta: dict) -> int:
    """Training steps in the timeline: calls of the first backward kernel."""
    ks = meta.get("kernels", [])
    first = next((i for i, k in enumerate(ks) if k.get("phase") == "backward"), None)
    return timeline.calls().get(first, 0) if first is not None else 0


def format_train_report(prof: Profile, run: Run, meta: dict, epochs: list) -> str:
    """layers.txt of a training run: the run, time per phase, per kernel / update, self time per symbol."""
    tl = prof.timeline
    placed = ", ".join(f"{n:,.0f} by {how}" for how, n in sorted(prof.placed_by.items()))
    head = [
        f"mxcc perf --train: {meta['name']} ({meta.get('source', '?')}), "
        f"{sum(1 for r in prof.layers if r.kernel.phase != 'update')} kernels, "
        f"{sum(1 for r in prof.layers if r.kernel.phase == 'update')} parameter updates",
        f"run      : {run.command}",
        "train    : " + "; ".join(f"epoch {e}: {float(r):,.0f} samples/sec, accuracy {float(a):.4f}"
                                  for e, r, a in epochs) + f"; {run.wall_s:.2f} s wall",
        f"samples  : {prof.total:,.0f} at {run.freq} Hz ({run.tool}, call graph {run.call_graph}), "
        f"{prof.threads} thread(s)",
        f"placement: {placed or 'none'}" + (f" (timeline: {len(tl):,} kernel and update calls, {run.forwards:,} "
                                            f"training steps)" if tl else " (no timeline)"),
    ]
    wall = Counter()
    if tl:
        w = tl.wall_ns()
        for r in prof.layers:
            wall[r.kernel.phase if r.kernel.phase in ("forward", "backward", "update") else "forward"] += \
                w.get(r.kernel.index, 0)
    total = prof.total or 1.0
    rows = [("phase", "samples", "share", "cpu ms", "wall ms")]
    for ph in PHASES:
        n = prof.phases.get(ph, 0)
        rows.append((ph, f"{n:,.0f}", f"{100 * n / total:.1f}%", f"{prof.phase_ns.get(ph, 0) / 1e6:,.1f}",
                     f"{wall[ph] / 1e6:,.1f}" if ph in wall else "-"))
    rows.append(("total", f"{prof.total:,.0f}", "100.0%", f"{prof.total_ns / 1e6:,.1f}", f"{run.wall_s * 1e3:,.1f}"))
    phase = ["time per phase: every sample (all threads) by what it was doing; data loading is mxcc_train_load_batch "
             "and mxcc_idx_read, other is start-up, the epoch loop, exit and idle OpenMP workers; wall ms of "
             "forward/backward/update from the timeline (kernel calls only, the validation forwards included)"]
    phase += _table(rows, right={1, 2, 3, 4})
    step = prof.forward or 1.0
    rows = [("kernel", "phase", "function", "samples", "share", "cpu ms", "wall ms", "calls", "us/call",
             "GFLOP/s")]
    for r in prof.layers:
        calls = r.calls if r.calls is not None else 0
        w = r.wall_ns
        rows.append((r.kernel.name, r.kernel.phase, r.kernel.function, f"{r.samples:,.0f}",
                     f"{100 * r.samples / step:.1f}%", f"{r.cpu_ns / 1e6:,.1f}",
                     f"{w / 1e6:,.1f}" if w is not None else "-", f"{calls:,}" if r.calls is not None else "-",
                     f"{w / 1e3 / calls:,.2f}" if w and calls else "-",
                     f"{r.kernel.flops * calls / w:,.2f}" if w and r.kernel.flops and calls else "-"))
    placed_k = sum(r.samples for r in prof.layers)
    if prof.forward - placed_k > 0.5:
        rows.append(("(between kernels)", "", "", f"{prof.forward - placed_k:,.0f}",
                     f"{100 * (prof.forward - placed_k) / step:.1f}%", "", "", "", "", ""))
    rows.append(("step", "", "", f"{prof.forward:,.0f}", "100.0%", f"{prof.forward_ns / 1e6:,.1f}", "", "", "",
                 ""))
    layers = ["time per kernel and parameter update: inclusive, all threads; share of the forward + backward + "
              "update samples"] + _table(rows, right={3, 4, 5, 6, 7, 8, 9})
    return "\n".join(head + [""] + phase + [""] + layers + [""] + _self_table(prof)) + "\n"


def _perf_script(perf: str, data: Path) -> str:
    """Samples as text, without inline frames (intrinsics would otherwise take the self time of their caller)."""
    base = [perf, "script", "-i", str(data), "--ns", "-F", "comm,pid,tid,time,period,event,ip,sym,dso"]
    proc = subprocess.run(base + ["--no-inline"], capture_output=True, text=True)
    if proc.returncode != 0:                   # a perf without --no-inline: frames marked (inlined) are dropped
        proc = subprocess.run(base, capture_output=True, text=True)
    if proc.returncode != 0:
        raise _tool_failure("perf script", proc)
    return proc.stdout


def record_python(directory, *, iters: int | None = None, seconds: float | None = None, threads: int = 0,
                  out=None, freq: int = FREQ, warmup: int = WARMUP) -> tuple[Profile, Run, Path]:
    """Sample a Python process that calls the module (py-spy --native), then write the same report."""
    pyspy = shutil.which("py-spy")
    if pyspy is None:
        raise PerfError("py-spy is not installed: `pip install py-spy` (or profile the bench with perf: "
                        "drop --py)")
    meta = load_meta(directory)
    o = _out_dir(directory, out)
    raw = o / "pyspy.raw"
    driver = [sys.executable, "-c", "import sys; from mxcc.perf.record import drive; drive(*sys.argv[1:])",
              str(Path(directory).resolve()), str(iters or 0), str(0 if iters else seconds or DEFAULT_SECONDS),
              str(threads or 0), str(warmup)]
    cmd = [pyspy, "record", "--native", "--format", "raw", "--rate", str(freq), "--output", str(raw), "--",
           *driver]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent.parent),
                                                      env.get("PYTHONPATH")]))
    t = time.perf_counter()
    # NOTE: py-spy 0.4 sometimes never returns after its child exits (the child stays a zombie): bound it
    limit = 60.0 + (float(seconds) if seconds else 0.0) + (float(iters) * 0.05 if iters else 0.0)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=limit)
    except subprocess.TimeoutExpired:
        raise PerfError(f"py-spy did not exit within {limit:.0f} s after sampling (a known py-spy hang); "
                        f"profile the bench with perf instead (drop --py)") from None
    wall = time.perf_counter() - t
    if proc.returncode != 0 or not raw.exists():
        if "permission" in (proc.stderr or "").lower() or "ptrace" in (proc.stderr or "").lower():
            raise PerfError("py-spy is not permitted to sample the process (ptrace): run as root or "
                            "`sysctl kernel.yama.ptrace_scope=0`")
        raise _tool_failure("py-spy record", proc)
    forwards, us, nthreads = _bench_result(proc, "py-spy record", warmup)
    shown = " ".join(_shown(cmd[:cmd.index("--") + 1]) + ["python", "-c", "'mxcc.perf.record.drive(...)'"] + driver[3:])
    run = Run("py-spy", shown, forwards, us, nthreads, wall, freq, "native via py-spy, Python thread only")
    prof = attribute(parse_folded(raw.read_text(), period=1e9 / freq), kernels_from_meta(meta), meta["name"],
                     None, root="python")
    write_report(o, prof, run, meta)
    return prof, run, o


def drive(directory, iters="0", seconds="0", threads="0", warmup=str(WARMUP)) -> None:
    """The Python process `--py` samples: load DIR, bind random inputs, run forwards, print the bench line."""
    import numpy as np
    iters, seconds, threads, warmup = int(iters), float(seconds), int(threads), int(warmup)
    mod = load(directory)
    if threads:
        mod.set_num_threads(threads)
    rng = np.random.default_rng(0)
    if params_file(directory) is None:
        mod.set_params({n: rng.uniform(-0.5, 0.5, s).astype(np.float32) for n, s in mod.param_shapes.items()})
    inputs = {s["name"]: rng.uniform(-0.5, 0.5, s["shape"]).astype(np.float32)
              for s in mod.meta["slots"] if s["kind"] == "input" and not s["optional"]}
    for _ in range(warmup):
        mod.forward(**inputs)
    done, t0 = 0, time.perf_counter()
    while (done < iters) if iters else (done == 0 or time.perf_counter() - t0 < seconds):
        mod.forward(**inputs)
        done += 1
    us = (time.perf_counter() - t0) / done * 1e6
    print(f"{mod.name}: {us:.3f} us per forward ({done} iters, {mod._lib.mxcc_get_num_threads()} threads)")


# -- the report ------------------------------------------------------------------------------------------
def _table(rows: list[tuple], right: set[int]) -> list[str]:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                       for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def format_report(prof: Profile, run: Run, meta: dict) -> str:
    """layers.txt: the run, time per layer (inclusive), self time per symbol."""
    return "\n".join(_header(prof, run, meta) + [""] + _layer_table(prof, run) + [""] + _self_table(prof)) + "\n"


def _run_batch(run: Run, meta: dict) -> int | None:
    """The batch the bench ran (a module compiled with a dynamic batch): its --batch, else the maximum."""
    if not meta.get("batch"):
        return None
    words = run.command.split()
    return int(words[words.index("--batch") + 1]) if "--batch" in words[:-1] else int(meta["batch"]["maximum"])


def _header(prof: Profile, run: Run, meta: dict) -> list[str]:
    tl = prof.timeline
    batch = _run_batch(run, meta)
    flops = sum(r.kernel.flops for r in prof.layers)      # at the run's batch (kernels_from_meta)
    placed = ", ".join(f"{n:,.0f} by {how}" for how, n in sorted(prof.placed_by.items()))
    where = (f" (timeline: {len(tl):,} kernel calls in {tl.forwards():,} forwards)" if tl else
             " (no timeline: wall time estimated from the calling thread's samples)")
    return [
        f"mxcc perf: {meta['name']} ({meta.get('source', '?')}), {len(prof.layers)} kernels, "
        f"{flops / 1e6:,.3f} MFLOP per forward"
        + (f" (batch {batch} of at most {meta['batch']['maximum']})" if batch is not None else ""),
        f"run      : {run.command}",
        f"bench    : {run.forwards:,} forwards (warm-up included), {run.us_per_forward:,.1f} us per forward, "
        f"{run.threads} threads, {run.wall_s:.2f} s wall",
        f"samples  : {prof.total:,.0f} at {run.freq} Hz ({run.tool}, call graph {run.call_graph}), "
        f"{prof.threads} thread(s); forward {prof.forward:,.0f} ({100 * prof.forward / (prof.total or 1):.1f}%), "
        f"outside it {prof.total - prof.forward:,.0f} (start-up, bench loop, exit"
        + (f"; {prof.worker_wait:,.0f} are OpenMP workers waiting, which only a timeline places)"
           if prof.worker_wait else ")"),
        f"placement: {placed or 'none'}{where}",
    ]


def _layer_table(prof: Profile, run: Run) -> list[str]:
    """Inclusive samples per layer (all threads), wall time, calls and GFLOP/s; '~' marks estimates."""
    fwd, tl = prof.forward or 1.0, prof.timeline
    rows = [("function", "nodes", "ops", "samples", "share", "cpu ms", "wall ms", "calls", "us/call", "GFLOP/s")]
    for r in prof.layers:
        calls = r.calls if r.calls is not None else run.forwards
        wall = r.wall_ns if r.wall_ns is not None else r.master_ns
        approx = "~" if r.wall_ns is None or r.estimated else ""
        rows.append((r.kernel.function, "+".join(r.kernel.members), "+".join(r.kernel.ops),
                     f"{'~' if r.estimated else ''}{r.samples:,.0f}", f"{100 * r.samples / fwd:.1f}%",
                     f"{r.cpu_ns / 1e6:,.1f}", f"{approx}{wall / 1e6:,.1f}", f"{calls:,}",
                     f"{approx}{wall / 1e3 / calls:,.2f}" if calls else "-",
                     f"{approx}{r.kernel.flops * calls / wall:,.2f}" if wall and r.kernel.flops else "-"))
    for name, n in ((GLUE, prof.glue), (UNKNOWN, prof.unknown)):
        if n:
            rows.append((name, "", "", f"{n:,.0f}", f"{100 * n / fwd:.1f}%", "", "", "", "", ""))
    forwards = tl.forwards() if tl else run.forwards
    fwall = tl.forward_wall_ns() if tl else sum(r.master_ns for r in prof.layers)
    flops = sum(r.kernel.flops for r in prof.layers) * forwards
    approx = "" if tl else "~"
    rows.append(("forward", "", "", f"{prof.forward:,.0f}", "100.0%", f"{prof.forward_ns / 1e6:,.1f}",
                 f"{approx}{fwall / 1e6:,.1f}", f"{forwards:,}",
                 f"{approx}{fwall / 1e3 / forwards:,.2f}" if forwards else "-",
                 f"{approx}{flops / fwall:,.2f}" if fwall else "-"))
    lines = ["time per layer: inclusive (every sample inside the layer's function, its OpenMP regions and what "
             "they call, all threads); share of the forward's samples; GFLOP/s = FLOPs x calls / wall time"]
    lines += _table(rows, right={3, 4, 5, 6, 7, 8, 9})
    if any(r.estimated for r in prof.layers):
        lines.append("~ estimated: OpenMP samples of a runtime function with no caller in their stack, split over "
                     "the layers that call it (record with a timeline for exact placement)")
    return lines


def _self_table(prof: Profile) -> list[str]:
    total = prof.total or 1.0
    rows = [("symbol", "kind", "samples", "share", "cpu ms")]
    rows += [(name, cat, f"{n:,.0f}", f"{100 * n / total:.1f}%", f"{ns / 1e6:,.1f}")
             for name, cat, n, ns in prof.self_rows]
    return ["self time per symbol (the sampled function itself; share of all samples)"] + _table(rows, {2, 3, 4})


def _shown(cmd: list[str]) -> list[str]:
    """The command without the long absolute paths (the run line stays readable)."""
    return [Path(c).name if os.path.isabs(c) else c for c in cmd]


def write_report(o: Path, prof: Profile, run: Run, meta: dict) -> None:
    folded = folded_text(prof.folded)
    atomic_write(o / "stacks.folded", folded)
    sub = (f"{run.tool}, {prof.total:,.0f} samples at {run.freq} Hz, {run.threads} threads, "
           f"{run.us_per_forward:,.1f} us per forward")
    atomic_write(o / "flame.svg", render_svg(prof.folded, title=f"mxcc perf: {meta['name']}", subtitle=sub,
                                             net=meta["name"]))
    atomic_write(o / "layers.txt", format_report(prof, run, meta))


# -- perf stat -------------------------------------------------------------------------------------------
def stat(directory, *, iters: int | None = None, seconds: float | None = None, threads: int = 0,
         out=None, warmup: int = WARMUP, batch: int = 0) -> tuple[str, Path]:
    """`perf stat` on the bench: wall time, task-clock, context switches, page faults, hardware counters."""
    perf = _require_perf()
    meta = load_meta(directory)
    bench = Path(directory) / meta["bench"]
    o = _out_dir(directory, out)
    suffix = "" if os.geteuid() == 0 else ":u"
    csv = o / "stat.csv"
    cmd = [perf, "stat", "-x", ",", "-o", str(csv), "-e", ",".join(e + suffix for e in STAT_EVENTS), "--",
           str(bench.resolve()), *_bench_args(iters, seconds, threads, warmup, batch)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0 or not csv.exists():
        raise _tool_failure("perf stat", proc)
    forwards, us, nthreads = _bench_result(proc, "perf stat", warmup)
    counters = parse_stat_csv(csv.read_text())
    flops = sum(k["flops"] for k in meta.get("kernels", []) if k.get("phase", "forward") == "forward")
    text = format_stat(counters, wall, forwards, us, nthreads, flops, _shown(cmd))
    atomic_write(o / "stat.txt", text)
    return text, o


def parse_stat_csv(text: str) -> dict[str, str | float]:
    """`perf stat -x,` lines -> {event: value or '<not supported>' / '<not counted>'}."""
    out: dict[str, str | float] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split(",")
        if len(f) < 3:
            continue
        name = f[2].split(":")[0]
        try:
            out[name] = float(f[0])
        except ValueError:
            out[name] = f[0]
    return out


def format_stat(c: dict, wall: float, forwards: int, us: float, threads: int, flops: int, cmd) -> str:
    def num(name):
        v = c.get(name)
        return v if isinstance(v, float) else None

    rows = [("wall time", f"{wall:.3f} s", f"{forwards:,} forwards (warm-up included), {us:,.1f} us per "
                                           f"forward (bench), {threads} threads")]
    tc = num("task-clock")
    rows.append(("task-clock", f"{tc:,.1f} ms" if tc is not None else "unavailable",
                 f"{tc / 1e3 / wall:.2f} CPUs utilized" if tc else ""))
    for name in ("context-switches", "cpu-migrations", "page-faults"):
        v = num(name)
        rows.append((name, f"{v:,.0f}" if v is not None else "unavailable",
                     f"{v / wall:,.1f} /s" if v is not None else str(c.get(name, "not measured"))))
    for name in ("cycles", "instructions", "branches", "branch-misses"):
        v = num(name)
        rows.append((name, f"{v:,.0f}" if v is not None else "unavailable",
                     "" if v is not None else f"{c.get(name, 'not measured')}: this machine exposes no "
                                             f"hardware counters to perf"))
    if num("cycles") and num("instructions"):
        rows.append(("IPC", f"{num('instructions') / num('cycles'):.2f}", "instructions per cycle"))
    if flops and us:
        rows.append(("network", f"{flops / us / 1e3:,.2f} GFLOP/s", f"{flops / 1e6:,.3f} MFLOP per forward"))
    w0, w1 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    head = f"mxcc perf --stat: {' '.join(cmd[cmd.index('--') + 1:])}"
    return "\n".join([head] + [f"  {a.ljust(w0)}  {b.rjust(w1)}   {d}".rstrip() for a, b, d in rows]) + "\n"


# -- the command -----------------------------------------------------------------------------------------
def main(args) -> int:
    """`mxcc perf` (args from cli.py's parser)."""
    if args.iters is not None and args.iters <= 0 or args.seconds is not None and args.seconds <= 0:
        raise PerfError("--iters and --seconds must be positive")
    freq = getattr(args, "freq", None) or FREQ
    if freq <= 0:
        raise PerfError(f"--freq must be positive (got {freq})")
    if getattr(args, "train", False):
        if args.stat or args.py or args.iters is not None or args.seconds is not None:
            raise PerfError("--train runs the training program: it takes --epochs, not --stat, --py, --iters "
                            "or --seconds")
        prof, run, o = record_train(args.dir, epochs=args.epochs, images=args.images, labels=args.labels,
                                    threads=args.threads, call_graph=args.call_graph, out=args.out, freq=freq)
        print((o / "layers.txt").read_text(), end="")
        print(f"\nwrote {o}/: perf.data, timeline.bin, stacks.folded, flame.svg, layers.txt")
        print(f"  perf report -i {o / 'perf.data'} --no-children --sort sym     (interactive)")
        print(f"  open {o / 'flame.svg'} in a browser; speedscope and flamegraph.pl read {o / 'stacks.folded'}")
        return 0
    if args.stat:
        text, o = stat(args.dir, iters=args.iters, seconds=args.seconds, threads=args.threads, out=args.out,
                       batch=args.batch)
        print(text, end="")
        print(f"wrote {o / 'stat.txt'}")
        return 0
    if args.py:
        prof, run, o = record_python(args.dir, iters=args.iters, seconds=args.seconds, threads=args.threads,
                                     out=args.out, freq=freq)
    else:
        prof, run, o = record(args.dir, iters=args.iters, seconds=args.seconds, threads=args.threads,
                              call_graph=args.call_graph, out=args.out, freq=freq, batch=args.batch)
    print((o / "layers.txt").read_text(), end="")
    files = ["perf.data", "timeline.bin"] if run.tool == "perf" else ["pyspy.raw"]
    print(f"\nwrote {o}/: {', '.join(files + ['stacks.folded', 'flame.svg', 'layers.txt'])}")
    if run.tool == "perf":
        print(f"  perf report -i {o / 'perf.data'} --no-children --sort sym     (interactive)")
    print(f"  open {o / 'flame.svg'} in a browser; speedscope and flamegraph.pl read {o / 'stacks.folded'}")
    return 0
