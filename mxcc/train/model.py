"""Checkpoints in MXNet's layout (`mx.model.save_checkpoint` / `load_checkpoint`).

`save_checkpoint(prefix, epoch, symbol, arg_params, aux_params)` writes `prefix-symbol.json` and
`prefix-%04d.params` (keys `arg:<name>` then `aux:<name>`, MXNet's V2 records byte for byte), each file
atomically; `load_checkpoint(prefix, epoch)` returns (Symbol, arg_params, aux_params). The byte format
and its checks live in mxcc.params, the JSON in mxcc.graph; this module only names the files.
"""
from __future__ import annotations

import os

import numpy as np

import mxcc.symbol as sym
from mxcc.params import join_arg_aux, load_params as _load_file, save_params, split_arg_aux
from mxcc.train import metric as metric_mod
from mxcc.train.callback import cpp_epoch_line


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
    symbol = sym.load(symbol_path(prefix))
    arg_params, aux_params = load_params(prefix, epoch)
    return symbol, arg_params, aux_params


def fit(exe, train_iter, eval_iter=None, num_epoch: int = 1, eval_metric="acc", *, data_name: str | None = None,
        label_name: str | None = None, epoch_end_callback=None, progress: bool | None = None, log=print):
    """Train a compiled Executor (`mxcc.compile(..., train=True)`) for `num_epoch` epochs, like MXNet's
    Module.fit: one `exe.step()` (forward + backward + update in one C call) per batch, then the metric
    over `eval_iter`. Prints the C++ example's line per epoch ("Epoch: N X samples/sec Accuracy: Y") and,
    on a terminal, a progress bar. Returns [(epoch, samples/sec, validation metric value)].
    """
    import sys
    import time
    data_name = data_name or train_iter.provide_data[0][0]
    label_name = label_name or train_iter.provide_label[0][0]
    metric = metric_mod.create(eval_metric)
    show = sys.stderr.isatty() if progress is None else progress
    history = []
    for epoch in range(num_epoch):
        train_iter.reset()
        seen, t0 = 0, time.perf_counter()
        total = getattr(train_iter, "num_data", 0) // train_iter.batch_size
        for i, batch in enumerate(train_iter):
            exe.step(**{data_name: batch.data[0], label_name: batch.label[0]})
            seen += train_iter.batch_size - batch.pad
            if show and total:
                done = (i + 1) * 30 // total
                sys.stderr.write(f"\r  epoch {epoch} [{'#' * done}{'.' * (30 - done)}] {i + 1}/{total}")
        dt = time.perf_counter() - t0
        if show:
            sys.stderr.write("\r" + " " * 60 + "\r")
        value = float("nan")
        if eval_iter is not None:
            metric.reset()
            eval_iter.reset()
            for batch in eval_iter:
                outs = exe.forward(is_train=False, **{data_name: batch.data[0], label_name: batch.label[0]})
                n = eval_iter.batch_size - batch.pad
                metric.update([batch.label[0][:n]], [outs[0][:n]])
            value = metric.get()[1]
        log(cpp_epoch_line(epoch, seen, dt, value))
        history.append((epoch, seen / dt, value))
        if epoch_end_callback is not None:
            epoch_end_callback(epoch, exe)
    return history
