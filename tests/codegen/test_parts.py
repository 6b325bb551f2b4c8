"""A network of many kernels is compiled as several parts of one <net>.c, in parallel (codegen/render.py:
PART_KERNELS): the parts together are the whole network, each kernel is in exactly one part, and the result is
the network's (numpy); the same file compiled without MXCC_PART is all of it, as a user compiling it by hand
gets."""
import re
import subprocess

import numpy as np

import mxcc
from mxcc import sym
from mxcc.codegen import render
from mxcc.files import resource_dir
from mxcc_testing import CC, needs_gcc, rel_err

pytestmark = needs_gcc


def _chain(n):
    with sym.NameManager():
        h = sym.var("data")
        for i in range(n):
            h = sym.tanh(sym.FullyConnected(h, num_hidden=8, name=f"fc{i}"), name=f"t{i}")
        return h


def test_many_kernels_compile_in_parts_and_compute_the_network(tmp_path, rng):
    n = render.PART_KERNELS + 40                       # fc + tanh fuse: one kernel per layer
    p = {}
    for i in range(n):
        p[f"fc{i}_weight"] = (rng.standard_normal((8, 8)) * 0.4).astype(np.float32)
        p[f"fc{i}_bias"] = rng.standard_normal(8).astype(np.float32) * 0.1
    m = mxcc.compile(_chain(n), {"data": (3, 8)}, p, out_dir=tmp_path / "m", name="net")
    c = (tmp_path / "m" / "net.c").read_text()
    parts = {int(k) for k in re.findall(r"#if MXCC_IN_PART\((\d+)\)", c)}
    assert parts == set(range(render._part_count(n))) and len(parts) > 2
    for i in range(n):                                 # every kernel defined once, declared for the others
        assert c.count(f"MXCC_KERNEL void net_fc{i}(mxcc_ctx *ctx)\n{{") == 1
    x = rng.standard_normal((3, 8)).astype(np.float32)
    want = x.astype(np.float64)
    for i in range(n):
        want = np.tanh(want @ p[f"fc{i}_weight"].T + p[f"fc{i}_bias"])
    assert rel_err(m.forward(data=x)[0], want) <= 1e-5
    # without MXCC_PART the file is the whole network (as `gcc -c net.c` by hand compiles it)
    r = subprocess.run([CC, "-O1", "-march=native", "-fopenmp", "-fPIC", "-std=gnu11", "-I",
                        str(resource_dir("runtime_c")), "-c", "net.c", "-o", "all.o"],
                       cwd=tmp_path / "m", capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    syms = subprocess.run(["nm", "all.o"], cwd=tmp_path / "m", capture_output=True, text=True).stdout
    assert f"net_fc{n - 1}" in syms and "net_forward" in syms


def test_small_networks_stay_one_static_file(tmp_path):
    mxcc.compile(_chain(3), {"data": (1, 8)}, out_dir=tmp_path / "s", name="net")
    c = (tmp_path / "s" / "net.c").read_text()
    assert "MXCC_PART" not in c
    assert all(c.count(f"static MXCC_NOINLINE void net_fc{i}(mxcc_ctx") == 1 for i in range(3))
