"""Structural before/after tests of the passes (TVM style: build Before with the Symbol API, run the pass,
compare with the Expected structure) and property tests of the memory planner on seeded random DAGs."""
import random

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.graph.ir import Ref
from mxcc.options import CompileOptions
from mxcc.passes import bind, dce, fuse, infer_shapes, plan_memory, remove_dropout, run_pipeline
from mxcc.passes.plan_memory import _residual_input, grouped_nodes
from mxcc_testing import needs_gcc, rel_err


def _typed(net, **shapes):
    return infer_shapes(bind(net.graph), shapes)


def _names(g):
    return [n.name for n in g.nodes]


def test_remove_dropout_then_dce():
    with sym.NameManager():
        d = sym.var("data")
        net = sym.FullyConnected(sym.Dropout(sym.Dropout(d, p=0.3), p=0.2), num_hidden=4)
    g = dce(remove_dropout(_typed(net, data=(2, 3))))
    assert _names(g) == ["data", "fullyconnected0_weight", "fullyconnected0_bias", "fullyconnected0"]
    assert g.nodes[3].inputs[0] == Ref(0, 0)


def test_dropout_that_is_a_graph_output_stays_as_a_copy():
    net = sym.Dropout(sym.var("data"), name="drop")
    g = dce(remove_dropout(_typed(net, data=(2, 3))))
    assert _names(g) == ["data", "drop"]
    assert [grp.members for grp in fuse(g).groups] == [(1,)]


def test_dce_drops_unreachable_nodes_and_renumbers():
    with sym.NameManager():
        d = sym.var("data")
        a = sym.relu(d)
        _unused = sym.exp(a)
        net = sym.tanh(a)
    g = _typed(sym.Group([net]), data=(2,))
    assert _names(dce(g)) == ["data", "relu0", "tanh0"]


def test_fuse_anchor_epilogue_and_elementwise_chains():
    with sym.NameManager():
        d, r = sym.var("data"), sym.var("r")
        fc = sym.FullyConnected(d, num_hidden=8, name="fc")
        a = sym.Activation(fc + r, act_type="relu", name="act")
        chain = sym.sigmoid(sym.exp(a) * 2)          # a has two readers: ends the fc group
        net = sym.Group([chain, sym.softmax(a, name="sm")])
    g = fuse(_typed(net, data=(4, 5), r=(4, 8)))
    groups = [[g.nodes[i].name for i in grp.members] for grp in g.groups]
    assert groups == [["fc", "_plus0", "act"], ["exp0", "_mulscalar0", "sigmoid0"], ["sm"]]
    unfused = fuse(_typed(net, data=(4, 5), r=(4, 8)), enabled=False)
    assert all(len(grp.members) == 1 for grp in unfused.groups) and len(unfused.groups) == 7


def test_fuse_stops_at_graph_outputs_and_two_activations():
    with sym.NameManager():
        fc = sym.FullyConnected(sym.var("data"), num_hidden=8, name="fc")
        net = sym.Group([sym.tanh(sym.relu(fc)), fc])
    g = fuse(_typed(net, data=(4, 5)))
    assert [[g.nodes[i].name for i in grp.members] for grp in g.groups] == [["fc"], ["relu0", "tanh0"]]
    with sym.NameManager():
        fc = sym.FullyConnected(sym.var("data"), num_hidden=8, name="fc")
        net = sym.tanh(sym.relu(fc))
    g = fuse(_typed(net, data=(4, 5)))
    assert [[g.nodes[i].name for i in grp.members] for grp in g.groups] == [["fc", "relu0"], ["tanh0"]]


# -- memory planner properties on random DAGs ---------------------------------------------------------
def random_net(seed: int):
    """A random DAG of FullyConnected, unary/binary elementwise, Flatten and softmax nodes."""
    rnd = random.Random(seed)
    widths = [rnd.choice([3, 8, 16, 33]) for _ in range(3)]
    batch = rnd.choice([1, 2, 5])
    vals = [(sym.var("data"), widths[0])]
    with sym.NameManager():
        for i in range(rnd.randint(4, 14)):
            x, w = rnd.choice(vals[-4:])
            kind = rnd.random()
            if kind < 0.3:
                n = rnd.choice(widths)
                vals.append((sym.FullyConnected(x, num_hidden=n, name=f"fc{i}"), n))
            elif kind < 0.6:
                vals.append((getattr(sym, rnd.choice(["relu", "tanh", "exp", "negative", "sigmoid"]))(x), w))
            elif kind < 0.85:
                same = [v for v in vals if v[1] == w]
                vals.append((x + rnd.choice(same)[0] if rnd.random() < 0.5 else x * rnd.choice(same)[0], w))
            else:
                vals.append((sym.softmax(x), w))
        outs = [vals[-1][0]] + ([vals[rnd.randrange(1, len(vals))][0]] if rnd.random() < 0.4 else [])
    return sym.Group(outs), {"data": (batch, widths[0])}


def _check_plan(plan):
    g = plan.graph
    step_of = {}
    for step, grp in enumerate(g.groups):
        for r in grp.outputs:
            step_of[r.key] = step
    arena_vals = [(k, loc.offset, plan.live[k]) for k, loc in plan.locations.items()
                  if loc.offset is not None and k in plan.live]
    nbytes = {k: (g.type_of(Ref(*k)).nbytes if k[1] >= 0 else None) for k, _, _ in arena_vals}
    shared = {(a, b) for a, b in plan.inplace}
    names = {k: (g.output_name(Ref(*k)) if k[1] >= 0 else None) for k, _, _ in arena_vals}
    for i, (ka, oa, (sa, ea)) in enumerate(arena_vals):
        assert oa % 64 == 0
        assert oa + (nbytes[ka] or 0) <= plan.arena_bytes
        for kb, ob, (sb, eb) in arena_vals[i + 1:]:
            if ka[1] < 0 or kb[1] < 0:
                continue
            overlap_mem = oa < ob + nbytes[kb] and ob < oa + nbytes[ka]
            overlap_time = sa <= eb and sb <= ea
            if overlap_mem and overlap_time:
                # allowed only as in-place: the later value is written over one that dies at that step
                first, later = ((ka, sa, ea), (kb, sb, eb)) if sa <= sb else ((kb, sb, eb), (ka, sa, ea))
                assert first[2] == later[1], f"{names[ka]} and {names[kb]} overlap while both live"
                grp = g.groups[later[1]]
                members = [g.nodes[m] for m in grp.members]
                assert (all(m.opdef.inplace for m in members)
                        or _residual_input(g, members, grouped_nodes(g)) == first[0])
    assert plan.arena_bytes >= plan.lower_bound_bytes
    assert plan.arena_bytes <= plan.naive_bytes or plan.naive_bytes == 0


@pytest.mark.parametrize("seed", range(60))
def test_planner_properties_on_random_dags(seed):
    net, shapes = random_net(seed)
    for fuse_on in (True, False):
        plan = run_pipeline(net.graph, shapes, CompileOptions(fuse=fuse_on))
        _check_plan(plan)


@needs_gcc
@pytest.mark.parametrize("seed", [1, 7, 13])
def test_random_dags_fused_planned_equal_unfused_naive(seed):
    net, shapes = random_net(seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shapes["data"]).astype(np.float32)
    a = mxcc.compile(net, shapes, fuse=True, plan=True)
    params = {k: rng.standard_normal(s).astype(np.float32) * 0.3 for k, s in a.param_shapes.items()}
    a.set_params(params)
    b = mxcc.compile(net, shapes, params, fuse=False, plan=False, schedule=False)
    for oa, ob in zip(a.forward(data=x), b.forward(data=x)):
        assert rel_err(oa, ob.astype(np.float64)) <= 1e-5


def _chain_net():
    """A wide first layer (room in the arena), then alternating 1x1 and depthwise 3x3 layers of one size."""
    x = sym.Activation(sym.Convolution(sym.Variable("data"), num_filter=64, kernel=(3, 3), pad=(1, 1),
                                       name="wide"), act_type="relu")
    x = sym.Convolution(x, num_filter=64, kernel=(3, 3), stride=(2, 2), pad=(1, 1), name="down")
    for i in range(4):
        x = sym.Activation(sym.Convolution(x, num_filter=64, kernel=(1, 1), no_bias=True, name=f"pw{i}"),
                           act_type="relu")
        x = sym.Activation(sym.Convolution(x, num_filter=64, num_group=64, kernel=(3, 3), pad=(1, 1),
                                           no_bias=True, name=f"dw{i}"), act_type="relu")
    return x, {"data": (1, 8, 28, 28)}


def test_planner_keeps_writes_off_what_the_previous_kernel_read(monkeypatch):
    """Least recently used placement (plan_memory._least_recently_used): the same arena as first fit, every constraint
    of the placement kept, and in the chain (past the wide layer) no kernel's output overlaps what the kernel
    before it read."""
    import importlib
    pm = importlib.import_module("mxcc.passes.plan_memory")
    net, shapes = _chain_net()
    plan = run_pipeline(net.graph, shapes, CompileOptions())
    _check_plan(plan)
    assert plan.strategy.endswith("+lru")
    monkeypatch.setattr(pm, "LRU_MAX_BUFFERS", 0)
    first_fit = run_pipeline(net.graph, shapes, CompileOptions())
    assert plan.arena_bytes == first_fit.arena_bytes
    g = plan.graph
    ranges = {k: (loc.offset, loc.offset + g.type_of(Ref(*k)).nbytes) for k, loc in plan.locations.items()
              if loc.offset is not None and k in plan.live and k[1] >= 0}
    clashes_before = 0
    for k, (lo, hi) in ranges.items():
        start = plan.live[k][0]
        if start < 4:   # the wide layer's range is still the only room
            continue
        read_before = [r for r, (s, e) in plan.live.items() if r in ranges and e == start - 1]
        for r in read_before:
            rlo, rhi = ranges[r]
            assert not (lo < rhi and rlo < hi), (g.output_name(Ref(*k)), g.output_name(Ref(*r)))
    # first fit alone does write over the previous kernel's input here (the property is not vacuous)
    ff = {k: (loc.offset, loc.offset + g.type_of(Ref(*k)).nbytes) for k, loc in first_fit.locations.items()
          if loc.offset is not None and k in first_fit.live and k[1] >= 0}
    for k, (lo, hi) in ff.items():
        start = first_fit.live[k][0]
        if start < 4:
            continue
        clashes_before += sum(1 for r, (s, e) in first_fit.live.items()
                              if r in ff and e == start - 1 and lo < ff[r][1] and ff[r][0] < hi)
    assert clashes_before > 0


@pytest.mark.parametrize("net, shape", [("densenet121_slim", (1, 3, 224, 224)), ("resnet50_v1", (1, 3, 224, 224)),
                                        ("mobilenet1.0", (1, 3, 224, 224)), ("squeezenet1.1", (1, 3, 224, 224))])
def test_model_zoo_arenas_reach_their_lower_bound(net, shape):
    """The arena of the model-zoo inference graphs is the most bytes live at one step (DenseNet-121's
    concatenations were 1.11 of it before greedy-by-size broke its ties by lifetime)."""
    from mxcc.compiler.driver import inspect_network
    from mxcc_testing import DATA
    p = inspect_network(DATA / "models" / net / f"{net}-symbol.json", {"data": shape}, CompileOptions())
    assert p["arena_bytes"] <= 1.05 * p["lower_bound_bytes"], p["strategy"]


def _dense_block():
    """Two dense-block layers (DenseNet: each layer's input is the concatenation of every earlier output), an
    in-place chain (conv -> relu) ending in a slice, and a slice read again while the concatenations holding it
    are live (exp(c0), elementwise: it could write over its input's bytes; in this order with schedule=False)."""
    with sym.NameManager():
        x = sym.var("data")
        a = sym.Convolution(x, kernel=(1, 1), num_filter=16, name="c0")
        b = sym.relu(sym.Convolution(a, kernel=(3, 3), pad=(1, 1), num_filter=16, name="c1"))
        cat1 = sym.concat(a, b, dim=1, name="cat1")
        d = sym.relu(sym.Convolution(cat1, kernel=(1, 1), num_filter=16, name="c2"))
        cat2 = sym.concat(cat1, d, dim=1, name="cat2")
        e = sym.Convolution(sym.exp(a), kernel=(1, 1), num_filter=16, name="ce")
        cat3 = sym.concat(cat2, e, dim=1, name="cat3")
        return sym.Convolution(cat3, kernel=(1, 1), num_filter=4, name="out")


def _params(net, shapes, seed=0):
    rng = np.random.default_rng(seed)
    args, _, _ = net.infer_shape(**shapes)
    return {n: (rng.standard_normal(s) * 0.3).astype(np.float32)
            for n, s in zip(net.list_arguments(), args) if n not in shapes}


def test_concat_inputs_are_slices_of_its_output():
    """Each concatenation's inputs live at their offsets in its output (nested: cat1 inside cat2), so the
    concatenation copies nothing; no two values live at one step share bytes unless one is a slice of the
    other; a batch of 2 (each input several rows of the output) and training plans keep the copies."""
    from mxcc.codegen.lower import lower
    net = _dense_block()
    plan = run_pipeline(net.graph, {"data": (1, 3, 8, 8)}, CompileOptions(schedule=False))
    g = plan.graph
    assert [grp.name for grp in g.groups].index("exp0") > [grp.name for grp in g.groups].index("cat2")
    slices = {v: (o, off) for v, o, off in plan.slices}
    assert slices == {"c0_output": ("cat1_output", 0), "relu0_output": ("cat1_output", 4096),
                      "cat1_output": ("cat2_output", 0), "relu1_output": ("cat2_output", 8192),
                      "cat2_output": ("cat3_output", 0), "ce_output": ("cat3_output", 12288)}
    calls = {c.group: c for c in lower(plan, "net")}
    assert all(calls[c].vars["copies"] == [] for c in ("cat1", "cat2", "cat3"))
    span = {}
    for k, (lo, hi) in plan.live.items():
        off = plan.locations[k].offset
        span[g.output_name(Ref(*k))] = (off, off + g.type_of(Ref(*k)).nbytes, lo, hi)

    def inside(a, b):   # a is (transitively) a slice of b
        while a in slices:
            a = slices[a][0]
            if a == b:
                return True
        return False
    for a, (alo, ahi, s0, e0) in span.items():
        for b, (blo, bhi, s1, e1) in span.items():
            if a < b and s0 <= e1 and s1 <= e0 and alo < bhi and blo < ahi:
                assert inside(a, b) or inside(b, a) or (a, b) in plan.inplace or (b, a) in plan.inplace, (a, b)
    from mxcc.cli import format_plan
    from mxcc.compiler.driver import inspect_network
    report = format_plan(inspect_network(net, {"data": (1, 3, 8, 8)}, CompileOptions(schedule=False)))
    assert "(in cat2_output at +8192)" in report and "(in cat3_output at +0)" in report
    assert not run_pipeline(net.graph, {"data": (2, 3, 8, 8)}, CompileOptions()).slices
    assert not run_pipeline(net.graph, {"data": (1, 3, 8, 8)}, CompileOptions(train=True)).slices
    assert not run_pipeline(net.graph, {"data": (1, 3, 8, 8)}, CompileOptions(plan=False)).slices


@needs_gcc
def test_concat_in_place_computes_what_the_copies_do():
    """The network with its concatenations in place (and every kernel's output NaN-filled before it runs, so a
    slice its kernel did not write would show) against the same network planned without sharing (plan=False:
    every value its own bytes, the copies made)."""
    net = _dense_block()
    shapes = {"data": (1, 3, 8, 8)}
    params = _params(net, shapes)
    x = np.random.default_rng(1).standard_normal(shapes["data"]).astype(np.float32)
    m = mxcc.compile(net, shapes, params, poison=True, schedule=False)
    assert (m.dir / f"{m.name}.c").read_text().count("2 of 2 inputs written in place by their kernels") == 3
    got = m.forward(data=x)[0]
    want = mxcc.compile(net, shapes, params, plan=False).forward(data=x)[0]
    np.testing.assert_array_equal(got, want)
    assert rel_err(got, _dense_block_reference(params, x)) <= 1e-5   # and numpy's float64 (independent truth)


def _bottleneck_end(conv: str = "1x1", residual: str = "other"):
    """pool(relu(BatchNorm(conv(h)) + r)), h = relu(c0(data)): the end of a ResNet bottleneck. conv "1x1": 1x1 (the
    pointwise kernel at 16x16 pixels), "3x3": 3x3 (Winograd). residual "other": r = relu(c1(data)), dying at the add;
    "input": r = h, the convolution's own input."""
    with sym.NameManager():
        x = sym.var("data")
        h = sym.relu(sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_filter=32, name="c0"))
        # relu(c1): that group ends in an activation, so the add joins c2's (the epilogue adds, then activates)
        r = h if residual == "input" else sym.relu(sym.Convolution(x, kernel=(1, 1), num_filter=32, name="c1"),
                                                   name="r")
        k, p = ((1, 1), (0, 0)) if conv == "1x1" else ((3, 3), (1, 1))
        y = sym.BatchNorm(sym.Convolution(h, kernel=k, pad=p, num_filter=32, name="c2"), name="bn2")
        # r + y: r first in the graph's order, so it is computed when c2's kernel is formed and the add joins it
        return sym.Pooling(sym.relu(r + y, name="sum"), kernel=(2, 2), stride=(2, 2), pool_type="max",
                           name="pool")   # the sum in the arena (a network output is the caller's array)


@pytest.mark.parametrize("conv,residual,size,kernel,in_place", [
    ("1x1", "other", 16, "pointwise", True), ("3x3", "other", 8, "packed", True),
    ("3x3", "other", 16, "winograd", True), ("1x1", "input", 16, "pointwise", False)])
def test_a_convolution_writes_over_its_dying_residual(conv, residual, size, kernel, in_place):
    """Convolution's residual_in_place: the pointwise, packed and Winograd kernels' output takes the bytes of a
    fused residual that dies at it (not the GEMM paths', whose epilogue runs over the stored raw sums), nor
    over the convolution's own input (every tile reads all of it)."""
    from mxcc.ops.convolution import path
    from mxcc.passes.fold_constants import bind_time_inputs
    net = _bottleneck_end(conv, residual)
    plan = run_pipeline(net.graph, {"data": (1, 16, size, size)}, CompileOptions())
    _check_plan(plan)
    c2 = next(n for n in plan.graph.nodes if n.name == "c2")
    assert path(c2.params, plan.graph.type_of(c2.inputs[0]).shape, bind_time_inputs(plan.graph, c2)) == kernel
    groups = [[plan.graph.nodes[m].name for m in grp.members] for grp in plan.graph.groups]
    assert ["c2", "bn2", "_plus0", "sum"] in groups, groups
    assert [src for dst, src in plan.inplace if dst == "sum_output"] == (["r_output"] if in_place else [])


@needs_gcc
@pytest.mark.parametrize("conv,residual,size", [("1x1", "other", 16), ("3x3", "other", 8), ("3x3", "other", 16)])
def test_residual_in_place_computes_what_separate_buffers_do(conv, residual, size):
    """The bottleneck end with its output over the residual (every kernel's output NaN-filled before it runs),
    against the network planned without sharing, bit for bit, and against numpy in float64: pointwise, packed
    (3x3 at 8x8) and Winograd (3x3 at 16x16) kernels, 2 images."""
    from mxcc_testing import conv_reference
    net = _bottleneck_end(conv, residual)
    shapes = {"data": (2, 16, size, size)}
    params = _params(net, shapes)
    aux = {"bn2_moving_mean": np.zeros(32, np.float32), "bn2_moving_var": np.ones(32, np.float32)}
    params.update(aux)
    x = np.random.default_rng(1).standard_normal(shapes["data"]).astype(np.float32)
    m = mxcc.compile(net, shapes, params, poison=True)
    got = m.forward(data=x)[0]
    want = mxcc.compile(net, shapes, params, plan=False).forward(data=x)[0]
    np.testing.assert_array_equal(got, want)

    def conv2d(v, name, k):
        w = params[f"{name}_weight"]
        acc, _ = conv_reference(v, w.reshape(w.shape[0], -1), (k, k), (1, 1), (k // 2, k // 2), (1, 1),
                                v.shape[2:], 0.0)
        return acc.reshape(v.shape[0], w.shape[0], *v.shape[2:]) + params[f"{name}_bias"].reshape(1, -1, 1, 1)
    xd = x.astype(np.float64)
    h = np.maximum(conv2d(xd, "c0", 3), 0)
    r = h if residual == "input" else np.maximum(conv2d(xd, "c1", 1), 0)
    c2 = conv2d(h, "c2", 1 if conv == "1x1" else 3)
    bn = c2 / np.sqrt(1 + 1e-3) + params["bn2_beta"].reshape(1, -1, 1, 1)   # fix_gamma (the default): gamma 1
    s = np.maximum(bn + r, 0)
    assert rel_err(got, s.reshape(2, 32, size // 2, 2, size // 2, 2).max(axis=(3, 5))) <= 1e-5


def _dense_block_reference(p, x):
    from mxcc_testing import conv_reference

    def conv(v, name, k=1):
        w = p[f"{name}_weight"]
        pad = (k // 2, k // 2)
        acc, _ = conv_reference(v, w.reshape(w.shape[0], -1), (k, k), (1, 1), pad, (1, 1), v.shape[2:], 0.0)
        return acc.reshape(v.shape[0], w.shape[0], *v.shape[2:]) + p[f"{name}_bias"].reshape(1, -1, 1, 1)
    a = conv(x, "c0")
    cat1 = np.concatenate([a, np.maximum(conv(a, "c1", 3), 0)], axis=1)
    cat2 = np.concatenate([cat1, np.maximum(conv(cat1, "c2"), 0)], axis=1)
    return conv(np.concatenate([cat2, conv(np.exp(a), "ce")], axis=1), "out")


def _separable(size: int, stride: int, extra_head: bool = False):
    """relu(pw(relu(dw(data)))): a depthwise 3x3 layer of 32 channels and the pointwise 1x1 layer after it
    (MobileNet's block); extra_head: the depthwise layer's output is a network output too."""
    with sym.NameManager():
        x = sym.var("data")
        d = sym.relu(sym.Convolution(x, kernel=(3, 3), pad=(1, 1), stride=(stride, stride), num_filter=32,
                                     num_group=32, name="dw"), name="dw_relu")
        y = sym.relu(sym.Convolution(d, kernel=(1, 1), num_filter=48, name="pw"), name="pw_relu")
        return sym.Group([y, d]) if extra_head else y


@pytest.mark.parametrize("size,stride,extra_head,apart", [(14, 1, False, 208), (28, 2, False, 208),
                                                          (7, 1, False, 0), (16, 1, False, 0),
                                                          (14, 1, True, 0)])
def test_depthwise_output_planes_apart_for_the_pointwise_layer(size, stride, extra_head, apart):
    """plan_memory._planes_apart: a depthwise layer's 14x14 output that only the pointwise layer after it reads
    has its planes 208 floats apart (its bytes too); not at 7x7 (PLANES_APART_MIN), not where H*W is a
    multiple of 16, not when the value is a network output; never in a training plan."""
    net = _separable(size, stride, extra_head)
    shapes = {"data": (2, 32, size, size)}
    plan = run_pipeline(net.graph, shapes, CompileOptions())
    _check_plan(plan)
    dw_out = next(g.outputs[0] for g in plan.graph.groups if plan.graph.nodes[g.anchor].name == "dw")
    assert plan.plane_strides.get(dw_out.key, 0) == apart
    if apart:
        buf = next(b for b in plan.buffers if b.name == plan.graph.output_name(dw_out))
        assert buf.nbytes == 2 * 32 * apart * 4
    train = run_pipeline(net.graph, shapes, CompileOptions(train=True))
    assert not train.plane_strides


@needs_gcc
@pytest.mark.parametrize("batch", [1, 2])
def test_planes_apart_compute_what_dense_planes_do(batch):
    """The depthwise layer writing 208-float planes and the pointwise layer reading them in place (every
    kernel's output NaN-filled before it runs), against the same layers with the depthwise output also a
    network output (dense planes), bit for bit, and against numpy in float64."""
    from mxcc_testing import conv_reference
    shapes = {"data": (batch, 32, 28, 28)}
    net, dense_net = _separable(28, 2), _separable(28, 2, extra_head=True)
    params = _params(net, shapes)
    x = np.random.default_rng(2).standard_normal(shapes["data"]).astype(np.float32)
    m = mxcc.compile(net, shapes, params, poison=True)
    source = (m.dir / f"{m.name}.c").read_text()
    assert "mxcc_conv1x1_planes_f32(" in source and ".y_plane = 208" in source
    got = m.forward(data=x)[0]
    want = mxcc.compile(dense_net, shapes, params, poison=True).forward(data=x)[0]
    np.testing.assert_array_equal(got, want)
    xd = x.astype(np.float64)
    w = params["dw_weight"].astype(np.float64)
    d = np.stack([np.stack([conv_reference(xd[n, c:c + 1][None], w[c].reshape(1, -1), (3, 3), (2, 2), (1, 1),
                                           (1, 1), (14, 14), 0.0)[0][0, 0].reshape(14, 14) for c in range(32)])
                  for n in range(batch)])
    d = np.maximum(d + params["dw_bias"].reshape(1, -1, 1, 1), 0)
    y = np.einsum("oc,nchw->nohw", params["pw_weight"].reshape(48, 32).astype(np.float64), d)
    y = np.maximum(y + params["pw_bias"].reshape(1, -1, 1, 1), 0)
    assert rel_err(got, y) <= 1e-5
