"""Learning-rate schedules with MXNet 1.9's exact stepping (`mx.lr_scheduler`), as functions of the
update count.

`scheduler(num_update)` returns the learning rate of update number `num_update` (1 for the first update,
as MXNet's optimizer counts). MXNet's schedulers are stateful: they multiply `base_lr` in place as the
count passes each step. Here the same float multiplications are replayed from the construction-time
`base_lr`, so the value depends on `num_update` alone and equals MXNet's for every call sequence MXNet
itself makes (non-decreasing counts); a memo of the last replay keeps long schedules O(1) per call and
never changes a result. The optimizer (mxcc/train/optimizer.py) decides when and with which count to ask.
"""
from __future__ import annotations

import copy

WARMUP_MODES = ("linear", "constant")


class LRScheduler:
    """Base: `base_lr` and MXNet's warmup. While num_update < warmup_steps the rate ramps linearly from
    warmup_begin_lr to `warmup_final_lr` (the base_lr given at construction, which MXNet keeps even when
    an optimizer later overrides base_lr) or stays at warmup_begin_lr ('constant')."""

    def __init__(self, base_lr: float = 0.01, warmup_steps: int = 0, warmup_begin_lr: float = 0,
                 warmup_mode: str = "linear"):
        if not isinstance(warmup_steps, int):
            raise ValueError(f"warmup_steps must be an int, got {warmup_steps!r}")
        if warmup_begin_lr > base_lr:
            raise ValueError("Base lr has to be higher than warmup_begin_lr")
        if warmup_steps < 0:
            raise ValueError("Warmup steps has to be positive or 0")
        if warmup_mode not in WARMUP_MODES:
            raise ValueError("Supports only linear and constant modes of warmup")
        self.base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.warmup_begin_lr = warmup_begin_lr
        self.warmup_final_lr = base_lr
        self.warmup_mode = warmup_mode

    def get_warmup_lr(self, num_update: int) -> float:
        if self.warmup_mode == "linear":
            increase = (self.warmup_final_lr - self.warmup_begin_lr) \
                * float(num_update) / float(self.warmup_steps)
            return self.warmup_begin_lr + increase
        return self.warmup_begin_lr

    def with_base_lr(self, base_lr: float) -> "LRScheduler":
        """A copy with base_lr replaced: what MXNet's Optimizer does to its scheduler when it is also
        given learning_rate (MXNet mutates the caller's object; mxcc leaves it alone)."""
        new = copy.copy(self)
        new.base_lr = base_lr
        new._memo = None
        return new

    def __call__(self, num_update: int) -> float:
        raise NotImplementedError("must override this")

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({fields})"


class FactorScheduler(LRScheduler):
    """base_lr * factor^k, where k counts the multiples of `step` that num_update has passed (the rate
    first changes at update step+1), never below stop_factor_lr. Warmup does not shift the steps."""

    def __init__(self, step: int, factor: float = 1, stop_factor_lr: float = 1e-8, base_lr: float = 0.01,
                 warmup_steps: int = 0, warmup_begin_lr: float = 0, warmup_mode: str = "linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if step < 1:
            raise ValueError("Schedule step must be greater or equal than 1 round")
        if factor > 1.0:
            raise ValueError("Factor must be no more than 1 to make lr reduce")
        self.step = step
        self.factor = factor
        self.stop_factor_lr = stop_factor_lr
        self._memo: tuple[int, float] | None = None      # (decays replayed, lr after them)

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        decays = max(0, (num_update - 1) // self.step)   # MXNet: `while num_update > count + step`
        done, lr = self._memo if self._memo and self._memo[0] <= decays else (0, self.base_lr)
        while done < decays:
            if self._fixed_point(lr):
                done = decays
                break
            lr *= self.factor
            if lr < self.stop_factor_lr:
                lr = self.stop_factor_lr
            done += 1
        self._memo = (done, lr)
        return lr

    def _fixed_point(self, lr: float) -> bool:
        """True when one more decay step would return `lr` itself (so all further ones do too)."""
        if self.factor == 1.0:
            return lr >= self.stop_factor_lr
        return lr == self.stop_factor_lr and self.factor < 1.0


class MultiFactorScheduler(LRScheduler):
    """base_lr * factor^k, where k counts the entries of the increasing list `step` below num_update."""

    def __init__(self, step, factor: float = 1, base_lr: float = 0.01, warmup_steps: int = 0,
                 warmup_begin_lr: float = 0, warmup_mode: str = "linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        if not isinstance(step, (list, tuple)) or len(step) < 1:
            raise ValueError("step must be a non-empty list of increasing integers")
        for i, s in enumerate(step):
            if i != 0 and step[i] <= step[i - 1]:
                raise ValueError("Schedule step must be an increasing integer list")
            if s < 1:
                raise ValueError("Schedule step must be greater or equal than 1 round")
        if factor > 1.0:
            raise ValueError("Factor must be no more than 1 to make lr reduce")
        self.step = list(step)
        self.factor = factor

    def __call__(self, num_update: int) -> float:
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        lr = self.base_lr
        for s in self.step:
            if num_update <= s:
                break
            lr *= self.factor                            # one multiply per passed step, as MXNet does
        return lr
