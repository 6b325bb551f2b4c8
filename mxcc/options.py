"""CompileOptions: the one place where flags and MXCC_* environment variables become settings.

Below this boundary code takes options as arguments; no pass, template or runtime reads the environment.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class CompileOptions:
    fuse: bool = True             # --no-fuse: one kernel per node
    plan: bool = True             # --no-plan: one arena range per intermediate
    fold: bool = True             # --no-fold: no constant folding (param-only nodes run in every forward)
    schedule: bool = True         # --no-schedule: kernels in the graph's node order, not the memory-aware one
    train: bool = False           # backward + update (an Executor)
    is_train: bool = True         # with train: the forward in training mode (BatchNorm batch statistics and
                                  # moving-stat updates, Dropout masks), as MXNet's forward(is_train=True);
                                  # False: gradients of the inference function (forward(is_train=False))
    profile: bool = True          # TODO(7): profiler call sites compiled in
    isa: str = "native"           # -march value: "native", or e.g. "x86-64" for the scalar fallback
    opt_level: str = "-O3"
    cc: str = "gcc"
    sanitize: bool = False        # -fsanitize=address,undefined at -O1, whatever opt_level (tests)
    dynamic_batch: bool = False   # --dynamic-batch: the batch of each input (its leading dimension, or the one
                                  # marked '?') is a maximum; a call runs any batch 1..it (passes/infer_batch.py)
    poison: bool = False          # tests (MXCC_POISON=1): before each call the arena, the kernels' scratch,
                                  # outputs and gradients are filled with NaN, and each kernel's outputs again
                                  # just before it runs, so a read of memory nothing wrote shows up as NaN
    tune: bool = False            # --tune / MXCC_TUNE=1: each convolution of an inference build runs the path
                                  # measured fastest on this host (compiler/tune.py, cached per CPU and layer)
                                  # instead of the heuristics' (ops/convolution.py: path); training builds
                                  # ignore it
    tune_threads: int = 0         # --tune-threads: the thread count to tune for (0: the compile's `threads`,
                                  # else the OpenMP default of this process)
    conv_paths: tuple = ()        # ((node name, path), ...): the paths these layers must take in inference plans
                                  # (passes/choose_paths.py checks each against the layer's candidates); a
                                  # dict is accepted. A tuned build adds its choices here.

    @classmethod
    def from_env(cls, **overrides) -> "CompileOptions":
        """Defaults, then MXCC_CC / CC for the compiler, MXCC_POISON=1 and MXCC_TUNE=1, then explicit keyword
        overrides (tune=False overrides MXCC_TUNE=1)."""
        kw = {"cc": os.environ.get("MXCC_CC") or os.environ.get("CC") or "gcc"}
        for var, name in (("MXCC_POISON", "poison"), ("MXCC_TUNE", "tune")):
            if os.environ.get(var, "") not in ("", "0"):
                kw[name] = True
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise TypeError(f"unknown compile option(s): {', '.join(sorted(unknown))} "
                            f"(known: {', '.join(sorted(known))})")
        kw.update({k: v for k, v in overrides.items() if v is not None})
        if isinstance(kw.get("conv_paths"), dict):
            kw["conv_paths"] = tuple(sorted(kw["conv_paths"].items()))
        return cls(**kw)


def cache_dir() -> str:
    """$MXCC_CACHE_DIR, else $XDG_CACHE_HOME/mxcc, else ~/.cache/mxcc."""
    d = os.environ.get("MXCC_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mxcc")
