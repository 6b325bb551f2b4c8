"""mxcc.model checkpoints against MXNet 1.9.1: the .params bytes equal what mx.model.save_checkpoint wrote
for the same arrays, MXNet loaded a checkpoint written by mxcc (recorded by gen_train_libs.py, which runs
mxcc in a subprocess), and mxcc loads MXNet's checkpoint back."""
import json
import os

import numpy as np

from mxcc import model, sym
from mxcc_testing import DATA

REF = DATA / "train_libs"


def _arrays():
    with np.load(REF / "checkpoint_arrays.npz") as f:
        d = dict(f)
    return ({k[4:]: v for k, v in d.items() if k.startswith("arg:")},
            {k[4:]: v for k, v in d.items() if k.startswith("aux:")})


def test_params_bytes_equal_mxnet(tmp_path):
    arg, aux = _arrays()
    net = sym.load(REF / "checkpoint" / "ref-symbol.json")
    model.save_checkpoint(tmp_path / "ck", 3, net, arg, aux)
    assert (tmp_path / "ck-0003.params").read_bytes() == (REF / "checkpoint" / "ref-0003.params").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["ck-0003.params", "ck-symbol.json"]      # no temp files left
    again, arg2, aux2 = model.load_checkpoint(tmp_path / "ck", 3)
    assert again.list_arguments() == net.list_arguments()
    assert again.list_auxiliary_states() == ["bn_moving_mean", "bn_moving_var"]
    assert list(arg2) == list(arg) and all((arg2[k] == arg[k]).all() for k in arg)
    assert list(aux2) == list(aux) and all((aux2[k] == aux[k]).all() for k in aux)


def test_mxnet_reads_mxcc_checkpoint():
    rec = json.loads((REF / "checkpoint_mxnet_reads_mxcc.json").read_text())
    arg, aux = _arrays()
    assert rec["params_bytes_equal_to_mxnet"]
    assert rec["loaded_arg_names"] == sorted(arg) and rec["loaded_aux_names"] == sorted(aux)
    assert set(rec["max_abs_diff"].values()) == {0.0}
    net = sym.load(REF / "checkpoint" / "ref-symbol.json")
    assert rec["list_arguments"] == net.list_arguments() and rec["list_outputs"] == net.list_outputs()


def test_load_mxnet_checkpoint_and_no_symbol(tmp_path):
    net, arg, aux = model.load_checkpoint(REF / "checkpoint" / "ref", 3)
    ref_arg, ref_aux = _arrays()
    assert set(arg) == set(ref_arg) and set(aux) == set(ref_aux)
    model.save_checkpoint(str(tmp_path / "p"), 12, None, arg, {})
    assert sorted(os.listdir(tmp_path)) == ["p-0012.params"]
    assert model.load_params(tmp_path / "p", 12)[1] == {}
    assert model.params_path("a/b", 7) == "a/b-0007.params" and model.symbol_path("a/b") == "a/b-symbol.json"
