"""The Symbol API (`mxcc.sym`): build graphs in Python exactly as with `mx.sym`.

A Symbol is a thin handle on its output entries; the graph is the DFS post-order of everything they reach
(nnvm's order, so `tojson()` matches what MXNet writes). One builder function per registered operator is
generated from the registry (`FullyConnected(data, num_hidden=128, name="fc1")`); inputs not given become
variables named `<node>_<input>` carrying the op's attributes, and unnamed nodes get MXNet's automatic names
(`fullyconnected0`) from a NameManager.
"""
from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

from mxcc.errors import AttrError, IncompleteShapeError
from mxcc.files import atomic_write
from mxcc.graph import Graph, Node, Ref, dump_json, load_json as _load_graph
from mxcc.graph.ir import VARIABLE
from mxcc.ops import REGISTRY, attrs as attrs_parser, get_op
from mxcc.passes import bind, infer_shapes
from mxcc.passes.infer_batch import infer_batch, split_batch_marks, symbolic_shape
from mxcc.types import DType


class NameManager:
    """MXNet's automatic names: `<hint><counter>`, one counter per hint, for the current manager."""
    current: "NameManager"

    def __init__(self):
        self._counter: dict[str, int] = {}
        self._old = None

    def get(self, name: str | None, hint: str) -> str:
        if name:
            return name
        i = self._counter.get(hint, 0)
        self._counter[hint] = i + 1
        return f"{hint}{i}"

    def __enter__(self):
        self._old, NameManager.current = NameManager.current, self
        return self

    def __exit__(self, *exc):
        NameManager.current = self._old


NameManager.current = NameManager()


class _SymNode:
    """A node of the Python-built DAG (identity matters: the same object is the same graph node)."""
    __slots__ = ("op", "name", "attrs", "inputs")

    def __init__(self, op: str, name: str, attrs: dict[str, str], inputs: list[tuple["_SymNode", int]]):
        self.op, self.name, self.attrs, self.inputs = op, name, attrs, inputs


@dataclass(frozen=True)
class Symbol:
    _outputs: tuple  # tuple[(_SymNode, index)]

    # -- the graph ---------------------------------------------------------------------------------------
    @property
    def graph(self) -> Graph:
        order: list[_SymNode] = []
        index: dict[int, int] = {}

        def visit(n: _SymNode):
            stack = [(n, False)]
            while stack:
                cur, done = stack.pop()
                if id(cur) in index:
                    continue
                if done:
                    index[id(cur)] = len(order)
                    order.append(cur)
                    continue
                stack.append((cur, True))
                for child, _ in reversed(cur.inputs):
                    if id(child) not in index:
                        stack.append((child, False))

        for n, _ in self._outputs:
            visit(n)
        nodes = tuple(Node(id=i, name=n.name, op=n.op, attrs=tuple(n.attrs.items()),
                           inputs=tuple(Ref(index[id(c)], k) for c, k in n.inputs))
                      for i, n in enumerate(order))
        return Graph(nodes=nodes, heads=tuple(Ref(index[id(n)], k) for n, k in self._outputs))

    @property
    def name(self) -> str | None:
        return self._outputs[0][0].name if len(self._outputs) == 1 else None

    def attr(self, key: str) -> str | None:
        return self._outputs[0][0].attrs.get(key) if len(self._outputs) == 1 else None

    def _aux_ids(self, g: Graph) -> set[int]:
        aux = set()
        for n in g.nodes:
            if not n.is_variable:
                op = get_op(n.op, n.name)
                params = attrs_parser.parse(op.attrs, n.attrs, node=n.name, op=n.op)
                for name, r in zip(op.inputs(params), n.inputs):
                    if name in op.aux(params):
                        aux.add(r.node)
        return aux

    def list_arguments(self) -> list[str]:
        g = self.graph
        aux = self._aux_ids(g)
        return [n.name for n in g.variables if n.id not in aux]

    def list_auxiliary_states(self) -> list[str]:
        g = self.graph
        aux = self._aux_ids(g)
        return [n.name for n in g.variables if n.id in aux]

    def list_inputs(self) -> list[str]:
        return [n.name for n in self.graph.variables]

    def list_outputs(self) -> list[str]:
        g = bind(self.graph)
        return [g.output_name(h) for h in g.heads]

    def infer_shape(self, *args, **kwargs):
        """(arg_shapes, out_shapes, aux_shapes) as MXNet answers; (None, None, None) if incomplete.

        mxcc's extension: a dimension given as '?64' (or '?', or None: no maximum) is the batch N, and
        every shape that depends on it has a BatchDim there, printed `N` or `12N` (k*N: k rows per sample):
        `infer_shape(data=('?64', 784))` -> `([(N, 784), (128, 784), ...], [(N, 10)], [])`. A network that
        mixes the batch into other dimensions raises ShapeError naming the node (passes/infer_batch.py)."""
        shapes = dict(zip(self.list_arguments(), args)) if args else {}
        shapes.update(kwargs)
        shapes, batch_axes, maximum = split_batch_marks(shapes)
        g = self.graph
        try:
            typed = infer_shapes(g, shapes)
            batch = infer_batch(g, shapes, batch_axes) if batch_axes else None
        except IncompleteShapeError:
            return None, None, None
        aux = self._aux_ids(g)
        var = [n for n in typed.nodes if n.is_variable]
        if any(n.out_types is None for n in var):
            return None, None, None

        def shape(ref: Ref) -> tuple:
            s = typed.type_of(ref).shape
            return s if batch is None else symbolic_shape(s, batch.of(ref), maximum)

        arg_shapes = [shape(Ref(n.id)) for n in var if n.id not in aux]
        aux_shapes = [shape(Ref(n.id)) for n in var if n.id in aux]
        out_shapes = [shape(h) for h in typed.heads]
        return arg_shapes, out_shapes, aux_shapes

    def tojson(self) -> str:
        return dump_json(self.graph)

    def save(self, fname: str) -> None:
        atomic_write(fname, self.tojson())

    # -- composition -------------------------------------------------------------------------------------
    def __getitem__(self, i: int) -> "Symbol":
        return Symbol((self._outputs[i],))

    def __len__(self) -> int:
        return len(self._outputs)

    def __iter__(self):
        return (Symbol((o,)) for o in self._outputs)

    def _binary(self, other, op: str, scalar_op: str, hint: str, scalar_hint: str):
        if isinstance(other, Symbol):
            return _make(op, [self, other], {}, None, hint=hint)
        if isinstance(other, (int, float)):
            return _make(scalar_op, [self], {"scalar": str(float(other) if isinstance(other, float) else other)},
                         None, hint=scalar_hint)
        return NotImplemented

    def __add__(self, o):
        return self._binary(o, "elemwise_add", "_plus_scalar", "_plus", "_plusscalar")

    __radd__ = __add__

    def __sub__(self, o):
        return self._binary(o, "elemwise_sub", "_minus_scalar", "_minus", "_minusscalar")

    def __rsub__(self, o):
        if isinstance(o, (int, float)):
            return _make("_rminus_scalar", [self], {"scalar": str(o)}, None, hint="_rminusscalar")
        return NotImplemented

    def __mul__(self, o):
        return self._binary(o, "elemwise_mul", "_mul_scalar", "_mul", "_mulscalar")

    __rmul__ = __mul__

    def __truediv__(self, o):
        return self._binary(o, "elemwise_div", "_div_scalar", "_div", "_divscalar")

    def __rtruediv__(self, o):
        if isinstance(o, (int, float)):
            return _make("_rdiv_scalar", [self], {"scalar": str(o)}, None, hint="_rdivscalar")
        return NotImplemented

    def __neg__(self):
        return _make("negative", [self], {}, None)

    def __repr__(self) -> str:
        names = ", ".join(n.name for n, _ in self._outputs)
        return f"<Symbol {names}>" if len(self._outputs) == 1 else f"<Symbol group [{names}]>"


def Variable(name: str, attr: dict | None = None, shape=None, lr_mult=None, wd_mult=None, dtype=None,
             init=None, stype=None, **kwargs) -> Symbol:
    """A graph input or parameter, with MXNet's hidden attributes (`__shape__`, `__lr_mult__`, ...)."""
    if not isinstance(name, str) or not name:
        raise AttrError("a Variable needs a non-empty string name")
    attrs = dict(attr or {})
    if shape is not None:
        attrs["__shape__"] = str(tuple(shape))
    if lr_mult is not None:
        attrs["__lr_mult__"] = str(lr_mult)
    if wd_mult is not None:
        attrs["__wd_mult__"] = str(wd_mult)
    if dtype is not None:
        import numpy as np
        attrs["__dtype__"] = str(DType[np.dtype(dtype).name].value)
    if init is not None:
        attrs["__init__"] = init if isinstance(init, str) else init.dumps()
    if stype is not None:
        attrs["__storage_type__"] = str(stype)
    for k, v in kwargs.items():
        attrs[k if k.startswith("__") else f"__{k}__"] = str(v)
    return Symbol(((_SymNode(VARIABLE, name, attrs, []), 0),))


var = Variable


def Group(symbols) -> Symbol:
    """One symbol with the outputs of all of `symbols`, in order."""
    outs = []
    for s in symbols:
        if not isinstance(s, Symbol):
            raise TypeError(f"Group expects Symbols, got {type(s).__name__}")
        outs.extend(s._outputs)
    return Symbol(tuple(outs))


def load_json(text: str) -> Symbol:
    return _from_graph(_load_graph(text))


def load(fname: str) -> Symbol:
    return _from_graph(_load_graph(fname if not str(fname).lstrip().startswith("{") else str(fname)))


def _from_graph(g: Graph) -> Symbol:
    made: list[_SymNode] = []
    for n in g.nodes:
        made.append(_SymNode(n.op, n.name, dict(n.attrs), [(made[r.node], r.index) for r in n.inputs]))
    return Symbol(tuple((made[h.node], h.index) for h in g.heads))


def _make(op_name: str, args: list, kwargs: dict, name: str | None, *, hint: str | None = None,
          attr: dict | None = None) -> Symbol:
    """Apply a registered op: positional symbols fill inputs in order, keyword symbols by name."""
    op = get_op(op_name)
    canonical = op.name
    sym_kwargs = {k: v for k, v in kwargs.items() if isinstance(v, Symbol)}
    raw = {k: _attr_str(v) for k, v in kwargs.items() if not isinstance(v, Symbol) and v is not None}
    if "num_args" in _field_names(op.attrs) and "num_args" not in raw:
        raw["num_args"] = str(len(args))          # MXNet's key_var_num_args: variadic ops count their inputs
    name = NameManager.current.get(name, hint or op_name.lower())
    params = attrs_parser.parse(op.attrs, raw, node=name, op=canonical)
    input_names = op.inputs(params)
    for k in sym_kwargs:
        if k not in input_names:
            raise AttrError(f"{k!r} is not an input (inputs: {', '.join(input_names)})", node=name, op=canonical)
    if len(args) > len(input_names):
        raise AttrError(f"got {len(args)} positional inputs, expected at most {len(input_names)} "
                        f"({', '.join(input_names)})", node=name, op=canonical)
    given = dict(zip(input_names, args))
    given.update(sym_kwargs)
    inputs = []
    for i, in_name in enumerate(input_names):
        s = given.get(in_name)
        if s is None:
            if i == 0 and in_name in ("data", "lhs"):
                raise AttrError(f"input {in_name!r} is required", node=name, op=canonical)
            var_attrs = {} if in_name in op.labels else dict(raw)
            s = Variable(f"{name}_{in_name}", attr=var_attrs)
        if not isinstance(s, Symbol) or len(s._outputs) != 1:
            raise AttrError(f"input {in_name!r} must be a single-output Symbol", node=name, op=canonical)
        inputs.append(s._outputs[0])
    all_attrs = {**raw, **{k: str(v) for k, v in (attr or {}).items()}}
    node = _SymNode(canonical, name, all_attrs, inputs)
    n_visible = op.num_outputs(params) - op.num_hidden(params)
    return Symbol(tuple((node, k) for k in range(n_visible)))


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _attr_str(v) -> str:
    if isinstance(v, bool):
        return str(v)
    return attrs_parser.format_value(v)


def _builder(op_name: str):
    def build(*args, name: str | None = None, attr: dict | None = None, **kwargs) -> Symbol:
        return _make(op_name, list(args), kwargs, name, attr=attr)
    build.__name__ = build.__qualname__ = op_name
    build.__doc__ = REGISTRY[op_name].doc or f"The MXNet operator {op_name}."
    return build


def _install_builders() -> None:
    mod = sys.modules[__name__]
    for op_name in REGISTRY:
        if not hasattr(mod, op_name):
            setattr(mod, op_name, _builder(op_name))


_install_builders()
