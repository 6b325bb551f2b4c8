"""Ray's cost: ResNet-18 v1 at batch 32 through `mxcc.ray.map_batches` on a local Ray cluster of 2 actors x 1
thread, beside one plain Python process running the same batches on 2 threads.

    python benchmarks/ray_inference.py [--images 512] [--rounds 3] [--json out.jsonl]

The network (tests/data/models/resnet18_v1, the weights `mxcc compile --random-params` gives it) is compiled
once for batch 32 into a temporary directory; both configurations load that directory. The images are the
same random float32 (N, 3, 224, 224) in both.

- process: a fresh Python, `mxcc.load`, `set_num_threads(2)`, then `forward` batch after batch over the
  images (numpy in, numpy out).
- ray: a fresh Python, `ray.init(num_cpus=2)`, the images put in Ray's object store as blocks of 32 rows, then
  `mxcc.ray.map_batches(ds, dir, batch_size=32, concurrency=2, threads_per_actor=1)`, every result row pulled
  back to the driver. The actors stamp each batch with the wall-clock times it started and ended.

Steady state (actors up): for each worker (an actor, or the one process), the rows it finished after its first
batch divided by the time from the end of its first batch to the end of its last; the workers' rates add up.
That includes everything Ray does between two batches of an actor (moving blocks, Arrow <-> numpy, the
driver pulling results), and leaves out the start-up and the tail where one actor has run out of work.
Start-up, apart: `ray.init`, then the time from `map_batches` until every actor is computing its first batch
(starting the actor processes, the network fetched from the object store and loaded); for the process, its
`mxcc.load`. End to end: all images over the job's whole time (without `ray.init`).

Rounds alternate the two configurations, each in a fresh process (benchmarks/harness.py), so a noisy phase of
the machine shifts both; the table shows each one's best round and `paired` the median over rounds of that
round's ray/process ratio of steady-state images/s. Another job on a 2-core machine hurts the 2-thread process
far more than the actors (OpenMP's spinning threads, docs/performance.md "OpenMP under contention"), so each
run first waits for the CPUs to be idle (`--quiet-wait`) and prints how busy they were just before it. Both configurations' outputs are checked to agree
(max |ray - process| <= 1e-5 of max |process|). Needs `pip install ".[ray]"`.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

NET = "resnet18_v1"
ROW = (3, 224, 224)
TOLERANCE = 1e-5


def images(n: int):
    import numpy as np
    return np.random.default_rng(0).standard_normal((n, *ROW)).astype(np.float32)


def steady(ends_by_worker: dict, batch: int) -> float:
    """Images/s after each worker's first batch: sum over workers of (batches - 1) * batch over the time from
    the end of its first batch to the end of its last (a worker with one batch adds nothing)."""
    rate = 0.0
    for ends in ends_by_worker.values():
        ends = sorted(ends)
        if len(ends) > 1:
            rate += (len(ends) - 1) * batch / (ends[-1] - ends[0])
    return rate


def _process(spec: dict) -> dict:
    import numpy as np
    import mxcc
    threads, b = int(os.environ["OMP_NUM_THREADS"]), spec["batch"]
    x = images(spec["images"])
    t0 = time.time()
    m = mxcc.load(spec["dir"])
    m.set_num_threads(threads)
    started = time.time()
    out, ends = [], []
    for i in range(0, len(x), b):
        out.append(m.forward(data=x[i:i + b])[0].max(1))
        ends.append(time.time())
    return dict(steady=steady({0: ends}, b), startup=started - t0, init=0.0, end_to_end=len(x) / (ends[-1] - t0),
                batches={"1 process": len(ends)}, rowmax=np.concatenate(out).tolist())


def _ray(spec: dict) -> dict:
    import numpy as np
    import pyarrow as pa
    import ray
    from ray.data.extensions import ArrowTensorArray
    import mxcc.ray

    class Stamped(mxcc.ray.Predictor):
        """The worker, plus the wall-clock time each batch started and ended, and the actor's pid."""

        def __call__(self, batch):
            t = time.time()
            out = super().__call__(batch)
            n = len(out["id"])
            out["t_start"], out["t_end"] = np.full(n, t), np.full(n, time.time())
            out["pid"] = np.full(n, os.getpid())
            return out

    b = spec["batch"]
    t0 = time.time()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    init = time.time() - t0
    ray.data.DataContext.get_current().enable_progress_bars = False
    x = images(spec["images"])
    ds = ray.data.from_arrow([pa.table({"id": np.arange(i, i + b), "data": ArrowTensorArray.from_numpy(x[i:i + b])})
                              for i in range(0, len(x), b)])
    t_job = time.time()
    out = mxcc.ray.map_batches(ds, spec["dir"], batch_size=b, concurrency=2, threads_per_actor=1,
                               predictor=Stamped)
    got = list(out.iter_batches(batch_size=None, batch_format="numpy"))
    t_done = time.time()
    ray.shutdown()
    col = {k: np.concatenate([g[k] for g in got]) for k in ("id", "t_start", "t_end", "pid")}
    if not (col["id"] == np.arange(len(x))).all():
        raise AssertionError("rows lost or out of order")
    name = next(k for k in got[0] if k not in col)
    firsts = np.unique(col["t_start"])            # one value per batch
    ends: dict = {}
    for pid, t_end in set(zip(col["pid"].tolist(), col["t_end"].tolist())):
        ends.setdefault(pid, []).append(t_end)
    started = max(min(s for p, s in zip(col["pid"], col["t_start"]) if p == pid) for pid in ends)
    return dict(steady=steady(ends, b), startup=started - t_job, init=init, end_to_end=len(x) / (t_done - t_job),
                batches={f"actor {i}": len(e) for i, e in enumerate(ends.values())}, n_batches=len(firsts),
                rowmax=np.concatenate([g[name] for g in got]).max(1).tolist())


def _cpu_busy() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    f = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + f[4]                  # idle + iowait
    return sum(f) - idle, sum(f)


def wait_for_quiet(max_wait: float, window: float = 2.0, busy_max: float = 0.1) -> float:
    """Waits (up to `max_wait` s) for a `window` in which the machine's CPUs are at most `busy_max` busy, so
    that a run does not start while another job holds a core; returns the busy fraction of the last window."""
    deadline = time.time() + max_wait
    while True:
        b0, t0 = _cpu_busy()
        time.sleep(window)
        b1, t1 = _cpu_busy()
        busy = (b1 - b0) / max(t1 - t0, 1)
        if busy <= busy_max or time.time() >= deadline:
            return busy


def worker(spec: dict) -> list[dict]:
    return [(_ray if spec["engine"] == "ray" else _process)(spec)]


def compile_net(out_dir: Path, batch: int) -> Path:
    import mxcc
    from cnn import MODELS, network_params
    shape = (batch, *ROW)
    mxcc.compile(MODELS / NET / f"{NET}-symbol.json", {"data": shape}, network_params(NET, shape),
                 out_dir=out_dir, name=NET)
    return out_dir


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--images", type=int, default=512, help="images per job (default 512: 16 batches of 32)")
    ap.add_argument("--batch", type=int, default=32, help="the compiled batch and Ray's batch_size")
    ap.add_argument("--quiet-wait", type=float, default=120.0,
                    help="before each run, wait up to this many seconds for the CPUs to be idle (default 120)")
    args = ap.parse_args()
    import numpy as np
    cpu = harness.cpu_info()
    with tempfile.TemporaryDirectory(prefix="mxcc-ray-bench-") as tmp:
        t = time.perf_counter()
        d = compile_net(Path(tmp) / NET, args.batch)
        print(f"{NET} batch {args.batch} compiled in {time.perf_counter() - t:.1f} s; {args.images} images per job; "
              f"{cpu['model']}, {cpu['cores']} cores")
        spec = {"dir": str(d), "images": args.images, "batch": args.batch}
        runs: dict[str, list[dict]] = {"process": [], "ray": []}
        for r in range(args.rounds):
            for engine, threads in (("process", 2), ("ray", 1)):
                before = wait_for_quiet(args.quiet_wait)
                res = harness.run_worker(__file__, {**spec, "engine": engine}, threads)[0]
                res["busy_before"] = before
                runs[engine].append(res)
                print(f"  round {r + 1} {engine:7s}: {res['steady']:6.1f} images/s steady, start-up "
                      f"{res['init'] + res['startup']:.2f} s, batches {res['batches']}; CPUs {before:.0%} busy "
                      f"just before", flush=True)
    ref = np.array(runs["process"][0]["rowmax"])
    for engine, rs in runs.items():
        for res in rs:
            err = float(np.abs(np.array(res.pop("rowmax")) - ref).max() / np.abs(ref).max())
            if not err <= TOLERANCE:
                raise AssertionError(f"{engine}: outputs differ from the process's ({err:.2e})")
    best = {e: max(rs, key=lambda res: res["steady"]) for e, rs in runs.items()}
    paired = statistics.median(r["steady"] / p["steady"] for p, r in zip(runs["process"], runs["ray"]))
    rows = [{"config": "1 process x 2 threads", "steady": best["process"]["steady"],
             "e2e": best["process"]["end_to_end"], "init": "-", "up": f"{best['process']['startup']:.2f}"},
            {"config": "Ray: 2 actors x 1 thread", "steady": best["ray"]["steady"], "e2e": best["ray"]["end_to_end"],
             "init": f"{best['ray']['init']:.2f}", "up": f"{best['ray']['startup']:.2f}"}]
    harness.print_table(rows, [("configuration", "config"), ("steady images/s", "steady"),
                               ("end-to-end images/s", "e2e"), ("ray.init s", "init"), ("start-up s", "up")])
    ratio = best["ray"]["steady"] / best["process"]["steady"]
    print(f"Ray / process, steady-state images/s: {ratio:.3f} (best rounds), paired {paired:.3f} "
          f"(median over {args.rounds} rounds); Ray's start-up: {best['ray']['init']:.2f} s ray.init + "
          f"{best['ray']['startup']:.2f} s until both actors compute")
    harness.append_jsonl(args.json, [{"bench": "ray_inference", "net": NET, "batch": args.batch, "engine": e,
                                      "images": args.images, "cpu": cpu["model"], **{k: v for k, v in res.items()
                                                                                     if k != "batches"}}
                                     for e, rs in runs.items() for res in rs])


if __name__ == "__main__":
    main()
