"""Gradients of the CNN operators against finite differences of float64 numpy forwards, and training mode.

Directional derivatives: for each gradient g (every parameter and input) and a random direction v,
<g, v> must match (f(x + eps v) - f(x - eps v)) / 2 eps of the float64 numpy forward, f = sum(out * head).
eps = 1e-5 in float64 (truncation ~1e-10, rounding ~1e-11); the compiled gradient is float32, so the bound
is relative to ||g|| ||v|| (Cauchy-Schwarz: a rounding error of 1e-6 * ||g|| in g moves <g, v> by at most
1e-6 ||g|| ||v||): |fd - <g, v>| <= 1e-4 ||g|| ||v||. Max pooling inputs are distinct values 0.01 apart,
so no perturbation of size eps changes which element wins a window.
Each test compiles one network with several layers side by side (one compile, many checks).

Training mode: BatchNorm's batch statistics and moving-statistic updates against numpy; Dropout's masks
(MXNet's own masks come from its global generator and cannot be reproduced, so: the kept fraction, the
mask values, output = data * mask, gradient = ograd * mask, reproducibility from the seed, a new mask each
step); the inference forward of a training build (moving statistics, no dropout) against an inference build.
"""
import numpy as np

import mxcc
from mxcc import sym
from mxcc_testing import SGD0, needs_gcc, rel_err

pytestmark = needs_gcc


# -- float64 numpy references ------------------------------------------------------------------------------
def conv(x, w, b=None, stride=1, pad=0, dilate=1, groups=1):
    """N-D convolution (NC...), MXNet's semantics, in float64."""
    nsp = x.ndim - 2
    st, p, d = ((t,) * nsp if np.isscalar(t) else tuple(t) for t in (stride, pad, dilate))
    n, c = x.shape[:2]
    o, k = w.shape[0], w.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(q, q) for q in p])
    out_sp = [(xp.shape[2 + i] - d[i] * (k[i] - 1) - 1) // st[i] + 1 for i in range(nsp)]
    xg = xp.reshape((n, groups, c // groups) + xp.shape[2:])
    wg = w.reshape((groups, o // groups, c // groups) + k)
    y = np.zeros((n, groups, o // groups) + tuple(out_sp))
    for off in np.ndindex(*k):
        sl = tuple(slice(off[i] * d[i], off[i] * d[i] + (out_sp[i] - 1) * st[i] + 1, st[i]) for i in range(nsp))
        patch = xg[(slice(None),) * 3 + sl]
        y += np.einsum("ngc...,goc->ngo...", patch, wg[(slice(None),) * 3 + off])
    y = y.reshape((n, o) + tuple(out_sp))
    return y if b is None else y + b.reshape((1, o) + (1,) * nsp)


def pool(x, kernel, stride, pad, kind, full=False, include_pad=True, global_pool=False):
    """2-D pooling with MXNet 1.9.1's windows: [o*s - p, o*s - p + k) clipped to [-p, x + p), then to x."""
    if global_pool:
        kernel, stride, pad = x.shape[2:], (1, 1), (0, 0)
    h, w = x.shape[2:]
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    rnd = np.ceil if full else np.floor
    oh, ow = (1, 1) if global_pool else (int(rnd((h + 2 * ph - kh) / sh)) + 1, int(rnd((w + 2 * pw - kw) / sw)) + 1)
    y = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * sh - ph, j * sw - pw
            h1, w1 = min(h0 + kh, h + ph), min(w0 + kw, w + pw)
            win = x[:, :, max(h0, 0):min(h1, h), max(w0, 0):min(w1, w)]
            if kind == "max":
                y[:, :, i, j] = win.max(axis=(2, 3))
            elif kind == "lp":
                y[:, :, i, j] = np.sqrt((win ** 2).sum(axis=(2, 3)))
            else:
                s = win.sum(axis=(2, 3))
                if kind == "avg":
                    s = s / ((h1 - h0) * (w1 - w0) if include_pad else win.shape[2] * win.shape[3])
                y[:, :, i, j] = s
    return y


def batch_norm_train(x, gamma, beta, eps, fix_gamma=False, axis=1):
    """Training BatchNorm: (out, batch mean, biased batch variance) over every axis but `axis`."""
    ax = axis % x.ndim
    red = tuple(i for i in range(x.ndim) if i != ax)
    shape = [1] * x.ndim
    shape[ax] = x.shape[ax]
    mean, var = x.mean(axis=red), x.var(axis=red)
    g = np.ones_like(gamma) if fix_gamma else gamma
    out = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * g.reshape(shape) + beta.reshape(shape)
    return out, mean, var


def softmax(x, axis, log=False):
    z = x - x.max(axis=axis, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=axis, keepdims=True))
    return z - lse if log else np.exp(z - lse)


def erf(x):
    from math import erf as e
    return np.vectorize(e)(x)


# -- the directional-derivative check -----------------------------------------------------------------------
def _check(net, shapes, forward64, rng, inputs=None, params=None, eps=1e-5, tol=1e-4):
    exe = mxcc.compile(net, shapes, train=True, optimizer=SGD0(), inputs_need_grad=True)
    given = params or {}
    params = {k: given[k] if k in given else
              (np.abs(rng.standard_normal(s)) + 0.5 if k.endswith("var") else rng.standard_normal(s) * 0.5)
              .astype(np.float32) for k, s in exe.param_shapes.items()}
    exe.set_params(params)
    inputs = inputs or {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    outs = [o.copy() for o in exe.forward(is_train=True, **inputs)]
    ref = forward64({k: v.astype(np.float64) for k, v in {**inputs, **params}.items()})
    for i, (o, r) in enumerate(zip(outs, ref)):
        assert rel_err(o, r) <= 1e-5, f"forward output {i}"
    heads = [rng.standard_normal(o.shape).astype(np.float32) for o in outs]
    exe.backward(heads)
    values = {k: v.astype(np.float64) for k, v in {**inputs, **params}.items()}

    def loss(vals):
        return sum(float((o * h).sum()) for o, h in zip(forward64(vals), heads))

    checked = []
    for name, g in exe.grad_dict.items():
        v = rng.standard_normal(g.shape)
        fd = (loss(dict(values, **{name: values[name] + eps * v})) -
              loss(dict(values, **{name: values[name] - eps * v}))) / (2 * eps)
        an = float((g.astype(np.float64) * v).sum())
        bound = tol * np.linalg.norm(g) * np.linalg.norm(v) + 1e-9
        assert abs(fd - an) <= bound, (name, fd, an, bound)
        checked.append(name)
    return exe, checked


def test_convolution_variants(rng):
    """stride/pad, dilation, groups, depthwise (the direct kernel), 1x1 (the GEMM path, grouped too), 1-D."""
    x, x1 = sym.var("data"), sym.var("data1d")
    heads = [
        sym.Convolution(x, kernel=(3, 3), stride=(2, 2), pad=(1, 1), num_filter=6, name="s2p1"),
        sym.Convolution(x, kernel=(3, 3), dilate=(2, 2), pad=(2, 2), num_filter=5, no_bias=True, name="dil"),
        sym.Convolution(x, kernel=(3, 2), stride=(1, 2), num_group=2, num_filter=6, name="grp"),
        sym.Convolution(x, kernel=(3, 3), pad=(1, 1), num_group=4, num_filter=4, name="dw"),
        sym.Convolution(x, kernel=(3, 3), stride=(2, 2), num_group=4, num_filter=4, no_bias=True, name="dws2"),
        sym.Convolution(x, kernel=(1, 1), num_filter=7, name="pw"),
        sym.Convolution(x, kernel=(1, 1), num_group=2, num_filter=4, name="pwg"),
        sym.Convolution(x1, kernel=(3,), stride=(2,), pad=(1,), num_filter=2, name="c1d"),
    ]
    net = sym.Group(heads)

    def f(v):
        d = v["data"]
        return [conv(d, v["s2p1_weight"], v["s2p1_bias"], 2, 1),
                conv(d, v["dil_weight"], None, 1, 2, 2),
                conv(d, v["grp_weight"], v["grp_bias"], (1, 2), 0, 1, 2),
                conv(d, v["dw_weight"], v["dw_bias"], 1, 1, 1, 4),
                conv(d, v["dws2_weight"], None, 2, 0, 1, 4),
                conv(d, v["pw_weight"], v["pw_bias"]),
                conv(d, v["pwg_weight"], v["pwg_bias"], groups=2),
                conv(v["data1d"], v["c1d_weight"], v["c1d_bias"], 2, 1)]

    exe, checked = _check(net, {"data": (2, 4, 9, 8), "data1d": (2, 3, 11)}, f, rng)
    assert {"data", "data1d", "dw_weight", "pw_weight", "grp_weight"} <= set(checked)
    from mxcc.ops.convolution import ConvAttrs, path
    assert path(ConvAttrs(kernel=(3, 3), num_filter=4, num_group=4), (2, 4, 9, 8)) == "depthwise"


def test_pooling_variants(rng):
    x = sym.var("data")
    cases = [  # (kwargs, numpy reference args)
        (dict(pool_type="max", kernel=(3, 3), stride=(2, 2)), ((3, 3), (2, 2), (0, 0), "max")),
        (dict(pool_type="max", kernel=(2, 2), stride=(2, 2), pooling_convention="full"),
         ((2, 2), (2, 2), (0, 0), "max", True)),
        (dict(pool_type="max", kernel=(3, 3), stride=(2, 2), pad=(1, 1)), ((3, 3), (2, 2), (1, 1), "max")),
        (dict(pool_type="avg", kernel=(3, 3), stride=(2, 2), pad=(1, 1)), ((3, 3), (2, 2), (1, 1), "avg")),
        (dict(pool_type="avg", kernel=(3, 3), stride=(2, 2), pooling_convention="full"),
         ((3, 3), (2, 2), (0, 0), "avg", True)),
        (dict(pool_type="avg", kernel=(3, 3), stride=(1, 1), pad=(1, 1), count_include_pad=False),
         ((3, 3), (1, 1), (1, 1), "avg", False, False)),
        (dict(pool_type="sum", kernel=(2, 3), stride=(1, 2)), ((2, 3), (1, 2), (0, 0), "sum")),
        (dict(pool_type="lp", p_value=2, kernel=(2, 2), stride=(2, 2)), ((2, 2), (2, 2), (0, 0), "lp")),
        (dict(pool_type="max", kernel=(1, 1), global_pool=True), ((1, 1), (1, 1), (0, 0), "max", False, True, True)),
        (dict(pool_type="avg", kernel=(1, 1), global_pool=True), ((1, 1), (1, 1), (0, 0), "avg", False, True, True)),
    ]
    net = sym.Group([sym.Pooling(x, name=f"pool{i}", **kw) for i, (kw, _) in enumerate(cases)])
    shape = (2, 3, 9, 10)
    data = (rng.permutation(np.prod(shape)).reshape(shape) * 0.01 - 2.5).astype(np.float32)  # distinct: no ties
    _check(net, {"data": shape}, lambda v: [pool(v["data"], *ref) for _, ref in cases], rng, inputs={"data": data})


def test_batch_norm_training(rng):
    """Batch statistics (fix_gamma on and off, channel axis 1 and last), their gradients through the batch
    mean/variance, and the moving statistics updated by backward (MXNet: biased variance, momentum)."""
    x, y = sym.var("data"), sym.var("data2")
    net = sym.Group([sym.BatchNorm(x, fix_gamma=False, eps=1e-5, momentum=0.8, name="bn1"),
                     sym.BatchNorm(y, fix_gamma=True, axis=-1, name="bn2")])

    def f(v):
        return [batch_norm_train(v["data"], v["bn1_gamma"], v["bn1_beta"], 1e-5)[0],
                batch_norm_train(v["data2"], v["bn2_gamma"], v["bn2_beta"], 1e-3, fix_gamma=True, axis=-1)[0]]

    exe, checked = _check(net, {"data": (4, 3, 5, 5), "data2": (6, 4)}, f, rng)
    assert {"bn1_gamma", "bn1_beta", "bn2_beta", "data", "data2"} <= set(checked)
    assert np.all(exe.grad_dict["bn2_gamma"] == 0)          # fix_gamma: gamma is ignored, its gradient is 0


def test_batch_norm_moving_statistics_update_in_backward(rng):
    net = sym.BatchNorm(sym.var("data"), fix_gamma=False, momentum=0.8, name="bn")
    exe = mxcc.compile(net, {"data": (5, 3, 4)}, train=True, optimizer=SGD0())
    mm, mv = rng.standard_normal(3).astype(np.float32), (np.abs(rng.standard_normal(3)) + 0.5).astype(np.float32)
    exe.set_params({"bn_gamma": np.ones(3, np.float32), "bn_beta": np.zeros(3, np.float32),
                    "aux:bn_moving_mean": mm, "aux:bn_moving_var": mv})
    x = rng.standard_normal((5, 3, 4)).astype(np.float32)
    exe.forward(is_train=True, data=x)
    assert np.array_equal(exe.aux_dict["bn_moving_mean"], mm)          # MXNet updates them in backward only
    exe.backward(np.ones((5, 3, 4), np.float32))
    _, mean, var = batch_norm_train(x.astype(np.float64), np.ones(3), np.zeros(3), 1e-3)
    assert rel_err(exe.aux_dict["bn_moving_mean"], 0.8 * mm + 0.2 * mean) <= 1e-6
    assert rel_err(exe.aux_dict["bn_moving_var"], 0.8 * mv + 0.2 * var) <= 1e-5
    # inference mode reads the updated moving statistics
    y = exe.forward(is_train=False, data=x)[0]
    m, s = exe.aux_dict["bn_moving_mean"][None, :, None], exe.aux_dict["bn_moving_var"][None, :, None]
    assert rel_err(y, (x - m) / np.sqrt(s + 1e-3)) <= 1e-5


def test_shape_and_broadcast_ops(rng):
    """Concat, Reshape/Flatten/expand_dims, transpose, slice_axis, SliceChannel, broadcast_* (both operands
    stretched), reductions."""
    a, b, c = sym.var("a"), sym.var("b"), sym.var("c")
    cat = sym.Concat(a, b, dim=1, name="cat")                                # (2, 5, 3)
    parts = sym.SliceChannel(cat, num_outputs=5, axis=1, squeeze_axis=True, name="split")
    heads = [
        sym.Reshape(cat * 2.0, shape=(0, -1), name="rs"),
        sym.transpose(sym.expand_dims(cat, axis=1), axes=(0, 3, 1, 2), name="tr"),
        sym.broadcast_mul(sym.slice_axis(cat, axis=2, begin=1, end=3, name="sl"),
                          sym.sum(sym.slice_axis(cat, axis=1, begin=0, end=2, name="sl2")), name="slmul"),
        parts[1] * parts[3],
        sym.broadcast_mul(sym.broadcast_add(cat, c, name="badd"),
                          sym.broadcast_sub(c, sym.sum(a, axis=1, keepdims=True), name="bsub"), name="bmul"),
        sym.broadcast_div(cat, sym.broadcast_maximum(c, c * 0.5 + 2.0, name="bmax") + 3.0, name="bdiv"),
        sym.broadcast_add(sym.mean(cat, axis=(0, 2), name="mean"), sym.sum(sym.max(cat, axis=1, name="mx")), name="red"),
    ]
    net = sym.Group(heads)

    def f(v):
        A, B, C = v["a"], v["b"], v["c"]
        cat = np.concatenate([A, B], axis=1)
        return [(cat * 2).reshape(2, -1), np.expand_dims(cat, 1).transpose(0, 3, 1, 2),
                cat[:, :, 1:3] * cat[:, 0:2, :].sum(), cat[:, 1] * cat[:, 3],
                (cat + C) * (C - A.sum(axis=1, keepdims=True)),
                cat / (np.maximum(C, C * 0.5 + 2) + 3), cat.mean(axis=(0, 2)) + cat.max(axis=1).sum()]

    _check(net, {"a": (2, 2, 3), "b": (2, 3, 3), "c": (1, 1, 3)}, f, rng)


def test_softmax_and_leaky_relu_family(rng):
    x, x4 = sym.var("data"), sym.var("data4")
    heads = [
        sym.softmax(x, axis=1, name="sm"), sym.log_softmax(x, axis=0, name="lsm"),
        sym.softmax(x, axis=-1, temperature=2.0, name="smt"),
        sym.SoftmaxActivation(x4, mode="channel", name="sac"), sym.SoftmaxActivation(x, name="sai"),
        sym.LeakyReLU(x, act_type="leaky", slope=0.1, name="lk"), sym.LeakyReLU(x, act_type="elu", slope=0.7, name="elu"),
        sym.LeakyReLU(x, act_type="selu", name="selu"), sym.LeakyReLU(x, act_type="gelu", name="gelu"),
        sym.LeakyReLU(x4, act_type="prelu", name="prelu"),
    ]

    def f(v):
        d, d4, gam = v["data"], v["data4"], v["prelu_gamma"]
        lam, alpha = 1.0507009873554805, 1.6732632423543772
        return [softmax(d, 1), softmax(d, 0, log=True), softmax(d / 2.0, -1), softmax(d4, 1),
                softmax(d.reshape(d.shape[0], -1), 1).reshape(d.shape),
                np.where(d > 0, d, 0.1 * d), np.where(d > 0, d, 0.7 * np.expm1(d)),
                lam * np.where(d > 0, d, alpha * np.expm1(d)), 0.5 * d * (1 + erf(d / np.sqrt(2))),
                np.where(d4 > 0, d4, gam.reshape(1, -1, 1, 1) * d4)]

    _check(sym.Group(heads), {"data": (3, 7), "data4": (2, 3, 2, 3)}, f, rng)


# -- training mode ------------------------------------------------------------------------------------------
def test_dropout_masks(rng):
    """MXNet's masks cannot be reproduced (its global RNG): check what a correct dropout must satisfy."""
    p = 0.3
    net = sym.Dropout(sym.var("data"), p=p, name="drop") * 1.0
    exe = mxcc.compile(net, {"data": (64, 500)}, train=True, optimizer=SGD0(), inputs_need_grad=True)
    exe.set_params({})
    x = rng.standard_normal((64, 500)).astype(np.float32) + 3.0          # no zeros: out/x recovers the mask
    exe.set_seed(7)
    y1 = exe.forward(is_train=True, data=x)[0].copy()
    mask = y1 / x
    kept = mask != 0
    assert np.allclose(mask[kept], 1 / (1 - p), rtol=1e-6)               # inverted dropout: 0 or 1/(1-p)
    n = mask.size
    assert abs((~kept).mean() - p) <= 4 * np.sqrt(p * (1 - p) / n)       # 4 sigma of a binomial
    dy = rng.standard_normal((64, 500)).astype(np.float32)
    exe.backward(dy)
    mask32 = np.where(kept, np.float32(1 / (1 - p)), np.float32(0))
    assert np.array_equal(exe.grad_dict["data"], dy * mask32)             # the same mask
    y2 = exe.forward(is_train=True, data=x)[0].copy()
    assert 0.3 < np.mean((y1 != 0) != (y2 != 0)) < 0.55                 # a new mask each step (2 p (1 - p) = 0.42)
    exe.set_seed(7)
    assert np.array_equal(exe.forward(is_train=True, data=x)[0], y1)     # reproducible from the seed
    assert np.array_equal(exe.forward(is_train=False, data=x)[0], x)     # inference: the identity
    # masks do not depend on the thread count (counter-based draws)
    exe.set_num_threads(1)
    exe.set_seed(7)
    assert np.array_equal(exe.forward(is_train=True, data=x)[0], y1)


def test_dropout_shared_axes_and_two_layers(rng):
    x = sym.var("data")
    net = sym.Group([sym.Dropout(x, p=0.5, axes=(2, 3), name="d1"), sym.Dropout(x, p=0.5, name="d2")])
    exe = mxcc.compile(net, {"data": (4, 6, 5, 5)}, train=True, optimizer=SGD0())
    exe.set_params({})
    data = np.ones((4, 6, 5, 5), np.float32)
    y1, y2 = (o.copy() for o in exe.forward(is_train=True, data=data))
    assert np.all(y1 == y1[:, :, :1, :1])                # one draw per (n, c): shared along the spatial axes
    assert 0 < (y1 == 0).mean() < 1
    assert not np.array_equal(y1 != 0, y2 != 0)          # two layers draw independent masks


def test_rrelu_training_slopes(rng):
    net = sym.LeakyReLU(sym.var("data"), act_type="rrelu", lower_bound=0.1, upper_bound=0.3, name="rr")
    exe = mxcc.compile(net, {"data": (8, 300)}, train=True, optimizer=SGD0(), inputs_need_grad=True)
    exe.set_params({})
    x = rng.standard_normal((8, 300)).astype(np.float32)
    y = exe.forward(is_train=True, data=x)[0].copy()
    neg = x < 0
    slopes = y[neg] / x[neg]
    assert np.all(y[~neg] == x[~neg]) and 0.1 <= slopes.min() and slopes.max() <= 0.3
    assert abs(slopes.mean() - 0.2) < 0.01 and slopes.std() > 0.05       # U(0.1, 0.3): mean 0.2, std 0.058
    exe.backward(np.ones_like(x))
    assert np.allclose(exe.grad_dict["data"][neg], slopes, rtol=1e-5) and np.all(exe.grad_dict["data"][~neg] == 1)
    yi = exe.forward(is_train=False, data=x)[0]
    assert np.allclose(yi[neg], 0.2 * x[neg], rtol=1e-6)                  # inference: the mean slope


def test_inference_forward_of_a_training_build(rng):
    """forward(is_train=False) of a training build (moving statistics, no dropout) equals an inference
    build of the same network with the same (updated) parameters; backward() differentiates what the last
    forward computed, as MXNet's does: after forward(is_train=False) the inference function (the gradients of
    a build compiled with is_train=False), after forward(is_train=True) the training one, whichever forward
    ran before."""
    x = sym.var("data")
    h = sym.Activation(sym.BatchNorm(sym.Convolution(x, kernel=(3, 3), num_filter=4, name="conv"),
                                     fix_gamma=False, name="bn"), act_type="relu")
    net = sym.FullyConnected(sym.Dropout(sym.Flatten(h), p=0.5, name="drop"), num_hidden=3, name="fc")
    shapes = {"data": (4, 2, 6, 6)}
    exe = mxcc.compile(net, shapes, train=True, optimizer=SGD0())
    params = {k: (np.abs(rng.standard_normal(s)) + 0.5 if k.endswith("var") else rng.standard_normal(s) * 0.5)
              .astype(np.float32) for k, s in exe.param_shapes.items()}
    exe.set_params({("aux:" + k if "moving" in k else k): v for k, v in params.items()})
    data = rng.standard_normal(shapes["data"]).astype(np.float32)
    head = rng.standard_normal((4, 3)).astype(np.float32)
    exe.forward(is_train=True, data=data)
    exe.backward(head)
    grads = {k: v.copy() for k, v in exe.grad_dict.items()}
    exe.forward(is_train=True, data=data)          # the next step: a new dropout mask
    exe.backward(head)
    assert any(not np.array_equal(grads[k], exe.grad_dict[k]) for k in grads)   # a new dropout mask was used
    exe.set_seed(0)
    exe.forward(is_train=True, data=data)
    exe.backward(head)
    first = {k: v.copy() for k, v in exe.grad_dict.items()}
    exe.set_seed(0)
    exe.forward(is_train=False, data=data)
    exe.forward(is_train=True, data=data)          # the training forward after an inference one
    exe.backward(head)
    for k in first:
        assert np.array_equal(first[k], exe.grad_dict[k]), k
    exe.forward(is_train=True, data=data)
    exe.forward(is_train=False, data=data)         # the last forward is the inference one: its gradient
    exe.backward(head)
    ref_exe = mxcc.compile(net, shapes, train=True, is_train=False, optimizer=SGD0())
    ref_exe.set_params({**exe.arg_dict, **{"aux:" + k: v for k, v in exe.aux_dict.items()}}, allow_extra=True)
    ref_exe.forward(data=data)
    ref_exe.backward(head)
    for k, g in ref_exe.grad_dict.items():
        assert rel_err(exe.grad_dict[k], g) <= 1e-5, k
    infer = mxcc.compile(net, shapes)
    infer.set_params({**{k: v for k, v in exe.arg_dict.items() if k in infer.param_shapes},
                      **{"aux:" + k: v for k, v in exe.aux_dict.items()}})
    ref = infer.forward(data=data)[0]
    assert rel_err(exe.forward(is_train=False, data=data)[0], ref) <= 1e-5
