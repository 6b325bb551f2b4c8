"""The compile cache heals itself (mxcc.compiler.build): damaged entries are rebuilt, killed builds' tmp- folders are
swept, and cache failures are one-line BuildErrors.

Independent truth: numpy's x @ W.T + b for the rebuilt modules, files damaged by hand, and the CLI's exit
status as a user sees it. Each test has its own cache, seeded with a runtime built once per module (the
runtime takes ~10 s to compile). Every test compiles a network with its own node name, so that its
extension module's name (`_mxcc_<net>_<key16>`) is new to this process and a damaged .so is really loaded.
"""
from __future__ import annotations

import errno
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import mxcc
from mxcc.compiler import build as B
from mxcc.runtime.extension import load_extension
from mxcc.errors import BuildError
from mxcc.options import CompileOptions
from mxcc_testing import DATA, ROOT, needs_gcc

pytestmark = needs_gcc

SHAPES = {"data": (2, 4)}
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
# compiles the network of the node name in argv[1] in a fresh process (nothing imported here)
PREBUILD = ("import sys, mxcc; from pathlib import Path; from mxcc.compiler import build; "
            "build.prebuilt_dir = lambda: Path('/nonexistent'); "      # the cache's runtime, not a wheel's
            "mxcc.compile(mxcc.sym.FullyConnected(mxcc.sym.var('data'), num_hidden=3, "
            "name=sys.argv[1]), {'data': (2, 4)})")


def fc(name):
    return mxcc.sym.FullyConnected(mxcc.sym.var("data"), num_hidden=3, name=name)


def params(name):
    r = np.random.default_rng(len(name))
    return {f"{name}_weight": r.standard_normal((3, 4)).astype(np.float32),
            f"{name}_bias": r.standard_normal(3).astype(np.float32)}


def check_forward(name, **kw):
    """Compile in this process and compare with numpy."""
    p = params(name)
    m = mxcc.compile(fc(name), SHAPES, p, **kw)
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(m.forward(data=x)[0], x @ p[f"{name}_weight"].T + p[f"{name}_bias"], rtol=1e-5,
                               atol=1e-5)
    return m


def prebuild(name, cache):
    r = subprocess.run([sys.executable, "-c", PREBUILD, name], env=dict(ENV, MXCC_CACHE_DIR=str(cache)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def entry_of(cache):
    """The one network entry `cache/<2 hex>/<key>/`."""
    (entry,) = [d for d in cache.glob("??/*") if d.is_dir()]
    return entry


def cache_warnings(rec):
    return [w for w in rec if issubclass(w.category, RuntimeWarning) and "compile cache entry" in str(w.message)]


def replace_bytes(path, data):
    """Write new content under a new inode: the old one may be mapped by a loaded module (no SIGBUS)."""
    path.unlink()
    path.write_bytes(data)


@pytest.fixture(scope="module")
def runtime_dir():
    """cache/runtime/ of the session's cache (conftest.py), built there if no other test has: each test
    copies it into its own cache."""
    session_cache = Path(os.environ["MXCC_CACHE_DIR"])
    prebuild("seed", session_cache)
    return session_cache / "runtime"


@pytest.fixture
def cache(tmp_path, monkeypatch, runtime_dir):
    c = tmp_path / "cache"
    shutil.copytree(runtime_dir, c / "runtime")
    monkeypatch.setenv("MXCC_CACHE_DIR", str(c))
    # these tests are about the cache: an installed mxcc's prebuilt runtime (hatch_build.py) must not serve them
    monkeypatch.setattr(B, "prebuilt_dir", lambda: tmp_path / "no-prebuilt")
    return c


def _truncate_so(e):
    so = next(e.glob("*.so"))
    replace_bytes(so, so.read_bytes()[:4096])


def _flip_so_byte(e):
    so = next(e.glob("*.so"))
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 0xFF
    replace_bytes(so, bytes(data))


DAMAGE = {
    "truncated_so": _truncate_so,
    "flipped_so_byte": _flip_so_byte,                        # same size, another sha256
    "deleted_so": lambda e: next(e.glob("*.so")).unlink(),
    "deleted_bench": lambda e: next(e.glob("*_bench")).unlink(),
    "deleted_done": lambda e: (e / "DONE").unlink(),
    "garbled_done": lambda e: (e / "DONE").write_text('{"key": "'),
    "old_format_done": lambda e: (e / "DONE").write_text(e.name),   # before 16.4: the key as plain text
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_entry_is_rebuilt_with_one_warning(kind, cache):
    name = f"fc_{kind}"
    prebuild(name, cache)
    entry = entry_of(cache)
    DAMAGE[kind](entry)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        m = check_forward(name)
    (w,) = cache_warnings(rec)
    assert str(entry) in str(w.message) and "damaged" in str(w.message)
    assert w.filename == __file__                            # points at the caller, not into mxcc
    assert m.cached is False and B._damage(entry, entry.name, []) is None
    done = json.loads((entry / "DONE").read_text())
    assert done["key"] == entry.name and all(len(f["sha256"]) == 64 for f in done["files"].values())
    assert not [p for p in cache.iterdir() if p.name.startswith("tmp-")]
    with warnings.catch_warnings(record=True) as rec:        # healed: the next compile is a quiet hit
        warnings.simplefilter("always")
        assert mxcc.compile(fc(name), SHAPES).cached is True
    assert cache_warnings(rec) == []


def test_entry_without_damage_is_a_hit(cache):
    prebuild("fc_hit", cache)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        m = check_forward("fc_hit")
    assert m.cached is True and cache_warnings(rec) == []


def test_damaged_runtime_object_is_rebuilt(cache, monkeypatch):
    # runtime_objects() on two small sources of the runtime, so the rebuild takes a second, not ten
    opts = CompileOptions.from_env()
    seeded = set((cache / "runtime").iterdir())
    rt = B.runtime_objects(opts)[0].parent
    assert rt in seeded                                      # a hit
    small = [p for p in B.runtime_sources() if p.name in ("ctx.c", "gemm_f32_ref.c")]
    monkeypatch.setattr(B, "runtime_sources", lambda: small)
    obj = rt / "ctx.o"
    replace_bytes(obj, obj.read_bytes()[:100])
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        objs = B.runtime_objects(opts)
    (w,) = cache_warnings(rec)
    assert str(rt) in str(w.message) and "ctx.o" in str(w.message)
    assert [o.name for o in objs] == ["ctx.o", "gemm__gemm_f32_ref.o"] and objs[0].parent == rt
    assert B._damage(rt, rt.name, ["ctx.o"]) is None and obj.stat().st_size > 100


def _dead_pid():
    p = subprocess.Popen([sys.executable, "-c", ""])
    p.wait()
    return p.pid


def test_stale_tmp_folders_of_dead_builds_are_swept(cache):
    old = time.time() - 2 * B.STALE_AFTER_S
    dead = _dead_pid()
    folders = {"dead_old": f"tmp-{dead}-0123abcd", "dead_recent": f"tmp-{dead}-4567abcd",
               "live_old": f"tmp-{os.getpid()}-89abcdef", "dead_old_file": f"tmp-{dead}-fedcba98"}
    for key, n in folders.items():
        if key == "dead_old_file":
            (cache / n).write_text("x")
        else:
            (cache / n).mkdir()
            (cache / n / "net.o").write_text("x")
            if key != "dead_recent":
                os.utime(cache / n / "net.o", (old, old))
        if key != "dead_recent":
            os.utime(cache / n, (old, old))
    check_forward("fc_sweep")
    left = {p.name for p in cache.iterdir()}
    assert folders["dead_old"] not in left and folders["dead_old_file"] not in left
    assert folders["dead_recent"] in left and folders["live_old"] in left


def test_a_dead_builds_folder_with_a_fresh_file_is_kept(cache):
    # a build on another host sharing the cache: its pid means nothing here, but it keeps writing
    n = f"tmp-{_dead_pid()}-0badcafe"
    old = time.time() - 2 * B.STALE_AFTER_S
    (cache / n).mkdir()
    (cache / n / "net.o").write_text("x")
    os.utime(cache / n, (old, old))
    check_forward("fc_sweep_fresh")
    assert (cache / n).is_dir()


@pytest.mark.parametrize("under_file", [True, False])
def test_cache_path_that_cannot_be_created_is_a_build_error(under_file, tmp_path, monkeypatch):
    (tmp_path / "f").write_text("a regular file")
    bad = tmp_path / "f" / "cache" if under_file else tmp_path / "f"
    monkeypatch.setenv("MXCC_CACHE_DIR", str(bad))
    with pytest.raises(BuildError) as e:
        mxcc.compile(fc("fc_badroot"), SHAPES)
    msg = str(e.value)
    assert f"cannot create the compile cache at {bad}" in msg and "MXCC_CACHE_DIR" in msg and "\n" not in msg
    assert ("Not a directory" if under_file else "not a directory") in msg


def test_cli_bad_cache_dir_prints_one_line_and_exits_2(tmp_path):
    (tmp_path / "f").write_text("a regular file")
    bad = tmp_path / "f" / "cache"
    r = subprocess.run([sys.executable, "-m", "mxcc", "compile", str(DATA / "models/mlp/mlp-symbol.json"),
                        "--shape", "X=2,784", "-o", str(tmp_path / "out")], env=dict(ENV, MXCC_CACHE_DIR=str(bad)),
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"mxcc: error: cannot create the compile cache at {bad}: Not a directory")
    assert "MXCC_CACHE_DIR" in r.stderr


def _fail_under(cache, monkeypatch, method, exc):
    """Make pathlib.Path.<method> raise `exc` for paths in the cache's tmp- folders."""
    real = getattr(pathlib.Path, method)

    def failing(self, *a, **kw):
        if str(self).startswith(str(cache)) and "tmp-" in str(self)[len(str(cache)):]:
            raise exc
        return real(self, *a, **kw)
    monkeypatch.setattr(pathlib.Path, method, failing)


def test_disk_full_while_writing_is_a_build_error_and_leaves_no_tmp(cache, monkeypatch):
    _fail_under(cache, monkeypatch, "write_text", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    with pytest.raises(BuildError) as e:
        mxcc.compile(fc("fc_enospc"), SHAPES)
    msg = str(e.value)
    assert f"cannot write to the compile cache at {cache}" in msg and "No space left on device" in msg
    assert "MXCC_CACHE_DIR" in msg
    assert not [p for p in cache.iterdir() if p.name.startswith("tmp-")]
    assert not list(cache.glob("??/*"))


def test_read_only_cache_is_a_build_error(cache, monkeypatch):
    _fail_under(cache, monkeypatch, "mkdir", PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
    with pytest.raises(BuildError, match=r"cannot write to the compile cache at .*: Permission denied "
                                         r"\(set MXCC_CACHE_DIR to a writable directory\)"):
        mxcc.compile(fc("fc_readonly"), SHAPES)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes to read-only folders")
def test_read_only_cache_for_real(cache):
    os.chmod(cache, 0o555)
    try:
        with pytest.raises(BuildError, match="MXCC_CACHE_DIR"):
            mxcc.compile(fc("fc_chmod"), SHAPES)
    finally:
        os.chmod(cache, 0o755)


def test_load_extension_of_a_truncated_so_is_a_build_error(cache, tmp_path):
    prebuild("fc_load", cache)
    so = next(entry_of(cache).glob("*.so"))
    name = so.name.split(".")[0]
    assert name not in sys.modules
    bad = tmp_path / so.name
    # cut inside the headers (the loader's own "file too short"), and past them (dlopen would die of SIGBUS)
    for size in (10, 4096, so.stat().st_size - 1):
        bad.write_bytes(so.read_bytes()[:size])
        with pytest.raises(BuildError) as e:
            load_extension(name, bad)
        msg = str(e.value)
        assert msg.startswith(f"cannot load the compiled module {bad}: ") and "file too short" in msg
        assert "damaged" in msg and "\n" not in msg and name not in sys.modules
    bad.write_bytes(b"not a shared object")
    with pytest.raises(BuildError, match="cannot load the compiled module"):
        load_extension(name, bad)
    mod = load_extension(name, so)                         # the intact file loads, once per process
    assert hasattr(mod, "ffi") and hasattr(mod, "lib") and load_extension(name, so) is mod


CONCURRENT = """
import os, sys, time, warnings
import numpy as np, mxcc
warnings.simplefilter("always")
name, go = sys.argv[1], sys.argv[2]
open(go + "." + sys.argv[3], "w").close()
while not os.path.exists(go):
    time.sleep(0.001)
p = {name + "_weight": np.eye(3, 4, dtype=np.float32), name + "_bias": np.arange(3, dtype=np.float32)}
m = mxcc.compile(mxcc.sym.FullyConnected(mxcc.sym.var('data'), num_hidden=3, name=name), {'data': (2, 4)}, p)
x = np.arange(8, dtype=np.float32).reshape(2, 4)
assert np.allclose(m.forward(data=x)[0], x[:, :3] + np.arange(3)), m.forward(data=x)[0]
print("ok")
"""


def test_two_processes_healing_one_entry_both_succeed(cache, tmp_path):
    name = "fc_concurrent"
    prebuild(name, cache)
    entry = entry_of(cache)
    _truncate_so(entry)
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", CONCURRENT, name, str(go), str(i)],
                              env=dict(ENV, MXCC_CACHE_DIR=str(cache)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    deadline = time.time() + 120
    while not all((tmp_path / f"go.{i}").exists() for i in range(2)) and time.time() < deadline:
        time.sleep(0.01)
    go.touch()                                               # both imported: start the compiles together
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert all(rc == 0 and out.strip() == "ok" for out, _, rc in results), results
    # whichever process moved the damaged entry away warns; the other finds it gone or rebuilt
    assert sum(err.count("compile cache entry") for _, err, _ in results) == 1, results
    assert B._damage(entry, entry.name, []) is None
    assert not [p for p in cache.iterdir() if p.name.startswith("tmp-")]


RUNTIME_RACE = r"""
import sys, time
from pathlib import Path
from mxcc.compiler import build as B
from mxcc.options import CompileOptions
small = [p for p in B.runtime_sources() if p.name in ("ctx.c", "gemm_f32_ref.c")]
B.runtime_sources = lambda: small
compiled = B._compile_runtime
def counted(*a):
    with open(sys.argv[1], "a") as f:
        f.write("built\n")
    time.sleep(1.0)                                  # long enough for the other process to reach the lock
    return compiled(*a)
B._compile_runtime = counted
go = Path(sys.argv[2])
Path(f"{go}.{sys.argv[3]}").touch()
while not go.exists():
    time.sleep(0.005)
objs = B.runtime_objects(CompileOptions.from_env())
assert all(p.exists() for p in objs)
print("ok")
"""


def test_two_processes_building_one_runtime_build_it_once(tmp_path):
    """With no runtime in the cache, of two compiles started together one builds it, the other waits for it."""
    cache, log, go = tmp_path / "cache", tmp_path / "builds.log", tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, "-c", RUNTIME_RACE, str(log), str(go), str(i)],
                              env=dict(ENV, MXCC_CACHE_DIR=str(cache)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    deadline = time.time() + 120
    while not all((tmp_path / f"go.{i}").exists() for i in range(2)) and time.time() < deadline:
        time.sleep(0.01)
    go.touch()
    results = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert all(rc == 0 and out.strip() == "ok" for out, _, rc in results), results
    assert log.read_text().count("built") == 1


def test_the_prebuilt_runtime_is_used_and_a_damaged_one_is_not(tmp_path, monkeypatch):
    """The runtime a wheel build compiled (prebuild_runtime, run by hatch_build.py) serves runtime_objects
    without touching the cache; a damaged copy is reported once and the cache's is built instead."""
    monkeypatch.setenv("MXCC_CACHE_DIR", str(tmp_path / "cache"))
    small = [p for p in B.runtime_sources() if p.name in ("ctx.c", "gemm_f32_ref.c")]
    monkeypatch.setattr(B, "runtime_sources", lambda: small)
    monkeypatch.setattr(B, "prebuilt_dir", lambda: tmp_path / "prebuilt")
    key = B.prebuild_runtime(tmp_path / "prebuilt")
    objs = B.runtime_objects(CompileOptions.from_env())
    assert all(p.parent == tmp_path / "prebuilt" / key for p in objs)
    assert not (tmp_path / "cache").exists()
    replace_bytes(objs[0], objs[0].read_bytes()[:64])
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        objs = B.runtime_objects(CompileOptions.from_env())
    assert [str(w.message) for w in rec if "prebuilt runtime" in str(w.message)] and len(rec) == 1
    assert all(p.parent == tmp_path / "cache" / "runtime" / key for p in objs)


def test_the_key_names_the_cpu_that_native_means():
    """-march=native means another CPU on another machine: a cache or a wheel moved there is not reused."""
    assert B.target_cpu("gcc", "x86-64") == "x86-64"
    cpu = B.target_cpu("gcc", "native")
    assert cpu and cpu != "native"
