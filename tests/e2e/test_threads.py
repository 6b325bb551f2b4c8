"""Thread counts and the context's per-thread buffers (GEMM slots, the packed convolutions' scratch): a context
has room for the processors' count at least, and Module.set_num_threads makes room for more, so a parallel
kernel never falls back to one thread because an earlier module lowered OpenMP's count (the bug this guards:
benchmarks/cnn.py --layers timed every 2-thread layer serially after its 1-thread run in the same process)."""
import os

import numpy as np

import mxcc
from mxcc import sym
from mxcc_testing import needs_gcc, rel_err

pytestmark = needs_gcc


def _net():
    with sym.NameManager():
        x = sym.var("data")
        y = sym.Convolution(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=24, name="c1")
        return sym.relu(sym.FullyConnected(y, num_hidden=40, name="fc"))


def _params(rng):
    f = np.float32
    return {"c1_weight": rng.standard_normal((24, 5, 3, 3)).astype(f), "c1_bias": rng.standard_normal(24).astype(f),
            "fc_weight": rng.standard_normal((40, 24 * 17 * 17)).astype(f), "fc_bias": rng.standard_normal(40).astype(f)}


def _ref(p, x):
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh = (x.shape[2] + 2 - 3) // 2 + 1
    win = np.stack([xp[:, :, i:i + 2 * oh - 1:2, j:j + 2 * oh - 1:2] for i in range(3) for j in range(3)], 2)
    y = np.einsum("nckhw,ock->nohw", win, p["c1_weight"].reshape(24, 5, 9)) + p["c1_bias"][:, None, None]
    return np.maximum(y.reshape(len(x), -1) @ p["fc_weight"].T.astype(np.float64) + p["fc_bias"], 0)


def test_room_for_threads_follows_set_num_threads():
    rng = np.random.default_rng(0)
    p = _params(rng)
    x = rng.standard_normal((8, 5, 33, 33)).astype(np.float32)
    first = mxcc.compile(_net(), {"data": x.shape}, p, threads=1)     # lowers OpenMP's count to 1
    second = mxcc.compile(_net(), {"data": x.shape}, p, threads=2)
    procs = os.cpu_count()
    for m in (first, second):
        assert m._lib.mxcc_ctx_threads(m._ctx) >= max(2, procs)
    wide = procs + 3                                   # more threads than processors: room is made on request
    second.set_num_threads(wide)
    assert second._lib.mxcc_ctx_threads(second._ctx) == max(wide, procs)
    want = _ref(p, x)
    for m in (first, second):
        assert rel_err(m.forward(data=x)[0], want) < 1e-5
    second.set_num_threads(1)                          # fewer: the room stays
    assert second._lib.mxcc_ctx_threads(second._ctx) == max(wide, procs)
    assert rel_err(second.forward(data=x)[0], want) < 1e-5


def test_set_num_threads_rejects_nonpositive():
    rng = np.random.default_rng(1)
    m = mxcc.compile(_net(), {"data": (1, 5, 33, 33)}, _params(rng))
    for bad in (0, -2):
        try:
            m.set_num_threads(bad)
        except ValueError as e:
            assert "positive" in str(e)
        else:
            raise AssertionError(f"set_num_threads({bad}) accepted")
