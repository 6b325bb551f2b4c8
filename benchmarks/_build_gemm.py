"""Build runtime_c/gemm/ into a cffi extension module: the one helper tests/runtime and benchmarks/gemm.py share.

The cdef is the public header (mxcc_gemm.h) plus the internal one (gemm_internal.h) with their
preprocessor lines removed, so the declarations cannot drift from the C; the header's ISA conditions
(`#if defined(__AVX512F__)` ...) are evaluated against the compiler's predefined macros for the target, so
the cdef declares exactly the kernels that build defines. A few extra lines expose the block sizes and
OpenMP's thread setters. Compiled in API mode with the flags generated code uses
(-O3 -march=native -fopenmp -g -fno-omit-frame-pointer, C11, never -ffast-math). The tests link the module
against mxcc's own runtime objects instead (`objects`), for -march=native, x86-64-v3 (AVX2 + FMA) and x86-64
(plain C), to keep every path tested on an AVX-512 machine.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import subprocess
from pathlib import Path

GEMM_DIR = Path(__file__).resolve().parent.parent / "runtime_c" / "gemm"
CFLAGS = ("-O3", "-fopenmp", "-g", "-fno-omit-frame-pointer", "-std=c11")  # plus -march=<target>

_EXTRA_CDEF = """
#define MXCC_GEMM_MR ...
#define MXCC_GEMM_NR ...
#define MXCC_GEMM_SMALLM_MAX ...
void omp_set_num_threads(int);
int omp_get_max_threads(void);
void mxcc_pool_enable(int mode);
"""


@functools.lru_cache(maxsize=None)
def predefined_macros(march: str) -> frozenset[str]:
    """Names the C compiler predefines for -march=<march> (__AVX512F__, __AVX2__, __FMA__, ...)."""
    cc = os.environ.get("CC", "gcc")
    out = subprocess.run([cc, f"-march={march}", "-dM", "-E", "-x", "c", os.devnull],
                         capture_output=True, text=True, check=True).stdout
    return frozenset(line.split()[1] for line in out.splitlines() if line.startswith("#define "))


def _condition(expr: str, macros: frozenset[str]) -> bool:
    """An `#if` condition made of defined(X), !, && and || (all the headers use)."""
    expr = re.sub(r"defined\s*\(\s*(\w+)\s*\)", lambda m: str(m.group(1) in macros), expr)
    expr = expr.replace("&&", " and ").replace("||", " or ").replace("!", " not ")
    if not re.fullmatch(r"[\sA-Za-z()]*", expr) or set(re.findall(r"\w+", expr)) - {"True", "False", "and", "or", "not"}:
        raise ValueError(f"unsupported #if condition in a GEMM header: {expr!r}")
    return bool(eval(expr))  # noqa: S307 - only True/False/and/or/not/parentheses reach here


def _declarations(header: Path, macros: frozenset[str]) -> str:
    """The header's declarations that the target compiles: preprocessor lines removed, `#if`/`#ifdef`/
    `#ifndef` blocks kept or dropped as the target's predefined macros say (include guards are not
    predefined, so their `#ifndef` holds; `__cplusplus` is not defined in C)."""
    out, active = [], [True]  # active[-1]: are we inside lines the target compiles
    for line in header.read_text().splitlines():
        stripped = line.strip()
        directive = re.match(r"#\s*(\w+)\s*(.*)", stripped)
        if directive is None:
            if all(active):
                out.append(line)
            continue
        word, rest = directive.group(1), directive.group(2).split("/*")[0].strip()
        if word == "if":
            active.append(_condition(rest, macros))
        elif word in ("ifdef", "ifndef"):
            active.append((rest in macros) == (word == "ifdef"))
        elif word == "else":
            active[-1] = not active[-1]
        elif word == "endif":
            active.pop()
        elif word == "elif":
            raise ValueError(f"#elif is not supported in {header.name}")
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out))


def gemm_sources() -> list[Path]:
    """Every C file of runtime_c/gemm/, in a stable order, and the thread pool its parallel paths run on."""
    return sorted(GEMM_DIR.glob("*.c")) + [GEMM_DIR.parent / "pool" / "pool.c"]


def build_gemm(build_dir: str | Path, module_name: str = "_mxcc_gemm", march: str = "native", objects=()):
    """Compile the GEMM sources for -march=<march> into build_dir and import the module; returns (ffi, lib).
    `objects`: link these instead (mxcc's runtime objects for that -march, which hold the GEMM: the tests').

    The module name carries a hash of the sources, headers, cdef, flags and objects' paths, so a later call with
    the same build_dir (a benchmark's worker processes) imports the existing build instead of compiling again."""
    import cffi  # imported here so that importing this file never needs cffi

    macros = predefined_macros(march)
    cdef = (_declarations(GEMM_DIR / "mxcc_gemm.h", macros) + _declarations(GEMM_DIR / "gemm_internal.h", macros)
            + _EXTRA_CDEF)
    cflags = (*CFLAGS, f"-march={march}")
    digest = hashlib.sha256(cdef.encode() + " ".join(cflags).encode() + "\n".join(map(str, objects)).encode())
    for path in [*sorted(GEMM_DIR.glob("*.[ch]")), *sorted((GEMM_DIR.parent / "pool").glob("*.[ch]")),
                 GEMM_DIR.parent / "parallel.h"]:
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
            '#include <omp.h>\n#include "gemm_internal.h"\n#include "../pool/mxcc_pool.h"\n',
            sources=[] if objects else [str(p) for p in gemm_sources()],
            extra_objects=[str(o) for o in objects],
            include_dirs=[str(GEMM_DIR)],
            extra_compile_args=list(cflags),
            extra_link_args=["-fopenmp"],
            libraries=["m"],
        )
        so_path = ffi.compile(tmpdir=str(build_dir), verbose=False)
    spec = importlib.util.spec_from_file_location(module_name, so_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ffi, module.lib
