"""Helpers shared by the tests (imported by name: `from mxcc_testing import ...`)."""
from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"

needs_gcc = pytest.mark.skipif(shutil.which(os.environ.get("CC", "gcc")) is None, reason="no C compiler (gcc)")


class SGD0:
    """An optimizer with a zero learning rate, for tests of gradients: the update is not under test and leaves
    the weights alone."""
    kind, state_names = "sgd", ()

    def step_hyper(self, t):
        return {"lr": 0.0, "rescale_grad": 1.0, "clip_gradient": -1.0}

    def multipliers(self, graph, names):
        return {}, {}


def compile_for_gradients(net, shapes, params, **kw):
    """A poisoning training build (memory nothing wrote reads as NaN); with MXCC_TEST_SANITIZE=1 also built
    with ASan + UBSan and loaded from its directory (tests/runtime/test_sanitizers.py runs the gradient tests
    so, in a Python that preloads the sanitizer runtimes)."""
    import mxcc
    if not os.environ.get("MXCC_TEST_SANITIZE"):
        return mxcc.compile(net, shapes, params, train=True, poison=True, **kw)
    import atexit
    import json
    import tempfile
    from mxcc.runtime.executor import Executor
    out = Path(tempfile.mkdtemp(prefix="mxcc-sanitized-"))
    atexit.register(shutil.rmtree, out, True)     # ~30 MB each; the loaded library outlives its unlinked file
    mxcc.compile(net, shapes, train=True, poison=True, sanitize=True, out_dir=out, **kw)
    exe = Executor(out, json.loads((out / "module.json").read_text()), optimizer=kw.get("optimizer"))
    if params is not None:
        exe.set_params(params)
    return exe


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """max|got - ref| / max|ref|: MXNet's README's acceptance measure (safe for outputs crossing zero)."""
    scale = float(np.max(np.abs(ref))) or 1.0
    return float(np.max(np.abs(got.astype(np.float64) - ref))) / scale


# ---- runtime_c/conv/ tests (test_conv.py, test_conv_packed.py) ----

def conv_geom(ffi, c, size, k, s, p, d):
    """A mxcc_conv_geom for spatial tuples of length 1-3 (leading dimensions 1, as the compiler writes)."""
    pad3 = lambda t, f: (f,) * (3 - len(t)) + tuple(t)   # noqa: E731
    out = tuple((size[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(len(size)))
    g = ffi.new("mxcc_conv_geom *", dict(channels=c, **{"in": pad3(size, 1)}, out=pad3(out, 1), k=pad3(k, 1),
                                         stride=pad3(s, 1), pad=pad3(p, 0), dilate=pad3(d, 1)))
    return g, out


def float_buf(ffi, a):
    """A cffi float[] view of a numpy float32 array (no copy)."""
    return ffi.from_buffer("float[]", a)


def im2col_np(x, k, s, p, d, out):
    """x (C, *size) -> (C * prod(k), prod(out)) in float64: rows (c, offsets), columns output positions."""
    xp = np.pad(x, [(0, 0)] + [(v, v) for v in p])
    rows = []
    for c in range(x.shape[0]):
        for off in np.ndindex(*k):
            win = tuple(slice(off[i] * d[i], off[i] * d[i] + (out[i] - 1) * s[i] + 1, s[i]) for i in range(len(k)))
            rows.append(xp[c][win].reshape(-1))
    return np.stack(rows)


# ---- runtime kernels that take the GEMM epilogue (test_conv_packed.py, test_conv_direct.py, test_conv1x1.py) ----

CC = os.environ.get("CC", "gcc")
ISA_MACROS = {"__AVX__", "__AVX2__", "__FMA__", "__F16C__", "__BMI2__", "__AVX512F__", "__AVX512VL__"}

# numpy twins of mxcc_act with the parameters epilogue_reference sets (alpha 0.1, clip to [-0.5, 0.5])
EPILOGUE_ACTS = {"NONE": lambda v: v, "RELU": lambda v: np.maximum(v, 0), "SIGMOID": lambda v: 1 / (1 + np.exp(-v)),
                 "TANH": np.tanh, "SOFTRELU": lambda v: np.where(v > 20, v, np.log1p(np.exp(np.minimum(v, 20)))),
                 "SOFTSIGN": lambda v: v / (1 + np.abs(v)), "LEAKY": lambda v: np.where(v > 0, v, 0.1 * v),
                 "CLIP": lambda v: np.clip(v, -0.5, 0.5)}

# every epilogue part and activation, each in some combination
EPILOGUE_CASES = [(("scale", "shift"), "RELU"), (("bias",), "SIGMOID"), (("residual",), "NONE"),
                  (("scale", "shift", "residual"), "RELU"), (("bias", "residual"), "TANH"), ((), "SOFTRELU"),
                  (("shift",), "SOFTSIGN"), (("scale", "bias"), "LEAKY"), (("residual",), "CLIP"),
                  (("scale", "shift", "bias", "residual"), "CLIP")]


def epilogue_reference(ffi, lib, rng, val, bound, ep, act, keep):
    """A per-channel epilogue (parts `ep` of scale/shift/bias/residual, activation `act`) for an output
    (N, O, P) whose float64 value before it is `val` with error bound `bound`: (the mxcc_epilogue * to pass, or
    NULL; the expected output; its bound). The vectors and the residual are appended to `keep` (the pointers
    read them). The bound scales through `scale`, adds a few ulp for the epilogue's own roundings and carries
    through the activation unchanged (every activation is 1-Lipschitz)."""
    batch, O, P = val.shape
    fields = {}
    vec = lambda: rng.uniform(0.5, 1.5, O).astype(np.float32)   # noqa: E731
    col = lambda v: v[None, :, None]                            # noqa: E731

    def ptr(a):
        keep.append(a)
        return float_buf(ffi, a)
    if "scale" in ep:
        sc = vec(); fields["scale"] = ptr(sc); val = val * col(sc); bound = bound * col(sc)
    if "shift" in ep:
        sh = vec(); fields["shift"] = ptr(sh); val = val + col(sh)
    if "bias" in ep:
        b = vec(); fields["bias"] = ptr(b); val = val + col(b)
    if "residual" in ep:
        r = rng.standard_normal((batch, O, P)).astype(np.float32)
        fields["residual"] = ptr(r); fields["ld_residual"] = P; val = val + r
    bound = bound + 4e-7 * np.abs(val)
    c_ep = ffi.NULL
    if ep or act != "NONE":
        fields.update(act=getattr(lib, "MXCC_ACT_" + act), alpha=0.1, lo=-0.5, hi=0.5, per_row=1)
        c_ep = ffi.new("mxcc_epilogue *", fields)
    return c_ep, EPILOGUE_ACTS[act](val), bound


def check_within(y, want, bound):
    """Every element of y finite and within bound of want."""
    err = np.abs(y.astype(np.float64) - want)
    assert np.isfinite(y).all() and (err <= bound).all(), \
        f"max err {err.max():.3g} at {np.unravel_index(np.argmax(err - bound), err.shape)}"


def conv_kernel_cdef(runtime: Path, prefix: str, count: int, geom: bool = True, extra: str = "") -> str:
    """cffi declarations of a runtime_c/conv kernel family: mxcc_gemm.h's types, mxcc_conv_geom (`geom`), the
    `count` declarations in mxcc_conv.h whose names start with `prefix`, `extra`, and OpenMP's thread count."""
    import re
    gemm = (runtime / "gemm" / "mxcc_gemm.h").read_text()
    parts = re.findall(r"typedef (?:enum|struct) \w+ \{.*?\} \w+;", gemm, re.S)
    conv = re.sub(r"/\*.*?\*/", "", (runtime / "conv" / "mxcc_conv.h").read_text(), flags=re.S)
    if geom:
        parts.append(re.search(r"typedef struct mxcc_conv_geom \{.*?\} mxcc_conv_geom;", conv, re.S).group(0))
    decls = re.findall(rf"\n([^\n;#]*{prefix}\w*\([^;]*;)", conv)
    assert len(decls) == count, decls
    return "\n".join([*parts, *decls]) + "\n" + extra + "void omp_set_num_threads(int);\nint omp_get_max_threads(void);\n"


def conv_reference(x, w, k, s, p, d, out, rtol):
    """(acc, bound): w (O, K) . im2col(x) (N, K, P) in float64, and its float32 rounding bound
    rtol * sqrt(K) * (|w| . |cols|) per output."""
    cols = np.stack([im2col_np(xi.astype(np.float64), k, s, p, d, out) for xi in x])   # (N, K, P)
    acc = np.einsum("ok,nkp->nop", w.astype(np.float64), cols)
    bound = rtol * np.sqrt(w.shape[1]) * np.einsum("ok,nkp->nop", np.abs(w), np.abs(cols)) + 1e-30
    return acc, bound


def run_guarded(lib, threads, scratch_floats, out_shape, call, what: str):
    """y after call(y, scratch) with OpenMP at `threads` (restored after; None: as it is): y starts as NaN
    (every element must be written) and a NaN guard after the scratch of scratch_floats() floats (asked
    with the threads set) must survive."""
    before = lib.omp_get_max_threads()
    if threads:
        lib.omp_set_num_threads(threads)
    try:
        n = scratch_floats()
        scratch = np.full(n + 64, np.nan, np.float32)
        y = np.full(out_shape, np.nan, np.float32)
        call(y, scratch)
    finally:
        lib.omp_set_num_threads(before)
    assert np.isnan(scratch[n:]).all(), f"written past {what}"
    return y


def check_same_bits_on_threads(prob, more=(5, 16)):
    """prob.run(parallel, threads) on 1 thread, on 2, serially with 2 available, and on `more` threads (the
    splits of many-core machines: grids, channel parts; oversubscribed here): within prob's bound and the same
    bits each time (every output is one sum whatever the split)."""
    one, two, serial = prob.run(1, threads=1), prob.run(1, threads=2), prob.run(0, threads=2)
    prob.check(two)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, serial)
    for t in more:
        np.testing.assert_array_equal(one, prob.run(1, threads=t), err_msg=f"{t} threads")


@functools.lru_cache(maxsize=None)
def runtime_objects_for(march: str, sanitize: bool = False) -> tuple[Path, ...]:
    """The runtime objects mxcc's Python module links for -march=<march> (sanitize: its ASan + UBSan build, -O1):
    compiled once per session with the flags of generated code, in the session's cache, so that the kernel tests
    and every mxcc.compile of that ISA share one build (an installed mxcc's wheel has the native one prebuilt).
    Raises mxcc.errors.BuildError when they cannot be built."""
    from mxcc.compiler.build import module_objects, runtime_objects
    from mxcc.options import CompileOptions
    return tuple(module_objects(runtime_objects(CompileOptions.from_env(isa=march, sanitize=sanitize))))


@functools.lru_cache(maxsize=None)
def runtime_library(march: str) -> Path:
    """runtime_objects_for(march) linked into one shared library (for cffi's ABI mode), once per session."""
    import atexit
    import subprocess
    import tempfile
    out = Path(tempfile.mkdtemp(prefix="mxcc-test-runtime-"))
    atexit.register(shutil.rmtree, out, True)
    so = out / f"libmxcc_runtime_{march}.so"
    subprocess.run([CC, "-shared", "-fopenmp", *map(str, runtime_objects_for(march)), "-lm", "-o", str(so)],
                   check=True)
    return so


def _from_runtime_c(path) -> tuple[str, ...]:
    """The parts of `path` from its last "runtime_c" on (a checkout's and an installed copy's compare equal)."""
    parts = Path(path).parts
    return parts[max(i for i, p in enumerate(parts) if p == "runtime_c"):]


def assert_in_runtime(sources) -> None:
    """Every source (a checkout's runtime_c/ file) is one of the runtime's (an installed mxcc's copy of them)."""
    from mxcc.compiler.build import runtime_sources
    every = {_from_runtime_c(p) for p in runtime_sources()}
    assert all(_from_runtime_c(s) in every for s in sources), [s for s in sources if _from_runtime_c(s) not in every]


def runnable_marches(marches, base=lambda m: m):
    """The -march targets whose ISA this CPU runs (`base` maps a build name to its -march value)."""
    from benchmarks._build_gemm import predefined_macros
    return [m for m in marches if not (predefined_macros(base(m)) - predefined_macros("native")) & ISA_MACROS]


def build_isa_libs(out: Path, name: str, sources, marches, include: Path, flags=None, base=lambda m: m):
    """{build: shared library} holding `sources` for every runnable build in `marches`: mxcc's runtime for
    -march=base(build) (runtime_library: the objects generated code links, shared with the session's other
    tests), or, for a build with extra flags (flags.get(build): block-size overrides), `sources` compiled with
    -march=base(build) and those flags, all objects concurrently; skips without a C compiler."""
    if shutil.which(CC) is None:
        pytest.skip(f"no C compiler ({CC}) on PATH")
    import subprocess
    assert_in_runtime(sources)
    flags = flags or {}
    runnable = runnable_marches(marches, base)
    libs = {m: runtime_library(base(m)) for m in runnable if not flags.get(m)}
    jobs, objs = [], {m: [] for m in runnable if m not in libs}
    for m in objs:
        for src in sources:
            obj = out / f"{m}_{src.parent.name}_{src.stem}.o"
            objs[m].append(obj)
            jobs.append(subprocess.Popen([CC, "-O3", f"-march={base(m)}", *flags[m], "-fopenmp",
                                          "-std=gnu11", "-fPIC", "-c", f"-I{include}", str(src), "-o", str(obj)],
                                         stderr=subprocess.PIPE, text=True))
    for j in jobs:
        assert j.wait() == 0, j.stderr.read()
    for m in objs:
        libs[m] = out / f"lib{name}_{m}.so"
        subprocess.run([CC, "-shared", "-fopenmp", *map(str, objs[m]), "-lm", "-o", str(libs[m])], check=True)
    return libs


def load_isa_lib(builds: dict, march: str, cdef: str):
    """(ffi, lib) of one build, loaded with cffi in ABI mode; skips when this CPU cannot run it."""
    if march not in builds:
        pytest.skip(f"this CPU cannot run -march={march} code")
    cffi = pytest.importorskip("cffi")
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    return ffi, ffi.dlopen(str(builds[march]))


def build_sanitized_driver(tmp_path: Path, march: str, driver: Path, include: Path, std: str = "gnu11") -> Path:
    """A C test driver built under ASan/UBSan against mxcc's sanitized runtime for -march=<march>
    (runtime_objects_for(march, sanitize=True): -O1, shared with the session's other sanitized builds); skips
    without a C compiler or where the sanitizer runtime (libasan / libubsan) is missing."""
    import subprocess
    if shutil.which(CC) is None:
        pytest.skip(f"no C compiler ({CC}) on PATH")
    exe = tmp_path / driver.stem
    cmd = [CC, "-O1", "-g", f"-march={march}", "-fopenmp", f"-std={std}", "-fno-omit-frame-pointer",
           "-fsanitize=address,undefined", "-fno-sanitize-recover=all", f"-I{include}", str(driver),
           *map(str, runtime_objects_for(march, True)), "-lm", "-o", str(exe)]
    build = subprocess.run(cmd, capture_output=True, text=True)
    if build.returncode != 0 and ("asan" in build.stderr or "ubsan" in build.stderr):
        pytest.skip(f"sanitizer runtime not installed: {build.stderr.strip()[-300:]}")
    assert build.returncode == 0, build.stderr
    return exe


def run_sanitizer_driver(tmp_path: Path, march: str, driver: Path, include: Path, problems: int) -> None:
    """build_sanitized_driver, run on 2 threads over `problems` random problems: it must print
    "<problems> problems ok" and nothing wrong."""
    import subprocess
    exe = build_sanitized_driver(tmp_path, march, driver, include)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", OMP_NUM_THREADS="2")
    r = subprocess.run([str(exe), str(problems), "7"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "runtime error" not in r.stderr, r.stdout + r.stderr
    assert f"{problems} problems ok" in r.stdout
