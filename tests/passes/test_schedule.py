"""The schedule pass (mxcc/passes/schedule.py): a memory-aware topological order of the forward's kernels."""
import random

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.graph.ir import Graph
from mxcc.options import CompileOptions
from mxcc.passes import bind, dce, fuse, infer_shapes, plan_memory, run_pipeline, schedule
from mxcc.passes.schedule import peak_bytes
from mxcc_testing import needs_gcc, rel_err

from test_passes import random_net


def _fused(net, **shapes) -> Graph:
    return fuse(dce(infer_shapes(bind(net.graph), shapes)))


def _branches():
    """Two wide branches that each shrink again, summed: data -> big_i (FC 512) -> small_i (FC 8) -> add."""
    data = sym.var("data")
    with sym.NameManager():
        big1 = sym.FullyConnected(data, num_hidden=512, name="big1")
        big2 = sym.FullyConnected(data, num_hidden=512, name="big2")
        small1 = sym.FullyConnected(big1, num_hidden=8, name="small1")
        small2 = sym.FullyConnected(big2, num_hidden=8, name="small2")
        out = sym.softmax(small1 + small2, name="out")
    return out, {"data": (16, 32)}


def _names(g: Graph, groups=None) -> list[str]:
    return [g.nodes[grp.anchor].name for grp in (groups if groups is not None else g.groups)]


def _is_topological(g: Graph) -> bool:
    pos = {r.key: i for i, grp in enumerate(g.groups) for r in grp.outputs}
    for i, grp in enumerate(g.groups):
        inside = set(grp.members)
        for m in grp.members:
            for r in g.nodes[m].inputs:
                if r.node not in inside and r.key in pos and pos[r.key] >= i:
                    return False
    return True


def test_schedule_frees_a_wide_tensor_before_making_the_next():
    net, shapes = _branches()
    g = _fused(net, **shapes)
    by = {g.nodes[grp.anchor].name: grp for grp in g.groups}
    bad = [by[n] for n in ("big1", "big2", "small1", "small2", "out")]     # small2 + _plus0: one kernel
    g_bad = g.with_nodes(g.nodes, groups=tuple(bad))
    out = schedule(g_bad)
    assert _is_topological(out)
    assert _names(out) == ["big1", "small1", "big2", "small2", "out"]
    wide = 16 * 512 * 4
    assert peak_bytes(g_bad, bad) >= 2 * wide > peak_bytes(out, list(out.groups))
    # the planner's lower bound follows: one wide buffer live at a time instead of two
    assert plan_memory(out).lower_bound_bytes < plan_memory(g_bad).lower_bound_bytes
    assert schedule(g_bad, enabled=False) is g_bad


def test_schedule_leaves_a_good_order_alone():
    net, shapes = _branches()
    g = _fused(net, **shapes)            # MXNet's DFS order already finishes each branch first
    assert schedule(g) is g


@pytest.mark.parametrize("seed", range(30))
def test_schedule_random_orders_stay_topological_and_never_worse(seed):
    net, shapes = random_net(seed)
    g = _fused(net, **shapes)
    rnd = random.Random(seed)
    # a random topological order of the kernels (what another front end might hand us)
    pos = {r.key: i for i, grp in enumerate(g.groups) for r in grp.outputs}
    deps = [{pos[r.key] for m in grp.members for r in g.nodes[m].inputs
             if r.node not in grp.members and r.key in pos} for grp in g.groups]
    done, order = set(), []
    while len(order) < len(g.groups):
        i = rnd.choice([i for i in range(len(g.groups)) if i not in done and deps[i] <= done])
        done.add(i)
        order.append(g.groups[i])
    shuffled = g.with_nodes(g.nodes, groups=tuple(order))
    out = schedule(shuffled)
    assert sorted(map(id, out.groups)) == sorted(map(id, shuffled.groups))
    assert _is_topological(out)
    assert peak_bytes(out, list(out.groups)) <= peak_bytes(shuffled, order)


def test_schedule_runs_for_inference_only(monkeypatch):
    import mxcc.passes as passes
    calls = []
    monkeypatch.setattr(passes, "schedule", lambda g: calls.append(g) or g)
    net, shapes = _branches()
    run_pipeline(net.graph, shapes, CompileOptions(train=True))      # forward and backward called separately
    assert calls == []
    run_pipeline(net.graph, shapes, CompileOptions(schedule=False))
    assert calls == []
    run_pipeline(net.graph, shapes, CompileOptions())
    assert len(calls) == 1


@needs_gcc
def test_scheduled_and_unscheduled_builds_agree():
    net, shapes = _branches()
    rng = np.random.default_rng(3)
    a = mxcc.compile(net, shapes)
    params = {k: (rng.standard_normal(s) * 0.2).astype(np.float32) for k, s in a.param_shapes.items()}
    a.set_params(params)
    b = mxcc.compile(net, shapes, params, schedule=False)
    x = rng.standard_normal(shapes["data"]).astype(np.float32)
    w = {k: v.astype(np.float64) for k, v in params.items()}
    s1 = (x @ w["big1_weight"].T + w["big1_bias"]) @ w["small1_weight"].T + w["small1_bias"]
    s2 = (x @ w["big2_weight"].T + w["big2_bias"]) @ w["small2_weight"].T + w["small2_bias"]
    z = s1 + s2
    ref = np.exp(z - z.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    assert rel_err(a.forward(data=x)[0], ref) <= 1e-5
    assert rel_err(b.forward(data=x)[0], ref) <= 1e-5
