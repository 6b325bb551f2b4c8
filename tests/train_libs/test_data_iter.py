"""mxcc.io against MXNet 1.9.1's NDArrayIter and MNISTIter (tests/data/train_libs/io_ref.json,
mnist_ref.npz): every batch's data, label and pad over 3 epochs for each last_batch_handle, shuffled
ones included (MXNet ran after np.random.seed(seed)); MNISTIter on the examples' MNIST files."""
import json

import numpy as np
import pytest

from mxcc.train.idx import load_mnist
from mxcc.io import DataBatch, DataDesc, MNISTIter, NDArrayIter
from mxcc_testing import DATA, ROOT

REF = json.loads((DATA / "train_libs" / "io_ref.json").read_text())
MNIST = ROOT / "examples" / "data" / "mnist"
IMAGES, LABELS = MNIST / "t10k-images-idx3-ubyte.gz", MNIST / "t10k-labels-idx1-ubyte.gz"


def _id(c):
    return f"n{c['n']}-b{c['batch_size']}-{c['last_batch_handle']}-{'shuffle' if c['shuffle'] else 'ordered'}"


@pytest.mark.parametrize("case", REF["ndarrayiter"], ids=_id)
def test_ndarrayiter_matches_mxnet(case):
    n = case["n"]
    data = np.arange(n * 2, dtype=np.int64).reshape(n, 2)
    label = (np.arange(n) % 10).astype(np.uint8)
    it = NDArrayIter(data, label, case["batch_size"], shuffle=case["shuffle"],
                     last_batch_handle=case["last_batch_handle"], seed=case["seed"])
    for epoch, ref in enumerate(case["epochs"]):
        got = [{"data": b.data[0].tolist(), "label": b.label[0].tolist(), "pad": b.pad} for b in it]
        assert got == ref, f"epoch {epoch}"
        it.reset()
    assert [[d.name, list(d.shape), np.dtype(d.dtype).name] for d in it.provide_data] == case["provide_data"]
    assert [[d.name, list(d.shape), np.dtype(d.dtype).name] for d in it.provide_label] == case["provide_label"]


def test_ndarrayiter_names_and_no_label():
    ref = REF["ndarrayiter_extra"]
    multi = NDArrayIter({"b": np.zeros((5, 2)), "a": np.ones((5, 3))}, [np.zeros(5), np.ones(5)], 2)
    assert [[d.name, list(d.shape)] for d in multi.provide_data] == ref["dict_and_list_names"]["provide_data"]
    assert [[d.name, list(d.shape)] for d in multi.provide_label] == ref["dict_and_list_names"]["provide_label"]
    batch = next(multi)
    assert [x.shape for x in batch.data] == [(2, 3), (2, 2)] and all(x.dtype == np.float32 for x in batch.data)
    nolabel = NDArrayIter(np.arange(6.0), None, 4)
    assert [len(b.label) for b in nolabel] == ref["no_label"]["labels"] and nolabel.provide_label == []


def test_ndarrayiter_roll_over_hard_reset_and_errors():
    it = NDArrayIter(np.arange(10.0), np.arange(10.0), 4, last_batch_handle="roll_over")
    assert len(list(it)) == 2
    it.hard_reset()                                   # drops the carried samples
    first = next(it)
    assert first.data[0].tolist() == [0, 1, 2, 3] and first.pad == 0
    with pytest.raises(ValueError):
        NDArrayIter(np.zeros(4), np.zeros(3), 2)
    with pytest.raises(ValueError):
        NDArrayIter(np.zeros(4), None, 2, last_batch_handle="wrap")


def _batches(it):
    return list(it)


@pytest.mark.parametrize("key", ["flat", "image", "parts"])
def test_mnistiter_matches_mxnet(key):
    ref = REF["mnistiter"][key]
    with np.load(DATA / "train_libs" / "mnist_ref.npz") as f:
        head, first_label, last_label = (f[f"{key}/{k}"] for k in ("first_batch_head", "first_batch_label",
                                                                     "last_batch_label"))
    it = MNISTIter(IMAGES, LABELS, shuffle=False, **ref["kwargs"])
    batches = _batches(it)
    assert len(batches) == ref["num_batches"]
    assert [[d.name, list(d.shape)] for d in it.provide_data] == ref["provide_data"]
    assert [[d.name, list(d.shape)] for d in it.provide_label] == ref["provide_label"]
    b = batches[0]
    assert list(b.data[0].shape) == ref["data_shape"] and list(b.label[0].shape) == ref["label_shape"]
    assert b.pad == ref["pad"] and b.data[0].dtype == np.float32
    np.testing.assert_array_equal(b.data[0][:2], head)               # pixels * 1/256, exactly
    np.testing.assert_array_equal(b.label[0], first_label)
    np.testing.assert_array_equal(batches[-1].label[0], last_label)
    assert float(b.data[0].astype(np.float64).sum()) == ref["first_batch_data_sum"]
    assert float(batches[-1].data[0].astype(np.float64).sum()) == ref["last_batch_data_sum"]
    it.reset()
    np.testing.assert_array_equal(next(it).data[0], b.data[0])


def test_mnistiter_ranges_shuffle_and_scale():
    images, labels = load_mnist(MNIST)
    train = MNISTIter(IMAGES, LABELS, batch_size=100, flat=True, shuffle=False, end=8000)
    val = MNISTIter(IMAGES, LABELS, batch_size=100, flat=True, shuffle=False, start=8000, scale=1 / 255)
    assert (train.num_data, val.num_data) == (8000, 2000)
    vb = list(val)
    assert len(vb) == 20
    np.testing.assert_array_equal(vb[0].data[0], images[8000:8100].reshape(100, 784).astype(np.float32)
                                  * np.float32(1 / 255))
    np.testing.assert_array_equal(vb[-1].index, np.arange(9900, 10000))
    a = MNISTIter(IMAGES, LABELS, batch_size=1000, end=5000, seed=3)
    b = MNISTIter(IMAGES, LABELS, batch_size=1000, end=5000, seed=3)
    idx = np.concatenate([x.index for x in a])
    assert sorted(idx.tolist()) == list(range(5000)) and (idx != np.arange(5000)).any()
    assert (idx == np.concatenate([x.index for x in b])).all()
    a.reset()                                                             # same order every epoch, as MXNet
    assert (np.concatenate([x.index for x in a]) == idx).all()
    first = next(iter(MNISTIter(IMAGES, LABELS, batch_size=10, end=5000, seed=3)))
    np.testing.assert_array_equal(first.label[0], labels[idx[:10]].astype(np.float32))
    shaped = MNISTIter(IMAGES, LABELS, batch_size=4, shuffle=False, input_shape=(28, 28))
    assert next(shaped).data[0].shape == (4, 28, 28)
    with pytest.raises(ValueError):
        MNISTIter(IMAGES, LABELS, batch_size=4, input_shape=(3, 28, 28))


def test_records():
    d = DataDesc("data", (100, 784))
    assert d.name == "data" and d.shape == (100, 784) and d == ("data", (100, 784))
    assert repr(d) == "DataDesc[data,(100, 784),<class 'numpy.float32'>,NCHW]"
    assert DataDesc.get_batch_axis("NCHW") == 0 and DataDesc.get_batch_axis(None) == 0
    b = DataBatch([np.zeros((2, 3))], [np.zeros(2)], pad=1)
    assert str(b) == "DataBatch: data shapes: [(2, 3)] label shapes: [(2,)]"
    with pytest.raises(TypeError):
        DataBatch(np.zeros(2))
