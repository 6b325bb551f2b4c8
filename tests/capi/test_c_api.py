"""The network as a C library (mxcc compile -o DIR): DIR/lib<net>.a and lib<net>.so export only the C API,
DIR/include holds what a C or C++ program needs, mxcc's own C API per network (api_client.c: params read by the
C reader, every error returned with a message, contexts in threads) and `<net>_bench --params --input --output`.
"""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import mxcc
from capi_helpers import CXX, HERE, build_c, run
from mxcc.params import load_params, save_params
from mxcc_testing import DATA, rel_err


def test_directory_has_the_library_and_its_headers(compiled):
    d = compiled["lenet"]
    for f in ["liblenet.a", "liblenet.so", "include/lenet.h", "include/mxcc_runtime.h",
              "include/mxnet/c_predict_api.h", "include/params/mxcc_params.h"]:
        assert (d / f).is_file(), f
    meta = mxcc.compiler.artifacts.read_meta(d)
    assert meta["library"] == {"static": "liblenet.a", "shared": "liblenet.so", "include": "include"}
    # every header the public ones include is there
    for h in (d / "include").rglob("*.h"):
        for inc in re.findall(r'#include "([^"]+)"', h.read_text()):
            assert (h.parent / inc).exists() or (d / "include" / inc).exists(), (h, inc)


def test_shared_library_exports_the_c_api_only(compiled):
    d = compiled["lenet"]
    out = run(["nm", "-D", "--defined-only", d / "liblenet.so"]).stdout
    names = {line.split()[-1] for line in out.splitlines() if line.strip()}
    allowed = re.compile(r"^(lenet_\w+|MXGetLastError|MXPred\w+|MXNDList\w+|mxcc_api_\w+|mxcc_params_\w+|"
                         r"mxcc_ctx_\w+|mxcc_(set|get)_num_threads|mxcc_default_threads|mxcc_prof_\w+)$")
    assert names and all(allowed.match(n) for n in names), sorted(n for n in names if not allowed.match(n))
    for want in ["MXPredCreate", "MXPredCreateMultiThread", "MXNDListCreate", "lenet_load_params", "lenet_run",
                 "lenet_net", "mxcc_ctx_slots"]:
        assert want in names
    assert not any(n.startswith(("mxcc_gemm", "mxcc_conv", "mxcc_ukernel")) for n in names)


def test_headers_compile_as_c_and_cxx(compiled, tmp_path):
    d = compiled["lenet"]
    src = tmp_path / "h.cc"
    src.write_text('#include "lenet.h"\n#include <mxnet/c_predict_api.h>\nint main() { return LENET_NUM_SLOTS > 0 ? 0 : 1; }\n')
    run([CXX, "-fsyntax-only", "-Wall", "-Werror", "-I", d / "include", src])
    c = tmp_path / "h.c"
    c.write_text(src.read_text())
    run(["gcc", "-fsyntax-only", "-Wall", "-Werror", "-I", d / "include", c])


def _bad_shape_params(tmp_path):
    p = {k: v for k, v in load_params(DATA / "models/lenet/lenet-0000.params").items()}
    p["arg:conv1_weight"] = p["arg:conv1_weight"][:10]
    save_params(tmp_path / "bad.params", p)
    return tmp_path / "bad.params"


def test_c_api_errors_and_threads(compiled, reference, tmp_path):
    """lenet's own C API: params from MXNet's .params in C, MXNet's output (2e-5), every misuse refused with a
    message (and a failed load keeps the params), 4 contexts in 4 threads (two sharing a base's weights) agree."""
    d = compiled["lenet"]
    sym, params, x, ref = reference["lenet"]
    exe = build_c(tmp_path / "api_client", [HERE / "api_client.c"], d, "lenet", extra=["-lpthread"])
    x.tofile(tmp_path / "in.bin")
    r = run([exe, params, _bad_shape_params(tmp_path), DATA / "models/mlp/mlp-0000.params", tmp_path / "in.bin",
             tmp_path / "out.bin"])
    msgs = dict(re.findall(r"^refused (.*?): (.*)$", r.stdout, re.M))
    assert "threads ok" in r.stdout and "ACCEPTED" not in r.stdout, r.stdout
    assert "params not loaded" in msgs["run before params"]
    assert "cannot open" in msgs["missing file"]
    assert "unexpected params" in msgs["another network's params"] and "'arg:w0'" in msgs["another network's params"]
    assert "param 'conv1_weight' has shape (10, 1, 5, 5), expected (20, 1, 5, 5)" in msgs["a param of the wrong shape"]
    assert "truncated" in msgs["truncated bytes"] and "truncated" in msgs["no bytes"]
    assert "input 'data' is not set" in msgs["run before the input"]
    assert "'date' is not an input" in msgs["an input that is not one"]
    assert "given 1567 floats, expected 1568 (shape (2, 1, 28, 28))" in msgs["a wrong input size"]
    assert "has 20 floats" in msgs["a wrong output size"] and "no output 1" in msgs["an output that is not one"]
    out = np.fromfile(tmp_path / "out.bin", np.float32).reshape(ref.shape)
    assert rel_err(out, ref) <= 2e-5


def test_bench_runs_real_params_and_inputs(compiled, reference, tmp_path):
    d = compiled["lenet"]
    sym, params, x, ref = reference["lenet"]
    np.save(tmp_path / "x.npy", x)
    r = run([d / "lenet_bench", "--params", params, "--input", tmp_path / "x.npy", "--output", tmp_path / "y.npy",
             "--iters", "2", "--warmup", "0"])
    assert "us per forward" in r.stdout
    y = np.load(tmp_path / "y.npy")
    assert y.shape == ref.shape and rel_err(y, ref) <= 2e-5
    # by name and by output index; a float64 input is converted
    np.save(tmp_path / "x64.npy", x.astype(np.float64))
    run([d / "lenet_bench", "--params", params, "--input", f"data={tmp_path / 'x64.npy'}", "--output",
         f"0={tmp_path / 'y0.npy'}", "--iters", "1", "--warmup", "0"])
    assert np.array_equal(np.load(tmp_path / "y0.npy"), y)
    bad = run([d / "lenet_bench", "--params", DATA / "models/mlp/mlp-0000.params"], ok=False)
    assert bad.returncode == 1 and "unexpected params" in bad.stderr
    np.save(tmp_path / "wrong.npy", x[:1])
    bad = run([d / "lenet_bench", "--input", tmp_path / "wrong.npy"], ok=False)
    assert bad.returncode == 1 and "not the compiled one" in bad.stderr


def test_cli_writes_the_library(tmp_path):
    """`mxcc compile -o DIR` (a cache hit of the session's LeNet: the library too)."""
    d = DATA / "models" / "lenet"
    out = tmp_path / "cli"
    r = subprocess.run([sys.executable, "-m", "mxcc", "compile", d / "lenet-symbol.json", "--shape", "data=2,1,28,28",
                        "-o", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (out / "liblenet.a").is_file() and (out / "liblenet.so").is_file() and (out / "include/lenet.h").is_file()


def test_training_builds_have_no_library(tmp_path):
    from mxcc.optimizer import SGD
    mxcc.compile(DATA / "models/mlp/mlp-symbol.json", {"X": (4, 784)}, train=True, optimizer=SGD(),
                 out_dir=tmp_path / "t")
    assert not (tmp_path / "t" / "libmlp.a").exists() and (tmp_path / "t" / "mlp_bench").exists()
