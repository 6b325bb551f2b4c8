"""The pass pipeline, as a visible list: (name, function, the option that switches it off).

`run_pipeline` applies them in order to a Graph and returns the Plan; `stop_after` returns the graph
after a named pass (for tests and `--dump-after`).
"""
from __future__ import annotations

import time

from mxcc.graph.ir import Graph
from mxcc.options import CompileOptions
from mxcc.passes.dce import dce
from mxcc.passes.fuse import fuse
from mxcc.passes.infer_shapes import bind, infer_shapes
from mxcc.passes.plan_memory import plan_memory
from mxcc.passes.remove_dropout import remove_dropout

# name, fn(graph, opts) -> graph, enabled(opts)
PIPELINE_INFER = (
    ("remove_dropout", lambda g, o: remove_dropout(g), lambda o: not o.train),
    ("dce", lambda g, o: dce(g), lambda o: True),
    ("fuse", lambda g, o: fuse(g, enabled=o.fuse), lambda o: True),   # fuse=False still makes 1-node groups
)


def run_pipeline(graph: Graph, shapes: dict, opts: CompileOptions, log=None):
    """Graph + input shapes -> Plan. `log(name, seconds, nodes)` is called after each pass."""
    t = time.perf_counter()
    g = infer_shapes(bind(graph), shapes)
    if log:
        log("infer_shapes", time.perf_counter() - t, len(g.nodes))
    for name, fn, enabled in PIPELINE_INFER:
        if enabled(opts):
            t = time.perf_counter()
            g = fn(g, opts)
            if log:
                log(name, time.perf_counter() - t, len(g.nodes))
    t = time.perf_counter()
    plan = plan_memory(g, enabled=opts.plan)
    if log:
        log("plan_memory", time.perf_counter() - t, len(g.nodes))
    return plan


__all__ = ["PIPELINE_INFER", "bind", "dce", "fuse", "infer_shapes", "plan_memory", "remove_dropout",
           "run_pipeline"]
