"""A context's arena is a mapping of its own, advised as huge pages (runtime_c/ctx.c big_alloc), also in a process
where glibc has raised its mmap threshold by freeing a large block: malloc would then serve the arena from heap
pages already mapped 4 KiB each, and a network loaded after another was freed ran ~3% slower."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mxcc_testing import needs_gcc

pytestmark = [needs_gcc, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux mappings")]

SCRIPT = textwrap.dedent("""
    import numpy as np
    import mxcc
    from mxcc import sym

    big = np.ones(24 << 18, np.float32)   # 24 MiB, mapped by glibc; freeing it raises the mmap threshold to 24 MiB
    del big
    rng = np.random.default_rng(0)
    p = {"fc1_weight": rng.standard_normal((2048, 256)).astype(np.float32) * 0.05,
         "fc1_bias": np.zeros(2048, np.float32),
         "fc2_weight": rng.standard_normal((16, 2048)).astype(np.float32) * 0.05,
         "fc2_bias": np.zeros(16, np.float32)}
    with sym.NameManager():
        h = sym.relu(sym.FullyConnected(sym.var("data"), num_hidden=2048, name="fc1"))
        y = sym.FullyConnected(h, num_hidden=16, name="fc2")
    m = mxcc.compile(y, {"data": (512, 256)}, p, threads=1)
    x = rng.standard_normal((512, 256)).astype(np.float32)
    out = m.forward(data=x)[0]
    want = np.maximum(x @ p["fc1_weight"].T, 0) @ p["fc2_weight"].T
    assert np.abs(out - want).max() <= 1e-4 * np.abs(want).max(), "wrong result"
    arena = m.meta["arena_bytes"]
    assert arena >= 4 << 20, arena
    # the mappings advised as huge pages ('hg'), and whether each is the heap's
    maps, cur = [], None
    for line in open("/proc/self/smaps"):
        head = line.split()
        if "-" in head[0] and ":" not in head[0]:
            lo, hi = (int(v, 16) for v in head[0].split("-"))
            cur = [hi - lo, len(head) > 5 and head[5] == "[heap]"]
        elif head[0] == "VmFlags:" and "hg" in head[1:]:
            maps.append(cur)
    print(arena, maps)
    assert any(size >= arena and not heap for size, heap in maps), (arena, maps)
""")


def test_arena_is_its_own_huge_page_mapping_after_malloc_raised_its_threshold():
    if not Path("/sys/kernel/mm/transparent_hugepage").exists():
        pytest.skip("a kernel without transparent huge pages (madvise refuses the advice)")
    if "VmFlags" not in Path("/proc/self/smaps").read_text():
        pytest.skip("no VmFlags in /proc/self/smaps")
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, env=os.environ)
    assert r.returncode == 0, r.stdout + r.stderr
