"""Training throughput of the cpp-package MLP (784-128-64-10, SoftmaxOutput, batch 100, SGD lr 0.1 wd 1e-2):
mxcc vs PyTorch eager vs MXNet 1.9.1, side by side, samples/sec, 1 and 2 threads.

    python benchmarks/train_mlp.py [--threads 1,2] [--steps 400] [--rounds 2] [--mxnet-python PATH] [--json F]

mxcc is measured two ways: `exe.step(X=..., label=...)` from Python (one C call per batch: forward,
backward and update), and its standalone `mlp_train` program (data loading in C included). PyTorch runs
nn.Sequential + CrossEntropyLoss + torch.optim.SGD; MXNet (when a python with mxnet 1.9.1 is given, e.g.
a venv made with `pip install mxnet==1.9.1 numpy==1.23.5`) runs simple_bind + forward/backward + its
SGD updater, the C++ example's loop. Every engine trains on the same MNIST batches (shipped test set).
Each engine and thread count runs in a fresh process (benchmarks/harness.py).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

MNIST = ROOT / "examples" / "data" / "mnist"
BATCH, LR, WD = 100, 0.1, 1e-2


def _data(n):
    from mxcc.train.idx import load_mnist
    images, labels = load_mnist(MNIST, "t10k")
    x = (images[:n].reshape(n, 784) / 255.0).astype("float32")
    return x, labels[:n].astype("float32")


def _rate(step, batches, steps: int) -> float:
    for i in range(20):                       # warm-up
        step(*batches[i % len(batches)])
    t0 = time.perf_counter()
    for i in range(steps):
        step(*batches[i % len(batches)])
    return steps * BATCH / (time.perf_counter() - t0)


def worker_mxcc(spec):
    import numpy as np
    import mxcc
    from mxcc.optimizer import SGD
    x, y = _data(8000)
    batches = [(np.ascontiguousarray(x[i:i + BATCH]), np.ascontiguousarray(y[i:i + BATCH]))
               for i in range(0, 8000, BATCH)]
    exe = mxcc.compile(ROOT / "tests/data/models/mlp/mlp-symbol.json", {"X": (BATCH, 784)}, train=True,
                       optimizer=SGD(learning_rate=LR, wd=WD, rescale_grad=1.0 / BATCH), name="mlp",
                       out_dir=spec["out"], threads=int(os.environ["OMP_NUM_THREADS"]))
    rng = np.random.default_rng(0)
    exe.set_params({k: (rng.uniform(-0.07, 0.07, s)).astype(np.float32) for k, s in exe.param_shapes.items()})
    return [{"engine": "mxcc step() from Python", "samples_per_s": _rate(lambda a, b: exe.step(X=a, label=b),
                                                                        batches, spec["steps"])}]


def worker_mxcc_program(spec):
    threads = os.environ["OMP_NUM_THREADS"]
    out = subprocess.run([str(Path(spec["out"]) / "mlp_train"), "--images", str(MNIST / "t10k-images-idx3-ubyte.gz"),
                          "--labels", str(MNIST / "t10k-labels-idx1-ubyte.gz"), "--epochs", "3", "--lr", str(LR),
                          "--wd", str(WD), "--momentum", "0", "--threads", threads],
                         capture_output=True, text=True, check=True).stdout
    rates = [float(line.split()[2]) for line in out.splitlines() if line.startswith("Epoch")]
    return [{"engine": "mxcc mlp_train (C program)", "samples_per_s": max(rates)}]


def worker_torch(spec):
    import torch
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    x, y = _data(8000)
    xs = torch.from_numpy(x)
    ys = torch.from_numpy(y).long()
    batches = [(xs[i:i + BATCH], ys[i:i + BATCH]) for i in range(0, 8000, BATCH)]
    net = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(net.parameters(), lr=LR, weight_decay=WD)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(a, b):
        opt.zero_grad()
        loss_fn(net(a), b).backward()
        opt.step()
    return [{"engine": f"PyTorch {torch.__version__} eager", "samples_per_s": _rate(step, batches, spec["steps"])}]


MXNET_WORKER = r'''
import json, os, sys, time
import numpy as np
import mxnet as mx
sys.path.insert(0, %(root)r)
x, y = np.load(%(data)r)["x"], np.load(%(data)r)["y"]
sym = mx.sym.load(%(sym)r)
exe = sym.simple_bind(mx.cpu(), X=(100, 784), label=(100,))
for k, v in exe.arg_dict.items():
    if k not in ("X", "label"):
        v[:] = np.random.uniform(-0.07, 0.07, v.shape)
opt = mx.optimizer.SGD(learning_rate=%(lr)r, wd=%(wd)r, rescale_grad=1.0 / 100)
upd = mx.optimizer.get_updater(opt)
names = [n for n in sym.list_arguments() if n not in ("X", "label")]
def step(i):
    exe.arg_dict["X"][:] = x[i:i + 100]
    exe.arg_dict["label"][:] = y[i:i + 100]
    exe.forward(is_train=True)
    exe.backward()
    for j, n in enumerate(names):
        upd(j, exe.grad_dict[n], exe.arg_dict[n])
    mx.nd.waitall()
for i in range(20):
    step((i %% 80) * 100)
t0 = time.perf_counter()
for i in range(%(steps)d):
    step((i %% 80) * 100)
print(json.dumps([{"engine": "MXNet " + mx.__version__, "samples_per_s": %(steps)d * 100 / (time.perf_counter() - t0)}]))
'''


def run_mxnet(python: str, threads: int, steps: int, tmp: Path) -> list[dict]:
    import numpy as np
    x, y = _data(8000)
    np.savez(tmp / "mnist8000.npz", x=x, y=y)
    code = MXNET_WORKER % {"root": str(ROOT), "data": str(tmp / "mnist8000.npz"), "lr": LR, "wd": WD,
                           "sym": str(ROOT / "tests/data/models/mlp/mlp-symbol.json"), "steps": steps}
    env = harness.worker_env(threads)
    env["MXNET_ENGINE_TYPE"] = "NaiveEngine" if threads == 1 else env.get("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice")
    r = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


WORKERS = {"mxcc": worker_mxcc, "mxcc_program": worker_mxcc_program, "torch": worker_torch}


def main() -> None:
    ap = harness.parser_unless_worker(lambda spec: WORKERS[spec["engine"]](spec), __doc__)
    if ap is None:
        return
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--mxnet-python", default=os.environ.get("MXNET_PYTHON"),
                    help="a python with mxnet==1.9.1 installed (optional)")
    args = ap.parse_args()
    import tempfile
    tmp = Path(tempfile.mkdtemp(prefix="mxcc-train-bench-"))
    best: dict[tuple, float] = {}
    for _ in range(args.rounds):
        for t in [int(v) for v in args.threads.split(",")]:
            results = []
            for engine in ("mxcc", "mxcc_program", "torch"):
                results += harness.run_worker(__file__, {"engine": engine, "steps": args.steps, "out": str(tmp / "mlp")}, t)
            if args.mxnet_python:
                results += run_mxnet(args.mxnet_python, t, args.steps, tmp)
            for r in results:
                key = (t, r["engine"])
                best[key] = max(best.get(key, 0.0), r["samples_per_s"])
    rows = []
    for (t, engine), rate in sorted(best.items()):
        torch_rate = next((v for (tt, e), v in best.items() if tt == t and e.startswith("PyTorch")), None)
        mx_rate = next((v for (tt, e), v in best.items() if tt == t and e.startswith("MXNet")), None)
        rows.append({"threads": t, "engine": engine, "samples_per_s": f"{rate:,.0f}",
                     "vs_torch": f"{rate / torch_rate:.2f}x" if torch_rate else None,
                     "vs_mxnet": f"{rate / mx_rate:.2f}x" if mx_rate else None})
    print(f"MLP training, batch {BATCH}, SGD lr {LR} wd {WD}: samples/sec (best of {args.rounds} rounds)")
    harness.print_table(rows, [("threads", "threads"), ("engine", "engine"), ("samples/s", "samples_per_s"),
                               ("vs PyTorch", "vs_torch"), ("vs MXNet", "vs_mxnet")])
    harness.append_jsonl(args.json, [dict(r, bench="train_mlp") for r in rows])


if __name__ == "__main__":
    main()
