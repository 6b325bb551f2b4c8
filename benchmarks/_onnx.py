"""Benchmark-only: write an ONNX model from an mxcc graph and its params, so ONNX Runtime runs the very same
network with the same weights. The operators map one to one (onnx helper API); an op without a mapping
raises NotImplementedError naming it. Not part of mxcc (onnx is not a dependency)."""
from __future__ import annotations

import numpy as np


def to_onnx(plan_graph, params: dict[str, np.ndarray], opset: int = 17):
    """plan_graph: a typed mxcc Graph (e.g. `plan.graph` after the passes). Returns an onnx ModelProto."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = plan_graph
    nodes, inits = [], []
    name_of = {}
    inputs = []
    # data inputs: graph inputs that some node reads as data (labels are not read at inference)
    read = {g.nodes[r.node].name for m in g.nodes if not m.is_variable
            for name, r in zip(m.opdef.inputs(m.params), m.inputs) if name not in m.opdef.labels}
    data_inputs = [i for i in g.inputs if i in read]
    for n in g.nodes:
        if n.is_variable:
            name_of[(n.id, 0)] = n.name
            if n.name in params:
                inits.append(numpy_helper.from_array(np.asarray(params[n.name], np.float32), n.name))
            elif n.name in data_inputs:
                inputs.append(helper.make_tensor_value_info(n.name, TensorProto.FLOAT, list(n.out_types[0].shape)))
            continue
        ins = [name_of[r.key] for r in n.inputs]
        out = f"{n.name}_out"
        name_of[(n.id, 0)] = out
        a = n.params
        op = n.opdef.name
        if op == "FullyConnected":
            x = ins[0]
            if len(g.type_of(n.inputs[0]).shape) > 2:
                nodes.append(helper.make_node("Flatten", [x], [out + "_flat"], axis=1))
                x = out + "_flat"
            nodes.append(helper.make_node("Gemm", [x, ins[1]] + ins[2:3], [out], transB=1))
        elif op == "Activation":
            kind = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softrelu": "Softplus",
                    "softsign": "Softsign"}[a.act_type]
            nodes.append(helper.make_node(kind, ins[:1], [out]))
        elif op in ("SoftmaxOutput", "softmax"):
            nodes.append(helper.make_node("Softmax", ins[:1], [out], axis=-1))
        elif op == "Flatten":
            nodes.append(helper.make_node("Flatten", ins[:1], [out], axis=1))
        else:
            raise NotImplementedError(f"no ONNX mapping for {op} (node {n.name})")
    outputs = [helper.make_tensor_value_info(name_of[h.key], TensorProto.FLOAT, list(g.type_of(h).shape))
               for h in g.heads]
    graph = helper.make_graph(nodes, "mxcc", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    return model
