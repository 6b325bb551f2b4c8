"""Which kernels can compute a convolution (mxcc/ops/convolution.py: candidates), the heuristics' choice always
among them, the tuner's decision rule (mxcc/compiler/tune.py: choose), and the chosen path as data: a field
MXNet attributes cannot set, fixed by passes/choose_paths.py and checked there. No C compiler."""
import itertools

import pytest

from mxcc import sym
from mxcc.compiler.driver import inspect_network
from mxcc.compiler.tune import MARGIN, choose
from mxcc.errors import AttrError, ShapeError
from mxcc.ops.convolution import DIRECT_MAX_C, ConvAttrs, candidates, path
from mxcc.options import CompileOptions

W = frozenset({"weight"})
WB = frozenset({"weight", "bias"})


@pytest.mark.parametrize("attrs,x,const,want", [
    (dict(kernel=(3, 3), num_filter=64, pad=(1, 1)), (1, 64, 56, 56), WB, ("winograd", "packed")),
    (dict(kernel=(3, 3), num_filter=64, pad=(1, 1)), (1, 16, 56, 56), W, ("winograd", "packed", "direct")),
    (dict(kernel=(3, 3), num_filter=64), (1, DIRECT_MAX_C, 9, 9), W, ("winograd", "packed", "direct")),
    (dict(kernel=(3, 3), num_filter=64), (1, DIRECT_MAX_C + 1, 9, 9), W, ("winograd", "packed")),
    (dict(kernel=(3, 3), num_filter=8, pad=(1, 1)), (4, 512, 3, 3), W, ("winograd", "packed")),  # small: still legal
    (dict(kernel=(1, 1), num_filter=64), (1, 32, 112, 112), W, ("pointwise", "packed", "gemm")),
    (dict(kernel=(1, 1), num_filter=64), (1, 512, 2, 2), W, ("pointwise", "packed", "gemm")),
    # strided 1x1 (2-D, no pad): the pointwise kernel on gathered pixels, or packed
    (dict(kernel=(1, 1), num_filter=64, stride=(2, 2)), (1, 8, 56, 56), W, ("pointwise", "packed", "direct")),
    (dict(kernel=(1, 1), num_filter=64, stride=(2, 2)), (1, 64, 56, 56), W, ("pointwise", "packed")),
    (dict(kernel=(1,), num_filter=64, stride=(2,)), (1, 8, 56), W, ("packed", "direct")),    # 1-D: not pointwise
    (dict(kernel=(1, 1), num_filter=64, pad=(1, 1)), (1, 8, 56, 56), W, ("packed", "direct")),
    (dict(kernel=(7, 7), num_filter=64, stride=(2, 2), pad=(3, 3)), (1, 3, 224, 224), W, ("packed", "direct")),
    (dict(kernel=(3, 3), num_filter=64, stride=(2, 2)), (1, 32, 56, 56), W, ("packed",)),
    (dict(kernel=(3, 3), num_filter=64, dilate=(2, 2)), (1, 3, 56, 56), W, ("packed", "direct")),
    (dict(kernel=(3, 3, 3), num_filter=8), (1, 3, 8, 8, 8), W, ("packed",)),              # 3-D: no direct kernel
    (dict(kernel=(3,), num_filter=8), (1, 3, 50), W, ("packed", "direct")),                # 1-D
    (dict(kernel=(3, 3), num_filter=32, num_group=32), (1, 32, 56, 56), W, ("depthwise",)),
    # small 3x3 planes, which AVX-512 builds compute 16 channels at a time: the per-plane kernels a candidate
    (dict(kernel=(3, 3), num_filter=512, num_group=512, pad=(1, 1), stride=(2, 2)), (1, 512, 14, 14), frozenset(),
     ("depthwise", "depthwise_flat")),
    (dict(kernel=(3, 3), num_filter=1024, num_group=1024, pad=(1, 1)), (1, 1024, 7, 7), W,
     ("depthwise", "depthwise_flat")),
    (dict(kernel=(3, 3), num_filter=576, num_group=576, pad=(1, 1), stride=(2, 2)), (1, 576, 13, 13), W,
     ("depthwise", "depthwise_flat")),
    (dict(kernel=(3, 3), num_filter=512, num_group=512, pad=(1, 1)), (1, 512, 14, 14), W, ("depthwise",)),  # rows
    (dict(kernel=(3, 3), num_filter=64, num_group=64, pad=(1, 1), stride=(2, 2)), (1, 64, 8, 8), W,
     ("depthwise",)),                                                      # 16 outputs: stride 2 stays on rows
    (dict(kernel=(3, 3), num_filter=8, num_group=8, pad=(1, 1)), (1, 8, 7, 7), W, ("depthwise",)),  # < 16 planes
    (dict(kernel=(5, 5), num_filter=32, num_group=32, pad=(2, 2)), (1, 32, 7, 7), W, ("depthwise",)),
    (dict(kernel=(3, 3), num_filter=32, num_group=32), (1, 32, 9, 9), W, ("depthwise",)),      # no pad: not flat
    (dict(kernel=(3, 3), num_filter=64, num_group=2), (1, 32, 56, 56), W, ("im2col",)),
    (dict(kernel=(1, 1), num_filter=64, num_group=2), (1, 32, 56, 56), W, ("gemm",)),
    (dict(kernel=(3, 3), num_filter=64), (1, 64, 56, 56), frozenset(), ("im2col",)),      # training: no choice
    (dict(kernel=(1, 1), num_filter=64), (1, 64, 56, 56), frozenset(), ("gemm",)),
])
def test_candidates(attrs, x, const, want):
    a = ConvAttrs(**attrs)
    assert candidates(a, x, const) == want
    assert path(a, x, const) in want


def test_heuristic_is_always_a_candidate():
    for k, s, p, d, g, c, o, hw, n, const in itertools.product(
            [(1, 1), (3, 3), (5, 5), (7, 7), (3,), (1,), (3, 3, 3)], [1, 2], [0, 1], [1, 2], [1, 2, "dw"],
            [1, 3, 4, 8, 20, 21, 64, 65, 512], [8, 64], [1, 3, 7, 14, 56], [1, 16], [W, frozenset()]):
        nsp = len(k)
        groups = c if g == "dw" else g
        if c % groups or (o % groups and g != "dw"):
            continue
        a = ConvAttrs(kernel=k, num_filter=c if g == "dw" else o, stride=(s,) * nsp, pad=(p,) * nsp,
                      dilate=(d,) * nsp, num_group=groups)
        x = (n, c) + (max(hw, (k[0] - 1) * d + 1),) * nsp
        assert path(a, x, const) in candidates(a, x, const), (a, x, const)


def test_chosen_path_wins_and_is_not_an_mxnet_attribute():
    a = ConvAttrs(kernel=(3, 3), num_filter=64, pad=(1, 1), chosen_path="packed")
    assert path(a, (1, 64, 56, 56), W) == "packed"
    with pytest.raises(AttrError, match="unknown attribute 'chosen_path'"):
        sym.Convolution(sym.var("data"), kernel=(3, 3), num_filter=4, chosen_path="packed", name="c")


def test_choose_keeps_the_heuristic_unless_another_is_clearly_faster():
    assert choose({"winograd": 100.0, "packed": 96.0}, "winograd") == "winograd"       # 4% faster: noise
    assert choose({"winograd": 100.0, "packed": 100 * (1 - MARGIN)}, "winograd") == "packed"
    assert choose({"winograd": 100.0, "packed": 50.0, "direct": 40.0}, "packed") == "direct"
    assert choose({"winograd": 100.0, "packed": 100.0}, "packed") == "packed"           # a tie: the heuristic


def _net():
    with sym.NameManager():
        h = sym.relu(sym.Convolution(sym.var("data"), kernel=(3, 3), pad=(1, 1), num_filter=16, name="c1"))
        return sym.Convolution(h, kernel=(1, 1), num_filter=8, name="c2")


def _paths(opts):
    plan = inspect_network(_net(), {"data": (1, 8, 14, 14)}, opts)
    return {g["name"]: g.get("path") for g in plan["groups"]}


def test_conv_paths_option_reaches_the_lowering():
    assert _paths(CompileOptions()) == {"c1": "winograd", "c2": "pointwise"}
    assert _paths(CompileOptions.from_env(conv_paths={"c1": "direct", "c2": "gemm"})) == {"c1": "direct", "c2": "gemm"}
    # a training plan has no weight fixed at bind time, so no choice: conv_paths is for inference plans
    train = _paths(CompileOptions.from_env(conv_paths={"c1": "direct", "c2": "gemm"}, train=True))
    assert (train["c1"], train["c2"]) == ("im2col", "gemm")


def test_conv_paths_errors_name_the_node():
    with pytest.raises(ShapeError, match=r"c1 \(Convolution\): conv_paths gives it the path 'pointwise'; its "
                                         r"candidates: winograd, packed, direct"):
        _paths(CompileOptions.from_env(conv_paths={"c1": "pointwise"}))
    with pytest.raises(ShapeError, match="conv_paths names c9, which the inference graph does not have"):
        _paths(CompileOptions.from_env(conv_paths={"c9": "packed"}))


def test_mxcc_tune_environment(monkeypatch):
    monkeypatch.setenv("MXCC_TUNE", "1")
    assert CompileOptions.from_env().tune
    assert not CompileOptions.from_env(tune=False).tune
    monkeypatch.setenv("MXCC_TUNE", "0")
    assert not CompileOptions.from_env().tune
