"""Benchmark-only: write an ONNX model from an mxcc graph and its params, so ONNX Runtime runs the very same
network with the same weights. The operators map one to one (onnx helper API); an op without a mapping
raises NotImplementedError naming it. Not part of mxcc (onnx is not a dependency).

Give it the plain typed graph (`typed_graph`: bind + infer_shapes + dce, no fusion, BatchNorm unfolded):
ONNX Runtime runs its own fusions (Conv+BatchNorm, Conv+Relu, Gemm+Relu ...), so both engines start from the
same network. Inference semantics throughout: BatchNorm uses the moving statistics, Dropout is the identity.
"""
from __future__ import annotations

import numpy as np


def typed_graph(net, shapes: dict):
    """net (symbol JSON path, Symbol or Graph) -> the graph with parsed attrs and shapes, unreachable nodes
    dropped; what `to_onnx` expects."""
    from mxcc.compiler.driver import _check_shapes, _graph_of
    from mxcc.passes import bind, dce, infer_shapes
    return dce(infer_shapes(bind(_graph_of(net)[0]), _check_shapes(shapes)))


class _Writer:
    """Accumulates ONNX nodes and initializers; fresh names are derived from the mxcc node's name."""

    def __init__(self):
        from onnx import helper, numpy_helper
        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes, self.inits, self.init_names = [], [], set()

    def node(self, op, ins, out, **attrs):
        # named after its output (`<mxcc node>_out[_suffix]`): ORT's profiler reports nodes by name
        self.nodes.append(self.helper.make_node(op, list(ins), [out], name=out, **attrs))
        return out

    def const(self, name, value, dtype=np.float32):
        if name not in self.init_names:
            self.init_names.add(name)
            self.inits.append(self.numpy_helper.from_array(np.asarray(value, dtype), name))
        return name


_ACT = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "softrelu": "Softplus", "softsign": "Softsign"}
_BINARY = {"elemwise_add": "Add", "elemwise_sub": "Sub", "elemwise_mul": "Mul", "elemwise_div": "Div",
           "broadcast_add": "Add", "broadcast_sub": "Sub", "broadcast_mul": "Mul", "broadcast_div": "Div"}


def _spatial(v, nsp, fill):
    """MXNet's () / one value per spatial axis -> a list of nsp values."""
    return list(v) if len(v) == nsp else [fill] * nsp


def _conv(w, g, n, ins, out):
    a = n.params
    nsp = len(a.kernel)
    pad = _spatial(a.pad, nsp, 0)
    if a.layout not in (None, "NCW", "NCHW", "NCDHW"):
        raise NotImplementedError(f"no ONNX mapping for Convolution layout {a.layout} (node {n.name})")
    w.node("Conv", ins[:2] if a.no_bias else ins[:3], out, kernel_shape=list(a.kernel),
           strides=_spatial(a.stride, nsp, 1), dilations=_spatial(a.dilate, nsp, 1), pads=pad + pad,
           group=a.num_group)


def _batch_norm(w, g, n, ins, out, params):
    a = n.params
    if a.axis != 1:
        raise NotImplementedError(f"no ONNX mapping for BatchNorm axis={a.axis} (node {n.name})")
    data, gamma, beta, mean, var = ins[:5]
    if a.fix_gamma:     # MXNet ignores gamma (reads it as 1) when fix_gamma is set
        gamma = w.const(f"{n.name}_gamma_fixed", np.ones(g.type_of(n.inputs[1]).shape))
    w.node("BatchNormalization", [data, gamma, beta, mean, var], out, epsilon=float(a.eps))


def _pooling(w, g, n, ins, out):
    from mxcc.ops.pooling import window
    a = n.params
    x = g.type_of(n.inputs[0]).shape
    if a.global_pool and a.pool_type in ("max", "avg"):
        w.node("GlobalMaxPool" if a.pool_type == "max" else "GlobalAveragePool", ins[:1], out)
        return
    k, s, p, _ = window(a, x)
    common = dict(kernel_shape=list(k), strides=list(s), pads=list(p) + list(p))
    if a.pooling_convention == "full":
        common["ceil_mode"] = 1
    if a.pool_type == "max":
        w.node("MaxPool", ins[:1], out, **common)
    elif a.pool_type == "avg":   # MXNet counts the padding unless count_include_pad=False
        w.node("AveragePool", ins[:1], out, count_include_pad=int(a.count_include_pad is not False), **common)
    elif a.pool_type == "lp":
        w.node("LpPool", ins[:1], out, p=2, **common)
    else:
        raise NotImplementedError(f"no ONNX mapping for {a.pool_type} pooling (node {n.name})")


def _fully_connected(w, g, n, ins, out):
    a = n.params
    x, shape = ins[0], g.type_of(n.inputs[0]).shape
    bias = [] if a.no_bias else ins[2:3]
    if a.flatten or len(shape) == 2:
        if len(shape) != 2:
            x = w.node("Flatten", [x], out + "_flat", axis=1)
        w.node("Gemm", [x, ins[1]] + bias, out, transB=1)
        return
    # flatten=False: x[..., K] . W^T over the last axis
    wt = w.node("Transpose", [ins[1]], out + "_wt", perm=[1, 0])
    if not bias:
        w.node("MatMul", [x, wt], out)
    else:
        w.node("Add", [w.node("MatMul", [x, wt], out + "_mm"), bias[0]], out)


def _softmax(w, g, n, ins, out):
    shape = g.type_of(n.inputs[0]).shape
    a = n.params
    if n.opdef.name == "softmax":
        if a.temperature not in (None, 1.0) or a.use_length:
            raise NotImplementedError(f"no ONNX mapping for softmax with temperature/length (node {n.name})")
        w.node("Softmax", ins[:1], out, axis=a.axis)
    elif len(shape) == 2 or a.preserve_shape:
        w.node("Softmax", ins[:1], out, axis=-1)
    elif a.multi_output:
        w.node("Softmax", ins[:1], out, axis=1)
    else:   # SoftmaxOutput on (N, d1, d2 ...): one softmax over everything but the batch axis
        flat = w.node("Flatten", ins[:1], out + "_flat", axis=1)
        sm = w.node("Softmax", [flat], out + "_sm", axis=-1)
        w.node("Reshape", [sm, w.const(out + "_shape", shape, np.int64)], out)


def _node(w, g, n, ins, out, params):
    op, a = n.opdef.name, n.params
    if op == "Convolution":
        _conv(w, g, n, ins, out)
    elif op == "BatchNorm":
        _batch_norm(w, g, n, ins, out, params)
    elif op == "Pooling":
        _pooling(w, g, n, ins, out)
    elif op == "FullyConnected":
        _fully_connected(w, g, n, ins, out)
    elif op == "Activation":
        w.node(_ACT[a.act_type], ins[:1], out)
    elif op == "LeakyReLU" and a.act_type == "leaky":
        w.node("LeakyRelu", ins[:1], out, alpha=float(a.slope))
    elif op in _BINARY:
        w.node(_BINARY[op], ins[:2], out)
    elif op in ("add_n",):
        w.node("Sum", ins, out)
    elif op == "Concat":
        w.node("Concat", ins, out, axis=a.dim)
    elif op == "Flatten":
        w.node("Flatten", ins[:1], out, axis=1)
    elif op in ("SoftmaxOutput", "softmax"):
        _softmax(w, g, n, ins, out)
    elif op == "clip":           # ReLU6 of MobileNet v2
        w.node("Clip", [ins[0], w.const(out + "_min", a.a_min), w.const(out + "_max", a.a_max)], out)
    elif op == "Dropout":        # inference: the identity
        w.node("Identity", ins[:1], out)
    elif op in ("Reshape", "reshape_like", "expand_dims", "squeeze"):
        # the shapes are fixed at compile time: the inferred output shape is the whole of MXNet's rule
        w.node("Reshape", [ins[0], w.const(out + "_shape", n.out_types[0].shape, np.int64)], out)
    else:
        raise NotImplementedError(f"no ONNX mapping for {op} (node {n.name})")


def to_onnx(graph, params: dict[str, np.ndarray], opset: int = 17):
    """graph: a typed mxcc Graph (`typed_graph(...)`, or `plan.graph` after the passes). params: every
    parameter and aux state by name (`arg:`/`aux:` prefixes removed). Returns a checked onnx ModelProto whose
    inputs are the graph's data inputs and whose outputs are its heads."""
    import onnx
    from onnx import TensorProto, helper

    g = graph
    w = _Writer()
    name_of = {}
    inputs = []
    # data inputs: graph inputs that some node reads as data (labels are not read at inference)
    read = {g.nodes[r.node].name for m in g.nodes if not m.is_variable
            for name, r in zip(m.opdef.inputs(m.params), m.inputs) if name not in m.opdef.labels}
    for n in g.nodes:
        if n.is_variable:
            name_of[(n.id, 0)] = n.name
            if n.name in params:
                w.const(n.name, params[n.name])
            elif n.name in g.inputs and n.name in read:
                inputs.append(helper.make_tensor_value_info(n.name, TensorProto.FLOAT, list(n.out_types[0].shape)))
            elif n.name in read:
                raise ValueError(f"no value for parameter {n.name!r}")
            continue
        ins = [name_of[r.key] for r in n.inputs]
        out = f"{n.name}_out"
        name_of[(n.id, 0)] = out
        _node(w, g, n, ins, out, params)
    outputs = []
    for h in g.heads:
        if h.key not in name_of:
            raise NotImplementedError(f"output {h.index} of node {g.nodes[h.node].name} has no ONNX mapping")
        outputs.append(helper.make_tensor_value_info(name_of[h.key], TensorProto.FLOAT, list(g.type_of(h).shape)))
    onnx_graph = helper.make_graph(w.nodes, "mxcc", inputs, outputs, w.inits)
    model = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def ort_options(threads: int):
    """ONNX Runtime session options as the benchmarks run it: `threads` intra-op threads, one inter-op thread,
    sequential execution, every graph optimization on."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return so


def ort_session(model, threads: int, options=None):
    """A CPU-provider session of `model` (options: `ort_options(threads)` unless given)."""
    import onnxruntime as ort
    return ort.InferenceSession(model.SerializeToString(), options or ort_options(threads),
                                providers=["CPUExecutionProvider"])
