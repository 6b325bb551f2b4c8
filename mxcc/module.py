"""Module: a built network loaded into this process, with its own context and bound parameters.

Checks shapes and dtypes at the boundary, binds numpy arrays by pointer (C-contiguous float32 inputs are
not copied), allocates the outputs the C code writes into, and keeps parameter arrays alive while bound.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np

from mxcc import profiler
from mxcc.errors import ParamsError, ShapeError

_F32 = np.dtype(np.float32)


def _import_extension(name: str, path: Path):
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    sys.modules[name] = mod
    return mod


_refcount = sys.getrefcount


def _ptr(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


class Module:
    """A compiled network: `forward(**inputs) -> list[np.ndarray]`, params, shapes."""

    def __init__(self, directory, meta: dict, threads: int | None = None):
        self.dir = Path(directory)
        self.meta = meta
        self.name = meta["name"]
        self.cached = None
        ext = _import_extension(meta["module"], self.dir / meta["so"])
        self._ffi, self._lib = ext.ffi, ext.lib
        err = self._ffi.new("char[256]")
        ctx = getattr(self._lib, f"{self.name}_ctx_create")(err, 256)
        if ctx == self._ffi.NULL:
            raise MemoryError(self._ffi.string(err).decode())
        self._ctx = self._ffi.gc(ctx, getattr(self._lib, f"{self.name}_ctx_free"))
        self._reserve_threads = getattr(self._lib, f"{self.name}_ctx_reserve_threads")
        self._forward = getattr(self._lib, f"{self.name}_forward")
        self._prepare = getattr(self._lib, f"{self.name}_prepare")
        self._slots = self._lib.mxcc_ctx_slots(self._ctx)
        slots = meta["slots"]
        self._inputs = [(s["name"], s["index"], tuple(s["shape"]), s["optional"]) for s in slots
                        if s["kind"] == "input"]
        self._input_names = {s[0] for s in self._inputs}
        self._params_meta = {s["name"]: s for s in slots if s["kind"] in ("param", "aux")}
        self._outputs = [(s["name"], s["index"], tuple(s["shape"])) for s in slots if s["kind"] == "output"]
        self._out_slots = [(index, shape) for _, index, shape in self._outputs]
        # per output: [array C writes, its pointer, the array before it, that one's pointer, slot, shape]; see forward()
        self._out_cache = [[None, None, None, None, index, shape] for index, shape in self._out_slots]
        self._in_bound = [None] * len(self._inputs)     # the array each input slot points into
        self._params: dict[str, np.ndarray] = {}
        self._unbound = sorted(self._params_meta)
        self._threads = threads
        self._prof_capacity = 0
        self._prof_lock = None      # set by mxcc.profiler while this module records events
        if threads:
            self.set_num_threads(threads)
        profiler._register(self)

    # -- shapes ------------------------------------------------------------------------------------------
    @property
    def input_shapes(self) -> dict[str, tuple]:
        return {n: s for n, _, s, _ in self._inputs}

    @property
    def output_shapes(self) -> dict[str, tuple]:
        return {n: s for n, _, s in self._outputs}

    @property
    def param_shapes(self) -> dict[str, tuple]:
        return {n: tuple(s["shape"]) for n, s in self._params_meta.items()}

    # -- params ------------------------------------------------------------------------------------------
    def set_params(self, params, *, allow_missing: bool = False, allow_extra: bool = False) -> None:
        """Bind parameters (dict of arrays, `arg:`/`aux:` prefixes allowed, or a .params/.npz path).

        Every array is checked by name and shape and stored as a C-contiguous float32 copy owned here.
        """
        from mxcc.params import load_params, split_arg_aux
        if isinstance(params, (str, os.PathLike)):
            params = load_params(params)
        arg, aux = split_arg_aux(dict(params))
        merged = {**arg, **aux}
        extra = sorted(set(merged) - set(self._params_meta) - self._input_names)
        if extra and not allow_extra:
            raise ParamsError(f"unexpected params {extra} (the network's params are "
                              f"{sorted(self._params_meta)}); pass allow_extra=True to ignore them")
        missing = sorted(set(self._params_meta) - set(merged) - set(self._params))
        if missing and not allow_missing:
            raise ParamsError("missing params: " + ", ".join(
                f"{m} {tuple(self._params_meta[m]['shape'])}" for m in missing))
        staged = {}
        for name, value in merged.items():
            if name not in self._params_meta:
                continue
            want = tuple(self._params_meta[name]["shape"])
            arr = np.asarray(value)
            if arr.shape != want:
                raise ParamsError(f"param {name!r} has shape {arr.shape}, expected {want}", input=name,
                                  expected=want, got=arr.shape)
            if arr.dtype.kind not in "fiu":
                raise ParamsError(f"param {name!r} has dtype {arr.dtype}, expected float32", input=name)
            staged[name] = np.array(arr, dtype=np.float32, order="C", copy=True)
        for name, arr in staged.items():
            self._params[name] = arr
            self._slots[self._params_meta[name]["index"]] = self._ffi.cast("void *", _ptr(arr))
        self._unbound = sorted(set(self._params_meta) - set(self._params))
        if not self._unbound:
            self._prepare(self._ctx)        # values derived from the params (folded BatchNorm)

    def get_params(self) -> dict[str, np.ndarray]:
        """Copies of the bound params, keyed `arg:<name>` / `aux:<name>` as MXNet's checkpoints are."""
        return {f"{'aux' if self._params_meta[n]['kind'] == 'aux' else 'arg'}:{n}": a.copy()
                for n, a in self._params.items()}

    # -- running -----------------------------------------------------------------------------------------
    def set_num_threads(self, n: int) -> None:
        """OpenMP threads for every module of this process (OpenMP's count is per process). The context's
        per-thread buffers grow to match, so the parallel kernels never fall back to one thread."""
        if int(n) <= 0:
            raise ValueError(f"set_num_threads: need a positive thread count, got {n}")
        if self._reserve_threads(self._ctx, int(n)):
            raise MemoryError(f"mxcc: out of memory making room for {n} threads")
        self._threads = n
        self._lib.mxcc_set_num_threads(int(n))

    def forward(self, **inputs) -> list[np.ndarray]:
        """Run the network; one array per graph output that nobody else holds. Labels of loss heads are optional.

        The hot path (batch-1 MLP: ~1 us of Python around the C call): C-contiguous float32 arrays are bound by
        pointer (`ffi.from_buffer`, ~0.3 us; numpy's __array_interface__ costs 1.3 us), once for an array passed
        again (the module holds the last one, so its memory stays put). An output array of the
        previous call that the caller has dropped (no reference left but this module's) is written again
        instead of allocating and binding a new one (np.empty + from_buffer, ~0.5 us); one still referenced
        anywhere (a variable, a list, a view of it) is never touched. In a loop `y = m.forward(...)` the caller
        holds the previous result during the call but has dropped the one before it: that one (kept with its
        pointer) is written again, so the loop alternates between two arrays and allocates nothing. When both
        are held, a fresh array takes the place of the older."""
        if self._unbound:
            raise ParamsError("params not bound: " + ", ".join(self._unbound) + " (use set_params)")
        slots, from_buffer = self._slots, self._ffi.from_buffer
        seen = 0
        bound = self._in_bound
        for i, (name, index, shape, optional) in enumerate(self._inputs):
            arr = inputs.get(name)
            if arr is None:
                if not optional:
                    raise ShapeError(f"missing input {name!r} of shape {shape}", input=name)
                slots[index] = self._ffi.NULL
                bound[i] = None
                continue
            seen += 1
            if type(arr) is not np.ndarray or (arr.dtype is not _F32 and arr.dtype != _F32) \
                    or not arr.flags.c_contiguous:
                arr = self._coerce(name, arr)
            if arr.shape != shape:
                raise ShapeError(f"input {name!r} has shape {arr.shape}, expected {shape}", input=name,
                                 expected=shape, got=arr.shape)
            if arr is not bound[i]:     # the same array again (a buffer refilled in place): already bound
                bound[i] = arr          # held, so its memory (and the pointer) stays valid
                slots[index] = from_buffer(arr)
        if seen != len(inputs):
            unknown = sorted(set(inputs) - self._input_names)
            raise ShapeError(f"unknown input(s) {unknown}; the network's inputs are "
                             f"{[n for n, *_ in self._inputs]}", input=unknown[0] if unknown else None)
        outs, cast = [], self._ffi.cast
        for entry in self._out_cache:
            o = entry[0]
            # 3 references: the cache entry, `o`, getrefcount's argument. More: the caller still has it.
            if o is None or _refcount(o) > 3:
                s = entry[2]
                if s is not None and _refcount(s) <= 3:     # the result before the last one was dropped
                    entry[0], entry[1], entry[2], entry[3] = s, entry[3], o, entry[1]
                else:
                    s = np.empty(entry[5], _F32)
                    # a plain pointer (cast): from_buffer's cdata would hold a reference to `s` and skew the counts
                    entry[0], entry[1], entry[2], entry[3] = s, cast("float *", from_buffer(s)), o, entry[1]
                slots[entry[4]] = entry[1]
                o = s
            outs.append(o)
        lock = self._prof_lock
        if lock is None:
            self._forward(self._ctx)
        else:
            with lock:              # the profiler drains the event buffer between calls, never during one
                self._forward(self._ctx)
        return outs

    def _call(self, entry) -> None:
        """Run a C entry point (`_forward`, `_backward`, ...) on this context, under the profiler's lock
        while profiling (see Module.forward)."""
        lock = self._prof_lock
        if lock is None:
            entry(self._ctx)
        else:
            with lock:
                entry(self._ctx)

    @staticmethod
    def _coerce(name: str, arr) -> np.ndarray:
        a = np.asarray(arr)
        if a.dtype != _F32:
            raise ShapeError(f"input {name!r} has dtype {a.dtype}, expected float32 "
                             f"(convert with .astype(np.float32))", input=name, expected="float32", got=str(a.dtype))
        return np.ascontiguousarray(a)

    # -- profiler hooks (mxcc.profiler drives these) --------------------------------------------------------
    PROF_DTYPE = np.dtype([("kernel", "<i4"), ("phase", "<i4"), ("t0_ns", "<u8"), ("t1_ns", "<u8")])

    @property
    def kernels(self) -> list[dict]:
        """Per kernel (index = the event's `kernel`): name, C function, member nodes, ops, shapes, FLOPs."""
        return self.meta.get("kernels", [])

    def _prof_enable(self, on: bool, capacity: int = 1 << 16) -> None:
        if on and self._prof_capacity < capacity:
            if self._lib.mxcc_prof_set_capacity(self._ctx, capacity) != 0:
                raise MemoryError(f"cannot allocate a profiler buffer of {capacity} events")
            self._prof_capacity = capacity
        self._lib.mxcc_prof_set_enabled(self._ctx, 1 if on else 0)

    def _prof_drain(self) -> np.ndarray:
        """The recorded events (structured array, PROF_DTYPE), removed from the C buffer."""
        out = np.empty(max(self._prof_capacity, 1), self.PROF_DTYPE)
        n = self._lib.mxcc_prof_drain(self._ctx, self._ffi.from_buffer("mxcc_prof_event[]", out), len(out))
        return out[:n]

    def _prof_dropped(self) -> int:
        return int(self._lib.mxcc_prof_dropped(self._ctx))

    def _prof_now_ns(self) -> int:
        return int(self._lib.mxcc_prof_now_ns())

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}={s}" for n, s in self.input_shapes.items())
        return f"<mxcc.{type(self).__name__} {self.name}({ins}) -> {list(self.output_shapes.values())}>"


def load(directory) -> Module:
    """Load a module written by `mxcc compile -o DIR` / `mxcc.compile(..., out_dir=DIR)`."""
    from mxcc.compiler import PARAMS_FILE
    from mxcc.errors import BuildError
    d = Path(directory)
    try:
        meta = json.loads((d / "module.json").read_text())
    except FileNotFoundError:
        raise BuildError(f"{d} is not a compiled mxcc module (no module.json); create it with `mxcc compile`") from None
    mod = Module(d, meta)
    if (d / PARAMS_FILE).exists():
        mod.set_params(d / PARAMS_FILE)
    return mod
