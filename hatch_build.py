"""Wheel build hook: compile mxcc's C runtime for this host while `pip install` builds the wheel.

The first `mxcc.compile` after an install then finds the runtime ready (mxcc/_data/prebuilt/<key>/, sealed
like a cache entry; mxcc.compiler.build.runtime_objects) and compiles only the network's own C. The key is
the one runtime_objects computes (sources, flags, compiler version, the CPU -march=native means here), so a
wheel taken to another machine or compiler is simply not used there. Without a working C compiler at install
time the hook prints why and the runtime is built into the cache on first use instead, as before. Editable
installs skip it (they compile on first use, into the cache).
"""
from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
import types
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class RuntimePrebuild(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        out = Path(tempfile.mkdtemp(prefix="mxcc-prebuilt-"))
        self._prebuilt = out            # removed in finalize, once the wheel holds it
        # mxcc.compiler.build, without mxcc/__init__.py (numpy, cffi and jinja2 are not in the build environment)
        saved = {k: v for k, v in sys.modules.items() if k == "mxcc" or k.startswith("mxcc.")}
        pkg = types.ModuleType("mxcc")
        pkg.__path__ = [str(Path(self.root) / "mxcc")]
        sys.modules["mxcc"] = pkg
        try:
            build = importlib.import_module("mxcc.compiler.build")
            key = build.prebuild_runtime(out)
        except Exception as e:          # noqa: BLE001 (no compiler here: build on first use instead)
            print(f"mxcc: the C runtime was not prebuilt ({type(e).__name__}: {e}); it is compiled on first use",
                  file=sys.stderr)
            shutil.rmtree(out, ignore_errors=True)
            return
        finally:
            for k in [k for k in sys.modules if k == "mxcc" or k.startswith("mxcc.")]:
                del sys.modules[k]
            sys.modules.update(saved)
        print(f"mxcc: prebuilt the C runtime for this host ({key[:12]})", file=sys.stderr)
        build_data["force_include"][str(out)] = "mxcc/_data/prebuilt"
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def finalize(self, version: str, build_data: dict, artifact_path: str) -> None:
        prebuilt = getattr(self, "_prebuilt", None)
        if prebuilt is not None:
            shutil.rmtree(prebuilt, ignore_errors=True)
