"""mxcc_gemm_f32_small_m_packed_b (runtime_c/gemm/smallm_packed_f32.c): a few rows of A against B packed once,
the batch-1..4 FullyConnected of an inference plan. Against numpy in float64 with test_gemm.py's error bound,
on every ISA build (AVX-512, AVX2+FMA, plain C), for M past its fast bound too (row chunks), N across panel
edges, odd and even K, padded leading dimensions; the epilogue; 1 and 2 threads bit for bit; B only read."""
import numpy as np
import pytest

from test_gemm import ACTS, act_ref, fbuf, gemm_bound, padded   # the fixtures gemm, march: conftest.py's

SIZES = [(1, 1, 1), (1, 5, 2), (1, 31, 3), (1, 32, 17), (1, 33, 128), (1, 128, 784), (1, 129, 9),
         (2, 64, 128), (2, 100, 33), (3, 10, 64), (3, 200, 5), (4, 128, 127), (5, 65, 31), (7, 96, 64),
         (9, 40, 50)]


def _pack(gemm, rng, N, K):
    """W (N, K) as FullyConnected keeps it, packed as op(B) = W^T; the buffer has a NaN guard past its end."""
    ffi, lib = gemm
    W = rng.standard_normal((N, K)).astype(np.float32)
    floats = lib.mxcc_gemm_packed_b_floats(K, N)
    bp = np.full(floats + 16, np.nan, np.float32)
    lib.mxcc_gemm_pack_b_f32(1, K, N, fbuf(ffi, W), K, fbuf(ffi, bp))
    return W, bp, floats


def _run(gemm, M, N, K, A, bp, C, ep=None, parallel=1):
    ffi, lib = gemm
    lib.mxcc_gemm_f32_small_m_packed_b(M, N, K, fbuf(ffi, A), A.shape[1], fbuf(ffi, bp), fbuf(ffi, C), C.shape[1],
                                       ffi.NULL if ep is None else ep, parallel)


def test_matches_numpy(gemm):
    rng = np.random.default_rng(0)
    for M, N, K in SIZES:
        A = padded(rng, M, K, 3)
        W, bp, floats = _pack(gemm, rng, N, K)
        packed = bp.copy()
        C = padded(rng, M, N, 2, fill=np.nan)         # beta 0: C is write-only; the 2 pad columns are kept
        pad = C[:, N:].copy()
        _run(gemm, M, N, K, A, bp, C)
        opa, opb = A[:, :K].astype(np.float64), W.T.astype(np.float64)
        err = np.abs(C[:, :N] - opa @ opb)
        assert np.all(err <= gemm_bound(opa, opb, K)), f"M={M} N={N} K={K}: max err {err.max()}"
        assert np.array_equal(C[:, N:], pad), f"M={M} N={N} K={K}: wrote past N"
        assert np.array_equal(bp, packed, equal_nan=True), "the packed B was written"


def test_threads_give_the_same_bits(gemm):
    ffi, lib = gemm
    rng = np.random.default_rng(1)
    before = lib.omp_get_max_threads()
    try:
        for M, N, K in [(1, 128, 784), (2, 300, 700), (3, 1000, 256), (4, 64, 4000)]:
            A = padded(rng, M, K, 0)
            _, bp, _ = _pack(gemm, rng, N, K)
            out = []
            for t in (1, 2):
                lib.omp_set_num_threads(t)
                C = np.zeros((M, N), np.float32)
                _run(gemm, M, N, K, A, bp, C)
                out.append(C)
            serial = np.zeros((M, N), np.float32)
            _run(gemm, M, N, K, A, bp, serial, parallel=0)
            assert np.array_equal(out[0], out[1]) and np.array_equal(out[0], serial), f"M={M} N={N} K={K}"
    finally:
        lib.omp_set_num_threads(before)


@pytest.mark.parametrize("act", ACTS)
def test_epilogue(gemm, act):
    """FullyConnected's epilogue: per-column bias (scale, shift and a residual too), then the activation."""
    ffi, lib = gemm
    rng = np.random.default_rng(2)
    for M, N, K in [(1, 70, 40), (3, 33, 9), (6, 130, 17)]:
        A = padded(rng, M, K, 1)
        W, bp, _ = _pack(gemm, rng, N, K)
        scale, shift, bias = (rng.uniform(0.5, 2, N).astype(np.float32), rng.uniform(-3, 3, N).astype(np.float32),
                              rng.standard_normal(N).astype(np.float32))
        residual = padded(rng, M, N, 3)
        keep = [fbuf(ffi, v) for v in (scale, shift, bias, residual)]
        ep = ffi.new("mxcc_epilogue *", {"scale": keep[0], "shift": keep[1], "bias": keep[2], "per_row": 0,
                                         "residual": keep[3], "ld_residual": N + 3,
                                         "act": getattr(lib, f"MXCC_ACT_{act}"), "alpha": 0.1, "lo": -0.5, "hi": 0.5})
        C = padded(rng, M, N, 2, fill=np.nan)
        _run(gemm, M, N, K, A, bp, C, ep)
        opa, opb = A[:, :K].astype(np.float64), W.T.astype(np.float64)
        x = (opa @ opb) * scale + shift + bias + residual[:, :N]
        tol = gemm_bound(opa, opb, K) * scale + 1e-6 * (np.abs(x) + 1)
        assert np.all(np.abs(C[:, :N] - act_ref(act, x)) <= tol), f"{act} M={M} N={N} K={K}"


# ---- the small-M path's choice, mirrored in Python -----------------------------------------------------------
# mxcc/ops/fully_connected.py packs a constant weight at bind time only where mxcc_gemm_f32 would not take its
# small-M path (rows of A against rows of W, no packing): it must predict gemm_f32.c's dispatch exactly. Its
# bounds are read from gemm_config.h; the condition is compared here with mxcc_gemm_small_m (what gemm_run
# calls) on a grid around both bounds, and with the path mxcc_gemm_f32 actually runs at a few of them.


def _grid(cap_a):
    ms = [1, 2, 3, 15, 16, 31, 32, 33, 64, 1000]
    ks = sorted({1, 2, 7, 784, 4096, cap_a // 32, cap_a // 32 + 1, cap_a // 31, cap_a // 2, cap_a, cap_a + 1})
    return [(m, k, ta, tb) for m in ms for k in ks for ta in (0, 1) for tb in (0, 1)]


def test_python_small_m_choice_is_the_c_dispatch(gemm):
    from mxcc.ops import fully_connected as fc
    _, lib = gemm
    assert fc.GEMM_SMALL_M == lib.MXCC_GEMM_SMALLM_MAX
    for m, k, ta, tb in _grid(fc.GEMM_SMALL_M_A):
        c_small = bool(lib.mxcc_gemm_small_m(m, k, ta, tb))
        assert fc.gemm_small_m(m, k, bool(ta), bool(tb)) == c_small, (m, k, ta, tb)
        # a weight is packed where the small-M path would not read it, or where packed rows pay: 2 rows and
        # from GEMM_PACKED_FROM_M rows on outputs of GEMM_PACKED_FROM_N columns or more, never on narrower ones
        # (1 and 2 rows only where the columns fill the 32-column panels: panels_filled)
        for n in (10, 40, fc.GEMM_PACKED_FROM_N - 1, fc.GEMM_PACKED_FROM_N, 65, 1000):
            filled = n >= 0.9 * -(-n // 32) * 32
            wide = n >= fc.GEMM_PACKED_FROM_N and ((m == 2 and filled) or m >= fc.GEMM_PACKED_FROM_M)
            assert fc.prepack_pays(m, bool(tb), k, n, bool(ta)) == ((m == 1 and filled) or not c_small or wide), \
                (m, k, n, ta, tb)


def test_gemm_runs_the_path_the_python_choice_predicts(gemm, march):
    """At the bounds, mxcc_gemm_f32's bits are those of the build's rowdot kernel exactly when the Python
    predicate says small-M, else those of the packed loops (mxcc_gemm_f32_packed_b, the same micro-kernel and
    K steps)."""
    from mxcc.ops import fully_connected as fc
    from test_gemm import optimized
    ffi, lib = gemm
    rowdot = getattr(lib, (optimized(march)["rowdot"] or ["mxcc_ukernel_f32_rowdot_ref"])[0])
    cap_m, cap_k = fc.GEMM_SMALL_M, fc.GEMM_SMALL_M_A // fc.GEMM_SMALL_M
    rng = np.random.default_rng(3)
    before = lib.omp_get_max_threads()
    lib.omp_set_num_threads(1)
    ws = lib.mxcc_gemm_ws_create(1)
    try:
        for M, N, K, ta in [(cap_m, 40, cap_k, 0), (cap_m, 40, cap_k + 1, 0), (cap_m + 1, 40, 300, 0),
                            (cap_m, 40, 300, 0), (5, 40, 300, 1), (1, 40, 300, 0)]:
            A = rng.standard_normal((K, M) if ta else (M, K)).astype(np.float32)
            W = rng.standard_normal((N, K)).astype(np.float32)
            got = np.zeros((M, N), np.float32)
            lib.mxcc_gemm_f32(ws, ta, 1, M, N, K, fbuf(ffi, A), A.shape[1], fbuf(ffi, W), K, 0.0, fbuf(ffi, got), N,
                              ffi.NULL)
            by_rows = np.zeros((M, N), np.float32)
            if not ta:
                rowdot(M, N, K, fbuf(ffi, A), K, fbuf(ffi, W), K, fbuf(ffi, by_rows), N, 0)
            bp = np.zeros(lib.mxcc_gemm_packed_b_floats(K, N), np.float32)
            lib.mxcc_gemm_pack_b_f32(1, K, N, fbuf(ffi, W), K, fbuf(ffi, bp))
            packed = np.zeros((M, N), np.float32)
            lib.mxcc_gemm_f32_packed_b(ws, ta, M, N, K, fbuf(ffi, A), A.shape[1], fbuf(ffi, bp), 0.0,
                                       fbuf(ffi, packed), N, ffi.NULL)
            small = fc.gemm_small_m(M, K, bool(ta), True)
            # a last panel of 1 or 2 rows of a small batch is the panel kernel's in the packed-B call only (AVX-512,
            # whose panels have balanced heights: only M <= 2)
            mr = lib.MXCC_GEMM_MR
            left = (M if M <= 2 else 0) if mr == 14 else M % mr
            tail = left if not ta and M <= cap_m and 1 <= left <= 2 else 0
            assert np.array_equal(got, by_rows) == small, (M, K, ta)
            if M > tail:
                assert np.array_equal(got[:M - tail], packed[:M - tail]) == (not small), (M, K, ta)
    finally:
        lib.mxcc_gemm_ws_free(ws)
        lib.omp_set_num_threads(before)


# ---- mxcc_gemm_f32_packed_b's row panels (gemm_f32.c: row_height, a_rows_alias; SMALLM_PACKED_TAIL) -----------
# A batch of at most SMALLM_MAX rows whose last row panel holds 1 or 2 rows: those rows come from the panel kernel
# above (two rows at a time), the others from the micro-kernel; on AVX-512 row panels of balanced heights, A
# packed where its rows alias in L1 (a row stride of 4 KiB multiples: K = 1024). Against numpy, every epilogue
# vector on the right rows (per column and per row, the residual), and the same bits at 1 and 2 threads.


def _tail_sizes(mr):
    """M of one or two rows past whole panels (and 1, 2 alone), below and at SMALLM_MAX, with the N and K around
    panel edges; one M past the tail bound, which the micro-kernel keeps; K = 1024 past one tile and SMALLM_MAX."""
    ms = sorted({1, 2, mr + 1, mr + 2, 2 * mr + 1, 2 * mr + 2, mr + 3} | {m for m in (31, 32) if m % mr in (1, 2)})
    return [(m, n, k) for m in ms for n, k in ((70, 40), (33, 9), (1000, 257))] + \
        [(m, 70, 1024) for m in (8, 9, 16, 29, 64, 130)]


def _packed_b(gemm, M, N, K, A, bp, C, ep=None):
    ffi, lib = gemm
    ws = lib.mxcc_gemm_ws_create(0)
    try:
        lib.mxcc_gemm_f32_packed_b(ws, 0, M, N, K, fbuf(ffi, A), A.shape[1], fbuf(ffi, bp), 0.0, fbuf(ffi, C),
                                   C.shape[1], ffi.NULL if ep is None else ep)
    finally:
        lib.mxcc_gemm_ws_free(ws)


@pytest.mark.parametrize("per_row", [0, 1], ids=["per_column", "per_row"])
def test_packed_b_row_panels(gemm, per_row):
    ffi, lib = gemm
    rng = np.random.default_rng(4)
    before = lib.omp_get_max_threads()
    try:
        for M, N, K in _tail_sizes(lib.MXCC_GEMM_MR):
            A = padded(rng, M, K, 0 if K % 1024 == 0 else 1)   # lda = 1024: rows 4 KiB apart, A packed (alias)
            W, bp, _ = _pack(gemm, rng, N, K)
            vec = M if per_row else N
            scale, shift, bias = (rng.uniform(0.5, 2, vec).astype(np.float32),
                                  rng.uniform(-3, 3, vec).astype(np.float32),
                                  rng.standard_normal(vec).astype(np.float32))
            residual = padded(rng, M, N, 3)
            keep = [fbuf(ffi, v) for v in (scale, shift, bias, residual)]
            ep = ffi.new("mxcc_epilogue *", {"scale": keep[0], "shift": keep[1], "bias": keep[2], "per_row": per_row,
                                             "residual": keep[3], "ld_residual": N + 3, "act": lib.MXCC_ACT_RELU})
            out = []
            for t in (1, 2):
                lib.omp_set_num_threads(t)
                C = padded(rng, M, N, 2, fill=np.nan)
                pad = C[:, N:].copy()
                _packed_b(gemm, M, N, K, A, bp, C, ep)
                assert np.array_equal(C[:, N:], pad), f"M={M} N={N} K={K}: wrote past N"
                out.append(C[:, :N].copy())
            assert np.array_equal(out[0], out[1]), f"M={M} N={N} K={K}: bits depend on the threads"
            opa, opb = A[:, :K].astype(np.float64), W.T.astype(np.float64)
            v = (lambda x: x[:, None]) if per_row else (lambda x: x)
            x = (opa @ opb) * v(scale) + v(shift) + v(bias) + residual[:, :N]
            tol = gemm_bound(opa, opb, K) * v(scale) + 1e-6 * (np.abs(x) + 1)
            assert np.all(np.abs(out[0] - np.maximum(x, 0)) <= tol), f"M={M} N={N} K={K} per_row={per_row}"
    finally:
        lib.omp_set_num_threads(before)
