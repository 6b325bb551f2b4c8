"""Lowering: Plan -> one KernelCall per fused group, holding only resolved constants and C names.

Each anchor/opaque op lowers itself (`OpDef.lower`) given a LowerCtx; chains of elementwise ops are
lowered here into one loop over the composed C expressions of their ops (`OpDef.c_expr`); a view that is a
graph output becomes a copy. Templates then only print what is here (see render.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod
from typing import TYPE_CHECKING

import numpy as np

from mxcc.codegen.batchvar import BatchDecision, Extent, at_max
from mxcc.codegen.cnames import c_ident, unique_idents
from mxcc.errors import ShapeError
from mxcc.graph.ir import FusedGroup, Ref
from mxcc.ops.base import EpilogueStep, Fusion, c_float
from mxcc.ops.concat import drop_copies_in_place
from mxcc.passes.fold_constants import bind_time_inputs
from mxcc.plan import Location, Plan
from mxcc.types import TensorType

if TYPE_CHECKING:
    from mxcc.passes.infer_batch import BatchShapes
    from mxcc.train.optimizer import UpdateDef

PARALLEL_MIN_ELEMENTS = 1 << 15   # below this an OpenMP fork costs more than the loop


@dataclass(frozen=True)
class Buffer:
    """A pointer local of a kernel function: `float *restrict <cname> = <expr>;  /* <where> */`."""
    cname: str
    type: TensorType
    writable: bool
    expr: str
    where: str
    restrict: bool = True          # False when it shares storage with another buffer of the call (in-place)
    fresh: bool = False            # the kernel writes all of it before reading any (its outputs, its workspace,
                                   # not in-place): a poison build (CompileOptions.poison) fills it with NaN first


@dataclass(frozen=True)
class KernelCall:
    fn: str                       # C function name, <net>_<group>
    group: str                    # the group's (anchor's) node name
    template: str
    vars: dict
    buffers: tuple[Buffer, ...]
    sources: tuple[str, ...]      # member node names, in order
    ops: tuple[str, ...]          # member op names, in order
    flops: int                    # at the maximum batch, for a dynamic batch
    node_index: int = 0           # position in the network's node-name table
    phase: str = "forward"        # "forward" | "backward": which entry point runs it
    prepare: tuple = ()           # PrepareCalls: values derived from params at bind time (folded BatchNorm,
                                  # prepacked weights)
    flops_batch: tuple | None = None   # a dynamic batch: (a, b), the FLOPs at batch N being a*N + b


@dataclass(frozen=True)
class PrepareCall:
    """A function run once after params are bound, writing into ctx->derived (e.g. a folded BatchNorm)."""
    fn: str
    group: str
    template: str
    vars: dict
    buffers: tuple[Buffer, ...]
    derived_end: int              # bytes of ctx->derived used up to the end of this call's outputs


@dataclass(frozen=True)
class PackRequest:
    """An op's request for one of its inputs in another layout, computed once at bind time by `<net>_prepare`
    into ctx->derived: GEMM B panels (mxcc_gemm_pack_b_f32), a Winograd-transformed convolution weight..."""
    input: str        # the input's name; the kernel sees the result as `<input>_packed`
    call: str         # the C statement that writes it, reading `src` and writing `packed`
    floats: int       # its size for any build (e.g. for panels of 16 or 32 columns)
    what: str         # a comment
    scale: str = ""   # a C statement multiplying output channel o of `packed` by bn_scale[o], run after `call`
                      # (an inference BatchNorm folded into the weight); empty: not folded


class LowerCtx:
    """An op's view while lowering: its inputs' and outputs' types, and the epilogue it absorbed.

    `const`: the inputs fixed at bind time (params and folded values of an inference plan:
    passes/fold_constants.bind_time_inputs), which ops may read transformed (`packed_input`)."""

    def __init__(self, names, in_types, out_types, epilogue: tuple[EpilogueStep, ...], node: str = "",
                 const: frozenset[str] = frozenset(), planes: dict | None = None):
        self.node = node                      # the anchor's node name (a random op's stream derives from it)
        self.planes = planes or {}            # "out" / an input's name -> floats between its NCHW planes, where
                                              # the plan put them further apart than H*W (plan.plane_strides)
        self._in = dict(zip(names, in_types))
        self._out = out_types
        self.epilogue = epilogue
        self.consumed = not epilogue          # the op's lower() must apply the epilogue it was given
        self.const = const                    # inputs fixed at bind time (params, folded values): the op's
                                              # workspace() saw the same set, so both choose the same kernel
        self.packs: list[PackRequest] = []
        self.bn_in_weight = False             # the BatchNorm's scale is folded into the packed weight

    def packed_input(self, name: str, pack: tuple[str, int, str, str]) -> str | None:
        """The C name of input `name` transformed once at bind time by `pack` = (C call, floats, what, scale
        call), e.g. gemm_pack_b(k, n, trans); None when it cannot be (a training plan, or a value the forward
        computes): the op then reads the input as it is.

        The weight of an anchor with an inference BatchNorm in its epilogue is packed with the BatchNorm's
        scale folded in (the scale call after the packing, as ONNX Runtime and TVM fold it into the weight):
        gemm_epilogue then adds only bn_shift, one multiply per output element fewer."""
        if name not in self.const:
            return None
        call, floats, what, scale = pack
        fold = name == "weight" and any(step.batch_norm for step in self.epilogue)
        if fold and self.consumed:
            raise AssertionError("packed_input('weight') after gemm_epilogue: the epilogue would scale twice")
        self.bn_in_weight = self.bn_in_weight or fold
        self.packs.append(PackRequest(name, call, floats, what, scale if fold else ""))
        return f"{name}_packed"

    def in_type(self, name: str) -> TensorType:
        return self._in[name]

    def plane_stride(self, name: str) -> int:
        """Floats between the NCHW planes of input `name` (or of the output, "out") where the plan put them
        further apart than H*W (OpDef.planes_apart), else 0."""
        return self.planes.get(name, 0)

    def out_type(self, i: int = 0) -> TensorType:
        return self._out[i]

    def gemm_epilogue(self, *, bias: str | None, per_row: bool, ld_residual: int | None = None
                      ) -> list[tuple[str, str]]:
        """The fields of a `mxcc_epilogue` initializer (empty list: no epilogue, pass NULL).

        A residual step reads the kernel's `residual` buffer with leading dimension `ld_residual`; an op
        whose GEMM cannot take one passes None and the fuse pass must not have given it one."""
        fields: list[tuple[str, str]] = []
        if any(step.batch_norm for step in self.epilogue):   # the bias is folded into bn_shift at bind time
            fields += [("bias", "bn_shift")] if self.bn_in_weight else [("scale", "bn_scale"), ("shift", "bn_shift")]
        elif bias:
            fields.append(("bias", bias))
        if per_row and fields:
            fields.append(("per_row", "1"))
        for step in self.epilogue:
            if step.batch_norm:
                continue
            if step.residual:
                if ld_residual is None:
                    raise AssertionError("residual epilogue given to an op that cannot apply it")
                fields += [("residual", "residual"), ("ld_residual", str(ld_residual))]
                continue
            fields.append(("act", step.act))
            if step.act == "MXCC_ACT_LEAKY":
                fields.append(("alpha", c_float(step.alpha)))
            if step.act == "MXCC_ACT_CLIP":
                fields += [("lo", c_float(step.lo)), ("hi", c_float(step.hi))]
        self.consumed = True
        return fields


def _location_expr(loc: Location, writable: bool, slot_names: dict[int, str]) -> tuple[str, str]:
    cast = "(float *)" if writable else "(const float *)"
    if loc.slot is not None:
        return f"{cast}ctx->slots[{loc.slot}]", f"slot {loc.slot} ({slot_names[loc.slot]})"
    if loc.derived is not None:
        return f"{cast}(ctx->derived + {loc.derived})", f"derived + {loc.derived} (folded)"
    return f"{cast}(ctx->arena + {loc.offset})", f"arena + {loc.offset}"


def lower(plan: Plan, net: str, batch: "BatchShapes | None" = None) -> list[KernelCall]:
    """The forward's (and backward's) kernels, one per group of `plan.graph.groups`. `batch`: a dynamic batch
    (passes/infer_batch.py): the dimensions that hold it are `Extent`s of the kernels' `N` (batchvar.py)."""
    return _lower_all(plan, net, batch)[0]


def lower_folded(plan: Plan, net: str) -> list[KernelCall]:
    """The folded groups' kernels (phase "prepare"), in the order <net>_prepare runs them; each is lowered by
    its own op like a forward kernel, reading params and earlier folded values, writing ctx->derived."""
    return _lower_all(plan, net)[1]


def symbolic_plan(plan: Plan, batch: "BatchShapes") -> Plan:
    """`plan` with the batch dimension of every value an Extent of N (types only: the arena, the slots' byte
    sizes and the workspaces stay those of the maximum)."""
    g = plan.graph
    nodes = list(g.nodes)
    for node in g.nodes:
        if node.out_types is None:
            continue
        if any(batch.of(Ref(node.id, i)) for i in range(len(node.out_types))):
            nodes[node.id] = replace(node, out_types=tuple(_symbolic_type(t, batch.of(Ref(node.id, i)), batch.maximum)
                                                           for i, t in enumerate(node.out_types)))
    return replace(plan, graph=replace(g, nodes=tuple(nodes)))


def _symbolic_type(t: TensorType, b, maximum: int) -> TensorType:
    if b is None:
        return t
    return replace(t, shape=tuple(Extent(b.factor, 0, maximum) if i == b.axis else d for i, d in enumerate(t.shape)))


def _lower_all(plan: Plan, net: str, batch=None) -> tuple[list[KernelCall], list[KernelCall]]:
    if batch is not None:
        plan = symbolic_plan(plan, batch)
    g = plan.graph
    slot_names = {s.index: f"{s.kind} {s.name!r}" for s in plan.slots}
    groups = list(g.groups) + list(plan.folded)
    fns = unique_idents([f"{net}_{grp.name}" for grp in groups])
    calls = []
    derived = DerivedSpace((plan.derived_bytes + 63) // 64 * 64)   # the folded values come first
    for i, (grp, fn) in enumerate(zip(groups, fns)):
        try:
            call = _no_restrict_on_aliases(_lower_group(plan, grp, fn, slot_names, i, derived))
        except (BatchDecision, AttributeError, TypeError) as e:
            if batch is None:
                raise
            anchor = g.nodes[grp.members[0]]    # an op whose lowering needs the batch's value: not dynamic yet
            raise ShapeError(f"cannot take the batch at run time: {e}; compile it for a fixed batch",
                             node=anchor.name, op=anchor.op) from e
        calls.append(call if i < len(g.groups) else replace(call, node_index=-1))
    return calls[:len(g.groups)], calls[len(g.groups):]


class DerivedSpace:
    """ctx->derived as lowering hands it out: the folded values first (placed by the planner), then in kernel
    order each folded BatchNorm's scale and shift and each prepacked weight, on 64-byte boundaries."""

    def __init__(self, start: int):
        self.end = start

    def take(self, nbytes: int) -> int:
        """The offset of `nbytes` more bytes."""
        offset = self.end
        self.end += (nbytes + 63) // 64 * 64
        return offset


def derived_bytes(calls: list[KernelCall]) -> int:
    """ctx->derived bytes used by the folded BatchNorms of `calls` (they come after the folded values)."""
    return max((p.derived_end for c in calls for p in c.prepare), default=0)


def _no_restrict_on_aliases(call: KernelCall) -> KernelCall:
    """In-place kernels read and write one buffer through two pointers: those must not be `restrict`."""
    count: dict[str, int] = {}
    for b in call.buffers:
        count[b.where] = count.get(b.where, 0) + 1
    if all(c == 1 for c in count.values()):
        return call
    bufs = tuple(replace(b, restrict=False, fresh=False) if count[b.where] > 1 else b for b in call.buffers)
    return replace(call, buffers=bufs)


def _buffer(plan: Plan, ref: Ref, cname: str, writable: bool, slot_names) -> Buffer:
    expr, where = _location_expr(plan.locations[ref.key], writable, slot_names)
    return Buffer(cname, plan.graph.type_of(ref), writable, expr, where)


def _lower_group(plan: Plan, grp: FusedGroup, fn: str, slot_names, index: int, derived: "DerivedSpace") -> KernelCall:
    g = plan.graph
    members = [g.nodes[m] for m in grp.members]
    anchor = members[0]
    op = anchor.opdef
    # at a dynamic batch: the FLOPs of the largest, and a*N + b for the profiler's per-call rates
    counted = sum(m.opdef.flops(m.params, [g.type_of(r) for r in m.inputs], m.out_types) for m in members)
    flops = at_max(counted)
    outs = [replace(_buffer(plan, r, "out" if len(grp.outputs) == 1 else f"out{j}", True, slot_names), fresh=True)
            for j, r in enumerate(grp.outputs)]
    common = dict(fn=fn, group=grp.name, sources=tuple(m.name for m in members),
                  ops=tuple(m.op for m in members), flops=flops, node_index=index, phase=anchor.phase,
                  flops_batch=(counted.a, counted.b) if isinstance(counted, Extent) else None)
    if op.view_of(anchor.params):                   # a view that is a graph output: copy it there
        src = _buffer(plan, anchor.inputs[0], "data", False, slot_names)
        return KernelCall(template="kernels/copy.c.j2", vars=dict(n=src.type.size), buffers=(src, *outs),
                          **common)
    if op.fusion_of(anchor.params) is Fusion.ELEMWISE:
        return _lower_elementwise(plan, grp, members, outs, slot_names, common)
    names = op.inputs(anchor.params)
    mutated = op.mutates(anchor.params)             # written in place (BatchNorm's moving statistics)
    ins = [_buffer(plan, r, name, name in mutated, slot_names) for name, r in zip(names, anchor.inputs)
           if name not in op.labels]
    epilogue = tuple(m.opdef.epilogue(m.params) for m in members[1:])
    prev = Ref(anchor.id, 0)
    prepare = ()
    for m, step in zip(members[1:], epilogue):
        if step.residual:
            other = next(r for r in m.inputs if r.key != prev.key)
            ins.append(_buffer(plan, other, "residual", False, slot_names))
        if step.batch_norm:
            fold, scale_shift = _fold_batch_norm(plan, anchor, m, fn, slot_names, derived)
            prepare = (fold,)
            ins += scale_shift
        prev = Ref(m.id, 0)
    planes = {name: plan.plane_strides[r.key] for name, r in zip(names, anchor.inputs) if r.key in plan.plane_strides}
    if len(grp.outputs) == 1 and grp.outputs[0].key in plan.plane_strides:
        planes["out"] = plan.plane_strides[grp.outputs[0].key]
    ctx = LowerCtx(names, [g.type_of(r) for r in anchor.inputs], anchor.out_types, epilogue, node=anchor.name,
                   const=bind_time_inputs(g, anchor), planes=planes)
    template, variables = op.lower(anchor.params, ctx)
    if template == "kernels/copy_rows.c.j2" and plan.slices:
        locs = {**{name: plan.locations[r.key] for name, r in zip(names, anchor.inputs)},
                **{b.cname: plan.locations[r.key] for b, r in zip(outs, grp.outputs)}}

        def arena_byte(name, off):   # copy_rows moves floats
            loc = locs.get(name)
            return None if loc is None or loc.offset is None else loc.offset + 4 * off
        variables, dropped = drop_copies_in_place(variables, arena_byte)
        if dropped:                                 # the output is not all written here: no NaN fill before
            outs = [replace(b, fresh=False) for b in outs]
    if not ctx.consumed:
        raise AssertionError(f"{op.name}.lower ignored its fused epilogue {epilogue}")
    bn_scale = next((b for b in ins if b.cname == "bn_scale"), None)
    for req in ctx.packs:
        src = next(b for b in ins if b.cname == req.input)
        pack, view = _prepack(req, src, fn, anchor.name, derived, bn_scale)
        prepare += (pack,)
        ins.append(view)
    if ctx.bn_in_weight:                            # the kernel reads bn_shift only
        ins = [b for b in ins if b.cname != "bn_scale"]
    ws = plan.workspaces.get(anchor.id)
    if ws is not None:
        expr, where = _location_expr(ws.location, True, slot_names)
        outs.append(Buffer("workspace", TensorType((ws.nbytes // 4,)), True, expr, f"{where} (scratch)", fresh=True))
    return KernelCall(template=template, vars=variables, buffers=(*ins, *outs), prepare=prepare, **common)


def _prepack(req: PackRequest, src: Buffer, fn: str, group: str, derived: "DerivedSpace", bn_scale: Buffer | None):
    """The bind-time packing of `src` into ctx->derived (a PrepareCall) and the kernel's read-only view;
    with req.scale, bn_scale (computed by the BatchNorm's fold, which <net>_prepare runs first) multiplied in."""
    off = derived.take(req.floats * 4)
    ttype = TensorType((req.floats,))
    where = f"derived + {off} ({req.input} packed)"
    out = Buffer("packed", ttype, True, f"(float *)(ctx->derived + {off})", where)
    what = f"{req.input} of {group}: {req.what}"
    extra = ()
    if req.scale:
        if bn_scale is None:
            raise AssertionError(f"{group}: a BatchNorm scale to fold but no bn_scale")
        what += ", times the BatchNorm's scale per output channel"
        extra = (bn_scale,)
    prep = PrepareCall(fn=f"{fn}_pack_{c_ident(req.input)}", group=group, template="kernels/pack_weight.c.j2",
                       vars=dict(call=req.call, scale=req.scale, what=what),
                       buffers=(replace(src, cname="src"), *extra, out), derived_end=derived.end)
    view = Buffer(f"{req.input}_packed", ttype, False, out.expr.replace("(float *)", "(const float *)"), where)
    return prep, view


def _fold_batch_norm(plan: Plan, anchor, bn, fn: str, slot_names, derived: "DerivedSpace"):
    """The bind-time fold of `bn` into `anchor`'s epilogue: a PrepareCall writing per-channel scale/shift
    into ctx->derived, and the kernel's read-only views of them."""
    channels = bn.out_types[0].shape[bn.params.axis % len(bn.out_types[0].shape)]
    nbytes = (channels * 4 + 63) // 64 * 64
    scale_off, shift_off = derived.take(nbytes), derived.take(nbytes)
    ttype = TensorType((channels,))
    names = bn.opdef.inputs(bn.params)
    params = [_buffer(plan, r, name, False, slot_names) for name, r in zip(names, bn.inputs) if name != "data"]
    anchor_names = anchor.opdef.inputs(anchor.params)
    has_bias = "bias" in anchor_names
    if has_bias:
        params.append(_buffer(plan, anchor.inputs[anchor_names.index("bias")], "bias", False, slot_names))
    where = f"derived + {{}} (folded {bn.name})"
    outs = [Buffer("bn_scale", ttype, True, f"(float *)(ctx->derived + {scale_off})", where.format(scale_off)),
            Buffer("bn_shift", ttype, True, f"(float *)(ctx->derived + {shift_off})", where.format(shift_off))]
    prep = PrepareCall(fn=f"{fn}_fold_{c_ident(bn.name)}", group=anchor.name, template="kernels/fold_batch_norm.c.j2",
                       vars=dict(channels=channels, eps=c_float(bn.params.eps), fix_gamma=bn.params.fix_gamma,
                                 has_bias=has_bias, what=f"{bn.name} (BatchNorm, {channels} channels)"),
                       buffers=(*params, *outs), derived_end=derived.end)
    views = [Buffer(b.cname, ttype, False, b.expr.replace("(float *)", "(const float *)"), b.where) for b in outs]
    return prep, views


def _lower_elementwise(plan, grp, members, outs, slot_names, common) -> KernelCall:
    """A chain of elementwise ops -> one loop `out[i] = <composed expression>`."""
    inside = {m.id for m in members}
    external: list[Ref] = []
    for m in members:
        for r in _read_inputs(m):
            if r.node not in inside and r.key not in [e.key for e in external]:
                external.append(r)
    if len(members) == 1:
        cnames = list(members[0].opdef.inputs(members[0].params))[:len(external)]
        if len(set(cnames)) != len(external):
            cnames = [f"in{j}" for j in range(len(external))]
    else:
        cnames = [f"in{j}" for j in range(len(external))]
    name_of = {r.key: c for r, c in zip(external, cnames)}
    expr_of: dict[int, str] = {}
    for m in members:
        read = _read_inputs(m)
        args = [expr_of[r.node] if r.node in inside else f"{name_of[r.key]}[i]" if r in read else "0.0f"
                for r in m.inputs]
        expr_of[m.id] = m.opdef.c_expr(m.params, args)
    ins = [_buffer(plan, r, c, False, slot_names) for r, c in zip(external, cnames)]
    n = prod(members[-1].out_types[0].shape)
    return KernelCall(template="kernels/elemwise.c.j2",
                      vars=dict(n=n, expr=expr_of[members[-1].id], parallel=n >= PARALLEL_MIN_ELEMENTS),
                      buffers=(*ins, *outs), **common)


def _read_inputs(node) -> list[Ref]:
    """The inputs an inference kernel reads: all but labels (LogisticRegressionOutput's label)."""
    names = node.opdef.inputs(node.params)
    return [r for name, r in zip(names, node.inputs) if name not in node.opdef.labels]


@dataclass(frozen=True)
class UpdateCall:
    """One parameter's optimizer update: the C call `fn(weight, grad, states..., n, hyper...)`."""
    param: str
    fn: str                  # the UpdateDef's C function (runtime_c/optim.c)
    weight: str              # C expressions of the bound slots
    grad: str
    states: tuple[str, ...]
    n: int
    hyper: tuple[str, ...]   # C expressions of its float arguments, in the UpdateDef's order: h[i] (<net>_update's
                             # `const float *h = ctx->hyper`), times the parameter's lr_mult / wd_mult literal
    node_index: int


def lower_updates(plan: Plan, update: "UpdateDef", lr_mult: dict, wd_mult: dict, first_index: int
                  ) -> list[UpdateCall]:
    """An update per parameter with a gradient slot (inputs' gradients are not updated), calling `update`'s C
    function (an entry of mxcc/train/optimizer.py's UPDATES) with ctx->hyper laid out in its order."""
    slot = {(s.kind, s.name): s for s in plan.slots}
    calls = []
    for name, _ in plan.graph.grads:
        if ("param", name) not in slot:
            continue
        w, g = slot[("param", name)], slot[("grad", name)]
        states = tuple(f"(float *)ctx->slots[{slot[('state', f'{name}_{st}')].index}]" for st in update.states)
        mult = {"lr_mult": c_float(lr_mult.get(name, 1.0)), "wd_mult": c_float(wd_mult.get(name, 1.0))}
        hyper = tuple(f"h[{i}] * {mult[p.multiplier]}" if p.multiplier else f"h[{i}]"
                      for i, p in enumerate(update.hyper))
        calls.append(UpdateCall(name, update.c_fn, f"(float *)ctx->slots[{w.index}]",
                                f"(const float *)ctx->slots[{g.index}]", states, _prod(w.shape), hyper,
                                first_index + len(calls)))
    return calls


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


TRAIN_FLAGS = {"lr": "--lr", "wd": "--wd", "momentum": "--momentum"}   # <net>_train's options, by hyper-parameter


def lower_train_program(plan: Plan, update: "UpdateDef", hyper: dict) -> dict | None:
    """The constants of `<net>_train` (mxcc_train_config, runtime_c/driver/mxcc_driver.h), for a classifier
    with one image input, one label and one (batch, classes) output; None when the network is not of that
    shape. `update`: the optimizer's table entry, `hyper`: its step_hyper(1), the values the program trains
    with."""
    inputs = [s for s in plan.slots if s.kind == "input"]
    if any(s.kind == "head_grad" for s in plan.slots):
        return None                     # an output that is not a loss head: the program has no gradient for it
    data = [s for s in inputs if not s.optional and len(s.shape) >= 2]
    labels = [s for s in inputs if s is not (data[0] if data else None) and len(s.shape) == 1]
    outputs = [s for s in plan.slots if s.kind == "output"]
    if len(data) != 1 or len(labels) != 1 or len(outputs) != 1 or len(outputs[0].shape) != 2 \
            or len(inputs) != 2:
        return None
    batch = data[0].shape[0]
    inits = []
    for s in plan.slots:
        if s.kind not in ("param", "aux"):
            continue
        if s.name.endswith("weight") or (len(s.shape) >= 2 and s.kind == "param"):
            hw = _prod(s.shape[2:]) if len(s.shape) > 2 else 1
            fan_in, fan_out = (s.shape[1] if len(s.shape) > 1 else s.shape[0]) * hw, s.shape[0] * hw
            scale = (3.0 / ((fan_in + fan_out) / 2.0)) ** 0.5
            inits.append(dict(name=s.name, slot=s.index, how=f"Xavier U(-{scale:.6g}, {scale:.6g})",
                              kind="MXCC_INIT_UNIFORM", scale=repr(scale)))
        elif s.name.endswith(("gamma", "moving_var", "running_var")):
            inits.append(dict(name=s.name, slot=s.index, how="ones", kind="MXCC_INIT_ONES", scale="0.0"))
        else:
            inits.append(dict(name=s.name, slot=s.index, how="zeros", kind="MXCC_INIT_ZEROS", scale="0.0"))
    return dict(data_slot=data[0].index, label_slot=labels[0].index, output_slot=outputs[0].index,
                batch=batch, sample=_prod(data[0].shape[1:]), classes=outputs[0].shape[1], inits=inits,
                **_train_hyper(update, hyper, batch))


def _train_hyper(update: "UpdateDef", hyper: dict, batch: int) -> dict:
    """<net>_train's ctx->hyper: `hyper`, one {name, flag, value} per float in `update`'s order, with `flag`
    the option that overrides it ('' for none) and `value` its default (a C double the program rounds to
    float); and `unused_flags`, the options this update has no hyper-parameter for. The values are those of
    the optimizer's first update, except rescale_grad: 1/batch, the program's gradient being the batch's sum
    (MXNet's C++ MLP example sets it so)."""
    out = []
    for h, v in zip(update.hyper, update.values(hyper)):
        if h.name == "rescale_grad":
            v = float(np.float32(1.0) / np.float32(batch))          # C's 1.0f / batch, to the bit
        flag = TRAIN_FLAGS.get(h.name, "")
        out.append(dict(name=h.name, flag=flag, value=repr(float(v)) if np.isfinite(v) else c_float(v)))
    return dict(hyper=out, unused_flags=[f for name, f in TRAIN_FLAGS.items() if name not in update.hyper_names])
