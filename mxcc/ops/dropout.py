"""Dropout: the identity at inference (MXNet scales at training time, "inverted dropout").

For inference the remove_dropout pass deletes it; when it survives (passes off) it is a view.
TODO(6): training mode (seeded mask, scale 1/(1-p)) and its gradient.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mxcc.ops import register
from mxcc.ops.base import Fusion, OpDef


@dataclass(frozen=True)
class DropoutAttrs:
    p: float = 0.5
    mode: Literal["training", "always"] = "training"
    axes: tuple[int, ...] = ()
    cudnn_off: bool = False

    def __post_init__(self):
        if not 0.0 <= self.p < 1.0:
            raise ValueError(f"p must be in [0, 1), got {self.p}")
        if self.mode == "always" and self.p > 0:
            raise ValueError("mode='always' (dropout at inference) is not supported yet")


DROPOUT = register(OpDef(
    name="Dropout", attrs=DropoutAttrs, inputs=lambda a: ("data",), infer=lambda a, s: [s.known("data")] * 2, hidden_outputs=1,
    output_names=lambda a: ("output", "mask"), fusion=Fusion.INJECTIVE, view=True,
    identity_in_inference=True, doc=__doc__))
