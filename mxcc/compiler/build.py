"""Build: generated C + the runtime -> a cffi extension module and a standalone benchmark, cached.

The cache key is a sha256 of everything that affects the binaries: the generated sources, every runtime
file, the flags, `gcc --version`, the cffi version, the Python ABI tag and the mxcc version (never mtimes).
Builds happen in `cache/tmp-<pid>-<random>/` and are published with one `os.rename` to `cache/<2 hex>/<key>/`;
a process that loses the race keeps the winner's copy, so concurrent compiles of one network all succeed.
Runtime object files are cached the same way under `cache/runtime/<key>/`, so a new network compiles only
its own C. (`mxcc.files.resource_dir()` is the one place that finds templates/ and runtime_c/.)

The cache heals itself, because a disk that filled up, a copy broken off or another tool can leave an entry
that would otherwise fail on every later compile. Each entry's `DONE` marker (JSON) records the size and
sha256 of every file in it, and every hit checks them (a few ms). A damaged entry (a file missing or
changed, DONE missing, garbled or in the old plain-key format) is first renamed to a private `tmp-` name,
so that no other process can be publishing into it, checked again there (a good entry published meanwhile
is put back), then removed with one warning and rebuilt. A build also removes the `tmp-<pid>-*` folders of
killed builds: pid not alive on this host and nothing in them touched for STALE_AFTER_S. OSErrors from the
cache (cannot create it, read-only, disk full) become one-line BuildErrors that name MXCC_CACHE_DIR.
"""
from __future__ import annotations

import contextlib
import errno
import functools
import io
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

from mxcc._version import __version__
from mxcc.errors import BuildError
from mxcc.files import resource_dir
from mxcc.options import CompileOptions, cache_dir

EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
STALE_AFTER_S = 300     # a tmp- folder of a dead pid, untouched this long, is a killed build's leftover


def runtime_sources() -> list[Path]:
    """The runtime, compiled once per host, with the bodies of the standalone programs (runtime_c/driver/: the
    same for every network, so compiled once too rather than with each network's executables). Not in it:
    runtime_c/data/ (IDX reading with zlib, `<net>_train` only), compiled with the training program, so that a
    host without zlib's headers builds everything else."""
    root = resource_dir("runtime_c")
    return sorted(p for p in root.rglob("*.c") if not {"tests", "data"} & set(p.relative_to(root).parts))


# Runtime objects that only some links take. MXNet's predict API refers to the library's network
# (mxcc_pred_library_model, defined by its generated <net>_lib.c): only the network's C library links it. The
# programs' bodies go into the programs.
LIBRARY_ONLY_OBJECTS = ("capi__c_predict_api.o",)
BENCH_OBJECTS = ("driver__bench.o", "driver__simulate.o", "driver__common.o")
TRAIN_OBJECTS = ("driver__train.o", "driver__common.o")


def module_objects(objs: list[Path]) -> list[Path]:
    """The runtime objects the Python module, the executables and the library link: all but those above."""
    return [o for o in objs if o.name not in LIBRARY_ONLY_OBJECTS and not o.name.startswith("driver__")]


def _named(objs: list[Path], names: tuple[str, ...]) -> list[str]:
    return [str(o) for o in objs if o.name in names]


def data_sources() -> list[Path]:
    """runtime_c/data/: compiled with `<net>_train` (zlib)."""
    return sorted((resource_dir("runtime_c") / "data").glob("*.c"))


def runtime_files() -> list[Path]:
    root = resource_dir("runtime_c")
    return sorted(p for p in root.rglob("*") if p.suffix in (".c", ".h"))


def flags(opts: CompileOptions) -> list[str]:
    # a sanitized build checks, it does not race: -O1 (ASan's advice) builds the runtime in 15 s, not 91 (2 cores).
    # -g without -fvar-tracking: line tables and symbols (what perf, gdb's backtraces and the sanitizers' reports
    # read) stay, variable locations in optimized code go; the machine code is the same, and gcc takes a third
    # less time (the runtime: 39 s -> 26 s of CPU at -O3 -march=native, Zen 4)
    f = ["-O1" if opts.sanitize else opts.opt_level, f"-march={opts.isa}", "-fopenmp", "-g", "-fno-var-tracking",
         "-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer", "-fno-optimize-sibling-calls", "-fPIC", "-std=gnu11",
         "-Wall", "-Wno-unused-variable", "-Wno-unknown-pragmas"]
    if opts.sanitize:
        f += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    return f


@functools.lru_cache(maxsize=None)
def compiler_version(cc: str) -> str:
    path = shutil.which(cc)
    if path is None:
        raise BuildError(f"no C compiler found: {cc!r} is not on PATH. Install gcc (e.g. `apt-get install gcc`) "
                         f"or point MXCC_CC / CC at a C compiler")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise BuildError(f"cannot run the C compiler {path}: {e}") from None
    if out.returncode != 0:
        raise BuildError(f"the C compiler {path} does not work: `{cc} --version` failed: {out.stderr.strip()}")
    return out.stdout


def _hash(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _run(cmd: list[str], cwd: Path, what: str) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-25:])
        raise BuildError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


def _compile_parallel(jobs: list[tuple[list[str], str]], cwd: Path) -> None:
    """Run compiler commands two at a time (the machines have 2+ cores)."""
    procs = []
    for cmd, what in jobs:
        try:
            p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except OSError as e:
            for q, _, _ in procs:
                q.kill()
                q.wait()
            raise BuildError(f"{what} failed: cannot run {cmd[0]}: {e.strerror or e}") from e
        procs.append((p, cmd, what))
    errors = []
    for p, cmd, what in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            tail = "\n".join(err.strip().splitlines()[-25:])
            errors.append(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{tail}")
    if errors:
        raise BuildError("\n".join(errors))


# ---- the cache: errors, validation, healing, publishing ----

def _cache_error(e: OSError, doing: str, path: Path) -> BuildError:
    why = "it exists and is not a directory" if isinstance(e, FileExistsError) else (e.strerror or str(e))
    hint = ("free some space, or set MXCC_CACHE_DIR to a directory with room"
            if e.errno in (errno.ENOSPC, errno.EDQUOT) else "set MXCC_CACHE_DIR to a writable directory")
    return BuildError(f"cannot {doing} the compile cache at {path}: {why} ({hint})")


def _cache_root() -> Path:
    """The cache root, created; only builds call this, so hits work in a read-only cache."""
    root = Path(cache_dir())
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise _cache_error(e, "create", root) from e
    return root


def _tmpdir(root: Path) -> Path:
    d = root / f"tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        d.mkdir()
    except OSError as e:
        raise _cache_error(e, "write to", root) from e
    return d


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def _scratch(root: Path):
    """A private build folder under the cache root: removed on any failure, its OSErrors made BuildErrors."""
    tmp = _tmpdir(root)
    try:
        yield tmp
    except OSError as e:
        _remove(tmp)
        raise _cache_error(e, "write to", root) from e
    except BaseException:
        _remove(tmp)
        raise


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):     # no such pid (or none that could exist)
        return False
    except OSError:             # EPERM: it exists, as another user
        return True
    return True


def _sweep_stale(root: Path) -> None:
    """Remove the tmp- folders of killed builds. A dead pid alone is not enough: a build on another host or
    container sharing the cache has a pid meaningless here, but it keeps writing files."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    now = time.time()
    for name in names:
        m = re.fullmatch(r"tmp-(\d+)-[0-9a-f]+", name)
        if m is None or _alive(int(m[1])):
            continue
        path = root / name
        try:
            newest = path.lstat().st_mtime
            if path.is_dir():
                with os.scandir(path) as it:
                    newest = max([newest, *(e.stat(follow_symlinks=False).st_mtime for e in it)])
        except OSError:         # another process is removing it
            continue
        if now - newest >= STALE_AFTER_S:
            _remove(path)


def _digest(path: Path) -> tuple[int, str]:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return path.stat().st_size, h.hexdigest()


def _seal(tmp: Path, key: str) -> None:
    """Write DONE: the key and each file's size and sha256, so that a hit can tell an intact entry."""
    files = {}
    for p in sorted(tmp.iterdir()):
        if p.is_file() and p.name != "DONE":
            size, sha = _digest(p)
            files[p.name] = {"size": size, "sha256": sha}
    (tmp / "DONE").write_text(json.dumps({"key": key, "files": files}, indent=1))


def _damage(entry: Path, key: str, need: list[str]) -> str | None:
    """Why the cache entry cannot be used, or None when it is intact."""
    try:
        done = json.loads((entry / "DONE").read_text())
    except FileNotFoundError:
        return "its DONE marker is missing"
    except (OSError, ValueError) as e:
        return f"its DONE marker is unreadable: {e}"
    files = done.get("files") if isinstance(done, dict) else None
    if not isinstance(files, dict) or done.get("key") != key:
        return "its DONE marker is of an old or unknown format"
    for name in need:
        if name not in files:
            return f"its DONE marker does not list {name}"
    for name, rec in files.items():
        if os.sep in name or name in ("", ".", "..") or not isinstance(rec, dict):
            return "its DONE marker is garbled"
        path = entry / name
        try:
            if path.stat().st_size != rec.get("size"):
                return f"{name} has {path.stat().st_size} bytes, expected {rec.get('size')}"
            if _digest(path)[1] != rec.get("sha256"):
                return f"{name} does not match its recorded sha256"
        except OSError as e:
            return f"{name} cannot be read: {e.strerror or e}"
    return None


def _warn(message: str) -> None:
    """warnings.warn pointed at the first caller outside mxcc (skip_file_prefixes needs Python 3.12)."""
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # the mxcc package
    frame, level = sys._getframe(1), 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(pkg + os.sep):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, RuntimeWarning, stacklevel=level)


def _usable(entry: Path, key: str, need: list[str], root: Path) -> bool:
    """True when `entry` is an intact cache entry. A damaged one is removed (with one warning): renamed away
    first, so that it is ours alone, and checked again, since another process may have replaced it."""
    for _ in range(3):
        if not os.path.lexists(entry):
            return False
        if _damage(entry, key, need) is None:
            return True
        grave = root / f"tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(entry, grave)
        except FileNotFoundError:           # another process is healing it
            return False
        except OSError as e:
            raise _cache_error(e, f"remove the damaged entry {entry} from", root) from e
        why = _damage(grave, key, need)
        if why is None:                     # an intact entry published since our check: put it back
            try:
                os.rename(grave, entry)
            except OSError:
                _remove(grave)
            continue
        _warn(f"mxcc: the compile cache entry {entry} is damaged ({why}); removed it, rebuilding")
        _remove(grave)
        return False
    return False


def _publish(tmp: Path, final: Path, key: str, need: list[str], root: Path) -> None:
    """Seal a finished build and move it into place with one rename; if another process published an
    intact entry first, keep theirs."""
    _seal(tmp, key)
    final.parent.mkdir(exist_ok=True)
    for _ in range(3):
        try:
            os.rename(tmp, final)
            return
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        if _usable(final, key, need, root):
            _remove(tmp)
            return
    raise BuildError(f"cannot publish the build of {final}: it keeps being replaced by damaged entries")


def target_cpu(cc: str, isa: str) -> str:
    """What `-march=<isa>` means on this host: for "native", the CPU gcc resolves it to (`-march=native -Q
    --help=target`), so that a cache or a wheel moved to another CPU never hands out objects built for this
    one; other ISAs name themselves."""
    if isa != "native":
        return isa
    return _native_cpu(shutil.which(cc) or cc)


@functools.lru_cache(maxsize=None)
def _native_cpu(cc: str) -> str:
    try:
        out = subprocess.run([cc, "-march=native", "-Q", "--help=target"], capture_output=True, text=True,
                             timeout=60).stdout
    except OSError:
        return "native"
    m = re.search(r"^\s*-march=\s+(\S+)", out, re.M)
    return m.group(1) if m else "native"


def _runtime_plan(opts: CompileOptions) -> tuple[str, list[Path], list[str]]:
    """(key, sources, object names) of the runtime for `opts`: the key hashes everything that affects the
    objects (sources and their paths, flags, the compiler, the host CPU that -march=native means)."""
    fl = flags(opts)
    files = runtime_files()
    root = resource_dir("runtime_c")
    key = _hash("runtime", __version__, compiler_version(opts.cc), " ".join(fl), target_cpu(opts.cc, opts.isa),
                *[p.read_bytes() for p in files], *[str(p.relative_to(root)) for p in files])
    srcs = runtime_sources()
    names = [str(p.relative_to(root)).replace(os.sep, "__")[:-2] + ".o" for p in srcs]
    return key, srcs, names


def _compile_runtime(opts: CompileOptions, srcs: list[Path], names: list[str], tmp: Path) -> None:
    cc = shutil.which(opts.cc) or opts.cc
    inc = str(resource_dir("runtime_c"))
    _compile_parallel([([cc, *flags(opts), "-I", inc, "-I", os.path.join(inc, "data"), "-c", str(s), "-o", n],
                        f"compiling {s.name}") for s, n in zip(srcs, names)], tmp)


def prebuilt_dir() -> Path:
    """Where an installed mxcc keeps the runtime its wheel build compiled for this host (hatch_build.py)."""
    return Path(__file__).resolve().parent.parent / "_data" / "prebuilt"


def prebuild_runtime(dest: Path, opts: CompileOptions | None = None) -> str:
    """Compile the runtime (default options: what mxcc.compile uses) into dest/<key>/, sealed like a cache
    entry; the key. Run by the wheel build (hatch_build.py), so that the first compile after `pip install`
    has its runtime ready."""
    opts = opts or CompileOptions.from_env()
    key, srcs, names = _runtime_plan(opts)
    out = Path(dest) / key
    out.mkdir(parents=True, exist_ok=True)
    _compile_runtime(opts, srcs, names, out)
    _seal(out, key)
    return key


@contextlib.contextmanager
def _build_lock(root: Path, key: str):
    """One process at a time builds a given runtime: the others wait here, then find it in the cache."""
    import fcntl
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{key[:16]}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def runtime_objects(opts: CompileOptions) -> list[Path]:
    """The runtime compiled once per (sources, flags, compiler, host CPU): the wheel's prebuilt copy when it
    is the one `opts` asks for, else the cache's, built on first use (two processes: one builds, one waits)."""
    key, srcs, names = _runtime_plan(opts)
    pre = prebuilt_dir() / key
    if pre.is_dir():
        why = _damage(pre, key, names)
        if why is None:
            return [pre / n for n in names]
        _warn(f"mxcc: the prebuilt runtime {pre} is damaged ({why}); building one in the cache")
    root = Path(cache_dir())
    final = root / "runtime" / key
    if not _usable(final, key, names, root):
        root = _cache_root()
        with _build_lock(root / "runtime", key):
            if not _usable(final, key, names, root):
                with _scratch(root) as tmp:
                    _compile_runtime(opts, srcs, names, tmp)
                    _publish(tmp, final, key, names, root)
    return [final / n for n in names]


@dataclass(frozen=True)
class Built:
    dir: Path            # the cache directory holding the binaries
    module: str          # cffi extension module name
    so: Path
    bench: Path
    key: str
    cached: bool
    net_objects: tuple = ()   # the network's own objects (<net>.o, or one per part), in dir: build_library links them


def build(net: str, c_src: str, h_src: str, cdef: str, bench_src: str, opts: CompileOptions,
          train_src: str | None = None, parts: int = 1, log=None) -> Built:
    """Compile (or fetch from the cache) the extension module and the benchmark for one network, and with
    `train_src` the standalone training program `<net>_train` (links zlib to read gzipped IDX files).
    `parts` > 1: <net>.c is compiled once per part (-DMXCC_PART=k), all in parallel (codegen/render.py).
    `log(stage, seconds)` hears how long each step took (`mxcc compile --timings`)."""
    log = log or (lambda stage, seconds: None)
    t = time.perf_counter()
    import cffi
    fl = flags(opts)
    cc = shutil.which(opts.cc) or opts.cc
    key = _hash("net", __version__, compiler_version(opts.cc), " ".join(fl), target_cpu(opts.cc, opts.isa),
                cffi.__version__, EXT_SUFFIX, str(parts),
                c_src, h_src, cdef, bench_src, train_src or "",
                *[p.read_bytes() for p in runtime_files()])
    module = f"_mxcc_{net}_{key[:16]}"
    root = Path(cache_dir())
    final = root / key[:2] / key
    so, bench = final / (module + EXT_SUFFIX), final / f"{net}_bench"
    net_objs = [f"{net}.o"] if parts == 1 else [f"{net}_{k}.o" for k in range(parts)]
    need = [so.name, bench.name, *net_objs] + ([f"{net}_train"] if train_src is not None else [])
    if _usable(final, key, need, root):
        log("from the compile cache (checked)", time.perf_counter() - t)
        return Built(final, module, so, bench, key, cached=True, net_objects=tuple(final / o for o in net_objs))

    def lap(stage):
        nonlocal t
        now = time.perf_counter()
        log(stage, now - t)
        t = now

    root = _cache_root()
    _sweep_stale(root)
    lap("cache lookup")
    every = runtime_objects(opts)
    objs = module_objects(every)
    lap("runtime objects (prebuilt, cached or compiled)")
    with _scratch(root) as tmp:
        (tmp / f"{net}.c").write_text(c_src)
        (tmp / f"{net}.h").write_text(h_src)
        (tmp / f"{net}_bench.c").write_text(bench_src)
        if train_src is not None:
            (tmp / f"{net}_train.c").write_text(train_src)
        ffi = cffi.FFI()
        ffi.cdef(cdef)
        ffi.set_source(module, f'#include "{net}.h"')
        with contextlib.redirect_stdout(io.StringIO()):     # cffi announces "generating ..."
            ffi.emit_c_code(str(tmp / f"{module}.c"))
        inc = ["-I", str(resource_dir("runtime_c")), "-I", str(tmp)]
        exe_inc = ["-I", str(resource_dir("runtime_c") / "driver")]
        py_inc = ["-I", sysconfig.get_paths()["include"]]
        # part 0 of several holds the tables and entry points only (sequences of calls, no loops): -O1 is as
        # fast to run and half as slow to compile
        part_flags = [[]] if parts == 1 else [[f"-DMXCC_PART={k}"] + (["-O1"] if k == 0 else [])
                                              for k in range(parts)]
        _compile_parallel([
            *[([cc, *fl, *inc, *d, "-c", f"{net}.c", "-o", o], f"compiling {net}.c {' '.join(d)}")
              for d, o in zip(part_flags, net_objs)],
            # the wrapper is glue (argument conversion): -O1 compiles in half the time of -O3 -g
            ([cc, "-O1", "-fPIC", "-fno-omit-frame-pointer", *(["-fsanitize=address,undefined"] if opts.sanitize
                                                               else []), *inc, *py_inc, "-c", f"{module}.c",
              "-o", f"{module}.o"], "compiling the cffi wrapper"),
        ], tmp)
        lap(f"compiling the network's C ({parts} part{'s' if parts > 1 else ''}) and the cffi wrapper, in parallel")
        libs = ["-fopenmp", "-lm"] + (["-fsanitize=address,undefined"] if opts.sanitize else [])
        _compile_parallel([
            ([cc, "-shared", "-o", so.name, f"{module}.o", *net_objs, *map(str, objs), *libs], "linking the module"),
            ([cc, *fl, *inc, *exe_inc, "-o", bench.name, f"{net}_bench.c", *_named(every, BENCH_OBJECTS), *net_objs,
              *map(str, objs), *libs], "building the benchmark"),
        ] + ([([cc, *fl, *inc, *exe_inc, "-I", str(resource_dir("runtime_c") / "data"), "-o", f"{net}_train",
                f"{net}_train.c", *_named(every, TRAIN_OBJECTS), *map(str, data_sources()), *net_objs,
                *map(str, objs), *libs, "-lz"],
               "building the training program (needs zlib: apt-get install zlib1g-dev)")]
             if train_src is not None else []), tmp)
        lap("linking the module and the executables")
        _publish(tmp, final, key, need, root)
    lap("publishing to the cache")
    return Built(final, module, so, bench, key, cached=False, net_objects=tuple(final / o for o in net_objs))


@dataclass(frozen=True)
class Library:
    static: Path         # lib<net>.a
    shared: Path         # lib<net>.so
    cached: bool


def build_library(net: str, built: Built, glue_src: str, exports: str, opts: CompileOptions, log=None) -> Library:
    """The network's C library, from the objects of its build (`built`) and the runtime's: `lib<net>.a` and
    `lib<net>.so` (position-independent, like every object here), cached like a build under a key of the
    build's key, the glue and the export list. `glue_src` (<net>_lib.c, compiled with -fvisibility=hidden) ties
    MXNet's predict API to the network; `exports` is the linker version script: the .so exports what it lists and
    nothing else. Linking the library needs -fopenmp -lm and nothing more."""
    log = log or (lambda stage, seconds: None)
    t = time.perf_counter()
    key = _hash("lib", __version__, built.key, glue_src, exports, " ".join(flags(opts)))
    root = Path(cache_dir())
    final = root / key[:2] / key
    a, so = f"lib{net}.a", f"lib{net}.so"
    if _usable(final, key, [a, so], root):
        log("the C library, from the compile cache (checked)", time.perf_counter() - t)
        return Library(final / a, final / so, cached=True)
    root = _cache_root()
    every = runtime_objects(opts)
    objs = [*built.net_objects, *module_objects(every), *_named(every, LIBRARY_ONLY_OBJECTS)]
    cc = shutil.which(opts.cc) or opts.cc
    san = ["-fsanitize=address,undefined"] if opts.sanitize else []
    with _scratch(root) as tmp:
        (tmp / f"{net}_lib.c").write_text(glue_src)
        (tmp / "exports.map").write_text(exports)
        _run([cc, *flags(opts), "-fvisibility=hidden", "-I", str(resource_dir("runtime_c")), "-I", str(built.dir),
              "-c", f"{net}_lib.c", "-o", f"{net}_lib.o"], tmp, "compiling the library's glue")
        members = [f"{net}_lib.o", *map(str, objs)]
        _compile_parallel([
            (["ar", "rcs", a, *members], "archiving the static library (ar, from binutils)"),
            ([cc, "-shared", "-o", so, f"-Wl,-soname,{so}", "-Wl,--version-script=exports.map", "-Wl,--no-undefined",
              *members, "-fopenmp", "-lm", *san], "linking the shared library"),
        ], tmp)
        _publish(tmp, final, key, [a, so], root)
    log("building the C library (lib%s.a, lib%s.so)" % (net, net), time.perf_counter() - t)
    return Library(final / a, final / so, cached=False)
