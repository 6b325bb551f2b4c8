"""Property-based fuzzing of the boundary checks of Module.forward and Executor.forward/backward: whatever
a caller passes (unknown names, wrong shapes and dtypes, non-arrays, views, huge integers), the call returns
correct outputs or raises an MxccError (or a TypeError/ValueError naming the problem): never a crash, a hang,
or a result computed from memory nobody bound."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mxcc
from mxcc import sym
from mxcc.errors import MxccError
from mxcc_testing import needs_gcc, rel_err

pytestmark = needs_gcc
SETTINGS = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
SHAPE = (2, 3)


@pytest.fixture(scope="module")
def nets():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    with sym.NameManager():
        net = sym.SoftmaxOutput(sym.FullyConnected(sym.var("data"), num_hidden=4, no_bias=True, name="fc"),
                                name="softmax")
    m = mxcc.compile(net, {"data": SHAPE}, {"fc_weight": w})
    exe = mxcc.compile(net, {"data": SHAPE}, {"fc_weight": w}, train=True)
    return m, exe, w


def _softmax(z):
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


dtypes = st.sampled_from([np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint8, np.bool_,
                          np.complex64, object])
shapes = st.one_of(st.just(SHAPE), st.lists(st.integers(0, 4), max_size=4).map(tuple))
values = st.one_of(
    st.builds(lambda s, d: np.zeros(s, d), shapes, dtypes),
    st.builds(lambda d: np.arange(6).astype(d).reshape(SHAPE), dtypes),
    st.just(np.full(SHAPE, 2 ** 40, np.int64)),
    st.just(np.zeros((3, 2), np.float32).T),                          # right shape, not C-contiguous
    st.just(np.zeros((2, 6), np.float32)[:, ::2]),                    # a strided view
    st.just([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]),                      # a nested list
    st.just([[0.0, 1.0], [3.0]]),                                     # ragged
    st.sampled_from([None, 1.5, "data", b"\x00" * 24, object(), {}, np.float32(1)]),
)
names = st.sampled_from(["data", "softmax_label", "dat", "fc_weight", "", "data " * 3])


def _expected(w, kwargs):
    """The outputs of a call that should succeed, or None when it should raise."""
    if set(kwargs) - {"data", "softmax_label"} or "data" not in kwargs:
        return None
    x = kwargs["data"]
    try:
        a = np.asarray(x)
    except Exception:       # noqa: BLE001 (ragged lists and such: the call must raise)
        return None
    if a.shape != SHAPE or a.dtype.kind not in "fiub" or (a.dtype.kind == "f" and a.dtype != np.float32):
        return None
    if a.dtype.kind in "iu" and np.abs(a).max() >= 2 ** 24:
        return None
    lab = kwargs.get("softmax_label")
    if lab is not None and not (isinstance(lab, np.ndarray) and lab.shape == (2,) and lab.dtype == np.float32):
        return None
    return _softmax(a.astype(np.float64) @ w.T.astype(np.float64))


@SETTINGS
@given(st.dictionaries(names, values, max_size=3))
def test_module_forward_checks_its_arguments(nets, kwargs):
    m, _, w = nets
    want = _expected(w, kwargs)
    try:
        out = m.forward(**kwargs)
    except (MxccError, TypeError, ValueError) as e:
        assert str(e), "an error without a message"
        assert want is None, f"refused a valid call: {e}"
        return
    assert want is not None, f"accepted {kwargs!r}"
    assert rel_err(out[0], want) <= 1e-5


@SETTINGS
@given(st.dictionaries(names, values, max_size=3), st.booleans(),
       st.one_of(st.none(), values, st.lists(values, max_size=2)))
def test_executor_forward_backward_check_their_arguments(nets, kwargs, is_train, out_grads):
    _, exe, w = nets
    want = _expected(w, kwargs)
    try:
        out = exe.forward(is_train=is_train, **kwargs)
    except (MxccError, TypeError, ValueError) as e:
        assert str(e)
        if want is not None and "softmax_label" in kwargs:
            return          # the executor requires what training reads: the label must be valid
        assert want is None or "softmax_label" not in kwargs, f"refused a valid call: {e}"
        return
    if want is not None:
        assert rel_err(out[0], want) <= 1e-5
    try:
        exe.backward(out_grads)          # a loss head: out_grads are not needed (MXNet ignores them)
    except (MxccError, TypeError, ValueError) as e:
        assert str(e)
