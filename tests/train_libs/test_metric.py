"""mxcc.metric against MXNet 1.9.1's metrics on the same predictions (tests/data/train_libs/metric_ref.json):
update / get / reset_local / get_global / get_name_value / reset. Accuracy counts are exact; cross-entropy
sums float32 logs, so 1e-6 relative."""
import json
import math

import numpy as np
import pytest

from mxcc import metric
from mxcc_testing import DATA

REF = json.loads((DATA / "train_libs" / "metric_ref.json").read_text())
PREDS = [np.array(p, np.float32) for p in REF["preds"]]
LABELS = [np.array(x, np.float32) for x in REF["labels"]]
MAKE = {"acc": lambda: metric.Accuracy(), "top3": lambda: metric.TopKAccuracy(top_k=3),
        "ce": lambda: metric.CrossEntropy(),
        "composite": lambda: metric.create(["acc", "ce", metric.TopKAccuracy(top_k=2)])}


def _same(got, ref):
    """(name, value) or ([names], [values]) equal to MXNet's; nan before any update."""
    name, value = got
    assert name == ref[0]
    values, refs = (value, ref[1]) if isinstance(value, list) else ([value], [ref[1]])
    assert len(values) == len(refs)
    for v, r in zip(values, refs):
        assert (math.isnan(v) and math.isnan(r)) or v == pytest.approx(r, rel=1e-6), (v, r)


@pytest.mark.parametrize("name", sorted(MAKE))
def test_matches_mxnet(name):
    ref = REF[name]
    m = MAKE[name]()
    _same(m.get(), ref["initial"])
    m.update([LABELS[0]], [PREDS[0]])
    _same(m.get(), ref["after_1"])
    m.reset_local()
    m.update([LABELS[1]], [PREDS[1]])
    _same(m.get(), ref["after_reset_local_2"])
    _same(m.get_global(), ref["global_after_2"])
    nv = m.get_name_value()
    assert [n for n, _ in nv] == [n for n, _ in ref["name_value"]]
    assert [v for _, v in nv] == pytest.approx([v for _, v in ref["name_value"]], rel=1e-6)
    m.reset()
    _same(m.get(), ref["after_reset"])


def test_special_cases():
    m = metric.Accuracy()
    m.update([np.array([0, 1, 2, 3.0])], [np.array([0, 1.7, 1, 3])])     # class indices, cast to int
    assert m.get() == tuple(REF["acc_same_shape"])
    m = metric.TopKAccuracy(top_k=3)
    m.update([np.array([1, 2, 3, 4.0])], [np.array([1, 2, 0, 4.0])])
    assert list(m.get()) == REF["topk_1d"]["get"] and list(m.get_global()) == REF["topk_1d"]["global"]
    m = metric.Accuracy()
    m.update(LABELS[0], PREDS[0])                                          # single arrays are wrapped
    assert m.num_inst == 40
    with pytest.raises(ValueError):
        m.update([LABELS[0]], [PREDS[0], PREDS[1]])
    with pytest.raises(ValueError):
        metric.TopKAccuracy(top_k=1)
    assert isinstance(metric.create("ce"), metric.CrossEntropy)
    assert isinstance(metric.create("top_k_accuracy", top_k=5), metric.TopKAccuracy)
    assert metric.create("acc").get_name_value()[0][0] == "accuracy"
    with pytest.raises(ValueError):
        metric.create("f1")
