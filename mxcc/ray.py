"""Batch inference over a cluster with Ray Data: a compiled network as the worker of `Dataset.map_batches`.

    import mxcc.ray
    ds = ray.data.read_parquet(...)                                  # a column "data" of (1, 28, 28) rows
    out = mxcc.ray.map_batches(ds, "build/lenet", concurrency=8)     # + a column per graph output

The compiled directory travels through Ray's object store, so that workers need mxcc's runtime (numpy, cffi,
GCC's libgomp) and nothing else: no C compiler, no cache, no copy of the model on their disk.

- `pack(module)` makes a `Bundle` on the driver: the bytes of the files `mxcc.load` reads (module.json, the
  extension .so, params.params: the Module's bound params, or the directory's file) and a manifest with the
  build's target (the `-march` of the compile, from the generated C's `options:` line; for `native`, the CPU
  gcc resolves it to) and the CPU flags that target lets the code use (for `native`: the flags of this host,
  which is taken to be the build host; for a named target: gcc's own list, `-march=X -Q --help=target`).
- `unpack(bundle)` in a worker first checks the worker against the manifest (the CPU flags of
  /proc/cpuinfo, the machine, the Python the extension was built for), so that a worker without the
  build's AVX-512 gets an error naming both CPUs and what is missing instead of a SIGILL; then it writes
  the files into a private temporary directory, loads them with `mxcc.load` and removes the directory (the
  loaded extension stays mapped). We chose the check over compiling for a baseline by default: the
  default `-march=native` is what makes the GEMM fast, and a cluster of one machine type (the usual case)
  would pay for a baseline it does not need. A mixed cluster compiles with `isa="x86-64-v3"` (AVX2+FMA)
  or `"x86-64-v4"` (AVX-512), which the check then holds the workers to.
- `Predictor` is the worker: loads the network once, then maps batches (dicts of numpy arrays, Ray's
  "numpy" format) to the same batches with one column per graph output. It does not import Ray unless it is
  handed an ObjectRef, so the same class serves Spark's `mapInPandas` (README, "Scaling out").
- `map_batches(ds, module, ...)` puts the bundle in the object store once and runs a pool of Predictor
  actors over `ds`, in order.

A batch of any size runs on a module compiled for a fixed batch: `run_rows` cuts it into chunks of the
compiled batch and pads the last one (`_padded`, the one piece a dynamic-batch module would drop).
Importing mxcc never imports this module, and importing this module never imports Ray.
"""
from __future__ import annotations

import importlib.machinery
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mxcc.compiler.artifacts import MODULE_JSON, PARAMS_FILE, params_file, read_meta
from mxcc.compiler.build import target_cpu
from mxcc.errors import BuildError, ParamsError, ShapeError, name_list
from mxcc.files import cpuinfo
from mxcc.options import CompileOptions
from mxcc.params import save_params
from mxcc.runtime.module import Module, load

FORMAT = 1      # the Bundle's layout version

# gcc's -m option -> the /proc/cpuinfo flag of the same instructions: the extensions a -march target can let
# gcc use. Other cpuinfo flags (ht, hypervisor, constant_tsc ...) say nothing about which instructions run.
# In the order of the x86-64 levels (v1, v2, v3, v4), then the rest: the order an error lists missing ones.
_GCC_TO_CPUINFO = {
    "sse": "sse", "sse2": "sse2",
    "sse3": "pni", "ssse3": "ssse3", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "popcnt": "popcnt", "cx16": "cx16",
    "sahf": "lahf_lm",
    "avx": "avx", "avx2": "avx2", "fma": "fma", "f16c": "f16c", "bmi": "bmi1", "bmi2": "bmi2", "lzcnt": "abm",
    "movbe": "movbe", "xsave": "xsave",
    "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512cd": "avx512cd", "avx512dq": "avx512dq",
    "avx512vl": "avx512vl",
    "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi", "avx512vbmi2": "avx512_vbmi2",
    "avx512vnni": "avx512_vnni", "avx512bitalg": "avx512_bitalg", "avx512vpopcntdq": "avx512_vpopcntdq",
    "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16", "avxvnni": "avx_vnni",
    "aes": "aes", "pclmul": "pclmulqdq", "vaes": "vaes", "vpclmulqdq": "vpclmulqdq", "gfni": "gfni",
    "sha": "sha_ni", "adx": "adx", "rdrnd": "rdrand", "rdseed": "rdseed",
}
_ISA_FLAGS = frozenset(_GCC_TO_CPUINFO.values())
_RANK = {f: i for i, f in enumerate(_GCC_TO_CPUINFO.values())}
_BASELINE = "x86-64-v3"     # what the error suggests: AVX2 + FMA, the GEMM's AVX2 micro-kernel


@dataclass(frozen=True)
class Bundle:
    """A compiled network as bytes: `files` (name -> bytes: module.json, the extension, params.params) and
    `manifest` (name, isa, target, the CPU flags the code may use, the build host). Plain data: it pickles,
    so it goes into Ray's object store (`map_batches`) or a Spark broadcast."""
    manifest: dict
    files: dict = field(repr=False)

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.files.values())


# -- the driver side: pack ------------------------------------------------------------------------------------
def pack(module) -> Bundle:
    """The Bundle of `module`: a Module (its bound params travel) or a directory written by `mxcc compile`
    (its params.params travels); a Bundle is returned as it is."""
    if isinstance(module, Bundle):
        return module
    if isinstance(module, Module):
        directory, meta = module.dir, module.meta
        if module._unbound:
            module._check_unbound()
        params = _params_bytes(module.get_params()) if module._params_meta else None
    else:
        directory = Path(module)
        meta = read_meta(directory)
        p = params_file(directory)
        params = p.read_bytes() if p is not None else None
        if params is None and any(s["kind"] in ("param", "aux") for s in meta["slots"]):
            raise ParamsError(f"{directory} has no {PARAMS_FILE}: compile it with params, or pack the Module "
                              f"after set_params")
    files = {MODULE_JSON: json.dumps(meta).encode(), meta["so"]: (Path(directory) / meta["so"]).read_bytes()}
    if params is not None:
        files[PARAMS_FILE] = params
    return Bundle(_manifest(directory, meta), files)


def _params_bytes(params: dict) -> bytes:
    with tempfile.TemporaryDirectory(prefix="mxcc-pack-") as d:
        save_params(Path(d) / PARAMS_FILE, params)
        return (Path(d) / PARAMS_FILE).read_bytes()


def _manifest(directory: Path, meta: dict) -> dict:
    isa = _isa_of(Path(directory), meta["name"])
    model, flags = _cpu()
    if isa == "native":                  # the build host is this one: the code may use any extension it has
        target, requires = target_cpu(CompileOptions.from_env().cc, "native"), _ranked(flags & _ISA_FLAGS)
    else:
        target, requires = isa, _gcc_march_flags(isa)
    return dict(format=FORMAT, name=meta["name"], isa=isa, target=target, requires=requires,
                build_host=dict(cpu=model, machine=platform.machine(), host=socket.gethostname()))


def _isa_of(directory: Path, name: str) -> str:
    """The -march of a build: the `options:` line the compiler writes at the top of `<net>.c` (in the output
    directory and in the cache entry alike); "native", the default and the strictest, if there is none."""
    try:
        with open(directory / f"{name}.c") as f:
            head = f.read(4096)
    except OSError:
        return "native"
    m = re.search(r"^ \* options:.*\bisa=(\S+)", head, re.M)
    return m.group(1) if m else "native"


def _gcc_march_flags(isa: str) -> list[str] | None:
    """The cpuinfo flags of the extensions `gcc -march=<isa>` enables; None if gcc cannot say (unchecked)."""
    try:
        out = subprocess.run([CompileOptions.from_env().cc, f"-march={isa}", "-Q", "--help=target"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode:
        return None
    on = re.findall(r"^\s+-m(\S+)\s+\[enabled\]", out.stdout, re.M)
    return _ranked({_GCC_TO_CPUINFO[m] for m in on if m in _GCC_TO_CPUINFO})


def _ranked(flags) -> list[str]:
    return sorted(flags, key=_RANK.__getitem__)


def _cpu(path: str = "/proc/cpuinfo") -> tuple[str, frozenset]:
    """(model name, flags) of this machine's first CPU; ("unknown", empty) where there is no /proc/cpuinfo."""
    fields = cpuinfo(path)
    if not fields:
        return "unknown", frozenset()
    return fields.get("model name") or platform.processor() or "unknown", frozenset(fields.get("flags", "").split())


# -- the worker side: check, unpack ---------------------------------------------------------------------------
def check_worker(bundle: Bundle, cpu: tuple[str, frozenset] | None = None) -> None:
    """Raise BuildError if this worker cannot run the bundle's code: a CPU without an extension the build's
    -march lets the code use (naming both CPUs and what is missing), another machine or another Python.
    `cpu`: (model name, cpuinfo flags), default this machine's."""
    man, meta = bundle.manifest, json.loads(bundle.files[MODULE_JSON])
    where = f"{man['name']!r} (compiled on {man['build_host']['host']}, {man['build_host']['cpu']})"
    if man["build_host"]["machine"] != platform.machine():
        raise BuildError(f"mxcc: cannot run {where} on {socket.gethostname()}: it was built for "
                         f"{man['build_host']['machine']}, this worker is {platform.machine()}")
    suffix = meta["so"][len(meta["module"]):]
    if suffix not in importlib.machinery.EXTENSION_SUFFIXES:
        raise BuildError(f"mxcc: cannot run {where} on {socket.gethostname()}: its extension {meta['so']} is "
                         f"for another Python than this worker's ({' '.join(importlib.machinery.EXTENSION_SUFFIXES)})")
    model, flags = cpu if cpu is not None else _cpu()
    if man["requires"] is None or not flags:
        return                          # the build's target could not be listed, or this CPU cannot be read
    missing = [f for f in man["requires"] if f not in flags]
    if missing:
        target = man["isa"] + (f" ({man['target']})" if man["target"] != man["isa"] else "")
        raise BuildError(
            f"mxcc: cannot run {where} on {socket.gethostname()}: it was compiled with -march={target}, whose "
            f"code may use {name_list(missing)}, which this worker's CPU ({model}) lacks. Compile it for an "
            f"ISA every worker has, e.g. mxcc.compile(..., isa=\"{_BASELINE}\") or `mxcc compile --isa "
            f"{_BASELINE}` (AVX2 + FMA)", expected=man["requires"], got=_ranked(flags & _ISA_FLAGS), names=missing)


def unpack(bundle: Bundle, threads: int | None = None) -> Module:
    """The bundle's network loaded in this process (after check_worker), from a private temporary directory
    that is gone again when this returns (the loaded extension stays mapped)."""
    check_worker(bundle)
    d = tempfile.mkdtemp(prefix="mxcc-worker-")        # mode 0700: this user's alone
    try:
        for name, data in bundle.files.items():
            (Path(d) / name).write_bytes(data)
        try:
            mod = load(d)
        except BuildError as e:
            lib = re.search(r"(\S+\.so[.\d]*): cannot open shared object file", str(e))
            if lib is None:
                raise
            raise BuildError(f"mxcc: {socket.gethostname()} lacks {lib.group(1)}, which the compiled network "
                             f"needs at run time (libgomp.so.1 is GCC's OpenMP runtime: package libgomp1 "
                             f"on Debian/Ubuntu, libgomp on Red Hat)") from None
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if threads:
        mod.set_num_threads(threads)
    return mod


# -- batches of any size on a fixed-batch module --------------------------------------------------------------
def batch_size(module: Module) -> int:
    """The compiled batch: the first axis every input and output shares (ShapeError if they do not)."""
    shapes = {**{f"input {n}": s for n, s in module.input_shapes.items()},
              **{f"output {n}": s for n, s in module.output_shapes.items()}}
    firsts = {s[0] if s else None for s in shapes.values()}
    if len(firsts) != 1 or None in firsts:
        raise ShapeError("mxcc.ray runs networks whose inputs and outputs all have the batch as their first "
                         "axis; this one has " + ", ".join(f"{k} {s}" for k, s in shapes.items()))
    return firsts.pop()


def run_rows(module: Module, inputs: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
    """The outputs (name -> (n, ...) array) of `n` rows of `inputs` (name -> (n, ...) array): chunks of the
    compiled batch, each row's outputs computed as in a plain loop over the same module."""
    b = batch_size(module)
    outs = {name: np.empty((n,) + tuple(s[1:]), np.float32) for name, s in module.output_shapes.items()}
    for start in range(0, n, b):
        stop = min(start + b, n)
        ys = module.forward(**{k: _padded(x[start:stop], b) for k, x in inputs.items()})
        for out, y in zip(outs.values(), ys):
            out[start:stop] = y[:stop - start]      # a padded chunk's extra rows are dropped here
    return outs


def _padded(x: np.ndarray, b: int) -> np.ndarray:
    """`x` grown to the compiled batch `b` with rows of zeros (their outputs are dropped). A dynamic-batch
    module would take `x` as it is: this is the one place that would change."""
    if len(x) == b:
        return x
    out = np.zeros((b,) + x.shape[1:], x.dtype)
    out[:len(x)] = x
    return out


# -- the worker ---------------------------------------------------------------------------------------------
class Predictor:
    """A network loaded once, mapping batches to batches: `predictor(batch) -> batch`, where a batch is a dict
    of numpy arrays with rows along the first axis (Ray Data's "numpy" batch format).

    `bundle`: a Bundle, a Ray ObjectRef of one (fetched here), a Module or a compiled directory.
    `input_name`: the column that feeds the network's one required input (default: the input's own name);
    a dict {network input: column} for several; each row is reshaped to the input's row shape when the sizes
    agree ((784,) rows feed (1, 28, 28)). The result holds the batch's other columns, then one column per graph
    output named as the output (with the input columns too if `keep_input`). Subclass it to post-process in
    the worker (`map_batches(..., predictor=MyPredictor)`), e.g. to return only the top class."""

    def __init__(self, bundle, input_name=None, threads: int | None = 1, keep_input: bool = False):
        if not isinstance(bundle, (Bundle, Module, str, os.PathLike)):
            import ray                      # an ObjectRef: the bundle in the object store
            bundle = ray.get(bundle)
        self.module = unpack(pack(bundle), threads=threads)
        self.batch = batch_size(self.module)
        need = [n for n, _, _, optional in self.module._inputs if not optional]
        if input_name is None or isinstance(input_name, str):
            if input_name is not None and len(need) != 1:
                raise ShapeError(f"input_name={input_name!r} names one column, but the network needs "
                                 f"{len(need)} inputs ({name_list(need)}): pass a dict {{input: column}}")
            input_name = {n: input_name or n for n in need}
        unknown = sorted(set(input_name) - set(self.module.input_shapes))
        if unknown:
            raise ShapeError(f"input_name names {name_list(unknown)}, which the network does not have (its "
                             f"inputs: {name_list(self.module.input_shapes)})", names=unknown)
        self.columns: dict[str, str] = dict(input_name)
        self.keep_input = keep_input

    def __call__(self, batch: dict) -> dict:
        n = len(next(iter(batch.values()))) if batch else 0
        xs = {name: self._rows(batch, name, col, n) for name, col in self.columns.items()}
        outs = run_rows(self.module, xs, n)
        drop = () if self.keep_input else set(self.columns.values())
        result = {k: v for k, v in batch.items() if k not in drop}
        clash = sorted(set(result) & set(outs))
        if clash:
            raise ShapeError(f"the batch already has column(s) {name_list(clash)}, which the network's outputs "
                             f"would overwrite: rename them first", names=clash)
        result.update(outs)
        return result

    def _rows(self, batch: dict, name: str, col: str, n: int) -> np.ndarray:
        if col not in batch:
            raise ShapeError(f"the batch has no column {col!r} for the network's input {name!r} (its columns: "
                             f"{name_list(batch)}); pass input_name=", input=name)
        x = batch[col]
        if isinstance(x, np.ndarray) and x.dtype == object:
            x = np.stack(list(x)) if n else x       # a column of per-row arrays (ragged, pandas)
        x = np.asarray(x)
        row = tuple(self.module.input_shapes[name][1:])
        if x.shape[1:] != row:
            if x.ndim == 0 or int(np.prod(x.shape[1:])) != int(np.prod(row)):
                raise ShapeError(f"column {col!r} has rows of shape {x.shape[1:]}, the network's input {name!r} "
                                 f"takes rows of {row}", input=name, expected=row, got=x.shape[1:])
            x = x.reshape((len(x),) + row)
        return x


# -- Ray Data -----------------------------------------------------------------------------------------------
def map_batches(ds, module, *, input_name=None, batch_size: int = 256, concurrency: int | tuple = 2,
                threads_per_actor: int = 1, keep_input: bool = False, preserve_order: bool = True,
                predictor: type = Predictor, **ray_remote_args):
    """`ds` (a ray.data.Dataset) through the network `module` (a Module, a directory written by `mxcc
    compile`, or a Bundle): a Dataset with the rows of `ds` in their order, their columns but the input's,
    and one column per graph output. `concurrency` actors (or a (min, max) pool that Ray sizes) of
    `threads_per_actor` CPUs (and OpenMP threads) each load the network once from the object store and run
    every batch of `batch_size` rows they get (best a multiple of the compiled batch: only a block's last
    batch is then padded). An actor that dies is restarted and its batch run again (Ray's defaults for
    actor pools). `preserve_order=False` lets Ray hand out results as they finish. `predictor`: a subclass
    of Predictor. Other keywords go to Ray's map_batches (runtime_env, memory, ...)."""
    try:
        import ray
    except ImportError:
        raise ImportError("mxcc.ray.map_batches needs Ray Data: pip install 'mxcc[ray]' "
                          "(or pip install 'ray[data]')") from None
    lo, hi = concurrency if isinstance(concurrency, tuple) else (concurrency, concurrency)
    ref = ray.put(pack(module))         # once: each actor (and each restart of one) gets it from the store
    out = ds.map_batches(predictor, fn_constructor_args=(ref, input_name, threads_per_actor, keep_input),
                         batch_size=batch_size, batch_format="numpy",
                         compute=ray.data.ActorPoolStrategy(min_size=lo, max_size=hi),
                         num_cpus=threads_per_actor, **ray_remote_args)
    if preserve_order:      # Ray's knob is the dataset's context: set it on a copy, not on the caller's `ds`
        out = ray.data.Dataset.copy(out, _deep_copy=True)
        out.context.execution_options.preserve_order = True
    return out
