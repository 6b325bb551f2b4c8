"""Depthwise convolution kernels of runtime_c/conv/ per ISA build, on MobileNet 1.0's depthwise layers.

    python benchmarks/conv.py [--threads 1] [--rounds 3] [--isa native,haswell,x86-64] [--json out.jsonl]

Each ISA is a separate build of runtime_c/conv/conv2d_f32.c with -march=ISA (the kernel picks its path at
compile time): native = AVX-512 on an AVX-512 machine, haswell = AVX2+FMA, x86-64 = the portable C plane
(the loop the depthwise kernel had before its vector paths, so it is also the "before" column). Times
mxcc_conv_depthwise_f32 on one image (batch 1), no epilogue; GFLOP/s counts 2 * KH * KW per output.
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

# MobileNet 1.0 at 224x224: (channels, input size, stride), 3x3 kernels with pad 1
LAYERS = [(32, 112, 1), (64, 112, 2), (128, 56, 1), (128, 56, 2), (256, 28, 1), (256, 28, 2),
          (512, 14, 1), (512, 14, 2), (1024, 7, 1)]


def _build(isa: str):
    """runtime_c/conv as a cffi module compiled with -march=isa (cached by source hash in the temp dir)."""
    import cffi
    gemm = (RUNTIME / "gemm" / "mxcc_gemm.h").read_text()
    types = re.findall(r"typedef (?:enum|struct) \w+ \{.*?\} \w+;", gemm, re.S)
    cdef = "\n".join(types) + """
typedef struct mxcc_conv_geom { int channels; int in[3]; int out[3]; int k[3]; int stride[3]; int pad[3];
                                int dilate[3]; } mxcc_conv_geom;
void mxcc_conv_depthwise_f32(const mxcc_conv_geom *g, int batch, const float *x, const float *w,
                             const mxcc_epilogue *ep, float *y, int parallel);
"""
    src = (RUNTIME / "conv" / "conv2d_f32.c").read_text() + (RUNTIME / "conv" / "mxcc_conv.h").read_text()
    tag = hashlib.sha256((src + isa).encode()).hexdigest()[:12]
    name = f"_mxcc_conv_bench_{isa.replace('-', '_')}_{tag}"
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source(name, '#include "conv/mxcc_conv.h"\n', sources=[str(RUNTIME / "conv" / "conv2d_f32.c")],
                   include_dirs=[str(RUNTIME)], libraries=["m"], extra_link_args=["-fopenmp"],
                   extra_compile_args=["-O3", f"-march={isa}", "-fopenmp", "-std=gnu11"])
    so = ffi.compile(tmpdir=str(Path(tempfile.gettempdir()) / "mxcc_conv_bench"))
    spec = importlib.util.spec_from_file_location(name, so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ffi, mod.lib


def worker(spec: dict) -> list[dict]:
    import numpy as np
    ffi, lib = _build(spec["isa"])
    rng = np.random.default_rng(0)
    results = []
    for c, size, s in LAYERS:
        out = (size + 2 - 3) // s + 1
        g = ffi.new("mxcc_conv_geom *", {"channels": c, "in": (1, size, size), "out": (1, out, out),
                                         "k": (1, 3, 3), "stride": (1, s, s), "pad": (0, 1, 1),
                                         "dilate": (1, 1, 1)})
        # x and y in one buffer, 1 KiB apart modulo 4 KiB: separate page-aligned arrays make every load of
        # x alias a store to y in the low 12 address bits (4K aliasing), which stalls the portable loop 10x
        buf = np.zeros(c * size * size + 256 + c * out * out, np.float32)
        x = buf[:c * size * size].reshape(c, size, size)
        y = buf[c * size * size + 256:].reshape(c, out, out)
        x[...] = rng.standard_normal(x.shape)
        w = rng.standard_normal((c, 3, 3)).astype(np.float32)
        px, pw, py = (ffi.from_buffer("float[]", a) for a in (x, w, y))
        par = int(spec["threads"] > 1)
        samples = harness.time_call(lambda: lib.mxcc_conv_depthwise_f32(g, 1, px, pw, ffi.NULL, py, par),
                                    min_time=spec["min_time"])
        results.append({"layer": f"{c}x{size}x{size} s{s}", "flops": 2 * 9 * c * out * out, "samples": samples})
    return results


def main() -> None:
    ap = harness.parser_unless_worker(worker, __doc__)
    if ap is None:
        return
    ap.add_argument("--isa", default="native,haswell,x86-64")
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
        for (layer, flops), by_isa in rounds.items():
            row = {"threads": threads, "layer": layer}
            for isa in isas:
                st = harness.summarize_rounds(by_isa[isa])
                row[f"{isa} us"] = f"{st['median_s'] * 1e6:.1f}"
                row[f"{isa} GF/s"] = f"{flops / st['median_s'] * 1e-9:.1f}"
                records.append({"bench": "conv_depthwise", "threads": threads, "layer": layer, "isa": isa, **st})
            rows.append(row)
    cols = [("threads", "threads"), ("layer", "layer")] + [(f"{i} {u}", f"{i} {u}") for i in isas for u in ("us", "GF/s")]
    harness.print_table(rows, cols)
    harness.append_jsonl(args.json, records)


if __name__ == "__main__":
    main()
