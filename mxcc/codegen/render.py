"""Rendering: KernelCalls + Plan -> C text, through the Jinja templates in templates/.

One Environment (StrictUndefined: a typo fails loudly). Each kernel template begins with an
`{# expects: a b c #}` line; the variables a KernelCall brings are checked against it before rendering,
so a missing or extra key names the template. Templates print values; they never compute them.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import jinja2

from mxcc._version import __version__
from mxcc.codegen.batchvar import Extent, c_and, c_text, is_cond, uses_batch
from mxcc.codegen.cnames import c_string, unique_idents
from mxcc.codegen.lower import KernelCall, derived_bytes
from mxcc.plan import Plan


@dataclass(frozen=True)
class CSource:
    c: str          # <net>.c
    h: str          # <net>.h
    cdef: str       # declarations for cffi
    bench: str      # <net>_bench.c
    train: str | None = None   # <net>_train.c (classifiers compiled for training)
    parts: int = 1  # <net>.c is compiled this many times, -DMXCC_PART=0..parts-1, in parallel (1: once, plainly)


# A network of more kernels than this is compiled as separate parts of <net>.c, in parallel: gcc's time grows
# with the file (DenseNet-121: 488 kernels, 750 KB of C, 4.6 s in one piece at -O3 on a 2-vCPU Xeon), and the
# parts each take a share of it on their own core. Small networks (the MLP, ResNet-18 and -50 inference) stay
# in one piece.
PART_KERNELS = 160
MAX_PARTS = 4


@functools.lru_cache(maxsize=None)
def environment(template_dir: str) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(template_dir), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             autoescape=False)
    # a dynamic batch's run-time conditions (codegen/batchvar.py): `{% if x is cond %}`, `c_and(parallel, ...)`
    env.tests["cond"] = is_cond
    env.globals["c_and"] = c_and
    env.filters["c"] = c_text
    return env


def _expects(env: jinja2.Environment, name: str) -> set[str]:
    src = env.loader.get_source(env, name)[0]
    m = re.search(r"\{#\s*expects:([^#]*)#\}", src)
    if not m:
        raise KeyError(f"template {name} has no '{{# expects: ... #}}' line")
    return set(m.group(1).split())


# Kernels whose body is one parallel loop and nothing else (mx.par_for): run in parts on mxcc's pool
# (templates/_kernel.c.j2), when the template's variables say the body is that loop alone.
SPMD = {
    "kernels/elemwise.c.j2": lambda v: True,
    "kernels/pool2d.c.j2": lambda v: True,
    "kernels/batch_norm.c.j2": lambda v: not v["mean_var"],     # then a second loop writes mean and var
    "kernels/softmax.c.j2": lambda v: v["inner"] != 1,          # else a runtime call (nn/softmax_f32.c)
    "kernels/norm_rows.c.j2": lambda v: True,
    "kernels/lrn.c.j2": lambda v: True,
    "kernels/resize_adaptive_pool.c.j2": lambda v: True,
    "kernels/resize_crop.c.j2": lambda v: True,
    "kernels/resize_pad.c.j2": lambda v: True,
    "kernels/math_cast.c.j2": lambda v: True,
    "kernels/embedding.c.j2": lambda v: True,
    "kernels/loops.c.j2": lambda v: bool(v["loops"]),           # broadcasting, transposes, slices, ...
    "kernels/reduce.c.j2": lambda v: not v["bare_block"],       # sums over axes; bare: one output, no loop
    "kernels/copy_rows.c.j2": lambda v: True,                   # block copies: their floats as one range
}


# What in a kernel's C may open an OpenMP region (the generated loops not run in parts, and the runtime functions
# that keep one: the depthwise backward's, training's gradient accumulation; the GEMM's shared-B split only when
# OpenMP is selected). A network with none runs its parallel work on the pool. (The RNN's steps and im2col /
# col2im are pool jobs: runtime_c/rnn/rnn_f32.c, runtime_c/conv/im2col_f32.c.)
OPENMP_CALLS = ("#pragma omp parallel", "mxcc_conv_depthwise_backward", "mxcc_accumulate_f32")


def uses_pool(kernels: list[str], train: bool) -> bool:
    """Whether a network's entry points select mxcc's pool (runtime_c/pool/mxcc_pool.h): no OpenMP team may
    run beside it, so not when a kernel may open an OpenMP region, nor for training (its updates do)."""
    return not train and not any(s in k for k in kernels for s in OPENMP_CALLS)


def calls_use_pool(calls: list[KernelCall], template_dir: str, folded: list | None = None) -> bool:
    """Whether an inference network of these kernels (and `folded` ones) selects mxcc's pool: uses_pool over the
    kernels' text as render() writes it, without rendering the rest (compiler/tune.py times kernels on the
    engine their network will run them on)."""
    env = environment(template_dir)
    bodies = list(calls) + list(folded or [])
    preps = [p for c in bodies for p in c.prepare]
    return uses_pool([_render_kernel(env, c) for c in bodies + preps], train=False)


def _spmd(call) -> bool:
    rule = SPMD.get(call.template)
    parallel = call.vars.get("parallel")
    return rule is not None and (is_cond(parallel) or bool(parallel)) and rule(call.vars)


def _render_kernel(env, call: KernelCall, linkage: str = "static MXCC_NOINLINE") -> str:
    want = _expects(env, call.template)
    got = set(call.vars)
    if want != got:
        raise KeyError(f"template {call.template}: missing {sorted(want - got)}, unexpected {sorted(got - want)}")
    spmd = _spmd(call)
    text = env.get_template(call.template).render(call=call, v=call.vars, linkage=linkage, spmd=spmd,
                                                  parts=c_and(call.vars.get("parallel"), "1") if spmd else "")
    if uses_batch(text):        # a dynamic batch: the kernel's extents are C expressions of the call's N
        decl = "    const long N = ctx->batch;   /* this call's batch, 1..max */\n"
        heads = [f"void {call.fn}(mxcc_ctx *ctx)\n{{\n"]
        if spmd:
            heads.append(f"void {call.fn}_part(mxcc_ctx *ctx, long part, long parts)\n{{\n")
        for head in heads:
            text = text.replace(head, head + decl, 1)
    return c_text(text)


def _part_count(kernels: int) -> int:
    """How many parts <net>.c is compiled in: 1, or part 0 (tables, entry points) and up to MAX_PARTS - 1 parts
    of kernels."""
    return 1 if kernels <= PART_KERNELS else min(MAX_PARTS, 1 + -(-kernels // PART_KERNELS))


def _parts(texts: list[str], parts: int) -> list[list[int]]:
    """The kernels (indices into texts, in order) of each part after part 0: groups of about equal text."""
    n = parts
    if n == 1:
        return [list(range(len(texts)))]
    total = sum(map(len, texts))
    groups, acc, target = [[]], 0, total / (n - 1)
    for i, t in enumerate(texts):
        if acc >= target * len(groups) and len(groups) < n - 1:
            groups.append([])
        groups[-1].append(i)
        acc += len(t)
    return groups


def render(plan: Plan, calls: list[KernelCall], net: str, *, template_dir: str, source: str,
           options: str, profile: bool = True, updates: list | None = None, train_program: dict | None = None,
           optimizer: str = "", hyper_layout: tuple[str, ...] = (), infer_calls: list | None = None,
           infer_backward: list | None = None, train_arena_bytes: int | None = None, random: bool = False,
           poison: bool = False, folded: list | None = None, folded_bytes: int = 0,
           max_batch: int = 0, slot_batch: dict | None = None) -> CSource:
    """`infer_calls`, `infer_backward`: a training build's inference forward (`<net>_forward_infer`) and its
    backward (`<net>_backward_infer`), numbered after the updates, in the arena after the training plan's
    `train_arena_bytes`; None when the forward does not depend on the mode. `poison`: the entry points
    fill what each call writes with NaN first (CompileOptions.poison). `random`: the forward draws from the
    context's RNG (training Dropout), so each training forward advances ctx->rng_step. `folded`: the kernels
    of folded constants (lower_folded; of the inference variant too), run first by `<net>_prepare`, writing
    `folded_bytes` of ctx->derived; they are not in the kernel table (the forward never runs them).
    `optimizer`, `hyper_layout`: a training build's update kind and the names of ctx->hyper's floats, in order
    (its UpdateDef's hyper). `max_batch`: a dynamic batch's maximum (0: the batch is fixed); the kernels were
    lowered with it symbolic, and `slot_batch` gives each host slot that holds it its BatchAxis."""
    env = environment(template_dir)
    folded = folded or []
    every = calls + (infer_calls or []) + (infer_backward or [])
    train_arena = plan.arena_bytes if train_arena_bytes is None else train_arena_bytes
    infer_base = (train_arena + 63) // 64 * 64
    slot_dicts = [dict(index=s.index, name=s.name, cname=c_string(s.name), kind=s.kind, shape=s.shape,
                       size=_size(s.shape), ident=ident, optional=s.optional,
                       batch=(slot_batch or {}).get(s.index))
                  for s, ident in zip(plan.slots, unique_idents([f"{s.kind}_{s.name}" for s in plan.slots]))]
    for sd in slot_dicts:       # the bytes a call writes: at a dynamic batch, a C expression of N
        b = sd["batch"]
        sd["nbytes"] = sd["size"] * 4 if b is None else \
            (sd["size"] // (b.factor * max_batch)) * 4 * Extent(b.factor, 0, max_batch)
    fresh = {s["name"]: s for s in slot_dicts if s["kind"] == "grad_fresh"}
    # the kernels' text; many kernels: in parts compiled separately (so not static)
    bodies = every + folded
    preps = [p for c in folded + every for p in c.prepare]
    parts = _part_count(len(bodies) + len(preps))
    linkage = "MXCC_KERNEL" if parts > 1 else "static MXCC_NOINLINE"
    kernels = [_render_kernel(env, c, linkage) for c in bodies] + [_render_kernel(env, p, linkage) for p in preps]
    groups = _parts(kernels, parts)
    ctx = dict(
        net=net, NET=net.upper(), version=__version__, source=source, options=options, profile=profile,
        calls=calls, kernels=kernels, kernel_parts=[[kernels[i] for i in g] for g in groups],
        kernel_fns=[c.fn for c in every + folded] + [p.fn for c in folded + every for p in c.prepare],
        parts=parts,
        derived_bytes=max(folded_bytes, derived_bytes(every + folded)),
        # C expressions of `threads` (omp_get_max_threads() at context creation): ctx->scratch floats
        scratch=[(c.fn, _most_over_batches(c.vars["thread_scratch"], max_batch)) for c in every
                 if c.vars.get("thread_scratch")],
        # folded values first (a folded BatchNorm may read them), each after the BatchNorm folds it reads
        prepare_fns=[fn for c in folded for fn in (*(p.fn for p in c.prepare), c.fn)]
        + [p.fn for c in every for p in c.prepare],
        folded=folded, folded_bytes=folded_bytes, folded_nodes=sum(len(c.sources) for c in folded),
        forward=[c for c in calls if c.phase == "forward"], backward=[c for c in calls if c.phase == "backward"],
        infer=infer_calls or [], infer_backward=infer_backward or [], random=random, poison=poison,
        poisons={c.fn: [(b.expr, b.type.nbytes) for b in c.buffers if b.fresh] for c in every},
        train_range=(0, train_arena), infer_range=(infer_base, plan.arena_bytes - infer_base),
        output_slots=[s for s in slot_dicts if s["kind"] == "output"],
        # what a backward writes whole: the gradients it writes, and those it computes to add (grad_req 'add')
        computed_grad_slots=[s for s in slot_dicts if (s["kind"] == "grad" and s["name"] not in fresh)
                             or s["kind"] == "grad_fresh"],
        accumulates=[dict(name=s["name"], grad=s["index"], fresh=fresh[s["name"]]["index"], n=s["size"])
                     for s in slot_dicts if s["kind"] == "grad" and s["name"] in fresh],
        # a training build's updates change the params: forward_infer refolds what is derived from them
        infer_prepares=bool(infer_calls) and (bool(folded) or any(c.prepare for c in every[len(calls):])),
        train=updates is not None, updates=updates or [], optimizer=optimizer, hyper_layout=hyper_layout,
        slots=slot_dicts,
        arena_bytes=plan.arena_bytes, lower_bound_bytes=plan.lower_bound_bytes,
        num_nodes=sum(1 for n in plan.graph.nodes if not n.is_variable),
        max_batch=max_batch, pool=int(uses_pool(kernels, updates is not None)),
        node_names=[c_string(c.group) for c in calls] + [c_string(f"update:{u.param}") for u in updates or []]
        + [c_string(c.group) for c in (infer_calls or []) + (infer_backward or [])],
    )
    return CSource(parts=parts, c=c_text(env.get_template("net.c.j2").render(**ctx)),
                   h=env.get_template("net.h.j2").render(**ctx),
                   cdef=env.get_template("cdef.h.j2").render(**ctx),
                   bench=env.get_template("bench.c.j2").render(**ctx),
                   train=env.get_template("train.c.j2").render(**ctx, **train_program)
                   if train_program else None)


def _most_over_batches(expr: str, max_batch: int) -> str:
    """A scratch size that depends on the batch (a kernel's split of the work can need more at a smaller batch):
    its largest value over N = 1..max, computed when the context is made."""
    if not uses_batch(expr):
        return expr
    return (f"({{ long most = 0; for (long N = 1; N <= {max_batch}; N++) {{ const long v = {expr}; "
            f"if (v > most) most = v; }} most; }})")


def _size(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
