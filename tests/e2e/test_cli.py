"""The command line and the build cache, end to end, in subprocesses as a user runs them."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mxcc_testing import DATA, needs_gcc, rel_err

pytestmark = needs_gcc
MLP = DATA / "models" / "mlp"


def mxcc(*args, env=None, cwd=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "mxcc", *map(str, args)], capture_output=True, text=True,
                          env=e, cwd=cwd, timeout=300)


def test_compile_run_bench_and_load(tmp_path):
    out = tmp_path / "mlp"
    r = mxcc("compile", MLP / "mlp-symbol.json", "--shape", "X=4,784", "--params", MLP / "mlp-0000.params",
             "-o", out)
    assert r.returncode == 0, r.stderr
    for f in ("mlp.c", "mlp.h", "mlp_bench", "plan.json", "module.json", "params.params"):
        assert (out / f).exists(), f
    plan = json.loads((out / "plan.json").read_text())
    assert [g["members"] for g in plan["groups"]] == [
        ["fullyconnected0", "activation0"], ["fullyconnected1", "activation1"], ["fullyconnected2"],
        ["softmaxoutput0"]]
    assert plan["groups"][0]["nodes"][0] == {"name": "fullyconnected0", "op": "FullyConnected",
                                            "inputs": [[4, 784], [128, 784], [128]], "outputs": [[4, 128]],
                                            "flops": 2 * 4 * 784 * 128 + 4 * 128}
    io = np.load(MLP / "mlp-io.npz")
    np.save(tmp_path / "x.npy", io["input"])
    r = mxcc("run", out, "--input", f"X={tmp_path / 'x.npy'}", "--output", tmp_path / "y.npz")
    assert r.returncode == 0, r.stderr
    y = np.load(tmp_path / "y.npz")["softmaxoutput0_output"]
    assert rel_err(y, io["output"]) <= 1e-5
    b = subprocess.run([str(out / "mlp_bench"), "--iters", "50", "--threads", "1"], capture_output=True,
                       text=True, timeout=60)
    assert b.returncode == 0 and "us per forward (50 iters, 1 threads)" in b.stdout, b.stdout + b.stderr


@pytest.mark.parametrize("args, words", [
    (["compile", "nope.json", "--shape", "X=1,2"], ["cannot read symbol file"]),
    (["compile", MLP / "mlp-symbol.json"], ["--shape"]),
    (["compile", MLP / "mlp-symbol.json", "--shape", "X=4,0"], ["positive integers"]),
    (["compile", MLP / "mlp-symbol.json", "--shape", "data=4,784"], ["not an input or parameter", "X"]),
    (["compile", MLP / "mlp-symbol.json", "--shape", "X=4,785", "--params", MLP / "mlp-0000.params"],
     ["w0", "(128, 784)", "expected (128, 785)"]),
    (["run", "/nonexistent/dir"], ["not a compiled mxcc module"]),
])
def test_errors_are_one_line_and_exit_2(args, words, tmp_path):
    r = mxcc(*args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    for w in words:
        assert w in r.stderr
    assert "Traceback" not in r.stderr


def test_debug_shows_the_traceback(tmp_path):
    r = mxcc("--debug", "compile", "nope.json", "--shape", "X=1,2", cwd=tmp_path)
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_no_c_compiler_is_a_clear_error(tmp_path):
    r = mxcc("compile", MLP / "mlp-symbol.json", "--shape", "X=4,784", "-o", tmp_path / "o",
             env={"MXCC_CC": "no-such-cc", "MXCC_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 2
    assert "no C compiler found" in r.stderr and "no-such-cc" in r.stderr


def test_concurrent_compiles_of_one_network_all_succeed_then_the_cache_serves_it(tmp_path):
    """Three compiles of one network at once into one fresh cache all succeed (one of them builds it), and a
    compile after them is served from the cache (one runtime build for both checks: ~20 s on 2 cores)."""
    env = dict(os.environ, MXCC_CACHE_DIR=str(tmp_path / "cache"))
    args = ["compile", str(MLP / "mlp-symbol.json"), "--shape", "X=3,784", "--params", str(MLP / "mlp-0000.params")]
    procs = [subprocess.Popen([sys.executable, "-m", "mxcc", *args, "-o", str(tmp_path / f"o{i}")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert all(rc == 0 for _, _, rc in results), results
    assert any("built in" in out for out, _, _ in results), results
    io = np.load(MLP / "mlp-io.npz")
    import mxcc as mx
    outs = [mx.load(tmp_path / f"o{i}").forward(X=io["input"][:3])[0] for i in range(3)]
    for o in outs:
        assert rel_err(o, io["output"][:3]) <= 1e-5
    leftovers = [p.name for p in (tmp_path / "cache").iterdir() if p.name.startswith("tmp-")]
    assert leftovers == []
    again = mxcc(*args, "-o", tmp_path / "o3", env={"MXCC_CACHE_DIR": str(tmp_path / "cache")})
    assert again.returncode == 0 and "cached in" in again.stdout, again.stdout + again.stderr


def test_compile_random_params_and_train_flags(tmp_path):
    r = mxcc("compile", DATA / "models/lenet/lenet-symbol.json", "--shape", "data=2,1,28,28", "--random-params",
             "-o", tmp_path / "lenet")
    assert r.returncode == 0, r.stderr
    import mxcc as mx
    out = mx.load(tmp_path / "lenet").forward(data=np.zeros((2, 1, 28, 28), np.float32))[0]
    assert out.shape == (2, 10) and np.allclose(out.sum(axis=1), 1, atol=1e-5)   # softmax of real weights
    r = mxcc("compile", MLP / "mlp-symbol.json", "--shape", "X=50,784", "--train", "--lr", "0.1", "--wd", "0.01",
             "-o", tmp_path / "t")
    assert r.returncode == 0 and "mlp_train" in r.stdout, r.stderr
    mnist = DATA.parent.parent / "examples" / "data" / "mnist"
    run = subprocess.run([str(tmp_path / "t" / "mlp_train"), "--images", str(mnist / "t10k-images-idx3-ubyte.gz"),
                          "--labels", str(mnist / "t10k-labels-idx1-ubyte.gz"), "--epochs", "2", "--train", "2000",
                          "--val", "500", "--threads", "1"], capture_output=True, text=True, timeout=120)
    lines = [l for l in run.stdout.splitlines() if l.startswith("Epoch")]
    assert run.returncode == 0 and len(lines) == 2, run.stdout + run.stderr
    assert float(lines[-1].split("Accuracy:")[1]) > 0.6       # 2 epochs on 2,000 images: 0.73 measured (chance 0.1)
