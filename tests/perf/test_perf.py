"""`mxcc perf`: stack folding and layer attribution on canned samples (no perf needed), then real runs of
perf record / perf stat / py-spy on the MLP and LeNet (skipped with the reason where the tool is missing).

Independent truths: the canned samples' expected placement is worked out by hand from their stacks and
timestamps; the real runs are checked against module.json (every kernel named, shares adding up) and the
ELF files themselves (readelf build-ids, perf buildid-list)."""
from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest

from mxcc import cli
from mxcc.perf import record as mperf
from mxcc.perf.flamegraph import render_svg
from mxcc.perf.stacks import (GLUE, PHASES, UNKNOWN, Frame, Kernel, Timeline, attribute, attribute_train, base_name,
                         folded_text, omp_parent, parse_folded, parse_perf_script)
from mxcc_testing import DATA, needs_gcc

KERNELS = [Kernel(0, "fullyconnected0", "mlp_fullyconnected0", ("fullyconnected0", "activation0"),
                  ("FullyConnected", "Activation"), 12_861_440),
           Kernel(1, "fullyconnected1", "mlp_fullyconnected1", ("fullyconnected1", "activation1"),
                  ("FullyConnected", "Activation"), 1_056_768),
           Kernel(2, "fullyconnected2", "mlp_fullyconnected2", ("fullyconnected2",), ("FullyConnected",), 82_560),
           Kernel(3, "softmaxoutput0", "mlp_softmaxoutput0", ("softmaxoutput0",), ("SoftmaxOutput",), 3_200)]

BENCH = "/tmp/b/mlp/mlp_bench"
GOMP = "/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0"
# `perf script --ns -F comm,pid,tid,time,period,event,ip,sym,dso` of a 2-thread bench recorded with frame
# pointers (plus one --call-graph dwarf style master stack, #11). tid 100 is the master, 101 the worker.
SCRIPT = f"""\
mlp_bench   100/100   999.999000000:    1001001 cpu-clock:
\t           14ab0 get_common_cache_info.constprop.0+0x110 (/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)

mlp_bench   100/100  1000.000200000:    1001001 cpu-clock:
\t            c7a0 mxcc_ukernel_f32_6x16_avx2fma+0x40 ({BENCH})
\t            9c80 mxcc_gemm_f32._omp_fn.0+0x40 ({BENCH})
\t           140b1 GOMP_parallel+0x41 ({GOMP})
\t    7ffeb21180f0 [unknown] ([unknown])
\t    559ec1213420 [unknown] ([unknown])

mlp_bench   100/101  1000.000300000:    1001001 cpu-clock:
\t            c7a0 mxcc_ukernel_f32_6x16_avx2fma+0x44 ({BENCH})
\t            9c80 mxcc_gemm_f32._omp_fn.0+0x40 ({BENCH})
\t           1f7da [unknown] ({GOMP})
\t               0 [unknown] ([unknown])

mlp_bench   100/101  1000.000400000:    1001001 cpu-clock:
\t           1f7da [unknown] ({GOMP})
\t               0 [unknown] ([unknown])

perf: some warning line that is not a sample
mlp_bench   100/100  1000.000550000:    1001001 cpu-clock:
\t            ce8c tile_6x16 (inlined)
\t            c7a0 mxcc_ukernel_f32_6x16_avx2fma+0x80 ({BENCH})
\t            9a40 gemm_loops.constprop.0+0x20 ({BENCH})
\t            a5f0 mxcc_gemm_f32+0x100 ({BENCH})
\t            27a0 mlp_fullyconnected1+0x50 ({BENCH})
\t            2a00 mlp_forward+0x30 ({BENCH})
\t            23f8 main+0x1d8 ({BENCH})
\t           2724a __libc_start_call_main+0x7a (/usr/lib/x86_64-linux-gnu/libc.so.6)

mlp_bench   100/100  1000.000655000:    1001001 cpu-clock:
\t           3f5a0 __expf_fma+0x10 (/usr/lib/x86_64-linux-gnu/libm.so.6)
\t            28b0 mlp_softmaxoutput0.isra.0+0x30 ({BENCH})
\t            2a00 mlp_forward+0x60 ({BENCH})
\t            23f8 main+0x1d8 ({BENCH})

mlp_bench   100/101  1000.000655500:    1001001 cpu-clock:
\t           1f7da [unknown] ({GOMP})
\t               0 [unknown] ([unknown])

mlp_bench   100/101  1000.000900000:    1001001 cpu-clock:
\t           1f7de [unknown] ({GOMP})
\t               0 [unknown] ([unknown])

mlp_bench   100/100  1000.000650050:    1001001 cpu-clock:
\t            2a10 mlp_forward+0x70 ({BENCH})
\t            23f8 main+0x1d8 ({BENCH})

mlp_bench   100/100  1000.001100000:    1001001 cpu-clock:
\tffffffff81000c82 asm_exc_page_fault+0x22 ([kernel.kallsyms])
\t            c210 mxcc_pack_b_f32_avx2+0x12 ({BENCH})
\t            9c80 mxcc_gemm_f32._omp_fn.0+0x90 ({BENCH})
\t           140b1 GOMP_parallel+0x41 ({GOMP})
\t    7ffeb21180f0 [unknown] ([unknown])

mlp_bench   100/100  1000.001200000:    1001001 cpu-clock:
\t            c7a0 mxcc_ukernel_f32_6x16_avx2fma+0x40 ({BENCH})
\t            9c80 mxcc_gemm_f32._omp_fn.0+0x40 ({BENCH})
\t           1f622 [unknown] ({GOMP})
\t           140b1 GOMP_parallel+0x41 ({GOMP})
\t            a5f0 mxcc_gemm_f32+0x200 ({BENCH})
\t            2710 mlp_fullyconnected0+0x60 ({BENCH})
\t            2a00 mlp_forward+0x20 ({BENCH})
\t            23f8 main+0x1d8 ({BENCH})
\t           2724a __libc_start_call_main+0x7a (/usr/lib/x86_64-linux-gnu/libc.so.6)
\t            28f0 _start+0x20 ({BENCH})
"""
T = 1000 * 10**9   # 1000 s in ns
# Two forwards: (kernel, phase, t0, t1) in ns, as the bench's --timeline writes them.
EVENTS = [(0, 0, T + 100_000, T + 500_000), (1, 0, T + 500_100, T + 600_000), (2, 0, T + 600_100, T + 650_000),
          (3, 0, T + 650_100, T + 660_000), (0, 0, T + 1_000_000, T + 1_400_000),
          (1, 0, T + 1_400_100, T + 1_500_000), (2, 0, T + 1_500_100, T + 1_550_000),
          (3, 0, T + 1_550_100, T + 1_560_000)]
OMP_STACK = "mlp_bench;mlp_forward;mlp_fullyconnected0;mxcc_gemm_f32;mxcc_gemm_f32._omp_fn.0;" \
            "mxcc_ukernel_f32_6x16_avx2fma"


# -- parsing and naming (no perf) ------------------------------------------------------------------------
def test_parse_perf_script_fields():
    s = parse_perf_script(SCRIPT)
    assert len(s) == 11                                           # the warning line is not a sample
    assert [x.tid for x in s[:4]] == [100, 100, 101, 101] and all(x.pid == 100 for x in s)
    assert s[1].time_ns == T + 200_000 and s[1].period == 1001001
    assert s[1].frames[-1] == Frame("mxcc_ukernel_f32_6x16_avx2fma", BENCH)     # leaf last, +0x.. stripped
    assert [f.sym for f in s[4].frames][-3:] == ["mxcc_gemm_f32", "gemm_loops.constprop.0",
                                                  "mxcc_ukernel_f32_6x16_avx2fma"]   # inline frame dropped


def test_parse_default_header_and_no_callchain():
    s = parse_perf_script("mlp_bench 24728  2533.541143:    1001001 cpu-clock: \n"
                          "\t    23f8 main+0x1d8 (/b/mlp_bench)\n\n"
                          "mlp_bench 24729 2533.542000:     1001001 cpu-clock:   27a0 mlp_fc1+0x5 (/b/mlp_bench)\n")
    assert (s[0].pid, s[0].tid, s[0].time_ns) == (24728, 24728, 2533_541_143_000)
    assert s[0].frames == (Frame("main", "/b/mlp_bench"),)
    assert s[1].frames == (Frame("mlp_fc1", "/b/mlp_bench"),)


def test_names():
    assert base_name("mlp_softmaxoutput0.isra.0") == "mlp_softmaxoutput0"
    assert base_name("gemm_loops.constprop.0") == "gemm_loops"
    assert base_name("memcpy@@GLIBC_2.14") == "memcpy" and base_name("memset@plt") == "memset@plt"
    assert omp_parent("mxcc_gemm_f32._omp_fn.0") == "mxcc_gemm_f32"
    assert omp_parent("lenet_pool1._omp_fn.3") == "lenet_pool1" and omp_parent("mlp_forward") is None


# -- attribution -----------------------------------------------------------------------------------------
def test_attribution_with_timeline():
    p = attribute(parse_perf_script(SCRIPT), KERNELS, "mlp", Timeline.from_events(EVENTS), root="mlp_bench")
    by = {r.kernel.function: r.samples for r in p.layers}
    # fc0: master & worker in the GEMM region (placed by time), worker spinning in libgomp (time),
    # a page fault in packing (time), the dwarf-style master stack (stack)
    assert by == {"mlp_fullyconnected0": 5, "mlp_fullyconnected1": 1, "mlp_fullyconnected2": 0,
                  "mlp_softmaxoutput0": 2}
    assert (p.total, p.forward, p.glue, p.unknown) == (11, 9, 1, 0)
    assert p.worker_wait == 1                     # the worker spinning between the two forwards
    assert p.placed_by == {"stack": 3, "time": 5}
    assert p.threads == 2
    f = p.folded
    # worker and master stacks of one OpenMP region merge under the layer, libgomp frames between removed
    assert f[OMP_STACK] == 3
    assert f["mlp_bench;mlp_forward;mlp_fullyconnected0;[libgomp]"] == 1
    assert f["mlp_bench;mlp_forward;mlp_fullyconnected0;mxcc_gemm_f32;mxcc_gemm_f32._omp_fn.0;"
             "mxcc_pack_b_f32_avx2;asm_exc_page_fault_[k]"] == 1
    assert f["mlp_bench;mlp_forward;mlp_fullyconnected1;mxcc_gemm_f32;gemm_loops;mxcc_ukernel_f32_6x16_avx2fma"] == 1
    assert f["mlp_bench;mlp_forward;mlp_softmaxoutput0;__expf_fma"] == 1          # .isra clone -> its layer
    assert f["mlp_bench;mlp_forward;mlp_softmaxoutput0;[libgomp]"] == 1           # worker idle during softmax
    assert f["mlp_bench;mlp_forward"] == 1                                        # between kernels
    assert f["mlp_bench;[libgomp]"] == 1 and f["mlp_bench;get_common_cache_info"] == 1   # outside forwards
    assert sum(f.values()) == p.total
    rows = {r.kernel.index: r for r in p.layers}
    assert rows[0].calls == 2 and rows[0].wall_ns == 800_000 and rows[0].master_ns == 3 * 1001001
    selfs = {name: (cat, n) for name, cat, n, _ in p.self_rows}
    assert selfs["mxcc_ukernel_f32_6x16_avx2fma"] == ("runtime", 4)
    assert selfs["libgomp (OpenMP runtime)"] == ("openmp", 3)
    assert selfs["[kernel]"] == ("kernel", 1) and selfs["mlp_forward"] == ("generated", 1)


def test_layer_with_its_own_parallel_region():
    """Generated loops carry their own `#pragma omp parallel`: `<layer>._omp_fn.N` names the layer itself."""
    text = f"""\
mlp_bench 7/8 5.000000001: 1001001 cpu-clock:
\t  3f5a0 __expf_fma+0x10 (/usr/lib/x86_64-linux-gnu/libm.so.6)
\t   2900 mlp_softmaxoutput0._omp_fn.0+0x30 ({BENCH})
\t  1f7da [unknown] ({GOMP})
\t      0 [unknown] ([unknown])

mlp_bench 7/7 5.000000002: 1001001 cpu-clock:
\t  3f5a0 __expf_fma+0x10 (/usr/lib/x86_64-linux-gnu/libm.so.6)
\t   2900 mlp_softmaxoutput0._omp_fn.0+0x30 ({BENCH})
\t  1f622 [unknown] ({GOMP})
\t  140b1 GOMP_parallel+0x41 ({GOMP})
\t   28b0 mlp_softmaxoutput0+0x30 ({BENCH})
\t   2a00 mlp_forward+0x60 ({BENCH})
\t   23f8 main+0x1d8 ({BENCH})
"""
    p = attribute(parse_perf_script(text), KERNELS, "mlp", None, root="mlp_bench")
    assert {r.kernel.function: r.samples for r in p.layers}["mlp_softmaxoutput0"] == 2
    assert p.placed_by == {"stack": 2}
    assert dict(p.folded) == {"mlp_bench;mlp_forward;mlp_softmaxoutput0;mlp_softmaxoutput0._omp_fn.0;"
                              "__expf_fma": 2}


def test_attribution_without_timeline_splits_runtime_regions():
    p = attribute(parse_perf_script(SCRIPT), KERNELS, "mlp", None)
    by = {r.kernel.function: r for r in p.layers}
    # three OpenMP samples of mxcc_gemm_f32 with no layer in their stack; fc0 and fc1 each have one stack
    # through mxcc_gemm_f32, so each gets half
    assert by["mlp_fullyconnected0"].samples == pytest.approx(2.5)
    assert by["mlp_fullyconnected1"].samples == pytest.approx(2.5)
    assert by["mlp_fullyconnected0"].estimated == pytest.approx(1.5)
    assert by["mlp_softmaxoutput0"].samples == 1
    assert p.placed_by == {"stack": 3, "split": 3}
    assert p.forward == 7 and p.glue == 1
    assert p.worker_wait == 3                     # worker samples only in libgomp: no stack or time places them
    assert p.folded[f"mlp_bench;mlp_forward;{UNKNOWN};mxcc_gemm_f32;mxcc_gemm_f32._omp_fn.0;"
                    "mxcc_ukernel_f32_6x16_avx2fma"] == 2         # the flame graph shows what is not known
    assert by["mlp_fullyconnected0"].wall_ns is None


def test_timeline_roundtrip_and_locate():
    import numpy as np
    arr = np.array([e + (0, 0) for e in EVENTS], dtype=[("kernel", "<i4"), ("phase", "<i4"), ("t0_ns", "<u8"),
                                                      ("t1_ns", "<u8"), ("batch", "<i4"), ("reserved", "<i4")])
    tl = Timeline.from_bytes(arr.tobytes())
    assert len(tl) == 8 and tl.forwards() == 2
    assert tl.locate(T + 550_000) == (1, True)
    assert tl.locate(T + 650_050) == (None, True)        # between kernels of one forward
    assert tl.locate(T + 900_000) == (None, False)       # between forwards
    assert tl.locate(T) == (None, False)
    assert tl.forward_wall_ns() == 2 * 560_000


def test_parse_pyspy_raw():
    raw = ("0x7f6e95e4524a (libc.so.6);<module> (drv.py:5);Module.forward (mxcc/runtime/module.py:163);"
           "_cffi_f_mlp_forward (_mxcc_mlp_98f2.c:729);mlp_forward (mlp.c:131);mxcc_prof_end (mxcc_runtime.h:60);"
           "mlp_fullyconnected0 (mlp.c:51);mxcc_gemm_f32 (gemm_f32.c:349);GOMP_parallel (libgomp.so.1.0.0);"
           "mxcc_gemm_f32._omp_fn.0 (gemm_f32.c:347);gemm_loops (gemm_f32.c:224);"
           "mxcc_ukernel_f32_6x16_avx2fma (ukernel_f32_6x16_avx2fma.c:101);_mm256_fmadd_ps (fmaintrin.h:65) 30\n"
           "0x7f6e95e4524a (libc.so.6);<module> (drv.py:5);Module.forward (mxcc/runtime/module.py:163);"
           "_cffi_f_mlp_forward (_mxcc_mlp_98f2.c:729);mlp_forward (mlp.c:131);mlp_softmaxoutput0 (mlp.c:90) 5\n"
           "0x7f6e95e4524a (libc.so.6);gc_collect_main (libpython3.11.so.1.0) 12\n")
    s = parse_folded(raw, period=1e6)
    assert [x.count for x in s] == [30, 5, 12]
    assert s[0].frames[-1].sym == "mxcc_ukernel_f32_6x16_avx2fma"            # header (.h) frames dropped
    assert "mxcc_prof_end" not in [f.sym for f in s[0].frames]
    p = attribute(s, KERNELS, "mlp", None, root="python")
    by = {r.kernel.function: r.samples for r in p.layers}
    assert by["mlp_fullyconnected0"] == 30 and by["mlp_softmaxoutput0"] == 5
    assert p.forward == 35 and p.total == 47
    assert p.folded["python;mlp_forward;mlp_fullyconnected0;mxcc_gemm_f32;mxcc_gemm_f32._omp_fn.0;gemm_loops;"
                    "mxcc_ukernel_f32_6x16_avx2fma"] == 30


# -- rendering -------------------------------------------------------------------------------------------
def test_flame_graph_svg():
    folded = {OMP_STACK: 60, "mlp_bench;mlp_forward;mlp_softmaxoutput0": 30, "mlp_bench;main": 10}
    svg = render_svg(folded, title="t <&>", net="mlp")
    root = ET.fromstring(svg.split("?>", 1)[1])                      # well-formed XML
    ns = "{http://www.w3.org/2000/svg}"
    frames = [g for g in root.iter(ns + "g") if g.get("class") == "f"]
    names = [g.get("data-n") for g in frames]
    assert len(frames) == len(set(OMP_STACK.split(";"))) + 2         # the tree: 6 + softmax + main
    w = {g.get("data-n"): float(g.get("data-w")) for g in frames}
    assert w["mlp_bench"] == 1.0 and w["mlp_fullyconnected0"] == pytest.approx(0.6)
    assert w["mlp_softmaxoutput0"] == pytest.approx(0.3)
    assert "mlp_fullyconnected0 (60 samples, 60.00%)" in svg and "mlp_softmaxoutput0" in names


def test_folded_text_and_report():
    p = attribute(parse_perf_script(SCRIPT), KERNELS, "mlp", Timeline.from_events(EVENTS), root="mlp_bench")
    text = folded_text(p.folded)
    assert all(re.fullmatch(r"\S.* \d+", ln) for ln in text.splitlines())
    run = mperf.Run("perf", "perf record ... mlp_bench", 2, 800.0, 2, 0.1, 999, "fp")
    report = mperf.format_report(p, run, {"name": "mlp", "source": "mlp-symbol.json"})
    for k in KERNELS:
        assert k.function in report and "+".join(k.members) in report
    assert GLUE in report and "libgomp (OpenMP runtime)" in report
    shares = _layer_shares(report, KERNELS)
    assert sum(shares.values()) + 100 / 9 == pytest.approx(100, abs=0.2)   # + the between-kernels row
    # a sample in a layer's own code lists its function in the self-time table too: not a layer share
    shares_with_self = _layer_shares(report + "mlp_fullyconnected0  generated  1  9.1%  1.0\n", KERNELS)
    assert shares_with_self == shares and shares["mlp_fullyconnected0"] == pytest.approx(55.6)


def _layer_shares(report: str, kernels) -> dict[str, float]:
    """Shares of the per-layer table only: the self-time table below it names a layer's function too
    when a sample lands in the function's own code (it once overwrote fullyconnected0's 88% with 0.1%)."""
    out = {}
    for line in report.split("self time per symbol")[0].splitlines():
        cols = line.split()
        if cols and cols[0] in {k.function for k in kernels}:
            out[cols[0]] = float(next(c for c in cols if c.endswith("%"))[:-1])
    return out


def test_stat_csv():
    csv = ("# started on Sat Nov 22 03:00:00 2026\n\n"
           "1523.45,msec,task-clock,1523450000,100.00,1.498,CPUs utilized\n"
           "12,,context-switches,1523450000,100.00,7.877,/sec\n"
           "0,,cpu-migrations,1523450000,100.00,0.000,/sec\n"
           "312,,page-faults,1523450000,100.00,204.8,/sec\n"
           "<not supported>,,cycles,0,100.00,,\n"
           "<not supported>,,instructions,0,100.00,,\n")
    c = mperf.parse_stat_csv(csv)
    assert c["task-clock"] == 1523.45 and c["page-faults"] == 312 and c["cycles"] == "<not supported>"
    text = mperf.format_stat(c, 1.0, 1010, 990.0, 2, 14_004_000, ["perf", "stat", "--", "mlp_bench"])
    assert "task-clock" in text and "1.52 CPUs utilized" in text
    assert re.search(r"cycles\s+unavailable\s+<not supported>", text)
    assert "IPC" not in text and "GFLOP/s" in text


# -- errors ----------------------------------------------------------------------------------------------
def test_missing_perf_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(mperf.shutil, "which", lambda name: None)
    assert cli.main(["perf", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "apt-get install linux-perf" in err


def test_paranoid_perf_says_what_to_set(monkeypatch):
    if shutil.which("perf") is None:
        monkeypatch.setattr(mperf.shutil, "which", lambda name: "/bin/true")
    monkeypatch.setattr(mperf.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, "perf version 6.1", ""))
    monkeypatch.setattr(mperf.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(mperf, "_paranoid", lambda: 3)
    assert "sysctl kernel.perf_event_paranoid=2" in mperf.perf_problem()
    monkeypatch.setattr(mperf, "_paranoid", lambda: 2)
    assert mperf.perf_problem() is None


def test_missing_pyspy_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(mperf.shutil, "which", lambda name: None)
    assert cli.main(["perf", str(tmp_path), "--py"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pip install py-spy" in err


# -- real runs -------------------------------------------------------------------------------------------
PERF_PROBLEM = mperf.perf_problem()
needs_perf = pytest.mark.skipif(PERF_PROBLEM is not None, reason=f"perf unavailable: {PERF_PROBLEM}")
needs_pyspy = pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed (pip install py-spy)")
needs_binutils = pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf (binutils) not installed")


@pytest.fixture(scope="module")
def mlp_dir(tmp_path_factory):
    import mxcc
    d = tmp_path_factory.mktemp("perf") / "mlp"
    m = DATA / "models" / "mlp"
    mxcc.compile(str(m / "mlp-symbol.json"), {"X": (64, 784)}, str(m / "mlp-0000.params"), out_dir=d)
    return d


@pytest.fixture(scope="module")
def lenet_dir(tmp_path_factory):
    import mxcc
    d = tmp_path_factory.mktemp("perf") / "lenet"
    mxcc.compile(str(DATA / "models" / "lenet" / "lenet-symbol.json"), {"data": (16, 1, 28, 28)}, out_dir=d)
    return d


def _meta(d):
    import json
    return json.loads((d / "module.json").read_text())


def _build_id(path) -> str:
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True).stdout
    return re.search(r"Build ID: ([0-9a-f]+)", out)[1]


@needs_gcc
def test_bench_seconds_and_timeline(mlp_dir, tmp_path):
    bench = mlp_dir / "mlp_bench"
    out = subprocess.run([str(bench), "--seconds", "0.2", "--threads", "1"], capture_output=True, text=True)
    m = mperf.BENCH_LINE.search(out.stdout)
    assert m and m["net"] == "mlp" and int(m["iters"]) >= 1 and m["threads"] == "1"
    tl = tmp_path / "tl.bin"
    out = subprocess.run([str(bench), "--iters", "7", "--warmup", "2", "--timeline", str(tl)],
                         capture_output=True, text=True)
    assert "(7 iters," in out.stdout
    t = Timeline.from_bytes(tl.read_bytes())
    assert tl.stat().st_size == 9 * 4 * 32 and t.forwards() == 9
    assert t.kernel[:4] == [0, 1, 2, 3] and all(a < b for a, b in zip(t.t0, t.t1))


@needs_gcc
@needs_binutils
def test_binaries_are_profilable(mlp_dir):
    """Symbols per layer, debug info, build-ids, and the cached copies perf can go back to."""
    from pathlib import Path
    from mxcc.compiler.build import flags
    from mxcc.options import CompileOptions, cache_dir
    fl = flags(CompileOptions())
    for f in ("-g", "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-fno-optimize-sibling-calls"):
        assert f in fl
    meta = _meta(mlp_dir)
    assert "MXCC_NOINLINE void mlp_fullyconnected0(" in (mlp_dir / "mlp.c").read_text()
    for binary in (mlp_dir / meta["bench"], mlp_dir / meta["so"]):
        syms = subprocess.run(["nm", str(binary)], capture_output=True, text=True).stdout
        for k in meta["kernels"]:
            assert re.search(rf" t {k['function']}(\.\w+\.\d+)?$", syms, re.M), k["function"]
        assert re.search(r" T mxcc_gemm_f32$", syms, re.M) and " T mxcc_ukernel_f32_" in syms
        sections = subprocess.run(["readelf", "-S", str(binary)], capture_output=True, text=True).stdout
        assert ".debug_info" in sections and ".symtab" in sections
        assert _build_id(binary)
    cached = Path(cache_dir()) / meta["key"][:2] / meta["key"]
    assert _build_id(cached / meta["bench"]) == _build_id(mlp_dir / meta["bench"])
    assert (cached / meta["so"]).exists()


def _between(report: str) -> list[float]:
    """Shares of the forward's samples between kernels (call overhead, timeline hooks), from layers.txt."""
    return [float(next(c for c in line.split() if c.endswith("%"))[:-1]) for line in report.splitlines()
            if line.startswith("(forward, between kernels)")]


@needs_perf
def test_perf_record_mlp(mlp_dir, capsys):
    # one thread: with two, a core shared with another process makes libgomp spin-waits dominate the samples
    kernels = [Kernel(i, k["name"], k["function"], tuple(k["members"]), tuple(k["ops"]), k["flops"])
               for i, k in enumerate(_meta(mlp_dir)["kernels"])]
    assert cli.main(["perf", str(mlp_dir), "--seconds", "1", "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    o = mlp_dir / "perf"
    for f in ("perf.data", "timeline.bin", "stacks.folded", "flame.svg", "layers.txt"):
        assert (o / f).stat().st_size > 0, f
    report = (o / "layers.txt").read_text()
    assert report in printed
    shares = _layer_shares(report, kernels)
    assert set(shares) == {k.function for k in kernels}               # every kernel named
    # the forward's samples are the layers' plus those between kernels (call overhead, timeline hooks)
    between = _between(report)
    # ~100%: rounding, samples at the edges
    assert sum(shares.values()) + sum(between) == pytest.approx(100, abs=5), report
    assert sum(shares.values()) >= 90, report
    folded = (o / "stacks.folded").read_text()
    assert "mlp_bench;mlp_forward;mlp_fullyconnected0;" in folded
    svg = (o / "flame.svg").read_text()
    assert 'data-n="mlp_fullyconnected0"' in svg and 'data-n="mlp_forward"' in svg
    ids = subprocess.run(["perf", "buildid-list", "-i", str(o / "perf.data")], capture_output=True, text=True)
    if shutil.which("readelf"):
        assert _build_id(mlp_dir / "mlp_bench") in ids.stdout      # perf can find the binary again by id


@needs_perf
def test_perf_record_lenet(lenet_dir, tmp_path):
    prof, run, o = mperf.record(lenet_dir, seconds=0.5, warmup=1, out=tmp_path / "p")
    functions = [k["function"] for k in _meta(lenet_dir)["kernels"]]
    assert len(functions) >= 4
    assert [r.kernel.function for r in prof.layers] == functions
    assert sum(r.samples for r in prof.layers) / prof.forward == pytest.approx(1, abs=0.02)
    report = (o / "layers.txt").read_text()
    assert all(f in report for f in functions)
    assert "lenet_conv1" in (o / "stacks.folded").read_text()
    assert 'data-n="lenet_conv2"' in (o / "flame.svg").read_text()


@needs_perf
def test_perf_stat(mlp_dir, tmp_path, capsys):
    assert cli.main(["perf", str(mlp_dir), "--stat", "--iters", "50", "-o", str(tmp_path)]) == 0
    text = (tmp_path / "stat.txt").read_text()
    assert re.search(r"task-clock\s+[\d,.]+ ms", text) and "page-faults" in text
    assert re.search(r"cycles\s+([\d,]+|unavailable)", text)


@needs_pyspy
def test_pyspy_mlp(mlp_dir, tmp_path):
    try:
        prof, run, o = mperf.record_python(mlp_dir, seconds=0.5, warmup=1, out=tmp_path)
    except mperf.PerfError as e:
        if "did not exit" in str(e):
            pytest.skip(f"py-spy hung (a py-spy bug, not mxcc's): {e}")
        raise
    assert run.tool == "py-spy" and prof.forward > 0
    report = (o / "layers.txt").read_text()
    assert all(k["function"] in report for k in _meta(mlp_dir)["kernels"])
    assert "python;mlp_forward;mlp_fullyconnected0" in (o / "stacks.folded").read_text()


# -- training (#8) -----------------------------------------------------------------------------------------
TRAIN_KERNELS = [Kernel(0, "fullyconnected0", "mlp_fullyconnected0", ("fullyconnected0",), ("FullyConnected",), 10),
                 Kernel(1, "fullyconnected0_backward", "mlp_fullyconnected0_backward", (), (), 20, "backward"),
                 Kernel(2, "update:w0", "mxcc_sgd_update_f32", (), (), 3, "update")]
TRAIN = "/tmp/t/mlp_train"
# master 200, worker 201; the timeline has fc0 [1000.000100, 1000.000200), its backward [..300, ..400) and
# the update of w0 [..500, ..600) (seconds)
TRAIN_SCRIPT = f"""\
mlp_train   200/200  1000.000010000:    1001001 cpu-clock:
\t            1000 mxcc_train_load_batch+0x10 ({TRAIN})
\t            2000 main+0x20 ({TRAIN})

mlp_train   200/200  1000.000020000:    1001001 cpu-clock:
\t            9000 inflate_fast+0x10 (/usr/lib/x86_64-linux-gnu/libz.so.1.3)
\t               0 [unknown] ([unknown])

mlp_train   200/200  1000.000150000:    1001001 cpu-clock:
\t            c7a0 mxcc_gemm_f32+0x40 ({TRAIN})
\t            27a0 mlp_fullyconnected0+0x50 ({TRAIN})
\t            2a00 mlp_forward+0x30 ({TRAIN})
\t            2b00 mlp_step+0x10 ({TRAIN})
\t            2000 main+0x20 ({TRAIN})

mlp_train   200/201  1000.000350000:    1001001 cpu-clock:
\t            9c80 mxcc_gemm_f32._omp_fn.0+0x40 ({TRAIN})
\t           1f7da [unknown] ({GOMP})

mlp_train   200/200  1000.000550000:    1001001 cpu-clock:
\t            5000 mxcc_sgd_update_f32+0x40 ({TRAIN})
\t            2c00 mlp_update+0x30 ({TRAIN})
\t            2b00 mlp_step+0x18 ({TRAIN})
\t            2000 main+0x20 ({TRAIN})

mlp_train   200/201  1000.000560000:    1001001 cpu-clock:
\t            5100 mxcc_sgd_update_f32._omp_fn.0+0x40 ({TRAIN})
\t           1f7da [unknown] ({GOMP})

mlp_train   200/200  1000.000700000:    1001001 cpu-clock:
\t            2000 main+0x90 ({TRAIN})
"""


def test_attribute_training_phases():
    tl = Timeline.from_events([(0, 0, 1000_000_100_000, 1000_000_200_000), (1, 1, 1000_000_300_000, 1000_000_400_000),
                               (2, 2, 1000_000_500_000, 1000_000_600_000)])
    prof = attribute_train(parse_perf_script(TRAIN_SCRIPT), TRAIN_KERNELS, "mlp", tl)
    assert dict(prof.phases) == {"data loading": 2, "forward": 1, "backward": 1, "update": 2, "other": 1}
    assert [r.samples for r in prof.layers] == [1, 1, 2]
    assert prof.forward == 4 and prof.total == 7
    assert prof.folded == {"mlp_train;mxcc_train_load_batch": 1, "mlp_train;mxcc_idx_read;inflate_fast": 1,
                           "mlp_train;mlp_forward;mlp_fullyconnected0;mxcc_gemm_f32": 1,
                           "mlp_train;mlp_backward;mlp_fullyconnected0_backward;mxcc_gemm_f32;"
                           "mxcc_gemm_f32._omp_fn.0": 1,
                           "mlp_train;mlp_update;mxcc_sgd_update_f32": 1,
                           "mlp_train;mlp_update;mxcc_sgd_update_f32;mxcc_sgd_update_f32._omp_fn.0": 1,
                           "mlp_train;main": 1}
    # without a timeline the workers' samples are not placed, the master's are (by their stacks)
    prof = attribute_train(parse_perf_script(TRAIN_SCRIPT), TRAIN_KERNELS, "mlp")
    assert prof.phases["forward"] == 1 and prof.phases["update"] == 1 and prof.phases["other"] == 3


@pytest.fixture(scope="module")
def mlp_train_dir(tmp_path_factory):
    import mxcc
    d = tmp_path_factory.mktemp("perf") / "mlp_train"
    mxcc.compile(str(DATA / "models" / "mlp" / "mlp-symbol.json"), {"X": (100, 784)}, train=True,
                 optimizer=mxcc.optimizer.SGD(learning_rate=0.1, wd=1e-2, rescale_grad=0.01), out_dir=d)
    return d


@needs_perf
def test_perf_record_training(mlp_train_dir, capsys):
    # 10 kHz: one epoch loads batches for only a few ms in all, which 999 Hz sampling can miss entirely
    assert cli.main(["perf", str(mlp_train_dir), "--train", "--epochs", "1", "--freq", "9999"]) == 0
    printed = capsys.readouterr().out
    o = mlp_train_dir / "perf"
    for f in ("perf.data", "timeline.bin", "stacks.folded", "flame.svg", "layers.txt"):
        assert (o / f).stat().st_size > 0, f
    report = (o / "layers.txt").read_text()
    assert report in printed and re.search(r"epoch 0: [\d,]+ samples/sec, accuracy 0\.\d+", report)
    folded = (o / "stacks.folded").read_text()
    frames = {f for line in folded.splitlines() for f in line.rpartition(" ")[0].split(";")}
    assert "mxcc_train_load_batch" in frames
    assert "mlp_backward" in frames and any(f.endswith("_backward") and f != "mlp_backward" for f in frames)
    assert "mxcc_sgd_update_f32" in frames
    shares = {m[1]: float(m[2]) for m in re.finditer(r"^(data loading|forward|backward|update|other)\s+[\d,]+\s+"
                                                      r"([\d.]+)%", report, re.M)}
    assert set(shares) == set(PHASES)
    assert sum(shares.values()) == pytest.approx(100, abs=0.5)
    assert shares["forward"] > 0 and shares["backward"] > 0 and shares["update"] > 0
    for k in _meta(mlp_train_dir)["kernels"]:                            # backward kernels, update entries
        assert re.search(rf"^{re.escape(k['name'])}\s+{k['phase']}\s", report, re.M), k["name"]
    assert 'data-n="mxcc_train_load_batch"' in (o / "flame.svg").read_text()
