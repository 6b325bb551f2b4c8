"""Loading a compiled extension module by path: once per process, and never a crash on a damaged file.

The runtime side of the build (mxcc.runtime.module imports it; the compiler does not need it), so that loading a
compiled directory never imports the compiler.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import struct
import sys
from pathlib import Path

from mxcc.errors import BuildError


def _elf_too_short(path: Path) -> str | None:
    """Why an ELF file is cut short, else None. dlopen maps a truncated library's segments and then dies of
    SIGBUS touching pages past the end, so loading must not be how we find out."""
    with open(path, "rb") as f:
        head = f.read(64)
        size = os.fstat(f.fileno()).st_size
        if head[:4] != b"\x7fELF":
            return None                     # not ELF: let the loader say what it is
        wide, end = head[4:5] == b"\x02", "<" if head[5:6] == b"\x01" else ">"
        hdr = struct.Struct(end + ("QQQIHHHHHH" if wide else "IIIIHHHHHH"))
        if len(head) < 24 + hdr.size:
            return f"file too short ({size} bytes)"
        _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _ = hdr.unpack_from(head, 24)
        need = max(shoff + shnum * shentsize, phoff + phnum * phentsize)
        if size >= need:
            f.seek(phoff)
            phdrs = f.read(phnum * phentsize)
            for i in range(phnum):      # PT_LOAD segments: p_offset + p_filesz must lie in the file
                try:
                    p_type, off, filesz = struct.unpack_from(end + ("I4xQ8x8xQ" if wide else "II8xI"), phdrs,
                                                             i * phentsize)
                except struct.error:
                    return "its ELF program headers are garbled"
                if p_type == 1:
                    need = max(need, off + filesz)
        return f"file too short ({size} bytes, its ELF headers need {need})" if size < need else None


def load_extension(name: str, path: Path):
    """Import the cffi extension module `name` from `path` (once per process: later calls get the same
    module); a file that cannot be loaded is a BuildError, not a raw ImportError or a crash."""
    mod = sys.modules.get(name)
    if mod is not None:
        return mod
    try:
        short = _elf_too_short(path)
        if short:
            raise ImportError(f"{path}: {short}")
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
    except (ImportError, OSError) as e:
        raise BuildError(f"cannot load the compiled module {path}: {e} "
                         f"(the file is damaged; recompile, or delete it)") from e
    sys.modules[name] = mod
    return mod
