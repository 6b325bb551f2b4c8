"""MXNet `*-symbol.json` <-> Graph.

Reads every layout MXNet 1.x writes (nnvm `SaveJSON`): per-node `attrs`, legacy `attr` and pre-nnvm `param`
(merged), inputs as `[node, index, version]` or `[node, index]`, optional `node_row_ptr`, `control_deps`,
graph `attrs` in dmlc's `[type, value]` encoding. Old hidden keys (`lr_mult`, `ctx_group`, ...) are renamed to
`__key__` as MXNet's `UpgradeJSON_FixParsing` does. Every structural fault raises GraphError naming the node.
Writing produces JSON that MXNet 1.9 loads back: same node order, names, attrs and `mxnet_version`.
Attribute *meaning* is not checked here: that is the op's attrs dataclass (bind).
"""
from __future__ import annotations

import json
import os
from typing import Any

from mxcc.errors import GraphError
from mxcc.graph.ir import VARIABLE, Graph, Node, Ref
from mxcc.ops import REGISTRY

MXNET_VERSION = 10901   # what we write: MXNet 1.9.1
_HIDDEN_KEYS = ("ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage")


def load_json(source: str | bytes | os.PathLike, *, name: str = "<json>") -> Graph:
    """Parse MXNet symbol JSON given as text (str or UTF-8 bytes) or as a path to a file."""
    text = source
    if isinstance(source, os.PathLike) or (isinstance(source, str) and not source.lstrip().startswith(("{", "["))):
        name = os.fspath(source)
        try:
            with open(source, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise GraphError(f"cannot read symbol file {name!r}: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise GraphError(f"{name}: not UTF-8 text (byte {e.start}: {e.reason})") from None
        except ValueError as e:          # a path with a NUL byte
            raise GraphError(f"cannot read symbol file {name!r}: {e}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise GraphError(f"{name}: malformed JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except UnicodeDecodeError as e:      # bytes given
        raise GraphError(f"{name}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except RecursionError:
        raise GraphError(f"{name}: JSON nested too deeply to be a symbol file") from None
    except ValueError as e:              # e.g. an integer beyond Python's int/str conversion limit
        raise GraphError(f"{name}: malformed JSON: {e}") from None
    return graph_from_dict(doc, name=name)


def graph_from_dict(doc: Any, *, name: str = "<json>") -> Graph:
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise GraphError(f"{name}: not an MXNet symbol JSON (expected an object with a 'nodes' list)")
    raw_nodes = doc["nodes"]
    nodes = []
    n_outputs: list[int | None] = []
    for i, rn in enumerate(raw_nodes):
        node = _parse_node(i, rn, raw_nodes, name)
        nodes.append(node)
    n_outputs = _row_counts(doc, len(nodes), name)
    for node in nodes:
        for r in node.inputs:
            if n_outputs is not None and r.index >= n_outputs[r.node]:
                raise GraphError(f"input [{r.node}, {r.index}] refers to output {r.index} of node "
                                 f"{nodes[r.node].name!r}, which has {n_outputs[r.node]} output(s)",
                                 node=node.name, op=node.op)
    _check_arg_nodes(doc, nodes, name)
    heads = tuple(_parse_entry(h, len(nodes), f"{name}: heads") for h in _list(doc, "heads", name))
    if not heads:
        raise GraphError(f"{name}: 'heads' is empty: the graph has no outputs")
    graph_attrs = doc.get("attrs", {})
    if not isinstance(graph_attrs, dict):
        raise GraphError(f"{name}: graph 'attrs' must be an object")
    return Graph(nodes=tuple(nodes), heads=heads, attrs=tuple(graph_attrs.items()))


def _list(doc: dict, key: str, name: str) -> list:
    v = doc.get(key, [])
    if not isinstance(v, list):
        raise GraphError(f"{name}: '{key}' must be a list, got {type(v).__name__}")
    return v


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _parse_node(i: int, rn: Any, raw_nodes: list, fname: str) -> Node:
    if not isinstance(rn, dict):
        raise GraphError(f"{fname}: node #{i} is not an object")
    op, nname = rn.get("op"), rn.get("name")
    if not isinstance(op, str) or not isinstance(nname, str):
        raise GraphError(f"{fname}: node #{i} needs string 'op' and 'name' fields (got op={op!r}, name={nname!r})")
    attrs: dict[str, str] = {}
    for key in ("param", "attr", "attrs"):           # later spellings win, as in nnvm's loader
        a = rn.get(key)
        if a is None:
            continue
        if not isinstance(a, dict):
            raise GraphError(f"'{key}' must be an object of strings", node=nname, op=op)
        for k, v in a.items():
            try:
                attrs[f"__{k}__" if k in _HIDDEN_KEYS else k] = v if isinstance(v, str) else json.dumps(v)
            except RecursionError:
                raise GraphError(f"attribute {k!r} is nested too deeply", node=nname, op=op) from None
    raw_inputs = rn.get("inputs", []) or []
    if not isinstance(raw_inputs, list):
        raise GraphError(f"'inputs' must be a list of [node, index, version], got {raw_inputs!r}",
                         node=nname, op=op)
    inputs = tuple(_parse_entry(e, i, f"node {nname!r} ({op}): input", earlier_only=True, raw_nodes=raw_nodes)
                   for e in raw_inputs)
    if op == VARIABLE and inputs:
        raise GraphError("a variable ('null' op) cannot have inputs", node=nname)
    deps = rn.get("control_deps", []) or []
    if not isinstance(deps, list) or not all(_is_int(d) and 0 <= d < i for d in deps):
        raise GraphError(f"control_deps {deps!r} must be a list naming earlier nodes", node=nname, op=op)
    if rn.get("subgraphs"):
        raise GraphError("nodes with subgraphs (control flow, fused subgraph ops) are not supported",
                         node=nname, op=op)
    return Node(id=i, name=nname, op=op, attrs=tuple(attrs.items()), inputs=inputs,
                control_deps=tuple(deps))


def _parse_entry(e: Any, limit: int, what: str, earlier_only: bool = False, raw_nodes: list = ()) -> Ref:
    if not isinstance(e, list) or len(e) not in (2, 3) or not all(_is_int(x) for x in e):
        raise GraphError(f"{what} {e!r} must be [node, index] or [node, index, version]")
    node, index = e[0], e[1]
    if earlier_only and limit <= node < len(raw_nodes):     # nodes are in topological order
        if node == limit:
            raise GraphError(f"{what} {e!r} refers to the node itself: a cycle")
        later = raw_nodes[node]
        later = repr(later.get("name")) if isinstance(later, dict) else "?"
        raise GraphError(f"{what} {e!r} refers to later node {node} ({later}): a forward reference "
                         f"(a cycle, or nodes not in topological order; expected an earlier node)")
    if not 0 <= node < limit:
        where = "an earlier node" if earlier_only else f"a node id in 0..{limit - 1}"
        raise GraphError(f"{what} {e!r} refers to missing node {node} (expected {where})")
    if index < 0:
        raise GraphError(f"{what} {e!r} has a negative output index")
    return Ref(node, index, e[2] if len(e) == 3 else 0)


def _row_counts(doc: dict, n: int, name: str) -> list[int] | None:
    rp = doc.get("node_row_ptr")
    if rp is None:
        return None
    if (not isinstance(rp, list) or len(rp) != n + 1 or rp[0] != 0
            or any(not _is_int(x) for x in rp) or any(b < a for a, b in zip(rp, rp[1:]))):
        raise GraphError(f"{name}: 'node_row_ptr' must be {n + 1} non-decreasing ints from 0")
    return [b - a for a, b in zip(rp, rp[1:])]


def _check_arg_nodes(doc: dict, nodes: list[Node], name: str) -> None:
    for a in _list(doc, "arg_nodes", name):
        if not _is_int(a) or not 0 <= a < len(nodes):
            raise GraphError(f"{name}: arg_nodes entry {a!r} is not a node id")
        if not nodes[a].is_variable:
            raise GraphError(f"listed in arg_nodes but is an operator, not a variable",
                             node=nodes[a].name, op=nodes[a].op)
    seen: dict[str, int] = {}
    for n in nodes:
        if n.is_variable:
            if n.name in seen:
                raise GraphError(f"two variables are named {n.name!r} (nodes {seen[n.name]} and {n.id})")
            seen[n.name] = n.id


# -- writing ---------------------------------------------------------------------------------------------
def graph_to_dict(g: Graph) -> dict:
    nodes = []
    for n in g.nodes:
        d: dict[str, Any] = {"op": n.op, "name": n.name}
        if n.attrs:
            d["attrs"] = dict(n.attrs)
        d["inputs"] = [[r.node, r.index, r.version] for r in n.inputs]
        if n.control_deps:
            d["control_deps"] = list(n.control_deps)
        nodes.append(d)
    attrs = dict(g.attrs)
    attrs["mxnet_version"] = ["int", MXNET_VERSION]
    doc = {"nodes": nodes, "arg_nodes": [n.id for n in g.nodes if n.is_variable]}
    if all(n.is_variable or n.op in REGISTRY for n in g.nodes):   # optional for MXNet's loader
        row_ptr = [0]
        for n in g.nodes:
            row_ptr.append(row_ptr[-1] + n.num_outputs)
        doc["node_row_ptr"] = row_ptr
    doc["heads"] = [[h.node, h.index, h.version] for h in g.heads]
    doc["attrs"] = attrs
    return doc


def dump_json(g: Graph) -> str:
    """MXNet-loadable JSON text (2-space indent, as `json.dump` of MXNet's structure)."""
    return json.dumps(graph_to_dict(g), indent=2)
