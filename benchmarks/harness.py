"""The benchmark harness every benchmarks/*.py uses: timing, one fresh subprocess per configuration, tables.

A benchmark script has two halves. Its worker half (`script.py --worker '<json>'`) imports numpy and the
code under test, times each case with `time_call` and prints one JSON list as its last stdout line.
Its driver half calls `run_worker(script, spec, threads)` for each configuration: that starts a fresh
Python whose environment fixes the thread count *before* numpy/OpenMP are imported (OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS, MKL_NUM_THREADS) and drops OpenBLAS tuning overrides (OPENBLAS_CORETYPE,
OPENBLAS_L2_SIZE) unless the spec asks for a coretype. Running each configuration alone keeps two
thread pools (OpenBLAS's, OpenMP's) from spinning against each other on a small machine; running
several rounds, alternating configurations, exposes every configuration to the same bursts of noise of a
shared machine, and `summarize_rounds` reports the median of each configuration's least-disturbed round
with the interquartile range of all its samples. Results print as an aligned table (`print_table`) and
append as JSON lines (`append_jsonl`, `--json`). Speed is never asserted (benchmarks are not tests).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def time_call(fn, *, min_time: float = 0.25, min_repeats: int = 10, max_repeats: int = 2000,
              warmup_time: float = 0.05, settle: float = 0.1) -> list[float]:
    """Seconds per call of fn(), one sample per call, after a warm-up (caches, thread pools, page faults).
    Calls until both min_time seconds and min_repeats calls are reached (or max_repeats).

    First a pause of `settle` seconds, for the threads of whatever ran before in this process to stop: ONNX
    Runtime's workers spin for a while after a run, and mxcc's pool, timed while they did, found the machine
    oversubscribed and dozed for its 1 s (the MLP b64 on 2 threads right after ORT's check run, AMD Zen 4:
    93 us a call, 69 after the pause; docs/performance.md)."""
    time.sleep(settle)
    start = time.perf_counter()
    fn()
    while time.perf_counter() - start < warmup_time:
        fn()
    samples: list[float] = []
    begin = time.perf_counter()
    while len(samples) < max_repeats and (len(samples) < min_repeats or time.perf_counter() - begin < min_time):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def summarize(samples: list[float]) -> dict:
    """median, quartiles, mean, min and max of a list of seconds."""
    q1, med, q3 = statistics.quantiles(samples, n=4) if len(samples) > 1 else (samples[0],) * 3
    return {"median_s": med, "q1_s": q1, "q3_s": q3, "mean_s": statistics.fmean(samples), "min_s": min(samples),
            "max_s": max(samples), "n": len(samples)}


def summarize_rounds(rounds: list[list[float]]) -> dict:
    """Statistics over several rounds of samples of one configuration.

    On a shared machine, noise comes in bursts that slow a whole round; it never speeds one up. So the
    headline `median_s` is the median of the least-disturbed round (the lowest per-round median), while
    q1/q3/min/max describe all samples pooled, and `round_medians_s` keeps every round's median."""
    pooled = summarize([t for r in rounds for t in r])
    medians = [statistics.median(r) for r in rounds if r]
    return {**pooled, "median_s": min(medians), "pooled_median_s": pooled["median_s"],
            "round_medians_s": medians}


def worker_env(threads: int, coretype: str | None = None) -> dict:
    """The environment of a worker: thread counts fixed, OpenBLAS overrides removed (or coretype set)."""
    env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_OVERRIDES}
    for var in THREAD_VARS:
        env[var] = str(threads)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    return env


def run_worker(script: str | Path, spec: dict, threads: int, coretype: str | None = None,
               timeout: float = 1800) -> list[dict]:
    """Runs `python script --worker '<spec json>'` in a fresh process with `threads` threads and returns
    the JSON list its last stdout line holds. Raises with the worker's stderr if it fails."""
    cmd = [sys.executable, str(script), "--worker", json.dumps(spec)]
    proc = subprocess.run(cmd, env=worker_env(threads, coretype), capture_output=True, text=True,
                          timeout=timeout)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"worker failed ({proc.returncode}): {' '.join(cmd[:3])}\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def alternate_engines(script: str | Path, engines: list[str], threads: int, rounds: int, spec: dict) -> dict:
    """Runs every engine's worker (`spec` plus "engine" and "threads") once per round, the engines
    alternating so that each round sees the same noise; the workers return rows with "layer", "flops" and
    "samples". Returns {(layer, flops): {engine: [samples of each round]}}."""
    out: dict = {}
    for _ in range(rounds):
        for engine in engines:
            for r in run_worker(script, {**spec, "engine": engine, "threads": threads}, threads):
                out.setdefault((r["layer"], r["flops"]), {}).setdefault(engine, []).append(r["samples"])
    return out


def US(digits: int = 0):
    """A column of medians in microseconds, `digits` after the point (for engine_rows' `units`)."""
    return "us", lambda median_s, flops: f"{median_s * 1e6:.{digits}f}"


GFLOPS = ("GF/s", lambda median_s, flops: f"{flops / median_s * 1e-9:.1f}")


def engine_rows(rounds: dict, engines: list[str], threads: int, bench: str, units, ratios, key: str = "engine"):
    """(rows, columns, records) of alternate_engines' rounds: per (layer, flops) and engine, the median of the
    rounds in each of `units` [(suffix, format(median_s, flops))], then the `ratios` [(header, numerator engine,
    denominator engine)] of two engines' medians where both ran; records are summarize_rounds per engine,
    tagged with `bench`, the threads and the layer (the engine under `key`)."""
    rows, records = [], []
    for (layer, flops), by_engine in rounds.items():
        row = {"threads": threads, "layer": layer}
        med = {}
        for engine in engines:
            st = summarize_rounds(by_engine[engine])
            med[engine] = st["median_s"]
            for suffix, fmt in units:
                row[f"{engine} {suffix}"] = fmt(st["median_s"], flops)
            records.append({"bench": bench, "threads": threads, "layer": layer, key: engine, **st})
        for header, num, den in ratios:
            if num in med and den in med:
                row[header] = f"{med[num] / med[den]:.2f}"
        rows.append(row)
    cols = [("threads", "threads"), ("layer", "layer")]
    cols += [(f"{e} {suffix}", f"{e} {suffix}") for e in engines for suffix, _ in units]
    cols += [(header, header) for header, num, den in ratios if num in engines and den in engines]
    return rows, cols, records


def worker_spec_from_argv(argv: list[str] | None = None) -> dict | None:
    """The spec if this process is a worker (`--worker '<json>'` on the command line), else None."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) >= 2 and argv[0] == "--worker":
        return json.loads(argv[1])
    return None


def emit_worker_results(results: list[dict]) -> None:
    """The worker's last stdout line: what run_worker returns to the driver."""
    print(json.dumps(results), flush=True)


def parser_unless_worker(worker, doc: str) -> argparse.ArgumentParser | None:
    """The start of every benchmark's main(): in a worker process (`--worker '<json>'`) run `worker` on its
    spec, print the results for the driver and return None; otherwise the argument parser with the common
    options, for the benchmark to add its own."""
    spec = worker_spec_from_argv()
    if spec is not None:
        emit_worker_results(worker(spec))
        return None
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_common_args(parser)
    return parser


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="PATH", help="append one JSON line per result to PATH")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternate all configurations this many times (default 3); see summarize_rounds")
    parser.add_argument("--min-time", type=float, default=0.25, help="seconds of timed calls per case and round")


def cpu_info() -> dict:
    """Model name and the 'cpu MHz' line of /proc/cpuinfo (the nominal clock the kernel reports)."""
    info = {"machine": platform.machine(), "model": platform.processor() or "unknown", "mhz": None,
            "cores": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                info["model"] = value.strip()
            elif key.strip() == "cpu MHz" and info["mhz"] is None:
                info["mhz"] = float(value)
    except OSError:
        pass
    return info


_SPIN = """
import time
end = time.perf_counter() + {seconds}
c0, t0 = time.process_time(), time.perf_counter()
while time.perf_counter() < end:
    pass
print((time.process_time() - c0) / (time.perf_counter() - t0))
"""


def cpu_shares(processes: int | None = None, seconds: float = 0.5) -> list[float]:
    """The share of a CPU each of `processes` spinning processes (one per CPU by default) got at once: 1.0 each
    on a quiet machine. A VM's host can hold its vCPUs back without the guest counting it as steal (a 2-vCPU
    VM at times gives two spinning threads 0.63-0.80 of a CPU each, one alone 0.99): 2-thread timings taken
    then measure the host. The time a process waited is its clock time less its CPU time."""
    n = processes or os.cpu_count() or 1
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN.format(seconds=seconds)], stdout=subprocess.PIPE,
                              text=True) for _ in range(n)]
    return [float(p.communicate()[0]) for p in procs]


def cross_core(threads: int = 2) -> dict | None:
    """What handing data between cores costs now: benchmarks/pool_jobs.c at `threads` threads (an empty job of
    mxcc's pool, and reading 128 KB that another core wrote in the job before, less reading one's own). A VM's
    vCPUs can sit close or far apart, and the host moves them: the AMD Zen 4 2-vCPU VM alternates, minutes at a
    time, between ~15 us (empty job 0.5 us) and ~60 us (1.3 us), and every 2-thread forward of both engines
    is slower in the second (SqueezeNet's 1.5-2x). None where it cannot be built (no gcc) or run."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "pool_jobs"
        built = subprocess.run(["gcc", "-O3", "-march=native", "-pthread", f"-I{root / 'runtime_c' / 'pool'}",
                                str(root / "benchmarks" / "pool_jobs.c"), str(root / "runtime_c" / "pool" / "pool.c"),
                                "-o", str(exe)], capture_output=True)
        if built.returncode != 0:
            return None
        ran = subprocess.run([str(exe), str(threads)], capture_output=True, text=True)
    out = ran.stdout.split()
    if ran.returncode != 0 or len(out) < 7:
        return None
    # the last row: threads, empty us, fma us, x, local us, remote us, remote-local
    return {"threads": int(out[-7]), "empty_us": float(out[-6]), "remote_extra_us": float(out[-1])}


def describe_cross_core(c: dict | None) -> str:
    if c is None:
        return "cross-core cost not measured (benchmarks/pool_jobs.c did not build or run)"
    return (f"an empty {c['threads']}-thread job {c['empty_us']:.2f} us, reading 128 KB another core wrote "
            f"{c['remote_extra_us']:.0f} us more than one's own")


def print_table(rows: list[dict], columns: list[tuple[str, str]]) -> None:
    """rows of dicts as an aligned text table; columns = [(header, key)], values preformatted or numbers."""
    def fmt(value):
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
        return str(value)

    cells = [[fmt(row.get(key)) for _, key in columns] for row in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, (h, _) in enumerate(columns)]
    print("  ".join(h.rjust(w) for (h, _), w in zip(columns, widths)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(v.rjust(w) for v, w in zip(c, widths)))


def append_jsonl(path: str | Path | None, records: list[dict]) -> None:
    """Appends each record as one JSON line (no-op when path is None)."""
    if not path:
        return
    with open(path, "a", encoding="utf-8") as f:
        for rec in records:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
