"""One Module called from many Python threads at once (mxcc/runtime/module.py: a context per concurrent call, the
weights shared): no crash, every result equal to the sequential one, results held by a thread never written
by another call, set_params between calls atomic, an Executor's calls serialized, the profiler on meanwhile.

These tests run on every CPython the package supports (the output reuse counts references; see
module._count): `python3.X -m pytest tests/e2e/test_concurrency.py tests/e2e/test_forward_buffers.py`."""
import threading

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc_testing import DATA, needs_gcc, rel_err

pytestmark = needs_gcc
THREADS, CALLS = 4, 200


def _hammer(fn, n_threads=THREADS):
    """Run fn(thread_index) in n_threads threads started together; re-raise the first failure."""
    errors, start = [], threading.Barrier(n_threads)

    def run(k):
        try:
            start.wait()
            fn(k)
        except BaseException as e:          # noqa: BLE001 (reported below, with its thread)
            errors.append((k, e))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise AssertionError(f"thread {errors[0][0]} failed") from errors[0][1]


def _lenet():
    d = DATA / "models" / "lenet"
    return mxcc.compile(d / "lenet-symbol.json", {"data": (8, 1, 28, 28)}, d / "lenet-0000.params")


def _mlp():
    d = DATA / "models" / "mlp"
    return mxcc.compile(d / "mlp-symbol.json", {"X": (1, 784)}, d / "mlp-0000.params")


@pytest.mark.parametrize("make, name, shape", [(_lenet, "data", (8, 1, 28, 28)), (_mlp, "X", (1, 784))],
                         ids=["lenet-b8", "mlp-b1"])
def test_threads_calling_one_module_get_the_sequential_results(make, name, shape):
    m = make()
    rng = np.random.default_rng(0)
    xs = [rng.random(shape, np.float32) for _ in range(16)]
    want = [m.forward(**{name: x})[0].copy() for x in xs]

    def work(k):
        held = []                              # every 10th result stays held until the end
        for i in range(CALLS):
            j = (i * 7 + k) % len(xs)
            y = m.forward(**{name: xs[j]})[0]
            np.testing.assert_array_equal(y, want[j], err_msg=f"call {i}")
            if i % 10 == 0:
                held.append((j, y))
        for j, y in held:                      # no other call wrote into what this thread holds
            np.testing.assert_array_equal(y, want[j])

    _hammer(work)
    assert 2 <= len(m._contexts) <= THREADS + 1   # calls ran side by side, each on a context of its own
    np.testing.assert_array_equal(m.forward(**{name: xs[3]})[0], want[3])


def test_set_params_while_threads_call_forward():
    """Each result is that of one whole parameter set, never a mix; set_params waits for running calls."""
    d = DATA / "models" / "mlp"
    m = mxcc.compile(d / "mlp-symbol.json", {"X": (4, 784)}, d / "mlp-0000.params")
    p1 = {k: v.copy() for k, v in m.get_params().items()}
    p2 = {k: (v * 0.5 if "w" in k else v) for k, v in p1.items()}
    x = np.random.default_rng(1).random((4, 784), np.float32)
    ref1 = m.forward(X=x)[0].copy()
    m.set_params(p2)
    ref2 = m.forward(X=x)[0].copy()
    assert not np.array_equal(ref1, ref2)
    stop = threading.Event()
    seen, mixed = [], []

    def caller():
        while not stop.is_set():
            y = m.forward(X=x)[0]
            ok1, ok2 = np.array_equal(y, ref1), np.array_equal(y, ref2)
            if not (ok1 or ok2):
                mixed.append(y.copy())     # a forward saw half of a set_params
            seen.append(ok1)

    threads = [threading.Thread(target=caller) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(40):
            m.set_params(p1 if i % 2 == 0 else p2)
            before = len(seen)
            for _ in range(1000):              # let some calls run with this set (at most ~1 s)
                if len(seen) >= before + 3 or not all(t.is_alive() for t in threads):
                    break
                threading.Event().wait(0.001)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not mixed
    assert len(seen) > 40 and any(seen) and not all(seen)


def test_executor_calls_from_threads_are_serialized():
    """Training steps from 4 threads on one batch: the weights end where 100 sequential steps leave them."""
    from mxcc.optimizer import SGD
    with sym.NameManager():
        net = sym.SoftmaxOutput(sym.FullyConnected(sym.relu(sym.FullyConnected(sym.var("data"), num_hidden=16)),
                                                   num_hidden=4), name="softmax")
    rng = np.random.default_rng(2)
    x, label = rng.random((8, 10), np.float32), rng.integers(0, 4, 8)
    init = {"fullyconnected0_weight": rng.standard_normal((16, 10)).astype(np.float32) * 0.3,
            "fullyconnected0_bias": np.zeros(16, np.float32),
            "fullyconnected1_weight": rng.standard_normal((4, 16)).astype(np.float32) * 0.3,
            "fullyconnected1_bias": np.zeros(4, np.float32)}

    def trained(parallel: bool):
        exe = mxcc.compile(net, {"data": (8, 10)}, init, train=True, optimizer=SGD(learning_rate=0.1))
        if parallel:
            _hammer(lambda k: [exe.step(data=x, softmax_label=label) for _ in range(25)])
        else:
            for _ in range(100):
                exe.step(data=x, softmax_label=label)
        return exe.num_update, {k: v.copy() for k, v in exe.arg_dict.items()}

    (n_par, w_par), (n_seq, w_seq) = trained(True), trained(False)
    assert n_par == n_seq == 100
    for k in w_seq:
        assert rel_err(w_par[k], w_seq[k]) <= 1e-6, k


def test_profiler_while_threads_call_forward(tmp_path):
    """While the profiler records, the calls of all threads run one at a time on the context it reads."""
    from mxcc import profiler
    m = _lenet()
    x = np.random.default_rng(3).random((8, 1, 28, 28), np.float32)
    want = m.forward(data=x)[0].copy()
    profiler.set_config(filename=str(tmp_path / "trace.json"))
    profiler.set_state("run")
    try:
        _hammer(lambda k: [np.testing.assert_array_equal(m.forward(data=x)[0], want) for _ in range(20)])
    finally:
        profiler.set_state("stop")
    table = profiler.dumps()
    assert "lenet" in table
