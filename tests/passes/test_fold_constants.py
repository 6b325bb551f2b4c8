"""Constant folding of parameter-only subgraphs (passes/fold_constants.py): which nodes fold and which never
do, where their values live (ctx->derived, not the arena), and end to end against numpy and the unfolded
compile, including params set twice and a training build's forward(is_train=False)."""
import json

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.cli import main as cli_main
from mxcc.compiler.driver import inspect_network
from mxcc.options import CompileOptions
from mxcc.passes import bind, dce, fold_constants, infer_shapes, remove_dropout, run_pipeline, train_mode
from mxcc.passes.fold_constants import PREPARE, folded_nodes
from mxcc_testing import needs_gcc, rel_err

X = (4, 8)


def _net():
    """fc(data, transpose(w * 0.5), b * 2 + 1) -> relu -> * reshape(g * g), plus data-dependent decoys."""
    with sym.NameManager():
        d = sym.var("data")
        w, b, g = sym.var("w", shape=(8, 16)), sym.var("b", shape=(16,)), sym.var("g", shape=(16,))
        wt = sym.transpose(w * 0.5, name="wt")                                  # (16, 8), folded
        fc = sym.FullyConnected(d, weight=wt, bias=b * 2 + 1, num_hidden=16, name="fc")
        scale = sym.Reshape(g * g, shape=(1, 16), name="scale")                 # a view of a folded value
        out = sym.broadcast_mul(sym.relu(fc), scale, name="out")
        return sym.broadcast_add(out, sym.sum(d * 3.0, axis=1, keepdims=True), name="head")   # data: stays


def _ref(p, x):
    w = (p["w"] * 0.5).T
    y = np.maximum(x @ w.T + (p["b"] * 2 + 1), 0) * (p["g"] * p["g"])[None]
    return y + (x * 3.0).sum(axis=1, keepdims=True)


def _params(rng, shift=0.0):
    return dict(w=rng.standard_normal((8, 16)).astype(np.float32) + shift,
                b=rng.standard_normal(16).astype(np.float32), g=rng.standard_normal(16).astype(np.float32))


def _typed(net, **shapes):
    return infer_shapes(bind(net.graph), shapes)


def test_folds_param_only_chains_and_nothing_that_reads_data():
    g = fold_constants(_typed(_net(), data=X))
    assert folded_nodes(g) == ["_mulscalar0", "wt", "_mulscalar1", "_plusscalar0", "_mul0", "scale"]
    forward = [n.name for n in g.nodes if not n.is_variable and n.phase == "forward"]
    assert forward == ["fc", "relu0", "out", "_mulscalar2", "sum0", "head"]     # data * 3 reads data


def test_heads_random_ops_and_dropout_are_never_folded():
    with sym.NameManager():
        w = sym.var("w", shape=(3, 4))
        net = sym.Group([sym.relu(w * 2.0, name="r"), sym.var("data") + sym.Dropout(w, p=0.5, name="drop"),
                         sym.exp(sym.Dropout(w, p=0.5, name="drop2"), name="e2") + sym.var("data")])
    typed = _typed(net, data=(3, 4))
    # a head is written by the forward into the caller's array: only its param-only inputs fold; Dropout left
    # in the graph is not folded, nor what reads it
    assert folded_nodes(fold_constants(typed)) == ["_mulscalar0"]
    # for inference remove_dropout runs first: exp(w) then reads w and folds
    assert folded_nodes(fold_constants(dce(remove_dropout(typed)))) == ["_mulscalar0", "e2"]
    # training-mode Dropout draws a mask every forward: never folded, and neither is anything downstream
    trained = fold_constants(train_mode(typed))
    assert {n.op for n in trained.nodes if n.name in ("drop", "drop2")} == {"_train_Dropout"}
    assert folded_nodes(trained) == ["_mulscalar0"]


def test_labels_are_inputs_not_params():
    with sym.NameManager():
        fc = sym.FullyConnected(sym.var("data"), num_hidden=5, name="fc")
        lab = sym.var("softmax_label")
        net = sym.Group([sym.SoftmaxOutput(fc, lab, name="softmax"), sym.relu(lab * 2.0, name="r")])
    g = fold_constants(_typed(net, data=(4, 3)))
    assert "softmax_label" in g.inputs and folded_nodes(g) == []


def test_training_graphs_and_the_switch_fold_nothing():
    graph, shapes = _net().graph, {"data": X}
    for opts in (CompileOptions(train=True), CompileOptions(fold=False)):
        plan = run_pipeline(graph, shapes, opts)
        assert plan.folded == () and plan.derived_bytes == 0
        assert all(n.phase != PREPARE for n in plan.graph.nodes)
    assert [grp.name for grp in run_pipeline(graph, shapes, CompileOptions()).folded] == \
        ["_mulscalar0", "wt", "_mulscalar1", "_mul0"]       # b * 2 + 1 is one fused loop


def test_plan_puts_folded_values_in_derived_not_the_arena():
    graph, shapes = _net().graph, {"data": X}
    plan = run_pipeline(graph, shapes, CompileOptions())
    unfolded = run_pipeline(graph, shapes, CompileOptions(fold=False))
    g = plan.graph
    grouped = {m for grp in g.groups for m in grp.members}
    folded_ids = {m for grp in plan.folded for m in grp.members}
    assert grouped.isdisjoint(folded_ids) and len(g.groups) == len(unfolded.graph.groups) - 4
    for r in (r for grp in plan.folded for r in grp.outputs):
        loc = plan.locations[r.key]
        assert loc.derived is not None and loc.offset is None and loc.slot is None
    assert not {b.name for b in plan.buffers} & {g.output_name(grp.outputs[0]) for grp in plan.folded}
    assert plan.arena_bytes <= unfolded.arena_bytes
    # the view of a folded value reads it in place
    scale = next(n for n in g.nodes if n.name == "scale")
    assert plan.locations[(scale.id, 0)] == plan.locations[(scale.inputs[0].node, 0)]
    # derived placement: buffers live at the same prepare step never overlap; what the forward reads lives
    # to the end; w * 0.5 (read only by the transpose) can be reused
    bs = plan.derived_buffers
    for a in bs:
        for b in bs:
            if a is not b and a.start <= b.end and b.start <= a.end:
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset
    live = {b.name: (b.start, b.end) for b in bs}
    assert live["wt_output"][1] == live["_mul0_output"][1] == len(plan.folded)
    assert live["_mulscalar0_output"] == (0, 1)
    assert plan.derived_bytes == max(b.offset + (b.nbytes + 63) // 64 * 64 for b in bs) < \
        sum((b.nbytes + 63) // 64 * 64 for b in bs)


def test_inspect_lists_folded_nodes_with_bytes(capsys, tmp_path):
    pj = inspect_network(_net(), {"data": X}, CompileOptions())
    assert [(f["members"], f["nbytes"]) for f in pj["folded"]] == [
        (["_mulscalar0"], 512), (["wt"], 512), (["_mulscalar1", "_plusscalar0"], 64), (["_mul0"], 64)]
    assert all(grp["name"] not in {"wt", "_mul0"} for grp in pj["groups"])
    path = tmp_path / "net-symbol.json"
    path.write_text(_net().tojson())
    assert cli_main(["inspect", str(path), "--shape", "data=4,8"]) == 0
    text = capsys.readouterr().out
    assert "folded at bind time" in text and "wt" in text
    assert cli_main(["inspect", str(path), "--shape", "data=4,8", "--no-fold"]) == 0
    assert "folded" not in capsys.readouterr().out


def test_batch_norm_with_folded_params_still_folds_into_the_gemm():
    with sym.NameManager():
        gamma = sym.var("gamma", shape=(6,))
        fc = sym.FullyConnected(sym.var("data"), num_hidden=6, name="fc")
        net = sym.BatchNorm(fc, gamma=gamma * 2.0, fix_gamma=False, name="bn")
    plan = run_pipeline(net.graph, {"data": (3, 5)}, CompileOptions())
    assert [[plan.graph.nodes[m].name for m in grp.members] for grp in plan.graph.groups] == [["fc", "bn"]]
    assert [grp.name for grp in plan.folded] == ["_mulscalar0"]


# -- end to end --------------------------------------------------------------------------------------------
def _body(src: str, fn: str) -> str:
    """The body of the generated C function `void fn(mxcc_ctx *ctx)`."""
    start = src.index(f"void {fn}(mxcc_ctx *ctx)\n{{")
    return src[start:src.index("\n}\n", start)]


@needs_gcc
def test_folded_compile_matches_numpy_unfolded_and_refolds_on_set_params(rng, tmp_path):
    p1, p2 = _params(rng), _params(rng, shift=1.0)
    x = rng.standard_normal(X).astype(np.float32)
    mod = mxcc.compile(_net(), {"data": X}, p1, out_dir=tmp_path / "f", name="net")
    plain = mxcc.compile(_net(), {"data": X}, p1, fold=False, name="net")
    y = mod.forward(data=x)[0]
    assert rel_err(y, _ref(p1, x)) <= 1e-5
    np.testing.assert_allclose(y, plain.forward(data=x)[0], rtol=1e-6, atol=1e-6)
    mod.set_params(p2)                      # new params: <net>_prepare refolds
    assert rel_err(mod.forward(data=x)[0], _ref(p2, x)) <= 1e-5
    mod.set_params({"g": p1["g"]}, allow_missing=True)    # one param changed: still refolded
    assert rel_err(mod.forward(data=x)[0], _ref({**p2, "g": p1["g"]}, x)) <= 1e-5
    # the folded kernels run in <net>_prepare, not the forward, and the kernel table has only forward kernels
    src = (tmp_path / "f" / "net.c").read_text()
    prepare, forward = _body(src, "net_prepare"), _body(src, "net_forward")
    assert "net_wt(ctx)" in prepare and "net_wt(" not in forward and "net_fc(ctx)" in forward
    assert [k["name"] for k in mod.meta["kernels"]] == ["fc", "out", "_mulscalar2", "sum0", "head"]
    assert json.loads((tmp_path / "f" / "plan.json").read_text())["derived_bytes"] == 1024


@needs_gcc
def test_head_reading_folded_values_and_folded_batch_norm(rng):
    """A head that is a view of a folded value (a copy kernel reads ctx->derived), and a BatchNorm folded into
    its FullyConnected whose gamma is itself folded (read by the BatchNorm fold after it was computed)."""
    with sym.NameManager():
        d, gamma = sym.var("data"), sym.var("gamma", shape=(6,))
        fc = sym.FullyConnected(d, num_hidden=6, name="fc")
        bn = sym.BatchNorm(fc, gamma=sym.exp(gamma), fix_gamma=False, eps=1e-3, name="bn")
        net = sym.Group([bn, sym.Reshape(sym.exp(gamma), shape=(2, 3), name="rs")])
    p = dict(fc_weight=rng.standard_normal((6, 5)), fc_bias=rng.standard_normal(6), gamma=rng.standard_normal(6),
             bn_beta=rng.standard_normal(6), bn_moving_mean=rng.standard_normal(6),
             bn_moving_var=np.abs(rng.standard_normal(6)) + 0.5)
    p = {k: v.astype(np.float32) for k, v in p.items()}
    x = rng.standard_normal((3, 5)).astype(np.float32)
    mod = mxcc.compile(net, {"data": (3, 5)}, p)
    y, rs = mod.forward(data=x)
    z = x @ p["fc_weight"].T + p["fc_bias"]
    ref = (z - p["bn_moving_mean"]) / np.sqrt(p["bn_moving_var"] + 1e-3) * np.exp(p["gamma"]) + p["bn_beta"]
    assert rel_err(y, ref) <= 1e-5 and rel_err(rs, np.exp(p["gamma"]).reshape(2, 3)) <= 1e-6


@needs_gcc
def test_aux_states_count_as_params(rng):
    """An inference BatchNorm over a weight reads gamma/beta and the moving statistics (aux states): it folds,
    and <net>_prepare runs its BatchNorm kernel once; the forward is the FullyConnected alone."""
    with sym.NameManager():
        w = sym.var("w", shape=(4, 6))
        net = sym.FullyConnected(sym.var("data"), weight=sym.BatchNorm(w, fix_gamma=False, eps=1e-3, name="bnw"),
                                 num_hidden=4, no_bias=True, name="fc")
    plan = run_pipeline(net.graph, {"data": (3, 6)}, CompileOptions())
    assert [grp.name for grp in plan.folded] == ["bnw"] and [s.kind for s in plan.slots].count("aux") == 2
    p = {"w": rng.standard_normal((4, 6)), "bnw_gamma": rng.standard_normal(6), "bnw_beta": rng.standard_normal(6),
         "aux:bnw_moving_mean": rng.standard_normal(6), "aux:bnw_moving_var": np.abs(rng.standard_normal(6)) + 0.5}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    x = rng.standard_normal((3, 6)).astype(np.float32)
    mod = mxcc.compile(net, {"data": (3, 6)}, p)
    wn = (p["w"] - p["aux:bnw_moving_mean"]) / np.sqrt(p["aux:bnw_moving_var"] + 1e-3) * p["bnw_gamma"] + p["bnw_beta"]
    assert rel_err(mod.forward(data=x)[0], x @ wn.T) <= 1e-5
    assert [k["name"] for k in mod.meta["kernels"]] == ["fc"]


@needs_gcc
@pytest.mark.parametrize("fuse_plan", [True, False])
def test_folded_dot_convolution_with_workspace_and_broadcasts(rng, fuse_plan):
    """A param-only dot, a param-only Convolution (its im2col workspace, if any, is in ctx->derived too) reduced
    to a per-column vector, broadcast_mul(gamma, s): all folded; with and without fusion and planning."""
    with sym.NameManager():
        a, b = sym.var("a", shape=(6, 5)), sym.var("b", shape=(5, 7))
        img, k = sym.var("img", shape=(1, 3, 8, 8)), sym.var("k", shape=(7, 3, 3, 3))
        conv = sym.Convolution(img, k, kernel=(3, 3), num_filter=7, no_bias=True, name="conv")
        col = sym.broadcast_mul(sym.var("gamma", shape=(7,)), sym.var("s", shape=(7,)), name="gs") \
            + sym.sum(conv, axis=(0, 2, 3), name="cs")
        net = sym.broadcast_add(sym.dot(sym.var("data"), sym.dot(a, b, name="ab"), name="dy"),
                                sym.Reshape(col, shape=(1, 7)), name="y")
    opts = dict(fuse=fuse_plan, plan=fuse_plan)
    plan = run_pipeline(net.graph, {"data": (4, 6)}, CompileOptions(**opts))
    assert {"ab", "gs", "conv", "cs"} <= {grp.name for grp in plan.folded}
    conv_id = next(n.id for n in plan.graph.nodes if n.name == "conv")
    assert not any(b.name == "conv_workspace" for b in plan.buffers)         # scratch of a folded kernel
    assert conv_id not in plan.workspaces or plan.workspaces[conv_id].location.derived is not None
    assert [plan.graph.nodes[grp.anchor].name for grp in plan.graph.groups] == ["dy", "y"]
    p = {n: rng.standard_normal(s).astype(np.float32) for n, s in
         (("a", (6, 5)), ("b", (5, 7)), ("img", (1, 3, 8, 8)), ("k", (7, 3, 3, 3)), ("gamma", (7,)), ("s", (7,)))}
    x = rng.standard_normal((4, 6)).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(p["img"][0].astype(np.float64), (3, 3), axis=(1, 2))
    conv_ref = np.einsum("chwij,fcij->fhw", windows, p["k"])                 # (7, 6, 6)
    ref = x @ (p["a"] @ p["b"]) + (p["gamma"] * p["s"] + conv_ref.sum(axis=(1, 2)))[None]
    assert rel_err(mxcc.compile(net, {"data": (4, 6)}, p, **opts).forward(data=x)[0], ref) <= 1e-5


class _SGD:
    kind, state_names = "sgd", ()

    def step_hyper(self, t):
        return {"lr": 0.5, "wd": 0.0, "rescale_grad": 1.0, "clip_gradient": -1.0}

    def multipliers(self, graph, names):
        return {}, {}


@needs_gcc
def test_training_build_refolds_before_each_inference_forward(rng, tmp_path):
    """Training folds nothing, but its forward(is_train=False) (the inference variant, with BatchNorm) does: it
    must see the params each update changed."""
    with sym.NameManager():
        w = sym.var("w", shape=(6, 5))
        bn = sym.BatchNorm(sym.var("data"), fix_gamma=False, name="bn")
        net = sym.FullyConnected(bn, weight=sym.transpose(w) * 0.5, num_hidden=5, no_bias=True, name="fc")
    exe = mxcc.compile(net, {"data": (4, 6)}, train=True, optimizer=_SGD(), out_dir=tmp_path / "t", name="net")
    src = (tmp_path / "t" / "net.c").read_text()
    assert "net_infer_transpose0(ctx)" in _body(src, "net_prepare")      # folded for inference only
    assert "net_transpose0(ctx)" in _body(src, "net_forward") and "net_prepare(ctx)" in _body(src, "net_forward_infer")
    exe.set_params({"w": rng.standard_normal((6, 5)).astype(np.float32), "bn_gamma": np.ones(6, np.float32),
                    "bn_beta": np.zeros(6, np.float32), "aux:bn_moving_mean": np.zeros(6, np.float32),
                    "aux:bn_moving_var": np.ones(6, np.float32)})
    x = rng.standard_normal((4, 6)).astype(np.float32)

    def infer_ref():
        a, aux = exe.arg_dict, exe.aux_dict
        xn = (x - aux["bn_moving_mean"]) / np.sqrt(aux["bn_moving_var"] + 1e-3) * a["bn_gamma"] + a["bn_beta"]
        return xn @ (a["w"] * 0.5)

    assert rel_err(exe.forward(is_train=False, data=x)[0], infer_ref()) <= 1e-5
    exe.forward(is_train=True, data=x)
    exe.backward(np.ones((4, 5), np.float32))
    w_before = exe.arg_dict["w"].copy()
    exe.update()
    assert not np.array_equal(exe.arg_dict["w"], w_before)
    assert rel_err(exe.forward(is_train=False, data=x)[0], infer_ref()) <= 1e-5


@needs_gcc
def test_folded_network_under_sanitizers(tmp_path):
    """<net>_prepare's folded kernels (ctx->derived reused between folded values, a head copied from it) and
    the forward reading them, built with ASan + UBSan: no report."""
    import os
    import subprocess
    with sym.NameManager():
        net = sym.Group([_net(), sym.Reshape(sym.var("g", shape=(16,)) * 3.0, shape=(4, 4), name="rs")])
    out = mxcc.compile(net, {"data": X}, sanitize=True, out_dir=tmp_path / "s", name="net")
    assert "net_wt(ctx)" in (out / "net.c").read_text()
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    r = subprocess.run([str(out / "net_bench"), "--iters", "2", "--warmup", "1"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0 and "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr, \
        r.stdout + r.stderr
