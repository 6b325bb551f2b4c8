"""The graph IR: frozen nodes in topological order, as MXNet's nnvm graph has them.

A `Node` is a variable (`op == "null"`: data, label, weight, aux state) or an operator application. Its raw
MXNet attribute strings are kept verbatim (they are what `tojson()` writes back); the typed attributes parsed
by the op's dataclass (`params`) and the output types (`out_types`) are filled in by `bind` and
`infer_shapes`. Values are addressed by `Ref(node, index)`. Passes return new graphs (`dataclasses.replace`),
never mutate one. Fusion groups (`groups`) are attached by the fuse pass; backward nodes (training) are just
more nodes, marked with `phase`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Iterable

from mxcc.ops import attrs as attrs_parser
from mxcc.ops import get_op
from mxcc.types import TensorType

VARIABLE = "null"


@dataclass(frozen=True)
class Ref:
    """Output `index` of node `node` (MXNet's [node, index, version] entry)."""
    node: int
    index: int = 0
    version: int = 0

    @property
    def key(self) -> tuple[int, int]:
        return (self.node, self.index)


@dataclass(frozen=True)
class Node:
    id: int
    name: str
    op: str                                   # MXNet op name as written, or "null" for a variable
    attrs: tuple[tuple[str, str], ...] = ()   # raw MXNet strings, in file order
    inputs: tuple[Ref, ...] = ()
    params: Any = None                        # typed attrs (the op's dataclass), set by bind()
    out_types: tuple[TensorType, ...] | None = None   # set by infer_shapes()
    control_deps: tuple[int, ...] = ()
    phase: str = "forward"                    # "forward" | "backward" | "update"

    @property
    def is_variable(self) -> bool:
        return self.op == VARIABLE

    @property
    def attr_dict(self) -> dict[str, str]:
        return dict(self.attrs)

    @property
    def opdef(self):
        """The registered OpDef of this node (raises UnsupportedOpError naming the node)."""
        return get_op(self.op, self.name)

    @property
    def num_outputs(self) -> int:
        if self.is_variable:
            return 1
        if self.out_types is not None:
            return len(self.out_types)
        params = self.params
        if params is None:
            params = attrs_parser.parse(self.opdef.attrs, self.attrs, node=self.name, op=self.op)
        return self.opdef.num_outputs(params)


@dataclass(frozen=True)
class FusedGroup:
    """A kernel: an anchor node and the nodes fused into it (anchor first, then epilogue in order).

    The group keeps every member's name: the C function comment, plan.json and the profiler show them.
    """
    name: str                    # the anchor node's name; the C function is <net>_<name>
    members: tuple[int, ...]     # node ids, execution order
    outputs: tuple[Ref, ...]     # the values the group produces (its last member's outputs)

    @property
    def anchor(self) -> int:
        return self.members[0]


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    heads: tuple[Ref, ...]
    attrs: tuple[tuple[str, Any], ...] = ()           # graph attrs, e.g. ("mxnet_version", ["int", 10901])
    groups: tuple[FusedGroup, ...] | None = None      # set by the fuse pass
    inputs: tuple[str, ...] = ()                      # variables fed per call (data, label), set by bind
    grads: tuple[tuple[str, Ref], ...] = ()           # (variable, value holding its gradient), set by autodiff
    head_grads: tuple[tuple[str, str], ...] = ()      # (output, the input variable of its head gradient): autodiff

    def __post_init__(self):
        for i, n in enumerate(self.nodes):
            if n.id != i:
                raise ValueError(f"node {n.name!r} has id {n.id} at position {i}")

    # -- queries ---------------------------------------------------------------------------------------
    def node(self, ref: Ref | int) -> Node:
        return self.nodes[ref.node if isinstance(ref, Ref) else ref]

    def type_of(self, ref: Ref) -> TensorType:
        t = self.nodes[ref.node].out_types
        if t is None:
            raise ValueError(f"node {self.nodes[ref.node].name!r} has no inferred type")
        return t[ref.index]

    @cached_property
    def has_backward(self) -> bool:
        """Whether autodiff appended a backward (a training graph). Cached: the graph is immutable."""
        return any(n.phase == "backward" for n in self.nodes)

    @cached_property
    def input_names(self) -> frozenset[str]:
        """`inputs` as a set (cached)."""
        return frozenset(self.inputs)

    @property
    def variables(self) -> list[Node]:
        return [n for n in self.nodes if n.is_variable]

    def consumers(self) -> dict[tuple[int, int], list[int]]:
        """(node, index) -> ids of the nodes that read it, in id order (heads not included)."""
        out: dict[tuple[int, int], list[int]] = {}
        for n in self.nodes:
            for r in n.inputs:
                out.setdefault(r.key, []).append(n.id)
        return out

    def output_name(self, ref: Ref) -> str:
        """MXNet's name for a value: `<node>_output` or `<node>_output<i>` for multi-output nodes."""
        n = self.nodes[ref.node]
        if n.is_variable:
            return n.name
        names = n.opdef.output_names(n.params) if n.params is not None else ("output",)
        return f"{n.name}_{names[ref.index]}"

    def with_nodes(self, nodes: Iterable[Node], **kw) -> "Graph":
        return replace(self, nodes=tuple(nodes), **kw)

    def pretty(self) -> str:
        """One line per node: `id name = op(inputs) -> types`; used in pass tests and --dump-after."""
        lines = []
        for n in self.nodes:
            ins = ", ".join(f"{self.nodes[r.node].name}" + (f"[{r.index}]" if r.index else "")
                            for r in n.inputs)
            ty = "" if n.out_types is None else " -> " + ", ".join(map(str, n.out_types))
            lines.append(f"{n.id:3d} {n.name} = {n.op}({ins}){ty}")
        lines.append("heads: " + ", ".join(self.output_name(h) for h in self.heads))
        if self.groups is not None:
            for g in self.groups:
                lines.append(f"group {g.name}: " + " + ".join(self.nodes[i].name for i in g.members))
        return "\n".join(lines)
