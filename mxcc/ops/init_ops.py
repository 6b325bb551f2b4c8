"""Constant fills: `_zeros` and `_ones` (no inputs: shape and dtype attributes), `zeros_like` and `ones_like`.

What a Gluon recurrent layer exports for its default begin states: `_zeros(shape=(L*D, 0, H))` (mx.sym.zeros).
All four are elementwise rows lowered by the fused elementwise loop (`out[i] = 0.0f`); a fill with no inputs
is computed once at bind time in an inference build (passes/fold_constants.py folds a node whose inputs are
all constants, which a node without inputs trivially is) and in every training forward otherwise.
Gradients: none flows through a fill (MXNet's MakeZeroGradNodes): `zeros_like`/`ones_like` give their input
a zero gradient. `_zeros_like` (elemwise.py) is mxcc's own internal zero of autodiff, kept apart from these
public names.

Deferred dimensions: MXNet writes 0 for a dimension it infers later from the consumer (the batch of a Gluon
begin state: `(2, 0, 8)`). mxcc infers shapes forward only, so such a `_zeros` keeps its 0: an empty tensor
of that shape, which the RNN op reads as the zero state it stands for (ops/rnn.py). `_ones` (and any fill
of a value other than zero) with a 0 dimension is refused with a ShapeError naming the node: its consumer
could not tell what it holds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mxcc.ops import register
from mxcc.ops.base import Fusion, NoAttrs, OpDef

DTYPES = Literal["float32", "float64", "float16", "bfloat16", "uint8", "int8", "int32", "int64", "bool"]


@dataclass(frozen=True)
class InitAttrs:
    """MXNet's InitOpParam (init_op.h): shape, ctx (a device, ignored), dtype (float32 only here)."""
    shape: tuple[int, ...] = ()
    ctx: str = ""
    dtype: DTYPES = "float32"

    def __post_init__(self):
        if self.dtype != "float32":
            raise ValueError(f"dtype={self.dtype} is not supported (mxcc computes in float32 only)")
        if any(d < 0 for d in self.shape):
            raise ValueError(f"shape {self.shape} has a negative dimension")



def _fill_infer(value: float):
    def infer(a: InitAttrs, s):
        if not a.shape:
            s.fail("needs a non-empty `shape` attribute (a 0-d fill is not supported)")
        if 0 in a.shape and value != 0.0:
            s.fail(f"shape {a.shape} has a 0, a dimension MXNet infers from the consumer; mxcc infers shapes "
                   "forward only and supports that for `_zeros` begin states of an RNN alone: give the "
                   "shape in full")
        return [a.shape]
    return infer


def _like_infer(a, s):
    return [s.known("data")]


ZEROS = register(OpDef(
    name="_zeros", attrs=InitAttrs, inputs=lambda a: (), infer=_fill_infer(0.0), fusion=Fusion.ELEMWISE,
    c_expr=lambda a, xs: "0.0f", grad=lambda a, g: {}, doc=__doc__))
ONES = register(OpDef(
    name="_ones", attrs=InitAttrs, inputs=lambda a: (), infer=_fill_infer(1.0), fusion=Fusion.ELEMWISE,
    c_expr=lambda a, xs: "1.0f", grad=lambda a, g: {}, doc=__doc__))
ZEROS_LIKE = register(OpDef(
    name="zeros_like", attrs=NoAttrs, inputs=lambda a: ("data",), infer=_like_infer, fusion=Fusion.ELEMWISE,
    inplace=True, c_expr=lambda a, xs: "0.0f", grad=lambda a, g: {}, doc=__doc__))
ONES_LIKE = register(OpDef(
    name="ones_like", attrs=NoAttrs, inputs=lambda a: ("data",), infer=_like_infer, fusion=Fusion.ELEMWISE,
    inplace=True, c_expr=lambda a, xs: "1.0f", grad=lambda a, g: {}, doc=__doc__))
