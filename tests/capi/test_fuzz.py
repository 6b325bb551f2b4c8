"""The C readers of untrusted bytes under AddressSanitizer and UBSan, fed files that hypothesis mutates from valid
ones (fuzz_harness.c): the .params reader against mxcc.params.load_params (the same files accepted, the same
arrays read), binding params to a network's slots and MXNDListCreate on the same bytes, the symbol JSON check,
and mxcc_attr_canonical against its Python twin. Any sanitizer report fails the test.

The budget is small (2,000 .params and 1,000 JSON files, a few seconds with the harness build); raise FUZZ_FILES to fuzz longer:
    FUZZ_FILES=20000 pytest tests/capi/test_fuzz.py
"""
from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest

from capi_helpers import CC, run
from mxcc.compiler import library
from mxcc.codegen.render import environment
from mxcc.files import resource_dir
from mxcc.graph import load_json
from mxcc.params import DTYPE_TO_FLAG, load_params, save_params
from mxcc.errors import ParamsError
from mxcc_testing import ROOT

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FILES = int(os.environ.get("FUZZ_FILES", "2000"))
BATCH = 100
RUNS = max(1, FILES // BATCH)
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")

# the fake network the harness binds params to: its slots only (no kernels)
FZ_SLOTS = [("data", "input", (2, 3)), ("w", "param", (4, 3)), ("b", "param", (4,)), ("m", "aux", (4,)),
            ("out", "output", (2, 4))]


def _fz_net_c() -> str:
    rows = "\n".join(f'    {{ "{n}", "{k}", {len(s)}, {{ {", ".join(map(str, s))} }}, {int(np.prod(s))} }},'
                     for n, k, s in FZ_SLOTS)
    return f"""#include "fz.h"
static const mxcc_slot_info fz_slots[] = {{
{rows}
}};
static void fz_prepare(mxcc_ctx *ctx) {{ (void)ctx; }}
static mxcc_ctx *fz_create(char *err, size_t errlen) {{ snprintf(err, errlen, "fake network"); return NULL; }}
const mxcc_net fz_net = {{ .name = "fz", .num_slots = {len(FZ_SLOTS)}, .slots = fz_slots, .ctx_create = fz_create,
                          .prepare = fz_prepare }};
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    (d / "fz.h").write_text('#include <stdio.h>\n#include "mxcc_runtime.h"\nextern const mxcc_net fz_net;\n')
    (d / "fz_net.c").write_text(_fz_net_c())
    graph = load_json(ROOT / "examples/data/mlp/mlp-symbol.json")
    (d / "fz_lib.c").write_text(library.render_glue(environment(str(resource_dir("templates"))), "fz", graph, "mlp"))
    rt = resource_dir("runtime_c")
    exe = d / "fuzz_harness"
    run([CC, "-O1", "-g", "-std=gnu11", "-Wall", *SANITIZE, "-I", rt, "-I", d, "-o", exe,
         os.path.join(os.path.dirname(__file__), "fuzz_harness.c"), d / "fz_net.c", d / "fz_lib.c",
         rt / "params" / "params.c", rt / "capi" / "api.c", rt / "capi" / "symbol.c", rt / "capi" / "c_predict_api.c"])
    return exe, d


def _run_harness(harness, mode: str, paths: list) -> list[str]:
    exe, d = harness
    lst = d / f"{mode}.list"
    lst.write_text("".join(f"{p}\n" for p in paths))
    r = run([exe, mode, lst], ok=False, env=ENV)
    assert r.returncode == 0 and "runtime error" not in r.stderr and "AddressSanitizer" not in r.stderr, \
        r.stderr[-6000:]
    lines = r.stdout.splitlines()
    assert len(lines) == len(paths)
    return lines


# ---- seeds: small valid files of every record version, and the one MXNet wrote ----

def _shape(ndim_dims, legacy=False):
    if legacy:
        return struct.pack(f"<I{len(ndim_dims)}I", len(ndim_dims), *ndim_dims)
    return struct.pack(f"<i{len(ndim_dims)}q", len(ndim_dims), *ndim_dims)


def _file(records: list[bytes], names: list[str] | None) -> bytes:
    out = struct.pack("<QQQ", 0x112, 0, len(records)) + b"".join(records)
    names = names or []
    return out + struct.pack("<Q", len(names)) + b"".join(struct.pack("<Q", len(n.encode())) + n.encode()
                                                          for n in names)


def _dense(magic, arr, stype=True):
    head = struct.pack("<I", magic) + (struct.pack("<i", 0) if stype else b"")
    return head + _shape(arr.shape) + struct.pack("<iii", 1, 0, DTYPE_TO_FLAG[arr.dtype.newbyteorder("=")]) + \
        arr.astype(arr.dtype.newbyteorder("<")).tobytes()


def seeds(tmp) -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    w, b, m = (rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (4,), (4,)))
    out = {}
    p = tmp / "v2.params"
    save_params(p, {"arg:w": w, "arg:b": b.astype(np.float64), "aux:m": m.astype(np.float16)})
    out["v2"] = p.read_bytes()
    save_params(p, {"w": w.astype(np.int32), "b": (b > 0), "m": m.astype(np.uint8), "x": np.arange(3, dtype=np.int64)})
    out["v2_plain"] = p.read_bytes()
    out["v1"] = _file([_dense(0xF993FAC8, w, stype=False), _dense(0xF993FAC8, b, stype=False)], ["arg:w", "arg:b"])
    legacy = struct.pack("<I", 2) + struct.pack("<II", 4, 3) + struct.pack("<iii", 1, 0, 0) + w.tobytes()
    out["legacy"] = _file([legacy], None)
    scalar = struct.pack("<Ii", 0xF993FACA, 0) + struct.pack("<i", 0) + struct.pack("<iii", 1, 0, 0) + b"\0\0\x80?"
    unknown = struct.pack("<Ii", 0xF993FACA, 0) + _shape((-1, 3))
    none = struct.pack("<Ii", 0xF993FAC9, 0) + struct.pack("<i", 0)
    out["v3"] = _file([scalar, unknown, none, _dense(0xF993FACA, m)], ["s", "u", "n", "aux:m"])
    sparse = (struct.pack("<Ii", 0xF993FAC9, 1) + _shape((2, 3)) + _shape((4, 3)) + struct.pack("<iii", 1, 0, 0)
              + struct.pack("<i", 6) + _shape((2,)) + np.zeros(6, np.float32).tobytes()
              + np.array([0, 2], np.int64).tobytes())
    bf16 = struct.pack("<Ii", 0xF993FAC9, 0) + _shape((4,)) + struct.pack("<iii", 1, 0, 12) + bytes(8)
    out["odd"] = _file([sparse, bf16, _dense(0xF993FAC9, w)], ["sp", "bf", "arg:w"])
    out["mxnet"] = (ROOT / "examples/data/mlp/mlp-0000.params").read_bytes()
    return out


def _checksum(raw: bytes) -> int:
    b = np.frombuffer(raw, np.uint8).astype(np.uint64)
    return int(np.sum(b * ((np.arange(len(b), dtype=np.uint64) % np.uint64(65521)) + np.uint64(1)), dtype=np.uint64))


def _python_line(path) -> str | None:
    """What the C line must say of the arrays when Python accepts the file (None: Python refuses it)."""
    try:
        arrays = load_params(path)
    except ParamsError:
        return None
    toks = []
    for name, a in arrays.items():
        flag = DTYPE_TO_FLAG[a.dtype.newbyteorder("=")]
        le = a.astype(a.dtype.newbyteorder("<")) if a.dtype.itemsize > 1 else a
        dims = "x".join(map(str, a.shape))
        toks.append(f"{name.encode().hex()}:{flag}:{dims}:{_checksum(le.tobytes()):016x}:"
                    f"{_checksum(a.astype('<f4').tobytes()):016x}")
    return " ".join(toks)


INTERESTING32 = [0, 1, 2, 3, 4, 8, 12, 32, 33, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
                 0xFFFFFFFE, 0xF993FAC8, 0xF993FAC9, 0xF993FACA]
INTERESTING64 = [0, 1, 3, 0x112, 2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64 - 8]

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 2**31), st.integers(0, 7)),
    st.tuples(st.just("set32"), st.integers(0, 2**31), st.sampled_from(INTERESTING32)),
    st.tuples(st.just("set64"), st.integers(0, 2**31), st.sampled_from(INTERESTING64)),
    st.tuples(st.just("truncate"), st.integers(0, 2**31), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 2**31), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), st.integers(0, 2**31), st.integers(1, 16)),
)


def mutate(data: bytes, muts, focus: int | None) -> bytes:
    """Apply the mutations; `focus`: positions only within the first and last `focus` bytes (big files)."""
    buf = bytearray(data)
    for kind, pos, arg in muts:
        n = len(buf)
        if n == 0:
            break
        if focus and n > 2 * focus:
            pos = pos % (2 * focus)
            pos = pos if pos < focus else n - 2 * focus + pos
        pos %= n
        if kind == "flip":
            buf[pos] ^= 1 << arg
        elif kind == "set32":
            buf[pos:pos + 4] = struct.pack("<I", arg)[: max(0, n - pos)]
        elif kind == "set64":
            buf[pos:pos + 8] = struct.pack("<Q", arg)[: max(0, n - pos)]
        elif kind == "truncate":
            del buf[pos:]
        elif kind == "insert":
            buf[pos:pos] = arg
        else:
            del buf[pos:pos + arg]
    return bytes(buf)


def test_seeds_read_as_python_reads_them(harness, tmp_path):
    s = seeds(tmp_path)
    paths = []
    for name, data in s.items():
        p = tmp_path / f"{name}.params"
        p.write_bytes(data)
        paths.append(p)
    lines = _run_harness(harness, "params", paths)
    for p, line in zip(paths, lines):
        arrays, bind, _ = line.split(" | ")
        want = _python_line(p)
        if p.stem == "odd":
            assert want is None and ":unusable" in arrays
            continue
        assert want is not None
        got = " ".join(t for t in arrays.split()[2:] if not t.endswith(":none"))
        assert got == want, p.stem
    verdict = dict(zip((p.stem for p in paths), lines))
    assert "bind 0 0" in verdict["v2"]            # the fake network's params, by arg:/aux: names
    assert "bind -1 0" in verdict["v2_plain"]    # an extra array: refused, or ignored with MXCC_API_ALLOW_EXTRA
    assert "ndlist 0" in verdict["mxnet"]


@settings(max_examples=RUNS, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from(["v2", "v2_plain", "v1", "legacy", "v3", "odd", "mxnet"]),
                          st.lists(mutation, min_size=1, max_size=3)), min_size=BATCH, max_size=BATCH))
def test_mutated_params_files(harness, tmp_path_factory, batch):
    """The C reader accepts a mutated file exactly when Python does (records Python refuses to load, sparse and
    bfloat16, parse in C and are refused at binding), reads the same arrays, and nothing it does with the bytes
    (binding, MXNDListCreate) trips a sanitizer."""
    d = tmp_path_factory.mktemp("mutated")
    base = seeds(d)
    paths = []
    for i, (seed, muts) in enumerate(batch):
        p = d / f"{i}.params"
        p.write_bytes(mutate(base[seed], muts, 256 if seed == "mxnet" else None))
        paths.append(p)
    for p, line in zip(paths, _run_harness(harness, "params", paths)):
        arrays, bind, nd = line.split(" | ")
        want = _python_line(p)
        if want is None:
            assert arrays == "error" or ":unusable" in arrays, (p, line)
            assert bind == "bind -1 -1" and nd == "ndlist -1", (p, line)
        else:
            assert arrays.startswith("ok ") and ":unusable" not in arrays, (p, line)
            got = " ".join(t for t in arrays.split()[2:] if not t.endswith(":none"))
            assert got == want, (p, line)


JSON_SEED = (ROOT / "examples/data/mlp/mlp-symbol.json").read_text()


def _json_mutations():
    pos = st.integers(0, len(JSON_SEED))
    return st.one_of(
        st.tuples(st.just("flip"), pos, st.sampled_from(list('{}[]":,0123456789-e. ntfa\\u'))),
        st.tuples(st.just("truncate"), pos, st.just("")),
        st.tuples(st.just("insert"), pos, st.text(alphabet='{}[]":,019-e.\\u "xnull', max_size=8)),
        st.tuples(st.just("delete"), pos, st.integers(1, 12)),
    )


@settings(max_examples=max(1, RUNS // 2), deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.lists(_json_mutations(), min_size=1, max_size=3), min_size=BATCH, max_size=BATCH))
def test_mutated_symbol_json(harness, tmp_path_factory, batch):
    d = tmp_path_factory.mktemp("json")
    paths = [d / "seed.json"]
    paths[0].write_text(JSON_SEED)
    deep = d / "deep.json"
    deep.write_text("[" * 100000)
    paths.append(deep)
    for i, muts in enumerate(batch):
        text = JSON_SEED
        for kind, at, arg in muts:
            at %= len(text) + 1
            if kind == "flip":
                text = text[:at] + arg + text[at + 1:]
            elif kind == "truncate":
                text = text[:at]
            elif kind == "insert":
                text = text[:at] + arg + text[at:]
            else:
                text = text[:at] + text[at + arg:]
        p = d / f"{i}.json"
        p.write_text(text)
        paths.append(p)
    lines = _run_harness(harness, "json", paths)
    assert lines[0] == "0" and lines[1] == "-1"
    # a mutation that leaves valid JSON of the same structure is accepted; one that changes it is refused
    for p, line in zip(paths[2:], lines[2:]):
        try:
            doc = json.loads(p.read_text())
        except ValueError:
            assert line == "-1", p
            continue
        if doc == json.loads(JSON_SEED):
            assert line == "0", p


ATTR_ALPHABET = "()[], \t0123456789.eE+-truefalsTRUEFALSNone_x"


@settings(max_examples=2, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.lists(st.text(alphabet=ATTR_ALPHABET, max_size=24), min_size=200, max_size=200))
def test_canonical_attribute_values_agree(harness, tmp_path_factory, texts):
    d = tmp_path_factory.mktemp("canon")
    fixed = ["(3, 3)", "[3,3]", "(3,3,)", "3", "(3,)", "1e-05", "0.00001", "True", "true", "((1, 2), (3, 4))",
             "(1,2),(3,4)", "relu", "None", "-0", "1e400", "0.1", "(0.1, 1e-3)", "((3,))", "(,)", "(()"]
    texts = fixed + texts
    f = d / "attrs.txt"
    f.write_text("".join(t + "\n" for t in texts))
    exe, hd = harness
    r = run([exe, "canon", f], env=ENV)
    got = r.stdout.split("\n")[:-1]
    assert got == [library.canonical(t) for t in texts]
    assert library.canonical("(3, 3)") == library.canonical("[3,3]") == library.canonical("(3,3,)") == "3,3"
    assert library.canonical("1e-05") == library.canonical("0.00001") == "1e-05"
    assert library.canonical("True") == library.canonical("true") == "1"
