"""`mxcc.compile`: a network + input shapes (+ params) -> a built, loaded Module, and its output directory.

Drives the stages in order (front end, passes, lowering, rendering, build) and writes what the compiler
decided next to the binaries: `<net>.c`, `<net>.h`, `plan.json`, `module.json`, and the params if given.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from pathlib import Path

import numpy as np

from mxcc import __version__
from mxcc.build import atomic_copy, atomic_write, build, resource_dir
from mxcc.codegen.cnames import c_ident
from mxcc.codegen.lower import lower, lower_folded, lower_train_program, lower_updates
from mxcc.codegen.render import render
from mxcc.errors import GraphError, ShapeError
from mxcc.graph import Graph, load_json
from mxcc.options import CompileOptions
from mxcc.passes import run_pipeline
from mxcc.plan import Location, Plan

PARAMS_FILE = "params.params"


def _graph_of(net) -> tuple[Graph, str]:
    from mxcc.symbol import Symbol
    if isinstance(net, Symbol):
        return net.graph, "<mxcc.sym>"
    if isinstance(net, Graph):
        return net, "<graph>"
    if isinstance(net, (str, os.PathLike)):
        return load_json(net), os.fspath(net)
    raise TypeError(f"net must be a Symbol, a Graph or a path to symbol JSON, got {type(net).__name__}")


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _default_name(source: str) -> str:
    base = os.path.basename(source)
    for suffix in ("-symbol.json", ".json"):
        if base.endswith(suffix):
            return c_ident(base[: -len(suffix)]) or "net"
    return "net"


def _check_shapes(shapes) -> dict[str, tuple]:
    if not isinstance(shapes, dict) or not shapes:
        raise ShapeError("input shapes must be a non-empty dict like {'data': (1, 784)}")
    out = {}
    for k, v in shapes.items():
        try:
            out[k] = tuple(int(d) for d in v)
        except (TypeError, ValueError):
            raise ShapeError(f"shape for {k!r} must be a tuple of ints, got {v!r}", input=k) from None
    return out


def plan_network(net, shapes: dict, opts: CompileOptions, log=None, *, wrt=None,
                 state_names: tuple[str, ...] = ()) -> tuple[Plan, str]:
    graph, source = _graph_of(net)
    plan = run_pipeline(graph, _check_shapes(shapes), opts, log=log, wrt=wrt, state_names=state_names)
    for s, h in zip(plan.slots_of("output"), plan.graph.heads):
        if plan.graph.nodes[h.node].is_variable:
            raise GraphError(f"graph output {s.name!r} is the variable itself, nothing computes it",
                             node=plan.graph.nodes[h.node].name)
    return plan, source


def _workspace_json(plan: Plan, anchor) -> dict | None:
    loc = plan.locations.get((anchor.id, -1))
    if loc is None:
        return None
    b = next(b for b in plan.buffers if b.name == f"{anchor.name}_workspace")
    return dict(nbytes=b.nbytes, offset=loc.offset, live=[b.start, b.end])


def _folded_json(plan: Plan, folded_calls) -> list[dict]:
    """The folded kernels (run by <net>_prepare at bind time): members, and the bytes each value takes in
    ctx->derived (outside the arena)."""
    g = plan.graph
    out = []
    for grp, call in zip(plan.folded, folded_calls):
        members = [g.nodes[m] for m in grp.members]
        outs = [dict(name=g.output_name(r), shape=list(g.type_of(r).shape), nbytes=g.type_of(r).nbytes,
                     offset=plan.locations[r.key].derived) for r in grp.outputs]
        out.append(dict(name=grp.name, function=call.fn, members=[m.name for m in members],
                        ops=[m.op for m in members], flops=call.flops, outputs=outs,
                        nbytes=sum(o["nbytes"] for o in outs)))
    return out


def plan_to_json(plan: Plan, calls, folded_calls=()) -> dict:
    g = plan.graph
    by_fn = {c.group: c for c in calls}
    groups = []
    for grp in g.groups:
        members = [g.nodes[m] for m in grp.members]
        call = by_fn[grp.name]
        reuses = dict(plan.inplace)
        outs = []
        for r in grp.outputs:
            loc = plan.locations[r.key]
            name = g.output_name(r)
            outs.append(dict(name=name, shape=list(g.type_of(r).shape), nbytes=g.type_of(r).nbytes,
                             location="slot" if loc.slot is not None else "arena",
                             offset=loc.offset, slot=loc.slot,
                             live=list(plan.live[r.key]) if r.key in plan.live else None,
                             inplace_of=reuses.get(name)))
        groups.append(dict(
            name=grp.name, function=call.fn, members=[m.name for m in members], ops=[m.op for m in members],
            inputs=[dict(name=b.cname, shape=list(b.type.shape), where=b.where) for b in call.buffers
                    if not b.writable],
            outputs=outs, flops=call.flops, workspace=_workspace_json(plan, members[0]),
            nodes=[dict(name=m.name, op=m.op, inputs=[list(g.type_of(r).shape) for r in m.inputs],
                        outputs=[list(t.shape) for t in m.out_types],
                        flops=m.opdef.flops(m.params, [g.type_of(r) for r in m.inputs], m.out_types))
                   for m in members]))
    return dict(
        mxcc_version=__version__, arena_bytes=plan.arena_bytes, naive_bytes=plan.naive_bytes,
        lower_bound_bytes=plan.lower_bound_bytes, strategy=plan.strategy,
        inplace=[list(p) for p in plan.inplace],
        folded=_folded_json(plan, folded_calls), derived_bytes=plan.derived_bytes,
        kernels=len(g.groups), nodes=sum(1 for n in g.nodes if not n.is_variable), groups=groups,
        slots=[dict(index=s.index, name=s.name, kind=s.kind, shape=list(s.shape), dtype=s.dtype,
                    optional=s.optional) for s in plan.slots])


def inspect_network(net, shapes: dict, opts: CompileOptions, name: str | None = None) -> dict:
    """What the compiler decides for `net` (plan.json's content), without building anything."""
    plan, source = plan_network(net, shapes, opts)
    name = c_ident(name) if name else _default_name(source)
    return plan_to_json(plan, lower(plan, name), lower_folded(plan, name))


def _training_setup(opts, graph, shapes, optimizer, inputs_need_grad):
    """(optimizer, variables to differentiate, optimizer state names) for a training compile."""
    if not opts.train:
        if optimizer is not None:
            raise TypeError("optimizer= needs train=True")
        return None, None, ()
    from mxcc.passes import bind, dce, infer_shapes, trainable
    if optimizer is None:
        from mxcc.optimizer import SGD
        optimizer = SGD(learning_rate=0.01)
    typed = dce(infer_shapes(bind(graph), _check_shapes(shapes)))   # variables nothing reads get no gradient
    wrt = trainable(typed) + ([i for i in typed.inputs if i in shapes] if inputs_need_grad else [])
    return optimizer, wrt, tuple(optimizer.state_names)


@dataclass(frozen=True)
class InferenceVariant:
    """The inference forward of a training build (`<net>_forward_infer`, Executor.forward(is_train=False))."""
    calls: list                  # KernelCalls, phase "infer", numbered after the training kernels and updates
    arena_bytes: int             # the context's whole arena: the training plan's, then this variant's
    kernels: list                # module.json kernel records (phase "infer")
    folded: list                 # its folded constants' kernels (run by <net>_prepare, also before each forward_infer)
    derived_bytes: int           # ctx->derived bytes they use


def _inference_variant(net, shapes, opts, train: Plan, name: str, first_index: int) -> InferenceVariant | None:
    """When training changes the forward (BatchNorm, Dropout: passes/train_mode.py), the same network planned
    for inference (moving statistics, folded BatchNorm, no dropout) and placed in the training context: its
    params, aux states, inputs and outputs are the training build's slots (by name; outputs by position), its
    intermediates live in an arena range after the training one (so an inference forward between a training
    forward and its backward does not disturb the saved activations). None when the forward is the same."""
    from mxcc.passes import bind, mode_dependent
    if not opts.is_train or not mode_dependent(bind(_graph_of(net)[0])):
        return None
    infer, _ = plan_network(net, shapes, dc_replace(opts, train=False))
    index = {(s.kind, s.name): s.index for s in train.slots}
    slot_map = {s.index: index[(s.kind, s.name)] for s in infer.slots if s.kind != "output"}
    slot_map.update(zip([s.index for s in infer.slots if s.kind == "output"],
                        [s.index for s in train.slots if s.kind == "output"]))
    base = (train.arena_bytes + 63) // 64 * 64
    # ctx->derived is the variant's own: the training plan folds nothing (its params change every step)
    locations = {k: Location(slot=slot_map[loc.slot]) if loc.slot is not None
                 else loc if loc.derived is not None else Location(offset=base + loc.offset)
                 for k, loc in infer.locations.items()}
    moved = dc_replace(infer, slots=train.slots, locations=locations, arena_bytes=base + infer.arena_bytes,
                       buffers=tuple(dc_replace(b, offset=base + b.offset) for b in infer.buffers))
    calls = [dc_replace(c, phase="infer", node_index=first_index + i)
             for i, c in enumerate(lower(moved, f"{name}_infer"))]
    groups = plan_to_json(moved, calls)["groups"]
    kernels = [dict(name=g["name"], function=g["function"], members=g["members"], ops=g["ops"], flops=g["flops"],
                    inputs=[i["shape"] for i in g["inputs"]], outputs=[o["shape"] for o in g["outputs"]],
                    bytes=sum(o["nbytes"] for o in g["outputs"]) + sum(4 * _prod(i["shape"]) for i in g["inputs"]),
                    live=[], phase="infer") for g in groups]
    return InferenceVariant(calls, moved.arena_bytes, kernels, lower_folded(moved, f"{name}_infer"),
                            moved.derived_bytes)


def _module_class(opts):
    from mxcc.executor import Executor
    from mxcc.module import Module
    return Executor if opts.train else Module


def _train_kw(opts, optimizer) -> dict:
    return {"optimizer": optimizer} if opts.train else {}


def compile(net, shapes: dict, params=None, *, out_dir=None, name: str | None = None, threads: int | None = None,
            optimizer=None, inputs_need_grad=False, **options):
    """Compile `net` (a Symbol, or a path to MXNet symbol JSON) for the given input shapes.

    `params`: a dict of arrays (`arg:`/`aux:` prefixes allowed) or a `.params`/`.npz` path, bound to the
    returned Module. `out_dir`: also write the sources, plan, binaries and params there (for `mxcc.load`).
    `options`: CompileOptions fields (fuse, plan, isa, profile, train, ...). sanitize=True builds the
    executables with AddressSanitizer/UBSan and returns the output directory instead of a Module. With train=True the result is
    an Executor (forward/backward/update/step) whose update is `optimizer` (default SGD(learning_rate=0.01))
    and `inputs_need_grad=True` also computes the gradients of the data inputs. Its forward runs in
    training mode (BatchNorm batch statistics, Dropout masks; passes/train_mode.py) and its
    forward(is_train=False) in inference mode (see _inference_variant); is_train=False differentiates the
    inference function instead (MXNet's forward(is_train=False) + backward).
    """
    from mxcc.module import Module
    from mxcc.params import load_params
    opts = CompileOptions.from_env(**options)
    graph, source = _graph_of(net)
    optimizer, wrt, state_names = _training_setup(opts, graph, shapes, optimizer, inputs_need_grad)
    plan, _ = plan_network(graph, shapes, opts, wrt=wrt, state_names=state_names)   # parsed once, above
    name = c_ident(name) if name else _default_name(source)
    calls, folded = lower(plan, name), lower_folded(plan, name)
    updates = train_program = infer = None
    if opts.train:
        lr_mult, wd_mult = optimizer.multipliers(graph, [w for w, _ in plan.graph.grads])
        updates = lower_updates(plan, optimizer.kind, lr_mult, wd_mult, len(calls))
        train_program = lower_train_program(plan, optimizer.step_hyper(1))
        infer = _inference_variant(net, shapes, opts, plan, name, len(calls) + len(updates))
        plan = dc_replace(plan, arena_bytes=infer.arena_bytes) if infer else plan   # one arena holds both
    src = render(plan, calls, name, template_dir=str(resource_dir("templates")), source=source,
                 options=f"fuse={'on' if opts.fuse else 'off'} plan={'on' if opts.plan else 'off'} "
                         f"isa={opts.isa} profile={'on' if opts.profile else 'off'}"
                         + (f" train={optimizer.kind}" if opts.train else "")
                         # on: the header's "folded" line says what
                         + ("" if opts.fold else " fold=off") + ("" if opts.schedule else " schedule=off"),
                 profile=opts.profile, updates=updates, train_program=train_program,
                 optimizer=optimizer.kind if optimizer else "", infer_calls=infer.calls if infer else None,
                 random=any(n.opdef.random for n in plan.graph.nodes if not n.is_variable),
                 folded=folded + (infer.folded if infer else []),
                 folded_bytes=max(plan.derived_bytes, infer.derived_bytes if infer else 0))
    plan_json = json.dumps(plan_to_json(plan, calls, folded), indent=1)
    built = build(name, src.c, src.h, src.cdef, src.bench, opts, train_src=src.train)
    pj = json.loads(plan_json)
    meta = dict(name=name, module=built.module, so=built.so.name, bench=built.bench.name, key=built.key,
                train_program=f"{name}_train" if src.train else None,
                mxcc_version=__version__, source=source, profile=opts.profile, slots=pj["slots"],
                arena_bytes=pj["arena_bytes"], lower_bound_bytes=pj["lower_bound_bytes"],
                # the arena's buffers (in-place chains merged, workspaces included): the profiler's memory track
                buffers=[dict(name=b.name, offset=b.offset, nbytes=b.nbytes, live=[b.start, b.end])
                         for b in plan.buffers],
                kernels=[dict(name=g["name"], function=g["function"], members=g["members"], ops=g["ops"],
                              flops=g["flops"], inputs=[i["shape"] for i in g["inputs"]],
                              outputs=[o["shape"] for o in g["outputs"]],
                              bytes=sum(o["nbytes"] for o in g["outputs"]) + sum(
                                  4 * _prod(i["shape"]) for i in g["inputs"]),
                              live=[o["live"] for o in g["outputs"]], phase=c.phase)
                         for g, c in zip(pj["groups"], calls)]
                + [dict(name=f"update:{u.param}", function=u.fn, members=[u.param], ops=[f"{optimizer.kind}_update"],
                        flops=4 * u.n, inputs=[], outputs=[], bytes=12 * u.n, live=[], phase="update")
                   for u in updates or []]
                + (infer.kernels if infer else []),
                train=opts.train)
    if isinstance(params, (str, os.PathLike)):
        params = load_params(params)
    if opts.sanitize and out_dir is None:
        raise TypeError("sanitize=True builds executables to run outside Python: give out_dir=")
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for fname, text in ((f"{name}.c", src.c), (f"{name}.h", src.h), ("plan.json", plan_json)):
            atomic_write(out / fname, text)
        atomic_copy(built.so, out / built.so.name)
        atomic_copy(built.bench, out / built.bench.name)
        if src.train:
            atomic_copy(built.dir / f"{name}_train", out / f"{name}_train")
        if params is not None:
            from mxcc.params import save_params
            save_params(out / PARAMS_FILE, {k: np.asarray(v) for k, v in params.items()})
        atomic_write(out / "module.json", json.dumps(meta, indent=1))   # last: marks the directory complete
        if opts.sanitize:       # an ASan-instrumented extension cannot load into a plain Python
            return out
        mod = _module_class(opts)(out, meta, threads=threads, **_train_kw(opts, optimizer))
    else:
        mod = _module_class(opts)(built.dir, meta, threads=threads, **_train_kw(opts, optimizer))
    mod.cached = built.cached
    if params is not None:
        mod.set_params(params)
    return mod
