"""mxcc.lr_scheduler against MXNet 1.9.1's schedulers (tests/data/train_libs/lr_scheduler_ref.json: the
values for updates 0..50 in order, as an optimizer asks). Exact equality: the same float multiplications."""
import json
import random

import pytest

from mxcc.lr_scheduler import FactorScheduler, MultiFactorScheduler
from mxcc.optimizer import SGD
from mxcc_testing import DATA

REF = json.loads((DATA / "train_libs" / "lr_scheduler_ref.json").read_text())["cases"]
MAKE = {"factor": FactorScheduler, "multifactor": MultiFactorScheduler}


@pytest.mark.parametrize("case", sorted(k for k in REF if "lr" in REF[k]))
def test_matches_mxnet_in_order(case):
    ref = REF[case]
    s = MAKE[ref["kind"]](**ref["kwargs"])
    assert [s(n) for n in range(51)] == ref["lr"]


@pytest.mark.parametrize("case", sorted(k for k in REF if "lr" in REF[k]))
def test_value_depends_on_the_count_only(case):
    """Asked out of order (which MXNet's stateful schedulers cannot do), each count still gets MXNet's value."""
    ref = REF[case]
    s = MAKE[ref["kind"]](**ref["kwargs"])
    order = list(range(51))
    random.Random(case).shuffle(order)
    assert {n: s(n) for n in order} == dict(enumerate(ref["lr"]))


def test_optimizer_learning_rate_overrides_base_lr_not_warmup():
    ref = REF["optimizer_override"]
    with pytest.warns(UserWarning):
        opt = SGD(learning_rate=ref["optimizer_learning_rate"], lr_scheduler=FactorScheduler(**ref["kwargs"]))
    assert [opt.step_hyper(t)["lr"] for t in range(1, 13)] == ref["lr_per_update_1_to_12"]


def test_long_schedule_is_cheap_and_exact():
    s = FactorScheduler(step=1, factor=0.9999, stop_factor_lr=1e-6, base_lr=1.0)
    lr, values = 1.0, []
    for n in range(1, 200_001):           # MXNet's loop, replayed here as the reference
        if n > 1:
            lr *= 0.9999
            if lr < 1e-6:
                lr = 1e-6
        values.append(lr)
    assert [s(n) for n in range(1, 200_001, 997)] == values[::997]
    assert s(10**9) == 1e-6


def test_validation_errors():
    with pytest.raises(ValueError):
        FactorScheduler(step=0)
    with pytest.raises(ValueError):
        FactorScheduler(step=2, factor=1.5)
    with pytest.raises(ValueError):
        MultiFactorScheduler(step=[5, 3])
    with pytest.raises(ValueError):
        MultiFactorScheduler(step=[0, 3])
    with pytest.raises(ValueError):
        FactorScheduler(step=2, base_lr=0.1, warmup_begin_lr=0.2, warmup_steps=3)
    with pytest.raises(ValueError):
        FactorScheduler(step=2, warmup_steps=3, warmup_mode="cosine")
