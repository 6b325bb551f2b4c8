"""The `mxcc` command line: argparse only. Errors print as one line and exit 2 (traceback with --debug).

    mxcc compile NET.json --shape data=1,784 [--params FILE] [-o DIR] [--name NAME] [--dynamic-batch]
                 [--no-fuse] [--no-plan] [--no-fold] [--no-schedule] [--tune [--tune-threads T]]
    mxcc inspect NET.json --shape data=1,784 [--no-fuse] [--no-plan] [--no-fold] [--no-schedule] [--json]
                 [--tune [--tune-threads T]] [--threads T[,T...] [--isa avx512|avx2|c]]
    mxcc run DIR --input data=x.npy [--input ...] [--output out.npz]
    mxcc perf DIR [--iters N | --seconds S] [--threads T] [--batch N] [--call-graph fp|dwarf] [-o OUT] [--stat] [--py]
    mxcc perf DIR --train [--epochs N] [--images F --labels F] [--threads T] [--call-graph fp|dwarf] [-o OUT]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import mxcc
from mxcc.compiler.driver import _default_name, inspect_network
from mxcc.errors import MxccError
from mxcc.files import atomic_write
from mxcc.options import CompileOptions
from mxcc.passes.infer_batch import format_shape, split_batch_marks
from mxcc.perf.record import main as perf_main
from mxcc.train.initializer import Xavier, init_params
from mxcc.train import optimizer


def _shape(text: str, dynamic: bool = False) -> tuple[str, tuple]:
    """NAME=D1,D2,... -> (name, dims). `dynamic` (inspect): one dimension may be ?MAX, the batch N with its
    maximum, kept as the string '?MAX' (passes/infer_batch.py: split_batch_marks reads it)."""
    name, sep, dims = text.partition("=")
    marks = [d for d in dims.split(",") if d.strip().startswith("?")]
    try:
        if not sep or not name or len(marks) > 1:
            raise ValueError
        shape = tuple(d.strip() if d.strip().startswith("?") else int(d) for d in dims.split(","))
        if not shape or any(int(d[1:] if isinstance(d, str) else d) <= 0 for d in shape):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=D1,D2,... with positive integers"
                                         + (", one of them may be ?MAX (a dynamic batch up to MAX)" if dynamic
                                            else "")) from None
    return name, shape


def _dynamic_shape(text: str) -> tuple[str, tuple]:
    return _shape(text, dynamic=True)


def _named_file(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=FILE.npy")
    return name, path


def _tune_arguments(p) -> None:
    p.add_argument("--tune", action="store_true", default=None,
                   help="each convolution takes the kernel measured fastest on this CPU (timed once per layer, "
                        "cached in $MXCC_CACHE_DIR/tune; MXCC_TUNE=1 does the same) instead of the built-in "
                        "heuristics")
    p.add_argument("--tune-threads", type=int, default=None, metavar="T",
                   help="with --tune: the thread count to measure at (default: the OpenMP default, "
                        "OMP_NUM_THREADS or every core)")


def _tune_options(args) -> dict:
    if args.tune_threads is not None and args.tune_threads < 1:
        raise MxccError(f"--tune-threads must be >= 1, got {args.tune_threads}")
    return dict(tune=args.tune, tune_threads=args.tune_threads)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mxcc", description="Compile MXNet-style networks to fast C.")
    p.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("compile", help="compile a symbol JSON to C, a Python module and a benchmark")
    c.add_argument("net", help="MXNet *-symbol.json")
    c.add_argument("--shape", action="append", type=_dynamic_shape, required=True, metavar="NAME=D1,D2,...",
                   help="shape of an input (repeat for several inputs)")
    c.add_argument("--params", help="MXNet .params (or .npz) with the weights")
    c.add_argument("-o", "--out", help="output directory (default: build/<name>)")
    c.add_argument("--name", help="network name used in C symbols (default: from the file name)")
    c.add_argument("--dynamic-batch", action="store_true",
                   help="the leading dimension of each --shape is the maximum batch: a call runs any batch up to "
                        "it (or mark the batch dimension: --shape data=?64,3,224,224)")
    c.add_argument("--no-fuse", action="store_true", help="one kernel per node")
    c.add_argument("--no-plan", action="store_true", help="one arena range per intermediate (no reuse)")
    c.add_argument("--no-fold", action="store_true",
                   help="no constant folding: param-only nodes run in every forward, not once at bind time")
    c.add_argument("--no-schedule", action="store_true",
                   help="run the kernels in the graph's node order (default: the order with the fewest live bytes)")
    c.add_argument("--isa", default=None, help="gcc -march value (default: native)")
    _tune_arguments(c)
    c.add_argument("--random-params", action="store_true",
                   help="no weights at hand: Xavier-initialized params (seed 0; moving stats 0/1), for benchmarks")
    c.add_argument("--no-profile", action="store_true", help="compile the profiler hooks out")
    c.add_argument("--timings", action="store_true", help="print how long each stage took (front end, each pass, "
                   "lowering, rendering, C compile, link)")
    c.add_argument("--train", action="store_true",
                   help="compile forward + backward + optimizer update (and <net>_train for classifiers)")
    c.add_argument("--optimizer", choices=optimizer.names(), default="sgd", help="with --train (default sgd)")
    c.add_argument("--lr", type=float, default=0.1, help="with --train: learning rate (default 0.1)")
    c.add_argument("--momentum", type=float, default=0.0, help="with --train and sgd (default 0)")
    c.add_argument("--wd", type=float, default=0.0, help="with --train: weight decay (default 0)")
    c.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    i = sub.add_parser("inspect", help="show fusion groups, buffer placement and memory totals (no build)")
    i.add_argument("net", help="MXNet *-symbol.json")
    i.add_argument("--shape", action="append", type=_dynamic_shape, required=True, metavar="NAME=D1,D2,...",
                   help="shape of an input; ?MAX marks its batch dimension, dynamic up to MAX (data=?64,3,224,224)")
    i.add_argument("--no-fuse", action="store_true", help="one kernel per node")
    i.add_argument("--no-plan", action="store_true", help="one arena range per intermediate")
    i.add_argument("--no-fold", action="store_true", help="no constant folding of param-only nodes")
    i.add_argument("--no-schedule", action="store_true", help="kernels in the graph's node order")
    i.add_argument("--json", action="store_true", help="print the plan as JSON (same as plan.json)")
    _tune_arguments(i)
    i.add_argument("--threads", type=_thread_counts, default=(), metavar="T[,T...]",
                   help="show how each kernel's parallel work splits over T threads (parts, per-thread balance: "
                        "codegen/splits.py), and the parallel jobs per forward")
    i.add_argument("--isa", choices=("avx512", "avx2", "c"), default=None,
                   help="with --threads: the build's blocking (default: this machine's)")
    i.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    r = sub.add_parser("run", help="run a compiled module on .npy inputs")
    r.add_argument("dir", help="directory written by `mxcc compile`")
    r.add_argument("--input", action="append", type=_named_file, default=[], metavar="NAME=FILE.npy")
    r.add_argument("--output", help="write the outputs to this .npz (default: print them)")
    r.add_argument("--threads", type=int, default=None)
    r.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    f = sub.add_parser("perf", help="profile the compiled network's benchmark with perf: flame graph, time per layer")
    f.add_argument("dir", help="directory written by `mxcc compile`")
    n = f.add_mutually_exclusive_group()
    n.add_argument("--iters", type=int, help="run this many forwards")
    n.add_argument("--seconds", type=float, help="run forwards for this long (default: 2)")
    f.add_argument("--threads", type=int, default=0, help="OpenMP threads (default: all cores)")
    f.add_argument("--batch", type=int, default=0,
                   help="a module compiled with --dynamic-batch: the batch to run (default: its maximum)")
    f.add_argument("--call-graph", choices=("fp", "dwarf"), default=None,
                   help="stack unwinding: frame pointers (small; default when the build has profiler call sites) "
                        "or DWARF (complete through libgomp, larger)")
    f.add_argument("-F", "--freq", type=int, default=None,
                   help="samples per second per thread (default: 999); raise it to see short functions")
    f.add_argument("-o", "--out", help="output directory (default: DIR/perf)")
    f.add_argument("--stat", action="store_true", help="perf stat summary: time, task-clock, faults, counters")
    f.add_argument("--py", action="store_true", help="sample a Python process calling the module (py-spy)")
    f.add_argument("--train", action="store_true",
                   help="profile the standalone training program (<net>_train; compile with train=True): "
                        "data loading, forward, backward, update")
    f.add_argument("--epochs", type=int, default=None, help="--train: epochs to run (default: 1)")
    f.add_argument("--images", help="--train: IDX images (default: the MNIST test images in examples/data/mnist)")
    f.add_argument("--labels", help="--train: IDX labels (default: the MNIST test labels in examples/data/mnist)")
    f.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return p


def _compile(args) -> int:
    shapes = dict(args.shape)
    name = args.name or _default_name(args.net)
    out = args.out or os.path.join("build", name)
    t = time.perf_counter()
    params = args.params
    if args.random_params:
        if params:
            raise MxccError("--params and --random-params exclude each other")
        concrete = split_batch_marks(shapes)[0]
        arg, aux = init_params(mxcc.sym.load(args.net), concrete, Xavier(), seed=0)
        params = {**arg, **{f"aux:{k}": v for k, v in aux.items()}}
    train = {}
    if args.train:
        batch = next(iter(split_batch_marks(shapes)[0].values()))[0]
        kw = dict(learning_rate=args.lr, wd=args.wd, rescale_grad=1.0 / batch)
        if args.momentum:
            if args.optimizer != "sgd":
                raise MxccError(f"--momentum is an SGD hyper-parameter, not {args.optimizer}'s")
            kw["momentum"] = args.momentum
        opt = optimizer.create(args.optimizer, **kw)
        train = dict(train=True, optimizer=opt)
    if args.dynamic_batch:
        train["dynamic_batch"] = True
    mod = mxcc.compile(args.net, shapes, params, out_dir=out, name=name, fuse=not args.no_fuse,
                       plan=not args.no_plan, fold=not args.no_fold, schedule=not args.no_schedule, isa=args.isa,
                       profile=not args.no_profile, **_tune_options(args), **train)
    dt = time.perf_counter() - t
    print(f"compiled {args.net} -> {out}/ ({'cached' if mod.cached else 'built'} in {dt:.2f} s)")
    if args.timings:
        width = max(len(stage) for stage, _ in mod.timings)
        for stage, seconds in mod.timings:
            print(f"  {stage:{width}s}  {seconds * 1e3:8.1f} ms")
        print(f"  {'total':{width}s}  {sum(s for _, s in mod.timings) * 1e3:8.1f} ms")
    if mod.tuning:
        print(f"  tuned  : {_tuning_line(mod.tuning)} (plan.json: tuning; mxcc inspect --tune)")
    if mod.max_batch:
        print(f"  batch  : dynamic, 1..{mod.max_batch} (the shapes below are at the maximum)")
    print(f"  inputs : {', '.join(f'{k}{v}' for k, v in mod.input_shapes.items())}")
    print(f"  outputs: {', '.join(f'{k}{v}' for k, v in mod.output_shapes.items())}")
    print(f"  python : mxcc.load({out!r}).forward(...)    bench: {out}/{mod.meta['bench']} --iters 1000")
    if mod.meta.get("train_program"):
        print(f"  train  : {out}/{mod.meta['train_program']} --images IDX --labels IDX --epochs 10")
    return 0


def _thread_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(t) for t in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected thread counts >= 1 separated by commas, got {text!r}")
    return counts


def _inspect(args) -> int:
    import json
    shapes, batch_axes, _ = split_batch_marks(dict(args.shape))
    plan = inspect_network(args.net, shapes, CompileOptions.from_env(fuse=not args.no_fuse, plan=not args.no_plan,
                                                                    fold=not args.no_fold,
                                                                    schedule=not args.no_schedule,
                                                                    **_tune_options(args)),
                           batch_axes=batch_axes, threads=args.threads, isa=args.isa)
    if args.json:
        print(json.dumps(plan, indent=1))
    else:
        print(format_plan(plan))
        if plan.get("tuning"):
            print()
            print(format_tuning(plan["tuning"]))
        for t, report in plan.get("splits", {}).items():
            print()
            print(format_splits(int(t), report))
    return 0


def format_splits(threads: int, report: dict) -> str:
    """`mxcc inspect --threads T`: each forward kernel's split at T threads (codegen/splits.py)."""
    rows = [("kernel", "split", "thr", "parts", "atoms", "eff", "ideal", "MFLOP", "how")]
    for k in report["kernels"]:
        eff = "-" if k["efficiency"] is None else f"{k['efficiency']:.3f}"
        rows.append((k["function"], k["split"], str(k["threads"]), str(k["parts"]), str(k["atoms"]), eff,
                     f"{k['ideal']:.3f}", f"{k['flops'] / 1e6:.1f}", k["how"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join([c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))] + [r[-1]])
             for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    s = report["summary"]
    weighted = "-" if s["weighted_efficiency"] is None else f"{s['weighted_efficiency']:.3f}"
    below = [k for k in report["kernels"] if k["efficiency"] is not None and k["threads"] > 1
             and k["efficiency"] < 0.9]
    lines += ["", f"{threads} threads ({report['isa']} blocking): {s['jobs']} parallel jobs per forward "
              f"({s['openmp']} kernels as OpenMP regions); FLOP-weighted efficiency {weighted}; "
              f"{len(below)} split kernels below 0.9 "
              f"({sum(1 for k in below if k['ideal'] < 0.9)} of them with too few atoms for 0.9)",
              "eff = one thread's work / thr / the busiest thread's (thr: the threads the work pays for; a "
              "split's repeated reads count against it); ideal = the best any split of the kernel's could do"]
    return "\n".join(lines)


def _tuning_line(t: dict) -> str:
    return (f"{len(t['layers'])} convolutions for {t['threads']} thread{'s' if t['threads'] > 1 else ''} "
            f"({t['engine']}), {t['changed']} off the heuristics, {t['measured']} measured now, "
            f"{len(t['layers']) - t['measured']} from the cache")


def format_tuning(t: dict) -> str:
    """`mxcc inspect --tune`: each tuned layer's candidates and times, the heuristics' choice and the chosen."""
    rows = [("node", "heuristic", "chosen", "times (us)", "from")]
    for l in t["layers"]:
        best = min(l["times_us"].values())
        rows.append((l["node"], l["heuristic"], l["chosen"] + (" *" if l["chosen"] != l["heuristic"] else ""),
                     "  ".join(f"{p} {v:.1f}" + (" (best)" if v == best else "") for p, v in l["times_us"].items()),
                     l["source"]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([f"convolution paths tuned on {t['cpu']}: {_tuning_line(t)}; * = another candidate was at "
                       f"least {t['margin']:.0%} faster than the heuristics' (cache: {t['cache']})"] + lines)


def _mib(n: int) -> str:
    return f"{n:,} B ({n / 2**20:.2f} MiB)"


def format_plan(plan: dict) -> str:
    """The human-readable `mxcc inspect` report."""
    rows = [("kernel", "members", "ops", "output shape", "MFLOP", "bytes", "where", "live")]
    slice_of = {v: (out, off) for v, out, off in plan.get("slices", ())}
    for g in plan["groups"]:
        members = " + ".join(g["members"])
        ops = "+".join(g["ops"])
        for j, o in enumerate(g["outputs"]):
            where = f"slot {o['slot']}" if o["location"] == "slot" else f"arena+{o['offset']}"
            live = "-" if o["live"] is None else f"{o['live'][0]}..{o['live'][1]}"
            if o.get("inplace_of"):
                where += f" (in place of {o['inplace_of']})"
            if o["name"] in slice_of:
                where += " (in {} at +{})".format(*slice_of[o["name"]])
            rows.append((g["function"] if j == 0 else "", members if j == 0 else "", ops if j == 0 else "",
                         format_shape(o["shape"], o.get("batch"), "x"), f"{g['flops'] / 1e6:.3f}" if j == 0 else "",
                         f"{o['nbytes']:,}", where, live))
        if g.get("workspace"):
            w = g["workspace"]
            rows.append(("", "  (scratch)", "", "", "", f"{w['nbytes']:,}", f"arena+{w['offset']}",
                         f"{w['live'][0]}..{w['live'][1]}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if plan.get("folded"):
        lines += ["", f"folded at bind time by <net>_prepare (outside the arena: {_mib(plan['derived_bytes'])} "
                      "in ctx->derived, offsets reused once their readers ran):"]
        lines += [f"  {f['function']}  {' + '.join(f['members'])}  ({'+'.join(f['ops'])})  "
                  + ", ".join(f"{'x'.join(map(str, o['shape']))} {o['nbytes']:,} B at derived+{o['offset']}"
                              for o in f["outputs"]) for f in plan["folded"]]
    ratio = plan["arena_bytes"] / plan["lower_bound_bytes"] if plan["lower_bound_bytes"] else 1.0
    folded = sum(len(f["members"]) for f in plan.get("folded", ()))
    lines += ["", f"{plan['nodes']} operator nodes -> {plan['kernels']} kernels"
              + (f" (+ {folded} folded nodes in {len(plan['folded'])} bind-time kernels)" if folded else ""),
              f"arena        {_mib(plan['arena_bytes'])}   strategy: {plan['strategy']}",
              f"naive        {_mib(plan['naive_bytes'])}   (one buffer per intermediate)",
              f"lower bound  {_mib(plan['lower_bound_bytes'])}   (most bytes live at one step)",
              f"arena / lower bound = {ratio:.3f}    arena / naive = "
              f"{plan['arena_bytes'] / plan['naive_bytes'] if plan['naive_bytes'] else 1.0:.3f}",
              "bound by the host, outside the arena: " + ", ".join(
                  f"{s['kind']} {s['name']}{format_shape(s['shape'], s.get('batch'))}" for s in plan["slots"]
                  if s["kind"] in ("input", "output")) + "".join(
                  f", {n} {label}" for kind, label in (("param", "params"), ("aux", "aux states"),
                                                       ("grad", "gradients"), ("state", "optimizer states"))
                  if (n := sum(1 for s in plan["slots"] if s["kind"] == kind)))]
    if plan.get("batch"):
        b = plan["batch"]
        dependent = sum(1 for g in plan["groups"] if g["batch_dependent"])
        lines.append(f"dynamic batch N, 1 <= N <= {b['maximum']} ("
                     + ", ".join(f"{k} dimension {a}" for k, a in b["inputs"].items())
                     + f"): shapes show N (kN: k rows per sample), bytes and the arena are at N = {b['maximum']}; "
                     f"{dependent} of {plan['kernels']} kernels depend on N")
    return "\n".join(lines)


def _run(args) -> int:
    mod = mxcc.load(args.dir)
    if args.threads:
        mod.set_num_threads(args.threads)
    inputs = {}
    for name, path in args.input:
        try:
            inputs[name] = np.load(path)
        except (OSError, ValueError) as e:
            raise MxccError(f"cannot read input {name!r} from {path}: {e}") from None
    outs = mod.forward(**inputs)
    names = list(mod.output_shapes)
    if args.output:
        import io
        buf = io.BytesIO()
        np.savez(buf, **dict(zip(names, outs)))
        atomic_write(args.output, buf.getvalue())
        print(f"wrote {', '.join(names)} to {args.output}")
    else:
        for n, o in zip(names, outs):
            print(f"{n} {o.shape}:\n{o}")
    return 0


def _perf(args) -> int:
    return perf_main(args)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"compile": _compile, "inspect": _inspect, "run": _run, "perf": _perf}[args.cmd](args)
    except MxccError as e:
        if args.debug:
            raise
        print(f"mxcc: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
