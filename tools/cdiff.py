"""Refactor safety net: compile the reference networks with two versions of mxcc and diff what comes out.

    python tools/cdiff.py [REV]            # REV (default HEAD) against the working tree
    python tools/cdiff.py --render [REV]   # only render, no C compiler: every op case too (~600 builds, 1 min)

For each reference network (tests/data/models: inference builds, and training builds of the MLP and LeNet)
both versions compile the network into a folder of their own and run it on the same input; the script then
compares the generated `<net>.c` and `<net>.h` text, plan.json, and the outputs bit for bit. A refactor must
print no difference (exit status 0); anything else is listed (exit status 1). REV is checked out with
`git worktree` into a temporary folder; both versions share one compile cache (a new one).
--render renders the C (net.c, net.h, the bench and train programs) of every MXNet op case of tests/data/ops
(inference, training with the case's grad_req, poisoning) and of every reference network (inference and
training) with both versions and compares the text: a refactor of templates or lowering must change none.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NETS = [("mlp", {"X": (4, 784)}, False), ("lenet", {"data": (2, 1, 28, 28)}, False),
        ("resnet18_v1_slim", {"data": (1, 3, 224, 224)}, False), ("mobilenet0.25", {"data": (1, 3, 224, 224)}, False),
        ("squeezenet1.1", {"data": (1, 3, 224, 224)}, False), ("mlp", {"X": (8, 784)}, True),
        ("lenet", {"data": (4, 1, 28, 28)}, True)]

# Run inside each tree (PYTHONPATH = that tree): compile, write the sources, run one forward.
CHILD = r"""
import json, sys
from pathlib import Path
import numpy as np
import mxcc
models, out, nets = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
for net, shapes, train in nets:
    d = models / net
    tag = f"{net}-{'train' if train else 'infer'}"
    params = d / f"{net}-0000.params"
    m = mxcc.compile(d / f"{net}-symbol.json", {k: tuple(v) for k, v in shapes.items()}, params,
                     out_dir=out / tag, name="net", train=train)
    rng = np.random.default_rng(0)
    x = {s["name"]: rng.random(tuple(s["shape"]), np.float32) if s["name"] in shapes
         else rng.integers(0, 10, tuple(s["shape"])).astype(np.float32)      # labels
         for s in m.meta["slots"] if s["kind"] == "input" and not s["name"].endswith("_head_grad")}
    outs = m.forward(**x) if not train else m.forward(is_train=True, **x)
    np.savez(out / tag / "outputs.npz", *[np.array(o) for o in outs])
"""


# Render only (the build is replaced by a function that keeps the sources): op cases and networks.
RENDER = r"""
import hashlib, json, sys
from pathlib import Path
import mxcc
import mxcc.compiler.driver as d
data, out = Path(sys.argv[1]), Path(sys.argv[2])
class Rendered(Exception):
    pass
def keep(name, c, h, cdef, bench, opts, train_src=None, **_):
    raise Rendered("\n".join([c, h, bench, train_src or ""]))
d.build = keep
jobs = []
for case, info in json.loads((data / "ops" / "manifest.json").read_text())["cases"].items():
    shapes = {k: tuple(v) for k, v in info["arguments"].items() if k in {"data", "a", "b", "c", "label"}}
    sym = data / "ops" / info["files"]["symbol"]
    req = dict(info["grad_req"])
    jobs += [(case + "-infer", sym, shapes, {}), (case + "-train", sym, shapes, dict(train=True, grad_req=req)),
             (case + "-poison", sym, shapes, dict(train=True, poison=True, grad_req=req))]
for net in sorted(p.name for p in (data / "models").iterdir()):
    rec = json.loads((data / "models" / net / "record.json").read_text())
    shape = {rec.get("input_name", "data"): tuple(rec["input_shape"])}
    sym = data / "models" / net / f"{net}-symbol.json"
    jobs += [(net + "-infer", sym, shape, {}), (net + "-train", sym, shape, dict(train=True))]
texts = {}
for tag, sym, shapes, kw in jobs:
    try:
        mxcc.compile(sym, shapes, name="net", **kw)
        texts[tag] = "no C"
    except Rendered as r:
        texts[tag] = hashlib.sha256(str(r).encode()).hexdigest()
    except Exception as e:
        texts[tag] = f"error: {type(e).__name__}: {e}"
(out / "rendered.json").write_text(json.dumps(texts, indent=1))
"""


def _render(tree: Path, out: Path) -> dict:
    out.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", RENDER, str(ROOT / "tests" / "data"), str(out)], cwd=tree,
                   env=dict(os.environ, PYTHONPATH=str(tree)), check=True)
    return json.loads((out / "rendered.json").read_text())


def _run(tree: Path, out: Path, env: dict) -> None:
    nets = [(n, s, t) for n, s, t in NETS if (ROOT / "tests" / "data" / "models" / n / f"{n}-0000.params").exists()]
    subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "tests" / "data" / "models"), str(out), json.dumps(nets)],
                   cwd=tree, env=dict(env, PYTHONPATH=str(tree)), check=True)


def main(argv: list[str]) -> int:
    render = "--render" in argv
    argv = [a for a in argv if a != "--render"]
    rev = argv[0] if argv else "HEAD"
    with tempfile.TemporaryDirectory(prefix="mxcc-cdiff-") as tmp:
        tmp = Path(tmp)
        old_tree = tmp / "old"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(old_tree), rev], cwd=ROOT, check=True)
        try:
            if render:
                a, b = _render(old_tree, tmp / "a"), _render(ROOT, tmp / "b")
            else:
                env = dict(os.environ, MXCC_CACHE_DIR=str(tmp / "cache"))
                _run(old_tree, tmp / "a", env)
                _run(ROOT, tmp / "b", env)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=ROOT, check=True)
        if render:
            diffs = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
            print(f"rendered {len(a)} builds with {rev} and {len(b)} with the working tree")
            print(f"{rev} vs the working tree: " + ("no difference" if not diffs else
                                                   f"{len(diffs)} differ: " + ", ".join(diffs[:20])))
            return 1 if diffs else 0
        diffs = []
        for tag in sorted(p.name for p in (tmp / "a").iterdir()):
            a, b = tmp / "a" / tag, tmp / "b" / tag
            for f in ("net.c", "net.h", "plan.json"):
                if (a / f).read_bytes() != (b / f).read_bytes():
                    diffs.append(f"{tag}/{f}")
            oa, ob = (a / "outputs.npz").read_bytes(), (b / "outputs.npz").read_bytes()
            if oa != ob:
                diffs.append(f"{tag}/outputs")
        tags = sorted(p.name for p in (tmp / "a").iterdir())
        print(f"compared {len(tags)} builds ({', '.join(tags)}): C text, plan.json, outputs")
        print(f"{rev} vs the working tree: " + ("no difference" if not diffs else "differ: " + ", ".join(diffs)))
        return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
