"""Generated networks built with AddressSanitizer + UBSan, run as standalone executables: no report allowed.

Covers the inference path (bench: every kernel of the net), a training step (the train program, a few
batches), random DAGs of the planner tests (arena placement, in-place kernels, views), and every MXNet op
case's forward and backward in both modes, poisoned, with a whole network's (tests/train/test_gradients.py
and test_model_gradients.py run in a Python with the sanitizer runtimes preloaded)."""
import os
import subprocess

import pytest

import mxcc
from mxcc_testing import DATA, ROOT, needs_gcc

pytestmark = needs_gcc
ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
MNIST = ROOT / "examples" / "data" / "mnist"


def _run(cmd):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=ENV, timeout=300)
    assert r.returncode == 0 and "runtime error" not in r.stderr and "ERROR: AddressSanitizer" not in r.stderr, \
        r.stdout + r.stderr
    return r.stdout


class _SGD:
    kind, state_names = "sgd_mom", ("mom",)

    def step_hyper(self, t):
        return {"lr": 0.1, "wd": 1e-4, "momentum": 0.9, "rescale_grad": 0.01, "clip_gradient": -1.0}

    def multipliers(self, graph, names):
        return {}, {}


def test_mlp_inference_under_sanitizers(tmp_path):
    out = mxcc.compile(DATA / "models/mlp/mlp-symbol.json", {"X": (3, 784)}, sanitize=True, out_dir=tmp_path / "m")
    assert "us per forward" in _run([out / "mlp_bench", "--iters", "3", "--warmup", "1", "--threads", "2"])


def test_mlp_training_program_under_sanitizers(tmp_path):
    out = mxcc.compile(DATA / "models/mlp/mlp-symbol.json", {"X": (50, 784)}, sanitize=True, train=True,
                       optimizer=_SGD(), out_dir=tmp_path / "t", name="mlp")
    text = _run([out / "mlp_train", "--images", MNIST / "t10k-images-idx3-ubyte.gz", "--labels",
                 MNIST / "t10k-labels-idx1-ubyte.gz", "--epochs", "1", "--train", "200", "--val", "100"])
    assert text.startswith("Epoch: 0")


@pytest.mark.parametrize("seed", [3, 11])
def test_random_dags_under_sanitizers(seed, tmp_path):
    import sys
    sys.path.insert(0, str(ROOT / "tests" / "passes"))
    from test_passes import random_net
    net, shapes = random_net(seed)
    out = mxcc.compile(net, shapes, sanitize=True, out_dir=tmp_path / "r", name="net")
    _run([out / "net_bench", "--iters", "2", "--warmup", "1"])


def test_op_cases_and_a_network_gradient_under_sanitizers():
    """The op cases of tests/train/test_gradients.py (poisoning builds, both forward modes, the cases'
    grad_req) and resnet18_v1_slim's gradients in both modes (tests/train/test_model_gradients.py; mobilenet's
    would add a minute) built with ASan + UBSan and loaded into a Python that preloads their runtimes."""
    import sys
    cc = os.environ.get("CC", "gcc")
    libs = [subprocess.run([cc, f"-print-file-name={lib}"], capture_output=True, text=True).stdout.strip()
            for lib in ("libasan.so", "libubsan.so")]
    if not all(os.path.isabs(p) and os.path.exists(p) for p in libs):
        pytest.skip(f"{cc} has no shared ASan/UBSan runtime to preload")
    env = dict(ENV, LD_PRELOAD=":".join(libs), ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
               MXCC_TEST_SANITIZE="1", PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
               MXCC_TEST_KEEP_CACHE="1")   # this session's cache: the sanitized runtime is built once
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                        str(ROOT / "tests" / "train" / "test_gradients.py"),
                        str(ROOT / "tests" / "train" / "test_model_gradients.py"), "-k", "op_case or resnet18 or training_mode"],
                       capture_output=True, text=True, env=env, timeout=1200, cwd=ROOT)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "ERROR: AddressSanitizer" not in out and "runtime error" not in out, out[-5000:]
    assert " passed" in out
