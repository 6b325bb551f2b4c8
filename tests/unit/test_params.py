"""mxcc.params against files written by real MXNet 1.9.1 and records built by hand from formats.md §2.2.

Independent truth: the MXNet-written mlp/lenet checkpoints (tests/data/models, copied from
shared/mxnet-ref), MXNet's own inference output for the mlp (mlp-io.npz), and a `struct`-based writer in
this file that follows the documented layout rather than mxcc's code.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from mxcc.errors import ParamsError
from mxcc.params import join_arg_aux, load_params, save_params, split_arg_aux

DATA = Path(__file__).resolve().parents[1] / "data" / "models"
MLP = DATA / "mlp" / "mlp-0000.params"
LENET = DATA / "lenet" / "lenet-0000.params"

# From mlp-symbol.json (FullyConnected num_hidden 128, 64, 10 on a 784 input) and record.json
# (num_param_arrays 6, num_parameters 109386, saved with save_checkpoint -> "arg:" prefixes).
MLP_SHAPES = {"arg:w0": (128, 784), "arg:b0": (128,), "arg:w1": (64, 128), "arg:b1": (64,),
              "arg:w2": (10, 64), "arg:b2": (10,)}
# From lenet-symbol.json: conv 5x5 with 20 and 50 filters on 1x28x28, two 2x2/2 max pools (-> 50x4x4 =
# 800), fc 512, fc 10; record.json: num_param_arrays 8, num_parameters 440812.
LENET_SHAPES = {"arg:conv1_weight": (20, 1, 5, 5), "arg:conv1_bias": (20,),
                "arg:conv2_weight": (50, 20, 5, 5), "arg:conv2_bias": (50,),
                "arg:fc1_weight": (512, 800), "arg:fc1_bias": (512,),
                "arg:fc2_weight": (10, 512), "arg:fc2_bias": (10,)}

V1, V2, V3 = 0xF993FAC8, 0xF993FAC9, 0xF993FACA
FLAGS = {0: np.float32, 1: np.float64, 2: np.float16, 3: np.uint8, 4: np.int32, 5: np.int8, 6: np.int64,
         7: np.bool_, 8: np.int16, 9: np.uint16, 10: np.uint32, 11: np.uint64}


# ---- an independent writer, straight from formats.md §2.2 -------------------------------------------

def rec_v2(arr, flag, magic=V2, stype=0, ctx=(1, 0)):
    arr = np.asarray(arr)
    head = struct.pack("<Ii", magic, stype) + struct.pack("<i", arr.ndim)
    head += b"".join(struct.pack("<q", d) for d in arr.shape)
    return head + struct.pack("<iii", *ctx, flag) + arr.astype(arr.dtype.newbyteorder("<")).tobytes()


def rec_v1(arr, flag):
    arr = np.asarray(arr)
    return (struct.pack("<Ii", V1, arr.ndim) + b"".join(struct.pack("<q", d) for d in arr.shape)
            + struct.pack("<iii", 1, 0, flag) + arr.astype(arr.dtype.newbyteorder("<")).tobytes())


def rec_legacy(arr, flag):
    arr = np.asarray(arr)
    return (struct.pack("<I", arr.ndim) + b"".join(struct.pack("<I", d) for d in arr.shape)
            + struct.pack("<iii", 1, 0, flag) + arr.astype(arr.dtype.newbyteorder("<")).tobytes())


def ndarray_list(records, names=None):
    out = struct.pack("<QQQ", 0x112, 0, len(records)) + b"".join(records)
    names = names or []
    out += struct.pack("<Q", len(names))
    return out + b"".join(struct.pack("<Q", len(n.encode())) + n.encode() for n in names)


def write(tmp_path, blob, name="x.params"):
    p = tmp_path / name
    p.write_bytes(blob)
    return p


# ---- real MXNet files ----------------------------------------------------------------------------------

@pytest.mark.parametrize("path, shapes, total", [(MLP, MLP_SHAPES, 109386), (LENET, LENET_SHAPES, 440812)])
def test_real_checkpoint_keys_shapes_dtypes(path, shapes, total):
    params = load_params(path)
    assert list(params) == list(shapes)                 # names in file order, exactly as stored
    assert {k: v.shape for k, v in params.items()} == shapes
    assert all(v.dtype == np.float32 and v.flags.c_contiguous and v.flags.writeable
               for v in params.values())
    assert sum(v.size for v in params.values()) == total
    # Xavier weights / random biases (README): finite, nonzero spread.
    assert all(np.isfinite(v).all() and v.std() > 0 for v in params.values())


def test_mlp_values_reproduce_mxnet_inference_output():
    # MXNet's own forward of this checkpoint (mlp-io.npz) is the truth for the values and the C-order
    # (num_hidden, in) layout. float64 numpy vs float32 MXNet on sums of <= 784 terms: atol 1e-6 on
    # probabilities of order 0.1 leaves margin over the ~1e-7 float32 rounding.
    p = load_params(MLP)
    io = np.load(DATA / "mlp" / "mlp-io.npz")
    h = io["input"].astype(np.float64)
    for i in range(3):
        h = h @ p[f"arg:w{i}"].T.astype(np.float64) + p[f"arg:b{i}"]
        if i < 2:
            h = np.maximum(h, 0)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    np.testing.assert_allclose(e / e.sum(axis=1, keepdims=True), io["output"], atol=1e-6, rtol=0)


@pytest.mark.parametrize("path", [MLP, LENET])
def test_resave_is_byte_identical_to_mxnet(path, tmp_path):
    out = tmp_path / path.name
    save_params(out, load_params(path))
    assert out.read_bytes() == path.read_bytes()


def test_resave_split_then_join_is_byte_identical(tmp_path):
    arg, aux = split_arg_aux(load_params(MLP))
    assert aux == {} and list(arg) == ["w0", "b0", "w1", "b1", "w2", "b2"]
    save_params(tmp_path / "m.params", join_arg_aux(arg, aux))
    assert (tmp_path / "m.params").read_bytes() == MLP.read_bytes()


# ---- hand-built records of every version --------------------------------------------------------------

@pytest.mark.parametrize("flag", sorted(FLAGS))
@pytest.mark.parametrize("version", ["v1", "v2", "v3", "legacy"])
def test_every_version_and_dtype(tmp_path, flag, version):
    rng = np.random.default_rng(flag)
    a = (rng.standard_normal((2, 3, 4)) * 50).astype(FLAGS[flag])
    b = (rng.standard_normal(5) * 50).astype(FLAGS[flag])
    make = {"v1": rec_v1, "v2": rec_v2, "legacy": rec_legacy,
            "v3": lambda x, f: rec_v2(x, f, magic=V3)}[version]
    got = load_params(write(tmp_path, ndarray_list([make(a, flag), make(b, flag)], ["arg:a", "b"])))
    assert list(got) == ["arg:a", "b"]
    for key, want in (("arg:a", a), ("b", b)):
        assert got[key].dtype == want.dtype and got[key].shape == want.shape
        np.testing.assert_array_equal(got[key], want)


def test_unnamed_list_gets_positional_keys(tmp_path):
    recs = [rec_v2(np.full(3, i, np.float32), 0) for i in range(3)]
    got = load_params(write(tmp_path, ndarray_list(recs)))
    assert list(got) == ["0", "1", "2"] and got["2"].tolist() == [2, 2, 2]


def test_none_arrays_are_skipped_and_keep_positions(tmp_path):
    none_v2 = struct.pack("<Iii", V2, 0, 0)           # ndim 0: the record ends after the shape
    none_v3 = struct.pack("<Iii", V3, 0, -1)          # V3: ndim -1 = unknown
    none_legacy = struct.pack("<I", 0)
    x = rec_v2(np.ones(2, np.float32), 0)
    got = load_params(write(tmp_path, ndarray_list([none_v2, x, none_v3, none_legacy, x])))
    assert list(got) == ["1", "4"]


def test_v3_scalar_and_zero_size(tmp_path):
    scalar = struct.pack("<Iii", V3, 0, 0) + struct.pack("<iii", 1, 0, 1) + struct.pack("<d", 2.5)
    empty = rec_v2(np.zeros((0, 4), np.float32), 0, magic=V3)
    got = load_params(write(tmp_path, ndarray_list([scalar, empty], ["s", "e"])))
    assert got["s"].shape == () and got["s"] == 2.5 and got["s"].dtype == np.float64
    assert got["e"].shape == (0, 4)


def test_gpu_context_is_read_as_cpu_data(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = load_params(write(tmp_path, ndarray_list([rec_v2(a, 0, ctx=(2, 3))], ["w"])))
    np.testing.assert_array_equal(got["w"], a)


def test_legacy_v0_layout_like_mxnet_test_file(tmp_path):
    # tests/python/unittest/legacy_ndarray.v0 in MXNet: 6 arrays of shape (128,), cpu, f32, 0 names.
    arrays = [np.linspace(i, i + 1, 128, dtype=np.float32) for i in range(6)]
    got = load_params(write(tmp_path, ndarray_list([rec_legacy(a, 0) for a in arrays])))
    assert list(got) == [str(i) for i in range(6)]
    for i, a in enumerate(arrays):
        np.testing.assert_array_equal(got[str(i)], a)


def test_sparse_array_is_refused_by_name(tmp_path):
    # row_sparse (stype 1): storage shape (2, 3), shape (5, 3), f32, aux idx int64 (2,), values, indices.
    vals = np.ones((2, 3), np.float32)
    idx = np.array([0, 3], np.int64)
    sparse = (struct.pack("<Iii", V2, 1, 2) + struct.pack("<qq", 2, 3) + struct.pack("<iqq", 2, 5, 3)
              + struct.pack("<iii", 1, 0, 0) + struct.pack("<iiq", 6, 1, 2) + vals.tobytes() + idx.tobytes())
    blob = ndarray_list([rec_v2(np.ones(2, np.float32), 0), sparse], ["arg:dense", "arg:emb_weight"])
    with pytest.raises(ParamsError, match=r"array #1 \('arg:emb_weight'\).*row_sparse"):
        load_params(write(tmp_path, blob))


def test_bf16_is_refused_by_name(tmp_path):
    bf16 = struct.pack("<Iiiq", V2, 0, 1, 4) + struct.pack("<iii", 1, 0, 12) + bytes(8)
    with pytest.raises(ParamsError, match=r"'arg:w'.*bfloat16"):
        load_params(write(tmp_path, ndarray_list([bf16], ["arg:w"])))


@pytest.mark.parametrize("patch, match", [
    (lambda r: r[:4] + struct.pack("<i", 7) + r[8:], "storage type 7"),
    (lambda r: r[:-4 * 6 - 4] + struct.pack("<i", 13) + r[-4 * 6:], "type flag 13"),
    (lambda r: r[:-4 * 6 - 12] + struct.pack("<i", 9) + r[-4 * 6 - 8:], "dev_type=9"),
    (lambda r: struct.pack("<I", 0xDEADBEEF) + r[4:], "bad record magic 0xdeadbeef"),
    (lambda r: r[:8] + struct.pack("<i", -3) + r[12:], "negative ndim"),
])
def test_corrupted_record_fields(tmp_path, patch, match):
    rec = rec_v2(np.ones(6, np.float32), 0)          # magic stype ndim dim ctx ctx flag data(24)
    with pytest.raises(ParamsError, match=match):
        load_params(write(tmp_path, ndarray_list([patch(rec)], ["w"])))


def test_duplicate_names_and_name_count(tmp_path):
    x = rec_v2(np.ones(1, np.float32), 0)
    with pytest.raises(ParamsError, match="'w' occurs more than once"):
        load_params(write(tmp_path, ndarray_list([x, x], ["w", "w"])))
    with pytest.raises(ParamsError, match="1 names for 2 arrays"):
        load_params(write(tmp_path, ndarray_list([x, x], ["w"])))


# ---- corruption of the real file: always ParamsError, never a crash, hang or huge allocation -----------

def test_truncation_anywhere_raises(tmp_path):
    blob = MLP.read_bytes()
    cuts = list(range(0, 400, 7)) + [1000, 200_000, 401_460, len(blob) - 60, len(blob) - 9, len(blob) - 1]
    p = tmp_path / "cut.params"
    for cut in cuts:
        p.write_bytes(blob[:cut])
        with pytest.raises(ParamsError, match=r"cut\.params.*(truncated|count)"):
            load_params(p)


def test_trailing_garbage_raises(tmp_path):
    with pytest.raises(ParamsError, match="3 unexpected bytes"):
        load_params(write(tmp_path, MLP.read_bytes() + b"abc"))


@pytest.mark.parametrize("offset, fmt, value, match", [
    (0, "<Q", 0x113, "not an MXNet .params file"),             # file header magic
    (16, "<Q", 2**63, "array count"),                          # absurd array count
    (24, "<I", 0x12345678, "bad record magic"),                # first record magic
    (32, "<i", 2**30, "truncated"),                            # absurd ndim of w0
    (36, "<q", 2**40, "truncated"),                            # absurd first dim of w0
])
def test_flipped_header_fields_raise(tmp_path, offset, fmt, value, match):
    blob = bytearray(MLP.read_bytes())
    struct.pack_into(fmt, blob, offset, value)
    with pytest.raises(ParamsError, match=match):
        load_params(write(tmp_path, bytes(blob)))


def test_random_byte_corruption_never_escapes_as_other_errors(tmp_path):
    # Structure lives in the first record header and in the names at the end; data bytes may load fine.
    blob = MLP.read_bytes()
    rng = np.random.default_rng(0)
    p = tmp_path / "fuzz.params"
    spots = list(range(0, 64)) + list(range(len(blob) - 110, len(blob)))
    for pos in spots:
        bad = bytearray(blob)
        bad[pos] = (bad[pos] + int(rng.integers(1, 256))) % 256
        p.write_bytes(bytes(bad))
        try:
            load_params(p)
        except ParamsError:
            pass


def test_unreadable_inputs(tmp_path):
    with pytest.raises(ParamsError, match="cannot read"):
        load_params(tmp_path / "missing.params")
    with pytest.raises(ParamsError, match="truncated"):
        load_params(write(tmp_path, b""))
    with pytest.raises(ParamsError, match="not a readable .npz"):
        load_params(write(tmp_path, b"PK\x03\x04garbage", "x.npz"))


# ---- writer: round trips, atomicity, refusals ----------------------------------------------------------

def round_trip_cases():
    rng = np.random.default_rng(1)
    cases = {f"arg:{np.dtype(t).name}": (rng.standard_normal((3, 2)) * 9).astype(t) for t in FLAGS.values()}
    cases["aux:empty"] = np.zeros((0, 5), np.float32)
    cases["five_d"] = rng.standard_normal((1, 2, 1, 3, 2)).astype(np.float32)
    cases["transposed"] = np.arange(12, dtype=np.float32).reshape(3, 4).T          # not C-contiguous
    cases["big_endian"] = np.arange(5, dtype=">i4")
    cases["file"] = cases["allow_pickle"] = np.ones(1, np.float16)                  # np.savez kwarg names
    return cases


@pytest.mark.parametrize("name", ["rt.params", "rt.npz"])
def test_round_trip(tmp_path, name):
    cases = round_trip_cases()
    save_params(tmp_path / name, cases)
    got = load_params(tmp_path / name)
    assert list(got) == list(cases)
    for k, v in cases.items():
        assert got[k].dtype == v.dtype.newbyteorder("=") and got[k].shape == v.shape
        np.testing.assert_array_equal(got[k], v)
    assert [p.name for p in tmp_path.iterdir()] == [name]                           # no temp files left


def test_writer_layout_matches_independent_writer(tmp_path):
    a, b = np.arange(6, dtype=np.int64).reshape(2, 3), np.array([True, False])
    save_params(tmp_path / "w.params", {"arg:a": a, "aux:b": b})
    assert (tmp_path / "w.params").read_bytes() == ndarray_list([rec_v2(a, 6), rec_v2(b, 7)],
                                                                ["arg:a", "aux:b"])


@pytest.mark.parametrize("bad, match", [
    (np.float32(1.0), "0-d array"),
    (np.ones(2, np.complex64), "complex64 has no MXNet type flag"),
    (np.array(["a"]), "has no MXNet type flag"),
])
def test_unwritable_arrays_leave_existing_file_untouched(tmp_path, bad, match):
    target = tmp_path / "keep.params"
    target.write_bytes(b"old")
    with pytest.raises(ParamsError, match=match):
        save_params(target, {"ok": np.ones(2, np.float32), "bad": bad})
    assert target.read_bytes() == b"old" and len(list(tmp_path.iterdir())) == 1


def test_npz_refuses_object_arrays(tmp_path):
    with pytest.raises(ParamsError, match="object"):
        save_params(tmp_path / "o.npz", {"o": np.array([None])})


def test_npz_written_by_numpy_is_read(tmp_path):
    np.savez(tmp_path / "n.npz", **{"arg:w": np.eye(2, dtype=np.float32), "aux:m": np.zeros(3)})
    got = load_params(tmp_path / "n.npz")
    assert list(got) == ["arg:w", "aux:m"] and got["arg:w"].tolist() == [[1, 0], [0, 1]]


def test_npz_with_lying_header_does_not_allocate(tmp_path):
    import io
    import zipfile
    npy = io.BytesIO()
    np.lib.format.write_array_header_1_0(npy, {"descr": "<f4", "fortran_order": False,
                                               "shape": (10**12,)})
    with zipfile.ZipFile(tmp_path / "lie.npz", "w") as zf:
        zf.writestr("w.npy", npy.getvalue() + bytes(16))
    with pytest.raises(ParamsError, match="needs 4000000000000 bytes, member has 16"):
        load_params(tmp_path / "lie.npz")


# ---- arg/aux -------------------------------------------------------------------------------------------

def test_split_and_join():
    w, m, g = np.ones(1), np.zeros(1), np.full(1, 2.0)
    arg, aux = split_arg_aux({"arg:fc:w": w, "aux:bn_moving_mean": m, "dense0_weight": g})
    assert arg == {"fc:w": w, "dense0_weight": g} and aux == {"bn_moving_mean": m}   # first ':' only
    assert list(join_arg_aux({"w": w}, {"m": m})) == ["arg:w", "aux:m"]


@pytest.mark.parametrize("params, match", [
    ({"foo:w": np.ones(1)}, "unknown prefix 'foo'"),
    ({"arg:w": np.ones(1), "w": np.ones(1)}, "occurs twice"),
])
def test_split_refuses_ambiguous_keys(params, match):
    with pytest.raises(ParamsError, match=match):
        split_arg_aux(params)


# ---- NumPy-mode files: NDArray V3 records, written by MXNet 1.9.1 (tests/data/numpy_mode/gen.py) -----------

NP_DATA = Path(__file__).resolve().parents[1] / "data" / "numpy_mode"
V3_FILES = ["npx_save_list.params", "npx_save_dict.params", "gluon_save_parameters.params"]


def _v3_expected(name: str) -> dict[str, np.ndarray]:
    with np.load(NP_DATA / "params" / "expected.npz") as e:
        return {k.split("/", 1)[1]: e[k] for k in e.files if k.startswith(name + "/")}


@pytest.mark.parametrize("name", V3_FILES)
def test_v3_files_written_by_mxnet(name):
    """npx.save (a list, a dict of every dtype with a 0-d and an empty array) and Gluon save_parameters in
    NumPy mode: V3 records (magic 0xF993FACA) in the usual list file; names, dtypes, shapes and values as MXNet
    held them (expected.npz, saved by the same MXNet through numpy)."""
    blob = (NP_DATA / "params" / name).read_bytes()
    assert struct.unpack_from("<QQ", blob) == (0x112, 0) and struct.unpack_from("<I", blob, 24)[0] == V3
    got, want = load_params(NP_DATA / "params" / name), _v3_expected(name)
    assert list(got) == list(want)
    for k, w in want.items():
        assert got[k].dtype == w.dtype and got[k].shape == w.shape, k
        np.testing.assert_array_equal(got[k], w)
        assert got[k].flags.c_contiguous and got[k].flags.writeable


def test_v3_record_is_v2_layout_with_the_v3_magic():
    """Byte for byte: the independent writer's V2 record with the V3 magic reproduces MXNet's file (0-d: ndim 0
    and one element, unlike V2 where ndim 0 means "none")."""
    arrays = _v3_expected("npx_save_list.params")
    blob = ndarray_list([rec_v2(a, 0, magic=V3) for a in arrays.values()])
    assert blob == (NP_DATA / "params" / "npx_save_list.params").read_bytes()


@pytest.mark.parametrize("net", ["cnn_np", "mlp_np"])
def test_v3_exported_checkpoints(net):
    """HybridBlock.export in NumPy mode: V3 records, `arg:`/`aux:` names matching the JSON's variables."""
    import json
    path = NP_DATA / "models" / f"{net}-0000.params"
    assert struct.unpack_from("<I", path.read_bytes(), 24)[0] == V3
    params = load_params(path)
    arg, aux = split_arg_aux(params)
    variables = {n["name"] for n in json.loads((NP_DATA / "models" / f"{net}-symbol.json").read_text())["nodes"]
                 if n["op"] == "null"}
    assert set(arg) | set(aux) == variables - {"data"}
    assert all(v.dtype == np.float32 and v.ndim >= 1 for v in params.values())
    assert (net == "cnn_np") == any(k.endswith("running_var") for k in aux)


@pytest.mark.parametrize("name", V3_FILES)
def test_v3_truncation_anywhere_raises(tmp_path, name):
    blob = (NP_DATA / "params" / name).read_bytes()
    p = tmp_path / "cut.params"
    for cut in range(len(blob)):
        p.write_bytes(blob[:cut])
        with pytest.raises(ParamsError, match=r"cut\.params.*(truncated|count)"):
            load_params(p)


# offsets in npx_save_list.params: record 0 (float32 (2, 3)) at 24: magic, stype 28, ndim 32, dims 36/44,
# dev_type 52, dev_id 56, type flag 60, data 64..88; record 1 (0-d float32) at 88: ndim 96
@pytest.mark.parametrize("offset, fmt, value, match", [
    (24, "<I", 0xF993FACB, "bad record magic 0xf993facb"),
    (28, "<i", 3, "storage type 3"),
    (32, "<i", -2, "negative ndim -2"),
    (32, "<i", 2**30, "truncated"),
    (36, "<q", -3, "negative dimension"),
    (44, "<q", 2**40, "truncated"),
    (52, "<i", 4, "dev_type=4"),
    (60, "<i", 13, "type flag 13"),
    (96, "<i", 5, "truncated"),
])
def test_v3_corrupted_fields_raise(tmp_path, offset, fmt, value, match):
    blob = bytearray((NP_DATA / "params" / "npx_save_list.params").read_bytes())
    struct.pack_into(fmt, blob, offset, value)
    with pytest.raises(ParamsError, match=match):
        load_params(write(tmp_path, bytes(blob)))


def test_v3_unknown_shape_is_a_none_array(tmp_path):
    """ndim -1 or a dim -1 (shape unknown under numpy semantics): MXNet reads an empty NDArray, the record ends
    after the shape; mxcc skips it and keeps the other arrays' positions."""
    x = rec_v2(np.ones(2, np.float32), 0, magic=V3)
    unknown_ndim = struct.pack("<Iii", V3, 0, -1)
    unknown_dim = struct.pack("<Iiiqq", V3, 0, 2, 3, -1)
    got = load_params(write(tmp_path, ndarray_list([unknown_ndim, x, unknown_dim, x], ["a", "b", "c", "d"])))
    assert list(got) == ["b", "d"]


def test_v3_random_byte_corruption_never_escapes_as_other_errors(tmp_path):
    blob = (NP_DATA / "params" / "npx_save_dict.params").read_bytes()
    rng = np.random.default_rng(1)
    p = tmp_path / "fuzz.params"
    for pos in range(len(blob)):
        bad = bytearray(blob)
        bad[pos] = (bad[pos] + int(rng.integers(1, 256))) % 256
        p.write_bytes(bytes(bad))
        try:
            load_params(p)
        except ParamsError:
            pass
