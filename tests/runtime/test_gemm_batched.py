"""mxcc_gemm_f32_batched (runtime_c/gemm/gemm_f32.c): batch_dot's batch of GEMMs of one shape. The entries split
between threads (or each GEMM splitting its own work) give each entry mxcc_gemm_f32's bits for it alone, at 1 and
2 threads, on mxcc's pool and as OpenMP regions, on every ISA build; the bits are compared, and one entry against
numpy in float64 with test_gemm.py's bound."""
import numpy as np
import pytest

from test_gemm import fbuf, gemm_bound   # the fixtures gemm, march: conftest.py's

# (batch, M, N, K, trans_a, trans_b): BERT's attention scores and context, a batch too small to split, odd shapes
CASES = [(12, 128, 128, 64, 0, 1), (12, 128, 64, 128, 0, 0), (1, 40, 33, 17, 0, 0), (3, 7, 5, 300, 1, 0),
         (5, 64, 96, 50, 1, 1), (2, 2, 3, 4, 0, 0)]


def _entry(lib, ffi, ws, A, B, C, ta, tb, ep):
    M, N = C.shape
    K = A.shape[0] if ta else A.shape[1]
    lib.mxcc_gemm_f32(ws, ta, tb, M, N, K, fbuf(ffi, A), A.shape[1], fbuf(ffi, B), B.shape[1], 0.0, fbuf(ffi, C), N, ep)


@pytest.mark.parametrize("pool", [1, 0], ids=["pool", "openmp"])
def test_batched_entries_are_each_gemm_bit_for_bit(gemm, pool):
    ffi, lib = gemm
    rng = np.random.default_rng(0)
    before = lib.omp_get_max_threads()
    ws = lib.mxcc_gemm_ws_create(0)
    lib.mxcc_pool_enable(pool)
    try:
        for batch, M, N, K, ta, tb in CASES:
            A = rng.standard_normal((batch, K, M) if ta else (batch, M, K)).astype(np.float32)
            B = rng.standard_normal((batch, N, K) if tb else (batch, K, N)).astype(np.float32)
            bias = rng.standard_normal(N).astype(np.float32)
            keep = fbuf(ffi, bias)
            ep = ffi.new("mxcc_epilogue *", {"bias": keep, "act": lib.MXCC_ACT_RELU})
            ref = np.zeros((batch, M, N), np.float32)
            lib.omp_set_num_threads(1)
            for b in range(batch):
                _entry(lib, ffi, ws, A[b], B[b], ref[b], ta, tb, ep)
            for t in (1, 2):
                lib.omp_set_num_threads(t)
                C = np.full((batch, M, N), np.nan, np.float32)
                lib.mxcc_gemm_f32_batched(ws, batch, A[0].size, B[0].size, M * N, ta, tb, M, N, K, fbuf(ffi, A),
                                          A.shape[2], fbuf(ffi, B), B.shape[2], 0.0, fbuf(ffi, C), N, ep)
                assert np.array_equal(C, ref), (batch, M, N, K, ta, tb, t)
            opa = (A[-1].T if ta else A[-1]).astype(np.float64)
            opb = (B[-1].T if tb else B[-1]).astype(np.float64)
            x = opa @ opb + bias
            assert np.all(np.abs(ref[-1] - np.maximum(x, 0)) <= gemm_bound(opa, opb, K) + 1e-6 * (np.abs(x) + 1))
    finally:
        lib.mxcc_pool_enable(-1)
        lib.omp_set_num_threads(before)
        lib.mxcc_gemm_ws_free(ws)
