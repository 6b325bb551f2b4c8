"""RNN (MXNet's fused recurrent layers: LSTM, GRU, vanilla relu/tanh; stacked, bidirectional), and the two ops a
Gluon recurrent layer exports around it: `_rnn_param_concat` (its weights packed into one vector) and
`SwapAxis` (the NTC layout's transposes).

    RNN(data (T, N, I), parameters (P,), state (L*D, N, H)[, state_cell (L*D, N, H)])
        -> output (T, N, D*H)[, state (L*D, N, H)[, statecell (L*D, N, H)]]      (states with state_outputs)

Semantics of MXNet 1.9.1's CPU kernels (src/operator/rnn_impl.h), per layer l and direction d (d = 1 walks
the steps backward; layer l > 0 reads layer l-1's output, both directions side by side):
    LSTM  gates i, f, g, o:  c' = f * c + i * g,  h' = o * tanh(c')     (i, f, o sigmoid; g tanh)
    GRU   gates r, z, n:     n = tanh(W_n x + b_xn + r * (U_n h + b_hn)),  h' = (1 - z) * n + z * h
    rnn_relu / rnn_tanh:     h' = act(W x + b_x + U h + b_h)
each gate's pre-activation being W x + b_x + U h + b_h. The packed vector (GetRnnParamSize) holds every
weight first, layer by layer and direction by direction, i2h W (G*H, I_l) then h2h U (G*H, H), gates stacked
in the order above; then every bias the same way, i2h (G*H,) then h2h (G*H,). I_0 = I, I_l = D*H.
`Geometry` below is the one place that knows these offsets.

The kernel (runtime_c/rnn/: one call per layer and direction, printed with constant sizes by
templates/kernels/rnn.c.j2): the input projection of all T steps as ONE GEMM (T*N, G*H, I_l) with b_x in its
epilogue, then per step one GEMM h . U^T + b_h (N, G*H, H) and the gate nonlinearities and state update fused
in one pass over its result. Which GEMM the step uses is decided here (`step_gemm`): the runtime's small-M path
reads U's rows as they are; otherwise U is packed once as GEMM panels (at bind time when the parameters are
constants of an inference build, else once per call, not per step) and batch 1 takes the one-row kernel.

Training: RNN becomes `_train_RNN` (passes/train_mode.py), the same forward that also keeps what BPTT reads,
in a last output `reserve` (hidden at inference): per layer and direction the activated gates (T, N, G*H),
LSTM's cell states / GRU's U_n h + b_hn (T, N, H), and every layer's output but the last. `_backward_RNN`
walks the steps backward (a GEMM per step for the recurrent gradient) and then computes each weight's
gradient as one GEMM over all steps. With p > 0 MXNet applies dropout between layers in training: refused
(inference ignores p, as MXNet does). Not supported (AttrError): projection_size (LSTMP), LSTM state
clipping (not on MXNet's CPU either: the native kernel refuses it, oneDNN's ignores it), use_sequence_length.

Begin states that Gluon leaves to shape inference (`_zeros(shape=(L*D, 0, H))`, ops/init_ops.py) arrive
empty: such a state is the zero state, and the kernel starts from zeros without reading it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, Optional

from mxcc.codegen.batchvar import at_max
from mxcc.errors import UnsupportedOpError
from mxcc.ops import register
from mxcc.ops._pack import gemm_pack_b
from mxcc.ops._util import elementwise_loop, norm_axis, strides
from mxcc.ops.base import Fusion, OpDef, check_arity
from mxcc.ops.concat import ConcatAttrs, _concat_grad, _concat_infer, _concat_inputs, _concat_lower
from mxcc.ops.fully_connected import gemm_small_m, prepack_pays, small_m_packed

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}
KERNEL = {"lstm": "lstm", "gru": "gru", "rnn_tanh": "tanh", "rnn_relu": "relu"}   # mxcc_rnn_<kernel>_f32


@dataclass(frozen=True)
class RNNAttrs:
    """MXNet 1.9.1's RNNParam, names and defaults."""
    state_size: int
    num_layers: int
    mode: Literal["rnn_relu", "rnn_tanh", "lstm", "gru"]
    bidirectional: bool = False
    p: float = 0.0
    state_outputs: bool = False
    projection_size: Optional[int] = None
    lstm_state_clip_min: Optional[float] = None
    lstm_state_clip_max: Optional[float] = None
    lstm_state_clip_nan: bool = False
    use_sequence_length: bool = False

    def __post_init__(self):
        if self.state_size < 1:
            raise ValueError(f"state_size must be positive, got {self.state_size}")
        check_arity("num_layers", self.num_layers)
        if not 0.0 <= self.p < 1.0:
            raise ValueError(f"p must be in [0, 1), got {self.p}")
        if self.projection_size is not None:
            raise ValueError("projection_size (an LSTM with projection, LSTMP) is not supported")
        if self.lstm_state_clip_min is not None or self.lstm_state_clip_max is not None:
            raise ValueError("lstm_state_clip_min/max are not supported (MXNet's CPU kernels do not clip either)")
        if self.use_sequence_length:
            raise ValueError("use_sequence_length=True (variable-length sequences) is not supported")


def _states(a: RNNAttrs) -> tuple[str, ...]:
    return ("state", "state_cell") if a.mode == "lstm" else ("state",)


def _inputs(a: RNNAttrs) -> tuple[str, ...]:
    return ("data", "parameters", *_states(a))


def _outputs(a: RNNAttrs) -> tuple[str, ...]:
    """MXNet's output, state, statecell (LSTM), then the training reserve (hidden in inference)."""
    return ("output", "state", "statecell")[:1 + len(_states(a))] + ("reserve",)


def _hidden(a: RNNAttrs) -> int:
    return 1 + (0 if a.state_outputs else len(_states(a)))


class _Space:
    """Floats of one buffer handed out in order, each region starting on a 64-byte boundary."""

    def __init__(self):
        self.end = 0

    def take(self, n: int) -> int:
        off = self.end
        n = at_max(n)           # a dynamic batch: regions placed for the maximum, a smaller batch uses their start
        self.end += -(-n // 16) * 16
        return off


@dataclass(frozen=True)
class Geometry:
    """An RNN's sizes, MXNet's packed parameter offsets and the training reserve's layout, in floats."""
    mode: str
    L: int           # layers
    D: int           # directions
    T: int           # steps
    N: int           # batch
    I: int           # input features of layer 0
    H: int           # hidden units

    @staticmethod
    def of(a: RNNAttrs, x: tuple) -> "Geometry":
        return Geometry(a.mode, a.num_layers, 2 if a.bidirectional else 1, x[0], x[1], x[2], a.state_size)

    @property
    def G(self) -> int:
        return GATES[self.mode]

    def in_size(self, l: int) -> int:
        return self.I if l == 0 else self.D * self.H

    def pairs(self):
        """(layer, direction) in MXNet's order."""
        return [(l, d) for l in range(self.L) for d in range(self.D)]

    def _layer_weights(self, l: int) -> int:
        """Floats of one direction's W and U in layer l."""
        return self.G * self.H * (self.in_size(l) + self.H)

    def weights(self, l: int, d: int) -> tuple[int, int]:
        """Offsets of W (G*H, I_l) and U (G*H, H) of layer l, direction d."""
        below = 0 if l == 0 else self.D * (self._layer_weights(0) + (l - 1) * self._layer_weights(1))
        off = below + d * self._layer_weights(l)
        return off, off + self.G * self.H * self.in_size(l)

    def biases(self, l: int, d: int) -> tuple[int, int]:
        """Offsets of b_x and b_h (G*H,) of layer l, direction d: after all the weights."""
        gh = self.G * self.H
        off = self.weights(self.L, 0)[0] + 2 * gh * (l * self.D + d)
        return off, off + gh

    @property
    def param_size(self) -> int:
        return self.biases(self.L, 0)[0]

    def state_offset(self, l: int, d: int) -> int:
        return (l * self.D + d) * self.N * self.H

    @property
    def state_shape(self) -> tuple[int, int, int]:
        return (self.L * self.D, self.N, self.H)

    @property
    def saves_cell(self) -> bool:
        """Whether BPTT reads a second per-step value: LSTM's cell state, GRU's U_n h + b_hn."""
        return self.mode in ("lstm", "gru")

    def reserve(self) -> dict:
        """What _train_RNN keeps for _backward_RNN: gates[(l, d)] (T, N, G*H) activated gates, cell[(l, d)]
        (T, N, H), layer_out[l] (T, N, D*H) for every layer but the last (its output is the op's), size."""
        space, gates, cell, layer_out = _Space(), {}, {}, {}
        for l, d in self.pairs():
            gates[(l, d)] = space.take(self.T * self.N * self.G * self.H)
            if self.saves_cell:
                cell[(l, d)] = space.take(self.T * self.N * self.H)
        for l in range(self.L - 1):
            layer_out[l] = space.take(self.T * self.N * self.D * self.H)
        return dict(gates=gates, cell=cell, layer_out=layer_out, size=max(space.end, 1))


# The most rows the step GEMM reads U unpacked (mxcc_gemm_f32's small-M dot products). U is packed once per
# call (or at bind time), not per step, so the packed micro-kernel pays sooner than for a FullyConnected: one
# thread, U (2048, 512), per step (C driver, best of 7 x 35 steps, loaded 2-core Xeon): 8 rows 317 vs 327 us
# packed, 16 rows 728 vs 642 us, 32 rows 1528 vs 1187 us; 1 row 141 us either way (the one-row packed kernel,
# as ops/fully_connected.py chooses for one row).
STEP_UNPACKED_MAX_ROWS = 8


def step_gemm(N: int, H: int) -> str:
    """The GEMM of one step, h (N, H) . U^T (U (G*H, H)): one row against U's panels, a few rows reading U as
    it is (small-M path), more rows against U's panels with the packed micro-kernel. A dynamic batch: chosen
    for the maximum (each path computes any number of rows)."""
    N = at_max(N)
    if small_m_packed(N):
        return "MXCC_RNN_STEP_PACKED_ROW"
    if N <= STEP_UNPACKED_MAX_ROWS and gemm_small_m(N, H, False, True):
        return "MXCC_RNN_STEP_GEMM"
    return "MXCC_RNN_STEP_PACKED"


def _deferred(shape, g: Geometry) -> bool:
    """A begin state whose batch MXNet left to inference (Gluon's `_zeros(shape=(L*D, 0, H))`)."""
    return shape is not None and tuple(shape) == (g.L * g.D, 0, g.H)


def _infer(a: RNNAttrs, s):
    x = s.known("data")
    if len(x) != 3 or 0 in x:
        s.fail(f"input 'data' must be (steps, batch, features) (layout TNC), got {x}", input="data")
    g = Geometry.of(a, x)
    s.expect("parameters", (g.param_size,), f"(MXNet's packed {a.mode} parameters: {g.L} layer(s), {g.D} "
             f"direction(s), {g.H} hidden, {g.I} input features)")
    for name in _states(a):
        if not _deferred(s.maybe(name), g):
            s.expect(name, g.state_shape, "(layers * directions, batch, state_size)")
    outs = [(g.T, g.N, g.D * g.H)] + [g.state_shape] * len(_states(a))
    return outs + [(g.reserve()["size"],)]


def _flops(a: RNNAttrs, ins, outs) -> int:
    g = Geometry.of(a, ins[0].shape)
    gemm = sum(2 * g.T * g.N * g.G * g.H * (g.in_size(l) + g.H) for l, _ in g.pairs())
    return gemm + g.L * g.D * g.T * g.N * g.H * (3 * g.G + 3)


# -- forward: one runtime call per layer and direction ------------------------------------------------------
def _out_names(count: int) -> list[str]:
    return ["out"] if count == 1 else [f"out{j}" for j in range(count)]


def _pack_plan(g: Geometry, const: frozenset, train: bool) -> dict:
    """Which weights are read as GEMM panels made at bind time (inference, constant parameters): wx[(l, d)]
    and wh[(l, d)] offsets in those panels, their size and the C statements that pack them."""
    if train or "parameters" not in const:
        return dict(wx={}, wh={}, floats=0, call="")
    step = step_gemm(g.N, g.H)
    space, wx, wh, calls = _Space(), {}, {}, []
    for l, d in g.pairs():
        (wxo, who), k, n = g.weights(l, d), g.in_size(l), g.G * g.H
        if prepack_pays(g.T * g.N, True, k, n):
            wx[(l, d)] = space.take(gemm_pack_b(k, n, True)[1])
            calls.append(f"mxcc_gemm_pack_b_f32(MXCC_TRANS, {k}, {n}, src + {wxo}, {k}, packed + {wx[(l, d)]});")
        if step != "MXCC_RNN_STEP_GEMM":
            wh[(l, d)] = space.take(gemm_pack_b(g.H, n, True)[1])
            calls.append(f"mxcc_gemm_pack_b_f32(MXCC_TRANS, {g.H}, {n}, src + {who}, {g.H}, packed + {wh[(l, d)]});")
    return dict(wx=wx, wh=wh, floats=space.end, call="\n    ".join(calls))


def _forward_plan(a: RNNAttrs, x: tuple, const: frozenset, train: bool) -> dict:
    """The scratch the forward kernel uses (offsets in floats of its workspace) and what is prepacked."""
    g = Geometry.of(a, x)
    packs = _pack_plan(g, const, train)
    ws = _Space()
    plan = dict(g=g, packs=packs, step=step_gemm(g.N, g.H), gh=ws.take(g.N * g.G * g.H))
    if not train:                  # training keeps these in the reserve
        plan["gates"] = ws.take(g.T * g.N * g.G * g.H)
        plan["cell"] = ws.take(g.N * g.H) if g.mode == "lstm" else None
        plan["layer_out"] = [ws.take(g.T * g.N * g.D * g.H) for _ in range(min(g.L - 1, 2))]
    plan["wh_pack"] = (ws.take(gemm_pack_b(g.H, g.G * g.H, True)[1])
                       if plan["step"] != "MXCC_RNN_STEP_GEMM" and not packs["wh"] else None)
    plan["floats"] = ws.end
    return plan


def _forward_workspace(train: bool):
    def workspace(a, ins, outs, const):
        return 4 * _forward_plan(a, ins[0].shape, const, train)["floats"]
    return workspace


def _ptr(base: str, off: int) -> str:
    return f"{base} + {off}" if off else base


def _forward_lower(train: bool):
    def lower(a: RNNAttrs, ctx):
        x = ctx.in_type("data").shape
        plan = _forward_plan(a, x, ctx.const, train)
        g, packs = plan["g"], plan["packs"]
        packed = (ctx.packed_input("parameters", (packs["call"], packs["floats"], "the RNN's W and U as GEMM B "
                                                   "panels", "")) if packs["floats"] else None)
        names = _out_names(len(_outputs(a)) - (0 if train else _hidden(a)))
        out = names[0]
        states = names[1:1 + len(_states(a))] if train or a.state_outputs else []
        res = g.reserve() if train else None
        reserve = names[-1]
        calls = []
        for l, d in g.pairs():
            (wx, wh), (bx, bh), so = g.weights(l, d), g.biases(l, d), g.state_offset(l, d)
            if train:
                src = "data" if l == 0 else _ptr(reserve, res["layer_out"][l - 1])
                dst = out if l == g.L - 1 else _ptr(reserve, res["layer_out"][l])
                gates = _ptr(reserve, res["gates"][(l, d)])
                cell = _ptr(reserve, res["cell"][(l, d)]) if g.saves_cell else None
            else:
                src = "data" if l == 0 else _ptr("workspace", plan["layer_out"][(l - 1) % 2])
                dst = out if l == g.L - 1 else _ptr("workspace", plan["layer_out"][l % 2])
                gates = _ptr("workspace", plan["gates"])
                cell = _ptr("workspace", plan["cell"]) if g.mode == "lstm" else None
            h0 = [None if _deferred(ctx.in_type(s).shape, g) else _ptr(s, so) for s in _states(a)]
            calls.append(dict(
                fn=f"mxcc_rnn_{KERNEL[a.mode]}_f32", I=g.in_size(l), reverse=d,
                what=f"layer {l}{', reverse direction' if d else ''}: "
                     f"{'data' if l == 0 else f'layer {l - 1} output'} ({g.T}, {g.N}, {g.in_size(l)}) -> "
                     f"{out if l == g.L - 1 else f'layer {l} output'}[:, :, {d * g.H}:{(d + 1) * g.H}]",
                x=src, y=_ptr(dst, d * g.H), wx=_ptr("parameters", wx), wh=_ptr("parameters", wh),
                bx=_ptr("parameters", bx), bh=_ptr("parameters", bh),
                h0=h0[0] or "NULL", c0=(h0[1] if len(h0) > 1 else None) or "NULL",
                hy=_ptr(states[0], so) if states else "NULL", cy=_ptr(states[1], so) if len(states) > 1 else "NULL",
                gates=gates, cell=cell or "NULL",
                wx_packed=_ptr(packed, packs["wx"][(l, d)]) if (l, d) in packs["wx"] else "NULL",
                wh_packed=_ptr(packed, packs["wh"][(l, d)]) if (l, d) in packs["wh"] else "NULL",
                wh_pack="NULL" if plan["wh_pack"] is None else _ptr("workspace", plan["wh_pack"])))
        cell_step = g.N * g.H if train and g.saves_cell else 0
        what = (f"{a.mode} x {g.L} layer(s){', bidirectional' if g.D == 2 else ''}: {g.T} steps, batch {g.N}, "
                f"{g.I} -> {g.H} hidden; step GEMM {plan['step']}" + ("; keeps the reserve for BPTT" if train else ""))
        return "kernels/rnn.c.j2", dict(what=what, T=g.T, N=g.N, H=g.H, ldy=g.D * g.H, step=plan["step"],
                                        gh=_ptr("workspace", plan["gh"]), cell_step=cell_step, calls=calls)
    return lower


def _train_op(a: RNNAttrs) -> str:
    return "_train_RNN"


def _grad(a: RNNAttrs, g, train: bool):
    if a.p > 0:
        raise UnsupportedOpError(f"training with dropout between layers (p={a.p}) is not supported (inference "
                                 "ignores p)", node=g.node.name, op="RNN")
    ins = [g.input(n) for n in _inputs(a)]
    outs = [g.output(i) for i in range(len(_outputs(a)))]
    if not train:       # the gradient of the inference function: recompute the forward, keeping the reserve
        outs = list(g.emit("_train_RNN", ins, name=f"{g.node.name}_recompute", **_attr_dict(a)))
    # the states' gradients: none unless they are outputs (state_outputs); then zeros where nothing reads them
    ograds = [g.ograd(i) for i in range(1 + (len(_states(a)) if a.state_outputs else 0))]
    flags = {f"{n}_grad": g.needs(n) for n in _inputs(a)}
    bwd = g.emit("_backward_RNN", [*ograds, *ins, outs[0], outs[-1]], **_attr_dict(a), **flags)
    return dict(zip([n for n in _inputs(a) if flags[f"{n}_grad"]], bwd))


def _attr_dict(a: RNNAttrs) -> dict:
    return {f.name: getattr(a, f.name) for f in fields(RNNAttrs)}


RNN = register(OpDef(
    name="RNN", attrs=RNNAttrs, inputs=_inputs, output_names=_outputs, hidden_outputs=_hidden, infer=_infer,
    fusion=Fusion.OPAQUE, flops=_flops, lower=_forward_lower(False), workspace=_forward_workspace(False),
    train_op=_train_op, grad=lambda a, g: _grad(a, g, False), doc=__doc__))
TRAIN_RNN = register(OpDef(
    name="_train_RNN", attrs=RNNAttrs, inputs=_inputs, output_names=_outputs, infer=_infer,
    fusion=Fusion.OPAQUE, flops=_flops, lower=_forward_lower(True), workspace=_forward_workspace(True),
    grad=lambda a, g: _grad(a, g, True), doc=__doc__))


# -- backward (BPTT): one runtime call per layer and direction, the last layer first -------------------------
@dataclass(frozen=True)
class RNNBackwardAttrs(RNNAttrs):
    data_grad: bool = True           # which inputs need a gradient (autodiff's g.needs)
    parameters_grad: bool = True
    state_grad: bool = False
    state_cell_grad: bool = False


def _bwd_inputs(a: RNNBackwardAttrs) -> tuple[str, ...]:
    """The gradients of output and (with state_outputs) of the final states, the forward's inputs, its output
    and its reserve."""
    ograds = ("ograd", "ograd_state", "ograd_statecell")[:1 + (len(_states(a)) if a.state_outputs else 0)]
    return (*ograds, *_inputs(a), "output", "reserve")


def _bwd_outputs(a: RNNBackwardAttrs) -> tuple[str, ...]:
    return tuple(f"{n}_grad" for n in _inputs(a) if getattr(a, f"{n}_grad"))


def _bwd_infer(a: RNNBackwardAttrs, s):
    return [s.known(n[:-len("_grad")]) for n in _bwd_outputs(a)]


def _bwd_flops(a: RNNBackwardAttrs, ins, outs) -> int:
    return 2 * _flops(a, [ins[_bwd_inputs(a).index("data")]], [])


def _bwd_plan(a: RNNBackwardAttrs, x: tuple) -> dict:
    """The backward's scratch (floats of its workspace)."""
    g = Geometry.of(a, x)
    ws = _Space()
    tng = g.T * g.N * g.G * g.H
    return dict(g=g, dgates=ws.take(tng), dgh=ws.take(tng) if g.mode == "gru" else None,
                dh=ws.take(g.N * g.H), dc=ws.take(g.N * g.H) if g.mode == "lstm" else None,
                dy=[ws.take(g.T * g.N * g.D * g.H) for _ in range(min(g.L - 1, 2))],
                wh_pack=ws.take(gemm_pack_b(g.G * g.H, g.H, False)[1]), floats=ws.end)


def _bwd_lower(a: RNNBackwardAttrs, ctx):
    x = ctx.in_type("data").shape
    plan = _bwd_plan(a, x)
    g = plan["g"]
    res = g.reserve()
    names = dict(zip(_bwd_outputs(a), _out_names(len(_bwd_outputs(a)))))
    dparams = names.get("parameters_grad")
    ws = lambda off: _ptr("workspace", off)    # noqa: E731
    calls = []
    for l in reversed(range(g.L)):
        for d in range(g.D):
            (wx, wh), (bx, bh), so = g.weights(l, d), g.biases(l, d), g.state_offset(l, d)
            h0 = [None if _deferred(ctx.in_type(s).shape, g) else _ptr(s, so) for s in _states(a)]
            dx = names.get("data_grad") if l == 0 else ws(plan["dy"][(l - 1) % 2])
            dhx = [names.get(f"{s}_grad") for s in _states(a)]
            calls.append(dict(
                fn=f"mxcc_rnn_{KERNEL[a.mode]}_backward_f32", I=g.in_size(l), reverse=d,
                what=f"layer {l}{', reverse direction' if d else ''}",
                x="data" if l == 0 else _ptr("reserve", res["layer_out"][l - 1]),
                wx=_ptr("parameters", wx), wh=_ptr("parameters", wh),
                h0=h0[0] or "NULL", c0=(h0[1] if len(h0) > 1 else None) or "NULL",
                y=_ptr("output" if l == g.L - 1 else _ptr("reserve", res["layer_out"][l]), d * g.H),
                gates=_ptr("reserve", res["gates"][(l, d)]),
                cell=_ptr("reserve", res["cell"][(l, d)]) if g.saves_cell else "NULL",
                dy=_ptr("ograd" if l == g.L - 1 else ws(plan["dy"][l % 2]), d * g.H),
                dhy=_ptr("ograd_state", so) if a.state_outputs else "NULL",
                dcy=_ptr("ograd_statecell", so) if a.state_outputs and g.mode == "lstm" else "NULL",
                dx=dx or "NULL", dx_accumulate=d,
                dwx=_ptr(dparams, wx) if dparams else "NULL", dwh=_ptr(dparams, wh) if dparams else "NULL",
                dbx=_ptr(dparams, bx) if dparams else "NULL", dbh=_ptr(dparams, bh) if dparams else "NULL",
                dhx=_ptr(dhx[0], so) if dhx[0] else "NULL",
                dcx=_ptr(dhx[1], so) if len(dhx) > 1 and dhx[1] else "NULL"))
    what = (f"{a.mode} x {g.L} layer(s){', bidirectional' if g.D == 2 else ''} backward through time: {g.T} steps, "
            f"batch {g.N}, {g.I} -> {g.H} hidden")
    return "kernels/rnn_backward.c.j2", dict(
        what=what, T=g.T, N=g.N, H=g.H, ldy=g.D * g.H, dgates=ws(plan["dgates"]),
        dgh="NULL" if plan["dgh"] is None else ws(plan["dgh"]), dh=ws(plan["dh"]),
        dc="NULL" if plan["dc"] is None else ws(plan["dc"]), wh_pack=ws(plan["wh_pack"]), calls=calls)


RNN_BACKWARD = register(OpDef(
    name="_backward_RNN", attrs=RNNBackwardAttrs, inputs=_bwd_inputs, output_names=_bwd_outputs,
    infer=_bwd_infer, fusion=Fusion.OPAQUE, flops=_bwd_flops, lower=_bwd_lower,
    workspace=lambda a, ins, outs, const: 4 * _bwd_plan(a, ins[_bwd_inputs(a).index("data")].shape)["floats"]))


# -- _rnn_param_concat: Concat under another name -----------------------------------------------------------
# MXNet registers it apart from Concat only for its shape rule (the weights' shapes may be inferred backward
# from the RNN's parameter vector); mxcc infers forward, from the weights, so it is Concat: the same copies
# (ops/concat.py), the same gradient. Between constants (a Gluon layer's weights) an inference build computes it
# once at bind time (passes/fold_constants.py).
RNN_PARAM_CONCAT = register(OpDef(
    name="_rnn_param_concat", attrs=ConcatAttrs, inputs=_concat_inputs, infer=_concat_infer,
    fusion=Fusion.INJECTIVE, lower=_concat_lower, grad=_concat_grad,
    doc="_rnn_param_concat: Concat of a recurrent layer's weights into MXNet's packed RNN parameter vector."))


# -- SwapAxis ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SwapAxisAttrs:
    dim1: int = 0
    dim2: int = 0


def _swap(a: SwapAxisAttrs, x: tuple, s=None) -> tuple[int, int]:
    """MXNet's SwapAxis: each axis in [-ndim, ndim), negative from the end."""
    return (norm_axis(a.dim1, len(x), s, what="dim1"), norm_axis(a.dim2, len(x), s, what="dim2"))


def _swap_infer(a: SwapAxisAttrs, s):
    x = s.known("data")
    i, j = _swap(a, x, s)
    out = list(x)
    out[i], out[j] = x[j], x[i]
    return [tuple(out)]


def _swap_lower(a: SwapAxisAttrs, ctx):
    x = ctx.in_type("data").shape
    i, j = _swap(a, x)
    perm = list(range(len(x)))
    perm[i], perm[j] = j, i
    st = strides(x)
    return "kernels/loops.c.j2", elementwise_loop(
        f"out{list(ctx.out_type().shape)} = data{list(x)} with axes {i} and {j} swapped", ctx.out_type().shape,
        [("data", tuple(st[p] for p in perm))], lambda xs: xs[0])


SWAP_AXIS = register(OpDef(
    name="SwapAxis", aliases=("swapaxes",), attrs=SwapAxisAttrs, inputs=lambda a: ("data",), infer=_swap_infer,
    fusion=Fusion.INJECTIVE, lower=_swap_lower,
    grad=lambda a, g: {"data": g.emit("SwapAxis", [g.ograd()], dim1=a.dim1, dim2=a.dim2)[0]},
    doc="SwapAxis (swapaxes): out = data with axes dim1 and dim2 interchanged (a strided copy); the gradient "
        "swaps them back."))
