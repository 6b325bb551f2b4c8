"""densenet121_slim: the Gluon model zoo's DenseNet-121 graph with fewer channels, and its whole-network
inference-mode gradients from MXNet 1.9.1 in float32 and in float64 (tests/train/test_densenet_gradients.py).

Run it with MXNet's own interpreter (mxcc's tests never import mxnet):
    /path/to/mxnet-1.9.1-venv/bin/python tests/data/models/densenet121_slim/gen_densenet_slim.py [outdir]
(mxnet==1.9.1, numpy==1.23.5, CPU pip build). Writes beside this script unless outdir is given:
  densenet121_slim-symbol.json, -0000.params  net.export() after hybridize() and one forward, untouched
  densenet121_slim-io.npz          input (1x3x224x224), output (hybridized Gluon forward, inference mode)
  densenet121_slim-grad-infer.npz  input, head_grad, out, grad:<arg> for data and every parameter: MXNet float32
                                   (the key layout of resnet18_v1_slim-grad-infer.npz); f64:out, f64:grad:<arg>:
                                   the same executor protocol run by MXNet in float64 (type_dict float64 for every
                                   argument and auxiliary state), stored rounded to float32; relu_flip:<relu node>:
                                   (k, 4) indices where the input of that ReLU has another sign in MXNet's float32
                                   forward than in its float64 forward (the ReLU kinks rounding flipped)
  record.json                      configuration, seeds, op counts, MXNet float32 vs float64 per gradient, the
                                   flipped ReLU inputs with their float64 / float32 values

Network: mxnet.gluon.model_zoo.vision.densenet.DenseNet(num_init_features=8, growth_rate=4,
block_config=[6, 12, 24, 16]) -- densenet121 is DenseNet(64, 32, [6, 12, 24, 16]): the same 121 layers, ops
and attributes (7x7/2 stem conv, BatchNorm-ReLU, 3x3/2 max pool, pre-activation BN-ReLU-Conv1x1-BN-ReLU-Conv3x3
dense layers joined by Concat, BN-ReLU-Conv1x1-AvgPool 2x2/2 transitions, final BN-ReLU-AvgPool 7x7, Flatten,
Dense 1000), only num_filter smaller. 224x224 is the smallest usual input the final 7x7 pool accepts.

Initialisation as shared/mxnet-ref/gen/gen_models.py does it (copied below, same seeds by name): Xavier weights,
N(0, 0.05^2) biases, BatchNorm gamma ~ U(0.6, 1.4), beta ~ N(0, 0.2^2), running statistics calibrated on a
separate batch, then perturbed (mean += 0.2 std N(0,1), var *= exp(U(-0.4, 0.4))).

Gradient protocol (shared/mxnet-ref/gen/gen_model_grads.py), in a subprocess with MXNET_MKLDNN_ENABLED=0
(oneDNN's max-pool backward after an inference forward reads an unwritten workspace):
    ex = sym.simple_bind(mx.cpu(), grad_req='write', data=input.shape[, type_dict=float64])
    set data, params, aux;  out = ex.forward(is_train=False);  ex.backward(out_grads=[head_grad])
"""
import json
import os
import subprocess
import sys
import zlib

import numpy as np

os.environ.setdefault("MXNET_STORAGE_FALLBACK_LOG_VERBOSE", "0")
import mxnet as mx  # noqa: E402
from mxnet.gluon.model_zoo.vision import densenet  # noqa: E402

NAME = "densenet121_slim"
CONFIG = dict(num_init_features=8, growth_rate=4, block_config=[6, 12, 24, 16])
INPUT_SHAPE = (1, 3, 224, 224)
SEED = 1234
HERE = os.path.dirname(os.path.abspath(__file__))


def stable_seed(name, base=0):
    return (zlib.crc32(name.encode("utf-8")) + base) % (2 ** 31)


def rng_for(name, base=0):
    return np.random.RandomState(stable_seed(name, base))


def savez(path, **arrays):
    np.savez_compressed(path, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})


# ---- copied from shared/mxnet-ref/gen/gen_models.py ------------------------------------------------------
def xavier_weights(params, seed):
    mx.random.seed(seed)
    init = mx.init.Xavier()
    for name in sorted(params):
        if name.endswith("weight") and params[name].ndim >= 2:
            arr = mx.nd.zeros(params[name].shape)
            init(mx.init.InitDesc(name), arr)
            params[name][:] = arr


def graph_order_nodes(sym, ops):
    return [n for n in json.loads(sym.tojson())["nodes"] if n["op"] in ops]


def node_inputs(sym, node_name):
    js = json.loads(sym.tojson())
    names = [n["name"] for n in js["nodes"]]
    for n in js["nodes"]:
        if n["name"] == node_name:
            return [names[i[0]] for i in n["inputs"]]
    raise KeyError(node_name)


def internal_output(sym, node_name):
    internals = sym.get_internals()
    outs = internals.list_outputs()
    key = node_name + "_output"
    if node_name in outs:
        key = node_name
    elif key not in outs:
        key = [o for o in outs if o.startswith(node_name + "_output")][0]
    return internals[key]


def eval_internals(sym, arg, aux, data_name, x, node_names, is_train):
    outs = mx.sym.Group([internal_output(sym, n) for n in node_names])
    names = outs.list_arguments()
    shapes = {k: (x.shape if k == data_name else arg[k].shape) for k in names}
    old = os.environ.get("MXNET_SUBGRAPH_BACKEND")
    os.environ["MXNET_SUBGRAPH_BACKEND"] = "NONE"
    try:
        ex = outs.simple_bind(mx.cpu(), grad_req="null", **shapes)
    finally:
        if old is None:
            del os.environ["MXNET_SUBGRAPH_BACKEND"]
        else:
            os.environ["MXNET_SUBGRAPH_BACKEND"] = old
    for k in names:
        ex.arg_dict[k][:] = x if k == data_name else arg[k]
    for k in outs.list_auxiliary_states():
        ex.aux_dict[k][:] = aux[k]
    res = [o.asnumpy() for o in ex.forward(is_train=is_train)]
    mx.nd.waitall()
    return res


def calibrate(sym, arg, aux, data_name, xcal, rng, frozen=()):
    bn_nodes = graph_order_nodes(sym, {"BatchNorm"})
    for n in bn_nodes:
        ins = node_inputs(sym, n["name"])
        g, b = ins[1], ins[2]
        arg[g][:] = rng.uniform(0.6, 1.4, size=arg[g].shape)
        bval = rng.normal(0, 0.2, size=arg[b].shape)
        if b not in frozen:
            arg[b][:] = bval
    producers = [node_inputs(sym, n["name"])[0] for n in bn_nodes]
    uniq = sorted(set(p for p in producers if p != data_name))
    got = dict(zip(uniq, eval_internals(sym, arg, aux, data_name, xcal, uniq, True)))
    got[data_name] = xcal
    for n, p in zip(bn_nodes, producers):
        v = got[p]
        ins = node_inputs(sym, n["name"])
        axis = int(n.get("attrs", {}).get("axis", 1))
        red = tuple(i for i in range(v.ndim) if i != axis % v.ndim)
        mean, var = v.mean(axis=red), v.var(axis=red)
        std = np.sqrt(var + 1e-5)
        aux[ins[3]][:] = mean + 0.2 * std * rng.normal(0, 1, size=mean.shape)
        aux[ins[4]][:] = var * np.exp(rng.uniform(-0.4, 0.4, size=var.shape))
    return {"batchnorm_layers": len(bn_nodes), "lsuv_layers": 0}


def make_input(name, in_shape):
    u8 = rng_for(name, 99).randint(0, 256, size=in_shape).astype(np.float32)
    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
    std = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
    return ((u8 / np.float32(255.0) - mean) / std).astype(np.float32)


def load_checkpoint_files(prefix):
    sym = mx.sym.load(prefix + "-symbol.json")
    d = mx.nd.load(prefix + "-0000.params")
    arg = {k[4:]: v for k, v in d.items() if k.startswith("arg:")}
    aux = {k[4:]: v for k, v in d.items() if k.startswith("aux:")}
    return sym, arg, aux
# ------------------------------------------------------------------------------------------------------------


def build(outdir):
    prefix = os.path.join(outdir, NAME)
    seed = stable_seed(NAME, SEED)
    rng = np.random.RandomState(seed)
    x = make_input(NAME, INPUT_SHAPE)
    xcal = rng_for(NAME, 98).normal(0, 1, size=(4,) + tuple(INPUT_SHAPE[1:])).astype(np.float32)
    net = densenet.DenseNet(**CONFIG)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.array(x[:1]))
    params = {p.name: mx.nd.array(p.data().asnumpy()) for p in net.collect_params().values()}
    xavier_weights(params, seed)
    for pn, arr in params.items():
        if pn.endswith("bias"):
            arr[:] = rng.normal(0, 0.05, size=arr.shape)
    sym = net(mx.sym.var("data"))
    arg = {k: v for k, v in params.items() if k in set(sym.list_arguments())}
    aux = {k: v for k, v in params.items() if k in set(sym.list_auxiliary_states())}
    frozen = {p.name for p in net.collect_params().values() if p.grad_req == "null"}
    calib = calibrate(sym, arg, aux, "data", xcal, rng, frozen=frozen)
    for p in net.collect_params().values():
        p.set_data(arg.get(p.name, aux.get(p.name)))
    out = net(mx.nd.array(x)).asnumpy()
    mx.nd.waitall()
    net.export(prefix)
    savez(prefix + "-io.npz", input=x, output=out)
    js = json.load(open(prefix + "-symbol.json"))
    ops = {}
    for n in js["nodes"]:
        if n["op"] != "null":
            ops[n["op"]] = ops.get(n["op"], 0) + 1
    d = mx.nd.load(prefix + "-0000.params")
    return {"kind": "slim", "model_zoo_class": "mxnet.gluon.model_zoo.vision.densenet.DenseNet",
            "config": CONFIG, "full_size_config": "densenet121: DenseNet(64, 32, [6, 12, 24, 16])",
            "input_name": "data", "input_shape": list(INPUT_SHAPE), "output_shape": list(out.shape),
            "seed": seed, "calibration": calib, "ops_used": dict(sorted(ops.items())),
            "num_nodes": len(js["nodes"]), "num_parameters": int(sum(v.size for v in d.values())),
            "mxnet_version": mx.__version__, "numpy_version": np.__version__,
            "saved_with": "gluon HybridBlock.export(prefix) after hybridize() and one forward",
            "output_note": "Gluon hybridized forward outside autograd.record() (inference mode)"}


def gradients(prefix, dtype, head):
    sym, arg, aux = load_checkpoint_files(prefix)
    x = np.load(prefix + "-io.npz")["input"]
    kw = {}
    if dtype == "float64":
        kw["type_dict"] = {k: "float64" for k in sym.list_arguments() + sym.list_auxiliary_states()}
    ex = sym.simple_bind(mx.cpu(), grad_req="write", data=x.shape, **kw)
    for k, v in arg.items():
        ex.arg_dict[k][:] = v.asnumpy().astype(dtype)
    for k, v in aux.items():
        ex.aux_dict[k][:] = v.asnumpy().astype(dtype)
    ex.arg_dict["data"][:] = x.astype(dtype)
    mx.nd.waitall()
    out = ex.forward(is_train=False)[0].asnumpy()
    if head is None:
        return out
    ex.backward(out_grads=[mx.nd.array(head, dtype=dtype)], is_train=False)
    mx.nd.waitall()
    assert out.dtype == np.dtype(dtype), out.dtype
    return out, {k: ex.grad_dict[k].asnumpy() for k in sym.list_arguments()}


def relu_inputs(prefix, dtype):
    """{Activation node name: its input (the BatchNorm output)} from an executor bound on the internal outputs."""
    sym, arg, aux = load_checkpoint_files(prefix)
    x = np.load(prefix + "-io.npz")["input"]
    js = json.loads(sym.tojson())
    relus = [n for n in js["nodes"] if n["op"] == "Activation"]
    internals = sym.get_internals()
    outs = mx.sym.Group([internals[js["nodes"][n["inputs"][0][0]]["name"] + "_output"] for n in relus])
    kw = {}
    if dtype == "float64":
        kw["type_dict"] = {k: "float64" for k in outs.list_arguments() + outs.list_auxiliary_states()}
    ex = outs.simple_bind(mx.cpu(), grad_req="null", data=x.shape, **kw)
    for k in outs.list_arguments():
        ex.arg_dict[k][:] = (x if k == "data" else arg[k].asnumpy()).astype(dtype)
    for k in outs.list_auxiliary_states():
        ex.aux_dict[k][:] = aux[k].asnumpy().astype(dtype)
    vals = [o.asnumpy() for o in ex.forward(is_train=False)]
    return {n["name"]: v for n, v in zip(relus, vals)}


def grad_reference(prefix):
    """Run with MXNET_MKLDNN_ENABLED=0. The float64 results are stored rounded to float32 (6e-8 relative: far
    below the float32 effects they are there to measure; the file stays small)."""
    assert os.environ.get("MXNET_MKLDNN_ENABLED") == "0"
    x = np.load(prefix + "-io.npz")["input"]
    out_shape = gradients(prefix, "float32", None).shape
    head = rng_for(NAME, 123).normal(0, 1, size=out_shape).astype(np.float32)
    out32, g32 = gradients(prefix, "float32", head)
    out64, g64 = gradients(prefix, "float64", head)
    res = {"input": x, "head_grad": head, "out": out32, "f64:out": out64.astype(np.float32)}
    stats = {}
    for k in g32:
        res["grad:" + k] = g32[k]
        res["f64:grad:" + k] = g64[k].astype(np.float32)
        d = g32[k].astype(np.float64) - g64[k]
        stats[k] = {"normwise": float(np.linalg.norm(d) / max(np.linalg.norm(g64[k]), 1e-300)),
                    "max_abs_over_maxabs": float(np.abs(d).max() / max(np.abs(g64[k]).max(), 1e-300))}
    # the ReLUs whose input has another sign in MXNet's float32 than in its float64 (rounding near 0)
    z32, z64 = relu_inputs(prefix, "float32"), relu_inputs(prefix, "float64")
    flips = {}
    for k in z32:
        idx = np.argwhere((z32[k] > 0) != (z64[k] > 0))
        if len(idx):
            res["relu_flip:" + k] = idx.astype(np.int64)
            flips[k] = [{"index": [int(i) for i in t], "f64": float(z64[k][tuple(t)]), "f32": float(z32[k][tuple(t)]),
                         "layer_max_abs": float(np.abs(z64[k]).max())} for t in idx]
    stats = {"per_gradient": stats, "relu_flips": flips,
             "relu_input_error_over_maxabs": max(float(np.abs(z32[k] - z64[k]).max() / np.abs(z64[k]).max())
                                                 for k in z32),
             "relu_inputs_within_1e-5_max_of_0": int(sum((np.abs(v) < 1e-5 * np.abs(v).max()).sum()
                                                         for v in z64.values())),
             "relu_inputs": int(sum(v.size for v in z64.values()))}
    savez(prefix + "-grad-infer.npz", **res)
    with open(prefix + "-grad-stats.json", "w") as f:
        json.dump(stats, f)


def main():
    outdir = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else HERE
    os.makedirs(outdir, exist_ok=True)
    prefix = os.path.join(outdir, NAME)
    rec = build(outdir)
    subprocess.run([sys.executable, os.path.abspath(__file__), "--grads", prefix],
                   env=dict(os.environ, MXNET_MKLDNN_ENABLED="0"), check=True)
    stats = json.load(open(prefix + "-grad-stats.json"))
    os.remove(prefix + "-grad-stats.json")
    per = stats.pop("per_gradient")
    rec["grad_reference"] = dict({
        "file": NAME + "-grad-infer.npz", "generated_with_env": {"MXNET_MKLDNN_ENABLED": "0"},
        "protocol": "simple_bind(grad_req='write'), forward(is_train=False), backward(out_grads=[head_grad]); "
                    "keys grad:* MXNet float32, f64:grad:* the same in float64 (type_dict; stored as float32), "
                    "relu_flip:<relu> the indices where MXNet's float32 ReLU input has another sign than float64",
        "mxnet_f32_vs_f64_worst_normwise": max(per.items(), key=lambda kv: kv[1]["normwise"]),
        "mxnet_f32_vs_f64_worst_max_abs": max(per.items(), key=lambda kv: kv[1]["max_abs_over_maxabs"])},
        **stats, mxnet_f32_vs_f64=per)
    with open(os.path.join(outdir, "record.json"), "w") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")
    print("ok", prefix)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--grads":
        grad_reference(sys.argv[2])
    else:
        main()
