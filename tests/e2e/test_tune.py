"""Tuned builds (mxcc.compile(tune=True), mxcc/compiler/tune.py) of a small CNN whose three tunable layers have
every kind of choice (c1: 3x3 from 3 channels, heuristic direct; c2: 3x3 at 14x14 + BatchNorm, winograd; c3: 1x1,
pointwise; c4 3x3 stride 2 from 24 channels has one candidate): the outputs stay those of the untuned build
within the Winograd rounding (the whole-network acceptance of tests/golden/test_models.py), the choices and
their times are recorded in plan.json, a second compile measures nothing, a damaged cache entry is measured
again and rewritten, times written into the cache decide the kernel (and the 5% margin holds), and two
processes tuning at once both succeed. Each test uses its own batch, so its layers have cache entries of their
own. No assertion on the times themselves. The candidate sets: tests/unit/test_conv_candidates.py."""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.cli import main
from mxcc_testing import ROOT, needs_gcc, rel_err

pytestmark = needs_gcc

TUNED = {"c1", "c2", "c3"}
TOL = 2e-5      # max|tuned - untuned| / max|untuned|: Winograd's float32 rounding against direct/packed's


def _net():
    with sym.NameManager():
        h = sym.relu(sym.Convolution(sym.var("data"), kernel=(3, 3), pad=(1, 1), num_filter=8, name="c1"))
        h = sym.Convolution(h, kernel=(3, 3), pad=(1, 1), num_filter=16, no_bias=True, name="c2")
        h = sym.relu(sym.BatchNorm(h, fix_gamma=False, name="bn2"))
        h = sym.Convolution(h, kernel=(1, 1), num_filter=24, name="c3")
        h = sym.relu(sym.Convolution(h, kernel=(3, 3), stride=(2, 2), num_filter=24, name="c4"))
        h = sym.Pooling(h, global_pool=True, kernel=(1, 1), pool_type="avg")
        return sym.FullyConnected(sym.Flatten(h), num_hidden=10, name="fc")


def _params():
    rng = np.random.default_rng(7)
    shapes, _, _ = _net().infer_shape(data=(1, 3, 14, 14))
    p = {n: (rng.standard_normal(s) / np.sqrt(np.prod(s[1:]) if len(s) > 1 else 1)).astype(np.float32)
         for n, s in zip(_net().list_arguments(), shapes) if n != "data"}
    p.update({"aux:bn2_moving_mean": rng.standard_normal(16).astype(np.float32) * 0.1,
              "aux:bn2_moving_var": rng.uniform(0.5, 2, 16).astype(np.float32)})
    return p


def _compile(n, out_dir=None, **kw):
    return mxcc.compile(_net(), {"data": (n, 3, 14, 14)}, _params(), out_dir=out_dir, tune_threads=1, **kw)


def _x(n):
    return np.random.default_rng(n).standard_normal((n, 3, 14, 14)).astype(np.float32)


def _entries(mod) -> dict:
    t = mod.tuning
    return {l["node"]: os.path.join(t["cache"], l["entry"]) for l in t["layers"]}


def _plan_paths(out_dir) -> dict:
    plan = json.loads((out_dir / "plan.json").read_text())
    return {g["name"]: g["path"] for g in plan["groups"] if "path" in g}


def test_tuned_build_matches_the_untuned_one_and_records_its_choices(tmp_path):
    base = _compile(2, tmp_path / "base")
    tuned = _compile(2, tmp_path / "tuned", tune=True)
    x = _x(2)
    assert rel_err(tuned.forward(data=x)[0], base.forward(data=x)[0]) <= TOL
    t = tuned.tuning
    assert t["threads"] == 1 and t["engine"] in ("pool", "openmp") and t["measured"] == 3
    assert {l["node"] for l in t["layers"]} == TUNED
    heuristic = {"c1": "direct", "c2": "winograd", "c3": "pointwise"}
    paths = _plan_paths(tmp_path / "tuned")
    for l in t["layers"]:
        assert l["heuristic"] == heuristic[l["node"]] == _plan_paths(tmp_path / "base")[l["node"]]
        assert l["chosen"] in l["candidates"] and paths[l["node"]] == l["chosen"]
        assert sorted(l["times_us"]) == sorted(l["candidates"]) and min(l["times_us"].values()) > 0
        assert l["source"] == "measured" and os.path.exists(_entries(tuned)[l["node"]])
    assert paths["c4"] == "packed"                      # one candidate: not tuned
    assert json.loads((tmp_path / "tuned" / "plan.json").read_text())["tuning"] == t
    # a tuned and an untuned build never share a compile cache entry, even with the same choices
    assert tuned.meta["key"] != base.meta["key"]
    assert "tune=on" in (tmp_path / "tuned" / "net.c").read_text()


def test_second_compile_reads_the_cache():
    first = _compile(3, tune=True)
    entries = _entries(first)
    stamps = {k: os.stat(p).st_mtime_ns for k, p in entries.items()}
    again = _compile(3, tune=True)
    assert again.tuning["measured"] == 0 and {l["source"] for l in again.tuning["layers"]} == {"cache"}
    assert {k: os.stat(p).st_mtime_ns for k, p in entries.items()} == stamps
    assert [l["chosen"] for l in again.tuning["layers"]] == [l["chosen"] for l in first.tuning["layers"]]
    assert again.cached                                  # the same C: the compile cache's entry too


@pytest.mark.parametrize("garbage", ["{not json", '{"key": "0", "times_us": {}}'], ids=["not-json", "other-key"])
def test_damaged_entry_is_measured_again_and_rewritten(garbage):
    n = 4 if garbage.startswith("{not") else 5
    entry = _entries(_compile(n, tune=True))["c2"]
    with open(entry, "w") as f:
        f.write(garbage)
    with pytest.warns(RuntimeWarning, match="tuning cache entry .* is damaged"):
        mod = _compile(n, tune=True)
    assert {l["node"]: l["source"] for l in mod.tuning["layers"]} == {"c1": "cache", "c2": "measured", "c3": "cache"}
    rewritten = json.loads(open(entry).read())
    assert sorted(rewritten["times_us"]) == ["direct", "packed", "winograd"] and len(rewritten["key"]) == 64


def test_times_in_the_cache_decide_the_kernel(tmp_path):
    n = 6
    base = _compile(n, tmp_path / "base")
    entries = _entries(_compile(n, tune=True))
    forced = {"c1": "winograd", "c2": "packed", "c3": "gemm"}
    for node, path in entries.items():
        e = json.loads(open(path).read())
        e["times_us"] = {p: 1.0 if p == forced[node] else 100.0 for p in e["times_us"]}
        if node == "c3":        # only 3% faster than the heuristic's: noise, the heuristic stays
            e["times_us"] = {"pointwise": 100.0, "packed": 110.0, "gemm": 97.0}
        with open(path, "w") as f:
            json.dump(e, f)
    mod = _compile(n, tmp_path / "tuned", tune=True)
    assert mod.tuning["measured"] == 0
    want = {"c1": "winograd", "c2": "packed", "c3": "pointwise"}
    assert {l["node"]: l["chosen"] for l in mod.tuning["layers"]} == want
    assert {k: v for k, v in _plan_paths(tmp_path / "tuned").items() if k in TUNED} == want
    c = (tmp_path / "tuned" / "net.c").read_text()
    assert c.count("mxcc_winograd_f43_f32(") == 1 and c.count("mxcc_conv_packed_f32(") == 2    # c2 and c4
    assert "mxcc_conv_direct_f32(" not in c
    x = _x(n)
    assert rel_err(mod.forward(data=x)[0], base.forward(data=x)[0]) <= TOL


def test_two_processes_tuning_at_once_both_succeed(tmp_path):
    script = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_tune as t; "
              "print(json.dumps(t._compile(8, tune=True).tuning))")
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, "-c", script, here], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e for _, e in outs]
    a, b = (json.loads(o.strip().splitlines()[-1]) for o, _ in outs)
    assert a["measured"] + b["measured"] == 3            # one measured (holding the lock), the other read it
    assert [l["chosen"] for l in a["layers"]] == [l["chosen"] for l in b["layers"]]


def test_inspect_tune_prints_the_choices(tmp_path, capsys):
    path = tmp_path / "net-symbol.json"
    _net().save(str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["inspect", str(path), "--shape", "data=2,3,14,14", "--tune", "--tune-threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "convolution paths tuned on" in out and "1 thread (" in out
    for node in TUNED:
        assert f"\n{node} " in out


def test_depthwise_flat_path_gives_the_same_bits(tmp_path):
    """The depthwise layers with a second candidate (small 3x3 planes: depthwise_flat, the per-plane kernels
    without the AVX-512 build's 16-channel blocks) forced to it: the C calls the kernel with MXCC_DW_PLANES, and
    the output is the untuned build's bit for bit."""
    with sym.NameManager():
        h = sym.Convolution(sym.var("data"), kernel=(3, 3), pad=(1, 1), stride=(2, 2), num_filter=32, num_group=32,
                            name="dw1")
        h = sym.relu(sym.Convolution(sym.relu(h), kernel=(3, 3), pad=(1, 1), num_filter=32, num_group=32,
                                     name="dw2"))
    rng = np.random.default_rng(3)
    params = {"dw1_weight": rng.standard_normal((32, 1, 3, 3)).astype(np.float32),
              "dw1_bias": rng.standard_normal(32).astype(np.float32),
              "dw2_weight": rng.standard_normal((32, 1, 3, 3)).astype(np.float32),
              "dw2_bias": rng.standard_normal(32).astype(np.float32)}
    shapes = {"data": (2, 32, 14, 14)}
    base = mxcc.compile(h, shapes, params, out_dir=tmp_path / "base")
    forced = mxcc.compile(h, shapes, params, out_dir=tmp_path / "flat",
                          conv_paths={"dw1": "depthwise_flat", "dw2": "depthwise_flat"})
    assert _plan_paths(tmp_path / "base") == {"dw1": "depthwise", "dw2": "depthwise"}
    assert _plan_paths(tmp_path / "flat") == {"dw1": "depthwise_flat", "dw2": "depthwise_flat"}
    assert (tmp_path / "flat" / "net.c").read_text().count("MXCC_DW_PLANES);") == 2
    x = rng.standard_normal(shapes["data"]).astype(np.float32)
    np.testing.assert_array_equal(forced.forward(data=x)[0], base.forward(data=x)[0])
