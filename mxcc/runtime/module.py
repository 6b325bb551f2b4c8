"""Module: a built network loaded into this process, with its contexts and bound parameters.

Checks shapes and dtypes at the boundary, binds numpy arrays by pointer (C-contiguous float32 inputs are
not copied), allocates the outputs the C code writes into, and keeps parameter arrays alive while bound.

Threads. One Module may be called from any number of Python threads at once (cffi releases the GIL during
the C call). Each call runs on a context of its own: an arena, a slot table, per-thread kernel buffers and
output arrays per context, while the bound parameters and everything derived from them at bind time (packed
weights, folded BatchNorm: ctx->derived) exist once, shared read-only by every context
(`<net>_ctx_create_shared`). A call takes the first context if it is free (one lock, tried without waiting),
else one of the others from a pool that grows to the most calls that ever ran at once: N concurrent calls
really run in parallel and cost N arenas, not N copies of the weights.
`set_params` and `set_num_threads` wait for running calls and hold new ones back while they change what the
contexts share. While mxcc.profiler records, calls run one at a time on the first context (the one it reads).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

import numpy as np

from mxcc.compiler.artifacts import params_file, read_meta
from mxcc.profiler import api as profiler
from mxcc.errors import ParamsError, ShapeError, name_list
from mxcc.params import load_params, split_arg_aux
from mxcc.passes.infer_batch import BatchAxis, format_shape
from mxcc.perf.stacks import prof_event_dtype
from mxcc.runtime.extension import load_extension

_F32 = np.dtype(np.float32)
_EXACT_INT = 1 << 24              # integers up to this magnitude are exact in float32


_refcount = sys.getrefcount


def _count(entry: list) -> int:
    """sys.getrefcount of entry[0]: the references to it, counted as this function sees them."""
    held = entry[0]
    return _refcount(held)


# What _count says of an array nothing else refers to (only its entry list): measured through the same function
# rather than assumed, because CPython versions count a function's own references differently (3.14 borrows
# some). An array whose count is higher is referenced by someone else: a caller's variable, a list, a view.
_ALONE = _count([np.empty(1, _F32)])


class _Output:
    """One output of one context: up to two arrays the C code writes into, each written only while nothing
    but this object refers to it.

    An array handed to a caller, or any view, memoryview or container of it, holds a reference to it: while
    one exists the array is never written again (`_count` sees more than `_ALONE`). Only this context's calls
    read these entries, and one call runs on a context at a time, so no other thread can take a reference
    between the check and the write. When both arrays are held, a new one takes the place of the older (which
    the caller's references keep alive). So `y = m.forward(...)` in a loop, which holds the last result while
    it makes the next, alternates two arrays and allocates nothing."""

    __slots__ = ("index", "shape", "bufs", "bound")

    def __init__(self, index: int, shape: tuple):
        self.index, self.shape = index, shape
        self.bufs: list[list] = []      # [array, its C pointer]
        self.bound = None               # the entry the slot points at

    def hand_out(self, ffi, slots, shape: tuple | None = None) -> np.ndarray:
        """An array of `shape` (default: the compiled one; a dynamic batch's output changes with the call's)."""
        shape = self.shape if shape is None else shape
        for b in self.bufs:
            if _count(b) == _ALONE and b[0].shape == shape:
                break
        else:
            arr = np.empty(shape, _F32)
            # a plain pointer (cast): from_buffer's cdata would hold a reference to the array and skew its count
            b = [arr, ffi.cast("float *", ffi.from_buffer(arr))]
            if len(self.bufs) == 2:
                self.bufs.pop(0)
            self.bufs.append(b)
        if b is not self.bound:
            self.bound = b
            slots[self.index] = b[1]
        return b[0]


class _Context:
    """A C context of the module and what its slots point at; one call runs on it at a time."""

    __slots__ = ("ptr", "slots", "bound", "outs", "__weakref__")

    def __init__(self, ptr, slots, n_inputs: int, outputs):
        self.ptr, self.slots = ptr, slots
        self.bound = [None] * n_inputs        # the array each input slot points into (held: its memory stays put)
        self.outs = [_Output(index, shape) for index, shape in outputs]


class Module:
    """A compiled network: `forward(**inputs) -> list[np.ndarray]`, params, shapes."""

    def __init__(self, directory, meta: dict, threads: int | None = None):
        self.dir = Path(directory)
        self.meta = meta
        self.name = meta["name"]
        self.cached = None
        ext = load_extension(meta["module"], self.dir / meta["so"])
        self._ffi, self._lib = ext.ffi, ext.lib
        self._ctx_create_shared = getattr(self._lib, f"{self.name}_ctx_create_shared")
        self._ctx_free = getattr(self._lib, f"{self.name}_ctx_free")
        self._reserve_threads = getattr(self._lib, f"{self.name}_ctx_reserve_threads")
        self._forward = getattr(self._lib, f"{self.name}_forward")
        self._prepare = getattr(self._lib, f"{self.name}_prepare")
        slots = meta["slots"]
        self._inputs = [(s["name"], s["index"], tuple(s["shape"]), s["optional"]) for s in slots
                        if s["kind"] == "input"]
        self._input_names = {s[0] for s in self._inputs}
        self._params_meta = {s["name"]: s for s in slots if s["kind"] in ("param", "aux")}
        self._outputs = [(s["name"], s["index"], tuple(s["shape"])) for s in slots if s["kind"] == "output"]
        # a dynamic batch (compiled with dynamic_batch): the maximum, and per input/output slot the axis that
        # holds the batch and how many rows per sample (None: the same for every batch)
        batch = meta.get("batch")
        self.max_batch = batch["maximum"] if batch else None
        self._batch_of = {s["index"]: (s["batch"]["axis"], s["batch"].get("factor", 1))
                          for s in slots if batch and s.get("batch") and "axis" in s["batch"]}
        self._set_batch = getattr(self._lib, f"{self.name}_set_batch", None)
        self._params: dict[str, np.ndarray] = {}
        self._unbound = list(self._params_meta)       # in the network's order
        self._threads = threads
        # the first context: it owns ctx->derived (the others share it) and is the one the profiler reads
        err = self._ffi.new("char[256]")
        ctx = getattr(self._lib, f"{self.name}_ctx_create")(err, 256)
        if ctx == self._ffi.NULL:
            raise MemoryError(self._ffi.string(err).decode())
        self._ctx = self._ffi.gc(ctx, self._ctx_free)
        self._primary = _Context(self._ctx, self._lib.mxcc_ctx_slots(self._ctx), len(self._inputs),
                                 [(i, s) for _, i, s in self._outputs])
        self._slots = self._primary.slots
        self._contexts = [self._primary]      # every context; the secondaries hold a reference to the primary
        self._free: list[_Context] = []       # the other contexts no call is running on
        self._pool_lock = threading.Lock()   # guards _free, _busy, _writers, _contexts
        self._pool = threading.Condition(self._pool_lock)   # waits on it: writers for calls, calls for writers
        self._busy = 0                        # calls running on the other contexts
        self._writers = 0                     # set_params / set_num_threads waiting or running
        self._write_lock = threading.Lock()
        self._primary_lock = threading.Lock()  # held while anything runs on, or reads, the primary context
        self._prof_capacity = 0
        self._prof_lock = None      # set by mxcc.profiler while this module records events (= _primary_lock)
        if threads:
            self.set_num_threads(threads)
        if not self._params_meta:
            self._prepare(self._ctx)    # nothing to bind: the folded constants (an _arange...) are ready now
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

    # -- contexts ----------------------------------------------------------------------------------------
    def _new_context(self) -> _Context:
        """A context sharing the primary's bind-time buffers, with the bound params in its slots."""
        err = self._ffi.new("char[256]")
        ptr = self._ctx_create_shared(self._ctx, err, 256)
        if ptr == self._ffi.NULL:
            raise MemoryError(self._ffi.string(err).decode())
        primary = self._ctx
        ptr = self._ffi.gc(ptr, lambda p, _keep=primary: self._ctx_free(p))  # the primary outlives it
        if self._threads and self._reserve_threads(ptr, int(self._threads)):
            raise MemoryError(f"mxcc: out of memory making room for {self._threads} threads")
        c = _Context(ptr, self._lib.mxcc_ctx_slots(ptr), len(self._inputs), [(i, s) for _, i, s in self._outputs])
        for name, arr in self._params.items():
            c.slots[self._params_meta[name]["index"]] = self._ffi.cast("void *", _ptr(arr))
        return c

    def _checkout(self) -> _Context:
        with self._pool_lock:               # the fast path: a C lock, no Condition method calls
            if not self._writers and self._free:
                self._busy += 1
                return self._free.pop()
        with self._pool:
            while self._writers:
                self._pool.wait()
            self._busy += 1
            c = self._free.pop() if self._free else None
        if c is None:
            try:
                c = self._new_context()
            except BaseException:
                self._checkin(None)
                raise
            with self._pool:
                self._contexts.append(c)
        return c

    def _checkin(self, c: _Context | None) -> None:
        with self._pool_lock:
            if c is not None:
                self._free.append(c)
            self._busy -= 1
            if self._writers and not self._busy:
                self._pool.notify_all()

    @contextlib.contextmanager
    def _exclusive(self):
        """No call runs while the block does, and none starts (set_params, set_num_threads): calls that
        arrive while _writers is set wait in _checkout; the first context is taken by holding its lock."""
        with self._write_lock:
            with self._pool:
                self._writers += 1
                while self._busy:
                    self._pool.wait()
            try:
                with self._primary_lock:
                    yield
            finally:
                with self._pool:
                    self._writers -= 1
                    self._pool.notify_all()     # the calls that waited

    # -- params ------------------------------------------------------------------------------------------
    def set_params(self, params, *, allow_missing: bool = False, allow_extra: bool = False) -> None:
        """Bind parameters (dict of arrays, `arg:`/`aux:` prefixes allowed, or a .params/.npz path).

        Every array is checked by name and shape and stored as a C-contiguous float32 copy owned here.
        Waits for calls running in other threads; calls made meanwhile start after it."""
        if isinstance(params, (str, os.PathLike)):
            params = load_params(params)
        if not hasattr(params, "items"):
            raise ParamsError(f"params must be a dict of arrays or a .params/.npz path, got {type(params).__name__}")
        arg, aux = split_arg_aux(dict(params))
        merged = {**arg, **aux}
        extra = sorted(set(merged) - set(self._params_meta) - self._input_names)
        if extra and not allow_extra:
            raise ParamsError(f"{len(extra)} unexpected params: {name_list(extra)} (the network's params are "
                              f"{name_list(sorted(self._params_meta))}); pass allow_extra=True to ignore them",
                              got=extra, names=extra)
        missing = sorted(set(self._params_meta) - set(merged) - set(self._params))
        if missing and not allow_missing:
            raise ParamsError(f"{len(missing)} params missing: " + name_list(
                [f"{m} {tuple(self._params_meta[m]['shape'])}" for m in missing]), expected=missing, names=missing)
        staged = {}
        for name, value in merged.items():
            if name not in self._params_meta:
                continue
            want = tuple(self._params_meta[name]["shape"])
            arr = np.asarray(value)
            if arr.shape != want:
                raise ParamsError(f"param {name!r} has shape {arr.shape}, expected {want}", input=name,
                                  expected=want, got=arr.shape)
            if arr.dtype.kind not in "fiub":
                raise ParamsError(f"param {name!r} has dtype {arr.dtype}, expected float32", input=name)
            staged[name] = np.array(arr, dtype=np.float32, order="C", copy=True)
        with self._exclusive():
            for name, arr in staged.items():
                self._params[name] = arr
                ptr = self._ffi.cast("void *", _ptr(arr))
                for c in self._contexts:
                    c.slots[self._params_meta[name]["index"]] = ptr
            self._unbound = [n for n in self._params_meta if n not in self._params]
            if not self._unbound:
                self._prepare(self._ctx)        # values derived from the params (shared by every context)

    def get_params(self) -> dict[str, np.ndarray]:
        """Copies of the bound params, keyed `arg:<name>` / `aux:<name>` as MXNet's checkpoints are."""
        return {f"{'aux' if self._params_meta[n]['kind'] == 'aux' else 'arg'}:{n}": a.copy()
                for n, a in self._params.items()}

    # -- running -----------------------------------------------------------------------------------------
    def set_num_threads(self, n: int) -> None:
        """OpenMP threads for every module of this process (OpenMP's count is per process). The contexts'
        per-thread buffers grow to match, so the parallel kernels never fall back to one thread."""
        if int(n) <= 0:
            raise ValueError(f"set_num_threads: need a positive thread count, got {n}")
        with self._exclusive():
            for c in self._contexts:
                if self._reserve_threads(c.ptr, int(n)):
                    raise MemoryError(f"mxcc: out of memory making room for {n} threads")
            self._threads = n
            self._lib.mxcc_set_num_threads(int(n))

    def _check_unbound(self) -> None:
        if self._unbound:
            raise ParamsError(f"{len(self._unbound)} params not bound: {name_list(self._unbound)} (use set_params)",
                              expected=list(self._unbound), names=self._unbound)

    def forward(self, **inputs) -> list[np.ndarray]:
        """Run the network; one array per graph output, which nothing else will write. Labels of loss heads
        are optional. Safe to call from several threads at once (see the module's docstring).

        C-contiguous float32 arrays are bound by pointer (`ffi.from_buffer`), once for an array passed again
        (the context holds the last one, so its memory stays put); integer arrays (indices, labels) are
        converted. An output's memory is written again only once no array on it is left (see _Output)."""
        if self._unbound:
            self._check_unbound()
        if not inputs.keys() <= self._input_names:
            self._unknown_inputs(inputs)
        lock = self._prof_lock
        if lock is not None:                # profiling: one call at a time, on the context the profiler reads
            with lock:
                return self._run(self._primary, inputs)
        lock = self._primary_lock
        if not self._writers and lock.acquire(False):   # the usual case: the first context is free
            try:
                return self._run(self._primary, inputs)
            finally:
                lock.release()
        c = self._checkout()                # another call runs on it: one of the others
        try:
            return self._run(c, inputs)
        finally:
            self._checkin(c)

    def batch_of(self, inputs: dict) -> int | None:
        """The batch of a call with these inputs (a dynamic batch): the same on every input that carries it,
        1..max_batch; ShapeError naming the input otherwise. None for a module compiled for one batch."""
        if self.max_batch is None:
            return None
        n = first = None
        for name, index, shape, _ in self._inputs:
            b = self._batch_of.get(index)
            arr = inputs.get(name)
            if b is None or arr is None:
                continue
            got = np.shape(arr)
            if len(got) != len(shape):
                raise ShapeError(f"input {name!r} has shape {got}, expected {format_shape(shape, BatchAxis(*b))} "
                                 f"(N: the batch, 1..{self.max_batch})", input=name, expected=shape, got=got)
            k = got[b[0]]
            if n is None:
                n, first = k, name
            elif k != n:
                raise ShapeError(f"input {name!r} has batch {k} but {first!r} has {n}: every input of a call has the "
                                 f"same batch", input=name, expected=n, got=k)
        if n is None:
            return self.max_batch
        if not 1 <= n <= self.max_batch:
            raise ShapeError(f"input {first!r} has batch {n}, outside 1..{self.max_batch}: the module was compiled "
                             f"for a batch of at most {self.max_batch} (its shape "
                             f"{format_shape(self.input_shapes[first], BatchAxis(*self._batch_of[self._index_of(first)]))})",
                             input=first, expected=self.max_batch, got=n)
        return n

    def _index_of(self, name: str) -> int:
        return next(i for n, i, *_ in self._inputs if n == name)

    def _shape_at(self, index: int, shape: tuple, n: int | None) -> tuple:
        b = self._batch_of.get(index) if n is not None else None
        if b is None:
            return shape
        axis, factor = b
        return tuple(factor * n if i == axis else d for i, d in enumerate(shape))

    def _run(self, c: _Context, inputs: dict) -> list[np.ndarray]:
        slots, bound = c.slots, c.bound
        n = self.batch_of(inputs) if self._batch_of else None
        if n is not None:
            self._set_batch(c.ptr, n)
        for i, (name, index, shape, optional) in enumerate(self._inputs):
            arr = inputs.get(name)
            if arr is None:
                if not optional:
                    raise ShapeError(f"missing input {name!r} of shape {shape}", input=name, expected=shape)
                slots[index] = self._ffi.NULL
                bound[i] = None
                continue
            if type(arr) is not np.ndarray or (arr.dtype is not _F32 and arr.dtype != _F32) \
                    or not arr.flags.c_contiguous:
                arr = self._coerce(name, arr)
            if n is not None:
                shape = self._shape_at(index, shape, n)
            if arr.shape != shape:
                raise ShapeError(f"input {name!r} has shape {arr.shape}, expected {shape}", input=name,
                                 expected=shape, got=arr.shape)
            if arr is not bound[i]:     # the same array again (a buffer refilled in place): already bound
                bound[i] = arr          # held, so its memory (and the pointer) stays valid
                slots[index] = self._ffi.from_buffer(arr)
        outs = []
        for o in c.outs:
            b = o.bound                 # the array the slot points at, when nothing else holds it: write it again
            if n is not None and o.index in self._batch_of:
                shape = self._shape_at(o.index, o.shape, n)
                outs.append(b[0] if b is not None and _count(b) == _ALONE and b[0].shape == shape
                            else o.hand_out(self._ffi, slots, shape))
                continue
            outs.append(b[0] if b is not None and _count(b) == _ALONE else o.hand_out(self._ffi, slots))
        self._forward(c.ptr)
        return outs

    def _unknown_inputs(self, inputs: dict):
        unknown = sorted(set(inputs) - self._input_names)
        raise ShapeError(f"unknown input(s) {name_list(map(repr, unknown))}; the network's inputs are "
                         f"{name_list(n for n, *_ in self._inputs)}", input=unknown[0] if unknown else None,
                         expected=[n for n, *_ in self._inputs], got=unknown, names=unknown)

    def _call(self, entry) -> None:
        """Run a C entry point (`_forward`, `_backward`, ...) on the primary context, which the caller holds
        (Executor: under _primary_lock, which is also the profiler's lock)."""
        entry(self._ctx)

    @staticmethod
    def _coerce(name: str, arr) -> np.ndarray:
        """An input as a C-contiguous float32 array: float32 data is copied only if it is not contiguous;
        integers and booleans (indices, labels) are converted when float32 holds them exactly."""
        try:
            a = np.asarray(arr)
        except (TypeError, ValueError) as e:
            raise ShapeError(f"input {name!r} is not an array: {e}", input=name, expected="float32") from None
        if a.dtype.kind in "iub":
            if a.size and a.dtype.kind != "b" and np.abs(a).max(initial=0) >= _EXACT_INT:
                raise ShapeError(f"input {name!r} has integers up to {np.abs(a).max()}, which float32 cannot hold "
                                 f"exactly (the network computes in float32)", input=name, expected="float32",
                                 got=str(a.dtype))
            return np.ascontiguousarray(a, dtype=_F32)
        if a.dtype != _F32:
            raise ShapeError(f"input {name!r} has dtype {a.dtype}, expected float32 "
                             f"(convert with .astype(np.float32))", input=name, expected="float32", got=str(a.dtype))
        return np.ascontiguousarray(a)

    # -- profiler hooks (mxcc.profiler drives these) --------------------------------------------------------
    PROF_DTYPE = prof_event_dtype()   # runtime_c/prof.h's mxcc_prof_event

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
    """Load a module written by `mxcc compile -o DIR` / `mxcc.compile(..., out_dir=DIR)`, with its params."""
    mod = Module(directory, read_meta(directory))
    params = params_file(directory)
    if params is not None:
        mod.set_params(params)
    return mod


def _ptr(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]

