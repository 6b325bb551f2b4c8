"""Property-based fuzzing of the readers (issue 16, point 6): symbol JSON and `.params`/`.npz`.

Random and mutated inputs must end in success or an `MxccError` with a non-empty message: never a crash
(a raw KeyError/IndexError/AttributeError/struct.error/UnicodeDecodeError/OverflowError...), a hang, a
RecursionError, or a MemoryError from a huge allocation. Every call under test runs with its address space
capped at what the process already has plus `ALLOC_HEADROOM`, so "allocate what a corrupted header claims"
shows up as a MemoryError (a failure) instead of a slow swap; hypothesis' `deadline` catches hangs and
quadratic blow-ups.

Symbol JSON: arbitrary JSON values, text and bytes into `load_json`; structured mutations of real MXNet
files (tests/data) into `load_json` and then `plan_network`, the whole pass pipeline a compile runs before C.
Params: random bytes, real files truncated, flipped and with their count/length/ndim/shape/dtype fields
overwritten (targeted by parsing the layout of formats.md §2.2 here, independently of mxcc.params), and
`.npz` files written by `save_params` corrupted the same way.

Reproducible by default (derandomize, no example database: nothing is written to .hypothesis/). For a
longer, randomized hunt: MXCC_FUZZ_SCALE=20 python -m pytest tests/unit/test_fuzz_readers.py
"""
from __future__ import annotations

import io
import json
import os
import struct
import tempfile
import traceback
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mxcc import symbol as sym  # noqa: E402
from mxcc.compiler.driver import plan_network  # noqa: E402
from mxcc.errors import (AttrError, GraphError, IncompleteShapeError, MxccError, ParamsError,  # noqa: E402
                         UnsupportedOpError)
from mxcc.graph import dump_json, load_json  # noqa: E402
from mxcc.ops import REGISTRY  # noqa: E402
from mxcc.ops import attrs as attrs_parser  # noqa: E402
from mxcc.options import CompileOptions  # noqa: E402
from mxcc.passes import infer_shapes  # noqa: E402
from mxcc.params import load_params, save_params  # noqa: E402

try:
    import resource
except ImportError:                      # not POSIX: run without the allocation cap
    resource = None

DATA = Path(__file__).resolve().parents[1] / "data"
ALLOC_HEADROOM = 1 << 30                 # 1 GiB: more than any of these small inputs may legitimately need

_SCALE = float(os.environ.get("MXCC_FUZZ_SCALE", "1"))
FUZZ = settings(
    deadline=2000,                       # ms per example: a hang or a quadratic blow-up fails here
    derandomize="MXCC_FUZZ_SCALE" not in os.environ,
    database=None,                       # leave no .hypothesis/ folder behind
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    print_blob=True,
)


def examples(n: int) -> settings:
    return settings(FUZZ, max_examples=max(1, int(n * _SCALE)))


# ---- the property: success, or an MxccError that says something ------------------------------------

def _vm_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


@contextmanager
def _capped_allocation():
    """Cap the address space at the current size + ALLOC_HEADROOM while the code under test runs."""
    used = _vm_bytes() if resource is not None else 0
    if not used:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = used + ALLOC_HEADROOM
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY:
        cap = min(cap, soft)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _show(x, limit: int = 1500) -> str:
    text = x if isinstance(x, str) else repr(x)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def outcome(fn, *args, what: str, shown, expect: type = MxccError):
    """Run fn(*args): return its result or the expected error; anything else fails naming the input."""
    try:
        with _capped_allocation():
            return fn(*args)
    except expect as e:
        if not str(e).strip():
            raise AssertionError(f"{what}: {type(e).__name__} with an empty message\ninput: {_show(shown)}")
        return e
    except Exception as e:          # noqa: BLE001 -- RecursionError, MemoryError, KeyError... all fail
        raise AssertionError(f"{what}: raised {type(e).__name__}: {_show(str(e), 300)}\n"
                             f"input: {_show(shown)}\n{traceback.format_exc()}") from None


# ---- symbol JSON: arbitrary values, text and bytes ---------------------------------------------------

json_scalars = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
                | st.text(max_size=20))
json_values = st.recursive(
    json_scalars,
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(
        st.sampled_from(["nodes", "heads", "arg_nodes", "node_row_ptr", "attrs", "op", "name", "inputs",
                         "attr", "param", "control_deps", "subgraphs"]) | st.text(max_size=8), kids, max_size=6),
    max_leaves=40)
# values shaped like a symbol file, so that the structural checks behind the first one are reached too


def mostly(good, bad):
    """`good` nine times in ten, else `bad`."""
    return st.integers(0, 9).flatmap(lambda k: good if k else bad)


entries = mostly(st.tuples(st.integers(-1, 6), st.integers(-1, 2), st.just(0)).map(list),
                 st.lists(st.integers(-3, 6) | json_scalars, min_size=0, max_size=4))
raw_nodes = st.fixed_dictionaries(
    {"op": mostly(st.sampled_from(["null", "null", "FullyConnected", "Activation", "Convolution", "Flatten",
                                   "elemwise_add", "Concat", "SoftmaxOutput", "SliceChannel", "Dropout"]),
                  json_scalars),
     "name": mostly(st.sampled_from(["x", "w", "b", "fc", "a", "label", "x_weight"]), json_scalars),
     "inputs": mostly(st.lists(entries, max_size=3), json_values)},
    optional={"attrs": mostly(st.dictionaries(st.sampled_from(["num_hidden", "act_type", "kernel", "num_filter",
                                                               "no_bias", "__shape__", "dim", "num_args",
                                                               "num_outputs", "p"]),
                                              mostly(st.sampled_from(["1", "2", "(2, 2)", "relu", "True", "0.5",
                                                                      "(2, 3)"]), st.text(max_size=8)),
                                              max_size=3), json_values),
              "control_deps": mostly(st.lists(st.integers(-2, 6), max_size=2), json_values),
              "subgraphs": json_values})
symbol_like = st.fixed_dictionaries(
    {"nodes": st.lists(raw_nodes, min_size=1, max_size=6)},
    optional={"arg_nodes": mostly(st.lists(st.integers(-1, 7), max_size=6), json_values),
              "node_row_ptr": mostly(st.lists(st.integers(-1, 8), max_size=8), json_values),
              "attrs": st.dictionaries(st.text(max_size=8), json_values, max_size=3) | json_values}
).flatmap(lambda d: st.fixed_dictionaries(
    {**{k: st.just(v) for k, v in d.items()},
     "heads": mostly(st.just([[len(d["nodes"]) - 1, 0, 0]]), st.lists(entries, max_size=3) | json_values)}))


def _load_then_plan(text, shapes=None, opts=None):
    """load_json; when the graph loads, the passes a compile runs before C (with plausible shapes)."""
    g = outcome(load_json, text, what="load_json", shown=text)
    if isinstance(g, MxccError):
        return g
    outcome(dump_json, g, what="dump_json", shown=text)       # sym.load(...).tojson() writes it back
    if shapes is None:
        shapes = {n.name: (2, 3) for n in g.variables[:1]} or {"x": (2, 3)}
    return outcome(plan_network, g, shapes, opts or CompileOptions(), what="plan_network",
                   shown=f"{text}\nshapes={shapes} opts={opts}")


@examples(150)
@given(json_values)
def test_arbitrary_json_values(doc):
    _load_then_plan(json.dumps(doc))


@examples(150)
@given(symbol_like)
def test_symbol_shaped_json(doc):
    _load_then_plan(json.dumps(doc))


@examples(100)
@given(st.text(max_size=200) | st.sampled_from(["", "{", "[", "{}", "[]", "null", "\x00", "{\x00}", "\ufeff{}",
                                                 "{\"nodes\": [" + "1" * 5000 + "]}", "NaN", "{\"nodes\": NaN}"]))
def test_arbitrary_text(text):
    # text not starting with '{' or '[' is taken as a path: that must fail cleanly too
    outcome(load_json, text, what="load_json(text)", shown=text)
    outcome(load_json, "{" + text, what="load_json(text)", shown="{" + text)
    outcome(sym.load_json, "{" + text, what="sym.load_json", shown="{" + text)


@examples(100)
@given(st.binary(max_size=200) | st.builds(lambda b: b"{" + b, st.binary(max_size=100))
       | st.sampled_from([b"\xff\xfe{", b"\xfe\xff\x00{", b"{\xff}", b"\xef\xbb\xbf{}"]))
def test_arbitrary_bytes(data):
    outcome(load_json, data, what="load_json(bytes)", shown=data)


@examples(20)
@given(st.integers(100, 200_000), st.sampled_from("[{"))
def test_deeply_nested_json(depth, bracket):
    if bracket == "[":
        text = "[" * depth + "]" * depth
    else:
        text = '{"a": ' * depth + "1" + "}" * depth
    e = outcome(load_json, text, what="load_json(nested)", shown=f"{bracket} x {depth}")
    assert isinstance(e, GraphError)
    text = '{"nodes": [{"op": "null", "name": "x", "inputs": [], "attrs": {"a": ' + "[" * depth + "]" * depth
    text += "}}], \"heads\": [[0, 0, 0]]}"
    outcome(load_json, text, what="load_json(nested attr)", shown=f"attr {bracket} x {depth}")


@examples(10)
@given(st.text(min_size=1, max_size=50))
def test_path_that_is_not_a_file(name):
    with tempfile.TemporaryDirectory() as d:
        for p in (os.path.join(d, name.replace("/", "_").replace("\x00", "_")), d, name):
            outcome(load_json, p, what="load_json(path)", shown=p)
            outcome(sym.load, p, what="sym.load(path)", shown=p)


def _net(op_attrs: dict | None = None, op: str = "Activation", heads=None, var_attrs=None, **node_extra) -> str:
    nodes = [{"op": "null", "name": "x", "inputs": [], **({"attrs": var_attrs} if var_attrs else {})},
             {"op": op, "name": "a", "attrs": op_attrs or {"act_type": "relu"}, "inputs": [[0, 0, 0]],
              **node_extra}]
    return json.dumps({"nodes": nodes, "arg_nodes": [0], "heads": heads or [[1, 0, 0]]})


# Each input below once crashed a reader or a pass with something other than an MxccError.
FOUND = [
    ('{"nodes": [' + "1" * 5000 + "]}", GraphError, "malformed JSON"),             # ValueError: int digits
    ("\x00", GraphError, "cannot read symbol file"),                               # ValueError: NUL in path
    (b"\xff\xfe{", GraphError, "not UTF-8"),                                       # UnicodeDecodeError
    (b'{"nodes": "\xff"}', GraphError, "not UTF-8"),
    ('{"a": ' * 100_000, GraphError, "nested too deeply"),                         # RecursionError
    (_net({"act_type": "relu"}, inputs=5), GraphError, "'inputs' must be a list"),    # TypeError
    (_net(control_deps=3), GraphError, "control_deps 3 must be a list"),           # TypeError
    (_net({"num_hidden": "1e400"}, "FullyConnected"), AttrError, "'num_hidden'='1e400': expected an integer"),
    (_net({"kernel": "-" * 100_000 + "1", "num_filter": "1"}, "Convolution"), AttrError, "nested too deeply"),
    (_net(var_attrs={"__shape__": "(1e400,)"}), GraphError, "__shape__='(1e400,)' is not a shape"),
    (_net(var_attrs={"__shape__": "~" * 100_000 + "1"}), GraphError, "is not a shape"),
    (_net(heads=[[1, 2, 0]]), GraphError, "graph output #0 [1, 2] refers to output 2 of 'a', which has 1 output"),
    (_net({"act_type": "relu"}, inputs=[[0, 1, 0]]), GraphError, "a (Activation): input 'data' [0, 1] refers to "
                                                                 "output 1 of 'x', which has 1 output"),
    (_net({"num_args": str(10**12), "dim": "1"}, "Concat"), AttrError, "num_args must be between 1 and"),
    (_net({"num_outputs": str(10**12)}, "SliceChannel"), AttrError, "num_outputs must be between 1 and"),
    (_net({"act_type": "leaky"}, "_train_LeakyReLU"), UnsupportedOpError, "internal to mxcc"),
    (json.dumps({"nodes": [{"op": "null", "name": "x", "inputs": []}, {"op": "null", "name": "y", "inputs": []},
                           {"op": "relu", "name": "a", "inputs": [[0, 0, 0]]}], "heads": [[1, 0, 0]]}),
     IncompleteShapeError, "graph output 'y' is a variable with no shape"),        # TypeError in plan_memory
]


@pytest.mark.parametrize("text, error, words", FOUND, ids=range(len(FOUND)))
def test_inputs_fuzzing_found(text, error, words):
    with pytest.raises(error) as info, _capped_allocation():
        g = load_json(text)
        hinted = any(k == "__shape__" for n in g.nodes for k, _ in n.attrs)
        if hinted:                        # plan_network needs one shape; give none, so the hint is read
            infer_shapes(g, {})
        else:
            plan_network(g, {"x": (2, 3)}, CompileOptions())
    assert words in str(info.value)


def test_undecodable_file(tmp_path):
    p = tmp_path / "bad-symbol.json"
    p.write_bytes(b'{"nodes": [{"op": "null", "name": "\xe9"}]}')
    with pytest.raises(GraphError, match="not UTF-8"):
        load_json(p)


def test_sym_load_uses_the_same_reader(tmp_path):
    p = tmp_path / "net-symbol.json"
    p.write_text('{"nodes": [{"op": "null", "name": "x", "inputs": []}, '
                 '{"op": "Activation", "name": "a", "attrs": {"act_type": "relu"}, "inputs": [[1, 0, 0]]}], '
                 '"heads": [[1, 0, 0]]}')
    for load in (load_json, sym.load):
        with pytest.raises(GraphError, match="'a'.*(cycle|itself)"):
            load(p)
    with pytest.raises(GraphError, match="'a'.*(cycle|itself)"):
        sym.load_json(p.read_text())


# ---- symbol JSON: structured mutations of real files ------------------------------------------------

def _case(path: Path, shapes: dict) -> tuple[str, dict, dict]:
    return path.name, json.loads(path.read_text()), shapes


def _op_case(stem: str):
    path = DATA / "ops" / "cases" / f"{stem}-symbol.json"
    with np.load(DATA / "ops" / "cases" / f"{stem}.npz") as z:
        shapes = {k[4:]: tuple(z[k].shape) for k in z.files if k.startswith("arg:")}
    return _case(path, shapes)


def _model_case(name: str):
    rec = json.loads((DATA / "models" / name / "record.json").read_text())
    return _case(DATA / "models" / name / f"{name}-symbol.json", {rec["input_name"]: tuple(rec["input_shape"])})


OP_STEMS = ["Activation_relu", "Convolution_group2", "Pooling_avg_k3_s2_p1_incl", "Reshape_reverse_m1_0",
            "broadcast_div_a3_b1x3x1", "mean_all", "softmax_axis_neg1_4d", "Flatten_2d"]
OP_STEMS += sorted({p.name[:-len("-symbol.json")] for p in (DATA / "ops" / "cases").glob("*-symbol.json")
                    if p.name.split("_")[0] in ("BatchNorm", "Concat", "Deconvolution", "Embedding",
                                                "FullyConnected", "LeakyReLU", "SliceChannel", "UpSampling",
                                                "transpose", "dot", "batch", "LRN", "SoftmaxOutput",
                                                "slice", "expand", "squeeze", "Dropout", "clip")})[::3]
CASES = [_model_case("mlp"), _model_case("lenet")] + [_op_case(s) for s in OP_STEMS]

EDGE_INTS = [-2**31, -2, -1, 0, 1, 2, 10**6, 2**31, 10**12, 2**62]
INDEX_VALUES = [-1, -2, 0, 1, 2, 3, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, 10**30, -2**63]
GARBAGE_ATTRS = ["(3, x)", "1e400", "-1e400", "1e-400", "nan", "inf", "-inf", "", " ", "((", "))", "(" * 300,
                 "()", "(0,)", "(0, 0)", "(-1, -1)", "(-3, -3)", "0", "-1", "-2147483648", "2147483648",
                 str(10**18), str(10**30), "1" * 5000, "(" + "1, " * 5000 + ")", "[" + "7, " * 40 + "]",
                 "None", "True", "False", "true", "relu", "\x00", "1.5", "(1.5, 2)", "(None,)", "{1: 2}",
                 "'abc'", "1j", "(1e400, 1)", "(2**31, 1)", "(10**12, 10**12)", "(1000000000000, 1000000000000)",
                 "__import__('os')", "(1, (2, 3))", "[[]]", "(" + "(" * 50 + ")" * 50 + ")",
                 "-" * 100_000 + "1", "(" + "~" * 20_000 + "1,)"]
attr_values = (st.sampled_from(GARBAGE_ATTRS)
               | st.integers(-2**65, 2**65).map(str)
               | st.lists(st.integers(-2**40, 2**40), max_size=6).map(lambda v: str(tuple(v)))
               | st.text(max_size=12))
op_names = st.sampled_from(sorted(REGISTRY)) | st.sampled_from(["null", "NoSuchOp", "", "_foreach"]) | st.text(max_size=6)


def _attr_keys(op: str) -> list[str]:
    spec = REGISTRY.get(op)
    import dataclasses
    keys = [f.name for f in dataclasses.fields(spec.attrs)] if spec is not None else []
    return keys + ["__shape__", "__dtype__", "no_such_attr", "workspace"]


@st.composite
def mutation(draw, doc: dict, kinds: tuple[str, ...] | None = None):
    """Apply one structural mutation to `doc` in place; return a description for the failure report."""
    nodes = doc.get("nodes") if isinstance(doc.get("nodes"), list) else []
    node_dicts = [(i, n) for i, n in enumerate(nodes) if isinstance(n, dict)]
    ops = [(i, n) for i, n in node_dicts if n.get("op") != "null"]
    kind = draw(st.sampled_from(kinds or ["del_key", "del_node_key", "wrong_type", "index", "cycle", "dup_name",
                                 "attr", "attr", "attr_like", "attr_like", "attr_like", "op", "n_inputs", "shape_hint", "del_node",
                                 "swap_nodes", "control_deps"]))
    if kind == "del_key":
        key = draw(st.sampled_from(["nodes", "heads", "arg_nodes", "node_row_ptr", "attrs"]))
        doc.pop(key, None)
        return f"delete top-level {key!r}"
    if not node_dicts:
        return "no nodes left"
    i, node = draw(st.sampled_from(node_dicts))
    if kind == "del_node_key":
        key = draw(st.sampled_from(["op", "name", "inputs", "attrs"]))
        node.pop(key, None)
        return f"delete {key!r} of node #{i}"
    if kind == "wrong_type":
        where = draw(st.sampled_from(["top", "node", "entry", "entry_elem", "attr_value", "attrs"]))
        value = draw(json_values)
        if where == "top":
            key = draw(st.sampled_from(["nodes", "heads", "arg_nodes", "node_row_ptr", "attrs"]))
            doc[key] = value
            return f"top-level {key!r} = {value!r}"
        if where == "node":
            key = draw(st.sampled_from(["op", "name", "inputs", "control_deps"]))
            node[key] = value
            return f"node #{i} {key!r} = {value!r}"
        if where == "attrs":
            node["attrs"] = value
            return f"node #{i} attrs = {value!r}"
        if where == "attr_value":
            attrs = node.setdefault("attrs", {}) if isinstance(node.get("attrs", {}), dict) else {}
            key = draw(st.sampled_from(list(attrs) or ["x"]))
            attrs[key] = value
            return f"node #{i} attr {key!r} = {value!r} (not a string)"
        ins = node.get("inputs") if isinstance(node.get("inputs"), list) else []
        if not ins:
            node["inputs"] = [value]
            return f"node #{i} inputs = [{value!r}]"
        k = draw(st.integers(0, len(ins) - 1))
        if where == "entry" or not isinstance(ins[k], list) or not ins[k]:
            ins[k] = value
            return f"node #{i} input {k} = {value!r}"
        j = draw(st.integers(0, len(ins[k]) - 1))
        ins[k][j] = value
        return f"node #{i} input {k}[{j}] = {value!r}"
    if kind == "index":
        value = draw(st.sampled_from(INDEX_VALUES + [len(nodes), len(nodes) + 1, i]))
        target = draw(st.sampled_from(["input_node", "input_index", "input_version", "heads", "arg_nodes",
                                       "node_row_ptr"]))
        if target.startswith("input"):
            ins = [e for e in node.get("inputs", []) or [] if isinstance(e, list) and len(e) >= 3] \
                if isinstance(node.get("inputs"), list) else []
            if not ins:
                return "no input to mutate"
            e = draw(st.sampled_from(ins))
            e[["input_node", "input_index", "input_version"].index(target)] = value
            return f"node #{i} input {target} = {value}"
        seq = doc.get(target)
        if not isinstance(seq, list) or not seq:
            return f"no {target} to mutate"
        k = draw(st.integers(0, len(seq) - 1))
        if target == "heads":
            if isinstance(seq[k], list) and seq[k]:
                seq[k][draw(st.integers(0, len(seq[k]) - 1))] = value
        else:
            seq[k] = value
        return f"{target}[{k}] = {value}"
    if kind == "cycle":
        if not ops:
            return "no op node"
        i, node = draw(st.sampled_from(ops))
        ins = [e for e in node.get("inputs", []) if isinstance(e, list) and e] \
            if isinstance(node.get("inputs"), list) else []
        if not ins:
            return "no input"
        target = draw(st.integers(i, len(nodes) - 1))
        draw(st.sampled_from(ins))[0] = target
        return f"node #{i} input -> node #{target} (self or forward)"
    if kind == "dup_name":
        j, other = draw(st.sampled_from(node_dicts))
        node["name"] = other.get("name")
        return f"node #{i} renamed to the name of node #{j}"
    if kind == "attr":
        if ops and draw(st.booleans()):
            i, node = draw(st.sampled_from(ops))
        op = node.get("op") if isinstance(node.get("op"), str) else ""
        key = draw(st.sampled_from(_attr_keys(op)))
        value = draw(attr_values)
        attrs = node.get("attrs")
        if not isinstance(attrs, dict):
            attrs = node["attrs"] = {}
        attrs[key] = value
        return f"node #{i} ({op}) attr {key}={value!r}"
    if kind == "attr_like":
        # same form as a value the node has (tuple of the same length, int, float): reaches the shape rules
        if ops:
            i, node = draw(st.sampled_from(ops))
        attrs = node.get("attrs")
        if not isinstance(attrs, dict) or not attrs:
            return "no attrs"
        key = draw(st.sampled_from(sorted(attrs)))
        old = attrs[key] if isinstance(attrs[key], str) else ""
        ints = st.sampled_from(EDGE_INTS) | st.integers(-3, 12)
        if old.startswith(("(", "[")):
            n = old.count(",") + (0 if old.rstrip(")]").rstrip().endswith(",") or old in ("()", "[]") else 1)
            value = str(tuple(draw(st.lists(ints, min_size=max(0, n - 1), max_size=n + 1))))
        elif old.lstrip("-").isdigit():
            value = str(draw(ints))
        else:
            value = draw(st.sampled_from(["0", "-1", "0.0", "-0.5", "1e30", "nan", "inf", "1e-45", "True"]))
        attrs[key] = value
        return f"node #{i} ({node.get('op')}) attr {key}: {old!r} -> {value!r}"
    if kind == "op":
        new = draw(op_names)
        node["op"] = new
        return f"node #{i} op = {new!r}"
    if kind == "n_inputs":
        ins = node.get("inputs")
        if not isinstance(ins, list):
            return "inputs not a list"
        how = draw(st.sampled_from(["drop", "dup", "add", "clear"]))
        if how == "drop" and ins:
            ins.pop(draw(st.integers(0, len(ins) - 1)))
        elif how == "dup" and ins:
            ins.append(list(ins[0]) if isinstance(ins[0], list) else ins[0])
        elif how == "add":
            ins.append([draw(st.integers(0, max(0, i - 1))), 0, 0])
        else:
            ins.clear()
        return f"node #{i} inputs {how}"
    if kind == "shape_hint":
        var = [(j, n) for j, n in node_dicts if n.get("op") == "null"]
        if not var:
            return "no variable"
        j, v = draw(st.sampled_from(var))
        attrs = v.get("attrs")
        if not isinstance(attrs, dict):
            attrs = v["attrs"] = {}
        value = draw(attr_values)
        attrs["__shape__"] = value
        return f"variable #{j} __shape__={value!r}"
    if kind == "del_node":
        nodes.pop(i)
        return f"delete node #{i} (later references shift)"
    if kind == "swap_nodes":
        j = draw(st.integers(0, len(nodes) - 1))
        nodes[i], nodes[j] = nodes[j], nodes[i]
        return f"swap nodes #{i} and #{j}"
    value = draw(st.lists(st.integers(-2, len(nodes) + 1) | json_scalars, max_size=3) | json_values)
    node["control_deps"] = value
    return f"node #{i} control_deps = {value!r}"


@st.composite
def mutated_shapes(draw, shapes: dict) -> dict:
    shapes = dict(shapes)
    how = draw(st.sampled_from(["same", "same", "huge", "dim", "rank", "drop", "extra"]))
    if how == "same" or not shapes:
        return shapes
    key = draw(st.sampled_from(sorted(shapes)))
    s = list(shapes[key])
    if how == "huge":
        s = [draw(st.sampled_from([10**12, 2**31, 2**40, 2**62]))] * len(s)
    elif how == "dim" and s:
        s[draw(st.integers(0, len(s) - 1))] = draw(st.sampled_from([0, -1, 1, 7, 10**12, 2**63]))
    elif how == "rank":
        s = s[:-1] if s and draw(st.booleans()) else s + [draw(st.integers(1, 4))]
    elif how == "drop":
        del shapes[key]
        return shapes or {key: tuple(s)}
    else:
        shapes[draw(st.sampled_from(["label", "softmax_label", "nope", key + "_weight"]))] = (2, 3)
    shapes[key] = tuple(s)
    return shapes


@st.composite
def mutated_case(draw, kinds: tuple[str, ...] | None = None):
    name, doc, shapes = draw(st.sampled_from(CASES))
    doc = json.loads(json.dumps(doc))                     # a private copy to mutate
    what = [draw(mutation(doc, kinds)) for _ in range(draw(st.integers(1, 3)))]
    return name, doc, draw(mutated_shapes(shapes)), draw(st.booleans()), what


@examples(1000)
@given(mutated_case())
def test_mutated_symbol_files(case):
    name, doc, shapes, train, what = case
    text = json.dumps(doc)
    e = _load_then_plan(text, shapes, CompileOptions(train=train))
    if isinstance(e, MxccError):
        assert str(e).strip()


def _attr_text(tp) -> st.SearchStrategy[str]:
    """Attribute strings of the right form for a field annotation, with edge values."""
    import typing
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    small = st.integers(-2, 8) | st.sampled_from(EDGE_INTS)
    if origin is typing.Union:
        return st.just("None") | _attr_text(next(a for a in args if a is not type(None)))
    if origin is typing.Literal:
        return st.sampled_from([str(a) for a in args])
    if tp is bool:
        return st.sampled_from(["True", "False"])
    if tp is int:
        return small.map(str)
    if tp is float:
        return st.sampled_from(["0", "-1", "0.5", "1e-5", "1e30", "nan", "inf", "-inf", "2"])
    if origin is tuple:
        return st.lists(small, max_size=4).map(lambda v: str(tuple(v)))
    return st.text(max_size=6)


@st.composite
def op_node_case(draw):
    """One public op applied to variables of random shapes, with attributes of the right form."""
    import dataclasses
    import typing
    from mxcc.ops import is_internal
    name = draw(st.sampled_from(sorted(n for n in REGISTRY if not is_internal(n))))
    spec = REGISTRY[name]
    hints = typing.get_type_hints(spec.attrs)
    attrs = {}
    for f in dataclasses.fields(spec.attrs):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required or draw(st.integers(0, 2)) == 0:
            attrs[f.name] = draw(_attr_text(hints[f.name]))
    try:                                  # usually the op's own input count, so that the shape rule runs
        n_in = len(spec.inputs(attrs_parser.parse(spec.attrs, attrs)))
    except MxccError:
        n_in = draw(st.integers(1, 4))
    if not 1 <= n_in <= 8 or draw(st.integers(0, 9)) == 0:
        n_in = draw(st.integers(1, 4))
    nodes = [{"op": "null", "name": f"v{i}", "inputs": []} for i in range(n_in)]
    nodes.append({"op": name, "name": "op", "attrs": attrs, "inputs": [[i, 0, 0] for i in range(n_in)]})
    doc = {"nodes": nodes, "arg_nodes": list(range(n_in)), "heads": [[n_in, 0, 0]]}
    dims = st.sampled_from([1, 1, 2, 3, 4, 5, 8]) | st.sampled_from([10**12, 2**31])
    shape = st.lists(dims, min_size=1, max_size=5).map(tuple)
    given_ = draw(st.lists(st.booleans(), min_size=n_in, max_size=n_in))
    shapes = {f"v{i}": draw(shape) for i in range(n_in) if given_[i] or i == 0}
    return doc, shapes, draw(st.booleans())


@examples(800)
@given(op_node_case())
def test_shape_rules_with_random_attrs_and_shapes(case):
    doc, shapes, train = case
    _load_then_plan(json.dumps(doc), shapes, CompileOptions(train=train))


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("case", [("mlp", "X", 784), ("lenet", "data", (1, 28, 28))], ids=["mlp", "lenet"])
def test_huge_shapes_are_planned_not_allocated(case, train):
    """Planning a batch of 10**12 computes byte counts (beyond any memory) and allocates nothing."""
    model, data, rest = case
    shape = (10**12,) + (rest if isinstance(rest, tuple) else (rest,))
    with _capped_allocation():
        plan, _ = plan_network(DATA / "models" / model / f"{model}-symbol.json", {data: shape},
                               CompileOptions(train=train))
    assert plan.arena_bytes > 10**14


@pytest.mark.parametrize("name, doc, shapes", CASES[:3], ids=lambda c: c if isinstance(c, str) else "")
def test_unmutated_cases_plan(name, doc, shapes):
    """The fuzz corpus itself is valid: every mutation starts from a graph that plans."""
    plan, _ = plan_network(load_json(json.dumps(doc)), shapes, CompileOptions())
    assert plan.graph.nodes


@examples(40)
@given(st.sampled_from(CASES), st.data())
def test_cycles_and_forward_references_are_named(case, data):
    """An input pointing at its own node or a later one: GraphError naming the node and saying why."""
    name, doc, shapes = case
    doc = json.loads(json.dumps(doc))
    ops = [i for i, n in enumerate(doc["nodes"]) if n["op"] != "null" and n["inputs"]]
    i = data.draw(st.sampled_from(ops))
    target = data.draw(st.integers(i, len(doc["nodes"]) - 1))
    k = data.draw(st.integers(0, len(doc["nodes"][i]["inputs"]) - 1))
    doc["nodes"][i]["inputs"][k][0] = target
    with pytest.raises(GraphError) as info:
        load_json(json.dumps(doc))
    msg = str(info.value)
    assert repr(doc["nodes"][i]["name"]) in msg
    assert ("itself" if target == i else "later node") in msg and "cycle" in msg


# ---- .params --------------------------------------------------------------------------------------

MLP_PARAMS = DATA / "models" / "mlp" / "mlp-0000.params"
LENET_PARAMS = DATA / "models" / "lenet" / "lenet-0000.params"


def _npz_bytes() -> bytes:
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "p.npz")
        save_params(p, {"arg:w": np.arange(12, dtype=np.float32).reshape(3, 4), "aux:m": np.ones(5, np.float64),
                        "i": np.arange(3, dtype=np.int8)})
        return Path(p).read_bytes()


PARAM_FILES = {"mlp": MLP_PARAMS.read_bytes(), "lenet": LENET_PARAMS.read_bytes(), "npz": _npz_bytes()}
_TMP = tempfile.TemporaryDirectory(prefix="mxcc-fuzz-params-")    # removed when the interpreter exits


def _load_bytes(data: bytes, suffix: str = ".params"):
    """load_params on `data` written to a file: ParamsError or a dict, quickly, without a big allocation."""
    path = os.path.join(_TMP.name, "fuzz" + suffix)
    with open(path, "wb") as f:
        f.write(data)
    return outcome(load_params, path, what=f"load_params({suffix})", shown=data, expect=ParamsError)


def _fields(buf: bytes) -> list[tuple[int, str, str]]:
    """(offset, struct format, field name) of every header field of an NDArray-list file, per formats.md
    §2.2 (V2 dense records, as MXNet 1.9 writes them): what the targeted mutations overwrite."""
    out = [(0, "Q", "header"), (8, "Q", "reserved"), (16, "Q", "count")]
    pos = 24
    (count,) = struct.unpack_from("<Q", buf, 16)
    for _ in range(count):
        out += [(pos, "I", "magic"), (pos + 4, "i", "stype"), (pos + 8, "i", "ndim")]
        (ndim,) = struct.unpack_from("<i", buf, pos + 8)
        dims = struct.unpack_from(f"<{ndim}q", buf, pos + 12)
        out += [(pos + 12 + 8 * k, "q", f"dim{k}") for k in range(ndim)]
        pos += 12 + 8 * ndim
        out += [(pos, "i", "dev_type"), (pos + 4, "i", "dev_id"), (pos + 8, "i", "type_flag")]
        (flag,) = struct.unpack_from("<i", buf, pos + 8)
        pos += 12 + int(np.prod(dims)) * np.dtype({0: "f4", 1: "f8", 6: "i8"}[flag]).itemsize
    out.append((pos, "Q", "name count"))
    pos += 8
    for _ in range(count):
        out.append((pos, "Q", "name length"))
        pos += 8 + struct.unpack_from("<Q", buf, pos)[0]
    assert pos == len(buf)
    return out


FIELDS = {k: _fields(PARAM_FILES[k]) for k in ("mlp", "lenet")}
FIELD_VALUES = {"Q": [0, 1, 2, 7, 2**31, 2**32 - 1, 2**40, 2**62, 2**64 - 1],
                "I": [0, 1, 3, 32, 33, 0xF993FAC8, 0xF993FAC9, 0xF993FACA, 2**32 - 1],
                "i": [-2**31, -2, -1, 0, 1, 2, 3, 5, 7, 12, 13, 32, 2**31 - 1],
                "q": [-2**63, -1, 0, 1, 2**20, 2**31, 2**40, 2**62, 2**63 - 1]}


def test_the_field_map_matches_the_files():
    assert [n for _, _, n in FIELDS["mlp"]][:6] == ["header", "reserved", "count", "magic", "stype", "ndim"]
    assert sum(n == "name length" for _, _, n in FIELDS["lenet"]) == 8


@examples(200)
@given(st.binary(max_size=300) | st.builds(lambda b: struct.pack("<QQ", 0x112, 0) + b, st.binary(max_size=200)))
def test_random_bytes(data):
    _load_bytes(data)


@examples(60)
@given(st.binary(max_size=300))
def test_random_bytes_as_npz(data):
    _load_bytes(b"PK\x03\x04" + data)
    _load_bytes(data, ".npz")


@examples(150)
@given(st.sampled_from(sorted(PARAM_FILES)), st.data())
def test_truncated_at_random_offsets(which, data):
    buf = PARAM_FILES[which]
    cut = data.draw(st.integers(0, len(buf) - 1))
    got = _load_bytes(buf[:cut], ".npz" if which == "npz" else ".params")
    assert isinstance(got, ParamsError), f"{which} truncated at {cut} loaded"


def test_truncated_at_every_header_offset():
    """Every cut inside the headers and names of the mlp file (the data bytes in between are sampled)."""
    buf = PARAM_FILES["mlp"]
    cuts = set(range(0, 200)) | set(range(len(buf) - 200, len(buf)))
    for off, fmt, _ in FIELDS["mlp"]:
        cuts.update(range(off, off + struct.calcsize(fmt) + 1))
    for cut in sorted(c for c in cuts if c < len(buf)):
        assert isinstance(_load_bytes(buf[:cut]), ParamsError), cut


@examples(200)
@given(st.sampled_from(sorted(PARAM_FILES)), st.lists(st.tuples(st.integers(0, 2**32), st.integers(1, 255)),
                                                      min_size=1, max_size=4))
def test_flipped_bytes(which, flips):
    buf = bytearray(PARAM_FILES[which])
    for pos, mask in flips:
        buf[pos % len(buf)] ^= mask
    _load_bytes(bytes(buf), ".npz" if which == "npz" else ".params")


@examples(300)
@given(st.sampled_from(["mlp", "lenet"]), st.data())
def test_header_fields_set_to_extreme_values(which, data):
    buf = bytearray(PARAM_FILES[which])
    done = []
    for _ in range(data.draw(st.integers(1, 3))):
        off, fmt, name = data.draw(st.sampled_from(FIELDS[which]))
        value = data.draw(st.sampled_from(FIELD_VALUES[fmt]) | st.integers(*{
            "Q": (0, 2**64 - 1), "I": (0, 2**32 - 1), "i": (-2**31, 2**31 - 1), "q": (-2**63, 2**63 - 1)}[fmt]))
        struct.pack_into("<" + fmt, buf, off, value)
        done.append(f"{name}@{off}={value}")
    got = _load_bytes(bytes(buf))
    if not isinstance(got, ParamsError):
        assert isinstance(got, dict), done


@examples(30)
@given(st.sampled_from([2**40, 2**62, 2**63 - 1]), st.integers(1, 4), st.sampled_from([0, 1, 6, 12]),
       st.sampled_from([0xF993FAC8, 0xF993FAC9, 0xF993FACA]))
def test_huge_claimed_shape_in_a_small_file(elements, ndim, flag, magic):
    """A 1 KB file whose header claims 2**40+ elements is refused before anything is allocated."""
    dims = [elements] + [1] * (ndim - 1)
    head = struct.pack("<I", magic) + (struct.pack("<i", 0) if magic != 0xF993FAC8 else b"")
    rec = head + struct.pack(f"<i{ndim}q", ndim, *dims) + struct.pack("<iii", 1, 0, flag)
    buf = struct.pack("<QQQ", 0x112, 0, 1) + rec + bytes(1024) + struct.pack("<Q", 0)
    e = _load_bytes(buf)
    assert isinstance(e, ParamsError) and "truncated" in str(e)


@examples(20)
@given(st.integers(0, 5), st.sampled_from([[0, 2**62, 2**62], [2**63 - 1, 0], [0, 2**40, 2**40, 2**40]]))
def test_zero_sized_shape_with_huge_dims(which, dims):
    rec = struct.pack("<Iii", 0xF993FAC9, 0, len(dims)) + struct.pack(f"<{len(dims)}q", *dims)
    rec += struct.pack("<iii", 1, 0, which)
    buf = struct.pack("<QQQ", 0x112, 0, 1) + rec + struct.pack("<Q", 1) + struct.pack("<Q", 1) + b"w"
    got = _load_bytes(buf)
    assert isinstance(got, (ParamsError, dict))


@examples(5)
@given(st.integers(20_000, 60_000))
def test_many_names_with_a_late_duplicate_is_not_quadratic(n):
    """n "none" records (legacy ndim 0: 4 bytes each) and n names, only the last two equal."""
    names = [f"p{i}" for i in range(n - 1)] + [f"p{n - 2}"]
    buf = struct.pack("<QQQ", 0x112, 0, n) + b"\0\0\0\0" * n + struct.pack("<Q", n)
    buf += b"".join(struct.pack("<Q", len(s)) + s.encode() for s in names)
    e = _load_bytes(buf)
    assert isinstance(e, ParamsError) and "more than once" in str(e)


def _npz_with_member(header: dict | bytes, payload: bytes, compress: int = zipfile.ZIP_STORED) -> bytes:
    if isinstance(header, dict):
        text = repr(header).encode("latin1")
        text += b" " * (64 - (10 + len(text) + 1) % 64) + b"\n"
        header = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compress) as zf:
        zf.writestr("w.npy", header + payload)
    return out.getvalue()


@examples(60)
@given(st.sampled_from([(2**40,), (2**20, 2**20), (0, 2**62, 2**62), (-1,), (-4, -4), (3, 4), (2**63 - 1, 0)]),
       st.sampled_from(["<f4", "<f8", "|u1", "<U3", "|V0", "|V8", "O", "<f4,<i4", "<c8", ">i4"]),
       st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]), st.binary(max_size=64))
def test_npz_member_with_corrupt_header(shape, descr, compress, payload):
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    if descr == "<f4,<i4":
        header["descr"] = [("a", "<f4"), ("b", "<i4")]
    _load_bytes(_npz_with_member(header, payload, compress), ".npz")


def test_npz_deflate_bomb_is_bounded():
    """A member whose header claims 2**40 floats, with 16 MiB of zeros deflated to a few KB behind it."""
    header = {"descr": "<f4", "fortran_order": False, "shape": (2**40,)}
    e = _load_bytes(_npz_with_member(header, bytes(16 << 20), zipfile.ZIP_DEFLATED), ".npz")
    assert isinstance(e, ParamsError)


@examples(80)
@given(st.data())
def test_npz_fields_corrupted(data):
    buf = bytearray(PARAM_FILES["npz"])
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(buf) - 8))
        width = data.draw(st.sampled_from([1, 2, 4, 8]))
        value = data.draw(st.integers(0, 2**(8 * width) - 1))
        buf[pos:pos + width] = value.to_bytes(width, "little")
    _load_bytes(bytes(buf), ".npz")
