"""Autodiff: append the backward graph, built from each op's gradient rule (`OpDef.grad`).

Requires: a bound, typed graph (infer_shapes). Guarantees: new nodes (phase "backward") after the forward
ones, typed; `graph.grads` maps every variable in `wrt` to the value holding its gradient (summed with
elemwise_add where it fans out); non-loss heads get a head-gradient input variable `<output>_head_grad`
(in `graph.inputs`, and with its output in `graph.head_grads`: later stages read that, not the name), loss heads (ops with `loss=True`: SoftmaxOutput...) need none, as in MXNet. Inputs that
need no gradient (labels, data unless asked) are never differentiated: a rule is asked only for the inputs
in `g.needs`. Does not: optimize the backward graph (the usual passes run after it) or add the optimizer
update (codegen emits it from the plan's gradient slots).

    before: fc = FullyConnected(X, w, b); out = SoftmaxOutput(fc, label)
    after : ... + out_bwd = _backward_SoftmaxOutput(out, label); fc_bwd = _backward_FullyConnected(out_bwd, X, w)
            grads: w -> fc_bwd[0], b -> fc_bwd[1]
"""
from __future__ import annotations

from dataclasses import replace

from mxcc.errors import MxccError
from mxcc.graph.ir import Graph, Node, Ref
from mxcc.ops import attrs as attrs_parser
from mxcc.ops import get_op
from mxcc.ops.base import ShapeCtx
from mxcc.types import DType, TensorType


class GradCtx:
    """What a gradient rule sees of its node, and how it adds backward nodes."""

    def __init__(self, builder: "_Builder", node: Node, out_grads: list[Ref | None], needs: set[str]):
        self._b, self.node, self._out_grads, self._needs = builder, node, out_grads, needs
        self._names = node.opdef.inputs(node.params)

    def needs(self, name: str) -> bool:
        return name in self._needs

    def input(self, name: str) -> Ref:
        return self.node.inputs[self._names.index(name)]

    def output(self, i: int = 0) -> Ref:
        return Ref(self.node.id, i)

    def ograd(self, i: int = 0) -> Ref:
        g = self._out_grads[i]
        if g is None:          # an output nobody differentiates through: its gradient is zero
            g = self._b.zeros_like(Ref(self.node.id, i), f"{self.node.name}_ograd{i}_zero")
            self._out_grads[i] = g
        return g

    def type_of(self, ref: Ref) -> TensorType:
        return self._b.type_of(ref)

    def emit(self, op: str, inputs: list[Ref], name: str | None = None, **attrs) -> tuple[Ref, ...]:
        """Add a backward node `op(inputs, attrs)`; returns its outputs. Attr values are Python values."""
        return self._b.add(op, inputs, {k: attrs_parser.format_value(v) for k, v in attrs.items()},
                           name or f"{self.node.name}_backward")


class _Builder:
    def __init__(self, graph: Graph):
        self.nodes = list(graph.nodes)
        self.names = {n.name for n in graph.nodes}

    def type_of(self, ref: Ref) -> TensorType:
        return self.nodes[ref.node].out_types[ref.index]

    def unique(self, name: str) -> str:
        base, i = name, 1
        while name in self.names:
            i += 1
            name = f"{base}{i}"
        self.names.add(name)
        return name

    def add(self, op_name: str, inputs: list[Ref], raw: dict[str, str], name: str,
            phase: str = "backward") -> tuple[Ref, ...]:
        name = self.unique(name)
        op = get_op(op_name, name)
        params = attrs_parser.parse(op.attrs, raw, node=name, op=op_name)
        names = op.inputs(params)
        ctx = ShapeCtx(name, op_name, names, [self.type_of(r).shape for r in inputs])
        outs = op.infer(params, ctx)
        node = Node(id=len(self.nodes), name=name, op=op.name, attrs=tuple(raw.items()), inputs=tuple(inputs),
                    params=params, out_types=tuple(TensorType(tuple(s), DType.float32) for s in outs), phase=phase)
        self.nodes.append(node)
        return tuple(Ref(node.id, i) for i in range(len(outs)))

    def variable(self, name: str, ttype: TensorType) -> Ref:
        name = self.unique(name)
        self.nodes.append(Node(id=len(self.nodes), name=name, op="null", out_types=(ttype,), phase="backward"))
        return Ref(len(self.nodes) - 1, 0)

    def zeros_like(self, ref: Ref, name: str) -> Ref:
        return self.add("_zeros_like", [ref], {}, name)[0]

    def sum(self, refs: list[Ref], name: str) -> Ref:
        """Gradient contributions at a fan-out, summed left to right (deterministic)."""
        total = refs[0]
        for i, r in enumerate(refs[1:]):
            total = self.add("elemwise_add", [total, r], {}, f"{name}_sum{i}" if i else f"{name}_sum")[0]
        return total


def autodiff(graph: Graph, wrt: list[str]) -> Graph:
    """Append the backward graph for the gradients of the variables named in `wrt`."""
    b = _Builder(graph)
    var_id = {n.name: n.id for n in graph.variables}
    missing = [w for w in wrt if w not in var_id]
    if missing:
        raise MxccError(f"cannot differentiate with respect to {missing}: not variables of the graph")
    targets = {var_id[w] for w in wrt}
    # which nodes lie on a path from a target to a head: only those get differentiated
    depends: set[int] = set(targets)
    for n in graph.nodes:
        if not n.is_variable and any(r.node in depends for r in n.inputs):
            depends.add(n.id)
    contrib: dict[tuple[int, int], list[Ref]] = {}
    inputs = list(graph.inputs)
    head_grads = []
    for h in graph.heads:
        n = graph.nodes[h.node]
        if n.is_variable or h.node not in depends:
            continue
        if n.opdef.loss:
            contrib.setdefault(h.key, [])          # a loss head makes its own gradient
            continue
        v = b.variable(f"{graph.output_name(h)}_head_grad", graph.type_of(h))
        inputs.append(b.nodes[v.node].name)
        head_grads.append((graph.output_name(h), b.nodes[v.node].name))
        contrib.setdefault(h.key, []).append(v)
    for n in reversed(graph.nodes):
        if n.is_variable or n.id not in depends:
            continue
        keys = [(n.id, i) for i in range(len(n.out_types))]
        if not any(k in contrib for k in keys):
            continue
        op = n.opdef
        if op.grad is None:
            raise MxccError("has no gradient rule: it cannot be trained through", node=n.name, op=n.op)
        names = op.inputs(n.params)
        needs = {name for name, r in zip(names, n.inputs)
                 if r.node in depends and name not in op.labels and name not in op.aux(n.params)}
        out_grads = [b.sum(contrib[k], f"{n.name}_ograd{k[1]}") if contrib.get(k) else None for k in keys]
        g = GradCtx(b, n, out_grads, needs)
        result = op.grad(n.params, g) or {}
        for name, ref in result.items():
            if ref is None or name not in needs:
                continue
            contrib.setdefault(n.inputs[names.index(name)].key, []).append(ref)
    grads = []
    taken = {h.key for h in graph.heads}
    for w in wrt:
        parts = contrib.get((var_id[w], 0), [])
        ref = b.sum(parts, f"{w}_grad") if parts else b.zeros_like(Ref(var_id[w], 0), f"{w}_grad_zero")
        if b.nodes[ref.node].is_variable or ref.key in taken:
            # a gradient that is a head gradient passed through (x + y), or shared with another gradient or
            # an output, gets its own copy: every gradient slot is written by a kernel
            ref = b.add("_reshape_to", [ref], {"shape": str(b.type_of(ref).shape)}, f"{w}_grad_copy")[0]
        taken.add(ref.key)
        grads.append((w, ref))
    return replace(graph.with_nodes(b.nodes, inputs=tuple(inputs)), grads=tuple(grads), head_grads=tuple(head_grads))
