"""mxcc.callback: Speedometer's lines (MXNet 1.9.1 callback.py formats, with a scripted clock) and the C++
example's per-epoch line, checked against a C++ program printing the same values when g++ is present."""
import shutil
import subprocess

import numpy as np
import pytest

from mxcc.callback import BatchEndParam, Speedometer, cpp_epoch_line
from mxcc.metric import Accuracy, create


class _Clock:
    def __init__(self, times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def test_speedometer_lines():
    lines, acc = [], Accuracy()
    speed = Speedometer(batch_size=10, frequent=2, log=lines.append, clock=_Clock([0.0, 0.5, 0.5, 1.5, 9.0, 9.0]))
    for nbatch in range(5):
        acc.update([np.array([0, 1.0])], [np.array([[1, 0], [1, 0.0]])])
        speed(BatchEndParam(epoch=3, nbatch=nbatch, eval_metric=acc, locals=None))
    assert lines == ["Epoch[3] Batch [0-2]\tSpeed: 40.00 samples/sec\taccuracy=0.500000",
                     "Epoch[3] Batch [2-4]\tSpeed: 20.00 samples/sec\taccuracy=0.500000"]
    assert acc.num_inst == 0 and acc.global_num_inst == 10          # reset_local after each line
    speed(BatchEndParam(epoch=4, nbatch=0, eval_metric=acc, locals=None))   # new epoch: timing restarts
    assert len(lines) == 2


def test_speedometer_other_formats():
    lines = []
    s = Speedometer(5, 1, auto_reset=False, log=lines.append, clock=_Clock([0.0, 2.0, 2.0, 2.0, 2.0]))
    comp = create(["acc", "ce"])
    comp.update([np.array([1.0])], [np.array([[0.25, 0.75]])])
    s(BatchEndParam(0, 0, comp, None))
    s(BatchEndParam(0, 1, comp, None))
    s(BatchEndParam(0, 2, None, None))
    assert lines == ["Epoch[0] Batch [0-1]\tSpeed: 2.50 samples/sec\taccuracy=1.000000\tcross-entropy=0.287682",
                     "Iter[0] Batch [2]\tSpeed: inf samples/sec"]


CASES = [(0, 8000, 0.3456, 0.9512), (9, 8000, 1.2, 0.95), (1, 100, 0.001, 0.123456789), (12, 60000, 2.5, 1.0),
         (2, 8000, 123.4567, 0.0999)]


def test_cpp_epoch_line_known():
    assert cpp_epoch_line(0, 8000, 0.3456, 0.9512) == "Epoch: 0 23188.4 samples/sec Accuracy: 0.9512"
    assert cpp_epoch_line(12, 60000, 2.5, 1.0) == "Epoch: 12 24000 samples/sec Accuracy: 1"
    assert cpp_epoch_line(3, 100, 0.0004, 0.5) == "Epoch: 3 inf samples/sec Accuracy: 0.5"


@pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler")
def test_cpp_epoch_line_matches_iostream(tmp_path):
    """The same expression mlp_cpu.cpp logs, through std::ostream, for the same (ms, samples, accuracy)."""
    body = "".join(
        f'{{ int samples = {s}; float duration = {int(sec * 1000)} / 1000.0; float acc = {acc!r}f;\n'
        f'  std::cout << "Epoch: " << {e} << " " << samples/duration << " samples/sec Accuracy: " << acc'
        f' << "\\n"; }}\n' for e, s, sec, acc in CASES)
    src = tmp_path / "line.cpp"
    src.write_text("#include <iostream>\nint main() {\n" + body + "return 0; }\n")
    subprocess.run(["g++", "-O0", "-o", str(tmp_path / "line"), str(src)], check=True)
    out = subprocess.run([str(tmp_path / "line")], check=True, capture_output=True, text=True).stdout
    assert out.splitlines() == [cpp_epoch_line(*c) for c in CASES]
