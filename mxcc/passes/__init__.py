"""The pass pipeline, as a visible list: (name, function, the option that switches it off).

`run_pipeline` applies them in order to a Graph and returns the Plan; `stop_after` returns the graph
after a named pass (for tests and `--dump-after`).
"""
from __future__ import annotations

import time

from mxcc.graph.ir import Graph
from mxcc.options import CompileOptions
from mxcc.passes.autodiff import autodiff
from mxcc.passes.choose_paths import choose_paths
from mxcc.passes.copy_heads import copy_repeated_heads
from mxcc.passes.dce import dce
from mxcc.passes.fold_constants import fold_constants
from mxcc.passes.fuse import fuse
from mxcc.passes.infer_shapes import bind, infer_shapes
from mxcc.passes.plan_memory import plan_memory
from mxcc.passes.remove_dropout import remove_dropout
from mxcc.passes.schedule import schedule
from mxcc.passes.train_mode import mode_dependent, train_mode

# name, fn(graph, opts) -> graph, enabled(opts)
PIPELINE_INFER = (
    ("remove_dropout", lambda g, o: remove_dropout(g), lambda o: not o.train),
    # one value listed as two outputs: each output slot gets its own copy (training: before autodiff)
    ("copy_repeated_heads", lambda g, o: copy_repeated_heads(g), lambda o: not o.train),
    ("dce", lambda g, o: dce(g), lambda o: True),
    # params change every training step: fold only inference graphs (a training build's forward_infer too)
    ("fold_constants", lambda g, o: fold_constants(g), lambda o: o.fold and not o.train),
    ("fuse", lambda g, o: fuse(g, enabled=o.fuse), lambda o: True),   # fuse=False still makes 1-node groups
    # a training graph's phases are called separately: their order stays autodiff's
    ("schedule", lambda g, o: schedule(g), lambda o: o.schedule and not o.train),
    # a tuned build's (or the user's) kernel per convolution: after folding, which decides what can be packed
    ("choose_paths", lambda g, o: choose_paths(g, dict(o.conv_paths)), lambda o: bool(o.conv_paths) and not o.train),
)


def trainable(graph: Graph) -> list[str]:
    """Variables that get gradients: every parameter (not inputs, labels or aux states), in node order."""
    aux = set()
    for n in graph.nodes:
        if not n.is_variable:
            for name, r in zip(n.opdef.inputs(n.params), n.inputs):
                if name in n.opdef.aux(n.params):
                    aux.add(r.node)
    return [n.name for n in graph.variables if n.name not in graph.inputs and n.id not in aux]


def run_pipeline(graph: Graph, shapes: dict, opts: CompileOptions, log=None, *, wrt: list[str] | None = None,
                 state_names: tuple[str, ...] = (), accumulate: frozenset[str] = frozenset(), typed: bool = False):
    """Graph + input shapes -> Plan. `log(name, seconds, nodes)` is called after each pass.

    With opts.train the backward graph for `wrt` (default: every parameter) is appended by autodiff, after
    train_mode gave mode-dependent ops their training form (unless opts.is_train is False: then the
    gradient is that of the inference function, MXNet's forward(is_train=False) + backward). The gradients
    of the variables in `accumulate` (grad_req 'add') are added to their arrays (plan_memory.host_slots).
    `typed`: the graph is already bound and typed for these shapes (infer_shapes ran), as a training compile's is."""
    t = time.perf_counter()
    g = graph if typed else infer_shapes(bind(graph), shapes)
    if log:
        log("infer_shapes", time.perf_counter() - t, len(g.nodes))
    if opts.train:
        t = time.perf_counter()
        if opts.is_train:
            g = train_mode(g)
        g = dce(copy_repeated_heads(g))
        g = autodiff(g, trainable(g) if wrt is None else wrt)     # variables nothing reads get no gradient
        if log:
            log("autodiff", time.perf_counter() - t, len(g.nodes))
    for name, fn, enabled in PIPELINE_INFER:
        if enabled(opts):
            t = time.perf_counter()
            g = fn(g, opts)
            if log:
                log(name, time.perf_counter() - t, len(g.nodes))
    t = time.perf_counter()
    plan = plan_memory(g, enabled=opts.plan, state_names=state_names, accumulate=accumulate,
                       concat_in_place=not opts.train and not opts.dynamic_batch,
                       planes_apart=not opts.train and not opts.dynamic_batch)
    if log:
        log("plan_memory", time.perf_counter() - t, len(g.nodes))
    return plan


__all__ = ["PIPELINE_INFER", "autodiff", "choose_paths", "bind", "copy_repeated_heads", "trainable", "dce", "fold_constants", "fuse", "schedule", "infer_shapes",
           "mode_dependent", "plan_memory", "remove_dropout", "run_pipeline", "train_mode"]
