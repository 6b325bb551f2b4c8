"""The output directory of a compiled network: its layout, written by the compiler, read by the runtime.

    <net>.c, <net>.h     the generated C
    plan.json            what the compiler decided (`mxcc inspect --json`)
    <module><EXT_SUFFIX> the Python extension module (cffi)
    <net>_bench          the standalone benchmark; <net>_train the training program (classifiers)
    lib<net>.a, lib<net>.so   the network as a C library (inference builds; compiler/library.py)
    include/             its headers: <net>.h, mxcc_runtime.h (and the runtime headers it includes),
                         mxnet/c_predict_api.h
    params.params        the params given to the compile, in MXNet's format
    module.json          what the runtime needs to load the rest (written last: it marks the directory complete)

The runtime (mxcc.runtime) reads a directory through this module alone, never through the compiler.
"""
from __future__ import annotations

import json
from pathlib import Path

from mxcc.errors import BuildError
from mxcc.files import atomic_copy, atomic_write

PARAMS_FILE = "params.params"
MODULE_JSON = "module.json"
PLAN_JSON = "plan.json"


def read_meta(directory) -> dict:
    """The module.json of a compiled directory (BuildError if there is none or it is damaged)."""
    d = Path(directory)
    try:
        return json.loads((d / MODULE_JSON).read_text())
    except FileNotFoundError:
        raise BuildError(f"{d} is not a compiled mxcc module (no {MODULE_JSON}); create it with `mxcc compile`") from None
    except (OSError, ValueError) as e:
        raise BuildError(f"cannot read {d / MODULE_JSON}: {e} (compile the network again)") from None


def params_file(directory) -> Path | None:
    """The params a compiled directory carries, if any."""
    p = Path(directory) / PARAMS_FILE
    return p if p.exists() else None


INCLUDE_DIR = "include"


def write_directory(out, texts: dict[str, str], binaries: list[Path], meta: dict, save_params=None,
                    tree: dict[str, Path | str] | None = None) -> Path:
    """Write a compiled directory: `texts` (file name -> text), copies of `binaries`, the files of `tree`
    (relative path -> a file to copy, or a text), then the params (`save_params(path)`, if given), then
    module.json, last, so that a directory with one is complete."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for fname, text in texts.items():
        atomic_write(out / fname, text)
    for b in binaries:
        atomic_copy(b, out / b.name)
    for rel, src in (tree or {}).items():
        dest = out / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(src, str):
            atomic_write(dest, src)
        else:
            atomic_copy(src, dest)
    if save_params is not None:
        save_params(out / PARAMS_FILE)
    atomic_write(out / MODULE_JSON, json.dumps(meta, indent=1))
    return out
