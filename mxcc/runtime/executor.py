"""Executor: a network compiled for training (MXNet's Executor API on compiled C).

`forward(is_train=True, **inputs)`, `backward(out_grads=None)`, `update()` and `step(**inputs)` (all three in
one C call) run the generated `<net>_forward/_backward/_update/_step`; `forward(is_train=False)` runs
`<net>_forward_infer`, the inference forward (moving statistics, no dropout) compiled into the same context
from the same graph, reading the same parameter and aux arrays (see compiler._inference_variant), and a
backward() after it runs `<net>_backward_infer`, the gradient of that inference function, as MXNet's backward
differentiates what the last forward computed. Gradients follow MXNet's grad_req (compiler.grad_reqs):
'write' overwrites `grad_dict[name]`, 'add' adds to it, 'null' has none. An Executor has one context, and
its calls from several threads run one at a time (they share its arrays, as MXNet's executor's NDArrays).
BatchNorm's moving statistics are updated in place by `backward()`, as MXNet does: `aux_dict` shows them.
Training Dropout draws from a counter-based RNG in the context: `set_seed(s)` makes the masks reproducible. Parameters, gradients, aux states and
optimizer states are numpy arrays the C code reads and writes in place: `arg_dict`, `grad_dict`, `aux_dict`
are views of them, as MXNet's NDArrays are. Outputs are persistent arrays (`outputs`), rewritten by each
forward. The optimizer's hyper-parameters for each update (learning-rate schedule, Adam's bias correction)
come from `optimizer.step_hyper(num_update)` and are copied into the context before the C update runs, in
the order of the optimizer's table entry (mxcc/train/optimizer.py's UPDATES), the one the C was compiled with.
"""
from __future__ import annotations

import numpy as np

from mxcc.errors import ShapeError, name_list
from mxcc.runtime.module import _F32, Module
from mxcc.train.optimizer import update_def


class Executor(Module):
    def __init__(self, directory, meta: dict, threads: int | None = None, optimizer=None):
        super().__init__(directory, meta, threads=threads)
        self.optimizer = optimizer
        self.num_update = 0
        lib = self._lib
        self._forward_infer = getattr(lib, f"{self.name}_forward_infer")
        self._backward = getattr(lib, f"{self.name}_backward")
        self._backward_infer = getattr(lib, f"{self.name}_backward_infer")
        self._last_forward = None       # the C backward that differentiates the last forward
        self._update = getattr(lib, f"{self.name}_update")
        self._step = getattr(lib, f"{self.name}_step")
        self._hyper = lib.mxcc_ctx_hyper(self._ctx)
        self._update_def = update_def(optimizer.kind) if optimizer is not None else None   # ctx->hyper's layout
        slots = meta["slots"]
        # persistent host arrays bound once: outputs, gradients, optimizer states (zero-initialised)
        self.outputs = [self._bind_new(s) for s in slots if s["kind"] == "output"]
        self.grad_dict = {s["name"]: self._bind_new(s) for s in slots if s["kind"] == "grad"}
        self.state_dict = {s["name"]: self._bind_new(s) for s in slots if s["kind"] == "state"}
        # grad_req 'add': the backward computes into these, then adds them to grad_dict's arrays
        self._fresh_grads = {s["name"]: self._bind_new(s) for s in slots if s["kind"] == "grad_fresh"}
        # the outputs <net>_backward_infer recomputes (self.outputs keep the inference forward's)
        self._recomputed = [self._bind_new(s) for s in slots if s["kind"] == "recomputed_output"]
        self._head_grads = [s for s in slots if s["kind"] == "head_grad"]    # in output order
        self._data_inputs = self._inputs
        self._bound_inputs: dict[str, np.ndarray] = {}
        # a dynamic batch: the arrays above are sized for the maximum; a call of batch n reads and writes the
        # first n samples, so outputs and batch-dependent gradients are handed out as views at n
        self._full = {"outputs": self.outputs, "grads": dict(self.grad_dict)}
        self._slot_of = {s["name"]: s["index"] for s in slots if s["kind"] in ("output", "grad")}
        self._outputs_index = [s["index"] for s in slots if s["kind"] == "output"]
        self.batch = self.max_batch

    def _at_batch(self, arr: np.ndarray, index: int, n: int) -> np.ndarray:
        """The first n samples of a slot's array sized for the maximum: a view with the shape at batch n."""
        shape = self._shape_at(index, arr.shape, n)
        return arr.reshape(-1)[:int(np.prod(shape))].reshape(shape)

    def _use_batch(self, n: int) -> None:
        if n == self.batch:
            return
        self._set_batch(self._ctx, n)
        self.batch = n
        self.outputs = [self._at_batch(a, i, n) if i in self._batch_of else a
                        for a, i in zip(self._full["outputs"], self._outputs_index)]
        for name, a in self._full["grads"].items():
            i = self._slot_of[name]
            if i in self._batch_of:
                self.grad_dict[name] = self._at_batch(a, i, n)

    def _bind_new(self, slot: dict) -> np.ndarray:
        arr = np.zeros(slot["shape"], _F32)
        self._slots[slot["index"]] = self._ffi.from_buffer(arr)
        return arr

    # -- MXNet's dictionaries -----------------------------------------------------------------------------
    @property
    def arg_dict(self) -> dict[str, np.ndarray]:
        """Inputs last bound and parameters: the arrays the C code uses (writing into them changes the net)."""
        params = {n: a for n, a in self._params.items() if self._params_meta[n]["kind"] == "param"}
        return {**self._bound_inputs, **params}

    @property
    def aux_dict(self) -> dict[str, np.ndarray]:
        return {n: a for n, a in self._params.items() if self._params_meta[n]["kind"] == "aux"}

    # -- running -------------------------------------------------------------------------------------------
    def _bind_inputs(self, inputs: dict) -> None:
        self._check_unbound()
        known = {n for n, *_ in self._data_inputs}
        unknown = set(inputs) - known
        if unknown:
            raise ShapeError(f"unknown input(s) {name_list(map(repr, sorted(unknown)))}; the network's inputs are "
                             f"{name_list(sorted(known))}", input=sorted(unknown)[0], names=sorted(unknown))
        n = self.batch_of(inputs) if self._batch_of else None
        if n is not None:
            if n != self.batch and any(nm not in inputs for nm, i, *_ in self._data_inputs
                                       if i in self._batch_of and nm in self._bound_inputs):
                missing = [nm for nm, i, *_ in self._data_inputs if i in self._batch_of and nm not in inputs]
                raise ShapeError(f"a call of batch {n} (the last had {self.batch}) needs every input that carries "
                                 f"the batch: {name_list(missing)} kept its previous binding", input=missing[0])
        checked = []                    # every input checked before anything changes: a refused call binds nothing
        for name, index, shape, _optional in self._data_inputs:
            arr = inputs.get(name)
            if arr is None:
                if name in self._bound_inputs:
                    continue            # keep the previous binding, as MXNet's executor does
                raise ShapeError(f"missing input {name!r} of shape {shape} (training reads it)", input=name)
            if type(arr) is not np.ndarray or arr.dtype != _F32 or not arr.flags.c_contiguous:
                arr = self._coerce(name, arr)
            if n is not None:
                shape = self._shape_at(index, shape, n)
            if arr.shape != shape:
                raise ShapeError(f"input {name!r} has shape {arr.shape}, expected {shape}", input=name,
                                 expected=shape, got=arr.shape)
            checked.append((name, index, arr))
        if n is not None:
            self._use_batch(n)
        for name, index, arr in checked:
            self._bound_inputs[name] = arr          # kept alive: backward reads it after forward returns
            self._slots[index] = self._ffi.from_buffer(arr)

    def forward(self, is_train: bool = True, **inputs) -> list[np.ndarray]:
        """Run the forward pass; returns `outputs` (persistent arrays, overwritten by the next forward).

        is_train=True: training mode (BatchNorm batch statistics, Dropout masks; what backward() needs).
        is_train=False: inference mode (moving statistics, no dropout), as MXNet's forward(is_train=False);
        backward() then differentiates the function this forward computed, in either mode."""
        with self._primary_lock:
            self._bind_inputs(inputs)
            self._call(self._forward if is_train else self._forward_infer)
            self._last_forward = self._backward if is_train else self._backward_infer
            return self.outputs

    def set_seed(self, seed: int) -> None:
        """Seed the random operators (training Dropout) and restart their step count: the masks of the
        following training forwards are a function of (seed, forward count, layer) only."""
        with self._primary_lock:
            self._lib.mxcc_ctx_set_seed(self._ctx, int(seed) & (2 ** 64 - 1))

    def backward(self, out_grads=None) -> None:
        """Gradients into `grad_dict` (written, or added with grad_req 'add') of the function the last forward
        computed (training or inference mode). `out_grads`: head gradients for the outputs that are not loss
        heads (one array each, in output order), as MXNet's Executor.backward takes them."""
        with self._primary_lock:
            self._backward_locked(out_grads)

    def _backward_locked(self, out_grads) -> None:
        if self._last_forward is None:
            raise ShapeError("backward() needs a forward() first: it differentiates what the last forward computed")
        if self._head_grads:
            if out_grads is None:
                raise ShapeError(f"backward needs out_grads for the outputs that are not loss heads: "
                                 f"{[s['output'] for s in self._head_grads]}")
            grads = [out_grads] if isinstance(out_grads, np.ndarray) else list(out_grads)
            names = [n for n, *_ in self._outputs]
            if len(grads) == len(names) != len(self._head_grads):
                # MXNet's form, one per output: those of loss heads, or of outputs no gradient flows from
                # (a BlockGrad, an argmax), are ignored, as MXNet ignores them
                grads = [grads[names.index(s["output"])] for s in self._head_grads]
            if len(grads) != len(self._head_grads):
                raise ShapeError(f"got {len(grads)} out_grads, expected {len(self._head_grads)} (the outputs "
                                 f"{[s['output'] for s in self._head_grads]}) or one per output ({len(names)})")
            for s, g in zip(self._head_grads, grads):
                g = self._coerce(s["name"], g)
                want = self._shape_at(s["index"], tuple(s["shape"]), self.batch) if self._batch_of else tuple(s["shape"])
                if g.shape != want:
                    raise ShapeError(f"out_grad for {s['name']!r} has shape {g.shape}, expected "
                                     f"{want}", input=s["name"])
                self._bound_inputs[s["name"]] = g
                self._slots[s["index"]] = self._ffi.from_buffer(g)
        self._call(self._last_forward)

    def _set_hyper(self) -> None:
        d = self._update_def
        if self.optimizer.kind != d.kind:
            raise ValueError(f"this executor's update is compiled for a {d.kind!r} optimizer, not "
                             f"{self.optimizer.kind!r}")
        values = d.values(self.optimizer.step_hyper(self.num_update + 1))
        self._hyper[0:len(values)] = values

    def update(self) -> None:
        """One optimizer step on every parameter from the gradients in grad_dict."""
        with self._primary_lock:
            self._set_hyper()
            self._call(self._update)
            self.num_update += 1

    def step(self, **inputs) -> list[np.ndarray]:
        """forward(is_train=True) + backward() + update() in one C call (loss heads only)."""
        if self._head_grads:
            raise ShapeError("step() needs a network whose outputs are all loss heads; use forward/backward")
        with self._primary_lock:
            self._bind_inputs(inputs)
            self._set_hyper()
            self._call(self._step)
            self._last_forward = self._backward
            self.num_update += 1
            return self.outputs
