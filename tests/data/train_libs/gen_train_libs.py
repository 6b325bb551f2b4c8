"""Reference data for tests/train_libs, made by the real Apache MXNet 1.9.1 (numpy 1.23.5, CPU pip build).

Run with MXNet's own interpreter from the repository root (mxcc's tests never import mxnet):

    /tmp/mxnet-venv/bin/python tests/data/train_libs/gen_train_libs.py [PART ...]

PART: optimizers, rmsprop, schedulers, initializers, io, metrics, checkpoint (default: all of them).

Writes, beside this script:
  optimizer_ref.npz / optimizer_ref.json  SGD (momentum, clip, schedules, Module-style multipliers) and Adam
                                          driven through mx.optimizer.get_updater: initial weights, raw
                                          gradients, weights and states after every step.
  optimizer_mults-symbol.json             the symbol (variables with lr_mult / wd_mult) of case 'module_mults'.
  optimizer_rmsprop_ref.npz / .json       the same for RMSProp, plain and centered (gamma1, gamma2, epsilon,
                                          wd, rescale_grad, clip_gradient, clip_weights, schedules, multipliers).
  lr_scheduler_ref.json                   FactorScheduler / MultiFactorScheduler values for updates 0..50, as
                                          an optimizer calls them (non-decreasing counts), and the lr an
                                          optimizer with learning_rate + scheduler uses.
  initializer_ref.json                    dumps() strings, Xavier sample statistics per shape and setting,
                                          the naming dispatch of Initializer(InitDesc(name, attrs), arr), and
                                          Module.init_params() on a symbol with BatchNorm.
  io_ref.json / mnist_ref.npz             NDArrayIter batches (3 epochs) for every last_batch_handle, with
                                          and without shuffle (np.random.seed before construction); MNISTIter
                                          on examples/data/mnist (decompressed to a temp dir).
  metric_ref.json                         Accuracy / TopKAccuracy / CrossEntropy / Composite values.
  checkpoint/ref-symbol.json, ref-0003.params, checkpoint_arrays.npz
                                          mx.model.save_checkpoint of fixed arrays (mxcc must write the same
                                          bytes), and checkpoint_mxnet_reads_mxcc.json: MXNet loading a
                                          checkpoint written by mxcc (made by running mxcc in a subprocess
                                          with MXCC_PYTHON, default `python3`, from the repository root).
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import mxnet as mx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
MNIST = os.path.join(ROOT, "examples", "data", "mnist")
SHAPES = [(7, 5), (5,), (3, 4, 2, 2)]
NAMES = ["fc_weight", "fc_bias", "conv_weight"]


def dump(name, obj):
    with open(os.path.join(HERE, name), "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def env():
    return {"mxnet": mx.__version__, "numpy": np.__version__, "python": sys.version.split()[0]}


# -- optimizers ---------------------------------------------------------------------------------------------
def mults_symbol():
    x = mx.sym.var("data")
    w = mx.sym.var("fc_weight", lr_mult=2.0)
    b = mx.sym.var("fc_bias", wd_mult=0.5)
    fc = mx.sym.FullyConnected(x, weight=w, bias=b, num_hidden=7, name="fc")
    cw = mx.sym.var("conv_weight", lr_mult=0.5, wd_mult=3.0)
    conv = mx.sym.Convolution(mx.sym.var("img"), weight=cw, kernel=(2, 2), num_filter=3, no_bias=True,
                              name="conv")
    return mx.sym.Group([fc, conv])


OPT_CASES = {
    "sgd_plain": ("sgd", dict(learning_rate=0.1, wd=1e-4, rescale_grad=1.0 / 100), 1.0),
    "sgd_clip": ("sgd", dict(learning_rate=0.1, wd=1e-3, rescale_grad=0.5, clip_gradient=0.02), 1.0),
    "sgd_mom": ("sgd", dict(learning_rate=0.05, momentum=0.9, wd=1e-3, rescale_grad=1.0 / 32), 1.0),
    "sgd_mom_clip_factor": ("sgd", dict(learning_rate=0.2, momentum=0.8, wd=1e-2, rescale_grad=0.25,
                                        clip_gradient=0.05, lr_scheduler=("factor", dict(step=2, factor=0.5))),
                            1.0),
    "adam": ("adam", dict(learning_rate=0.01, wd=1e-3, rescale_grad=0.5), 1.0),
    "adam_clip_multifactor": ("adam", dict(learning_rate=0.02, beta1=0.8, beta2=0.99, epsilon=1e-6, wd=0.01,
                                           rescale_grad=1.0, clip_gradient=0.5,
                                           lr_scheduler=("multifactor", dict(step=[2, 4], factor=0.3))), 1.0),
    "adam_tiny_grads": ("adam", dict(learning_rate=0.001), 1e-6),
    "module_mults": ("sgd", dict(learning_rate=0.1, momentum=0.5, wd=0.01, rescale_grad=1.0,
                                 param_idx2name=dict(enumerate(NAMES)), set_lr_mult={"fc_bias": 3.0},
                                 set_wd_mult={2: 0.25}), 1.0),
}
STEPS = 6


def make_scheduler(spec):
    kind, kw = spec
    if kind == "factor":
        return mx.lr_scheduler.FactorScheduler(**kw)
    return mx.lr_scheduler.MultiFactorScheduler(**kw)


def run_updater_cases(specs, rs, sym):
    """Each case of `specs` {case: (optimizer name, kwargs, gradient scale)} driven through
    mx.optimizer.get_updater for STEPS steps on 3 parameters of SHAPES, drawing from `rs`: (arrays, cases)."""
    arrays, cases = {}, {}
    for case, (name, kw, gscale) in specs.items():
        kw = dict(kw)
        config = {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()
                  if k not in ("param_idx2name", "set_lr_mult", "set_wd_mult")}
        set_lr, set_wd = kw.pop("set_lr_mult", None), kw.pop("set_wd_mult", None)
        if "lr_scheduler" in kw:
            kw["lr_scheduler"] = make_scheduler(kw["lr_scheduler"])
        if "param_idx2name" in kw:
            kw["sym"] = sym
        opt = mx.optimizer.create(name, **kw)
        if set_lr:
            opt.set_lr_mult(set_lr)
        if set_wd:
            opt.set_wd_mult(set_wd)
        updater = mx.optimizer.get_updater(opt)
        weights = [mx.nd.array(rs.randn(*s).astype(np.float32)) for s in SHAPES]
        for i, w in enumerate(weights):
            arrays["%s/init:%d" % (case, i)] = w.asnumpy()
        for t in range(STEPS):
            for i, w in enumerate(weights):
                g = (rs.randn(*SHAPES[i]) * gscale).astype(np.float32)
                arrays["%s/step%d_grad:%d" % (case, t, i)] = g
                updater(i, mx.nd.array(g), w)
            mx.nd.waitall()
            for i, w in enumerate(weights):
                arrays["%s/step%d_weight:%d" % (case, t, i)] = w.asnumpy()
                st = updater.states[i]
                st = [] if st is None else (list(st) if isinstance(st, (tuple, list)) else [st])
                for k, s in enumerate(st):
                    arrays["%s/step%d_state%d:%d" % (case, t, k, i)] = s.asnumpy()
        cases[case] = {"optimizer": name, "kwargs": config, "set_lr_mult": set_lr and dict(set_lr),
                       "set_wd_mult": set_wd and {str(k): v for k, v in set_wd.items()},
                       "lr_used_last_step": [opt._get_lr(i) for i in range(3)],
                       "wd_used": [opt._get_wd(i) for i in range(3)]}
    return arrays, cases


DRIVER = ("updater = mx.optimizer.get_updater(opt); updater(i, grad, weight) for i in 0..2 each step; "
          "'module_mults' passes sym + param_idx2name as Module does")


def gen_optimizers():
    sym = mults_symbol()
    with open(os.path.join(HERE, "optimizer_mults-symbol.json"), "w") as f:
        f.write(sym.tojson())
    arrays, cases = run_updater_cases(OPT_CASES, np.random.RandomState(1234), sym)
    np.savez_compressed(os.path.join(HERE, "optimizer_ref.npz"), **arrays)
    dump("optimizer_ref.json", {"environment": env(), "shapes": SHAPES, "names": NAMES, "steps": STEPS,
                                "driver": DRIVER, "cases": cases})


# MXNet's RMSProp (rmsprop_update; centered=True: rmspropalex_update). States: (n,) or (n, g, delta).
RMSPROP_CASES = {
    "rmsprop": ("rmsprop", dict(learning_rate=0.01, wd=1e-3, rescale_grad=0.5), 1.0),
    "rmsprop_clip_factor": ("rmsprop", dict(learning_rate=0.02, gamma1=0.95, epsilon=1e-6, wd=0.01, rescale_grad=1.0,
                                            clip_gradient=0.5, clip_weights=0.9,
                                            lr_scheduler=("factor", dict(step=2, factor=0.5))), 1.0),
    "rmsprop_centered": ("rmsprop", dict(learning_rate=0.01, gamma1=0.9, gamma2=0.8, centered=True, wd=1e-3,
                                         rescale_grad=0.25), 1.0),
    "rmsprop_centered_clip_multifactor": ("rmsprop", dict(learning_rate=0.005, gamma1=0.85, gamma2=0.95,
                                                          epsilon=1e-7, centered=True, wd=0.02, rescale_grad=2.0,
                                                          clip_gradient=0.3, clip_weights=1.2,
                                                          lr_scheduler=("multifactor", dict(step=[2, 4], factor=0.3))),
                                          1.0),
    "rmsprop_tiny_grads": ("rmsprop", dict(learning_rate=0.001), 1e-4),
    "rmsprop_centered_module_mults": ("rmsprop", dict(learning_rate=0.01, centered=True, wd=0.01, rescale_grad=1.0,
                                                      param_idx2name=dict(enumerate(NAMES)),
                                                      set_lr_mult={"fc_bias": 3.0}, set_wd_mult={2: 0.25}), 1.0),
}


def gen_rmsprop():
    arrays, cases = run_updater_cases(RMSPROP_CASES, np.random.RandomState(2024), mults_symbol())
    np.savez_compressed(os.path.join(HERE, "optimizer_rmsprop_ref.npz"), **arrays)
    dump("optimizer_rmsprop_ref.json", {"environment": env(), "shapes": SHAPES, "names": NAMES, "steps": STEPS,
                                        "driver": DRIVER, "cases": cases})


# -- learning-rate schedules ----------------------------------------------------------------------------------
SCHED_CASES = {
    "factor_7_half": ("factor", dict(step=7, factor=0.5, base_lr=0.1)),
    "factor_stop": ("factor", dict(step=3, factor=0.3, stop_factor_lr=1e-3, base_lr=0.1)),
    "factor_warmup_linear": ("factor", dict(step=5, factor=0.9, base_lr=0.1, warmup_steps=8,
                                            warmup_begin_lr=0.01)),
    "factor_warmup_constant": ("factor", dict(step=4, factor=0.7, base_lr=0.2, warmup_steps=6,
                                              warmup_begin_lr=0.05, warmup_mode="constant")),
    "factor_1": ("factor", dict(step=1, factor=0.95, base_lr=1.0)),
    "multifactor": ("multifactor", dict(step=[5, 12, 30], factor=0.5, base_lr=0.1)),
    "multifactor_warmup": ("multifactor", dict(step=[10, 20], factor=0.1, base_lr=0.5, warmup_steps=10,
                                               warmup_begin_lr=0.0)),
}


def gen_schedulers():
    out = {}
    for case, spec in SCHED_CASES.items():
        s = make_scheduler(spec)
        out[case] = {"kind": spec[0], "kwargs": spec[1], "lr": [s(n) for n in range(51)]}
    # learning_rate given together with a scheduler: the optimizer overrides base_lr (not warmup's target)
    opt = mx.optimizer.SGD(learning_rate=0.3, lr_scheduler=mx.lr_scheduler.FactorScheduler(
        step=4, factor=0.5, base_lr=1.0, warmup_steps=3, warmup_begin_lr=0.1))
    lrs = []
    for _ in range(12):
        opt._update_count(0)
        lrs.append(opt._get_lr(0))
    out["optimizer_override"] = {"kind": "factor", "kwargs": dict(step=4, factor=0.5, base_lr=1.0, warmup_steps=3,
                                                                  warmup_begin_lr=0.1),
                                 "optimizer_learning_rate": 0.3, "lr_per_update_1_to_12": lrs}
    dump("lr_scheduler_ref.json", {"environment": env(), "cases": out})


# -- initializers --------------------------------------------------------------------------------------------
def gen_initializers():
    mx.random.seed(7)
    dumps = {
        "Xavier()": mx.init.Xavier().dumps(),
        "Xavier(gaussian,in,2.34)": mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2.34).dumps(),
        "Uniform()": mx.init.Uniform().dumps(),
        "Uniform(0.01)": mx.init.Uniform(0.01).dumps(),
        "Normal(0.5)": mx.init.Normal(0.5).dumps(),
        "Zero()": mx.init.Zero().dumps(),
        "One()": mx.init.One().dumps(),
        "Constant(2)": mx.init.Constant(2).dumps(),
        "Constant(0.5)": mx.init.Constant(0.5).dumps(),
        "MSRAPrelu()": mx.init.MSRAPrelu().dumps(),
    }
    stats = []
    for shape in [(64, 100), (100, 64), (32, 16, 3, 3), (10, 1000), (256, 3, 5, 5)]:
        for rnd in ("uniform", "gaussian"):
            for ft in ("avg", "in", "out"):
                for mag in (3, 2.34):
                    arr = mx.nd.zeros(shape)
                    mx.init.Xavier(rnd_type=rnd, factor_type=ft, magnitude=mag)(mx.init.InitDesc("w_weight"), arr)
                    a = arr.asnumpy().astype(np.float64)
                    stats.append({"shape": list(shape), "rnd_type": rnd, "factor_type": ft, "magnitude": mag,
                                  "max_abs": float(np.abs(a).max()), "std": float(a.std()), "mean": float(a.mean())})
    dispatch = {}
    names = ["fc1_weight", "fc1_bias", "bn_gamma", "bn_beta", "q_min", "q_max", "w0", "b0", "bn_moving_mean",
             "bn_moving_var", "x_running_avg", "label"]
    for name in names:
        arr = mx.nd.full((4, 3), 7.0)
        try:
            mx.init.Xavier()(mx.init.InitDesc(name), arr)
            a = arr.asnumpy()
            dispatch[name] = "zeros" if (a == 0).all() else "ones" if (a == 1).all() else "random"
        except ValueError:
            dispatch[name] = "error"
    with_attr = {}
    for name, init in [("fc1_bias", mx.init.One()), ("fc1_weight", mx.init.Constant(0.25)),
                       ("w0", mx.init.Zero()), ("bn_moving_var", mx.init.Constant(3.0))]:
        arr = mx.nd.full((4, 3), 7.0)
        mx.init.Uniform(0.1)(mx.init.InitDesc(name, {"__init__": init.dumps()}), arr)
        with_attr[name] = {"__init__": init.dumps(), "value": float(arr.asnumpy()[0, 0]),
                           "all_equal": bool((arr.asnumpy() == arr.asnumpy()[0, 0]).all())}
    # Module.init_params on a BatchNorm network: which rule each parameter and aux state got
    data = mx.sym.var("data")
    net = mx.sym.BatchNorm(mx.sym.FullyConnected(data, num_hidden=6, name="fc"), fix_gamma=False, name="bn")
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(net, num_hidden=3, name="out"), name="softmax")
    mod = mx.mod.Module(net, data_names=["data"], label_names=["softmax_label"], context=mx.cpu())
    mod.bind(data_shapes=[("data", (2, 5))], label_shapes=[("softmax_label", (2,))])
    mod.init_params(mx.init.Xavier())
    arg, aux = mod.get_params()

    def kind(a):
        a = a.asnumpy()
        return "zeros" if (a == 0).all() else "ones" if (a == 1).all() else "random"
    module_init = {"symbol": json.loads(net.tojson()), "arg": {k: kind(v) for k, v in arg.items()},
                   "aux": {k: kind(v) for k, v in aux.items()},
                   "arg_shapes": {k: list(v.shape) for k, v in arg.items()}}
    dump("initializer_ref.json", {"environment": env(), "dumps": dumps, "xavier_stats": stats,
                                  "dispatch_initdesc_xavier": dispatch, "init_attr_override": with_attr,
                                  "module_init_params": module_init})


# -- iterators ------------------------------------------------------------------------------------------------
def gen_io():
    cases = []
    for n, batch in [(10, 4), (7, 3), (9, 3), (3, 8), (10, 25)]:
        for handle in ("pad", "discard", "roll_over"):
            for shuffle, seed in ((False, None), (True, 5)):
                if batch > n and handle != "pad":
                    continue
                data = np.arange(n * 2, dtype=np.int64).reshape(n, 2)
                label = (np.arange(n) % 10).astype(np.uint8)
                if seed is not None:
                    np.random.seed(seed)
                it = mx.io.NDArrayIter(data, label, batch, shuffle=shuffle, last_batch_handle=handle)
                epochs = []
                for _ in range(3):
                    epochs.append([{"data": b.data[0].asnumpy().tolist(), "label": b.label[0].asnumpy().tolist(),
                                    "pad": b.pad} for b in it])
                    it.reset()
                cases.append({"n": n, "batch_size": batch, "last_batch_handle": handle, "shuffle": shuffle,
                              "seed": seed, "epochs": epochs,
                              "provide_data": [[d.name, list(d.shape), np.dtype(d.dtype).name] for d in it.provide_data],
                              "provide_label": [[d.name, list(d.shape), np.dtype(d.dtype).name]
                                                for d in it.provide_label]})
    multi = mx.io.NDArrayIter({"b": np.zeros((5, 2)), "a": np.ones((5, 3))}, [np.zeros(5), np.ones(5)], 2)
    nolabel = mx.io.NDArrayIter(np.arange(6.0), None, 4)
    extra = {"dict_and_list_names": {"provide_data": [[d.name, list(d.shape)] for d in multi.provide_data],
                                     "provide_label": [[d.name, list(d.shape)] for d in multi.provide_label]},
             "no_label": {"labels": [len(b.label) for b in nolabel], "provide_label": nolabel.provide_label}}
    mnist = {}
    arrays = {}
    with tempfile.TemporaryDirectory() as tmp:
        for f in ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
            with gzip.open(os.path.join(MNIST, f + ".gz")) as src, open(os.path.join(tmp, f), "wb") as dst:
                dst.write(src.read())
        img, lab = os.path.join(tmp, "t10k-images-idx3-ubyte"), os.path.join(tmp, "t10k-labels-idx1-ubyte")
        for key, kw in [("flat", dict(batch_size=100, flat=True)), ("image", dict(batch_size=128)),
                        ("parts", dict(batch_size=300, num_parts=3, part_index=1))]:
            it = mx.io.MNISTIter(image=img, label=lab, shuffle=False, silent=True, **kw)
            # NOTE: a batch's NDArrays are the iterator's buffers, overwritten by the next batch: copy now.
            batches = [(b.data[0].asnumpy().copy(), b.label[0].asnumpy().copy(), b.pad) for b in it]
            (x0, y0, pad0), (xl, yl, _) = batches[0], batches[-1]
            mnist[key] = {"kwargs": kw, "num_batches": len(batches),
                          "provide_data": [[d.name, list(d.shape)] for d in it.provide_data],
                          "provide_label": [[d.name, list(d.shape)] for d in it.provide_label],
                          "data_shape": list(x0.shape), "label_shape": list(y0.shape), "pad": pad0,
                          "first_batch_data_sum": float(x0.astype(np.float64).sum()),
                          "last_batch_data_sum": float(xl.astype(np.float64).sum())}
            arrays[key + "/first_batch_head"] = x0[:2]
            arrays[key + "/first_batch_label"] = y0
            arrays[key + "/last_batch_label"] = yl
    np.savez_compressed(os.path.join(HERE, "mnist_ref.npz"), **arrays)
    dump("io_ref.json", {"environment": env(), "ndarrayiter": cases, "ndarrayiter_extra": extra,
                         "mnistiter": mnist})


# -- metrics ---------------------------------------------------------------------------------------------------
def gen_metrics():
    rs = np.random.RandomState(3)
    preds = [rs.rand(40, 10).astype(np.float32) for _ in range(2)]
    preds = [p / p.sum(1, keepdims=True) for p in preds]
    labels = [rs.randint(0, 10, 40).astype(np.float32) for _ in range(2)]
    out = {"preds": [p.tolist() for p in preds], "labels": [l.tolist() for l in labels]}
    for name, make in [("acc", lambda: mx.metric.Accuracy()), ("top3", lambda: mx.metric.TopKAccuracy(top_k=3)),
                       ("ce", lambda: mx.metric.CrossEntropy()),
                       ("composite", lambda: mx.metric.create(["acc", "ce", mx.metric.TopKAccuracy(top_k=2)]))]:
        m = make()
        rec = {"initial": m.get()}
        m.update([mx.nd.array(labels[0])], [mx.nd.array(preds[0])])
        rec["after_1"] = m.get()
        m.reset_local()
        m.update([mx.nd.array(labels[1])], [mx.nd.array(preds[1])])
        rec["after_reset_local_2"] = m.get()
        rec["global_after_2"] = m.get_global()
        rec["name_value"] = m.get_name_value()
        m.reset()
        rec["after_reset"] = m.get()
        out[name] = rec
    m = mx.metric.Accuracy()
    m.update([mx.nd.array([0, 1, 2, 3])], [mx.nd.array([0, 1.7, 1, 3])])       # class indices, same shape
    out["acc_same_shape"] = m.get()
    m = mx.metric.TopKAccuracy(top_k=3)
    m.update([mx.nd.array([1, 2, 3, 4])], [mx.nd.array([1, 2, 0, 4])])       # 1-D predictions
    out["topk_1d"] = {"get": m.get(), "global": m.get_global()}
    dump("metric_ref.json", {"environment": env(), **out})


# -- checkpoints -----------------------------------------------------------------------------------------------
def gen_checkpoint():
    ck = os.path.join(HERE, "checkpoint")
    os.makedirs(ck, exist_ok=True)
    data = mx.sym.var("data")
    net = mx.sym.BatchNorm(mx.sym.FullyConnected(data, num_hidden=4, name="fc"), name="bn")
    net = mx.sym.SoftmaxOutput(net, name="softmax")
    rs = np.random.RandomState(11)
    arg = {"fc_weight": rs.randn(4, 3).astype(np.float32), "fc_bias": rs.randn(4).astype(np.float32),
           "bn_gamma": rs.rand(4).astype(np.float32), "bn_beta": rs.randn(4).astype(np.float32)}
    aux = {"bn_moving_mean": rs.randn(4).astype(np.float32), "bn_moving_var": rs.rand(4).astype(np.float32)}
    np.savez(os.path.join(HERE, "checkpoint_arrays.npz"), **{"arg:" + k: v for k, v in arg.items()},
             **{"aux:" + k: v for k, v in aux.items()})
    mx.model.save_checkpoint(os.path.join(ck, "ref"), 3, net, {k: mx.nd.array(v) for k, v in arg.items()},
                             {k: mx.nd.array(v) for k, v in aux.items()})
    # MXNet reads a checkpoint that mxcc wrote (mxcc runs in its own interpreter)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "mx")
        script = ("import numpy as np, mxcc.model as m, mxcc.symbol as s\n"
                  "d = dict(np.load(%r))\n"
                  "arg = {k[4:]: v for k, v in d.items() if k.startswith('arg:')}\n"
                  "aux = {k[4:]: v for k, v in d.items() if k.startswith('aux:')}\n"
                  "m.save_checkpoint(%r, 7, s.load_json(%r), arg, aux)\n"
                  % (os.path.join(HERE, "checkpoint_arrays.npz"), prefix, net.tojson()))
        python = os.environ.get("MXCC_PYTHON", "python3")
        subprocess.run([python, "-c", script], cwd=ROOT, check=True)
        sym, arg2, aux2 = mx.model.load_checkpoint(prefix, 7)
        diffs = {k: float(np.abs(v.asnumpy() - arg[k]).max()) for k, v in arg2.items()}
        diffs.update({k: float(np.abs(v.asnumpy() - aux[k]).max()) for k, v in aux2.items()})
        ex = sym.simple_bind(mx.cpu(), data=(2, 3), softmax_label=(2,))
        mx_written = open(os.path.join(ck, "ref-0003.params"), "rb").read()
        mxcc_written = open(prefix + "-0007.params", "rb").read()
        dump("checkpoint_mxnet_reads_mxcc.json", {
            "environment": env(), "mxcc_python": python,
            "loaded_arg_names": sorted(arg2), "loaded_aux_names": sorted(aux2),
            "max_abs_diff": diffs, "list_arguments": sym.list_arguments(),
            "list_auxiliary_states": sym.list_auxiliary_states(), "list_outputs": sym.list_outputs(),
            "bound_output_shapes": [list(o.shape) for o in ex.outputs],
            "params_bytes_equal_to_mxnet": mx_written == mxcc_written})


PARTS = {"optimizers": gen_optimizers, "rmsprop": gen_rmsprop, "schedulers": gen_schedulers,
         "initializers": gen_initializers, "io": gen_io, "metrics": gen_metrics, "checkpoint": gen_checkpoint}


def main(parts):
    for part in parts or PARTS:
        PARTS[part]()
    print("wrote reference data to", HERE)


if __name__ == "__main__":
    main(sys.argv[1:])
