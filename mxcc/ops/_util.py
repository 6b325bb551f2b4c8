"""Shape and loop helpers shared by the data-movement, broadcasting and reduction ops.

Axis normalization with errors naming the node, contiguous strides, numpy broadcasting, and the loop nests
their kernels run: extents plus one stride tuple per operand, with size-1 dimensions dropped and adjacent
dimensions merged wherever every operand is contiguous across them, so the generated C has as few loops as
the data allows. The results are plain ints and C index expressions for `templates/kernels/loops.c.j2` and
`reduce.c.j2`; nothing here knows about a particular op.
"""
from __future__ import annotations

import hashlib
from math import prod

PARALLEL_MIN_ELEMENTS = 1 << 15   # as codegen/lower.py: below this an OpenMP fork costs more than the loop


def norm_axis(axis: int, ndim: int, s, *, input: str = "data", what: str = "axis") -> int:
    """MXNet's CheckAxis: axis in [-ndim, ndim) -> [0, ndim), else a ShapeError naming the node."""
    ax = axis + ndim if axis < 0 else axis
    if not 0 <= ax < ndim:
        s.fail(f"{what} {axis} is out of range for a {ndim}-d input (allowed {-ndim}..{ndim - 1})", input=input)
    return ax


def strides(shape: tuple) -> tuple[int, ...]:
    """Row-major element strides of a contiguous tensor."""
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def broadcast_shape(a: tuple, b: tuple) -> tuple | None:
    """numpy's broadcast of two shapes (right-aligned; a dim of 1 stretches), or None if incompatible."""
    n = max(len(a), len(b))
    a1, b1 = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a1, b1):
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


def broadcast_strides(shape: tuple, out_shape: tuple) -> tuple[int, ...]:
    """Strides reading a contiguous `shape` at every index of `out_shape` (0 along broadcast dimensions)."""
    lead = len(out_shape) - len(shape)
    st = strides(shape)
    return tuple(0 if i < lead or shape[i - lead] == 1 else st[i - lead] for i in range(len(out_shape)))


def merge_loops(extents: tuple, operand_strides: list[tuple]) -> tuple[tuple, list[tuple]]:
    """Drop extent-1 dimensions and merge dimension i into i+1 when every operand steps contiguously
    across them (stride[i] == stride[i+1] * extent[i+1]). Always returns at least one loop."""
    dims = [(e, [s[i] for s in operand_strides]) for i, e in enumerate(extents) if e != 1]
    merged: list[tuple[int, list[int]]] = []
    for e, st in dims:
        if merged:
            pe, pst = merged[-1]
            if all(p == c * e for p, c in zip(pst, st)):
                merged[-1] = (pe * e, st)
                continue
        merged.append((e, st))
    if not merged:
        merged = [(1, [0] * len(operand_strides))]
    return tuple(e for e, _ in merged), [tuple(st[k] for _, st in merged) for k in range(len(operand_strides))]


def index_expr(strides_: tuple, vars_: tuple[str, ...], base: int = 0) -> str:
    """C index expression `base + v0 * s0 + v1 * s1 ...`, leaving out zero strides and unit factors."""
    terms = [str(base)] if base else []
    for v, s in zip(vars_, strides_):
        if s:
            terms.append(v if s == 1 else f"{v} * {s}")
    return " + ".join(terms) or "0"


def loop_nest(extents: tuple, prefix: str = "i", depth0: int = 1) -> tuple[list[dict], tuple[str, ...], str]:
    """The loops of a nest, outermost first: ({var, n, indent} per loop, the variables, the body indent)."""
    vars_ = tuple(f"{prefix}{d}" for d in range(len(extents)))
    loops = [dict(var=v, n=n, indent="    " * (depth0 + d)) for d, (v, n) in enumerate(zip(vars_, extents))]
    return loops, vars_, "    " * (depth0 + len(extents))


def loops_vars(what: str, extents: tuple, stmts) -> dict:
    """Variables of `kernels/loops.c.j2`: a nest over `extents` (outermost first) whose body is
    `stmts(loop variables) -> list of C statements`; the outer loops are split over threads when big."""
    loops, vars_, body = loop_nest(extents)
    body_stmts = list(stmts(vars_))
    return dict(what=what, loops=loops, body_indent=body, stmts=body_stmts, braces=len(body_stmts) > 1,
                close_indent=loops[-1]["indent"], parallel=prod(extents) >= PARALLEL_MIN_ELEMENTS,
                collapse=max(1, len(extents) - 1))


def elementwise_loop(what: str, out_shape: tuple, operands: list[tuple[str, tuple]], expr) -> dict:
    """`out = expr(element expressions)` over `out_shape` (contiguous), each operand (cname, strides) read
    with its own strides (0 where it is broadcast); dimensions merged first."""
    ext, sts = merge_loops(tuple(out_shape), [strides(out_shape)] + [st for _, st in operands])

    def body(vars_):
        args = [f"{name}[{index_expr(st, vars_)}]" for (name, _), st in zip(operands, sts[1:])]
        return [f"out[{index_expr(sts[0], vars_)}] = {expr(args)}"]
    return loops_vars(what, ext, body)


def reduce_to_vars(what: str, full: tuple, target: tuple, operands: list[tuple[str, tuple]], expr) -> dict:
    """Variables of `kernels/reduce.c.j2` for `out[target] = sum of expr(operand elements)` over the positions
    of `full` that broadcast to each element of `target` (right-aligned; a 1 in target is summed over): the
    gradient of an operand that a broadcasting op stretched. Operands are (cname, strides over `full`);
    sums in double. Loops over the kept dimensions are outer (parallel when big), the summed ones inner."""
    n = len(full)
    t = (1,) * (n - len(target)) + tuple(target)
    red = [d for d in range(n) if t[d] == 1 and full[d] != 1]
    kept = [d for d in range(n) if d not in red]
    tst = strides(t)
    outer_ext, outer_st = merge_loops(tuple(full[d] for d in kept),
                                      [tuple(st[d] for d in kept) for _, st in operands] + [tuple(tst[d] for d in kept)])
    inner_ext, inner_st = merge_loops(tuple(full[d] for d in red), [tuple(st[d] for d in red) for _, st in operands])
    if prod(outer_ext) == 1:
        outer_ext, outer_st = (), [()] * (len(operands) + 1)
    if prod(inner_ext) == 1:
        inner_ext, inner_st = (), [()] * len(operands)
    outer, ovars, body = loop_nest(outer_ext, "o", 1 if outer_ext else 2)   # no outer loop: a bare block
    inner, ivars, inner_body = loop_nest(inner_ext, "r", len(body) // 4)
    args = [f"{name}[{index_expr(ost + ist, ovars + ivars)}]"
            for (name, _), ost, ist in zip(operands, outer_st, inner_st)]
    return dict(what=what, bare_block=not outer_ext, outer=outer, inner=inner, body_indent=body,
                inner_indent=inner_body, close_indent=outer[-1]["indent"] if outer else "    ",
                acc_type="double", init="0.0", step=f"acc += {expr(args)}", finish="(float)acc",
                out_index=index_expr(outer_st[-1], ovars),
                parallel=bool(outer_ext) and prod(full) >= PARALLEL_MIN_ELEMENTS, collapse=max(1, len(outer_ext)))


def rng_stream(node: str) -> str:
    """A random op's stream in the context's counter RNG (runtime_c/rng/mxcc_rng.h): 64 bits of
    sha256(node name) as a C literal, stable across compiles and distinct per node."""
    return f"0x{hashlib.sha256(node.encode()).hexdigest()[:16]}ull"
