"""mxcc.profiler: MXNet's API on compiled modules, checked against the events themselves.

The trace is checked by `validate_trace` (JSON object format; required fields per event phase; X events
per (pid, tid) nested or disjoint; timestamps monotone per track), since no trace processor runs here
(formats.md §6). The dumps() table is parsed back from its fixed-width layout and compared with the trace
events; the layout itself is compared line by line with MXNet 1.9's printout. Counts are exact (forwards x
kernels); times are compared with the wall clock around the forwards.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import mxcc
from mxcc import profiler
from mxcc.profiler.report import Stat, format_table, layer_name

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "tests" / "data" / "models" / "mlp"
LENET = ROOT / "tests" / "data" / "models" / "lenet"
MXNET_REF = ROOT / "tests" / "data" / "profiler" / "lenet_profile_dumps.txt"   # copied from shared/mxnet-ref
EPS_US = 2e-3       # ts and dur are written with ns precision: a child's end may round 1-2 ns past its parent's


# -- the trace validator -------------------------------------------------------------------------------------
def validate_trace(doc) -> dict:
    """Checks a Chrome trace (object format) as Perfetto/chrome://tracing need it; returns it grouped:
    {"kernels": [...], "passes": [...], "scopes": [...], "counters": {(pid, name): [events]}, "meta": [...]}."""
    if isinstance(doc, (str, Path)):
        doc = json.loads(Path(doc).read_text())
    assert isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list)
    assert doc.get("displayTimeUnit") in (None, "ms", "ns")
    tracks, counters = defaultdict(list), defaultdict(list)
    out = {"kernels": [], "passes": [], "scopes": [], "counters": counters, "meta": []}
    for ev in doc["traceEvents"]:
        ph = ev.get("ph")
        assert isinstance(ev.get("name"), str) and ev["name"], ev
        assert isinstance(ev.get("pid"), int) and 0 < ev["pid"] < 1 << 16, ev     # small, and never 0
        if ph == "M":
            assert ev["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index"), ev
            assert isinstance(ev.get("args"), dict), ev
            if ev["name"].startswith("thread"):
                assert isinstance(ev.get("tid"), int), ev
            out["meta"].append(ev)
        elif ph == "X":
            assert isinstance(ev.get("tid"), int) and 0 < ev["tid"] < 1 << 16, ev
            for key in ("ts", "dur"):
                assert isinstance(ev.get(key), (int, float)) and math.isfinite(ev[key]) and ev[key] >= 0, ev
            tracks[(ev["pid"], ev["tid"])].append(ev)
            kind = {"pass": "passes", "scope": "scopes"}.get(ev.get("cat"), "kernels")
            out[kind].append(ev)
        elif ph == "C":
            assert isinstance(ev.get("ts"), (int, float)) and ev["ts"] >= 0, ev
            assert isinstance(ev.get("args"), dict) and ev["args"], ev
            assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in ev["args"].values()), ev
            counters[(ev["pid"], ev["name"])].append(ev)
        else:
            raise AssertionError(f"unexpected event phase {ph!r}: {ev}")
    for key, evs in tracks.items():
        ts = [e["ts"] for e in evs]
        assert ts == sorted(ts), f"X events of track {key} are not in time order"
        stack: list[float] = []           # ends of the open slices
        for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1] <= e["ts"] + EPS_US:
                stack.pop()
            end = e["ts"] + e["dur"]
            assert not stack or end <= stack[-1] + EPS_US, f"{e['name']} overlaps its parent on track {key}"
            stack.append(end)
    for key, evs in counters.items():
        ts = [e["ts"] for e in evs]
        assert ts == sorted(ts), f"counter {key} is not in time order"
    return out


def parse_table(text: str) -> dict[str, dict[str, dict]]:
    """dumps() text -> {category: {name: {count, total?, min, max, avg}}} (long names overflow the 25-char
    column as in MXNet, so rows are split from the right)."""
    lines = text.split("\n")
    assert lines[0] == "" and lines[1] == "Profile Statistics:"
    assert lines[2] == "\tNote the difference in units for different entries."
    cats, i = {}, 3
    while i < len(lines) and lines[i]:
        cat, header = lines[i], lines[i + 2]
        assert lines[i + 1] == "=" * 17 and lines[i + 3].startswith("----")
        memory = "Use  (kB)" in header
        keys = ("count", "min", "max", "avg") if memory else ("count", "total", "min", "max", "avg")
        rows, i = {}, i + 4
        while lines[i]:
            parts = lines[i].rsplit(None, len(keys))
            assert len(lines[i]) == (92 if memory else 109) + max(0, len(parts[0]) - 25), repr(lines[i])
            rows[parts[0]] = {k: (int(v) if k == "count" else float(v)) for k, v in zip(keys, parts[1:])}
            i += 1
        cats[cat] = rows
        i += 1
    return cats


# -- fixtures --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mlp():
    return mxcc.compile(MLP / "mlp-symbol.json", {"X": (4, 784)}, MLP / "mlp-0000.params")


@pytest.fixture(scope="module")
def lenet():
    return mxcc.compile(LENET / "lenet-symbol.json", {"data": (2, 1, 28, 28)}, LENET / "lenet-0000.params")


@pytest.fixture
def prof(tmp_path):
    """A fresh profiler writing to tmp_path/profile.json; reset again afterwards (no writes at exit)."""
    profiler._reset()
    path = tmp_path / "profile.json"
    profiler.set_config(filename=path, continuous_dump=False, aggregate_stats=True)
    yield path
    profiler._reset()


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _run(mod, n: int, **inputs) -> float:
    """n forwards; their wall time in µs."""
    t0 = time.perf_counter()
    for _ in range(n):
        mod.forward(**inputs)
    return (time.perf_counter() - t0) * 1e6


def _child_env() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("MXCC_PROFILER_AUTOSTART", None)
    return env


# -- the trace -------------------------------------------------------------------------------------------
def test_trace_has_one_event_per_kernel_call_named_by_layer(prof, mlp):
    n = 20
    profiler.set_state("run")
    wall = _run(mlp, n, X=_x((4, 784)))
    profiler.set_state("stop")
    profiler.dump()
    t = validate_trace(prof)
    k = len(mlp.kernels)
    assert len(t["kernels"]) == n * k and len(t["passes"]) == n
    assert [e["name"] for e in t["kernels"][:k]] == [layer_name(kk) for kk in mlp.kernels]
    assert t["kernels"][0]["name"] == "fullyconnected0+activation0"
    assert t["kernels"][0]["cat"] == "FullyConnected+Activation"
    a = t["kernels"][0]["args"]
    assert a["phase"] == "forward" and a["members"] == ["fullyconnected0", "activation0"]
    assert a["inputs"][0] == [4, 784] and a["outputs"] == [[4, 128]] and a["flops"] == mlp.kernels[0]["flops"]
    assert a["GFLOP/s"] > 0 and a["function"] == "mlp_fullyconnected0"
    assert {e["pid"] for e in t["kernels"]} == {2} and {e["tid"] for e in t["kernels"]} == {1}   # forward
    assert sum(e["dur"] for e in t["kernels"]) <= wall
    assert min(e["ts"] for e in t["kernels"]) >= 0
    names = {(e["name"], e.get("tid"), e["args"].get("name")) for e in t["meta"] if e["pid"] == 2}
    assert ("process_name", None, "mlp (X=(4, 784), label=(4,))") in names
    assert ("thread_name", 1, "forward") in names and not any(n[1] == 2 for n in names)   # no backward run
    other = json.loads(prof.read_text())["otherData"]
    assert other["finished"] is True and other["dropped_events"] == 0 and other["clock"] == "CLOCK_MONOTONIC"


def test_dumps_table_matches_the_events(prof, mlp):
    n = 12
    profiler.set_state("run")
    _run(mlp, n, X=_x((4, 784)))
    profiler.set_state("stop")
    text = profiler.dumps()
    profiler.dump()
    t = validate_trace(prof)
    table = parse_table(text)
    assert list(table) == ["Device Storage", "operator", "operator (by type)"]
    durs = defaultdict(list)
    for e in t["kernels"]:
        durs[e["name"]].append(e["dur"] / 1e3)       # ms
    assert set(table["operator"]) == set(durs)
    for name, row in table["operator"].items():
        assert row["count"] == n == len(durs[name])
        assert row["total"] == pytest.approx(sum(durs[name]), abs=1.5e-4)
        assert row["min"] == pytest.approx(min(durs[name]), abs=1.5e-4)
        assert row["max"] == pytest.approx(max(durs[name]), abs=1.5e-4)
    totals = [r["total"] for r in table["operator"].values()]
    assert totals == sorted(totals, reverse=True)                   # sort_by='total', descending
    by_type = table["operator (by type)"]
    assert by_type["FullyConnected+Activation"]["count"] == 2 * n and by_type["SoftmaxOutput"]["count"] == n
    assert table["Device Storage"]["Memory: mlp arena"]["max"] == mlp.meta["lower_bound_bytes"] / 1e3
    js = json.loads(profiler.dumps(format="json", sort_by="count", ascending=True))
    assert js["Unit"] == {"Time": "ms", "Memory": "kB"}
    assert js["Time"]["operator"]["fullyconnected2"]["Count"] == n
    # reset clears the statistics (MXNet: a null-pointer crash without aggregate_stats), not the trace
    profiler.dumps(reset=True)
    assert "operator" not in parse_table(profiler.dumps())
    profiler.dump()
    assert len(validate_trace(prof)["kernels"]) == n * len(mlp.kernels)


def test_table_layout_is_mxnets_to_the_character():
    ref = MXNET_REF.read_text().split("\n")
    start = ref.index("operator")
    rows = [line for line in ref[start + 4:] if line]
    stats = {}
    for line in rows:
        name, count, total, lo, hi, _ = line.rsplit(None, 5)
        s = stats[name] = Stat()
        s.add(int(count), float(total) * 1e6, float(lo) * 1e6, float(hi) * 1e6)
    ours = format_table({"operator": stats}, "total", False).split("\n")
    assert ours[:3] == ref[:3]
    assert ours[3:] == ref[start:start + 4 + len(rows)] + ["", ""]
    memory = format_table({"Device Storage": {"Memory: cpu/0": Stat()}}, "total", False)
    assert memory == "\n".join(ref[:3]) + "\n"                  # categories without rows are left out
    s = Stat()
    s.add(16, 0.0, 92160.0, 485408.0, 485408.0)
    lines = format_table({"Device Storage": {"Memory: cpu/0": s}}, "total", False).split("\n")
    assert lines[3:7] == ref[3:7]                                # header and rule of a memory category
    assert lines[7][:75] == ref[7][:75]                          # count, min, max (Avg: see _row)


def test_dump_is_valid_json_every_time_and_after_finished(prof, mlp):
    x = _x((4, 784))
    profiler.set_state("run")
    _run(mlp, 3, X=x)
    profiler.dump(finished=False)
    first = validate_trace(prof)
    assert len(first["passes"]) == 3 and json.loads(prof.read_text())["otherData"]["finished"] is False
    _run(mlp, 2, X=x)
    profiler.dump(finished=True)
    assert len(validate_trace(prof)["passes"]) == 5
    _run(mlp, 1, X=x)                        # MXNet: "Profiler hasn't been run" after a finished dump
    profiler.dump()
    assert len(validate_trace(prof)["passes"]) == 6
    assert not [p for p in prof.parent.iterdir() if p.name.endswith(".tmp")]


def test_pause_and_resume_drop_the_events_in_between(prof, mlp):
    x = _x((4, 784))
    profiler.set_state("run")
    _run(mlp, 3, X=x)
    profiler.pause()
    _run(mlp, 5, X=x)
    profiler.resume()
    _run(mlp, 2, X=x)
    profiler.set_state("stop")
    _run(mlp, 4, X=x)
    profiler.dump()
    assert len(validate_trace(prof)["kernels"]) == 5 * len(mlp.kernels)


def test_memory_counters_follow_the_plan(prof, lenet, mlp):
    profiler.set_state("run")
    _run(lenet, 3, data=_x((2, 1, 28, 28)))
    _run(mlp, 2, X=_x((4, 784)))
    profiler.set_state("stop")
    profiler.dump()
    t = validate_trace(prof)
    pids = {e["args"]["name"].split()[0]: e["pid"] for e in t["meta"] if e["name"] == "process_name"}
    for pid, mod, n in ((pids["lenet"], lenet, 3), (pids["mlp"], mlp, 2)):
        counter = t["counters"][(pid, "arena in use")]
        arena = [e["args"]["bytes"] for e in counter]
        k = len(mod.kernels)
        assert len(arena) == (k + 1) * n                    # each kernel's start, and each forward's end
        # the planner's lower bound is the peak of the aligned live bytes over its steps: equal, not <=
        assert max(arena) == mod.meta["lower_bound_bytes"] <= mod.meta["arena_bytes"]
        assert arena[k::k + 1] == [0] * n                   # nothing stays live after an inference forward
        kernels = [e for e in t["kernels"] if e["pid"] == pid]
        starts = [e for i, e in enumerate(counter) if i % (k + 1) != k]
        assert [e["ts"] for e in starts] == [e["ts"] for e in kernels]
        assert [e["args"]["bytes"] for e in starts] == [e["args"]["arena_live_bytes"] for e in kernels]
        tensors = t["counters"][(pid, "arena tensors")]
        assert len(tensors) == k + 1                        # the first forward only
        assert set(tensors[0]["args"]) == {b["name"] for b in mod.meta["buffers"]}
        assert [sum(e["args"].values()) for e in tensors] == arena[:k + 1]
        live = [[name for name, v in e["args"].items() if v] for e in tensors[:k]]
        assert live == [sorted(e["args"]["arena_live"], key=list(tensors[0]["args"]).index) for e in kernels[:k]]
    # (a kernel's arena workspace is one of those buffers: none here, LeNet's convolutions keep their scratch
    # per thread in the context, packed path)


def test_training_phases_are_separate_threads(prof):
    ex = mxcc.compile(MLP / "mlp-symbol.json", {"X": (4, 784), "label": (4,)}, MLP / "mlp-0000.params",
                      train=True)
    x, y = _x((4, 784)), np.arange(4, dtype=np.float32)
    profiler.set_state("run")
    for _ in range(2):
        ex.forward(X=x, label=y)
        ex.backward()
        ex.update()
    ex.step(X=x, label=y)                        # all three phases in one C call
    profiler.set_state("stop")
    table = parse_table(profiler.dumps())
    profiler.dump()
    t = validate_trace(prof)
    phases = {"forward": 1, "backward": 2, "update": 3}
    assert sorted((e["name"], e["tid"]) for e in t["passes"]) == sorted(list(phases.items()) * 3)
    for e in t["kernels"]:
        assert e["tid"] == phases[e["args"]["phase"]] == phases[ex.kernels[e["args"]["kernel"]]["phase"]]
    assert len(t["kernels"]) == 3 * len(ex.kernels)
    assert table["operator (by type)"]["_backward_FullyConnected"]["count"] == 3 * 3
    assert {e["pid"] for e in t["kernels"]} == {2}          # the only module that ran: the first pid
    arena = [e["args"]["bytes"] for e in t["counters"][(2, "arena in use")]]
    assert max(arena) == ex.meta["lower_bound_bytes"] <= ex.meta["arena_bytes"]


def test_two_modules_are_two_processes_and_qualified_rows(prof, lenet, mlp):
    profiler.set_state("run")
    _run(mlp, 2, X=_x((4, 784)))
    _run(lenet, 2, data=_x((2, 1, 28, 28)))
    profiler.set_state("stop")
    table = parse_table(profiler.dumps())
    profiler.dump()
    t = validate_trace(prof)
    procs = {e["args"]["name"].split()[0]: e["pid"] for e in t["meta"] if e["name"] == "process_name"}
    assert sorted(procs) == ["lenet", "mlp"] and procs["mlp"] != procs["lenet"]
    assert {e["pid"] for e in t["kernels"]} == set(procs.values())
    assert "mlp:fullyconnected2" in table["operator"] and "lenet:conv1+relu1" in table["operator"]
    assert table["operator (by type)"]["Convolution+Activation"]["count"] == 4
    assert set(table["Device Storage"]) == {"Memory: mlp arena", "Memory: lenet arena"}


def test_a_freed_module_keeps_its_events(prof):
    mod = mxcc.compile(MLP / "mlp-symbol.json", {"X": (4, 784)}, MLP / "mlp-0000.params")
    profiler.set_state("run")
    _run(mod, 3, X=_x((4, 784)))
    del mod
    profiler.set_state("stop")
    profiler.dump()
    assert len(validate_trace(prof)["passes"]) == 3


def test_overflow_is_counted_not_a_crash(prof):
    profiler.set_config(filename=prof, continuous_dump=False, event_capacity=8)
    mod = mxcc.compile(MLP / "mlp-symbol.json", {"X": (4, 784)}, MLP / "mlp-0000.params")   # a new buffer
    profiler.set_state("run")
    _run(mod, 10, X=_x((4, 784)))
    with pytest.warns(RuntimeWarning, match="32 events of mlp .* were dropped"):
        profiler.dump()
    t = validate_trace(prof)
    assert len(t["kernels"]) == 8
    other = json.loads(prof.read_text())["otherData"]
    assert other["dropped_events"] == 32 and list(other["dropped_by_module"].values()) == [32]


def test_profile_false_records_nothing(prof):
    mod = mxcc.compile(MLP / "mlp-symbol.json", {"X": (4, 784)}, MLP / "mlp-0000.params", profile=False)
    with pytest.warns(RuntimeWarning, match="compiled with profile=False"):
        profiler.set_state("run")
    _run(mod, 3, X=_x((4, 784)))
    profiler.set_state("stop")
    profiler.dump()
    t = validate_trace(prof)
    assert not t["kernels"] and not t["counters"]
    modules = json.loads(prof.read_text())["otherData"]["modules"]
    assert {"pid": None, "name": "mlp", "profile_compiled": False} in modules
    assert "operator" not in parse_table(profiler.dumps())


def test_scope_runs_the_profiler_for_a_block(prof, mlp):
    x = _x((4, 784))
    _run(mlp, 2, X=x)
    with profiler.scope("outer"):
        with profiler.scope("inner"):
            _run(mlp, 2, X=x)
        _run(mlp, 1, X=x)
    _run(mlp, 2, X=x)
    profiler.dump()
    t = validate_trace(prof)
    assert len(t["passes"]) == 3
    assert [e["name"] for e in t["scopes"]] == ["outer", "outerinner"]     # append_mode joins, as MXNet 2.0
    outer = t["scopes"][0]
    assert all(outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] + EPS_US
               for e in t["kernels"])


def test_continuous_dump_in_a_thread_loses_nothing(prof, mlp):
    profiler.set_config(filename=prof, continuous_dump=True, dump_period=0.02)
    profiler.set_state("run")
    x, n = _x((4, 784)), 0
    deadline = time.monotonic() + 0.5
    while time.monotonic() < deadline:           # forwards race the collector's drains and rewrites
        mlp.forward(X=x)
        n += 1
        if n % 200 == 0 and prof.exists():
            validate_trace(prof)                 # whatever the collector last wrote is complete
    profiler.set_state("stop")                    # stop writes the final continuous dump
    t = validate_trace(prof)
    assert len(t["kernels"]) == n * len(mlp.kernels) and len(t["passes"]) == n


def test_api_errors(prof):
    with pytest.raises(TypeError, match="unknown key.*profile_everything"):
        profiler.set_config(profile_everything=True)
    with pytest.raises(TypeError):
        profiler.set_config(True)
    with pytest.raises(TypeError, match="dump_period"):
        profiler.set_config(dump_period=0)
    with pytest.raises(ValueError, match="'run' or 'stop'"):
        profiler.set_state("start")
    with pytest.raises(ValueError, match="sort_by"):
        profiler.dumps(sort_by="name")
    with pytest.raises(ValueError, match="format"):
        profiler.dumps(format="csv")
    profiler.set_state("run")
    with pytest.raises(mxcc.MxccError, match="set_state\\('stop'\\) first"):
        profiler.set_config(filename="x.json")
    profiler.set_state("stop")
    prof.write_text("stale")
    profiler.set_config(filename=prof)           # as MXNet: set_config deletes the old trace
    assert not prof.exists()


# -- other processes -------------------------------------------------------------------------------------
CHILD = """
import numpy as np, mxcc
m = mxcc.compile({sym!r}, {{"X": (4, 784)}}, {params!r})
x = np.ones((4, 784), np.float32)
"""


def test_autostart_writes_profile_json_at_exit(tmp_path):
    code = CHILD.format(sym=str(MLP / "mlp-symbol.json"), params=str(MLP / "mlp-0000.params")) + \
        "for _ in range(3):\n    m.forward(X=x)\n"
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, check=True, timeout=120,
                   env=dict(_child_env(), MXCC_PROFILER_AUTOSTART="1"))
    t = validate_trace(tmp_path / "profile.json")
    assert len(t["passes"]) == 3 and len(t["kernels"]) == 12
    assert json.loads((tmp_path / "profile.json").read_text())["otherData"]["finished"] is True


def test_the_file_is_valid_after_kill_9(tmp_path):
    path = tmp_path / "trace.json"
    code = CHILD.format(sym=str(MLP / "mlp-symbol.json"), params=str(MLP / "mlp-0000.params")) + textwrap.dedent(f"""
        import time
        mxcc.profiler.set_config(filename={str(path)!r}, continuous_dump=True, dump_period=0.1)
        mxcc.profiler.set_state("run")
        print("ready", flush=True)
        while True:
            m.forward(X=x)
            time.sleep(0.0005)        # a program doing other work between forwards (keeps the file small)
        """)
    child = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=_child_env(),
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 1.0
        seen = 0
        while time.monotonic() < deadline:            # a reader never catches a half-written file
            if path.exists():
                validate_trace(path)
                seen += 1
            time.sleep(0.05)
        assert seen > 0
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    t = validate_trace(path)
    assert len(t["kernels"]) > 0 and len(t["kernels"]) % 4 == 0
    assert json.loads(path.read_text())["otherData"]["finished"] is False


def test_standalone_executables_write_the_same_trace(tmp_path):
    """<net>_bench --profile FILE, MXCC_PROFILER_AUTOSTART=1 (profile.json in the cwd) and <net>_train
    --profile FILE write complete Chrome traces: one X event per kernel call (and per parameter update),
    named after the layer, a thread per phase."""
    import subprocess
    import mxcc
    from mxcc.optimizer import SGD
    mnist = ROOT / "examples" / "data" / "mnist"
    exe = mxcc.compile(ROOT / "tests/data/models/mlp/mlp-symbol.json", {"X": (50, 784)}, train=True, name="mlp",
                       optimizer=SGD(learning_rate=0.1, rescale_grad=0.02), out_dir=tmp_path / "m")
    kernels = [k["name"] for k in exe.kernels if k["phase"] in ("forward", "backward", "update")]
    r = subprocess.run([str(tmp_path / "m" / "mlp_bench"), "--iters", "5", "--warmup", "1"], cwd=tmp_path,
                       env={**os.environ, "MXCC_PROFILER_AUTOSTART": "1"}, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = validate_trace(tmp_path / "profile.json")
    forward = [k["name"] for k in exe.kernels if k["phase"] == "forward"]
    assert [e["name"] for e in got["kernels"]] == forward * 6             # warm-up + 5 timed forwards
    assert not list(tmp_path.glob("*.timeline"))
    r = subprocess.run([str(tmp_path / "m" / "mlp_train"), "--images", str(mnist / "t10k-images-idx3-ubyte.gz"),
                        "--labels", str(mnist / "t10k-labels-idx1-ubyte.gz"), "--epochs", "1", "--train", "150",
                        "--val", "50", "--profile", str(tmp_path / "train.json")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    got = validate_trace(tmp_path / "train.json")
    names = {e["name"] for e in got["kernels"]}
    assert set(kernels) <= names                                         # every kernel and update
    assert {e["tid"] for e in got["kernels"]} == {1, 2, 3}               # forward, backward, update threads
    assert sum(1 for e in got["kernels"] if e["name"] == "update:w0") == 3  # 150 images / batch 50
