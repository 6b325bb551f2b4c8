"""Winograd F(4x4,3x3) (runtime_c/conv/winograd_f32.c) against ONNX Runtime's Conv on ResNet-18's 3x3 stride-1 layers.

    python3 benchmarks/winograd.py [--threads 1,2] [--batch 1,64] [--rounds 3] [--march native] [--json out.jsonl]

Cases: (C = O, H = W) = (64, 56), (128, 28), (256, 14), (512, 7), pad 1, no bias, batches 1 and 64. For each
thread count, the mxcc worker (mxcc_winograd_f43_f32, weights transformed beforehand as at bind time) and
the ONNX Runtime worker (a one-node Conv model, intra_op_num_threads = threads) alternate, `--rounds` times,
each in a fresh process (harness.run_worker). Times are the median of each engine's least-disturbed round;
"GF/s" is the direct convolution's FLOPs (2 O C 9 OH OW per image) over that time, so the columns compare
like for like whatever the algorithm. Needs onnx + onnxruntime (benchmark-only dependencies).

`build_winograd(build_dir, march)` is also the build the tests use (tests/runtime/test_winograd.py): the
same sources and flags as the timed code.
"""
from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import harness  # noqa: E402

RUNTIME = HERE.parent / "runtime_c"
CFLAGS = ["-O3", "-fopenmp", "-g", "-fno-omit-frame-pointer", "-std=gnu11"]  # plus -march=<march>
LAYERS = [(64, 56), (128, 28), (256, 14), (512, 7)]


def winograd_sources() -> list[Path]:
    """winograd_f32.c and what it calls of runtime_c/gemm/: the micro-kernels (each file compiles to nothing
    outside its ISA) and the epilogue."""
    gemm = RUNTIME / "gemm"
    return [RUNTIME / "conv" / "winograd_f32.c", gemm / "epilogue_f32.c", *sorted(gemm.glob("ukernel_f32_*.c")),
            RUNTIME / "pool" / "pool.c"]


def _cdef() -> str:
    gemm = (RUNTIME / "gemm" / "mxcc_gemm.h").read_text()
    types = re.findall(r"typedef (?:enum|struct) \w+ \{.*?\} \w+;", gemm, re.S)
    conv = (RUNTIME / "conv" / "mxcc_conv.h").read_text()
    geom = re.search(r"typedef struct mxcc_conv_geom \{.*?\} mxcc_conv_geom;", conv, re.S).group(0)
    wino = re.sub(r"/\*.*?\*/", "", (RUNTIME / "conv" / "mxcc_winograd.h").read_text(), flags=re.S)
    decls = [ln for ln in wino.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
             and "extern" not in ln and ln.strip() != "}"]
    return "\n".join(types + [geom] + decls) + """
void omp_set_num_threads(int);
int omp_get_max_threads(void);
"""


def compile_parallel(sources: list[Path], out_dir: Path, flags: list[str]) -> list[Path]:
    """Each source compiled to an object in out_dir, all at once (cffi would compile them one by one)."""
    import os
    import subprocess
    out_dir.mkdir(parents=True, exist_ok=True)
    cc = os.environ.get("CC", "gcc")
    objs = [out_dir / f"{src.parent.name}__{src.stem}.o" for src in sources]
    procs = [(subprocess.Popen([cc, *flags, f"-I{RUNTIME}", "-c", str(src), "-o", str(obj)], stderr=subprocess.PIPE,
                               text=True), src) for src, obj in zip(sources, objs)]
    for proc, src in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"compiling {src} failed:\n{err}")
    return objs


def build_winograd(build_dir: str | Path, march: str = "native", defines: tuple[str, ...] = (), objects=()):
    """(ffi, lib) of the Winograd sources compiled for -march=<march> (and -D<defines>, block-size overrides
    for tuning runs) into build_dir (reused when the sources, flags, cdef and objects hash the same).
    `objects`: link these instead of compiling (mxcc's runtime objects for that -march: the tests')."""
    import cffi
    cdef = _cdef()
    flags = [*CFLAGS, f"-march={march}", *(f"-D{d}" for d in defines)]
    digest = hashlib.sha256((cdef + " ".join(flags) + "\n".join(map(str, objects))).encode())
    for path in sorted((RUNTIME / "conv").glob("*winograd*")) + sorted((RUNTIME / "gemm").glob("*.[ch]")):
        digest.update(path.name.encode() + path.read_bytes())
    digest.update((RUNTIME / "conv" / "mxcc_conv.h").read_bytes())
    name = f"_mxcc_winograd_{march.replace('-', '_')}_{digest.hexdigest()[:12]}"
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    built = sorted(build_dir.glob(f"{name}.*.so"))
    if built:
        so = str(built[0])
    else:
        objs = objects or compile_parallel(winograd_sources(), build_dir / name, [*flags, "-fPIC"])
        ffi = cffi.FFI()
        ffi.cdef(cdef)
        ffi.set_source(name, '#include <omp.h>\n#include "conv/mxcc_winograd.h"\n', include_dirs=[str(RUNTIME)],
                       extra_compile_args=flags, extra_objects=[str(o) for o in objs],
                       extra_link_args=["-fopenmp"], libraries=["m"])
        so = ffi.compile(tmpdir=str(build_dir))
    spec = importlib.util.spec_from_file_location(name, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ffi, mod.lib


def geom(ffi, c: int, h: int, w: int, pad: int):
    return ffi.new("mxcc_conv_geom *", {"channels": c, "in": (1, h, w), "out": (1, h + 2 * pad - 2, w + 2 * pad - 2),
                                        "k": (1, 3, 3), "stride": (1, 1, 1), "pad": (0, pad, pad),
                                        "dilate": (1, 1, 1)})


def _mxcc_worker(spec: dict) -> list[dict]:
    import numpy as np
    ffi, lib = build_winograd(Path(tempfile.gettempdir()) / "mxcc_winograd_bench", spec.get("march", "native"))
    threads = spec["threads"]
    rng = np.random.default_rng(0)
    results = []
    for batch in spec["batches"]:
        for c, size in LAYERS:
            o = c
            g = geom(ffi, c, size, size, 1)
            x = np.maximum(rng.standard_normal((batch, c, size, size)), 0).astype(np.float32)
            w = (rng.standard_normal((o, c, 3, 3)) * np.sqrt(2 / (9 * c))).astype(np.float32)
            u = np.empty(lib.mxcc_winograd_f43_weight_floats(o, c), np.float32)
            lib.mxcc_winograd_f43_weight_f32(o, c, ffi.from_buffer("float[]", w), ffi.from_buffer("float[]", u))
            # 64-byte aligned scratch, as the arena gives it
            n = lib.mxcc_winograd_f43_scratch_floats(g, batch, o, threads)
            raw = np.empty(n + 16, np.float32)
            scratch = raw[(-raw.ctypes.data // 4) % 16:][:n]
            y = np.empty((batch, o, size, size), np.float32)
            px, pu, py, ps = (ffi.from_buffer("float[]", a) for a in (x, u, y, scratch))
            par = int(threads > 1)
            samples = harness.time_call(lambda: lib.mxcc_winograd_f43_f32(g, batch, o, px, pu, ffi.NULL, py, ps, par),
                                        min_time=spec["min_time"])
            results.append({"case": (batch, c, size), "samples": samples, "scratch_bytes": 4 * n,
                            "u_bytes": 4 * u.size})
    return results


def _ort_worker(spec: dict) -> list[dict]:
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper
    from _onnx import ort_session
    threads = spec["threads"]
    rng = np.random.default_rng(0)
    results = []
    for batch in spec["batches"]:
        for c, size in LAYERS:
            x = np.maximum(rng.standard_normal((batch, c, size, size)), 0).astype(np.float32)
            w = (rng.standard_normal((c, c, 3, 3)) * np.sqrt(2 / (9 * c))).astype(np.float32)
            node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
            graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                                      [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, x.shape)],
                                      [numpy_helper.from_array(w, "w")])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
            sess = ort_session(model, threads)
            samples = harness.time_call(lambda: sess.run(None, {"x": x}), min_time=spec["min_time"])
            results.append({"case": (batch, c, size), "samples": samples})
    return results


def worker(spec: dict) -> list[dict]:
    return _mxcc_worker(spec) if spec["engine"] == "mxcc" else _ort_worker(spec)


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--batch", default="1,64", help="comma-separated batch sizes (default 1,64)")
    ap.add_argument("--engines", default="mxcc,onnxruntime")
    ap.add_argument("--march", default="native", help="-march of the mxcc build (haswell: the AVX2 path)")
    args = ap.parse_args()
    batches = [int(b) for b in args.batch.split(",")]
    engines = args.engines.split(",")
    rows, records = [], []
    for threads in map(int, args.threads.split(",")):
        rounds: dict = {}
        for _ in range(args.rounds):   # alternate the engines: each round sees the same noise
            for eng in engines:
                spec = {"engine": eng, "threads": threads, "batches": batches, "min_time": args.min_time,
                        "march": args.march}
                for r in harness.run_worker(__file__, spec, threads):
                    rounds.setdefault(tuple(r["case"]), {}).setdefault(eng, []).append(r["samples"])
        for (batch, c, size), by_eng in rounds.items():
            flops = 2 * c * c * 9 * size * size * batch
            row = {"threads": threads, "layer": f"{c}@{size}x{size} b{batch}"}
            st = {e: harness.summarize_rounds(by_eng[e]) for e in engines}
            for e in engines:
                row[f"{e} ms"] = f"{st[e]['median_s'] * 1e3:.3f}"
                row[f"{e} GF/s"] = f"{flops / st[e]['median_s'] * 1e-9:.1f}"
                records.append({"bench": "winograd", "threads": threads, "batch": batch, "layer": f"{c}@{size}",
                                "engine": e, "direct_flops": flops, **st[e]})
            if "mxcc" in st and "onnxruntime" in st:
                row["ort/mxcc"] = f"{st['onnxruntime']['median_s'] / st['mxcc']['median_s']:.2f}"
            rows.append(row)
    cols = [("threads", "threads"), ("layer", "layer")] + \
        [(f"{e} {u}", f"{e} {u}") for e in engines for u in ("ms", "GF/s")] + [("ort/mxcc (>1: mxcc faster)", "ort/mxcc")]
    harness.print_table(rows, cols)
    harness.append_jsonl(args.json, records)


if __name__ == "__main__":
    main()
