"""Optimizers with MXNet 1.9's semantics (`mx.optimizer.SGD`, `Adam`, `RMSProp`), as the plain numbers the
compiled C update needs.

The generated C does the arithmetic (runtime_c/optim.c). Each update kernel is one `UpdateDef` in `UPDATES`
(like an OpDef): its kind, its C function, its per-parameter states and its hyper-parameters in the order
the C function takes them, with their defaults, and its float32 numpy twin. Lowering, the templates and the
Executor read that entry: ctx->hyper[i] holds hyper-parameter i of the entry, and the generated call passes
ctx->hyper[i] as argument i (times lr_mult / wd_mult for lr / wd). Adding an optimizer is one entry here
(and an `Optimizer` class that picks it), one C function in runtime_c/optim.c with its declaration in
optim.h, and its test.

An optimizer here only answers:
- `kind` (a key of UPDATES: 'sgd' | 'sgd_mom' | 'adam' | 'rmsprop' | 'rmspropalex') and `state_names`
  (UPDATES[kind].states): which update kernel to emit and which per-parameter state buffers
  (zero-initialised) it needs;
- `resolve_multipliers(graph_or_symbol_or_attrs, param_names) -> (lr_mult, wd_mult)`: per-parameter
  constants, from variable attributes `__lr_mult__`/`__wd_mult__` and `set_lr_mult`/`set_wd_mult`;
- `step_hyper(num_update) -> {name: float}`: the hyper-parameters of update number `num_update` (1 = first
  update, MXNet's count), named and ordered as UPDATES[kind].hyper: lr after the schedule (and, for Adam,
  times sqrt(1-beta2^t)/(1-beta1^t)), wd, rescale_grad, clip_gradient (-1.0 = off) and the kernel's own.
The C update of parameter p then uses lr*lr_mult[p] and wd*wd_mult[p]. `update_numpy` is the float32
reference of MXNet's sgd_update / sgd_mom_update / adam_update / rmsprop_update / rmspropalex_update
kernels: the test oracle for that C.

Default multipliers: 1.0 for every parameter, biases included; this is what `mx.optimizer.get_updater`,
`gluon.Trainer`-less scripts and the C++ package do. MXNet's Module instead passes parameter names, and
MXNet then gives wd_mult 0 to every name not ending in `_weight` or `_gamma`: `wd_rule='module'`
reproduces that (it is also the default when `param_idx2name` is given, exactly as in MXNet).
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from mxcc.train.lr_scheduler import FactorScheduler, LRScheduler, MultiFactorScheduler  # noqa: F401 (re-export)

_F32 = np.float32


# -- the update kernels' float32 numpy twins (src/operator/optimizer_op-inl.h, operation for operation) -------
# Each takes float32 arrays and {hyper name: float32} (lr, wd already times the parameter's multipliers) and
# returns (new weight, new states).
def _clip_to(x, c):
    return np.clip(x, -c, c) if c >= 0 else x


def _sgd(w, g, states, h):
    lr, wd, rg, clip = h["lr"], h["wd"], h["rescale_grad"], h["clip_gradient"]
    if clip >= 0:
        return (_F32(1.0) - lr * wd) * w - lr * np.clip(rg * g, -clip, clip), ()
    return (_F32(1.0) - lr * wd) * w - (lr * rg) * g, ()


def _sgd_mom(w, g, states, h):
    lr, wd, rg, clip = h["lr"], h["wd"], h["rescale_grad"], h["clip_gradient"]
    step = lr * np.clip(rg * g, -clip, clip) if clip >= 0 else (lr * rg) * g
    m = h["momentum"] * states[0] - (lr * wd) * w - step
    return w + m, (m,)


def _adam(w, g, states, h):
    b1, b2, one = h["beta1"], h["beta2"], _F32(1.0)
    gp = _clip_to(h["rescale_grad"] * g + h["wd"] * w, h["clip_gradient"])
    mean = b1 * states[0] + (one - b1) * gp
    var = b2 * states[1] + (one - b2) * np.square(gp)
    return w - h["lr"] * mean / (np.sqrt(var) + h["epsilon"]), (mean, var)


def _rmsprop(w, g, states, h):
    g1 = h["gamma1"]
    gp = _clip_to(h["rescale_grad"] * g + h["wd"] * w, h["clip_gradient"])
    var = (_F32(1.0) - g1) * (gp * gp) + g1 * states[0]
    return _clip_to(w - h["lr"] * (gp / np.sqrt(var + h["epsilon"])), h["clip_weights"]), (var,)


def _rmspropalex(w, g, states, h):
    g1, one = h["gamma1"], _F32(1.0)
    gp = _clip_to(h["rescale_grad"] * g + h["wd"] * w, h["clip_gradient"])
    var = (one - g1) * gp * gp + g1 * states[0]
    mean = (one - g1) * gp + g1 * states[1]
    delta = h["gamma2"] * states[2] - h["lr"] * gp / np.sqrt(var - mean * mean + h["epsilon"])
    return _clip_to(w + delta, h["clip_weights"]), (var, mean, delta)


# -- the table ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hyper:
    """One hyper-parameter of an update kernel: a float argument of its C function and a float of ctx->hyper."""
    name: str                 # MXNet's keyword (the operator's parameter), step_hyper's key
    default: float            # what mx.optimizer's class uses when not given; also for a key step_hyper leaves out
    multiplier: str = ""      # "lr_mult" | "wd_mult": the per-parameter constant the call multiplies it by


@dataclass(frozen=True)
class UpdateDef:
    """An optimizer update kernel: everything the compiler, the templates and the Executor know about it.

    The C function is `void <c_fn>(float *w, const float *g, float *<state>..., long n, float <hyper>...)`,
    its parameters named as here (tests/train_libs/test_optimizer_table.py reads optim.h to check). ctx->hyper
    holds the hyper-parameters in this order; runtime_c/mxcc_runtime.h's MXCC_NUM_HYPER must hold the
    largest entry (NUM_HYPER; every generated update checks it with a _Static_assert)."""
    kind: str                              # Optimizer.kind; MXNet's operator is <kind>_update
    c_fn: str                              # in runtime_c/optim.c
    states: tuple[str, ...]                # per-parameter state arrays (zero at the start), in argument order
    hyper: tuple[Hyper, ...]               # the float arguments after n, in order
    reference: Callable                    # the float32 numpy twin (see _sgd): the C function's test oracle
    doc: str = ""

    @cached_property
    def hyper_names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hyper)

    @cached_property
    def hyper_name_set(self) -> frozenset[str]:
        return frozenset(self.hyper_names)

    def values(self, given: Mapping[str, float]) -> list[float]:
        """ctx->hyper's floats, in order, from step_hyper's {name: value} (a name left out: its default)."""
        if tuple(given) == self.hyper_names:            # step_hyper's own: every name, in order (per step: fast)
            return list(given.values())
        if not given.keys() <= self.hyper_name_set:
            raise ValueError(f"the {self.kind} update has no hyper-parameter(s) "
                             f"{sorted(given.keys() - self.hyper_name_set)} (it takes {', '.join(self.hyper_names)})")
        return [float(given.get(h.name, h.default)) for h in self.hyper]


def _lr(default: float) -> Hyper:
    return Hyper("lr", default, "lr_mult")


_WD, _RESCALE, _CLIP = Hyper("wd", 0.0, "wd_mult"), Hyper("rescale_grad", 1.0), Hyper("clip_gradient", -1.0)
_CLIP_WEIGHTS = Hyper("clip_weights", -1.0)

UPDATES: dict[str, UpdateDef] = {d.kind: d for d in (
    UpdateDef("sgd", "mxcc_sgd_update_f32", (), (_lr(0.01), _WD, _RESCALE, _CLIP), _sgd,
              "w = (1 - lr*wd)*w - lr*clip(rescale_grad*g)"),
    UpdateDef("sgd_mom", "mxcc_sgd_mom_update_f32", ("mom",),
              (_lr(0.01), _WD, Hyper("momentum", 0.0), _RESCALE, _CLIP), _sgd_mom,
              "mom = momentum*mom - lr*wd*w - lr*clip(rescale_grad*g);  w = w + mom"),
    UpdateDef("adam", "mxcc_adam_update_f32", ("mean", "var"),
              (_lr(0.001), _WD, Hyper("beta1", 0.9), Hyper("beta2", 0.999), Hyper("epsilon", 1e-8), _RESCALE, _CLIP),
              _adam, "g' = clip(rescale_grad*g + wd*w);  mean = beta1*mean + (1-beta1)*g';  "
                     "var = beta2*var + (1-beta2)*g'^2;  w = w - lr*mean/(sqrt(var) + epsilon)"),
    UpdateDef("rmsprop", "mxcc_rmsprop_update_f32", ("var",),
              (_lr(0.001), Hyper("gamma1", 0.9), Hyper("epsilon", 1e-8), _WD, _RESCALE, _CLIP, _CLIP_WEIGHTS),
              _rmsprop, "g' = clip(rescale_grad*g + wd*w);  var = (1-gamma1)*g'^2 + gamma1*var;  "
                        "w = clip_weights(w - lr*g'/sqrt(var + epsilon))   (MXNet's state n is var)"),
    UpdateDef("rmspropalex", "mxcc_rmspropalex_update_f32", ("var", "mean", "delta"),
              (_lr(0.001), Hyper("gamma1", 0.9), Hyper("gamma2", 0.9), Hyper("epsilon", 1e-8), _WD, _RESCALE, _CLIP,
               _CLIP_WEIGHTS),
              _rmspropalex, "g' = clip(rescale_grad*g + wd*w);  var = (1-gamma1)*g'^2 + gamma1*var;  "
                            "mean = (1-gamma1)*g' + gamma1*mean;  "
                            "delta = gamma2*delta - lr*g'/sqrt(var - mean^2 + epsilon);  w = clip_weights(w + delta)"
                            "   (MXNet's states n, g, delta are var, mean, delta)"),
)}
NUM_HYPER = max(len(d.hyper) for d in UPDATES.values())   # the room ctx->hyper needs (MXCC_NUM_HYPER)


def update_def(kind: str) -> UpdateDef:
    """The table entry of update kernel `kind` (an Optimizer's .kind)."""
    try:
        return UPDATES[kind]
    except KeyError:
        raise ValueError(f"unknown optimizer kind {kind!r} (expected one of {', '.join(UPDATES)})") from None


WD_RULES = ("all", "module")


class Optimizer:
    """Base class: the hyper-parameters every MXNet optimizer shares.

    learning_rate: None means the scheduler's base_lr, or 0.01 without a scheduler; given together with a
        scheduler it replaces the scheduler's base_lr (MXNet warns and does the same).
    clip_gradient: None or 0 = no clipping (MXNet passes it to the kernel only when truthy; the kernel
        clips only when >= 0, so negative values are off as well).
    param_idx2name: {update index: name}, for `set_lr_mult({0: ...})`-style integer keys; giving it
        switches the default wd_rule to 'module', as MXNet does.
    sym: a Symbol/Graph whose variables' `__lr_mult__`/`__wd_mult__` are used when `resolve_multipliers`
        is not given one.
    multi_precision, lazy_update: accepted for MXNet compatibility and ignored (float32 dense only).
    """
    kind: str = ""

    def __init__(self, rescale_grad: float = 1.0, param_idx2name: dict | None = None, wd: float = 0.0,
                 clip_gradient: float | None = None, learning_rate: float | None = None,
                 lr_scheduler: LRScheduler | None = None, sym=None, begin_num_update: int = 0,
                 multi_precision: bool = False, param_dict=None, wd_rule: str | None = None):
        if lr_scheduler is None and learning_rate is None:
            learning_rate = 0.01
        if lr_scheduler is not None and learning_rate is not None and lr_scheduler.base_lr != learning_rate:
            warnings.warn("learning rate from ``lr_scheduler`` has been overwritten by ``learning_rate`` "
                          "in optimizer.", UserWarning, stacklevel=2)
            lr_scheduler = lr_scheduler.with_base_lr(learning_rate)
        if param_idx2name is not None and not isinstance(param_idx2name, dict):
            raise TypeError("param_idx2name should be a dict of param indexes to names.")
        if wd_rule is None:
            wd_rule = "module" if param_idx2name else "all"
        if wd_rule not in WD_RULES:
            raise ValueError(f"wd_rule must be one of {WD_RULES}, got {wd_rule!r}")
        self.rescale_grad = rescale_grad
        self.lr = learning_rate
        self.lr_scheduler = lr_scheduler
        self.wd = wd
        self.clip_gradient = clip_gradient
        self.begin_num_update = begin_num_update
        self.multi_precision = multi_precision
        self.idx2name = dict(param_idx2name or {})
        self.sym = sym
        self.wd_rule = wd_rule
        self.lr_mult: dict = {}
        self.wd_mult: dict = {}

    # -- MXNet's configuration API ------------------------------------------------------------------------
    @property
    def state_names(self) -> tuple[str, ...]:
        return UPDATES[self.kind].states

    @property
    def learning_rate(self) -> float:
        """What MXNet's `optimizer.learning_rate` reports before any update: the schedule at
        begin_num_update (the first update itself uses step_hyper(begin_num_update + 1))."""
        return self.lr_at(self.begin_num_update)

    def set_learning_rate(self, lr: float) -> None:
        if self.lr_scheduler is not None:
            raise UserWarning("LRScheduler of the optimizer has already been defined. Note that "
                              "set_learning_rate can mutate the value of the learning rate of the optimizer "
                              "only when the LRScheduler of the optimizer is undefined.")
        self.lr = lr

    def set_lr_mult(self, args_lr_mult: Mapping) -> None:
        """Explicit learning-rate multipliers by name or update index; they override variable attributes
        (replaces earlier explicit ones, as MXNet does)."""
        self.lr_mult = dict(args_lr_mult)

    def set_wd_mult(self, args_wd_mult: Mapping) -> None:
        """Explicit weight-decay multipliers by name or update index; they override variable attributes
        and the wd_rule default."""
        self.wd_mult = dict(args_wd_mult)

    # -- what the compiler asks -----------------------------------------------------------------------------
    def resolve_multipliers(self, source, param_names) -> tuple[dict[str, float], dict[str, float]]:
        """({name: lr_mult}, {name: wd_mult}) for every parameter in `param_names` (the updated parameters,
        in update order: index i is param_names[i] unless param_idx2name says otherwise).

        `source`: a Graph, Symbol or {var_name: {attr: value}} whose variables may carry `__lr_mult__` /
        `__wd_mult__` (None: the `sym` given to the constructor, if any). Precedence, as in MXNet:
        explicit multiplier by index > explicit by name > variable attribute > default (lr 1.0; wd 1.0, or
        0.0 under wd_rule='module' for names not ending in '_weight'/'_gamma').

        NOTE: MXNet looks attributes up through param_idx2name, so without it (plain get_updater) it
        silently ignores them; mxcc always knows the names and always applies them.
        """
        attrs = _variable_attrs(source if source is not None else self.sym)
        names = list(param_names)
        idx_of = {}
        for i, n in enumerate(names):
            idx_of.setdefault(n, i)
        for i, n in self.idx2name.items():
            idx_of[n] = i
        lr_mult, wd_mult = {}, {}
        for n in names:
            wd_default = 1.0
            if self.wd_rule == "module" and not (n.endswith("_weight") or n.endswith("_gamma")):
                wd_default = 0.0
            lr_mult[n] = _pick(self.lr_mult, idx_of[n], n, attrs.get(n, {}).get("__lr_mult__"), 1.0)
            wd_mult[n] = _pick(self.wd_mult, idx_of[n], n, attrs.get(n, {}).get("__wd_mult__"), wd_default)
        return lr_mult, wd_mult

    multipliers = resolve_multipliers

    def lr_at(self, num_update: int) -> float:
        """The scheduled learning rate of update `num_update` (before any optimizer-specific factor)."""
        return self.lr_scheduler(num_update) if self.lr_scheduler is not None else self.lr

    def _clip(self) -> float:
        return float(self.clip_gradient) if self.clip_gradient else -1.0

    def step_hyper(self, num_update: int) -> dict[str, float]:
        """The hyper-parameters of update number `num_update` (>= 1; begin_num_update + k for the k-th
        update of this run), named and ordered as UPDATES[self.kind].hyper. Python floats (double), as MXNet
        computes them before the kernel casts them to float32."""
        raise NotImplementedError

    def _hyper(self, **values: float) -> dict[str, float]:
        """step_hyper's dict: exactly the kind's hyper-parameters, in the table's order."""
        names = UPDATES[self.kind].hyper_names
        try:
            if len(values) == len(names):
                return {n: float(values[n]) for n in names}
        except KeyError:
            pass
        raise AssertionError(f"{type(self).__name__}.step_hyper gives {sorted(values)}, the {self.kind} update "
                             f"takes {names}")

    def create_state(self, weight: np.ndarray) -> tuple[np.ndarray, ...]:
        """Zero state arrays, one per state_names entry (MXNet starts every state at 0)."""
        return tuple(np.zeros_like(weight, dtype=_F32) for _ in self.state_names)

    def update_numpy(self, weight, grad, state, hyper: Mapping, lr_mult: float = 1.0, wd_mult: float = 1.0):
        """Reference update: returns (new_weight, new_state) and leaves the inputs alone. float32 throughout,
        in the kernels' operation order (src/operator/optimizer_op-inl.h); lr*lr_mult and wd*wd_mult are
        formed in double and then rounded to float32, as MXNet passes them."""
        return update_numpy(self.kind, weight, grad, state, hyper, lr_mult, wd_mult)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, lr={self.lr!r}, wd={self.wd!r})"


class SGD(Optimizer):
    """MXNet's SGD: sgd_update without momentum (kind 'sgd'), sgd_mom_update with it (kind 'sgd_mom').

        sgd:      w = (1 - lr*wd)*w - lr*clip(rescale_grad*g)
        sgd_mom:  m = momentum*m - lr*wd*w - lr*clip(rescale_grad*g);  w = w + m
    """

    def __init__(self, *, learning_rate: float | None = None, momentum: float = 0.0, lazy_update: bool = True,
                 **kwargs):
        # keyword-only: MXNet's first positional parameter is momentum, mxcc will not guess
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.momentum = momentum
        self.lazy_update = lazy_update

    @property
    def kind(self) -> str:
        # MXNet creates a momentum state whenever momentum != 0 but passes momentum only when > 0.
        return "sgd_mom" if self.momentum != 0.0 else "sgd"

    def step_hyper(self, num_update: int) -> dict[str, float]:
        mom = {"momentum": self.momentum if self.momentum > 0 else 0.0} if self.kind == "sgd_mom" else {}
        return self._hyper(lr=self.lr_at(num_update), wd=self.wd, rescale_grad=self.rescale_grad,
                           clip_gradient=self._clip(), **mom)


class Adam(Optimizer):
    """MXNet's Adam (adam_update), bias correction folded into the learning rate:

        lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)
        g' = clip(rescale_grad*g + wd*w);  mean = beta1*mean + (1-beta1)*g';  var = beta2*var + (1-beta2)*g'^2
        w = w - lr_t * mean / (sqrt(var) + epsilon)

    NOTE: unlike SGD, weight decay is added before clipping. t is the per-parameter update count, which
    equals num_update when every parameter is updated every step.
    """
    kind = "adam"

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, lazy_update: bool = True, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.lazy_update = lazy_update

    def step_hyper(self, num_update: int) -> dict[str, float]:
        if num_update < 1:
            raise ValueError(f"num_update counts from 1 (the first update), got {num_update}")
        t = num_update
        lr = self.lr_at(num_update) * (math.sqrt(1.0 - self.beta2 ** t) / (1.0 - self.beta1 ** t))
        return self._hyper(lr=lr, wd=self.wd, rescale_grad=self.rescale_grad, clip_gradient=self._clip(),
                           beta1=self.beta1, beta2=self.beta2, epsilon=self.epsilon)


class RMSProp(Optimizer):
    """MXNet's RMSProp: rmsprop_update (Tieleman & Hinton; kind 'rmsprop', one state) or, with
    centered=True, rmspropalex_update (Graves 2013, eq. 38-45; kind 'rmspropalex', three states):

        rmsprop:      g' = clip(rescale_grad*g + wd*w);  var = (1-gamma1)*g'^2 + gamma1*var
                      w = clip_weights(w - lr * g'/sqrt(var + epsilon))
        rmspropalex:  var as above;  mean = (1-gamma1)*g' + gamma1*mean
                      delta = gamma2*delta - lr*g'/sqrt(var - mean^2 + epsilon);  w = clip_weights(w + delta)

    gamma2 is used only when centered. clip_weights: None or 0 = off (MXNet passes it only when truthy).
    """

    def __init__(self, learning_rate: float = 0.001, gamma1: float = 0.9, gamma2: float = 0.9,
                 epsilon: float = 1e-8, centered: bool = False, clip_weights: float | None = None, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.gamma1, self.gamma2, self.epsilon = gamma1, gamma2, epsilon
        self.centered = centered
        self.clip_weights = clip_weights

    @property
    def kind(self) -> str:
        return "rmspropalex" if self.centered else "rmsprop"

    def step_hyper(self, num_update: int) -> dict[str, float]:
        gamma2 = {"gamma2": self.gamma2} if self.centered else {}
        return self._hyper(lr=self.lr_at(num_update), gamma1=self.gamma1, epsilon=self.epsilon, wd=self.wd,
                           rescale_grad=self.rescale_grad, clip_gradient=self._clip(),
                           clip_weights=float(self.clip_weights) if self.clip_weights else -1.0, **gamma2)


_REGISTRY = {"sgd": SGD, "adam": Adam, "rmsprop": RMSProp}


def names() -> list[str]:
    """The optimizers `create` knows (MXNet's names)."""
    return sorted(_REGISTRY)


def create(name: str, **kwargs) -> Optimizer:
    """`mx.optimizer.create`: an optimizer by (case-insensitive) name."""
    if isinstance(name, Optimizer):
        return name
    try:
        return _REGISTRY[name.lower()](**kwargs)
    except KeyError:
        raise ValueError(f"Cannot find optimizer {name} (mxcc has: {', '.join(_REGISTRY)})") from None


# -- the numpy reference ----------------------------------------------------------------------------------
def update_numpy(kind: str, weight, grad, state, hyper: Mapping, lr_mult: float = 1.0, wd_mult: float = 1.0):
    """(new_weight, new_state) of one MXNet update of `kind` (see Optimizer.update_numpy): the table entry's
    numpy twin, given every hyper-parameter as float32 (lr*lr_mult and wd*wd_mult formed in double first)."""
    d = update_def(kind)
    state = tuple(np.asarray(s, dtype=_F32) for s in state)
    if len(state) != len(d.states):
        raise ValueError(f"{kind} update takes {len(d.states)} state arrays, got {len(state)}")
    mult = {"lr_mult": lr_mult, "wd_mult": wd_mult}
    h = {p.name: _F32(hyper[p.name] * mult[p.multiplier]) if p.multiplier else _F32(hyper[p.name]) for p in d.hyper}
    return d.reference(np.asarray(weight, dtype=_F32), np.asarray(grad, dtype=_F32), state, h)


# -- helpers ------------------------------------------------------------------------------------------------
def _pick(explicit: Mapping, index: int, name: str, attr: str | None, default: float) -> float:
    if index in explicit:
        return float(explicit[index])
    if name in explicit:
        return float(explicit[name])
    if attr is not None:
        return float(attr)
    return default


def _variable_attrs(source) -> dict[str, dict[str, str]]:
    """{variable name: {attr: value}} from a Graph, a Symbol, an attr dict, or None."""
    if source is None:
        return {}
    if isinstance(source, Mapping):
        return {k: dict(v) for k, v in source.items()}
    graph = getattr(source, "graph", source)          # a Symbol has .graph; a Graph is its own
    nodes = getattr(graph, "nodes", None)
    if nodes is None:
        raise TypeError(f"expected a Graph, Symbol or attribute dict, got {type(source).__name__}")
    return {n.name: dict(n.attrs) for n in nodes if n.is_variable}
