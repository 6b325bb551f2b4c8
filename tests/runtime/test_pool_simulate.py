"""The pool's simulation (runtime_c/pool/mxcc_pool.h, mxcc_pool_simulate) and the bench's --simulate-threads
(runtime_c/driver/simulate.c): the claiming rule on fixed chunk times and jobs under simulation in C
(tests/runtime/pool_simulate_sanity.c), then LeNet's bench at 4 and 16 simulated threads: the outputs of a
normal run, a row per kernel that runs jobs, and only bounds that hold whatever the chunks take (sim <= serial,
efficiency <= 1): no timing is asserted."""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import mxcc
from mxcc_testing import DATA, needs_gcc

pytestmark = needs_gcc
RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"
CC = os.environ.get("MXCC_CC") or os.environ.get("CC") or "gcc"
LENET = DATA / "models" / "lenet"


@pytest.mark.parametrize("openmp", [False, True])
def test_schedule_and_simulated_jobs(openmp, tmp_path):
    """With OpenMP the pool is not selected: a simulation runs the jobs all the same."""
    exe = tmp_path / "pool_simulate_sanity"
    build = subprocess.run([CC, "-O2", "-g", "-Wall", "-Werror", *(["-fopenmp"] if openmp else []), f"-I{RUNTIME}",
                            str(Path(__file__).with_name("pool_simulate_sanity.c")), str(RUNTIME / "pool" / "pool.c"),
                            "-lpthread", "-o", str(exe)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stdout + r.stderr


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "lenet"
    mxcc.compile(LENET / "lenet-symbol.json", {"data": (8, 1, 28, 28)}, LENET / "lenet-0000.params", out_dir=out,
                 name="lenet")
    x = np.random.default_rng(5).standard_normal((8, 1, 28, 28)).astype(np.float32)
    np.save(out / "x.npy", x)
    return out


def bench(lenet, *args):
    return subprocess.run([str(lenet / "lenet_bench"), "--params", str(lenet / "params.params"), "--input",
                           f"data={lenet / 'x.npy'}", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_simulated_runs_give_the_outputs_and_a_row_per_parallel_kernel(lenet, tmp_path):
    r = bench(lenet, "--iters", 1, "--warmup", 0, "--output", tmp_path / "y.npy")
    assert r.returncode == 0, r.stderr
    want = np.load(tmp_path / "y.npy")
    plan = json.loads((lenet / "plan.json").read_text())
    # LeNet at batch 8: both convolutions and fc1 (8 x 800 -> 500) split their work; fc2 (500 -> 10) is too small
    parallel = {g["name"] for g in plan["groups"] if g["ops"][0] == "Convolution"} | {"fc1"}
    for T in (4, 16):
        js, tl = tmp_path / f"sim{T}.json", tmp_path / f"sim{T}.timeline"
        r = bench(lenet, "--simulate-threads", T, "--simulate-json", js, "--iters", 2, "--warmup", 1,
                  "--output", tmp_path / f"y{T}.npy", "--timeline", tl)
        assert r.returncode == 0, r.stderr
        assert f"simulated on {T} threads, 2 forwards" in r.stdout and f", {T} threads)" in r.stdout, r.stdout
        np.testing.assert_array_equal(np.load(tmp_path / f"y{T}.npy"), want)   # any split: the same bits
        assert tl.stat().st_size > 0            # the timeline still gets its events (3 forwards' worth)
        d = json.loads(js.read_text())
        assert d["threads"] == T and d["forwards"] == 2 and d["network"] == "lenet"
        rows = d["kernels"]
        names = [k["name"] for k in rows]
        # each row is a kernel of the plan, once, in kernel order
        assert parallel <= set(names), (names, parallel)
        assert set(names) <= {g["name"] for g in plan["groups"]} and len(set(names)) == len(names)
        assert [k["index"] for k in rows] == sorted(k["index"] for k in rows)
        eps = 1e-6
        for k in rows:
            assert k["jobs"] > 0 and k["chunks"] >= 1, k
            assert 1 <= k["min_threads"] <= k["threads"] <= T, k
            assert 0 < k["efficiency"] <= 1 + eps, k
            assert 0 < k["sim_us"] <= k["serial_us"] + 1e-3, k
            assert k["outside_us"] >= 0
        assert max(k["threads"] for k in rows) == T       # the kernels split for T: the conv2 of 8 images does
        assert d["unattributed"]["jobs"] == 0              # profiled build: every job inside a kernel call
        total = sum(k["serial_us"] for k in rows)
        assert abs(d["serial_us"] - total) <= 1e-3 * len(rows) + 1e-6 * total
        assert d["sim_us"] <= d["serial_us"] and d["speedup"] >= 1 and d["outside_us"] >= 0
        assert d["estimate_us"] == pytest.approx(d["outside_us"] + d["sim_us"], abs=2e-3)


@pytest.mark.parametrize("args, words", [
    (["--simulate-threads", "0"], "expected 1..255"),
    (["--simulate-threads", "x4"], "expected 1..255"),
    (["--simulate-threads", "4", "--threads", "2"], "drop --threads"),
    (["--simulate-threads", "4", "--no-pool"], "drop --threads and --no-pool"),
    (["--simulate-json", "out.json"], "needs --simulate-threads"),
])
def test_simulate_usage_errors(lenet, args, words):
    r = bench(lenet, *args)
    assert r.returncode == 2 and words in r.stderr, r.stderr
