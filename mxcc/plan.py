"""The Plan: what the compiler decided, as plain data (kernels, buffer placement, totals) and its JSON.

Every value a kernel reads or writes lives in one place (`Location`): a slot the host binds (inputs,
params, outputs the user holds), an offset in the one arena, or an offset in ctx->derived (values folded from
the params at bind time, passes/fold_constants.py). `plan.json` and `mxcc inspect` print this.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mxcc.graph.ir import Graph


@dataclass(frozen=True)
class Slot:
    """A tensor the host binds by pointer: a graph input, a parameter/aux state, or an output."""
    index: int
    name: str
    kind: str            # "input" | "head_grad" | "param" | "aux" | "output" | "grad" | "state" | "grad_fresh" | ...
    shape: tuple
    dtype: str = "float32"
    optional: bool = False   # labels: not read at inference
    output: str = ""         # a head_grad slot: the output whose gradient it takes (MXNet's out_grads)


@dataclass(frozen=True)
class BufferSlot:
    """An intermediate in the arena: bytes [offset, offset + nbytes), live over kernel steps [start, end]."""
    name: str
    offset: int
    nbytes: int
    start: int
    end: int


@dataclass(frozen=True)
class Location:
    slot: int | None = None        # index into ctx->slots
    offset: int | None = None      # arena byte offset
    derived: int | None = None     # ctx->derived byte offset (a folded constant, computed by <net>_prepare)


@dataclass(frozen=True)
class Workspace:
    """A kernel's scratch (im2col buffers...): where it lives (the arena, or ctx->derived for a folded kernel),
    its bytes, and the step of the kernel that uses it (it is live during that step only)."""
    location: Location
    nbytes: int
    step: int


@dataclass(frozen=True)
class Plan:
    graph: Graph
    slots: tuple[Slot, ...]
    buffers: tuple[BufferSlot, ...]
    locations: dict = field(default_factory=dict)   # (node, index) -> Location
    workspaces: dict = field(default_factory=dict)  # anchor node id -> Workspace (kernels that need scratch)
    arena_bytes: int = 0
    naive_bytes: int = 0
    lower_bound_bytes: int = 0
    strategy: str = ""
    inplace: tuple = ()      # (value, value whose storage it reuses) pairs
    slices: tuple = ()       # (value, concatenation output, byte offset): written in place in that output
    live: dict = field(default_factory=dict)   # (node, index) -> (first step, last step) of arena values
    folded: tuple = ()       # FusedGroups of folded nodes, run by <net>_prepare in this order (not in graph.groups)
    derived_buffers: tuple[BufferSlot, ...] = ()   # their values in ctx->derived; live over prepare steps
    derived_bytes: int = 0   # ctx->derived bytes they use (a folded BatchNorm's scale/shift come after)
    plane_strides: dict = field(default_factory=dict)   # (node, index) -> floats between the value's NCHW planes,
                                                        # where more than H*W (passes/plan_memory._planes_apart)

    def slots_of(self, kind: str) -> list[Slot]:
        return [s for s in self.slots if s.kind == kind]
