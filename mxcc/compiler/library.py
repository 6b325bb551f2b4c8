"""The C library of a compiled network: what `lib<net>.a`, `lib<net>.so` and `include/` are made of.

- `describe(graph)`: the structure of the symbol the network was compiled from (variables by name, operators by
  op spellings and canonical attribute values, the wiring, the heads), which the library's MXPredCreate compares
  with the symbol JSON it is given (runtime_c/capi/symbol.c). `canonical` is the Python twin of
  `mxcc_attr_canonical`: both must give the same text (tests/capi/test_symbol_check.py compares them).
- `render_glue`: `<net>_lib.c` (templates/lib.c.j2), the description as C tables and the predict API's binding
  to the network.
- `exports(net)`: the symbols the shared library exports (a linker version script): the network's C API, the host
  functions of mxcc_runtime.h, the params reader and MXNet's predict API. Everything else (the kernels, the GEMM,
  the convolutions) is local to the library.
- `include_files(net_h)`: `include/`: `<net>.h`, `mxcc_runtime.h` and the runtime headers it includes, and
  `mxnet/c_predict_api.h`.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from mxcc.codegen.cnames import c_string
from mxcc.files import resource_dir
from mxcc.graph import Graph
from mxcc.ops import get_op
from mxcc.ops.attrs import _schema, format_value

_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_SPACE = re.compile(r"[ \t\n\r\v\f]")


def _number(text: str) -> str:
    v = float(text)
    for prec in (15, 16, 17):
        s = "%.*g" % (prec, v)
        if float(s) == v:
            return s
    return s


def _token(t: str) -> str:
    if _NUMBER.fullmatch(t):
        return _number(t)
    if t.isascii() and t.lower() in ("true", "false"):
        return "1" if t.lower() == "true" else "0"
    return t


def _wrapped(s: str) -> bool:
    """s is '(' ... ')' with those two parentheses matching each other."""
    if len(s) < 2 or s[0] != "(":
        return False
    depth = 0
    for k, ch in enumerate(s):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return k == len(s) - 1
    return False


def canonical(text: str) -> str:
    """An attribute value's canonical text (runtime_c/capi/mxcc_predict.h, mxcc_attr_canonical): whitespace
    dropped, [] read as (), outer parentheses and trailing commas dropped, numbers printed as the shortest of
    %.15g/%.16g/%.17g that reads back the same, true/false (any case) as 1/0."""
    s = _SPACE.sub("", text).replace("[", "(").replace("]", ")")
    while _wrapped(s):
        s = s[1:-1]
    s = re.sub(r",+(?=\)|$)", "", s)
    return re.sub(r"[^(),]+", lambda m: _token(m.group(0)), s)


def _attrs_of(node) -> tuple[list[tuple[str, str, str | None]], str]:
    """(key, canonical value, canonical default or None) for every attribute of the node's op, and the keys the
    op accepts and ignores ('|'-separated)."""
    cls = get_op(node.op, node.name).attrs
    _, fields = _schema(cls)
    given = dict(node.attrs)
    out = []
    for name, f in fields.items():
        if f.default is not dataclasses.MISSING:
            default = format_value(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = format_value(f.default_factory())
        else:
            default = None
        value = given.get(name, default)
        out.append((name, canonical(value), None if default is None else canonical(default)))
    return out, "|".join(getattr(cls, "IGNORED", ()))


def describe(graph: Graph) -> dict:
    """The symbol's structure as plain data for templates/lib.c.j2 (strings already C literals)."""
    nodes, inputs, attrs = [], [], []
    for n in graph.nodes:
        if n.is_variable:
            ops, ignored, node_attrs = "null", "", []
        else:
            op = get_op(n.op, n.name)
            ops = "|".join(dict.fromkeys((n.op, op.name, *op.aliases)))
            node_attrs, ignored = _attrs_of(n)
        nodes.append(dict(id=n.id, name=c_string(n.name), comment=f"{n.name} ({n.op})".replace("*/", "* /"),
                          ops=c_string(ops), ignored=c_string(ignored), first_input=len(inputs),
                          num_inputs=len(n.inputs), first_attr=len(attrs), num_attrs=len(node_attrs)))
        inputs += [(r.node, r.index) for r in n.inputs]
        attrs += [dict(key=c_string(k), value=c_string(v), dflt="NULL" if d is None else c_string(d))
                  for k, v, d in node_attrs]
    return dict(nodes=nodes, inputs=inputs, attrs=attrs, heads=[(h.node, h.index) for h in graph.heads])


def render_glue(env, net: str, graph: Graph, source: str) -> str:
    """<net>_lib.c: the predict API's view of the network."""
    return env.get_template("lib.c.j2").render(net=net, source=source, **describe(graph))


# mxcc_runtime.h's functions a host calls (the rest of the runtime is the kernels' business)
RUNTIME_EXPORTS = (
    "mxcc_ctx_create", "mxcc_ctx_create_shared", "mxcc_ctx_reserve_threads", "mxcc_ctx_free", "mxcc_ctx_slots",
    "mxcc_ctx_threads", "mxcc_ctx_hyper", "mxcc_ctx_set_seed", "mxcc_default_threads", "mxcc_set_num_threads",
    "mxcc_get_num_threads", "mxcc_prof_set_capacity", "mxcc_prof_set_enabled", "mxcc_prof_drain",
    "mxcc_prof_dropped", "mxcc_prof_now_ns", "mxcc_prof_write_trace",
    "mxcc_api_*", "mxcc_params_*",
)
PREDICT_EXPORTS = ("MXGetLastError", "MXPred*", "MXNDList*")


def exports(net: str) -> str:
    """The shared library's linker version script: these global, everything else local."""
    names = [f"{net}_*", *RUNTIME_EXPORTS, *PREDICT_EXPORTS]
    return "{\n  global:\n" + "".join(f"    {n};\n" for n in names) + "  local:\n    *;\n};\n"


def _includes(path: Path) -> list[str]:
    return re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(), re.M)


def include_files() -> dict[str, Path]:
    """include/'s runtime files (name under include/ -> source): mxcc_runtime.h with every runtime header it
    includes, and MXNet's c_predict_api.h (the network's <net>.h is added by the caller)."""
    root = resource_dir("runtime_c")
    out: dict[str, Path] = {}
    todo = ["mxcc_runtime.h"]
    while todo:
        rel = todo.pop()
        if rel in out:
            continue
        path = (root / rel).resolve()
        out[rel] = path
        for inc in _includes(path):
            # relative to the including file first (as the compiler looks), else to runtime_c/
            cand = (path.parent / inc).resolve()
            name = str(cand.relative_to(root.resolve())) if cand.exists() else inc
            todo.append(name)
    out["mxnet/c_predict_api.h"] = root / "capi" / "include" / "mxnet" / "c_predict_api.h"
    return dict(sorted(out.items()))
