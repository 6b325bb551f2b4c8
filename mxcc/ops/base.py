"""What an operator is: the OpDef record every op module fills in, and the protocols its functions follow.

An OpDef is plain data plus plain functions. Passes ask it questions (`fusion`, `infer`, `flops`, `lower`,
`epilogue`, `c_expr`) and never test op names. The protocols:

- `inputs(attrs) -> tuple[str, ...]`: ordered input names (also the C local names); aux states last.
- `aux(attrs) -> tuple[str, ...]`: which of those are auxiliary states (MXNet's list_auxiliary_states).
- `infer(attrs, s: ShapeCtx) -> list[shape]`: output shapes; reads inputs with `s.known(name)`, fills or
  checks weight shapes with `s.expect(name, shape)`, and reports faults with `s.fail(...)`.
- `flops(attrs, ins, outs) -> int`: an FMA counts 2.
- `lower(attrs, ctx: LowerCtx) -> (template, variables)`: only resolved constants and C names.
- `epilogue(attrs) -> EpilogueStep | None`: how a GEMM epilogue does this op (for ELEMWISE ops).
- `c_expr(attrs, args) -> str`: the op as a C expression of its input expressions (ELEMWISE ops).
- `fusion`: a Fusion, or `fusion(attrs) -> Fusion` where the kind depends on attributes (LeakyReLU: 'leaky'
  is ELEMWISE, 'prelu' BROADCAST); passes ask `op.fusion_of(attrs)`. Likewise `view` (the output is the
  input's storage, no kernel): a bool or a function of the attrs; passes ask `op.view_of(attrs)`.
- `grad(attrs, g) -> {input: Ref}`: the gradient rule, building backward nodes with `g.emit(op, inputs,
  **attrs)` from `g.ograd(i)`, `g.input(name)`, `g.output(i)`, for the inputs `g.needs(name)` (passes/autodiff.py).
- `workspace(attrs, ins, outs, const) -> int`: scratch bytes the kernel needs while it runs (im2col
  buffers...); the planner places them in the arena, live for that one step, and the kernel sees a
  `workspace` pointer. `const`: the inputs fixed at bind time (passes/fold_constants.bind_time_inputs), which
  the lowering may read prepacked (LowerCtx.packed_input): the choice of kernel, and its scratch, may
  depend on them.
- `paths(attrs, ins, const) -> (candidates, heuristic)`: an op that has several kernels for one node
  (Convolution): the names of those that can compute it, and the one its heuristics pick (always among them).
  Its attrs then have a `chosen_path` field ("" = the heuristics) that `lower` and `workspace` obey; it is set
  by passes/choose_paths.py from CompileOptions.conv_paths, which a tuned build fills (compiler/tune.py).
- `train_op(attrs) -> str | None`: the op a node of this op becomes when the graph trains (MXNet's
  forward(is_train=True)): BatchNorm -> `_train_BatchNorm` (batch statistics), Dropout -> `_train_Dropout`
  (a mask); None (or no train_op) keeps the op. Applied by passes/train_mode.py.
- `mutates(attrs) -> tuple[str, ...]`: inputs the kernel writes in place (MXNet's FMutateInputs: the moving
  statistics `_backward_BatchNorm` updates); the kernel sees them as writable pointers.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from math import prod
from typing import Any, Callable

from mxcc.errors import IncompleteShapeError, ShapeError


class Fusion(enum.Enum):
    """TVM's OpPatternKind: how an op may be fused with its neighbours."""
    ELEMWISE = 0     # out[i] = f(in[i]); absorbable into an anchor's epilogue or a fused loop
    BROADCAST = 1    # elementwise with broadcasting of some inputs
    INJECTIVE = 2    # moves data (reshape, transpose, concat)
    REDUCE = 3
    ANCHOR = 4       # GEMM-like (FullyConnected, Convolution): absorbs an elementwise epilogue
    OPAQUE = 5       # fused with nothing (softmax, pooling...)


@dataclass(frozen=True)
class NoAttrs:
    """The attributes of an operator that takes none."""


@dataclass(frozen=True)
class EpilogueStep:
    """One step of a GEMM epilogue (runtime_c/gemm/mxcc_gemm.h): an activation/clip, or a residual add
    (`residual=True`: the op's other input is added to the tile before any activation)."""
    act: str = "MXCC_ACT_NONE"   # C enum name, e.g. "MXCC_ACT_RELU"
    alpha: float = 0.0
    lo: float = 0.0
    hi: float = 0.0
    residual: bool = False
    batch_norm: bool = False     # inference BatchNorm folded in: per-channel scale/shift computed at bind time


class ShapeCtx:
    """A shape rule's view of one node: its input shapes by name, with fill-in and errors naming the node."""

    def __init__(self, node: str, op: str, names: tuple[str, ...], shapes: list):
        self.node, self.op, self.names = node, op, names
        self.shapes = list(shapes)

    def _i(self, name: str) -> int:
        return self.names.index(name)

    def maybe(self, name: str):
        return self.shapes[self._i(name)]

    def known(self, name: str) -> tuple:
        s = self.shapes[self._i(name)]
        if s is None:
            raise IncompleteShapeError(
                f"input {name!r} has an unknown shape (give it with --shape {name}=... or as a param)",
                node=self.node, op=self.op, input=name)
        return s

    def expect(self, name: str, shape: tuple, why: str = "") -> tuple:
        """Fill an unknown input shape (a weight inferred from data), or check a known one."""
        shape = tuple(int(d) for d in shape)
        i = self._i(name)
        got = self.shapes[i]
        if got is None:
            self.shapes[i] = shape
        elif tuple(got) != shape:
            self.fail(f"input {name!r} has shape {tuple(got)}, expected {shape}" + (f" {why}" if why else ""),
                      input=name, expected=shape, got=tuple(got))
        return shape

    def fail(self, msg: str, *, input: str | None = None, expected=None, got=None):
        raise ShapeError(msg, node=self.node, op=self.op, input=input, expected=expected, got=got)


MAX_ARITY = 1 << 16   # the most inputs or outputs a variadic op may declare (Concat num_args, SliceChannel
                      # num_outputs): more is a corrupted attribute, refused before any per-input tuple is built


def check_arity(what: str, n: int) -> None:
    """For a variadic op's attrs: ValueError (an AttrError once parsed) unless 1 <= n <= MAX_ARITY."""
    if not 1 <= n <= MAX_ARITY:
        raise ValueError(f"{what} must be between 1 and {MAX_ARITY}, got {n}")


def _no_aux(attrs) -> tuple[str, ...]:
    return ()


def _one_output(attrs) -> tuple[str, ...]:
    return ("output",)


def _zero_flops(attrs, ins, outs) -> int:
    return 0


@dataclass(frozen=True)
class OpDef:
    name: str
    attrs: type
    inputs: Callable[[Any], tuple[str, ...]]
    infer: Callable[[Any, ShapeCtx], list]
    fusion: Fusion | Callable[[Any], Fusion]
    lower: Callable | None = None
    flops: Callable = _zero_flops
    aliases: tuple[str, ...] = ()
    aux: Callable[[Any], tuple[str, ...]] = _no_aux
    output_names: Callable[[Any], tuple[str, ...]] = _one_output
    labels: tuple[str, ...] = ()          # inputs only training reads (SoftmaxOutput's label)
    loss: bool = False                    # a loss head: its backward makes its own gradient (no head grad)
    epilogue: Callable[[Any], EpilogueStep | None] | None = None
    c_expr: Callable[[Any, list[str]], str] | None = None
    inplace: bool = False                 # output may reuse input 0's storage
    residual_in_place: Callable | None = None   # ANCHOR: (attrs, in_types, const) -> whether the kernel reads
                                          # each element of a fused residual before it writes the same
                                          # output element, and no other: the output may reuse its storage
    planes_apart: Callable | None = None  # ANCHOR: (attrs, in_types, const) -> which of "out" (its output) and
                                          # "data" (that input) its kernel takes with NCHW planes further
                                          # apart than H*W floats (plan_memory: a depthwise layer's output
                                          # that a pointwise layer reads, its rows then on cache lines)
    view: bool | Callable[[Any], bool] = False   # output is input 0 reinterpreted (Flatten/Reshape): no
                                          # kernel; a function of the attrs where it depends on them (Cast)
    identity_in_inference: bool = False   # Dropout: removed for inference
    hidden_outputs: int | Callable[[Any], int] = 0   # trailing outputs not visible to users (Dropout's mask);
                                          # a function of the attrs where the count varies (Pooling, BatchNorm)
    workspace: Callable | None = None     # (attrs, in_types, out_types, const) -> scratch bytes (e.g. im2col)
    epilogue_axis: int | None = None      # ANCHOR: the output axis its per-channel epilogue vectors index
                                          # (FullyConnected: -1, columns; Convolution: 1): BatchNorm folds there
    grad: Callable | None = None          # (attrs, g: GradCtx) -> {input name: gradient Ref}; see autodiff.py
    paths: Callable | None = None         # (attrs, in_types, const) -> (candidate kernels, heuristic's): tuning
    train_op: Callable[[Any], str | None] | None = None   # the op this node becomes in a training graph
    mutates: Callable[[Any], tuple[str, ...]] = _no_aux   # inputs written in place (FMutateInputs)
    input_slices: Callable | None = None  # (attrs, in_types, out_type) -> each input's byte offset in the output
                                          # when every input is one contiguous range of it (Concat), else None:
                                          # the planner may then place the inputs there (passes/plan_memory.py)
    random: bool = False                  # draws from the context's counter RNG (ctx->rng_seed, rng_step)
    doc: str = ""
    symbol_args: tuple[str, ...] = field(default=())   # positional order for the Symbol API

    def num_outputs(self, attrs) -> int:
        return len(self.output_names(attrs))

    def fusion_of(self, attrs) -> Fusion:
        return self.fusion if isinstance(self.fusion, Fusion) else self.fusion(attrs)

    def view_of(self, attrs) -> bool:
        return self.view(attrs) if callable(self.view) else self.view

    def num_hidden(self, attrs) -> int:
        h = self.hidden_outputs
        return h(attrs) if callable(h) else h


def elementwise_flops(per_element: int) -> Callable:
    return lambda attrs, ins, outs: per_element * prod(outs[0].shape)


def c_float(v: float) -> str:
    """A float constant as C source (float32 literal; inf/nan spelled with math.h macros)."""
    v = float(v)
    if v != v:
        return "NAN"
    if v in (float("inf"), float("-inf")):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return f"{v!r}f" if "e" in repr(v) or "." in repr(v) else f"{v!r}.0f"
