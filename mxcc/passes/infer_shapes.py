"""Bind attributes and infer every value's shape and dtype, as MXNet's InferShape does.

Requires: a Graph straight from a front end. Guarantees: every operator node has typed `params` (its op's
attrs dataclass) and every node has `out_types`; weight, bias and label shapes are deduced from the data
shapes (`ShapeCtx.expect`), and every inconsistency raises ShapeError naming the node and the input.
`graph.inputs` lists the variables fed per call: those given in `shapes` plus loss-head labels.
Does not: decide which params exist in a file (the Module checks that), or change the graph's structure.
"""
from __future__ import annotations

from dataclasses import replace

from mxcc.errors import GraphError, IncompleteShapeError, ShapeError, UnsupportedOpError, name_list
from mxcc.graph.ir import Graph, Node
from mxcc.ops import attrs as attrs_parser
from mxcc.ops import is_internal
from mxcc.ops.base import ShapeCtx
from mxcc.types import DType, TensorType


def bind(graph: Graph) -> Graph:
    """Parse every operator node's attribute strings into its op's typed attrs; check input counts and
    that every input and head names an output its node has (the reader cannot know an op's outputs when
    the file has no node_row_ptr)."""
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.is_variable:
            nodes.append(n)
            continue
        op = n.opdef
        if is_internal(n.op):     # made by autodiff/train_mode with invariants a file cannot promise
            raise UnsupportedOpError(f"operator {n.op!r} is internal to mxcc (the compiler adds it to training "
                                     f"graphs); a graph cannot use it", node=n.name, op=n.op)
        params = attrs_parser.parse(op.attrs, n.attrs, node=n.name, op=n.op)
        names = op.inputs(params)
        if len(n.inputs) != len(names):
            raise GraphError(f"has {len(n.inputs)} inputs, expected {len(names)} ({', '.join(names)})",
                             node=n.name, op=n.op)
        for name, r in zip(names, n.inputs):
            _check_output_index(nodes, r, f"input {name!r}", n)
        nodes.append(replace(n, params=params))
    for k, h in enumerate(graph.heads):
        _check_output_index(nodes, h, f"graph output #{k}", None)
    return graph.with_nodes(nodes)


def _check_output_index(nodes: list[Node], r, what: str, consumer: Node | None) -> None:
    src = nodes[r.node]
    count = src.num_outputs
    if r.index >= count:
        raise GraphError(f"{what} [{r.node}, {r.index}] refers to output {r.index} of {src.name!r}, which has "
                         f"{count} output(s)", node=consumer.name if consumer else None,
                         op=consumer.op if consumer else None, expected=count, got=r.index)


def _hint_shape(n: Node):
    """A variable's `__shape__` attribute, if it is complete (MXNet writes 0 for dims inferred later)."""
    text = n.attr_dict.get("__shape__")
    if not text:
        return None
    try:
        shape = tuple(int(d) for d in attrs_parser.literal(text))
    except (ValueError, SyntaxError, TypeError, OverflowError):
        raise GraphError(f"variable attribute __shape__={text!r} is not a shape", node=n.name) from None
    return shape if shape and all(d > 0 for d in shape) else None


def infer_shapes(graph: Graph, shapes: dict[str, tuple]) -> Graph:
    """Shapes for every node, given the shapes of the data inputs (and optionally of any variable)."""
    if any(n.params is None and not n.is_variable for n in graph.nodes):
        graph = bind(graph)
    var_names = {n.name for n in graph.variables}
    for name, shape in shapes.items():
        if name not in var_names:
            order = [n.name for n in graph.variables]
            raise ShapeError(f"a shape was given for {name!r}, which is not an input or parameter of the graph "
                             f"(its variables: {name_list(order)})", input=name, names=order)
        if not all(isinstance(d, int) and d > 0 for d in shape):
            raise ShapeError(f"shape {tuple(shape)} for {name!r} must be positive integers", input=name)
    known: dict[int, tuple] = {}
    for n in graph.variables:
        s = shapes.get(n.name)
        s = tuple(s) if s is not None else _hint_shape(n)
        if s is not None:
            known[n.id] = s
    out_shapes: dict[int, list[tuple]] = {}
    labels: set[int] = set()
    for n in graph.nodes:
        if n.is_variable:
            continue
        op = n.opdef
        names = op.inputs(n.params)
        in_shapes = [known.get(r.node) if graph.nodes[r.node].is_variable else out_shapes[r.node][r.index]
                     for r in n.inputs]
        ctx = ShapeCtx(n.name, n.op, names, in_shapes)
        try:
            outs = op.infer(n.params, ctx)
        except IncompleteShapeError as e:
            src = graph.nodes[n.inputs[names.index(e.input)].node]
            raise IncompleteShapeError(
                f"variable {src.name!r} (input {e.input!r} of {n.name}) has no shape: "
                f"give it with --shape {src.name}=d1,d2,...", node=n.name, op=n.op, input=src.name) from None
        for name, r, s in zip(names, n.inputs, ctx.shapes):
            if graph.nodes[r.node].is_variable:
                known[r.node] = s
                if name in op.labels:
                    labels.add(r.node)
        expected = op.num_outputs(n.params)
        if len(outs) != expected:   # a rule bug, not a user error
            raise AssertionError(f"{n.op} shape rule returned {len(outs)} outputs, expected {expected}")
        out_shapes[n.id] = [tuple(int(d) for d in s) for s in outs]
    for h in graph.heads:
        if graph.nodes[h.node].is_variable and h.node not in known:
            v = graph.nodes[h.node].name
            raise IncompleteShapeError(f"graph output {v!r} is a variable with no shape (nothing computes it)",
                                       node=v, input=v)
    nodes = []
    for n in graph.nodes:
        if n.is_variable:
            s = known.get(n.id)
            types = None if s is None else (TensorType(s, DType.float32),)
        else:
            types = tuple(TensorType(s, DType.float32) for s in out_shapes[n.id])
        nodes.append(replace(n, out_types=types))
    inputs = tuple(n.name for n in graph.variables if n.name in shapes or n.id in labels)
    return graph.with_nodes(nodes, inputs=inputs)
