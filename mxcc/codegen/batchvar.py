"""The dynamic batch as lowering sees it: an extent `a*N + b`, printed as C over the kernel's local `N`.

A module compiled with a dynamic batch (passes/infer_batch.py says which dimension of each value holds the
batch) is lowered once with those dimensions symbolic: every op's lowering and every template computes with
`Extent`s as with ints (`m = prod(shape[:-1])` is `Extent(784, 0)` times ... ), and what they print is a C
expression of `N`, the batch of the call (`const long N = ctx->batch;` in each kernel that uses it). What
cannot be computed without knowing N (a comparison: which GEMM path for M = N*pixels, whether a loop is worth
a parallel region) raises `BatchDecision`; the op decides such things with `decide` (at run time, in C) or
`at_max` (once, for the largest batch: the workspace it plans for).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np


_OPEN, _CLOSE = "\u27e8", "\u27e9"
_MARK = re.compile(_OPEN + r"E(-?\d+),(-?\d+)" + _CLOSE + r"(\.0f|\.0|L)?")


def c_text(text: str) -> str:
    """`text` with every Extent printed as C over the local `N`: N, (64 * N), (64 * N + 3); a number suffix
    after it (L, .0, .0f) becomes a cast."""
    def sub(m):
        a, b, suffix = int(m[1]), int(m[2]), m[3]
        expr = "N" if a == 1 and b == 0 else f"{a} * N" if b == 0 else f"{a} * N {'+' if b > 0 else '-'} {abs(b)}"
        if suffix == ".0f":
            return f"(float)({expr})"
        if suffix == ".0":
            return f"(double)({expr})"
        return expr if expr == "N" else f"({expr})"
    return _MARK.sub(sub, text) if _OPEN in text else text


def uses_batch(text: str) -> bool:
    return _OPEN in text


class BatchDecision(TypeError):
    """An op compared a batch-dependent extent with a number: it must say whether at run time or at the max."""


@dataclass(frozen=True)
class Extent:
    """`a*N + b` elements; `maximum` is N's largest value (the arena is planned for it)."""
    a: int
    b: int = 0
    maximum: int = 1

    # -- arithmetic with ints (and other Extents where the result stays linear in N) --------------------
    def _lift(self, other) -> "Extent | None":
        if isinstance(other, Extent):
            return other
        if isinstance(other, (int, np.integer)) and not isinstance(other, bool):
            return Extent(0, int(other), self.maximum)
        return None

    @staticmethod
    def _make(a: int, b: int, maximum: int):
        return b if a == 0 else Extent(a, b, maximum)

    def __add__(self, other):
        o = self._lift(other)
        if o is None:
            return NotImplemented
        return self._make(self.a + o.a, self.b + o.b, self.maximum)

    __radd__ = __add__

    def __sub__(self, other):
        o = self._lift(other)
        if o is None:
            return NotImplemented
        return self._make(self.a - o.a, self.b - o.b, self.maximum)

    def __rsub__(self, other):
        o = self._lift(other)
        if o is None:
            return NotImplemented
        return o - self

    def __neg__(self):
        return self._make(-self.a, -self.b, self.maximum)

    def __mul__(self, other):
        o = self._lift(other)
        if o is None:
            return NotImplemented
        if o.a and self.a:
            raise BatchDecision(f"({self.text()}) * ({o.text()}): the batch in two factors of one extent")
        if o.a:
            return o * self.b
        return self._make(self.a * o.b, self.b * o.b, self.maximum)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        o = self._lift(other)
        if o is None:
            return NotImplemented
        if o.a == 0:
            if o.b and self.a % o.b == 0 and self.b % o.b == 0:
                return self._make(self.a // o.b, self.b // o.b, self.maximum)
        elif self.b == 0 and o.b == 0 and self.a % o.a == 0:
            return self.a // o.a              # (kN) // (jN): per-sample counts
        raise BatchDecision(f"({self.text()}) // ({o!r}) is not an extent of N")

    def __rfloordiv__(self, other):
        o = self._lift(other)
        if o is None:
            return NotImplemented
        return o // self

    def __mod__(self, other):
        o = self._lift(other)
        if o is not None and o.a == 0 and o.b and self.a % o.b == 0:
            return self.b % o.b
        raise BatchDecision(f"({self.text()}) % ({other!r}) depends on the batch")

    def __truediv__(self, other):
        raise BatchDecision(f"({self.text()}) / {other!r}: a float of the batch (write it in C: Extent.c_float)")

    __rtruediv__ = __truediv__

    # -- what needs N's value: a Cond, a C condition the op prints (or evaluates at_max) ---------------
    def _decide(self, op, other):
        o = self._lift(other)
        if o is None:
            return NotImplemented
        fn = {"<": int.__lt__, "<=": int.__le__, ">": int.__gt__, ">=": int.__ge__}[op]
        at = lambda n: fn(self.at(n), o.at(n))      # noqa: E731  (both sides linear in N: monotone)
        if at(1) == at(self.maximum):               # the same for every batch 1..max: no run-time test
            return at(1)
        return Cond(f"({self} {op} {o if isinstance(o, int) else other})",
                    lambda n, a=self, b=o: fn(a.at(n), b.at(n) if isinstance(b, Extent) else b), self.maximum)

    def __lt__(self, other):
        return self._decide("<", other)

    def __le__(self, other):
        return self._decide("<=", other)

    def __gt__(self, other):
        return self._decide(">", other)

    def __ge__(self, other):
        return self._decide(">=", other)

    def __eq__(self, other):
        # structural: an extent of N is equal only to the same extent (never to a number: code written for
        # "not 1" handles N = 1 too, as a loop of one step), so shape comparisons and merges stay exact
        if isinstance(other, Extent):
            return (self.a, self.b) == (other.a, other.b)
        return False

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash((self.a, self.b))

    def __bool__(self):
        return True                         # N >= 1: a*N + b with a > 0 is never 0 for the extents we build

    def __index__(self):
        raise BatchDecision(f"{self.text()} used as a Python int (a range, an index): it depends on the batch")

    def __int__(self):
        return self.__index__()

    # -- values ---------------------------------------------------------------------------------------
    def at(self, n: int) -> int:
        return self.a * n + self.b

    @property
    def at_max(self) -> int:
        return self.at(self.maximum)

    def text(self) -> str:
        """Readable: N, 64*N, (64*N + 3)."""
        term = "N" if self.a == 1 else f"{self.a}*N"
        if self.b == 0:
            return term
        return f"({term} {'+' if self.b > 0 else '-'} {abs(self.b)})"

    def __str__(self) -> str:
        # a marker that c_text() turns into C once the text is whole: templates append suffixes to numbers
        # (`{{ v.rows }}L`, `{{ v.count }}.0`), which the C of an expression must absorb
        return f"{_OPEN}E{self.a},{self.b}{_CLOSE}"

    def __repr__(self) -> str:
        return self.text()

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class Cond:
    """A condition on the batch: printed, the C expression of N to test at run time (`#pragma omp parallel
    for if(...)`, `if (N == 1)`); `at(n)` / `at_max` its value. Its truth in Python is undefined (BatchDecision):
    the op chooses which."""

    def __init__(self, c: str, fn, maximum: int):
        self.c, self.fn, self.maximum = c, fn, maximum

    def at(self, n: int) -> bool:
        return bool(self.fn(n))

    @property
    def at_max(self) -> bool:
        return self.at(self.maximum)

    def __str__(self) -> str:
        return self.c

    __repr__ = __str__

    def __bool__(self):
        raise BatchDecision(f"{c_text(self.c)}: whether it holds depends on the batch N (1..{self.maximum})")

    def __and__(self, other):
        return _combine(self, other, "&&", lambda x, y: x and y)

    __rand__ = __and__

    def __or__(self, other):
        return _combine(self, other, "||", lambda x, y: x or y)

    __ror__ = __or__

    def __invert__(self):
        return Cond(f"(!{self.c})", lambda n: not self.at(n), self.maximum)

    def __int__(self):
        raise BatchDecision(f"int({c_text(self.c)}): whether it holds depends on the batch N (1..{self.maximum})")


def _combine(a: Cond, b, op: str, fn) -> "Cond | bool":
    if isinstance(b, Cond):
        return Cond(f"({a.c} {op} {b.c})", lambda n: fn(a.at(n), b.at(n)), a.maximum)
    b = bool(b)
    if op == "&&":
        return a if b else False
    return True if b else a


def cond_of(x):
    """A condition the template prints as C: a Cond as is (tested at run time), anything else 1 or 0."""
    return x if isinstance(x, Cond) else int(bool(x))


def c_and(cond, expr: str) -> str:
    """The C of `cond && expr` (templates: `'omp_get_max_threads() <= ...' if parallel else '0'`)."""
    if isinstance(cond, Cond):
        return f"({cond} && {expr})"
    return expr if cond else "0"


def is_cond(x) -> bool:
    return isinstance(x, Cond)


def is_dynamic(x) -> bool:
    return isinstance(x, Extent)


def at_max(x):
    """`x` (an Extent or a Cond) at the largest batch (anything else unchanged): for what is planned once (a workspace's size, a bind-time
    packing), never for the extents a kernel loops over."""
    return x.at_max if isinstance(x, (Extent, Cond)) else x


def has_dynamic(values) -> bool:
    return any(isinstance(v, Extent) for v in values)
