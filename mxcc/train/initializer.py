"""Parameter initializers with MXNet 1.9's naming rules (`mx.init`), filling numpy arrays from a seeded
numpy Generator.

`init(name, arr)` fills `arr` in place. Which rule applies follows `mx.init.Initializer.__call__`: a
variable attribute `__init__` (an initializer's JSON, e.g. '["zero", {}]') wins; otherwise the name's
suffix decides: `weight` -> this initializer, `bias` -> 0, `gamma` -> 1, `beta` -> 0, `min` -> 0, `max` -> 1,
and, from MXNet's legacy rules, `moving_mean`/`moving_inv_var`/`moving_avg` -> 0, `moving_var` -> 1 (MXNet
reaches those through the `__init__` attributes its BatchNorm puts on its statistics; mxcc's symbols may
not carry them). Any other name is an error, as in MXNet. `dumps()` gives MXNet's JSON form and
`create()` reads it back. The numbers are numpy's, not MXNet's: the distributions match, the samples do
not. `init_params` initialises every parameter of a symbol. Loading from files is mxcc.params' job.
"""
from __future__ import annotations

import json

import numpy as np

from mxcc.errors import ParamsError
from mxcc.passes import bind, infer_shapes

_F32 = np.float32
# (suffix, rule) in MXNet's order; "init" means the initializer's own weight rule.
_SUFFIX_RULES = (("weight", "init"), ("bias", 0.0), ("gamma", 1.0), ("beta", 0.0), ("min", 0.0), ("max", 1.0))
_LEGACY_RULES = (("moving_mean", 0.0), ("moving_var", 1.0), ("moving_inv_var", 0.0), ("moving_avg", 0.0))


class InitDesc(str):
    """A parameter name carrying its variable attributes (`mx.init.InitDesc`)."""

    def __new__(cls, name: str, attrs: dict | None = None, global_init=None):
        ret = super().__new__(cls, name)
        ret.attrs = dict(attrs or {})
        ret.global_init = global_init
        return ret


class Initializer:
    """Base class. Subclasses implement `_init_weight(name, arr, rng)`; `_kwargs` is what dumps() writes.

    `seed` (not part of dumps()) seeds the generator used when a call passes no `rng`.
    """
    registry_name = ""

    def __init__(self, *, seed: int | None = 0, **kwargs):
        self._kwargs = kwargs
        self._rng = np.random.default_rng(seed)

    def dumps(self) -> str:
        """MXNet's string form, e.g. '["xavier", {"rnd_type": "uniform", "factor_type": "avg", "magnitude": 3}]'."""
        return json.dumps([self.registry_name, self._kwargs])

    def __call__(self, desc: str, arr: np.ndarray, rng: np.random.Generator | None = None) -> None:
        """Fill `arr` (a float ndarray, written in place) for the parameter `desc` (a name or InitDesc)."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"{desc}: arr must be a numpy array, got {type(arr).__name__}")
        rng = self._rng if rng is None else rng
        init = getattr(desc, "attrs", {}).get("__init__", "")
        if init:
            create(init)._init_weight(desc, arr, rng)
            return
        for suffix, rule in _SUFFIX_RULES + _LEGACY_RULES:
            if desc.endswith(suffix):
                if rule == "init":
                    self._init_weight(desc, arr, rng)
                else:
                    arr[...] = rule
                return
        raise ParamsError(f"Unknown initialization pattern for {desc}. Default initialization is limited "
                          f"to names ending in weight, bias, gamma (1.0), beta (0.0), min, max and the "
                          f"BatchNorm moving statistics; give the variable an __init__ attribute "
                          f"(sym.Variable(name, init=...)) to set one", input=str(desc))

    def _init_weight(self, name: str, arr: np.ndarray, rng: np.random.Generator) -> None:
        raise NotImplementedError("Must override it")

    def __eq__(self, other):
        if not isinstance(other, Initializer):
            return NotImplemented
        return type(self) is type(other) and self._kwargs == other._kwargs

    def __repr__(self) -> str:
        return f"mxcc.init({self.dumps()})"


class Zero(Initializer):
    registry_name = "zero"

    def __init__(self, *, seed: int | None = 0):
        super().__init__(seed=seed)

    def _init_weight(self, _, arr, rng):
        arr[...] = 0


class One(Initializer):
    registry_name = "one"

    def __init__(self, *, seed: int | None = 0):
        super().__init__(seed=seed)

    def _init_weight(self, _, arr, rng):
        arr[...] = 1


class Constant(Initializer):
    """A scalar, or an array broadcast to the parameter's shape."""
    registry_name = "constant"

    def __init__(self, value, *, seed: int | None = 0):
        super().__init__(seed=seed, value=value)
        self.value = value

    def dumps(self) -> str:
        value = self.value if np.isscalar(self.value) else np.asarray(self.value).tolist()
        return json.dumps([self.registry_name, {"value": value}])

    def _init_weight(self, _, arr, rng):
        arr[...] = self.value


class Uniform(Initializer):
    """U[-scale, scale)."""
    registry_name = "uniform"

    def __init__(self, scale: float = 0.07, *, seed: int | None = 0):
        super().__init__(seed=seed, scale=scale)
        self.scale = scale

    def _init_weight(self, _, arr, rng):
        arr[...] = rng.uniform(-self.scale, self.scale, arr.shape)


class Normal(Initializer):
    """N(0, sigma^2)."""
    registry_name = "normal"

    def __init__(self, sigma: float = 0.01, *, seed: int | None = 0):
        super().__init__(seed=seed, sigma=sigma)
        self.sigma = sigma

    def _init_weight(self, _, arr, rng):
        arr[...] = rng.normal(0.0, self.sigma, arr.shape)


class Xavier(Initializer):
    """U[-c, c) ('uniform') or N(0, c^2) ('gaussian') with c = sqrt(magnitude / factor), factor = fan_in,
    fan_out or their mean. For a weight of shape (out, in, *k): fan_in = in * prod(k), fan_out =
    out * prod(k) (MXNet's rule, so a FullyConnected (out, in) weight has fan_in = in)."""
    registry_name = "xavier"

    def __init__(self, rnd_type: str = "uniform", factor_type: str = "avg", magnitude: float = 3, *,
                 seed: int | None = 0):
        super().__init__(seed=seed, rnd_type=rnd_type, factor_type=factor_type, magnitude=magnitude)
        if rnd_type not in ("uniform", "gaussian"):
            raise ValueError(f"Unknown random type {rnd_type!r} (expected 'uniform' or 'gaussian')")
        if factor_type not in ("avg", "in", "out"):
            raise ValueError(f"Incorrect factor type {factor_type!r} (expected 'avg', 'in' or 'out')")
        self.rnd_type, self.factor_type, self.magnitude = rnd_type, factor_type, float(magnitude)

    def scale_for(self, shape, name: str = "weight") -> float:
        """c for a weight of this shape (the bound for 'uniform', the std for 'gaussian')."""
        if len(shape) < 2:
            raise ValueError(f"Xavier initializer cannot be applied to vector {name}. It requires at least 2D.")
        hw_scale = float(np.prod(shape[2:])) if len(shape) > 2 else 1.0
        fan_in, fan_out = shape[1] * hw_scale, shape[0] * hw_scale
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}[self.factor_type]
        return float(np.sqrt(self.magnitude / factor))

    def _init_weight(self, name, arr, rng):
        scale = self.scale_for(arr.shape, name)
        if self.rnd_type == "uniform":
            arr[...] = rng.uniform(-scale, scale, arr.shape)
        else:
            arr[...] = rng.normal(0.0, scale, arr.shape)


class MSRAPrelu(Xavier):
    """Xavier 'gaussian' with magnitude 2 / (1 + slope^2) (He et al.)."""
    registry_name = "msraprelu"

    def __init__(self, factor_type: str = "avg", slope: float = 0.25, *, seed: int | None = 0):
        super().__init__("gaussian", factor_type, 2.0 / (1 + slope ** 2), seed=seed)
        self._kwargs = {"factor_type": factor_type, "slope": slope}


_REGISTRY = {c.registry_name: c for c in (Zero, One, Constant, Uniform, Normal, Xavier, MSRAPrelu)}
_REGISTRY.update(zeros=Zero, ones=One)        # MXNet's aliases


def create(spec, **kwargs) -> Initializer:
    """An initializer from an instance, a name ('xavier', 'zeros', ...) with kwargs, or MXNet's JSON form
    ('["xavier", {"magnitude": 2}]')."""
    if isinstance(spec, Initializer):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"an initializer spec must be a str or Initializer, got {type(spec).__name__}")
    if spec.startswith("["):
        try:
            spec, kwargs = json.loads(spec)
        except (ValueError, TypeError):
            raise ParamsError(f"cannot parse initializer {spec!r} (expected '[\"name\", {{...}}]')") from None
    cls = _REGISTRY.get(spec.lower())
    if cls is None:
        raise ParamsError(f"unknown initializer {spec!r} (mxcc has: {', '.join(sorted(_REGISTRY))})")
    return cls(**kwargs)


def init_params(symbol, shapes: dict, initializer: Initializer | str = "uniform", seed: int = 0, *,
                by_name: bool = True):
    """(arg_params, aux_params): float32 arrays for every parameter and auxiliary state of `symbol`.

    `shapes` are the input shapes (data, and optionally labels) that Symbol.infer_shape takes; those
    inputs and every label variable are left out. Arrays are filled in list_arguments() then
    list_auxiliary_states() order from one Generator seeded with `seed`, so the result depends only on
    (symbol, shapes, initializer, seed); each variable's `__init__` attribute is honoured.

    by_name=False reproduces MXNet's C++ package instead: its Uniform, Normal, Constant and Xavier fill
    every array with their own rule whatever its name or attributes (so cpp-package/example/mlp_cpu.cpp,
    whose parameters are w0..b2, draws its biases from U(-0.01, 0.01) as well).
    """
    init = create(initializer)
    typed = infer_shapes(bind(symbol.graph), {k: tuple(v) for k, v in shapes.items()})
    var = {n.name: n for n in typed.variables}
    rng = np.random.default_rng(seed)

    def fill(names):
        out = {}
        for name in names:
            n = var[name]
            if name in typed.inputs:
                continue
            if n.out_types is None:
                raise ParamsError(f"cannot infer the shape of {name!r} from {shapes}", input=name)
            arr = np.zeros(n.out_types[0].shape, _F32)
            if by_name:
                init(InitDesc(name, dict(n.attrs)), arr, rng)
            else:
                init._init_weight(name, arr, rng)
            out[name] = arr
        return out

    return fill(symbol.list_arguments()), fill(symbol.list_auxiliary_states())
