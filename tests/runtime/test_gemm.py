"""runtime_c/gemm/: micro-kernels against their reference twins, packing layouts, and the whole GEMM against
numpy in float64 (directly for small sizes, by Freivalds' projection for large ones), the epilogue, threads,
and a sanitizer build of a C driver that compares mxcc_gemm_f32 with mxcc_gemm_f32_ref.

Every test runs once per build: -march=native (on an AVX-512 machine: the 14x32 AVX-512F kernel), x86-64-v3
(AVX2 + FMA: the 6x16 kernel) and x86-64 (plain C: the reference kernels), each skipped only when this CPU
cannot run it, so the paths of other machines stay tested here.

Tolerances. A float32 dot product of length K, FMA-contracted and summed in blocks, has a rounding error of
at most ~K·u·(|a|·|b|) and typically ~sqrt(K)·u·(|a|·|b|), u = 2^-24 ≈ 6e-8. We allow
GEMM_RTOL·sqrt(K)·(|op(A)|·|op(B)|) per output, GEMM_RTOL = 1e-6 ≈ 17u: an indexing or packing bug is off by
O(|a||b|), many orders of magnitude more, while rounding stays below it for every K tested here (worst case
K·u ≤ 1e-6·sqrt(K) up to K = 280, and random errors grow like sqrt(K), not K, beyond).
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from benchmarks._build_gemm import predefined_macros

GEMM_RTOL = 1e-6
ACTS = ["NONE", "RELU", "SIGMOID", "TANH", "SOFTRELU", "SOFTSIGN", "LEAKY", "CLIP"]
ROOT = Path(__file__).resolve().parents[2]
# the fixtures march, gemm (one build per target ISA), gemm_ws and threads are conftest.py's


def optimized(march: str) -> dict[str, list[str]]:
    """The optimized functions a -march=<march> build must define, beside the reference ones (the
    selection of gemm_f32.c): an AVX-512 build still has the AVX2 rowdot and packing, not the 6x16 kernel,
    whose panel geometry it does not use."""
    m = predefined_macros(march)
    avx2 = {"__AVX2__", "__FMA__"} <= m
    return {
        "ukernel": ["mxcc_ukernel_f32_14x32_avx512f"] if "__AVX512F__" in m else
                   ["mxcc_ukernel_f32_6x16_avx2fma"] if avx2 else [],
        "rows": ["mxcc_ukernel_f32_14x32_rows_avx512f"] if "__AVX512F__" in m else
                ["mxcc_ukernel_f32_6x16_rows_avx2fma"] if avx2 else [],
        "rowdot": (["mxcc_ukernel_f32_rowdot_avx512f"] if "__AVX512F__" in m else [])
                  + (["mxcc_ukernel_f32_rowdot_avx2fma"] if avx2 else []),
        "pack": ["mxcc_pack_a_f32_avx2", "mxcc_pack_b_f32_avx2"] if "__AVX2__" in m else [],
    }


def test_build_defines_the_kernels_of_its_isa(gemm, march):
    """The cdef (filtered by the target's macros) and the C agree, and the geometry is the ISA's."""
    ffi, lib = gemm
    want = optimized(march)
    for name in want["ukernel"] + want["rows"] + want["rowdot"] + want["pack"]:
        assert hasattr(lib, name), f"-march={march} build lacks {name}"
    tile = (lib.MXCC_GEMM_MR, lib.MXCC_GEMM_NR)
    assert tile == ((14, 32) if "__AVX512F__" in predefined_macros(march) else (6, 16)), tile


# ---- helpers ------------------------------------------------------------------------------------------


def fbuf(ffi, x: np.ndarray):
    """A float* view of a C-contiguous float32 array (keeps the array alive while the cdata lives)."""
    assert x.dtype == np.float32 and x.flags.c_contiguous
    return ffi.from_buffer("float[]", x)


def padded(rng, rows: int, cols: int, pad: int, fill=None) -> np.ndarray:
    """A (rows, cols + pad) float32 matrix: callers pass it with ld = cols + pad and use [:, :cols]."""
    x = rng.standard_normal((rows, cols + pad)).astype(np.float32)
    if fill is not None:
        x[:, :cols] = fill
    return x


def gemm_bound(opa: np.ndarray, opb: np.ndarray, k: int) -> np.ndarray:
    """The per-output error allowance described in the module docstring."""
    return GEMM_RTOL * np.sqrt(max(k, 1)) * (np.abs(opa) @ np.abs(opb)) + 1e-30


def make_problem(rng, M, N, K, ta, tb, pad=(0, 0, 0)):
    """Random A, B (stored as the transposition flags say) with padded leading dimensions."""
    a_rows, a_cols = (K, M) if ta else (M, K)
    b_rows, b_cols = (N, K) if tb else (K, N)
    A = padded(rng, a_rows, a_cols, pad[0])
    B = padded(rng, b_rows, b_cols, pad[1])
    opa = A[:, :a_cols].astype(np.float64)
    opb = B[:, :b_cols].astype(np.float64)
    opa = opa.T if ta else opa
    opb = opb.T if tb else opb
    return A, a_cols + pad[0], B, b_cols + pad[1], opa, opb


def run_gemm(gemm, ws, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, ep=None):
    ffi, lib = gemm
    lib.mxcc_gemm_f32(ws, ta, tb, M, N, K, fbuf(ffi, A), lda, fbuf(ffi, B), ldb, float(beta),
                      fbuf(ffi, C), ldc, ffi.NULL if ep is None else ep)


def act_ref(name: str, x: np.ndarray, alpha=0.1, lo=-0.5, hi=0.5) -> np.ndarray:
    """MXNet's activations (mshadow_op.h) in float64."""
    if name == "NONE":
        return x
    if name == "RELU":
        return np.where(x > 0, x, 0.0)
    if name == "SIGMOID":
        return 1.0 / (1.0 + np.exp(-x))
    if name == "TANH":
        return np.tanh(x)
    if name == "SOFTRELU":
        return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))
    if name == "SOFTSIGN":
        return x / (1 + np.abs(x))
    if name == "LEAKY":
        return np.where(x > 0, x, alpha * x)
    if name == "CLIP":
        return np.where(x < lo, lo, np.where(x > hi, hi, x))
    raise ValueError(name)


# ---- micro-kernel: the build's optimized kernel against the reference, XNNPACK-style edge matrix ----------


def test_ukernel_matches_ref_on_edge_matrix(gemm, march):
    """Every m <= MR, n <= NR, k in {1, odd, even, > unroll}, beta 0/1, strided C with guard cells; the
    build's kernel and the reference read the same packed panels (MR x NR of this build)."""
    ffi, lib = gemm
    kernels = [getattr(lib, name) for name in optimized(march)["ukernel"]] + [lib.mxcc_ukernel_f32_ref]
    MR, NR = lib.MXCC_GEMM_MR, lib.MXCC_GEMM_NR
    rng = np.random.default_rng(1)
    ldc = NR + 5  # strided C: 5 guard floats after every row
    for k in (1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33):
        ap = rng.standard_normal((k, MR)).astype(np.float32)  # one packed A micro-panel
        bp = rng.standard_normal((k, NR)).astype(np.float32)  # one packed B micro-panel
        for m in range(1, MR + 1):
            for n in range(1, NR + 1):
                exact = ap[:, :m].T.astype(np.float64) @ bp[:, :n].astype(np.float64)
                bound = gemm_bound(ap[:, :m].T, bp[:, :n], k)
                for beta in (0, 1):
                    c_old = rng.standard_normal((MR + 1, ldc)).astype(np.float32)
                    if beta == 0:
                        c_old[:m, :n] = np.nan  # beta == 0 must never read C
                    want = exact + (c_old[:m, :n] if beta else 0)
                    for kernel in kernels:
                        c = c_old.copy()
                        kernel(k, fbuf(ffi, ap), fbuf(ffi, bp), fbuf(ffi, c), ldc, m, n, beta)
                        where = f"{kernel} k={k} m={m} n={n} beta={beta}"
                        assert np.all(np.abs(c[:m, :n] - want) <= bound + 1e-6 * np.abs(want)), where
                        outside = np.ones_like(c, dtype=bool)
                        outside[:m, :n] = False
                        assert np.array_equal(c[outside], c_old[outside]), f"{where}: wrote outside the tile"


def test_rows_ukernel_is_the_packed_ukernel_on_a_in_place(gemm, march):
    """The kernel that reads A's rows in place (B prepacked, A row-major): the same bits as the build's kernel
    on the packed micro-panel of those rows, full-height tiles at every n <= NR and the last tiles of fewer rows
    it takes (AVX-512: 8-13), k past the unroll, beta 0/1, A rows strided (lda > k) with NaN between them,
    C strided with guard cells."""
    ffi, lib = gemm
    names = optimized(march)["rows"]
    if not names:
        pytest.skip(f"-march={march} has no in-place kernel (its GEMM packs A)")
    rows, packed = getattr(lib, names[0]), getattr(lib, optimized(march)["ukernel"][0])
    MR, NR = lib.MXCC_GEMM_MR, lib.MXCC_GEMM_NR
    min_m = MR // 2 + 1 if MR == 14 else MR   # MXCC_UKERNEL_ROWS_MIN_M: AVX-512 8 .. 14 rows, AVX2 full tiles
    rng = np.random.default_rng(5)
    ldc = NR + 3
    for k in (1, 3, 4, 9, 33, 100):
        lda = k + 7
        rows_of_a = rng.standard_normal((MR, k)).astype(np.float32)
        bp = rng.standard_normal((k, NR)).astype(np.float32)
        for m, n in [(MR, n) for n in range(1, NR + 1)] + [(m, n) for m in range(min_m, MR)
                                                          for n in (1, NR // 2, NR // 2 + 3, NR)]:
            # A's m rows, NaN between them and past them; the packed micro-panel zero past m (the packing's rule)
            a = np.full((MR, lda), np.nan, np.float32)
            a[:m, :k] = rows_of_a[:m]
            ap = np.zeros((k, MR), np.float32)
            ap[:, :m] = rows_of_a[:m].T
            for beta in (0, 1):
                c_old = rng.standard_normal((MR + 1, ldc)).astype(np.float32)
                c1, c2 = c_old.copy(), c_old.copy()
                packed(k, fbuf(ffi, ap), fbuf(ffi, bp), fbuf(ffi, c1), ldc, m, n, beta)
                rows(k, fbuf(ffi, a), lda, fbuf(ffi, bp), fbuf(ffi, c2), ldc, m, n, beta, ffi.NULL, 0)
                np.testing.assert_array_equal(c1, c2, err_msg=f"k={k} m={m} n={n} beta={beta}")


# ---- packing -------------------------------------------------------------------------------------------


PACK_A = ["mxcc_pack_a_f32", "mxcc_pack_a_f32_avx2"]
GUARD = 16  # floats after the packed block that must stay untouched
PACK_B = ["mxcc_pack_b_f32", "mxcc_pack_b_f32_avx2"]


def pack_fn(lib, march, name):
    if name.endswith("_avx2") and name not in optimized(march)["pack"]:
        pytest.skip(f"-march={march} has no {name}")
    return getattr(lib, name)


@pytest.mark.parametrize("pack", PACK_A)
@pytest.mark.parametrize("trans", [0, 1], ids=["notrans", "trans"])
def test_pack_a_layout_and_zero_padding(gemm, march, trans, pack):
    """Portable and AVX2 packing against the layout built with numpy; ragged panels, k past 8-float steps,
    for this build's MR (6 or 14: one or two 8-row groups)."""
    ffi, lib = gemm
    fn = pack_fn(lib, march, pack)
    MR = lib.MXCC_GEMM_MR
    rng = np.random.default_rng(2)
    for mc, kc in [(1, 1), (5, 3), (6, 7), (6, 8), (6, 9), (7, 16), (12, 17), (13, 33), (18, 2), (24, 64),
                   (14, 8), (14, 9), (15, 40), (28, 17), (29, 1)]:
        lda = (mc if trans else kc) + 3
        A = rng.standard_normal((kc if trans else mc, lda)).astype(np.float32)
        opa = A[:kc, :mc].T if trans else A[:mc, :kc]  # (mc, kc)
        panels = -(-mc // MR)
        ap = np.full(panels * MR * kc + GUARD, np.nan, np.float32)  # NaN: every float must be written
        ap[-GUARD:] = -7.0
        fn(trans, mc, kc, fbuf(ffi, A), lda, fbuf(ffi, ap))
        assert np.all(ap[-GUARD:] == -7.0), f"wrote past the packed block: mc={mc} kc={kc}"
        ap = ap[:-GUARD]
        want = np.zeros((panels * MR, kc), np.float32)
        want[:mc] = opa
        # panel p, element (k, r) = op(A)[p*MR + r, k]
        want = want.reshape(panels, MR, kc).transpose(0, 2, 1).ravel()
        assert np.array_equal(ap, want), (mc, kc)


@pytest.mark.parametrize("pack", PACK_B)
@pytest.mark.parametrize("trans", [0, 1], ids=["notrans", "trans"])
def test_pack_b_layout_and_zero_padding(gemm, march, trans, pack):
    ffi, lib = gemm
    fn = pack_fn(lib, march, pack)
    NR = lib.MXCC_GEMM_NR
    rng = np.random.default_rng(3)
    for kc, nc in [(1, 1), (3, 15), (7, 16), (8, 16), (9, 32), (16, 17), (33, 40), (2, 64), (64, 48),
                   (8, 31), (17, 33), (9, 96)]:
        ldb = (kc if trans else nc) + 3
        B = rng.standard_normal((nc if trans else kc, ldb)).astype(np.float32)
        opb = B[:nc, :kc].T if trans else B[:kc, :nc]  # (kc, nc)
        panels = -(-nc // NR)
        bp = np.full(panels * NR * kc + GUARD, np.nan, np.float32)
        bp[-GUARD:] = -7.0
        fn(trans, kc, nc, fbuf(ffi, B), ldb, fbuf(ffi, bp))
        assert np.all(bp[-GUARD:] == -7.0), f"wrote past the packed block: kc={kc} nc={nc}"
        bp = bp[:-GUARD]
        want = np.zeros((kc, panels * NR), np.float32)
        want[:, :nc] = opb
        # panel q, element (k, c) = op(B)[k, q*NR + c]
        want = want.reshape(kc, panels, NR).transpose(1, 0, 2).ravel()
        assert np.array_equal(bp, want), (kc, nc)


# ---- small-M kernels (rows of A against rows of W) ------------------------------------------------------


def test_rowdot_kernels_match_numpy(gemm, march):
    """Every rowdot kernel of the build and the reference: m = 1..9 and up to SMALLM_MAX (3/2/1-row register
    tiles), n around the 4-row W tile, k around the 8/16-float (AVX2) and 16/32-float (AVX-512) steps,
    strided, beta 0/1."""
    ffi, lib = gemm
    kernels = [getattr(lib, name) for name in optimized(march)["rowdot"]] + [lib.mxcc_ukernel_f32_rowdot_ref]
    rng = np.random.default_rng(4)
    for k in (1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 100):
        for m in sorted({*range(1, 10), 13, 16, lib.MXCC_GEMM_SMALLM_MAX - 1, lib.MXCC_GEMM_SMALLM_MAX}):
            for n in (1, 2, 3, 4, 5, 7, 8, 9, 13):
                a = padded(rng, m, k, 2)
                w = padded(rng, n, k, 1)
                exact = a[:, :k].astype(np.float64) @ w[:, :k].T.astype(np.float64)
                bound = gemm_bound(a[:, :k], w[:, :k].T, k)
                for beta in (0, 1):
                    c_old = padded(rng, m, n, 3, fill=np.nan if beta == 0 else None)
                    want = exact + (c_old[:, :n] if beta else 0)
                    for kernel in kernels:
                        c = c_old.copy()
                        kernel(m, n, k, fbuf(ffi, a), k + 2, fbuf(ffi, w), k + 1, fbuf(ffi, c), n + 3, beta)
                        where = f"{kernel} m={m} n={n} k={k} beta={beta}"
                        assert np.all(np.abs(c[:, :n] - want) <= bound + 1e-6 * np.abs(want)), where
                        assert np.array_equal(c[:, n:], c_old[:, n:]), f"{where}: wrote past n"


def test_rowdot_result_does_not_depend_on_alignment(gemm, march):
    """The same A and W at every 4-byte offset within a 128-byte line give bitwise the same C (the AVX-512
    kernel runs its k loop on W's cache-line grid; a model loaded twice must compute the same bits)."""
    ffi, lib = gemm
    kernels = [getattr(lib, name) for name in optimized(march)["rowdot"]] + [lib.mxcc_ukernel_f32_rowdot_ref]
    rng = np.random.default_rng(11)
    for m, n, k in [(1, 5, 784), (2, 4, 37), (3, 3, 100), (1, 4, 20), (5, 8, 129)]:
        a0 = rng.standard_normal((m, k)).astype(np.float32)
        w0 = rng.standard_normal((n, k)).astype(np.float32)
        for kernel in kernels:
            results = []
            for shift in range(32):
                store = np.zeros(n * k + 64, np.float32)  # W placed `shift` floats into a 128-byte line
                base = (-store.ctypes.data // 4) % 32
                w = store[base + shift: base + shift + n * k].reshape(n, k)
                w[...] = w0
                c = np.zeros((m, n), np.float32)
                kernel(m, n, k, fbuf(ffi, a0), k, ffi.from_buffer("float[]", store) + base + shift, k,
                       fbuf(ffi, c), n, 0)
                results.append(c)
            assert all(np.array_equal(r, results[0]) for r in results), f"{kernel} m={m} n={n} k={k}"


# ---- whole GEMM against numpy ---------------------------------------------------------------------------

# (M, N, K): 1, primes, around MR = 6 / 14 and NR = 16 / 32 (AVX2 / AVX-512 tiles) and their multiples, up
# to 70; M <= 32 with only B transposed takes the small-M path, the rest the packed path.
SMALL_SIZES = [
    (1, 1, 1), (1, 16, 1), (6, 16, 1), (1, 1, 70), (2, 3, 5), (7, 17, 3), (5, 15, 2), (6, 16, 8),
    (6, 16, 9), (12, 32, 16), (13, 33, 17), (11, 13, 19), (23, 29, 31), (37, 41, 43), (47, 53, 59),
    (61, 67, 70), (64, 64, 64), (70, 70, 70), (70, 1, 33), (1, 70, 33), (3, 70, 65), (9, 8, 64),
    (8, 9, 65), (4, 48, 47), (18, 5, 70), (5, 18, 1), (31, 2, 70), (2, 31, 69), (17, 64, 7), (64, 17, 6),
    (66, 66, 1), (69, 3, 3), (3, 69, 2), (48, 48, 48), (53, 19, 37), (19, 53, 41), (42, 24, 33), (7, 7, 7),
    (8, 128, 67), (1, 128, 64), (14, 32, 5), (15, 33, 9), (13, 31, 70), (28, 64, 3), (29, 65, 11),
    (42, 17, 2), (57, 47, 23),
]
# big enough for the driver to use 2 threads; split by rows (M large) or by B micro-panels (M small)
MEDIUM_SIZES = [(64, 128, 784), (256, 128, 200), (20, 300, 200), (150, 97, 131)]

TRANS = [(0, 0), (0, 1), (1, 0), (1, 1)]
TRANS_IDS = ["NN", "NT", "TN", "TT"]


@pytest.mark.parametrize("ta,tb", TRANS, ids=TRANS_IDS)
def test_gemm_matches_numpy(gemm, gemm_ws, threads, ta, tb):
    rng = np.random.default_rng(5)
    for idx, (M, N, K) in enumerate(SMALL_SIZES + MEDIUM_SIZES):
        pad = (idx % 3, (idx + 1) % 3, idx % 4)  # leading dimensions past the row lengths
        A, lda, B, ldb, opa, opb = make_problem(rng, M, N, K, ta, tb, pad[:2])
        beta = idx % 2
        C = padded(rng, M, N, pad[2], fill=np.nan if beta == 0 else None)
        c_old = C[:, :N].astype(np.float64)
        run_gemm(gemm, gemm_ws, ta, tb, M, N, K, A, lda, B, ldb, beta, C, N + pad[2])
        want = opa @ opb + (c_old if beta else 0)
        # beta 1 adds one more float32 rounding, of a value of size |c_old| + |a||b|
        bound = gemm_bound(opa, opb, K) + (GEMM_RTOL * np.abs(c_old) if beta else 0)
        err = np.abs(C[:, :N] - want)
        assert np.all(err <= bound), f"M={M} N={N} K={K} beta={beta}: max err {err.max()}"


@pytest.mark.parametrize("ta,tb", TRANS, ids=TRANS_IDS)
def test_gemm_large_freivalds(gemm, gemm_ws, threads, march, ta, tb):
    """Sizes past every block size with ragged edges, checked in O(n^2): C·r against A·(B·r) in float64.
    With C's per-element error bounded as in the module docstring, |(C - AB)·r| <= bound·|r| row by row.
    A wrong element of C (an indexing bug) is off by O(|a||b|·sqrt(K)) and shows up unless r_j ~ 0; two
    random r make a miss negligible."""
    rng = np.random.default_rng(6)
    # (M, N, K): ragged MC/KC/NC edges; N > NC = 3072 (two jc steps); K = 1100 -> 3 KC steps. The plain-C
    # build (MC 96, KC 256, NC 2048) runs ~1 GFLOP/s: one smaller problem past each of its block sizes.
    problems = [(1237, 1031, 1100, 0), (67, 3100, 391, 1), (1001, 7, 1500, 0)]
    if not optimized(march)["ukernel"]:
        problems = [(203, 2100, 300, 1)]
    for M, N, K, beta in problems:
        A, lda, B, ldb, opa, opb = make_problem(rng, M, N, K, ta, tb, (1, 2))
        C = padded(rng, M, N, 1, fill=np.nan if beta == 0 else None)
        c_old = C[:, :N].astype(np.float64)
        run_gemm(gemm, gemm_ws, ta, tb, M, N, K, A, lda, B, ldb, beta, C, N + 1)
        got = C[:, :N].astype(np.float64) - (c_old if beta else 0)
        for _ in range(2):
            r = rng.standard_normal(N)
            lhs, rhs = got @ r, opa @ (opb @ r)
            bound = GEMM_RTOL * np.sqrt(K) * (np.abs(opa) @ (np.abs(opb) @ np.abs(r)))
            assert np.all(np.abs(lhs - rhs) <= bound), f"M={M} N={N} K={K}: {np.abs(lhs - rhs).max()}"


@pytest.mark.parametrize("ta,tb", TRANS, ids=TRANS_IDS)
def test_gemm_with_prepacked_b(gemm, gemm_ws, threads, march, ta, tb):
    """mxcc_gemm_pack_b_f32 once, then mxcc_gemm_f32_packed_b (weights packed at bind time): the same
    result as numpy on small, medium (2 threads split rows or panels) and multi-block sizes (K past KC,
    N past NC), the packed size within the ISA-independent bound, and the buffer only read."""
    ffi, lib = gemm
    rng = np.random.default_rng(8)
    sizes = SMALL_SIZES[::3] + MEDIUM_SIZES + [(67, 3100, 391), (130, 70, 1100)]
    for idx, (M, N, K) in enumerate(sizes):
        A, lda, B, ldb, opa, opb = make_problem(rng, M, N, K, ta, tb, (idx % 2, (idx + 1) % 3))
        floats = lib.mxcc_gemm_packed_b_floats(K, N)
        assert K * N <= floats <= K * (-(-N // 32) * 32)
        bp = np.full(floats + 16, np.nan, np.float32)   # guard: nothing past the panels is written
        lib.mxcc_gemm_pack_b_f32(tb, K, N, fbuf(ffi, B), ldb, fbuf(ffi, bp))
        assert np.all(np.isnan(bp[floats:])) and not np.any(np.isnan(bp[:floats]))
        packed = bp.copy()
        beta = idx % 2
        C = padded(rng, M, N, 1, fill=np.nan if beta == 0 else None)
        c_old = C[:, :N].astype(np.float64)
        lib.mxcc_gemm_f32_packed_b(gemm_ws, ta, M, N, K, fbuf(ffi, A), lda, fbuf(ffi, bp), float(beta),
                                   fbuf(ffi, C), N + 1, ffi.NULL)
        want = opa @ opb + (c_old if beta else 0)
        bound = gemm_bound(opa, opb, K) + (GEMM_RTOL * np.abs(c_old) if beta else 0)
        err = np.abs(C[:, :N] - want)
        assert np.all(err <= bound), f"M={M} N={N} K={K} beta={beta}: max err {err.max()}"
        assert np.array_equal(bp[:floats], packed[:floats]), "the packed B was written"


def test_gemm_degenerate_sizes(gemm, gemm_ws):
    """K = 0 is an empty sum (C = beta·C, then the epilogue); M = 0 or N = 0 touch nothing."""
    ffi, lib = gemm
    rng = np.random.default_rng(7)
    A = np.ones((4, 4), np.float32)
    C = np.full((3, 5), np.nan, np.float32)
    run_gemm(gemm, gemm_ws, 0, 0, 3, 5, 0, A, 4, A, 4, 0, C, 5)
    assert np.array_equal(C, np.zeros((3, 5), np.float32))
    C = rng.standard_normal((3, 5)).astype(np.float32)
    bias = np.arange(5, dtype=np.float32)
    ep = ffi.new("mxcc_epilogue *", {"bias": fbuf(ffi, bias)})
    want = C + bias
    run_gemm(gemm, gemm_ws, 0, 1, 3, 5, 0, A, 4, A, 4, 1, C, 5, ep)
    assert np.array_equal(C, want)
    C = rng.standard_normal((3, 5)).astype(np.float32)
    before = C.copy()
    run_gemm(gemm, gemm_ws, 0, 0, 0, 5, 4, A, 4, A, 4, 0, C, 5)
    run_gemm(gemm, gemm_ws, 0, 0, 3, 0, 4, A, 4, A, 4, 0, C, 5)
    assert np.array_equal(C, before)


def test_workspace_with_fewer_slots_than_threads(gemm):
    """A workspace for 1 thread caps the team at 1, whatever OpenMP offers."""
    ffi, lib = gemm
    ws = lib.mxcc_gemm_ws_create(1)
    before = lib.omp_get_max_threads()
    lib.omp_set_num_threads(2)
    try:
        rng = np.random.default_rng(8)
        A, lda, B, ldb, opa, opb = make_problem(rng, 300, 200, 150, 0, 0)
        C = np.full((300, 200), np.nan, np.float32)
        run_gemm(gemm, ws, 0, 0, 300, 200, 150, A, lda, B, ldb, 0, C, 200)
        assert np.all(np.abs(C - opa @ opb) <= gemm_bound(opa, opb, 150))
    finally:
        lib.omp_set_num_threads(before)
        lib.mxcc_gemm_ws_free(ws)


def test_two_threads_repeated_calls_over_many_column_blocks(gemm, march):
    """Regression: with the team splitting only B's micro-panels (no barrier), a thread one column block
    ahead overwrote panels a slower thread was still reading (2-6% of calls wrong when N > NC and the last
    block is narrower). Each call must equal numpy, every time."""
    ffi, lib = gemm
    ws = lib.mxcc_gemm_ws_create(2)
    before = lib.omp_get_max_threads()
    lib.omp_set_num_threads(2)
    try:
        rng = np.random.default_rng(9)
        for M, N, K in [(16, 12544, 8), (8, 3136, 16), (32, 20000, 3)]:
            A, lda, B, ldb, opa, opb = make_problem(rng, M, N, K, 0, 0)
            want = opa @ opb
            for _ in range(40 if optimized(march)["ukernel"] else 8):  # the plain-C build is slow
                C = np.full((M, N), np.nan, np.float32)
                run_gemm(gemm, ws, 0, 0, M, N, K, A, lda, B, ldb, 0, C, N)
                assert np.all(np.abs(C - want) <= gemm_bound(opa, opb, K))
    finally:
        lib.omp_set_num_threads(before)
        lib.mxcc_gemm_ws_free(ws)


# ---- epilogue ------------------------------------------------------------------------------------------

# (M, N, K, ta, tb): the packed path with ragged tiles, and the small-M path (M <= 32, only B transposed)
EPILOGUE_SHAPES = [(37, 45, 29, 0, 0), (13, 70, 40, 1, 1), (5, 37, 29, 0, 1), (1, 19, 64, 0, 1)]


def _epilogue_case(gemm, ws, rng, shape, act, per_row, parts, beta):
    """Runs one GEMM with an epilogue of the given parts and compares it with a float64 numpy version."""
    ffi, lib = gemm
    M, N, K, ta, tb = shape
    A, lda, B, ldb, opa, opb = make_problem(rng, M, N, K, ta, tb, (1, 0))
    vlen = M if per_row else N
    vec = {
        # shifts up to +-30 push pre-activations past softrelu's 20 threshold and deep into sigmoid's tails
        "scale": rng.uniform(0.5, 2.0, vlen).astype(np.float32),
        "shift": rng.uniform(-30, 30, vlen).astype(np.float32),
        "bias": rng.standard_normal(vlen).astype(np.float32),
    }
    residual = padded(rng, M, N, 3)  # own leading dimension N + 3
    fields = {"per_row": per_row, "act": getattr(lib, f"MXCC_ACT_{act}"), "alpha": 0.1, "lo": -0.5, "hi": 0.5}
    keep = []
    for name in ("scale", "shift", "bias"):
        if name in parts:
            keep.append(fbuf(ffi, vec[name]))
            fields[name] = keep[-1]
    if "residual" in parts:
        keep.append(fbuf(ffi, residual))
        fields["residual"], fields["ld_residual"] = keep[-1], N + 3
    ep = ffi.new("mxcc_epilogue *", fields)
    C = padded(rng, M, N, 2, fill=np.nan if beta == 0 else None)
    x = opa @ opb + (C[:, :N].astype(np.float64) if beta else 0)
    bound = gemm_bound(opa, opb, K) + (1e-6 * np.abs(C[:, :N]) if beta else 0)
    run_gemm(gemm, ws, ta, tb, M, N, K, A, lda, B, ldb, beta, C, N + 2, ep)

    def along(v):  # a per-row vector broadcasts down columns, a per-column one along rows
        return v.astype(np.float64)[:, None] if per_row else v.astype(np.float64)[None, :]

    if "scale" in parts:
        x, bound = x * along(vec["scale"]), bound * np.abs(along(vec["scale"]))
    if "shift" in parts:
        x = x + along(vec["shift"])
    if "bias" in parts:
        x = x + along(vec["bias"])
    if "residual" in parts:
        x = x + residual[:, :N]
    # every activation is at most 1-Lipschitz (leaky/clip too), so the GEMM bound carries through; the
    # float32 epilogue adds a few roundings of values of size |x| (16u ~ 1e-6 each) and libm's ulps
    tol = bound + 1e-6 * (np.abs(x) + 1)
    want = act_ref(act, x)
    got = C[:, :N].astype(np.float64)
    assert np.all(np.abs(got - want) <= tol), (
        f"{shape} act={act} per_row={per_row} parts={parts} beta={beta}: max err {np.abs(got - want).max()}")


@pytest.mark.parametrize("per_row", [0, 1], ids=["per_col", "per_row"])
@pytest.mark.parametrize("act", ACTS)
def test_epilogue_every_activation(gemm, gemm_ws, act, per_row):
    """scale, shift, bias, residual and the activation together, with beta 1, on both GEMM paths."""
    rng = np.random.default_rng(9)
    for shape in EPILOGUE_SHAPES:
        _epilogue_case(gemm, gemm_ws, rng, shape, act, per_row, ("scale", "shift", "bias", "residual"), 1)


@pytest.mark.parametrize("parts", [("bias",), ("scale",), ("shift",), ("residual",), ("scale", "shift")])
@pytest.mark.parametrize("per_row", [0, 1], ids=["per_col", "per_row"])
def test_epilogue_each_part_alone(gemm, gemm_ws, threads, parts, per_row):
    """Each part on its own (NULL means 'nothing' for the others), beta 0, with relu."""
    rng = np.random.default_rng(10)
    # plus one problem per path big enough for 2 threads
    for shape in EPILOGUE_SHAPES + [(64, 128, 784, 0, 1), (24, 150, 300, 0, 1)]:
        _epilogue_case(gemm, gemm_ws, rng, shape, "RELU", per_row, parts, 0)


def test_softrelu_is_stable_for_large_inputs(gemm, gemm_ws):
    """log(1 + exp(x)) overflows in float32 past x ~ 88; MXNet returns x above 20."""
    ffi, lib = gemm
    A = np.array([[1.0]], np.float32)
    B = np.array([[-100.0, -20.0, 0.0, 19.5, 20.5, 100.0, 1e30]], np.float32)
    C = np.empty_like(B)
    ep = ffi.new("mxcc_epilogue *", {"act": lib.MXCC_ACT_SOFTRELU})
    run_gemm(gemm, gemm_ws, 0, 0, 1, 7, 1, A, 1, B, 7, 0, C, 7, ep)
    want = np.where(B > 20, B, np.log1p(np.exp(np.minimum(B.astype(np.float64), 20))))
    assert np.all(np.isfinite(C))
    np.testing.assert_allclose(C, want, rtol=1e-6, atol=1e-30)


# ---- sanitizer build -----------------------------------------------------------------------------------


def test_gemm_under_address_and_undefined_sanitizers(march, tmp_path):
    """tests/runtime/gemm_sanity.c against mxcc's runtime built with ASan + UBSan (+ LeakSanitizer): random
    sizes, transpositions, strides, epilogues and nested calls, compared with mxcc_gemm_f32_ref; once per
    build, so each micro-kernel's edge tiles (masked or copied) run under the sanitizers."""
    from benchmarks._build_gemm import GEMM_DIR
    from mxcc_testing import build_sanitized_driver

    exe = build_sanitized_driver(tmp_path, march, Path(__file__).with_name("gemm_sanity.c"), GEMM_DIR, std="c11")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1",
               OMP_NUM_THREADS="2")
    run = subprocess.run([str(exe), "150"], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("k,n", [(1, 1), (33, 70), (128, 64)])
def test_scaled_packed_b_is_the_packed_scaled_b(gemm, k, n):
    """mxcc_gemm_scale_packed_b_f32 (an inference BatchNorm's scale folded into a packed weight at bind time)
    gives the bits of packing op(B) with column j times scale[j]; the padding columns stay zero."""
    ffi, lib = gemm
    rng = np.random.default_rng(k * 100 + n)
    w = rng.standard_normal((n, k)).astype(np.float32)   # a FullyConnected / Convolution weight, op(B) = W^T
    scale = rng.uniform(0.25, 4.0, n).astype(np.float32)
    floats = lib.mxcc_gemm_packed_b_floats(k, n)
    got, want = np.full(floats, np.nan, np.float32), np.full(floats, np.nan, np.float32)
    lib.mxcc_gemm_pack_b_f32(1, k, n, fbuf(ffi, w), k, fbuf(ffi, got))
    lib.mxcc_gemm_scale_packed_b_f32(k, n, fbuf(ffi, got), fbuf(ffi, scale))
    lib.mxcc_gemm_pack_b_f32(1, k, n, fbuf(ffi, np.ascontiguousarray(w * scale[:, None])), k, fbuf(ffi, want))
    assert np.array_equal(got, want)


@pytest.mark.parametrize("parts", [("bias",), ("scale", "bias"), ()], ids=["bias", "scale-bias", "act-only"])
def test_prepacked_b_epilogue_is_the_packed_paths(gemm, gemm_ws, march, parts):
    """B prepacked (A's full-height tiles read in place, a column bias and a register activation applied on
    the kernel's registers) against B packed per call (the epilogue on the stored tile): the same bits for
    every activation, ragged tiles, beta 0 and 1."""
    ffi, lib = gemm
    rng = np.random.default_rng(12)
    for M, N, K, beta in [(61, 77, 45, 0), (45, 64, 300, 1), (100, 10, 33, 0)]:
        assert not lib.mxcc_gemm_small_m(M, K, 0, 1)   # both calls take the packed loops
        A, lda, B, ldb, opa, opb = make_problem(rng, M, N, K, 0, 1, (1, 0))
        bp = np.empty(lib.mxcc_gemm_packed_b_floats(K, N), np.float32)
        lib.mxcc_gemm_pack_b_f32(1, K, N, fbuf(ffi, B), ldb, fbuf(ffi, bp))
        vec = {"scale": rng.uniform(0.5, 2.0, N).astype(np.float32), "bias": rng.standard_normal(N).astype(np.float32)}
        for act in ACTS:
            fields = {"per_row": 0, "act": getattr(lib, f"MXCC_ACT_{act}"), "alpha": 0.1, "lo": -0.5, "hi": 0.5}
            keep = [fbuf(ffi, vec[name]) for name in parts]
            fields.update(zip(parts, keep))
            ep = ffi.new("mxcc_epilogue *", fields)
            C0 = rng.standard_normal((M, N)).astype(np.float32)
            C, Cp = C0.copy(), C0.copy()
            lib.mxcc_gemm_f32(gemm_ws, 0, 1, M, N, K, fbuf(ffi, A), lda, fbuf(ffi, B), ldb, float(beta), fbuf(ffi, C),
                              N, ep)
            lib.mxcc_gemm_f32_packed_b(gemm_ws, 0, M, N, K, fbuf(ffi, A), lda, fbuf(ffi, bp), float(beta),
                                       fbuf(ffi, Cp), N, ep)
            np.testing.assert_array_equal(C, Cp, err_msg=f"{M}x{N}x{K} beta={beta} act={act} parts={parts}")


@pytest.mark.parametrize("pool", [0, 1], ids=["openmp", "pool"])
def test_bits_do_not_depend_on_threads(gemm, pool):
    """1 to 32 threads (oversubscribed here: the splits of many-core machines, grid cells or row-major ranges
    of tiles), packed B or prepacked, OpenMP or mxcc's pool: the same bits (each tile of C is one sum over K
    whatever the split). MLP b256 784->128 on 16 threads takes ranges (grid_ranges)."""
    ffi, lib = gemm
    rng = np.random.default_rng(11)
    ws = lib.mxcc_gemm_ws_create(32)
    before = lib.omp_get_max_threads()
    lib.mxcc_pool_enable(pool)
    try:
        for M, N, K in [(256, 128, 784), (256, 64, 128), (100, 512, 800), (57, 200, 300)]:
            A = rng.standard_normal((M, K)).astype(np.float32)
            B = rng.standard_normal((N, K)).astype(np.float32)   # (N, K): FullyConnected's weight
            bp = np.empty(lib.mxcc_gemm_packed_b_floats(K, N), np.float32)
            lib.mxcc_gemm_pack_b_f32(1, K, N, fbuf(ffi, B), K, fbuf(ffi, bp))
            runs = {}
            for t in (1, 2, 5, 16, 32):
                lib.omp_set_num_threads(t)
                C = np.full((M, N), np.nan, np.float32)
                lib.mxcc_gemm_f32(ws, 0, 1, M, N, K, fbuf(ffi, A), K, fbuf(ffi, B), K, 0.0, fbuf(ffi, C), N, ffi.NULL)
                Cp = np.full((M, N), np.nan, np.float32)
                lib.mxcc_gemm_f32_packed_b(ws, 0, M, N, K, fbuf(ffi, A), K, fbuf(ffi, bp), 0.0, fbuf(ffi, Cp), N,
                                           ffi.NULL)
                runs[t] = (C, Cp)
            for t, (C, Cp) in runs.items():
                np.testing.assert_array_equal(runs[1][0], C, err_msg=f"{M}x{N}x{K}, {t} threads")
                # prepacked B reads A in place (full-height tiles): the same sums as packing A
                np.testing.assert_array_equal(C, Cp, err_msg=f"{M}x{N}x{K} prepacked vs packed, {t} threads")
                np.testing.assert_array_equal(runs[1][1], Cp, err_msg=f"{M}x{N}x{K} prepacked, {t} threads")
            assert np.allclose(runs[1][0], A @ B.T, rtol=1e-4, atol=1e-3)
    finally:
        lib.omp_set_num_threads(before)
        lib.mxcc_pool_enable(-1)
        lib.mxcc_gemm_ws_free(ws)
