"""mxcc_gemm_f32_small_m_packed_b (runtime_c/gemm/smallm_packed_f32.c): a few rows of A against B packed once,
the batch-1..4 FullyConnected of an inference plan. Against numpy in float64 with test_gemm.py's error bound,
on every ISA build (AVX-512, AVX2+FMA, plain C), for M past its fast bound too (row chunks), N across panel
edges, odd and even K, padded leading dimensions; the epilogue; 1 and 2 threads bit for bit; B only read."""
import numpy as np
import pytest

from test_gemm import ACTS, act_ref, fbuf, gemm, gemm_bound, march, padded  # noqa: F401 (fixtures)

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
