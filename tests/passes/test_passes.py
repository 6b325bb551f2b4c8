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
                assert all(g.nodes[m].opdef.inplace for m in grp.members)
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
