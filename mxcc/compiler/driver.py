"""`mxcc.compile`: a network + input shapes (+ params) -> a built, loaded Module, and its output directory.

Drives the stages in order (front end, passes, lowering, rendering, build) and writes what the compiler
decided next to the binaries: `<net>.c`, `<net>.h`, `plan.json`, `module.json`, and the params if given.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from dataclasses import replace as dc_replace

import numpy as np

from mxcc._version import __version__
from mxcc.codegen.batchvar import at_max
from mxcc.codegen.cnames import c_ident
from mxcc.codegen.lower import lower, lower_folded, lower_train_program, lower_updates
from mxcc.codegen.render import calls_use_pool, environment, render
from mxcc.compiler import artifacts, library
from mxcc.compiler.build import build, build_library
from mxcc.compiler.tune import Tuning, openmp_threads, tune_plan
from mxcc.files import resource_dir
from mxcc.errors import GraphError, ShapeError, name_list
from mxcc.graph import Graph, Ref, load_json
from mxcc.options import CompileOptions
from mxcc.params import load_params, save_params
from mxcc.passes import bind, dce, infer_shapes, mode_dependent, run_pipeline, trainable
from mxcc.passes.fold_constants import bind_time_inputs
from mxcc.passes.infer_batch import BatchShapes, infer_batch, split_batch_marks
from mxcc.plan import Location, Plan
from mxcc.runtime.executor import Executor
from mxcc.runtime.module import Module
from mxcc.symbol import Symbol
from mxcc.types import TensorType
from mxcc.train.optimizer import SGD, update_def


def _graph_of(net) -> tuple[Graph, str]:
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


def _dynamic_batch(plan: Plan, shapes: dict, batch_axes: dict) -> BatchShapes:
    """The batch dependence of the plan's values (passes/infer_batch.py), for the inputs the plan has."""
    present = {s.name for s in plan.slots if s.kind == "input"}
    axes = {k: v for k, v in batch_axes.items() if k in present}
    if not axes:
        raise ShapeError(f"dynamic_batch: none of the inputs given ({name_list(batch_axes)}) is an input of the "
                         f"network (its inputs: {name_list(sorted(present))})")
    batch = infer_batch(plan.graph, {k: v for k, v in _check_shapes(shapes).items() if k in present}, axes)
    _check_workspaces(plan, batch)
    return batch


def _check_workspaces(plan: Plan, batch: BatchShapes) -> None:
    """A kernel's scratch is planned once, at the maximum: no smaller batch may need more (a kernel whose split
    of the work needs more scratch at some batch below the maximum is refused, naming it)."""
    g = plan.graph
    for node_id, ws in plan.workspaces.items():
        node = g.nodes[node_id]
        if not batch.depends(node):
            continue
        for n in range(1, batch.maximum):
            at = lambda r, t: TensorType(batch.shape_at(t.shape, r, n), t.dtype)   # noqa: E731
            ins = [at(r, g.type_of(r)) for r in node.inputs]
            outs = [at(Ref(node.id, i), t) for i, t in enumerate(node.out_types)]
            need = node.opdef.workspace(node.params, ins, outs, bind_time_inputs(g, node))
            if need > ws.nbytes:
                raise ShapeError(f"with a dynamic batch its scratch, planned for the maximum {batch.maximum} "
                                 f"({ws.nbytes} bytes), is too small at batch {n} ({need} bytes): compile for a "
                                 f"fixed batch", node=node.name, op=node.op)


def plan_network(net, shapes: dict, opts: CompileOptions, log=None, *, wrt=None, state_names: tuple[str, ...] = (),
                 accumulate: frozenset = frozenset(), typed: bool = False) -> tuple[Plan, str]:
    """The pipeline's Plan for `net` (`typed`: a Graph already typed for `shapes`) and a name of its source."""
    graph, source = _graph_of(net)
    plan = run_pipeline(graph, _check_shapes(shapes), opts, log=log, wrt=wrt, state_names=state_names,
                        accumulate=accumulate, typed=typed)
    for s, h in zip(plan.slots_of("output"), plan.graph.heads):
        if plan.graph.nodes[h.node].is_variable:
            raise GraphError(f"graph output {s.name!r} is the variable itself, nothing computes it",
                             node=plan.graph.nodes[h.node].name)
    return plan, source


def tune_network(plan: Plan, opts: CompileOptions, name: str, threads: int | None = None, log=None) -> Tuning:
    """compiler/tune.py on an untuned inference plan, for the thread count its module will run with
    (opts.tune_threads, else `threads`, else the OpenMP default of this process) and the engine its kernels will
    run on (mxcc's pool unless a kernel opens an OpenMP region: codegen/render.py)."""
    pool = calls_use_pool(lower(plan, name), str(resource_dir("templates")), lower_folded(plan, name))
    return tune_plan(plan, opts, opts.tune_threads or threads or openmp_threads(), "pool" if pool else "openmp",
                     log=log)


def tuned(plan: Plan, replan, opts: CompileOptions, name: str, threads: int | None = None,
          log=None) -> tuple[Plan, CompileOptions, Tuning]:
    """tune_network, then, if a layer leaves its heuristic's path, opts with the tuned paths added to conv_paths
    (the user's own entries stay) and the plan again by replan(opts)."""
    tuning = tune_network(plan, opts, name, threads, log=log)
    if tuning.overrides():
        opts = dc_replace(opts, conv_paths=tuple(sorted({**dict(opts.conv_paths), **tuning.overrides()}.items())))
        plan = replan(opts)
    return plan, opts, tuning


def _workspace_json(plan: Plan, anchor) -> dict | None:
    ws = plan.workspaces.get(anchor.id)
    if ws is None:
        return None
    return dict(nbytes=ws.nbytes, offset=ws.location.offset, live=[ws.step, ws.step])


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


def _batch_field(batch: BatchShapes | None, ref) -> dict:
    """A value's `batch` entry in plan.json (only when a dynamic batch was asked for): its batch axis and
    factor, {internal: true} for an op's hidden buffer sized by N in its own layout, or None when its shape
    is the same for every batch."""
    if batch is None:
        return {}
    if ref is not None and ref.key in batch.internal:
        return {"batch": {"internal": True}}
    b = batch.of(ref) if ref is not None else None
    return {"batch": b.to_json() if b else None}


def _slot_refs(g: Graph, slots) -> dict:
    """The value each host slot binds: a variable (inputs, params, aux states) or a head (outputs)."""
    var = {n.name: Ref(n.id) for n in g.variables}
    refs = {s.index: var.get(s.name) for s in slots if s.kind in ("input", "param", "aux")}
    refs.update(zip((s.index for s in slots if s.kind == "output"), g.heads))
    return refs


def plan_to_json(plan: Plan, calls, folded_calls=(), batch: BatchShapes | None = None) -> dict:
    """plan.json's content. `batch` (a dynamic batch, passes/infer_batch.py): every output and slot gains
    `batch` (see _batch_field), every group `batch_dependent`, the plan `batch` {maximum, inputs}."""
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
                             inplace_of=reuses.get(name), **_batch_field(batch, r)))
        groups.append(dict(
            name=grp.name, function=call.fn, members=[m.name for m in members], ops=[m.op for m in members],
            inputs=[dict(name=b.cname, shape=[at_max(d) for d in b.type.shape], where=b.where) for b in call.buffers
                    if not b.writable],
            outputs=outs, flops=call.flops, workspace=_workspace_json(plan, members[0]),
            **({"path": call.vars["path"]} if members[0].opdef.paths is not None and "path" in call.vars else {}),
            nodes=[dict(name=m.name, op=m.op, inputs=[list(g.type_of(r).shape) for r in m.inputs],
                        outputs=[list(t.shape) for t in m.out_types],
                        flops=m.opdef.flops(m.params, [g.type_of(r) for r in m.inputs], m.out_types))
                   for m in members],
            **({} if batch is None else {"batch_dependent": any(batch.depends(m) for m in members)})))
    refs = _slot_refs(g, plan.slots) if batch is not None else {}
    return dict(
        mxcc_version=__version__, arena_bytes=plan.arena_bytes, naive_bytes=plan.naive_bytes,
        lower_bound_bytes=plan.lower_bound_bytes, strategy=plan.strategy,
        inplace=[list(p) for p in plan.inplace], slices=[list(s) for s in plan.slices],
        plane_strides=[[g.output_name(Ref(*k)), v] for k, v in plan.plane_strides.items()],
        folded=_folded_json(plan, folded_calls), derived_bytes=plan.derived_bytes,
        kernels=len(g.groups), nodes=sum(1 for n in g.nodes if not n.is_variable), groups=groups,
        slots=[dict(index=s.index, name=s.name, kind=s.kind, shape=list(s.shape), dtype=s.dtype,
                    optional=s.optional, **({"output": s.output} if s.output else {}),
                    **_batch_field(batch, refs.get(s.index))) for s in plan.slots],
        **({} if batch is None else {"batch": dict(maximum=batch.maximum, inputs=batch.inputs)}))


def inspect_network(net, shapes: dict, opts: CompileOptions, name: str | None = None, *,
                    batch_axes: dict[str, int] | None = None, threads: tuple[int, ...] = (),
                    isa: str | None = None) -> dict:
    """What the compiler decides for `net` (plan.json's content), without building anything. `batch_axes`:
    a dynamic batch (input name -> the axis holding it; `shapes` at the maximum): plan.json then shows what
    depends on it (plan_to_json), and a network that mixes it into other dimensions is a ShapeError.
    `threads`: also how each forward kernel splits over each of these thread counts ("splits", by count:
    codegen/splits.py, for the `isa` blocking, default this machine's)."""
    plan, source = plan_network(net, shapes, opts)
    name = c_ident(name) if name else _default_name(source)
    tuning = None
    if opts.tune and not opts.train:
        plan, _, tuning = tuned(plan, lambda o: plan_network(net, shapes, o)[0], opts, name)
    batch = None
    if batch_axes:
        present = {n.name for n in plan.graph.variables}
        batch = infer_batch(plan.graph, {k: v for k, v in _check_shapes(shapes).items() if k in present},
                            {k: v for k, v in batch_axes.items() if k in present})
    calls = lower(plan, name)
    out = plan_to_json(plan, calls, lower_folded(plan, name), batch)
    if tuning is not None:
        out["tuning"] = tuning.to_json()
    if threads:
        from mxcc.codegen.splits import host_isa, splits_report
        isa = isa or host_isa()
        out["splits"] = {str(t): splits_report(calls, t, isa) for t in threads}
    return out


GRAD_REQS = ("write", "add", "null")


def grad_reqs(graph: Graph, shapes: dict, grad_req=None, inputs_need_grad: bool = False) -> dict[str, str]:
    """MXNet's grad_req for every argument of a typed graph (its variables but aux states, in order).

    As `simple_bind(grad_req=...)`: a string for every argument (data and labels included), a list in argument
    order, or a dict by name (arguments it does not name: 'null'). None: MXNet Module's defaults, 'write' for
    parameters and 'null' for data inputs and labels. `inputs_need_grad` (Module's name) makes the data
    inputs 'write' where grad_req does not name them."""
    params = set(trainable(graph))
    args = [n.name for n in graph.variables if n.name in params or n.name in graph.inputs]
    data = [a for a in args if a in shapes]
    if grad_req is None:
        req = {a: "write" if a in params else "null" for a in args}
    elif isinstance(grad_req, str):
        req = {a: grad_req for a in args}
    elif isinstance(grad_req, dict):
        unknown = sorted(set(grad_req) - set(args))
        if unknown:
            raise ShapeError(f"grad_req names {name_list(map(repr, unknown))}, which are not arguments of the "
                             f"network (its arguments: {name_list(args)})", input=unknown[0], names=unknown)
        req = {a: grad_req.get(a, "null") for a in args}
    elif isinstance(grad_req, (list, tuple)):
        if len(grad_req) != len(args):
            raise ShapeError(f"grad_req is a list of {len(grad_req)}, expected one per argument ({len(args)}), in "
                             f"order: {name_list(args)}", expected=len(args), got=len(grad_req), names=args)
        req = dict(zip(args, grad_req))
    else:
        raise TypeError(f"grad_req must be a str, a list or a dict, got {type(grad_req).__name__}")
    bad = {a: r for a, r in req.items() if r not in GRAD_REQS}
    if bad:
        a, r = next(iter(bad.items()))
        raise ShapeError(f"grad_req {r!r} for {a!r}: expected one of {', '.join(map(repr, GRAD_REQS))}", input=a,
                         expected=GRAD_REQS, got=r)
    if inputs_need_grad:
        named = set(args) if isinstance(grad_req, (str, list, tuple)) else set(grad_req or ())
        req.update({a: "write" for a in data if a not in named})
    return req


@dataclass(frozen=True)
class TrainingSetup:
    """What a training compile differentiates, and how each gradient is stored."""
    optimizer: object
    typed: Graph | None           # the graph bound and typed for the shapes (the passes start from it)
    wrt: list                     # variables that get a gradient (grad_req not 'null'), in argument order
    accumulate: frozenset         # those whose gradient is added to their array (grad_req 'add')
    state_names: tuple = ()       # the optimizer's per-parameter states


def _training_setup(opts, graph, shapes, optimizer, grad_req, inputs_need_grad) -> TrainingSetup:
    """The TrainingSetup of a training compile (an empty one for inference)."""
    if not opts.train:
        if optimizer is not None:
            raise TypeError("optimizer= needs train=True")
        if grad_req is not None or inputs_need_grad:
            raise TypeError("grad_req= and inputs_need_grad= need train=True")
        return TrainingSetup(None, None, None, frozenset())
    if optimizer is None:
        optimizer = SGD(learning_rate=0.01)
    checked = _check_shapes(shapes)
    typed = infer_shapes(bind(graph), checked)
    req = grad_reqs(typed, checked, grad_req, inputs_need_grad)
    read = {n.name for n in dce(typed).variables}          # variables nothing reads get no gradient
    return TrainingSetup(optimizer, typed, [a for a, r in req.items() if r != "null" and a in read],
                         frozenset(a for a, r in req.items() if r == "add" and a in read),
                         update_def(optimizer.kind).states)


@dataclass(frozen=True)
class InferenceVariant:
    """The inference mode of a training build: `<net>_forward_infer` and `<net>_backward_infer`
    (Executor.forward(is_train=False) and the backward() after it)."""
    calls: list                  # forward KernelCalls, phase "infer", numbered after the training kernels and updates
    backward: list               # <net>_backward_infer's KernelCalls (phase "infer_backward"), numbered after those
    arena_bytes: int             # the context's whole arena: the training plan's, then this variant's
    kernels: list                # module.json kernel records of both, in kernel-index order
    folded: list                 # folded constants' kernels (run by <net>_prepare, also before each forward_infer)
    derived_bytes: int           # ctx->derived bytes they use
    slots: tuple                 # the training plan's slots, then those of the outputs <net>_backward_infer recomputes


def _moved(plan: Plan, train: Plan, base: int, output_kind: str = "output") -> Plan:
    """`plan` placed in the training build's context: its slots are the training plan's (inputs, head
    gradients, params, aux states, gradients by kind and name; outputs by position, among the slots of
    `output_kind`), its arena from `base`."""
    index = {(s.kind, s.name): s.index for s in train.slots}
    slot_map = {s.index: index[(s.kind, s.name)] for s in plan.slots if s.kind != "output"}
    slot_map.update(zip([s.index for s in plan.slots if s.kind == "output"],
                        [s.index for s in train.slots if s.kind == output_kind]))
    def moved(loc: Location) -> Location:
        return (Location(slot=slot_map[loc.slot]) if loc.slot is not None
                else loc if loc.derived is not None else Location(offset=base + loc.offset))

    return dc_replace(plan, slots=train.slots, locations={k: moved(loc) for k, loc in plan.locations.items()},
                      workspaces={k: dc_replace(w, location=moved(w.location)) for k, w in plan.workspaces.items()},
                      arena_bytes=base + plan.arena_bytes,
                      buffers=tuple(dc_replace(b, offset=base + b.offset) for b in plan.buffers))


def _inference_variant(net, shapes, opts, train: Plan, name: str, first_index: int,
                       setup: TrainingSetup, batch_axes: dict | None = None) -> InferenceVariant | None:
    """When training changes the forward (BatchNorm, Dropout: passes/train_mode.py), the network in inference
    mode, placed in the training context (see _moved) in an arena range after the training one, so that an
    inference forward between a training forward and a backward leaves the training values alone:

    - `<net>_forward_infer`: the inference plan (moving statistics, BatchNorm folded into the convolution's
      packed weight, no dropout), as fast as an inference build;
    - `<net>_backward_infer`: the gradient of that function, as MXNet's backward after forward(is_train=False):
      the network planned for training with is_train=False (its forward keeps what its backward reads, which
      the fused inference kernels do not), forward and backward. It recomputes the forward rather than make
      the inference forward keep those values, so evaluation, the common use of forward(is_train=False), pays
      nothing for it. Both use the same range of the arena, one at a time.

    None when the forward is the same in both modes."""
    if not opts.is_train or not mode_dependent(setup.typed):
        return None
    base = (train.arena_bytes + 63) // 64 * 64
    infer = _moved(plan_network(setup.typed, shapes, dc_replace(opts, train=False), typed=True)[0], train, base)
    # the outputs the gradient's forward recomputes go to slots of their own: the caller holds the inference
    # forward's outputs, which must keep their values (the two forwards round differently)
    recomputed = tuple(dc_replace(s, index=len(train.slots) + i, kind="recomputed_output")
                       for i, s in enumerate(train.slots_of("output")))
    train = dc_replace(train, slots=train.slots + recomputed)
    grad = _moved(plan_network(setup.typed, shapes, dc_replace(opts, is_train=False), wrt=setup.wrt,
                               accumulate=setup.accumulate, typed=True)[0], train, base, "recomputed_output")
    # ctx->derived is the variant's own (the training plan folds nothing: its params change every step); the
    # gradient plan folds nothing either (a training plan), so only `infer` writes there
    # a dynamic batch (batch_axes): each plan's values get their batch axes from that plan's own graph
    forward = lower(infer, f"{name}_infer", _dynamic_batch(infer, shapes, batch_axes) if batch_axes else None)
    backward = lower(grad, f"{name}_infergrad", _dynamic_batch(grad, shapes, batch_axes) if batch_axes else None)
    if any(c.prepare for c in backward):
        raise AssertionError("the inference gradient's kernels would write ctx->derived over the inference forward's")
    groups = {**dict(zip((c.fn for c in forward), plan_to_json(infer, forward)["groups"])),
              **dict(zip((c.fn for c in backward), plan_to_json(grad, backward)["groups"]))}
    calls = [dc_replace(c, phase="infer", node_index=first_index + i) for i, c in enumerate(forward)]
    calls += [dc_replace(c, phase="infer_backward", node_index=first_index + len(forward) + i)
              for i, c in enumerate(backward)]
    kernels = _kernel_records([groups[c.fn] for c in calls], calls, live=False)
    return InferenceVariant(calls[:len(forward)], calls[len(forward):],
                            max(infer.arena_bytes, grad.arena_bytes), kernels, lower_folded(infer, f"{name}_infer"),
                            infer.derived_bytes, train.slots)


def _options_line(opts: CompileOptions, optimizer) -> str:
    """The generated C's `options:` header line."""
    return (f"fuse={'on' if opts.fuse else 'off'} plan={'on' if opts.plan else 'off'} isa={opts.isa} "
            f"profile={'on' if opts.profile else 'off'}" + (f" train={optimizer.kind}" if opts.train else "")
            + ("" if opts.fold else " fold=off") + ("" if opts.schedule else " schedule=off")
            + (" tune=on" if opts.tune and not opts.train else ""))   # fold on: the
    # header's "folded" line says what


def _kernel_records(groups: list[dict], calls, live: bool = True) -> list[dict]:
    """module.json's kernel table (index = the profiler event's `kernel`): plan.json groups and their calls;
    `live`: with the live ranges of their outputs (the profiler's memory track covers the main plan only)."""
    return [dict(name=g["name"], function=g["function"], members=g["members"], ops=g["ops"], flops=g["flops"],
                 inputs=[i["shape"] for i in g["inputs"]], outputs=[o["shape"] for o in g["outputs"]],
                 bytes=sum(o["nbytes"] for o in g["outputs"]) + sum(4 * _prod(i["shape"]) for i in g["inputs"]),
                 live=[o["live"] for o in g["outputs"]] if live else [], phase=c.phase,
                 **({"flops_batch": list(c.flops_batch)} if c.flops_batch else {}))
            for g, c in zip(groups, calls)]


def _module_meta(name: str, source: str, opts: CompileOptions, built, pj: dict, plan: Plan, calls, updates,
                 infer, optimizer, train_program: bool) -> dict:
    """module.json: what the runtime and the profiler need to load and describe the build."""
    return dict(name=name, module=built.module, so=built.so.name, bench=built.bench.name, key=built.key,
                train_program=f"{name}_train" if train_program else None,
                mxcc_version=__version__, source=source, profile=opts.profile, slots=pj["slots"],
                arena_bytes=pj["arena_bytes"], lower_bound_bytes=pj["lower_bound_bytes"],
                # the arena's buffers (in-place chains merged, workspaces included): the profiler's memory track
                buffers=[dict(name=b.name, offset=b.offset, nbytes=b.nbytes, live=[b.start, b.end])
                         for b in plan.buffers],
                kernels=_kernel_records(pj["groups"], calls)
                + [dict(name=f"update:{u.param}", function=u.fn, members=[u.param], ops=[f"{optimizer.kind}_update"],
                        flops=4 * u.n, inputs=[], outputs=[], bytes=12 * u.n, live=[], phase="update")
                   for u in updates or []]
                + (infer.kernels if infer else []),
                train=opts.train, batch=pj.get("batch"))


def compile(net, shapes: dict, params=None, *, out_dir=None, name: str | None = None, threads: int | None = None,
            optimizer=None, grad_req=None, inputs_need_grad=False, **options):
    """Compile `net` (a Symbol, or a path to MXNet symbol JSON) for the given input shapes.

    `params`: a dict of arrays (`arg:`/`aux:` prefixes allowed) or a `.params`/`.npz` path, bound to the
    returned Module. `out_dir`: also write the sources, plan, binaries and params there (for `mxcc.load`;
    compiler/artifacts.py). `options`: CompileOptions fields (fuse, plan, isa, profile, train, poison, ...).
    sanitize=True builds the executables with AddressSanitizer/UBSan and returns the output directory instead
    of a Module. With train=True the result is an Executor (forward/backward/update/step) whose update is
    `optimizer` (default SGD(learning_rate=0.01)). `grad_req` is MXNet's (simple_bind): 'write', 'add' or 'null'
    for every argument, a list in argument order or a dict by name (see grad_reqs; default: parameters 'write',
    data inputs and labels 'null'), and `inputs_need_grad=True` (MXNet Module's name) makes the data inputs
    'write'. Its forward(is_train=True) runs in training mode (BatchNorm batch statistics, Dropout masks;
    passes/train_mode.py) and its forward(is_train=False) in inference mode (see _inference_variant);
    backward() differentiates the function the last forward computed, as MXNet's does. The option
    is_train=False compiles the inference function only (both forwards then compute it).
    """
    shapes, batch_axes, _ = split_batch_marks(dict(shapes)) if isinstance(shapes, dict) else (shapes, {}, None)
    if batch_axes:                      # a '?64' dimension: the batch, dynamic
        options["dynamic_batch"] = True
    opts = CompileOptions.from_env(**options)
    if opts.dynamic_batch and not batch_axes:       # the leading dimension of every input given
        batch_axes = {k: 0 for k in _check_shapes(shapes)}
    if opts.sanitize and out_dir is None:
        raise TypeError("sanitize=True builds executables to run outside Python: give out_dir=")
    timings: list[tuple[str, float]] = []
    clock = time.perf_counter()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings.append((stage, now - clock))
        clock = now

    graph, source = _graph_of(net)
    setup = _training_setup(opts, graph, shapes, optimizer, grad_req, inputs_need_grad)
    optimizer = setup.optimizer
    lap("front end" + (" + training setup" if opts.train else ""))
    # parsed once, above; a training compile typed it once to read grad_req, and every plan starts from that
    plan, _ = plan_network(setup.typed or graph, shapes, opts, wrt=setup.wrt, state_names=setup.state_names,
                           accumulate=setup.accumulate, typed=setup.typed is not None,
                           log=lambda pass_name, seconds, nodes: timings.append((f"pass {pass_name}", seconds)))
    clock = time.perf_counter()
    name = c_ident(name) if name else _default_name(source)
    tuning = None
    if opts.tune and not opts.train:            # the paths measured fastest here (compiler/tune.py)
        plan, opts, tuning = tuned(plan, lambda o: plan_network(graph, shapes, o)[0], opts, name, threads,
                                   log=lambda stage, seconds: timings.append((f"tuning: {stage}", seconds)))
        lap(f"tuning ({len(tuning.layers)} layers: {tuning.measured} measured, {len(tuning.overrides())} changed)")
    batch = _dynamic_batch(plan, shapes, batch_axes) if opts.dynamic_batch else None
    calls, folded = lower(plan, name, batch), lower_folded(plan, name)
    updates = train_program = infer = None
    train_arena = plan.arena_bytes
    if opts.train:
        lr_mult, wd_mult = optimizer.multipliers(graph, [w for w, _ in plan.graph.grads])
        update = update_def(optimizer.kind)       # the optimizer's table entry: C function, states, hyper order
        updates = lower_updates(plan, update, lr_mult, wd_mult, len(calls))
        train_program = lower_train_program(plan, update, optimizer.step_hyper(1))
        infer = _inference_variant(net, shapes, opts, plan, name, len(calls) + len(updates), setup,
                                   batch_axes if opts.dynamic_batch else None)
        if infer:           # one arena holds both; the variant adds slots
            plan = dc_replace(plan, arena_bytes=infer.arena_bytes, slots=infer.slots)
    lap("lowering" + (" (+ the inference plans of a training build)" if opts.train else ""))
    src = render(plan, calls, name, template_dir=str(resource_dir("templates")), source=source,
                 options=_options_line(opts, optimizer),
                 profile=opts.profile, poison=opts.poison, updates=updates, train_program=train_program,
                 optimizer=optimizer.kind if optimizer else "",
                 hyper_layout=update_def(optimizer.kind).hyper_names if optimizer else (),
                 infer_calls=infer.calls if infer else None,
                 infer_backward=infer.backward if infer else None, train_arena_bytes=train_arena,
                 random=any(n.opdef.random for n in plan.graph.nodes if not n.is_variable),
                 folded=folded + (infer.folded if infer else []),
                 folded_bytes=max(plan.derived_bytes, infer.derived_bytes if infer else 0),
                 max_batch=batch.maximum if batch else 0,
                 slot_batch={i: batch.of(r) for i, r in _slot_refs(plan.graph, plan.slots).items()
                             if r is not None and batch.of(r)} if batch else None)
    pj = plan_to_json(plan, calls, folded, batch)
    if tuning is not None:
        pj["tuning"] = tuning.to_json()
    lap("rendering C")
    built = build(name, src.c, src.h, src.cdef, src.bench, opts, train_src=src.train, parts=src.parts,
                  log=lambda stage, seconds: timings.append((stage, seconds)))
    clock = time.perf_counter()
    meta = _module_meta(name, source, opts, built, pj, plan, calls, updates, infer, optimizer, bool(src.train))
    if isinstance(params, (str, os.PathLike)):
        params = load_params(params)
    cls = Executor if opts.train else Module
    kw = {"optimizer": optimizer} if opts.train else {}
    directory = built.dir
    if out_dir is not None:
        lib, tree = None, {}
        if not opts.train:      # the network as a C library (inference builds): only where a directory is written
            glue = library.render_glue(environment(str(resource_dir("templates"))), name, graph, source)
            lib = build_library(name, built, glue, library.exports(name), opts,
                                log=lambda stage, seconds: timings.append((stage, seconds)))
            tree = {f"{artifacts.INCLUDE_DIR}/{k}": v for k, v in library.include_files().items()}
            tree[f"{artifacts.INCLUDE_DIR}/{name}.h"] = src.h
            meta["library"] = dict(static=lib.static.name, shared=lib.shared.name, include=artifacts.INCLUDE_DIR)
            clock = time.perf_counter()
        directory = artifacts.write_directory(
            out_dir, {f"{name}.c": src.c, f"{name}.h": src.h, artifacts.PLAN_JSON: json.dumps(pj, indent=1)},
            [built.so, built.bench] + ([built.dir / f"{name}_train"] if src.train else [])
            + ([lib.static, lib.shared] if lib else []), meta,
            None if params is None else lambda path: save_params(path, {k: np.asarray(v) for k, v in params.items()}),
            tree=tree)
        if opts.sanitize:       # an ASan-instrumented extension cannot load into a plain Python
            return directory
    lap("writing the output directory" if out_dir is not None else "module record")
    mod = cls(directory, meta, threads=threads, **kw)
    mod.cached = built.cached
    mod.tuning = pj.get("tuning")       # plan.json's record of a tuned build (compiler/tune.py), else None
    if params is not None:
        mod.set_params(params)
    lap("loading and binding params")
    mod.timings = timings
    return mod
