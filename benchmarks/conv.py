"""Depthwise convolution kernels of runtime_c/conv/ on MobileNet 1.0's depthwise layers, per ISA build, beside
ONNX Runtime's kernel for the same layer.

    python benchmarks/conv.py [--threads 1,2] [--rounds 3] [--isa native,haswell,x86-64,ort] [--json out.jsonl]
    python benchmarks/conv.py --isa native,native@a5118f4,ort    # against the kernel of an earlier commit

Each `--isa` entry is one column:
  native / haswell / x86-64   runtime_c/conv/ and gemm/ compiled with -march=ISA (the depthwise kernel picks its
                              path at compile time: AVX-512 here, AVX2+FMA, the portable C plane)
  ISA@REV                     the same files as of git revision REV (the "before" of a change)
  ort                         ONNX Runtime (CPU provider, every graph optimization) on a one-node model
                              Conv(group = C, bias) + Relu: the time its profiler gives the convolution node,
                              without the NCHW <-> NCHWc reorders it adds around a lone node (inside a
                              network they happen once, at its ends), as benchmarks/cnn.py --layers counts it
mxcc computes what MobileNet's layers compute after BatchNorm folding: y = relu(conv(x) * scale + shift), one
image (batch 1), a call through cffi. GFLOP/s counts 2 * KH * KW per output; `ort/x` columns are ORT's time
over the column's (> 1: mxcc faster).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

RUNTIME = HERE.parent / "runtime_c"

# MobileNet 1.0 at 224x224: (channels, input size, stride), 3x3 kernels with pad 1
LAYERS = [(32, 112, 1), (64, 112, 2), (128, 56, 1), (128, 56, 2), (256, 28, 1), (256, 28, 2),
          (512, 14, 1), (512, 14, 2), (1024, 7, 1)]


def _runtime(rev: str | None) -> Path:
    """runtime_c/ as of git revision rev (None: the working tree), extracted into the temp dir."""
    if rev is None:
        return RUNTIME
    out = Path(tempfile.gettempdir()) / "mxcc_conv_bench" / f"runtime_{rev}"
    if not out.is_dir():
        out.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", rev, "runtime_c"], cwd=HERE.parent, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(out), "--strip-components=1"], input=archive, check=True)
    return out


def _build(isa: str, rev: str | None):
    """runtime_c/conv + gemm as a cffi module compiled with -march=isa (cached by source hash in the temp dir)."""
    import cffi
    root = _runtime(rev)
    gemm = (root / "gemm" / "mxcc_gemm.h").read_text()
    types = re.findall(r"typedef (?:enum|struct) \w+ \{.*?\} \w+;", gemm, re.S)
    cdef = "\n".join(types) + """
typedef struct mxcc_conv_geom { int channels; int in[3]; int out[3]; int k[3]; int stride[3]; int pad[3];
                                int dilate[3]; ...; } mxcc_conv_geom;
void mxcc_conv_depthwise_f32(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                             const mxcc_epilogue *ep, float *y, int parallel);
"""
    # the kernels' parallel work runs through mxcc_parallel_chunks (pool/pool.c), in a revision that has it
    sources = sorted((root / "conv").glob("*.c")) + sorted((root / "gemm").glob("*.c")) + sorted((root / "pool").glob("pool.c"))
    digest = hashlib.sha256(isa.encode())
    for f in [*sources, *sorted(root.rglob("*.h"))]:
        digest.update(f.read_bytes())
    tag = digest.hexdigest()[:12]
    name = f"_mxcc_conv_bench_{isa.replace('-', '_')}_{tag}"
    tmp = Path(tempfile.gettempdir()) / "mxcc_conv_bench"
    tmp.mkdir(exist_ok=True)
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source(name, '#include "conv/mxcc_conv.h"\n', sources=[str(f) for f in sources],
                   include_dirs=[str(root), str(root / "conv")], libraries=["m"], extra_link_args=["-fopenmp"],
                   extra_compile_args=["-O3", f"-march={isa}", "-fopenmp", "-std=gnu11"])
    so = ffi.compile(tmpdir=str(tmp / tag))
    spec = importlib.util.spec_from_file_location(name, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ffi, mod.lib


def _layer_data(c, size, s, rng):
    import numpy as np
    out = (size + 2 - 3) // s + 1
    x = rng.standard_normal((c, size, size)).astype(np.float32)
    w = rng.standard_normal((c, 3, 3)).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, c).astype(np.float32)
    shift = rng.standard_normal(c).astype(np.float32)
    return out, x, w, scale, shift


def _mxcc(spec: dict) -> list[dict]:
    import numpy as np
    isa, _, rev = spec["isa"].partition("@")
    ffi, lib = _build(isa, rev or None)
    rng = np.random.default_rng(0)
    results = []
    for c, size, s in LAYERS:
        out, x0, w, scale, shift = _layer_data(c, size, s, rng)
        g = ffi.new("mxcc_conv_geom *", {"channels": c, "in": (1, size, size), "out": (1, out, out),
                                         "k": (1, 3, 3), "stride": (1, s, s), "pad": (0, 1, 1),
                                         "dilate": (1, 1, 1)})
        # x and y in one buffer, 1 KiB apart modulo 4 KiB: separate page-aligned arrays make every load of
        # x alias a store to y in the low 12 address bits (4K aliasing), which stalls the portable loop 10x
        buf = np.zeros(c * size * size + 256 + c * out * out, np.float32)
        x = buf[:c * size * size].reshape(c, size, size)
        y = buf[c * size * size + 256:].reshape(c, out, out)
        x[...] = x0
        px, pw, py, psc, psh = (ffi.from_buffer("float[]", a) for a in (x, w, y, scale, shift))
        ep = ffi.new("mxcc_epilogue *", {"scale": psc, "shift": psh, "per_row": 1, "act": lib.MXCC_ACT_RELU})
        par = int(spec["threads"] > 1)
        samples = harness.time_call(lambda: lib.mxcc_conv_depthwise_f32(g, 1, px, pw, ep, py, par),
                                    min_time=spec["min_time"])
        results.append({"layer": f"{c}x{size}x{size} s{s}", "flops": 2 * 9 * c * out * out, "samples": samples})
    return results


def _ort(spec: dict) -> list[dict]:
    """ONNX Runtime's profiler time of the Conv(+Relu) node of a one-node model, per call."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from _onnx import ort_options, ort_session
    rng = np.random.default_rng(0)
    results = []
    with tempfile.TemporaryDirectory(prefix="mxcc-conv-ort-") as tmp:
        for c, size, s in LAYERS:
            out, x, w, scale, shift = _layer_data(c, size, s, rng)
            inits = [numpy_helper.from_array((w * scale[:, None, None]).reshape(c, 1, 3, 3), "w"),
                     numpy_helper.from_array(shift, "b")]
            nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], name="conv", kernel_shape=[3, 3],
                                      strides=[s, s], pads=[1, 1, 1, 1], group=c),
                     helper.make_node("Relu", ["conv"], ["y"], name="relu")]
            graph = helper.make_graph(nodes, "dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
                                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, out, out])], inits)
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
            so = ort_options(spec["threads"])
            so.enable_profiling, so.profile_file_prefix = True, str(Path(tmp) / f"ort{c}_{size}_{s}")
            sess = ort_session(model, spec["threads"], so)
            feed = {"x": x[None]}
            harness.time_call(lambda: sess.run(None, feed), min_time=spec["min_time"])
            runs: list[float] = []
            for e in json.loads(Path(sess.end_profiling()).read_text()):
                name = e.get("name", "")
                if e.get("cat") == "Node" and name.endswith("_kernel_time") and "reorder" not in name.lower() \
                        and "Reorder" not in e.get("args", {}).get("op_name", ""):
                    runs.append(e["dur"] * 1e-6)
            results.append({"layer": f"{c}x{size}x{size} s{s}", "flops": 2 * 9 * c * out * out,
                            "samples": runs[1:] or runs})   # runs[0]: the session's first run
    return results


def worker(spec: dict) -> list[dict]:
    return _ort(spec) if spec["isa"] == "ort" else _mxcc(spec)


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--isa", default="native,haswell,x86-64,ort")
    ap.set_defaults(threads="1")
    args = ap.parse_args()
    isas = args.isa.split(",")
    rows, records = [], []
    for threads in map(int, args.threads.split(",")):
        rounds: dict = {}
        for _ in range(args.rounds):   # alternate the builds: each round sees the same noise
            for isa in isas:
                for r in harness.run_worker(__file__, {"isa": isa, "threads": threads, "min_time": args.min_time},
                                            threads):
                    rounds.setdefault((r["layer"], r["flops"]), {}).setdefault(isa, []).append(r["samples"])
        r, cols, rec = harness.engine_rows(rounds, isas, threads, "conv_depthwise", [harness.US(1), harness.GFLOPS],
                                           [(f"ort/{i}", "ort", i) for i in isas if i != "ort"], key="isa")
        rows += r
        records += rec
    harness.print_table(rows, cols)
    harness.append_jsonl(args.json, records)


if __name__ == "__main__":
    main()
