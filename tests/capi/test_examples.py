"""The C and C++ examples (examples/c/), built against compiled directories and run as the README shows them; each
compared with the Python module's output on the same input."""
from __future__ import annotations

import gzip
import re

import numpy as np

import mxcc
from capi_helpers import build_c, run
from mxcc.params import save_params
from mxcc_testing import DATA, ROOT, rel_err

MNIST = ROOT / "examples" / "data" / "mnist"
PARAMS = DATA / "train" / "mlp" / "mlp-final-0000.params"   # MXNet's MLP after 5 SGD steps (the C++ example's)


def test_mnist_predict(mlp_dir, tmp_path):
    exe = build_c(tmp_path / "mnist_predict", [ROOT / "examples/c/mnist_predict.c"], mlp_dir, "mlp", extra=["-lz"])
    r = run([exe, PARAMS, MNIST / "t10k-images-idx3-ubyte.gz", MNIST / "t10k-labels-idx1-ubyte.gz", "--first", "8000",
             "--count", "1950", "--out", tmp_path / "probs.bin"])
    m = re.match(r"accuracy: ([\d.]+)% on 1950 images \((\d+) correct\), ([\d.]+) us per image \(batch 100", r.stdout)
    assert m, r.stdout
    probs = np.fromfile(tmp_path / "probs.bin", np.float32).reshape(1950, 10)
    images = np.frombuffer(gzip.open(MNIST / "t10k-images-idx3-ubyte.gz").read()[16:], np.uint8).reshape(-1, 784)
    labels = np.frombuffer(gzip.open(MNIST / "t10k-labels-idx1-ubyte.gz").read()[8:], np.uint8)
    mod = mxcc.load(mlp_dir)
    mod.set_params(PARAMS)
    x = np.zeros((2000, 784), np.float32)
    x[:1950] = images[8000:9950] / np.float32(255)
    want = np.concatenate([mod.forward(X=x[i:i + 100])[0] for i in range(0, 2000, 100)])[:1950]
    assert rel_err(probs, want) <= 1e-6
    assert int(m.group(2)) == int((want.argmax(1) == labels[8000:9950]).sum())


def _ppm(path, rgb: np.ndarray):
    h, w, _ = rgb.shape
    path.write_bytes(f"P6\n# made by the test\n{w} {h}\n255\n".encode() + rgb.astype(np.uint8).tobytes())


def test_image_classification_predict(compiled, tmp_path):
    """MXNet's image-classification-predict.cc, on mxcc's ResNet-18 library: a 300x200 PPM resized to 224x224, a
    mean image through MXNDListCreate, a batch of 2, the top 5 named from a synset."""
    d = compiled["resnet18_v1_slim"]
    src = DATA / "models" / "resnet18_v1_slim"
    exe = build_c(tmp_path / "icp", [ROOT / "examples/c/image_classification_predict.cc"], d, "resnet18_v1_slim",
                  cxx=True)
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (200, 300, 3))
    _ppm(tmp_path / "cat.ppm", rgb)
    mean = (rng.random((3, 224, 224)) * 128).astype(np.float32)
    save_params(tmp_path / "mean_224.nd", {"mean_img": mean})
    (tmp_path / "synset.txt").write_text("".join(f"n{i:08d} class {i}\n" for i in range(1000)))
    r = run([exe, src / "resnet18_v1_slim-symbol.json", src / "resnet18_v1_slim-0000.params", tmp_path / "cat.ppm",
             "--batch", "2", "--mean", tmp_path / "mean_224.nd", "--std-rgb", "58.4,57.12,57.38",
             "--synset", tmp_path / "synset.txt", "--dump", tmp_path / "out.bin"])
    lines = r.stdout.splitlines()
    assert len(lines) == 5 and lines[0].startswith("Best Result: id = ")
    ys, xs = (np.arange(224) * 200) // 224, (np.arange(224) * 300) // 224
    item = (rgb[ys][:, xs].transpose(2, 0, 1).astype(np.float32) - mean) / np.array([58.4, 57.12, 57.38],
                                                                                     np.float32)[:, None, None]
    mod = mxcc.load(d)
    want = mod.forward(data=np.stack([item, item]).astype(np.float32))[0]
    out = np.fromfile(tmp_path / "out.bin", np.float32).reshape(want.shape)
    assert rel_err(out, want) <= 1e-6
    best = int(want[0].argmax())
    assert f"Best Result: id = {best}, score = {want[0, best]:.6f}, n{best:08d} class {best}" == lines[0]
