"""Batch inference on a cluster with Ray Data: the MNIST test set through a compiled LeNet, then the same job
in one plain Python process for comparison (and, with --spark, as a Spark mapInPandas job).

    python -m pip install ".[ray]"
    python examples/ray_batch_inference.py                       # a local Ray cluster (ray.init())
    python examples/ray_batch_inference.py --address ray://head:10001 --concurrency 16   # a real one

The network is compiled once, here (the driver); the workers get it through Ray's object store
(mxcc.ray.map_batches) and need neither a C compiler nor a copy of the model. The LeNet is MXNet's
(tests/data/models/lenet), first trained here for --train-epochs epochs (default 2, a few seconds) with the
training step compiled to C, on the first 8,000 of the shipped images: only the 10,000 MNIST test images ship,
so the accuracy that says how good the network is is the one on the last 2,000 (held out). --params FILE uses
trained weights of your own instead; --train-epochs 0, the untrained weights MXNet exported.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import mxcc
from mxcc.train.idx import load_mnist

HERE = Path(__file__).resolve().parent
LENET = HERE.parent / "tests" / "data" / "models" / "lenet"


def compile_lenet(out_dir, batch: int = 64, params=None, **options) -> Path:
    """LeNet (MXNet's symbol JSON) compiled for `batch` images into `out_dir`, its params beside it."""
    mxcc.compile(LENET / "lenet-symbol.json", {"data": (batch, 1, 28, 28)}, params or LENET / "lenet-0000.params",
                 out_dir=out_dir, name="lenet", **options)
    return Path(out_dir)


def train_lenet(epochs: int, threads: int | None = None) -> dict:
    """LeNet's params after `epochs` epochs of SGD (batch 100, lr 0.1, wd 1e-4, Xavier) on the first 8,000
    images, the whole step compiled to C (mxcc.compile(train=True), as examples/train_mnist.py)."""
    from mxcc.initializer import Xavier, init_params
    from mxcc.io import MNISTIter
    from mxcc.model import fit
    from mxcc.optimizer import SGD
    data = HERE / "data" / "mnist"
    files = data / "t10k-images-idx3-ubyte.gz", data / "t10k-labels-idx1-ubyte.gz"
    train = MNISTIter(*files, 100, shuffle=True, flat=False, end=8000, data_name="data", label_name="softmax_label")
    net, shape = LENET / "lenet-symbol.json", {"data": (100, 1, 28, 28)}
    exe = mxcc.compile(net, shape, train=True, optimizer=SGD(learning_rate=0.1, wd=1e-4, rescale_grad=0.01),
                       name="lenet_train", threads=threads)
    arg, aux = init_params(mxcc.sym.load(str(net)), shape, Xavier(), seed=1)
    exe.set_params({**arg, **{f"aux:{k}": v for k, v in aux.items()}})
    fit(exe, train, None, num_epoch=epochs)
    return {k: v.copy() for k, v in exe.arg_dict.items() if k not in ("data", "softmax_label")}


def mnist() -> tuple[np.ndarray, np.ndarray]:
    """The 10,000 test images as float32 (N, 1, 28, 28) in [0, 1), and their labels."""
    images, labels = load_mnist(HERE / "data" / "mnist", "t10k")
    return (images.astype(np.float32) / 256.0).reshape(-1, 1, 28, 28), labels


def dataset(x: np.ndarray, labels: np.ndarray, blocks: int = 10):
    """A Ray Dataset of rows {id, data (1, 28, 28), label}, in `blocks` blocks (Ray gives each actor whole
    blocks: one block would keep all but one actor idle). A real job reads its own (ray.data.read_parquet,
    read_images, ...)."""
    import pyarrow as pa
    import ray
    from ray.data.extensions import ArrowTensorArray
    bounds = np.linspace(0, len(x), blocks + 1).astype(int)
    return ray.data.from_arrow([pa.table({"id": np.arange(a, b), "data": ArrowTensorArray.from_numpy(x[a:b]),
                                          "label": labels[a:b]}) for a, b in zip(bounds[:-1], bounds[1:])])


def ray_job(model_dir, x, labels, *, batch_size: int = 256, concurrency: int = 2, **kw):
    """(ids, probabilities, seconds) of every image through the network on Ray, in the dataset's order."""
    import mxcc.ray
    t = time.perf_counter()
    out = mxcc.ray.map_batches(dataset(x, labels), model_dir, batch_size=batch_size, concurrency=concurrency, **kw)
    got = list(out.iter_batches(batch_size=None, batch_format="numpy"))     # a real job: out.write_parquet(...)
    ids = np.concatenate([b["id"] for b in got])
    probs = np.concatenate([b["softmax_output"] for b in got])
    return ids, probs, time.perf_counter() - t


def local_job(model_dir, x, threads: int | None = None):
    """(probabilities, seconds): the same job in this process with mxcc alone, batch after batch (the
    last one padded with zeros to the compiled batch, its extra rows dropped)."""
    t = time.perf_counter()
    m = mxcc.load(model_dir)
    if threads:
        m.set_num_threads(threads)
    b = m.input_shapes["data"][0]
    probs = np.empty((len(x), 10), np.float32)
    for i in range(0, len(x), b):
        chunk = x[i:i + b]
        n = len(chunk)
        if n < b:
            chunk = np.concatenate([chunk, np.zeros((b - n,) + chunk.shape[1:], chunk.dtype)])
        probs[i:i + n] = m.forward(data=chunk)[0][:n]
    return probs, time.perf_counter() - t


def spark_job(model_dir, x, labels, partitions: int = 4):
    """(ids, probabilities, seconds) with Spark: the same worker (mxcc.ray.Predictor) in a mapInPandas
    function, the network shipped in a broadcast variable (executors need no compiler either)."""
    import pandas as pd
    from pyspark.sql import SparkSession

    import mxcc.ray
    spark = (SparkSession.builder.master(f"local[{partitions}]").appName("mxcc").config("spark.ui.enabled", "false")
             .getOrCreate())
    try:
        t = time.perf_counter()
        bundle = spark.sparkContext.broadcast(mxcc.ray.pack(model_dir))
        df = spark.createDataFrame(pd.DataFrame({"id": np.arange(len(x)), "data": list(x.reshape(len(x), -1)),
                                                 "label": labels.astype(np.int64)})).repartition(partitions)

        def classify(frames):
            worker = mxcc.ray.Predictor(bundle.value)           # once per partition's Python worker call
            for f in frames:
                out = worker({"id": f["id"].to_numpy(), "data": np.stack(f["data"].to_numpy())})
                yield pd.DataFrame({"id": out["id"], "softmax_output": list(out["softmax_output"])})

        res = df.mapInPandas(classify, "id long, softmax_output array<float>").toPandas().sort_values("id")
        return res["id"].to_numpy(), np.stack(res["softmax_output"].to_numpy()), time.perf_counter() - t
    finally:
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", default=None, help="a Ray cluster to join (default: start a local one)")
    ap.add_argument("--concurrency", type=int, default=2, help="actors (each loads the network once)")
    ap.add_argument("--batch", type=int, default=64, help="the compiled batch")
    ap.add_argument("--batch-size", type=int, default=256, help="rows per Ray batch")
    ap.add_argument("--params", default=None, help="trained LeNet params (default: train here)")
    ap.add_argument("--train-epochs", type=int, default=2, help="epochs to train first (0: MXNet's untrained "
                                                                 "weights)")
    ap.add_argument("--out", default="build/lenet_ray", help="where to compile the network")
    ap.add_argument("--isa", default=None, help="gcc -march for the workers' CPUs (default native; a mixed "
                                                "cluster: x86-64-v3)")
    ap.add_argument("--spark", action="store_true", help="also run the job with Spark (pyspark, Java)")
    args = ap.parse_args()
    import ray

    params = args.params or (train_lenet(args.train_epochs) if args.train_epochs > 0 else None)
    model = compile_lenet(args.out, args.batch, params, isa=args.isa)
    x, labels = mnist()
    held_out = slice(8000, None)
    ray.init(address=args.address)
    print(f"Ray cluster: {ray.cluster_resources().get('CPU', 0):.0f} CPUs; {args.concurrency} actors x 1 thread")
    ids, probs, dt = ray_job(model, x, labels, batch_size=args.batch_size, concurrency=args.concurrency)
    assert (ids == np.arange(len(x))).all(), "rows out of order"
    print(f"Ray Data : {len(x)} images in {dt:.2f} s ({len(x) / dt:,.0f} images/s, actor start-up included); "
          f"accuracy {(probs.argmax(1) == labels).mean():.4f} (held-out 2,000: "
          f"{(probs[held_out].argmax(1) == labels[held_out]).mean():.4f})")
    ref, dt = local_job(model, x)
    print(f"1 process: {len(x)} images in {dt:.2f} s ({len(x) / dt:,.0f} images/s, load included); "
          f"accuracy {(ref.argmax(1) == labels).mean():.4f} (held-out 2,000: "
          f"{(ref[held_out].argmax(1) == labels[held_out]).mean():.4f})")
    print("Ray's results equal the single process's exactly:", np.array_equal(probs, ref))
    if args.spark:
        ids, sp, dt = spark_job(model, x, labels)
        print(f"Spark    : {len(x)} images in {dt:.2f} s ({len(x) / dt:,.0f} images/s); equal: "
              f"{np.array_equal(ids, np.arange(len(x))) and np.array_equal(sp, ref)}")


if __name__ == "__main__":
    main()
