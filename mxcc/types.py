"""Tensor types: dtype, shape and byte size, shared by every stage."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from math import prod

import numpy as np

Shape = tuple  # tuple[int, ...]


class DType(enum.Enum):
    """Element types, with MXNet's type flag (the `__dtype__` attribute and the .params record)."""
    float32 = 0
    float64 = 1
    float16 = 2
    uint8 = 3
    int32 = 4
    int8 = 5
    int64 = 6

    @property
    def itemsize(self) -> int:
        return np.dtype(self.name).itemsize

    @property
    def c_type(self) -> str:
        return {"float32": "float", "float64": "double"}.get(self.name, self.name + "_t")


@dataclass(frozen=True)
class TensorType:
    shape: tuple
    dtype: DType = DType.float32

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{self.dtype.name[0]}{self.dtype.itemsize * 8}[{', '.join(map(str, self.shape))}]"
