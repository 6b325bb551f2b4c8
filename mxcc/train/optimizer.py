"""Optimizers with MXNet 1.9's semantics (`mx.optimizer.SGD`, `Adam`), as the plain numbers the
compiled C update needs.

The generated C does the arithmetic (runtime_c/optim.c). An optimizer here only answers:
- `kind` ('sgd' | 'sgd_mom' | 'adam') and `state_names` (() | ('mom',) | ('mean', 'var')): which update
  kernel to emit and which per-parameter state buffers (zero-initialised) it needs;
- `resolve_multipliers(graph_or_symbol_or_attrs, param_names) -> (lr_mult, wd_mult)`: per-parameter
  constants, from variable attributes `__lr_mult__`/`__wd_mult__` and `set_lr_mult`/`set_wd_mult`;
- `step_hyper(num_update) -> {key: float}`: the hyper-parameters of update number `num_update` (1 = first
  update, MXNet's count): lr after the schedule (and, for Adam, times sqrt(1-beta2^t)/(1-beta1^t)), wd,
  rescale_grad, clip_gradient (-1.0 = off) and momentum / beta1, beta2, epsilon. Keys: HYPER_KEYS[kind].
The C update of parameter p then uses lr*lr_mult[p] and wd*wd_mult[p]. `update_numpy` is the float32
reference of MXNet's sgd_update / sgd_mom_update / adam_update kernels: the test oracle for that C.

Default multipliers: 1.0 for every parameter, biases included; this is what `mx.optimizer.get_updater`,
`gluon.Trainer`-less scripts and the C++ package do. MXNet's Module instead passes parameter names, and
MXNet then gives wd_mult 0 to every name not ending in `_weight` or `_gamma`: `wd_rule='module'`
reproduces that (it is also the default when `param_idx2name` is given, exactly as in MXNet).
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Mapping

import numpy as np

from mxcc.train.lr_scheduler import FactorScheduler, LRScheduler, MultiFactorScheduler  # noqa: F401 (re-export)

KINDS = ("sgd", "sgd_mom", "adam")
STATE_NAMES = {"sgd": (), "sgd_mom": ("mom",), "adam": ("mean", "var")}
HYPER_KEYS = {
    "sgd": ("lr", "wd", "rescale_grad", "clip_gradient"),
    "sgd_mom": ("lr", "wd", "momentum", "rescale_grad", "clip_gradient"),
    "adam": ("lr", "wd", "rescale_grad", "clip_gradient", "beta1", "beta2", "epsilon"),
}
WD_RULES = ("all", "module")
_F32 = np.float32


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
        return STATE_NAMES[self.kind]

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
        update of this run). Keys: HYPER_KEYS[self.kind]. Python floats (double), as MXNet computes
        them before the kernel casts them to float32."""
        raise NotImplementedError

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
        h = {"lr": float(self.lr_at(num_update)), "wd": float(self.wd)}
        if self.kind == "sgd_mom":
            h["momentum"] = float(self.momentum) if self.momentum > 0 else 0.0
        h.update(rescale_grad=float(self.rescale_grad), clip_gradient=self._clip())
        return h


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
        return {"lr": float(lr), "wd": float(self.wd), "rescale_grad": float(self.rescale_grad),
                "clip_gradient": self._clip(), "beta1": float(self.beta1), "beta2": float(self.beta2),
                "epsilon": float(self.epsilon)}


_REGISTRY = {"sgd": SGD, "adam": Adam}


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
    """(new_weight, new_state) of one MXNet update of `kind` (see Optimizer.update_numpy)."""
    w = np.asarray(weight, dtype=_F32)
    g = np.asarray(grad, dtype=_F32)
    state = tuple(np.asarray(s, dtype=_F32) for s in state)
    if len(state) != len(STATE_NAMES[kind]):
        raise ValueError(f"{kind} update takes {len(STATE_NAMES[kind])} state arrays, got {len(state)}")
    lr = _F32(hyper["lr"] * lr_mult)
    wd = _F32(hyper["wd"] * wd_mult)
    rg, clip = _F32(hyper["rescale_grad"]), _F32(hyper["clip_gradient"])
    one = _F32(1.0)
    if kind == "sgd":
        if clip >= 0:
            return (one - lr * wd) * w - lr * np.clip(rg * g, -clip, clip), ()
        return (one - lr * wd) * w - (lr * rg) * g, ()
    if kind == "sgd_mom":
        mom = _F32(hyper["momentum"])
        step = lr * np.clip(rg * g, -clip, clip) if clip >= 0 else (lr * rg) * g
        m = mom * state[0] - (lr * wd) * w - step
        return w + m, (m,)
    if kind == "adam":
        b1, b2, eps = _F32(hyper["beta1"]), _F32(hyper["beta2"]), _F32(hyper["epsilon"])
        gp = rg * g + wd * w
        if clip >= 0:
            gp = np.clip(gp, -clip, clip)
        mean = b1 * state[0] + (one - b1) * gp
        var = b2 * state[1] + (one - b2) * np.square(gp)
        return w - lr * mean / (np.sqrt(var) + eps), (mean, var)
    raise ValueError(f"unknown optimizer kind {kind!r} (expected one of {KINDS})")


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
