"""Build: generated C + the runtime -> a cffi extension module and a standalone benchmark, cached.

The cache key is a sha256 of everything that affects the binaries: the generated sources, every runtime
file, the flags, `gcc --version`, the cffi version, the Python ABI tag and the mxcc version (never mtimes).
Builds happen in `cache/tmp-<pid>-<random>/` and are published with one `os.rename` to `cache/<2 hex>/<key>/`;
a process that loses the race keeps the winner's copy, so concurrent compiles of one network all succeed.
Runtime object files are cached the same way under their own key, so a new network compiles only its own
C. This module also owns `resource_dir()`, the one place that finds templates/ and runtime_c/.
"""
from __future__ import annotations

import contextlib
import functools
import io
import hashlib
import os
import shutil
import subprocess
import sysconfig
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from mxcc import __version__
from mxcc.errors import BuildError
from mxcc.options import CompileOptions, cache_dir

EXT_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def resource_dir(kind: str) -> Path:
    """`templates` or `runtime_c`: shipped as package data (mxcc/_data/) or beside mxcc/ in a checkout."""
    here = Path(__file__).resolve().parent
    for cand in (here / "_data" / kind, here.parent / kind):
        if cand.is_dir():
            return cand
    raise BuildError(f"mxcc installation is incomplete: cannot find its {kind}/ directory near {here}")


def runtime_sources() -> list[Path]:
    """The runtime every module links; runtime_c/data/ (IDX reading, zlib) only goes into `<net>_train`."""
    root = resource_dir("runtime_c")
    return sorted(p for p in root.rglob("*.c") if not {"tests", "data"} & set(p.relative_to(root).parts))


def train_sources() -> list[Path]:
    return sorted((resource_dir("runtime_c") / "data").glob("*.c"))


def runtime_files() -> list[Path]:
    root = resource_dir("runtime_c")
    return sorted(p for p in root.rglob("*") if p.suffix in (".c", ".h"))


def flags(opts: CompileOptions) -> list[str]:
    f = [opts.opt_level, f"-march={opts.isa}", "-fopenmp", "-g", "-fno-omit-frame-pointer",
         "-mno-omit-leaf-frame-pointer", "-fno-optimize-sibling-calls", "-fPIC", "-std=gnu11",
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
        procs.append((subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
                      cmd, what))
    errors = []
    for p, cmd, what in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            tail = "\n".join(err.strip().splitlines()[-25:])
            errors.append(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{tail}")
    if errors:
        raise BuildError("\n".join(errors))


def _publish(tmp: Path, final: Path) -> Path:
    """Atomically move a finished build into place; if another process won the race, keep theirs."""
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, final)
    except OSError:
        if not (final / "DONE").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _tmpdir(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    d = root / f"tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    return d


def runtime_objects(opts: CompileOptions) -> list[Path]:
    """The runtime compiled once per (sources, flags, compiler) and cached."""
    cc = shutil.which(opts.cc) or opts.cc
    fl = flags(opts)
    key = _hash("runtime", __version__, compiler_version(opts.cc), " ".join(fl),
                *[p.read_bytes() for p in runtime_files()], *[str(p.relative_to(resource_dir("runtime_c")))
                                                                for p in runtime_files()])
    root = Path(cache_dir())
    final = root / "runtime" / key
    srcs = runtime_sources()
    names = [str(p.relative_to(resource_dir("runtime_c"))).replace(os.sep, "__")[:-2] + ".o" for p in srcs]
    if not (final / "DONE").exists():
        tmp = _tmpdir(root)
        inc = str(resource_dir("runtime_c"))
        _compile_parallel([([cc, *fl, "-I", inc, "-c", str(s), "-o", n], f"compiling {s.name}")
                           for s, n in zip(srcs, names)], tmp)
        (tmp / "DONE").write_text(key)
        _publish(tmp, final)
    return [final / n for n in names]


@dataclass(frozen=True)
class Built:
    dir: Path            # the cache directory holding the binaries
    module: str          # cffi extension module name
    so: Path
    bench: Path
    key: str
    cached: bool


def build(net: str, c_src: str, h_src: str, cdef: str, bench_src: str, opts: CompileOptions,
          train_src: str | None = None) -> Built:
    """Compile (or fetch from the cache) the extension module and the benchmark for one network, and with
    `train_src` the standalone training program `<net>_train` (links zlib to read gzipped IDX files)."""
    import cffi
    fl = flags(opts)
    cc = shutil.which(opts.cc) or opts.cc
    key = _hash("net", __version__, compiler_version(opts.cc), " ".join(fl), cffi.__version__, EXT_SUFFIX,
                c_src, h_src, cdef, bench_src, train_src or "",
                *[p.read_bytes() for p in runtime_files()])
    module = f"_mxcc_{net}_{key[:16]}"
    root = Path(cache_dir())
    final = root / key[:2] / key
    so, bench = final / (module + EXT_SUFFIX), final / f"{net}_bench"
    if (final / "DONE").exists():
        return Built(final, module, so, bench, key, cached=True)
    objs = runtime_objects(opts)
    tmp = _tmpdir(root)
    try:
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
        py_inc = ["-I", sysconfig.get_paths()["include"]]
        _compile_parallel([
            ([cc, *fl, *inc, "-c", f"{net}.c", "-o", f"{net}.o"], f"compiling {net}.c"),
            # the wrapper is glue (argument conversion): -O1 compiles in half the time of -O3 -g
            ([cc, "-O1", "-fPIC", "-fno-omit-frame-pointer", *(["-fsanitize=address,undefined"] if opts.sanitize
                                                               else []), *inc, *py_inc, "-c", f"{module}.c",
              "-o", f"{module}.o"], "compiling the cffi wrapper"),
        ], tmp)
        libs = ["-fopenmp", "-lm"] + (["-fsanitize=address,undefined"] if opts.sanitize else [])
        _compile_parallel([
            ([cc, "-shared", "-o", so.name, f"{module}.o", f"{net}.o", *map(str, objs), *libs], "linking the module"),
            ([cc, *fl, *inc, "-o", bench.name, f"{net}_bench.c", f"{net}.o", *map(str, objs), *libs],
             "building the benchmark"),
        ] + ([([cc, *fl, *inc, "-I", str(resource_dir("runtime_c") / "data"), "-o", f"{net}_train",
                f"{net}_train.c", *map(str, train_sources()), f"{net}.o", *map(str, objs), *libs, "-lz"],
               "building the training program (needs zlib: apt-get install zlib1g-dev)")]
             if train_src is not None else []), tmp)
        (tmp / "DONE").write_text(key)
        _publish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Built(final, module, so, bench, key, cached=False)


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write a file so readers see the old or the new content, never a partial one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_copy(src: Path, dst: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=Path(dst).parent, prefix=f".{Path(dst).name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
