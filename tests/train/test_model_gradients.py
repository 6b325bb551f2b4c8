"""Whole-network gradients against MXNet 1.9.1 (tests/data/models/<name>/<name>-grad-<mode>.npz).

Protocol of the references (shared/mxnet-ref/gen/gen_model_grads.py): simple_bind with grad_req='write' for the
data and every parameter, forward(is_train=T), backward(out_grads=[head_grad]).
  infer (T = False): BatchNorm with the moving statistics
  train (T = True):  BatchNorm with batch statistics, moving statistics updated in backward (`aux_after:*`)
mxcc takes the same call sequence: one training build (grad_req='write', a poisoning build: memory nothing
wrote reads as NaN), forward(is_train=T), backward(out_grads=[head_grad]).
Tolerance: the references' README, about 1e-3 * max|ref| per gradient for whole networks (a ReLU whose input
is within float32 rounding of 0 flips between implementations). The train reference has one such flip:
the input of resnetv10_stage3_activation1 at element 21259 is +2.1e-6 in float64 (scale 8.4) and mxcc's
float32 agrees on the sign, while MXNet (oneDNN) blocked it; everything below that layer moves by up to
3.5e-3 of max|ref| (stage3_conv4_weight), channel 44 of stage3_batchnorm4_beta holds the whole difference.
So: 5e-3 below the flip, 1e-4 above it (stage4 and the dense layer), 1e-5 for the moving statistics.
"""
import numpy as np
import pytest

from mxcc_testing import DATA, SGD0, compile_for_gradients, needs_gcc, rel_err

pytestmark = needs_gcc


def _run(name: str, mode: str):
    d = DATA / "models" / name
    ref = np.load(d / f"{name}-grad-{mode}.npz")
    exe = compile_for_gradients(d / f"{name}-symbol.json", {"data": ref["input"].shape}, d / f"{name}-0000.params",
                                optimizer=SGD0(), grad_req="write")
    out = exe.forward(is_train=mode == "train", data=ref["input"])[0].copy()
    exe.backward([ref["head_grad"]])
    return exe, ref, out


@pytest.mark.parametrize("name", ["resnet18_v1_slim", "mobilenet0.25"])
def test_inference_mode_gradients(name):
    exe, ref, out = _run(name, "infer")
    assert rel_err(out, ref["out"]) <= 2e-5
    grads = [k for k in ref.files if k.startswith("grad:")]
    assert len(grads) > 50
    errors = {k: rel_err(exe.grad_dict[k[5:]], ref[k]) for k in grads}
    bad = {k: e for k, e in errors.items() if e > 1e-3}
    assert not bad, bad


def test_training_mode_gradients_and_moving_statistics():
    exe, ref, out = _run("resnet18_v1_slim", "train")
    assert rel_err(out, ref["out"]) <= 2e-5               # batch statistics in every BatchNorm
    after_flip = ("resnetv10_stage4_", "resnetv10_dense0_")
    bad = {}
    for k in (k for k in ref.files if k.startswith("grad:")):
        tol = 1e-4 if k[5:].startswith(after_flip) else 5e-3
        e = rel_err(exe.grad_dict[k[5:]], ref[k])
        if e > tol:
            bad[k] = e
    assert not bad, bad
    aux = [k for k in ref.files if k.startswith("aux_after:")]
    assert len(aux) == 40
    for k in aux:
        assert rel_err(exe.aux_dict[k[10:]], ref[k]) <= 1e-5, k
    # the same build's inference forward (moving statistics, BatchNorm folded into the convolutions, see
    # compiler._inference_variant) gives MXNet's inference output once the moving statistics are restored
    d = DATA / "models" / "resnet18_v1_slim"
    exe.set_params(d / "resnet18_v1_slim-0000.params")
    io = np.load(d / "resnet18_v1_slim-io.npz")
    assert rel_err(exe.forward(is_train=False, data=io["input"])[0], io["output"]) <= 2e-5
    assert any(k["phase"] == "infer" and "BatchNorm" in k["ops"] and "Convolution" in k["ops"]
               for k in exe.meta["kernels"])
