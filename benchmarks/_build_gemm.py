"""Build runtime_c/gemm/ into a cffi extension module: the one helper tests/runtime and benchmarks/gemm.py share.

The cdef is the public header (mxcc_gemm.h) plus the internal one (gemm_internal.h) with their
preprocessor lines removed, so the declarations cannot drift from the C; a few extra lines expose the
block sizes and OpenMP's thread setters. Compiled in API mode with the flags generated code uses
(-O3 -march=native -fopenmp -g -fno-omit-frame-pointer, C11, never -ffast-math).
"""
from __future__ import annotations

import hashlib
import importlib.util
import re
from pathlib import Path

GEMM_DIR = Path(__file__).resolve().parent.parent / "runtime_c" / "gemm"
CFLAGS = ("-O3", "-march=native", "-fopenmp", "-g", "-fno-omit-frame-pointer", "-std=c11")

_EXTRA_CDEF = """
#define MXCC_GEMM_MR ...
#define MXCC_GEMM_NR ...
#define MXCC_GEMM_SMALLM_MAX ...
void omp_set_num_threads(int);
int omp_get_max_threads(void);
"""


def _declarations(header: Path) -> str:
    """The header's text without preprocessor lines and without `#ifdef __cplusplus` blocks."""
    out, skip = [], 0
    for line in header.read_text().splitlines():
        stripped = line.strip()
        if skip:
            skip += stripped.startswith("#if")
            skip -= stripped.startswith("#endif")
            continue
        if stripped.startswith("#ifdef __cplusplus"):
            skip = 1
        elif not stripped.startswith("#"):
            out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out))


def gemm_sources() -> list[Path]:
    """Every C file of runtime_c/gemm/, in a stable order."""
    return sorted(GEMM_DIR.glob("*.c"))


def build_gemm(build_dir: str | Path, module_name: str = "_mxcc_gemm"):
    """Compile the GEMM sources into build_dir and import the module; returns (ffi, lib).

    The module name carries a hash of the sources, headers, cdef and flags, so a later call with the same
    build_dir (a benchmark's worker processes) imports the existing build instead of compiling again."""
    import cffi  # imported here so that importing this file never needs cffi

    cdef = _declarations(GEMM_DIR / "mxcc_gemm.h") + _declarations(GEMM_DIR / "gemm_internal.h") + _EXTRA_CDEF
    digest = hashlib.sha256(cdef.encode() + " ".join(CFLAGS).encode())
    for path in sorted(GEMM_DIR.glob("*.[ch]")):
        digest.update(path.name.encode() + path.read_bytes())
    module_name = f"{module_name}_{digest.hexdigest()[:12]}"
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    built = sorted(build_dir.glob(f"{module_name}.*.so")) + sorted(build_dir.glob(f"{module_name}.so"))
    if built:
        so_path = str(built[0])
    else:
        ffi = cffi.FFI()
        ffi.cdef(cdef)
        ffi.set_source(
            module_name,
            '#include <omp.h>\n#include "gemm_internal.h"\n',
            sources=[str(p) for p in gemm_sources()],
            include_dirs=[str(GEMM_DIR)],
            extra_compile_args=list(CFLAGS),
            extra_link_args=["-fopenmp"],
            libraries=["m"],
        )
        so_path = ffi.compile(tmpdir=str(build_dir), verbose=False)
    spec = importlib.util.spec_from_file_location(module_name, so_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ffi, module.lib
