"""Checkpoints in MXNet's layout (`mx.model.save_checkpoint` / `load_checkpoint`).

`save_checkpoint(prefix, epoch, symbol, arg_params, aux_params)` writes `prefix-symbol.json` and
`prefix-%04d.params` (keys `arg:<name>` then `aux:<name>`, MXNet's V2 records byte for byte), each file
atomically; `load_checkpoint(prefix, epoch)` returns (Symbol, arg_params, aux_params). The byte format
and its checks live in mxcc.params, the JSON in mxcc.graph; this module only names the files.
"""
from __future__ import annotations

import os

import numpy as np

from mxcc.params import join_arg_aux, load_params as _load_file, save_params, split_arg_aux


def symbol_path(prefix: str | os.PathLike) -> str:
    return f"{os.fspath(prefix)}-symbol.json"


def params_path(prefix: str | os.PathLike, epoch: int) -> str:
    return "%s-%04d.params" % (os.fspath(prefix), epoch)


def save_checkpoint(prefix: str | os.PathLike, epoch: int, symbol, arg_params: dict, aux_params: dict,
                    remove_amp_cast: bool = True) -> None:
    """Write the symbol (skipped when None) and the parameters. Arrays may be numpy arrays or anything
    np.asarray accepts; `remove_amp_cast` is accepted for MXNet compatibility (mxcc graphs have none)."""
    if symbol is not None:
        symbol.save(symbol_path(prefix))
    save_params(params_path(prefix, epoch),
                join_arg_aux({k: np.asarray(v) for k, v in arg_params.items()},
                             {k: np.asarray(v) for k, v in aux_params.items()}))


def load_params(prefix: str | os.PathLike, epoch: int) -> tuple[dict, dict]:
    """(arg_params, aux_params) of `prefix-%04d.params`."""
    return split_arg_aux(_load_file(params_path(prefix, epoch)))


def load_checkpoint(prefix: str | os.PathLike, epoch: int):
    """(symbol, arg_params, aux_params) from `prefix-symbol.json` and `prefix-%04d.params`."""
    from mxcc import symbol as sym
    symbol = sym.load(symbol_path(prefix))
    arg_params, aux_params = load_params(prefix, epoch)
    return symbol, arg_params, aux_params
