"""mxcc's own files and the files it writes.

`resource_dir` is the one place that finds templates/ and runtime_c/: package data in an installed mxcc
(mxcc/_data/, see pyproject.toml) or beside mxcc/ in a checkout; `cpuinfo` the one reader of /proc/cpuinfo.

Files written so that nothing is lost: a reader sees the old content or the complete new one, never a part.

Every file mxcc writes for a user or into its cache goes through here: write to a temporary file in the same
folder, flush and fsync, then rename over the target (atomic on POSIX). A new file gets the target's mode
(0644 if it does not exist yet), not mkstemp's 0600.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Union

from mxcc.errors import BuildError

Content = Union[bytes, str, Callable]    # the bytes, text (UTF-8), or a function writing to a binary file


def resource_dir(kind: str) -> Path:
    """`templates` or `runtime_c`: shipped as package data (mxcc/_data/) or beside mxcc/ in a checkout."""
    here = Path(__file__).resolve().parent          # the mxcc package
    for cand in (here / "_data" / kind, here.parent / kind):
        if cand.is_dir():
            return cand
    raise BuildError(f"mxcc installation is incomplete: cannot find its {kind}/ directory near {here}")


def cpuinfo(path: str = "/proc/cpuinfo") -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo ("model name", "cpu family", "model", "flags", ...); {}
    where there is none."""
    try:
        text = Path(path).read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def atomic_write(path, content: Content) -> None:
    """Write `content` to `path` atomically. OSError propagates (the temporary file is removed)."""
    target = Path(path)
    mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content.encode() if isinstance(content, str) else content)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def atomic_copy(src, dst) -> None:
    """Copy `src` to `dst` atomically (with src's mode: executables stay executable)."""
    fd, tmp = tempfile.mkstemp(dir=Path(dst).parent, prefix=f".{Path(dst).name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
