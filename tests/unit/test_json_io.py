"""MXNet symbol JSON: every layout MXNet writes loads; malformed files fail with clear errors; writing
produces what MXNet wrote (compared with files MXNet 1.9.1 itself exported)."""
import json

import pytest

from mxcc_testing import DATA
from mxcc.errors import GraphError
from mxcc.graph import graph_to_dict, load_json
from mxcc.ops import REGISTRY

MODELS = sorted(p for p in (DATA / "models").glob("*/*-symbol.json"))
OP_CASES = sorted((DATA / "ops" / "cases").glob("*-symbol.json"))


@pytest.mark.parametrize("path", MODELS + OP_CASES, ids=lambda p: p.name)
def test_every_reference_json_loads_and_round_trips(path):
    g = load_json(path)
    doc = json.loads(path.read_text())
    assert len(g.nodes) == len(doc["nodes"])
    out = graph_to_dict(g)
    # node order, names, ops, attrs and inputs survive exactly
    for a, b in zip(out["nodes"], doc["nodes"]):
        assert (a["op"], a["name"], a.get("attrs", {})) == (b["op"], b["name"], b.get("attrs", {}))
        assert a["inputs"] == [list(e) for e in b["inputs"]]
    assert out["heads"] == doc["heads"]
    assert out["arg_nodes"] == doc["arg_nodes"]
    if all(n["op"] == "null" or n["op"] in REGISTRY for n in doc["nodes"]):
        assert out["node_row_ptr"] == doc["node_row_ptr"]   # output counts come from the op registry
    assert out["attrs"]["mxnet_version"] == ["int", 10901]


def _doc(nodes, heads=None, **extra):
    d = {"nodes": nodes, "arg_nodes": [i for i, n in enumerate(nodes) if n["op"] == "null"],
         "heads": [[len(nodes) - 1, 0, 0]] if heads is None else heads}
    d.update(extra)
    return json.dumps(d)


def test_legacy_attr_and_param_keys_and_two_element_inputs():
    text = _doc([
        {"op": "null", "name": "x", "inputs": []},
        {"op": "null", "name": "w", "attr": {"lr_mult": "2"}, "inputs": []},
        {"op": "FullyConnected", "name": "fc", "param": {"num_hidden": "3", "no_bias": "True"},
         "inputs": [[0, 0], [1, 0]]},
    ])
    g = load_json(text)
    assert g.nodes[2].attr_dict == {"num_hidden": "3", "no_bias": "True"}
    assert g.nodes[1].attr_dict == {"__lr_mult__": "2"}        # old hidden key upgraded, as MXNet does
    assert g.nodes[2].inputs[1].node == 1 and g.nodes[2].inputs[1].version == 0


def test_unknown_attrs_on_variables_are_ignored_by_compile(tmp_path):
    text = _doc([
        {"op": "null", "name": "x", "attrs": {"kernel": "(5, 5)", "whatever": "1"}, "inputs": []},
        {"op": "Activation", "name": "a", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0]]},
    ])
    from mxcc.passes import infer_shapes
    g = infer_shapes(load_json(text), {"x": (2, 3)})
    assert g.type_of(g.heads[0]).shape == (2, 3)


@pytest.mark.parametrize("text, words", [
    ('{"nodes": [', ["malformed JSON", "line 1"]),
    ('[1, 2]', ["not an MXNet symbol JSON"]),
    (_doc([{"op": "null", "name": "x", "inputs": []},
           {"op": "Activation", "name": "a", "attrs": {"act_type": "relu"}, "inputs": [[5, 0, 0]]}]),
     ["'a' (Activation)", "missing node 5"]),
    (_doc([{"op": "null", "name": "x", "inputs": []}], heads=[[3, 0, 0]]), ["heads", "missing node 3"]),
    (_doc([{"op": "null", "name": "x", "inputs": []}], heads=[]), ["no outputs"]),
    (_doc([{"op": "null", "name": "x", "inputs": []},
           {"op": "Activation", "name": "a", "inputs": [["0", 0, 0]]}]), ["'a' (Activation)", "[node, index"]),
    (_doc([{"op": "null", "inputs": []}]), ["node #0", "'name'"]),
    (_doc([{"op": "null", "name": "x", "inputs": []}, {"op": "null", "name": "x", "inputs": []}]),
     ["two variables are named 'x'"]),
    (_doc([{"op": "null", "name": "x", "inputs": []},
           {"op": "Activation", "name": "a", "inputs": [[0, 0, 0]]}], node_row_ptr=[0, 1]),
     ["node_row_ptr"]),
])
def test_malformed_json_is_a_clear_error(text, words):
    with pytest.raises(GraphError) as e:
        load_json(text)
    for w in words:
        assert w in str(e.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(GraphError, match="cannot read symbol file"):
        load_json(tmp_path / "nope-symbol.json")
