"""mxcc.ray: a compiled network as a Ray Data worker (and a Spark one), end to end on a local cluster.

The Ray tests share one local cluster of 2 CPUs (a start costs ~5-10 s) and skip when Ray is not installed;
the bundle, the CPU check and the batching run without it. The truth is the single-process job of
examples/ray_batch_inference.py: plain mxcc.load + forward over the same compiled directory, which the
cluster must reproduce bit for bit, rows complete and in order."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import mxcc
import mxcc.ray
from mxcc_testing import ROOT, needs_gcc, rel_err

pytestmark = needs_gcc
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                               reason="ray is not installed (pip install 'mxcc[ray]')")

_spec = importlib.util.spec_from_file_location("ray_batch_inference", ROOT / "examples" / "ray_batch_inference.py")
example = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    return example.compile_lenet(tmp_path_factory.mktemp("lenet") / "lenet", batch=64)


@pytest.fixture(scope="module")
def mnist():
    return example.mnist()


@pytest.fixture(scope="module")
def reference(lenet, mnist):
    """The single-process job's probabilities for the 10,000 images."""
    return example.local_job(lenet, mnist[0], threads=1)[0]


@pytest.fixture(scope="module")
def cluster():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'mxcc[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


def _rows(out) -> dict:
    got = list(out.iter_batches(batch_size=None, batch_format="numpy"))
    return {k: np.concatenate([b[k] for b in got]) for k in got[0]}


# -- on the cluster ---------------------------------------------------------------------------------------------
@needs_ray
def test_example_job_equals_the_single_process_job(cluster, lenet, mnist, reference):
    x, labels = mnist
    ids, probs, _ = example.ray_job(lenet, x, labels, batch_size=256, concurrency=2)  # 256 = 4 x 64 but blocks
    assert (ids == np.arange(len(x))).all()         # of 1,000 rows end in batches of 232: padded chunks
    assert np.array_equal(probs, reference)
    assert (probs.argmax(1) == labels).mean() == (reference.argmax(1) == labels).mean()


@needs_ray
def test_worker_needs_no_compiler_and_no_cache(cluster, lenet, mnist, reference, tmp_path):
    """Actors whose PATH has no gcc, whose MXCC_CC points nowhere and whose cache is empty still run: the
    network comes from the object store and is loaded, never compiled. A column records what each saw. The
    PATH holds bash alone: Ray starts its workers with `bash -c` looked up on the PATH."""
    empty_bin, cache = tmp_path / "bin", tmp_path / "cache"
    empty_bin.mkdir()
    (empty_bin / "bash").symlink_to(shutil.which("bash"))
    cache.mkdir()
    env = {"PATH": str(empty_bin), "MXCC_CC": "/nonexistent/gcc", "CC": "/nonexistent/gcc",
           "MXCC_CACHE_DIR": str(cache)}

    class Probe(mxcc.ray.Predictor):
        def __call__(self, batch):
            out = super().__call__(batch)
            seen = f"gcc={shutil.which('gcc')} cc={shutil.which(os.environ['MXCC_CC'])} " \
                   f"cache={os.environ['MXCC_CACHE_DIR']}"
            out["seen"] = np.array([seen] * len(out["id"]))
            return out

    x, labels = mnist
    n = 2000
    out = _rows(mxcc.ray.map_batches(example.dataset(x[:n], labels[:n], blocks=4), lenet, batch_size=100,
                                     predictor=Probe, runtime_env={"env_vars": env}))
    assert (out["id"] == np.arange(n)).all()
    assert np.array_equal(out["softmax_output"], reference[:n])
    assert set(out["seen"]) == {f"gcc=None cc=None cache={cache}"}
    assert list(cache.iterdir()) == []
    assert set(out) == {"id", "label", "softmax_output", "seen"}       # the input column is not kept


@needs_ray
def test_a_worker_killed_mid_job_loses_no_rows(cluster, lenet, mnist, reference, tmp_path):
    """The first actor to reach row 1,000 exits (once: it takes the flag file); Ray restarts it, it loads the
    network again from the object store and its batch runs again."""
    flag = tmp_path / "kill-once"
    flag.touch()
    flag_path = str(flag)

    class DiesOnce(mxcc.ray.Predictor):
        def __call__(self, batch):
            if batch["id"][0] >= 1000:
                try:
                    os.unlink(flag_path)
                except FileNotFoundError:
                    pass
                else:
                    os._exit(1)
            return super().__call__(batch)

    x, labels = mnist
    n = 2000
    out = _rows(mxcc.ray.map_batches(example.dataset(x[:n], labels[:n], blocks=8), lenet, batch_size=64,
                                     predictor=DiesOnce))
    assert not flag.exists()                    # an actor did die
    assert (out["id"] == np.arange(n)).all()
    assert np.array_equal(out["softmax_output"], reference[:n])


# -- without a cluster ------------------------------------------------------------------------------------------
def test_importing_mxcc_never_imports_ray():
    code = "import sys, mxcc, mxcc.ray; assert 'ray' not in sys.modules, 'ray imported'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_bundle_holds_what_load_needs_and_the_build_target(lenet):
    from mxcc.compiler.build import target_cpu
    from mxcc.options import CompileOptions
    b = mxcc.ray.pack(lenet)
    meta = json.loads((lenet / "module.json").read_text())
    assert set(b.files) == {"module.json", meta["so"], "params.params"}
    assert b.files["params.params"] == (lenet / "params.params").read_bytes()
    model, flags = mxcc.ray._cpu()
    man = b.manifest
    assert (man["isa"], man["target"]) == ("native", target_cpu(CompileOptions.from_env().cc, "native"))
    assert man["build_host"]["cpu"] == model and set(man["requires"]) <= flags and "sse2" in man["requires"]
    mxcc.ray.check_worker(b)                    # this host runs what it built
    # a Module packs its bound params (set after the load: they travel, not the file's)
    m = mxcc.load(lenet)
    params = {k: v * 0.5 for k, v in m.get_params().items()}
    m.set_params(params)
    p = mxcc.ray.Predictor(mxcc.ray.pack(m))
    x = example.mnist()[0][:64]
    assert np.array_equal(p({"data": x})["softmax_output"], m.forward(data=x)[0])


def test_a_cpu_without_the_builds_extensions_is_a_clear_error(lenet):
    b = mxcc.ray.pack(lenet)
    req = b.manifest["requires"]
    gone = [f for f in req if f.startswith("avx512")] or [f for f in req if f in ("avx2", "fma")] or req[-1:]
    worker = ("AMD EPYC 7B12 64-Core Processor", frozenset(req) - set(gone))
    with pytest.raises(mxcc.BuildError) as e:
        mxcc.ray.check_worker(b, cpu=worker)
    msg = str(e.value)
    assert gone[0] in msg and worker[0] in msg and b.manifest["build_host"]["cpu"] in msg
    assert "-march=native" in msg and 'isa="x86-64-v3"' in msg
    assert set(e.value.names) == set(gone)


def test_a_baseline_isa_build_runs_where_avx512_is_missing(lenet, tmp_path, reference):
    """isa="x86-64-v3" (the documented way to a mixed cluster): the bundle holds workers to AVX2 + FMA only,
    a Haswell-class CPU passes the check, and the code has no AVX-512 register in it."""
    v3 = example.compile_lenet(tmp_path / "lenet_v3", batch=64, isa="x86-64-v3")
    b = mxcc.ray.pack(v3)
    assert b.manifest["isa"] == "x86-64-v3"
    assert {"avx2", "fma", "sse4_2"} <= set(b.manifest["requires"])
    assert not any(f.startswith("avx512") for f in b.manifest["requires"])
    haswell = frozenset("fpu sse sse2 pni ssse3 sse4_1 sse4_2 popcnt cx16 lahf_lm avx avx2 fma f16c bmi1 bmi2 abm "
                        "movbe xsave aes pclmulqdq rdrand".split())
    mxcc.ray.check_worker(b, cpu=("Intel(R) Xeon(R) CPU E5-2680 v3", haswell))
    native = mxcc.ray.pack(lenet)
    if "avx512f" in native.manifest["requires"]:        # this host has AVX-512: its native build needs it
        with pytest.raises(mxcc.BuildError, match="avx512f"):
            mxcc.ray.check_worker(native, cpu=("Intel(R) Xeon(R) CPU E5-2680 v3", haswell))
    x = example.mnist()[0][:256]
    assert rel_err(mxcc.ray.Predictor(b)({"data": x})["softmax_output"], reference[:256]) < 1e-5
    objdump = shutil.which("objdump")
    if objdump:
        so = v3 / json.loads((v3 / "module.json").read_text())["so"]
        asm = subprocess.run([objdump, "-d", str(so)], capture_output=True, text=True, timeout=120).stdout
        assert "zmm" not in asm


def test_batches_smaller_and_larger_than_the_compiled_batch(lenet, mnist, reference):
    p = mxcc.ray.Predictor(mxcc.ray.pack(lenet))
    x = mnist[0]
    for n in (0, 1, 63, 64, 65, 300):
        out = p({"data": x[:n], "id": np.arange(n)})
        assert out["softmax_output"].shape == (n, 10) and (out["id"] == np.arange(n)).all()
        assert np.array_equal(out["softmax_output"], reference[:n]), n
    p2 = mxcc.ray.Predictor(mxcc.ray.pack(lenet), input_name="pixels", keep_input=True)
    out = p2({"pixels": x[:70].reshape(70, 784)})      # (784,) rows feed the (1, 28, 28) input
    assert np.array_equal(out["softmax_output"], reference[:70]) and out["pixels"].shape == (70, 784)


def test_column_and_params_errors(lenet, tmp_path):
    p = mxcc.ray.Predictor(lenet)
    with pytest.raises(mxcc.ShapeError, match="no column 'data'"):
        p({"image": np.zeros((3, 1, 28, 28), np.float32)})
    with pytest.raises(mxcc.ShapeError, match=r"rows of shape \(27, 27\)"):
        p({"data": np.zeros((3, 27, 27), np.float32)})
    with pytest.raises(mxcc.ShapeError, match="would overwrite"):
        p({"data": np.zeros((3, 1, 28, 28), np.float32), "softmax_output": np.zeros(3)})
    bare = tmp_path / "bare"
    shutil.copytree(lenet, bare)
    (bare / "params.params").unlink()
    with pytest.raises(mxcc.ParamsError, match="no params.params"):
        mxcc.ray.pack(bare)


@pytest.mark.skipif(importlib.util.find_spec("pyspark") is None or shutil.which("java") is None,
                    reason="pyspark (pip install pyspark) and Java are needed for the Spark example")
def test_spark_map_in_pandas_runs_the_same_worker(lenet, mnist, reference):
    x, labels = mnist
    n = 1000
    ids, probs, _ = example.spark_job(lenet, x[:n], labels[:n], partitions=2)
    assert (ids == np.arange(n)).all()
    assert np.array_equal(probs, reference[:n])
