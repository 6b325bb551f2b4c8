"""MXNet's predict API, drop-in: predict_client.c includes <mxnet/c_predict_api.h> and knows nothing of mxcc. Built
against DIR/include with the static and the shared library, it loads the .params MXNet wrote and reproduces
MXNet 1.9.1's outputs on LeNet and ResNet-18 (the reference's slim ResNet-18 v1: the model zoo's graph with fewer
channels) within 2e-5 of the output's scale; a wrong input size, a different symbol and other shapes are refused
with a message from MXGetLastError; the symbol as MXNet upgrades an old file is accepted; MXPredCreateMultiThread's
predictors run at once in as many threads."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from capi_helpers import HERE, MODELS, build_c, run
from mxcc.params import save_params
from mxcc_testing import DATA, rel_err


@pytest.fixture(scope="module")
def clients(compiled, tmp_path_factory):
    """(name, shared) -> predict_client built against that network's library."""
    d = tmp_path_factory.mktemp("clients")
    return {(name, shared): build_c(d / f"client_{name}_{'so' if shared else 'a'}", [HERE / "predict_client.c"],
                                    compiled[name], name, shared=shared, extra=["-lpthread"])
            for name in MODELS for shared in (False, True)}


def _shape(name):
    return ",".join(map(str, MODELS[name]))


@pytest.mark.parametrize("shared", [False, True], ids=["static", "shared"])
@pytest.mark.parametrize("name", list(MODELS))
def test_reproduces_mxnet(clients, reference, name, shared, tmp_path):
    sym, params, x, ref = reference[name]
    x.tofile(tmp_path / "in.bin")
    r = run([clients[name, shared], "run", sym, params, "data", _shape(name), tmp_path / "in.bin", tmp_path / "out.bin"])
    assert r.stdout.strip() == "output shape " + " ".join(map(str, ref.shape))
    out = np.fromfile(tmp_path / "out.bin", np.float32).reshape(ref.shape)
    assert rel_err(out, ref) <= 2e-5


def _refusal(client, *args) -> str:
    r = run([client, *args])
    m = re.match(r"refused: (.*)", r.stdout)
    assert m, r.stdout
    return m.group(1)


def test_refusals_name_the_problem(clients, reference, tmp_path):
    client = clients["lenet", False]
    sym, params, x, ref = reference["lenet"]
    msg = _refusal(client, "badsize", sym, params, "data", _shape("lenet"))
    assert "input 'data' was given 1567 floats, expected 1568" in msg
    # a different network: the first difference is named
    msg = _refusal(client, "create", DATA / "models/mlp/mlp-symbol.json", params, "data", _shape("lenet"))
    assert "not the network this library was compiled for" in msg
    doc = json.loads(sym.read_text())
    for n in doc["nodes"]:
        if n["name"] == "conv2":
            n["attrs"]["num_filter"] = "64"
    (tmp_path / "conv2.json").write_text(json.dumps(doc))
    msg = _refusal(client, "create", tmp_path / "conv2.json", params, "data", _shape("lenet"))
    assert "node 'conv2' (Convolution) has num_filter=64, the compiled node 'conv2' has num_filter=50" in msg
    doc = json.loads(sym.read_text())
    pool = next(i for i, n in enumerate(doc["nodes"]) if n["op"] == "Pooling")
    doc["nodes"][pool]["inputs"][0][0] = 1       # rewired: pooling reads conv1's weight
    (tmp_path / "wired.json").write_text(json.dumps(doc))
    assert "not the network" in _refusal(client, "create", tmp_path / "wired.json", params, "data", _shape("lenet"))
    msg = _refusal(client, "create", sym, params, "data", "4,1,28,28")
    assert "has shape (4, 1, 28, 28); this library was compiled for (2, 1, 28, 28)" in msg
    assert "is not an input" in _refusal(client, "create", sym, params, "image", _shape("lenet"))
    assert "params missing" in _refusal(client, "create", sym, DATA / "models/mlp/mlp-0000.params", "data",
                                        _shape("lenet"))
    (tmp_path / "junk.json").write_text('{"nodes": [')
    assert "malformed" in _refusal(client, "create", tmp_path / "junk.json", params, "data", _shape("lenet"))


def test_upgraded_and_respelled_symbols_are_accepted(clients, reference, tmp_path):
    """What MXNet's loader upgrades (pre-nnvm 'param' attributes, no mxnet_version: checked once with MXNet 1.9.1,
    which loads it as the same graph) and equal attribute values written differently."""
    client = clients["resnet18_v1_slim", False]
    sym, params, x, ref = reference["resnet18_v1_slim"]
    doc = json.loads(sym.read_text())
    for n in doc["nodes"]:
        if "attrs" in n:
            n["param"] = n.pop("attrs")
    doc["attrs"] = {}
    (tmp_path / "legacy.json").write_text(json.dumps(doc))
    assert run([client, "create", tmp_path / "legacy.json", params, "data", _shape("resnet18_v1_slim")]).stdout \
        == "created\n"
    doc = json.loads(sym.read_text())
    for n in doc["nodes"]:
        a = n.get("attrs", {})
        if "kernel" in a:
            a["kernel"] = "[" + a["kernel"].strip("()").replace(" ", "") + "]"
        if "eps" in a:
            a["eps"] = repr(float(a["eps"]))
        if "fix_gamma" in a:
            a["fix_gamma"] = a["fix_gamma"].lower()
        n["name"] = n["name"] if n["op"] == "null" else n["name"] + "_renamed"   # operators' names do not matter
    (tmp_path / "respelled.json").write_text(json.dumps(doc, indent=4))
    assert run([client, "create", tmp_path / "respelled.json", params, "data", _shape("resnet18_v1_slim")]).stdout \
        == "created\n"


@pytest.mark.parametrize("name", list(MODELS))
def test_multithread_predictors_run_at_once(clients, reference, name, tmp_path):
    sym, params, x, ref = reference[name]
    x.tofile(tmp_path / "in.bin")
    run([clients[name, True], "run", sym, params, "data", _shape(name), tmp_path / "in.bin", tmp_path / "out.bin"])
    r = run([clients[name, True], "threads", sym, params, "data", _shape(name), tmp_path / "in.bin",
             tmp_path / "out.bin", 3 if name == "lenet" else 2])
    assert "threads ok" in r.stdout


def test_the_rest_of_the_api(clients, reference, tmp_path):
    sym, params, x, ref = reference["lenet"]
    client = clients["lenet", True]
    x.tofile(tmp_path / "in.bin")
    run([client, "run", sym, params, "data", _shape("lenet"), tmp_path / "in.bin", tmp_path / "out.bin"])
    mean = np.arange(784, dtype=np.float32).reshape(1, 28, 28) / 784
    save_params(tmp_path / "mean.nd", {"mean_img": mean})
    r = run([client, "api", sym, params, "data", _shape("lenet"), tmp_path / "in.bin", tmp_path / "out.bin",
             "softmax", tmp_path / "mean.nd"])
    lines = {m.group(2): m.group(1) for m in re.finditer(r"^(ok|refused) (.*?)(?:: .*)?$", r.stdout, re.M)}
    ok = {"CreateEx float32", "PartialOut output", "GetOutputType", "PartialForward step 0", "PartialOut output equals",
          "Reshape same shape", "Reshape output equals", "NDListCreate", "NDListGet"}
    refused = {"dev_type 2", "CreateEx float16", "PartialOut no_such_node", "GetOutputType index 1",
               "SetMonitorCallback", "PartialForward step 1", "Reshape other batch", "NDListGet index 1",
               "NDListCreate truncated"}
    assert {k for k, v in lines.items() if v == "ok"} == ok, r.stdout
    assert {k for k, v in lines.items() if v == "refused"} == refused, r.stdout
    assert "dev_type 2 is not available: this library runs on the CPU only" in r.stdout
    assert "ndlist mean_img 3 1 28 28 0.000000" in r.stdout


def test_a_dynamic_batch_library_runs_each_batch_mxnet_gives(reference, tmp_path):
    """A library compiled with a dynamic batch (max 8): MXPredCreate with a batch of 1 or 2 runs that batch
    (MXNet's rows), MXPredGetOutputShape says it, and a batch over the maximum is refused."""
    import mxcc
    from capi_helpers import build_c as build
    sym, params, x, ref = reference["lenet"]
    mxcc.compile(sym, {"data": (8, 1, 28, 28)}, params, dynamic_batch=True, out_dir=tmp_path / "lenet")
    client = build(tmp_path / "client", [HERE / "predict_client.c"], tmp_path / "lenet", "lenet")
    for n in (1, 2):
        x[:n].tofile(tmp_path / "in.bin")
        r = run([client, "run", sym, params, "data", f"{n},1,28,28", tmp_path / "in.bin", tmp_path / "out.bin"])
        assert r.stdout.strip() == f"output shape {n} 10"
        assert rel_err(np.fromfile(tmp_path / "out.bin", np.float32).reshape(n, 10), ref[:n]) <= 2e-5
    msg = _refusal(client, "create", sym, params, "data", "9,1,28,28")
    assert "batch 9 on axis 0: this library runs batches 1..8" in msg
    msg = _refusal(client, "create", sym, params, "data", "2,1,28,27")
    assert "compiled for (8, 1, 28, 28), any batch up to it" in msg
