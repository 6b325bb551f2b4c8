"""Training-progress lines in MXNet's formats.

`Speedometer(batch_size, frequent)` is MXNet's batch-end callback: every `frequent` batches it logs
"Epoch[%d] Batch [%d-%d]\tSpeed: %.2f samples/sec\t%s=%f..." from a BatchEndParam(epoch, nbatch,
eval_metric, locals) and resets the metric's local part. `cpp_epoch_line` formats the per-epoch line of
MXNet's C++ example (cpp-package/example/mlp_cpu.cpp). The training loop that calls them (`fit`) belongs
to the executor side.
"""
from __future__ import annotations

import logging
import time
from collections import namedtuple

import numpy as np

BatchEndParam = namedtuple("BatchEndParam", ["epoch", "nbatch", "eval_metric", "locals"])


class Speedometer:
    """MXNet's mx.callback.Speedometer. `log` receives each finished line (default: logging.info, as
    MXNet); `clock` is time.time unless a test supplies its own."""

    def __init__(self, batch_size: int, frequent: int = 50, auto_reset: bool = True, log=None, clock=None):
        self.batch_size, self.frequent, self.auto_reset = batch_size, frequent, auto_reset
        self.log = log if log is not None else logging.info
        self.clock = clock if clock is not None else time.time
        self.init, self.tic, self.last_count = False, 0.0, 0

    def __call__(self, param: BatchEndParam) -> None:
        count = param.nbatch
        if self.last_count > count:              # a new epoch started: restart timing
            self.init = False
        self.last_count = count
        if not self.init:
            self.init, self.tic = True, self.clock()
            return
        if count % self.frequent != 0:
            return
        elapsed = self.clock() - self.tic
        speed = self.frequent * self.batch_size / elapsed if elapsed else float("inf")
        if param.eval_metric is not None:
            name_value = param.eval_metric.get_name_value()
            pairs = "".join("\t%s=%f" % nv for nv in name_value)
            if self.auto_reset:
                param.eval_metric.reset_local()
                line = "Epoch[%d] Batch [%d-%d]\tSpeed: %.2f samples/sec" % (
                    param.epoch, count - self.frequent, count, speed)
            else:
                line = "Epoch[%d] Batch [0-%d]\tSpeed: %.2f samples/sec" % (param.epoch, count, speed)
            self.log(line + pairs)
        else:
            self.log("Iter[%d] Batch [%d]\tSpeed: %.2f samples/sec" % (param.epoch, count, speed))
        self.tic = self.clock()


def cpp_epoch_line(epoch: int, samples: int, seconds: float, accuracy: float) -> str:
    """The line mlp_cpu.cpp logs after each epoch, without the LOG(INFO) "[hh:mm:ss] file:line: " prefix:

        LG << "Epoch: " << iter << " " << samples/duration << " samples/sec Accuracy: " << acc.Get();

    reproduced exactly: duration is whole milliseconds / 1000.0 stored in a float, samples/duration and
    the accuracy are floats, and C++ streams print floats like printf("%g") (6 significant digits).
    """
    ms = int(seconds * 1000.0)                   # duration_cast<milliseconds> truncates
    duration = np.float32(ms / 1000.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        speed = np.float32(samples) / duration
    return "Epoch: %d %s samples/sec Accuracy: %s" % (epoch, _cpp_float(speed), _cpp_float(np.float32(accuracy)))


def _cpp_float(x) -> str:
    x = float(x)
    if x != x:
        return "nan"
    return "%g" % x
