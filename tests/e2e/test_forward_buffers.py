"""Module.forward's buffer reuse (mxcc/runtime/module.py): an output array is written again only when its caller has
dropped it, and an input array passed again is read afresh (its memory is bound once, not copied)."""
import weakref

import numpy as np
import pytest

import mxcc
from mxcc import sym
from mxcc.errors import ShapeError
from mxcc_testing import needs_gcc, rel_err

pytestmark = needs_gcc


@pytest.fixture(scope="module")
def net():
    rng = np.random.default_rng(0)
    p = {"fc_weight": rng.standard_normal((6, 5)).astype(np.float32), "fc_bias": rng.standard_normal(6).astype(np.float32)}
    with sym.NameManager():
        y = sym.FullyConnected(sym.var("data"), num_hidden=6, name="fc")
        out = sym.Group([sym.relu(y), sym.tanh(y)])
    m = mxcc.compile(out, {"data": (3, 5)}, p)
    ref = lambda x: (np.maximum(x @ p["fc_weight"].T + p["fc_bias"], 0), np.tanh(x @ p["fc_weight"].T + p["fc_bias"]))
    return m, ref


def _x(seed):
    return np.random.default_rng(seed).standard_normal((3, 5)).astype(np.float32)


def _check(outs, want):
    assert len(outs) == 2
    for o, w in zip(outs, want):
        assert rel_err(o, w) < 1e-5


def test_held_outputs_are_never_overwritten(net):
    m, ref = net
    x1, x2 = _x(1), _x(2)
    first = m.forward(data=x1)                  # the list holds both arrays
    kept = [o.copy() for o in first]
    second = m.forward(data=x2)
    assert all(a is not b for a, b in zip(first, second))
    _check(first, ref(x1))
    assert all(np.array_equal(a, k) for a, k in zip(first, kept))
    _check(second, ref(x2))
    view = m.forward(data=x1)[0][1:]            # a view keeps its base alive: the base is not reused
    held = view.copy()
    m.forward(data=x2)
    assert np.array_equal(view, held)
    one = m.forward(data=x1)[1]                 # one of two held, the other dropped
    again = m.forward(data=x2)
    assert again[1] is not one
    _check([one, one], [ref(x1)[1], ref(x1)[1]])
    _check(again, ref(x2))


def test_dropped_outputs_are_reused_correctly(net):
    m, ref = net
    ids = set()
    for seed in range(4):
        x = _x(10 + seed)
        outs = m.forward(data=x)
        _check(outs, ref(x))
        ids.add(tuple(id(o) for o in outs))
        del outs
    assert len(ids) < 4                         # reused at least once (no other reference existed)


def test_loop_that_holds_the_last_result_alternates_two_arrays(net):
    """`y = m.forward(...)` in a loop: y (the previous result) is held during the call, the one before it is
    not; forward writes that one again (the same objects, seen through weak references that do not hold
    them), so the loop allocates nothing, and every result stays correct while it is held."""
    m, ref = net
    y, older = None, None          # older: weak references to the result of two calls ago
    for seed in range(6):
        x = _x(20 + seed)
        held = None if y is None else [o.copy() for o in y]
        y_before, y = y, m.forward(data=x)
        if y_before is not None:
            assert all(a is not b for a, b in zip(y_before, y))
            assert all(np.array_equal(a, h) for a, h in zip(y_before, held))   # the held result untouched
        if older is not None:
            assert all(w() is o for w, o in zip(older, y)), seed
        _check(y, ref(x))
        older = None if y_before is None else [weakref.ref(o) for o in y_before]
        del y_before


def test_input_refilled_in_place_is_read_again(net):
    m, ref = net
    x = _x(3)
    _check(m.forward(data=x), ref(x))
    x[:] = _x(4)                                # same array, new contents
    _check(m.forward(data=x), ref(x))
    x.shape = (5, 3)                            # reshaped in place: still checked
    with pytest.raises(ShapeError, match="expected"):
        m.forward(data=x)
    x.shape = (3, 5)
    _check(m.forward(data=x), ref(x))
    y = x.astype(np.float64)
    with pytest.raises(ShapeError, match="float32"):
        m.forward(data=y)
