"""Helpers of the C library tests (tests/capi/): build and run C and C++ programs against a compiled directory."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

CC = os.environ.get("CC", "gcc")
CXX = os.environ.get("CXX", "g++")
HERE = Path(__file__).resolve().parent
MODELS = {"lenet": (2, 1, 28, 28), "resnet18_v1_slim": (2, 3, 224, 224)}


def run(cmd, ok=True, env=None, timeout=300, cwd=None) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    if ok:
        assert r.returncode == 0, f"{' '.join(map(str, cmd))} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def build_c(out: Path, sources, lib_dir: Path, net: str, shared: bool = False, cxx: bool = False, extra=()) -> Path:
    """A program from `sources` against a compiled directory: -I DIR/include, then DIR/lib<net>.a -fopenmp -lm
    (static), or -L DIR -l<net> (shared, with an rpath)."""
    link = (["-L", lib_dir, f"-l{net}", f"-Wl,-rpath,{lib_dir}"] if shared
            else [lib_dir / f"lib{net}.a", "-fopenmp", "-lm"])
    run([CXX if cxx else CC, "-O1", "-Wall", "-Werror", "-I", lib_dir / "include", *sources, "-o", out, *link,
         *extra])
    return out
