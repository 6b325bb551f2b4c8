"""Shape inference with a symbolic batch N: which dimension of every value holds the batch, and how many times.

Given the input shapes at the maximum batch B and, per batch input, the axis that holds the batch
(`--shape data=?64,3,224,224`: axis 0, B = 64), `infer_batch` runs the ordinary shape inference
(passes/infer_shapes.py, every op's own rule) at a few batches N (B, B-1 and 1; B+1, B+2 where B < 3) and
compares the answers dimension by dimension. A dimension equal at every N is a constant; one that is k*N at
every N (k a positive integer) holds the batch. The result, `BatchShapes`, gives every value that depends
on the batch its `BatchAxis(axis, factor)`: extent `factor * N` on `axis`, every other dimension constant.
It needs no knowledge of any operator: Reshape's codes (0, -1, -2, -3, -4), Flatten, transpose, Concat,
batch_dot, RNN layouts answer through their shape rules, so a BERT head split (N, S, H*D) ->
(N*H, S, D) is factor H on axis 0 and a time-major RNN's (T, N, C) is axis 1.

A network is batch-separable (the compiled maximum plan holds for every batch 1..B) when every value
either has one shape for every N or keeps the batch in exactly one dimension as k*N, and no parameter or
aux state depends on N. Anything else raises ShapeError naming the node, its op and the output (or the
input) and showing its shapes at each N: a shape rule that fails at some N (a Reshape to a fixed total
size, Flatten then Reshape with explicit sizes), a dimension that is not k*N (N+5, N/2), the batch in two
dimensions (an (N, N) product), a rank that changes with N (squeeze at N = 1), or a parameter sized by it.
A value whose shape is constant may still be computed from batch values (a sum over the batch): its kernel
depends on N through its inputs (`BatchShapes.depends`). An op's hidden outputs (its private buffers: RNN's
training reserve, aligned blocks of k*N rows) may depend on N in any way (`BatchShapes.internal`).
Does not: change the graph, or decide what a kernel does with N (the code generator's part).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mxcc.errors import ShapeError
from mxcc.graph.ir import Graph, Node, Ref
from mxcc.passes.infer_shapes import bind, infer_shapes

# the maximum used to sample the rules when the caller gives no maximum (Symbol.infer_shape(data=(None, ...)))
UNBOUNDED_SAMPLE = 16


@dataclass(frozen=True)
class BatchAxis:
    """Where a value holds the batch: dimension `axis` has extent `factor * N`; its other dimensions are
    constants. Written `N` or `<factor>N` (12N: twelve rows per sample, as BERT's heads)."""
    axis: int
    factor: int = 1

    def extent(self, n: int) -> int:
        return self.factor * n

    def __str__(self) -> str:
        return "N" if self.factor == 1 else f"{self.factor}N"

    def to_json(self) -> dict:
        return {"axis": self.axis, "factor": self.factor}


@dataclass(frozen=True, repr=False)
class BatchDim:
    """A dimension of a symbolic shape (Symbol.infer_shape with a '?' or None dimension): `factor` times the
    batch N, 1 <= N <= `maximum` (None: unbounded). Its repr is `N` or `12N`, so shapes print as (N, 784)."""
    factor: int = 1
    maximum: int | None = None

    def at(self, n: int) -> int:
        return self.factor * n

    def __repr__(self) -> str:
        return "N" if self.factor == 1 else f"{self.factor}N"


@dataclass(frozen=True)
class BatchShapes:
    """The batch dependence of every value of a graph: `axes[(node id, output index)]` for the values that
    depend on N (a variable's value is (its id, 0)); the others have one shape for every N."""
    maximum: int
    inputs: dict = field(default_factory=dict)     # batch input name -> the axis that holds the batch
    axes: dict = field(default_factory=dict)       # (node, index) -> BatchAxis
    samples: tuple = ()                            # the batches the shape rules were run at
    # an op's hidden outputs (RNN's training reserve) sized by N in a layout only the op knows (several
    # blocks of k*N rows, aligned): planned at the maximum; the op's kernels place their blocks
    internal: frozenset = frozenset()

    def of(self, ref: Ref) -> BatchAxis | None:
        return self.axes.get(ref.key)

    def depends(self, node: Node) -> bool:
        """Whether a node's extents depend on N: one of its outputs or inputs does."""
        keys = [(node.id, i) for i in range(len(node.out_types or ()))] + [r.key for r in node.inputs]
        return any(k in self.axes or k in self.internal for k in keys)

    def shape_at(self, shape: tuple, ref: Ref, n: int) -> tuple:
        """`shape` (at the maximum) as it is at batch n."""
        b = self.of(ref)
        return tuple(shape) if b is None else tuple(b.extent(n) if i == b.axis else d for i, d in enumerate(shape))

    def symbolic(self, shape: tuple, ref: Ref) -> tuple:
        """`shape` with its batch dimension a BatchDim: (N, 3, 224, 224)."""
        return symbolic_shape(shape, self.of(ref), self.maximum)


def symbolic_shape(shape: tuple, batch: BatchAxis | None, maximum: int | None) -> tuple:
    if batch is None:
        return tuple(shape)
    return tuple(BatchDim(batch.factor, maximum) if i == batch.axis else d for i, d in enumerate(shape))


def format_shape(shape, batch: BatchAxis | dict | None, sep: str = ", ") -> str:
    """A shape with its batch dimension written symbolically: `(N, 3, 224, 224)`, with sep 'x' `12Nx128x64`.
    `batch`: a BatchAxis, its to_json() dict, or None (all constant)."""
    if isinstance(batch, dict):
        batch = BatchAxis(batch["axis"], batch["factor"])
    dims = [str(batch) if batch is not None and i == batch.axis else str(d) for i, d in enumerate(shape)]
    text = sep.join(dims)
    return f"({text}{',' if len(dims) == 1 else ''})" if sep == ", " else text


def samples(maximum: int) -> tuple[int, ...]:
    """The batches the rules run at: the maximum first (its errors are the ordinary ones), then B-1 (coprime
    with B, so a size that only divides B shows) and 1 (the batch a service sees most, where squeezes and
    broadcasts change shapes); below three distinct values, B+1 and B+2 (rules are arithmetic: a batch above
    the maximum only pins the law down)."""
    out = [maximum]
    for n in (maximum - 1, 1, maximum + 1, maximum + 2):
        if len(out) < 3 and n >= 1 and n not in out:
            out.append(n)
    return tuple(out)


def infer_batch(graph: Graph, shapes: dict[str, tuple], batch_axes: dict[str, int]) -> BatchShapes:
    """The batch dependence of every value of `graph` (bound or not). `shapes`: the input shapes at the
    maximum batch (as infer_shapes takes them); `batch_axes`: for each input that carries the batch, the axis
    that holds it (its size in `shapes` is the maximum, the same for every such input). Raises ShapeError
    naming the node when the network is not batch-separable (module docstring)."""
    maximum = _check(shapes, batch_axes)
    if any(n.params is None and not n.is_variable for n in graph.nodes):
        graph = bind(graph)
    ns = samples(maximum)
    typed = {}
    for n in ns:
        at_n = {k: _with_batch(v, batch_axes.get(k), n) for k, v in shapes.items()}
        try:
            typed[n] = infer_shapes(graph, at_n)
        except ShapeError as e:
            if n == maximum:
                raise
            raise _failed_at(e, graph, typed[maximum], n, maximum) from None
    axes, internal = {}, set()
    for node in graph.nodes:
        types = [typed[n].nodes[node.id].out_types for n in ns]
        if types[0] is None:          # a variable nothing gives a shape to (unused)
            continue
        visible = len(types[0]) - (0 if node.is_variable else node.opdef.num_hidden(node.params))
        for i in range(len(types[0])):
            try:
                b = _classify(graph, node, i, ns, [t[i].shape for t in types])
            except ShapeError:
                if i < visible:
                    raise
                internal.add((node.id, i))
                continue
            if b is not None:
                axes[(node.id, i)] = b
    _check_params(graph, typed[maximum], axes, batch_axes)
    return BatchShapes(maximum, dict(batch_axes), axes, ns, frozenset(internal))


def _check(shapes: dict, batch_axes: dict) -> int:
    if not batch_axes:
        raise ShapeError("a dynamic batch needs at least one input whose batch dimension is marked "
                         "(--shape data=?64,3,224,224)")
    maxima = {}
    for name, axis in batch_axes.items():
        if name not in shapes:
            raise ShapeError(f"a batch axis was given for {name!r}, which has no shape", input=name)
        shape = tuple(shapes[name])
        if not 0 <= axis < len(shape):
            raise ShapeError(f"batch axis {axis} of {name!r} is outside its shape {shape}", input=name)
        maxima[name] = shape[axis]
    if len(set(maxima.values())) > 1:
        raise ShapeError("the inputs that carry the batch give different maximum batches ("
                         + ", ".join(f"{k}: {v}" for k, v in maxima.items()) + "): every one is the same N",
                         input=next(iter(maxima)), got=maxima)
    return next(iter(maxima.values()))


def _with_batch(shape: tuple, axis: int | None, n: int) -> tuple:
    return tuple(shape) if axis is None else tuple(n if i == axis else d for i, d in enumerate(shape))


def _message(e: ShapeError) -> str:
    """The error's own text without its `node (op): ` prefix."""
    text = str(e)
    prefix = f"{e.node} ({e.op}): " if e.op else f"{e.node}: "
    return text[len(prefix):] if e.node is not None and text.startswith(prefix) else text


HINT = ("with a dynamic batch every value keeps the batch in one dimension as k*N or does not depend on it "
        "(a Reshape keeps it with 0 or -1 in the batch's place, not its number)")


def _failed_at(e: ShapeError, graph: Graph, at_max: Graph, n: int, maximum: int) -> ShapeError:
    """A shape rule that holds at the maximum but fails at batch n: the batch is mixed into a fixed size."""
    node = next((x for x in graph.nodes if x.name == e.node), None)
    seen = f"holds at N={maximum}"
    if node is not None and not node.is_variable and at_max.nodes[node.id].out_types is not None:
        shape = tuple(at_max.nodes[node.id].out_types[0].shape)
        seen = f"gives {at_max.output_name(Ref(node.id))} {shape} at N={maximum}"
    return ShapeError(f"the batch is mixed into a fixed size: the shape rule {seen} and fails at N={n} "
                      f"({_message(e)}); {HINT}", node=e.node, op=e.op, input=e.input, expected=e.expected, got=e.got)


def _classify(graph: Graph, node: Node, index: int, ns: tuple, shapes: list) -> BatchAxis | None:
    """The BatchAxis of one value from its shapes at the sample batches `ns`; ShapeError if it has none."""
    def fail(why: str):
        name = graph.output_name(Ref(node.id, index))
        seen = ", ".join(f"{tuple(s)} at N={n}" for n, s in zip(ns, shapes))
        where = f"output {name!r}" if not node.is_variable else f"variable {name!r}"
        raise ShapeError(f"{where} has shape {seen}: {why}; {HINT}", node=node.name,
                         op=None if node.is_variable else node.op, input=name,
                         expected="one dimension k*N, the others constant", got=tuple(tuple(s) for s in shapes))

    if len({len(s) for s in shapes}) > 1:
        fail("its rank changes with the batch")
    batch = []
    for axis in range(len(shapes[0])):
        dims = [s[axis] for s in shapes]
        if len(set(dims)) == 1:
            continue
        k, r = divmod(dims[0], ns[0])
        if r or k < 1 or any(d != k * n for d, n in zip(dims, ns)):
            fail(f"dimension {axis} is not a multiple k*N of the batch")
        batch.append(BatchAxis(axis, k))
    if len(batch) > 1:
        fail(f"dimensions {', '.join(str(b.axis) for b in batch)} all depend on the batch")
    return batch[0] if batch else None


def _check_params(graph: Graph, typed: Graph, axes: dict, batch_axes: dict) -> None:
    """Parameters and aux states have one shape for every batch: bound once, they cannot follow N. Labels
    (typed.inputs) are per-call inputs and may carry the batch."""
    for v in graph.variables:
        b = axes.get((v.id, 0))
        if b is None or v.name in batch_axes or v.name in typed.inputs:
            continue
        user, name = next((u, nm) for u in graph.nodes if not u.is_variable
                          for nm, r in zip(u.opdef.inputs(u.params), u.inputs) if r.node == v.id)
        shape = typed.nodes[v.id].out_types[0].shape
        fix = (f"make it a per-call input (--shape {v.name}="
               + ",".join(("?" if i == b.axis else "") + str(d) for i, d in enumerate(shape)) + ") or "
               if b.factor == 1 else "")
        raise ShapeError(f"input {name!r} is {v.name!r}, a parameter (bound once) whose shape depends on the batch: "
                         f"{format_shape(shape, b)}; {fix}keep the batch out of it", node=user.name, op=user.op,
                         input=name, expected="a shape independent of the batch", got=format_shape(shape, b))


def split_batch_marks(shapes: dict) -> tuple[dict[str, tuple], dict[str, int], int | None]:
    """Input shapes whose batch dimension is marked, as `Symbol.infer_shape` and `--shape` take them: a
    dimension '?64' (a string) is the batch with maximum 64, '?' or None the batch with no maximum given;
    at most one per input. Returns the shapes at the maximum (UNBOUNDED_SAMPLE where none is given), the
    batch axis of each marked input, and the maximum (None: none given)."""
    concrete, axes, maxima = {}, {}, set()
    for name, shape in shapes.items():
        dims = []
        for axis, d in enumerate(tuple(shape)):
            if d is None or (isinstance(d, str) and d.startswith("?")):
                if name in axes:
                    raise ShapeError(f"shape {tuple(shape)} of {name!r} marks two batch dimensions; the batch is one "
                                     "dimension of an input", input=name)
                axes[name] = axis
                if isinstance(d, str) and d != "?":
                    try:
                        m = int(d[1:])
                    except ValueError:
                        m = 0
                    if m < 1:
                        raise ShapeError(f"{d!r} in the shape of {name!r}: expected '?' and the maximum batch, "
                                         "as '?64'", input=name)
                    maxima.add(m)
                dims.append(None)
            else:
                dims.append(d)
        concrete[name] = dims
    if len(maxima) > 1:
        raise ShapeError(f"the inputs give different maximum batches ({', '.join(map(str, sorted(maxima)))}): "
                         "every marked dimension is the same N", got=sorted(maxima))
    maximum = next(iter(maxima)) if maxima else None
    fill = maximum or UNBOUNDED_SAMPLE
    return ({k: tuple(fill if d is None else d for d in v) for k, v in concrete.items()}, axes,
            maximum if axes else None)
