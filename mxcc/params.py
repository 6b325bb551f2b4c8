"""Read and write MXNet parameter files (`.params` NDArray lists, and `.npz`) as dicts of numpy arrays.

`load_params` parses every record version MXNet ever wrote (legacy pre-V1, V1, V2, V3; see
shared/design/formats.md §2.2) and returns `{name: ndarray}` with the names exactly as stored
(`arg:w0`, `aux:bn_moving_mean`, or plain Gluon names); `save_params` writes the V2 layout byte for byte
as MXNet 1.9 `save_checkpoint` does. `split_arg_aux`/`join_arg_aux` convert between one prefixed dict and
the (arg, aux) pair. Every malformed input becomes a `ParamsError` naming the file, the array and what was
expected. Checking the arrays against a graph (missing, unexpected, mis-shaped params) is left to the
shape-inference pass.
"""
from __future__ import annotations

import io
import lzma
import os
import struct
import zipfile
import zlib

import numpy as np

from mxcc.files import atomic_write
from mxcc.errors import ParamsError

LIST_MAGIC = 0x112                   # kMXAPINDArrayListMagic, the file header
V1_MAGIC = 0xF993FAC8                # int64 TShape, no storage type
V2_MAGIC = 0xF993FAC9                # + storage type; what MXNet 1.x writes outside numpy mode
V3_MAGIC = 0xF993FACA                # numpy shape semantics: ndim -1 = unknown, ndim 0 = scalar

# type_flag -> little-endian numpy dtype (mshadow's TypeFlag). bf16 (12) has no numpy dtype.
FLAG_TO_DTYPE = {0: "<f4", 1: "<f8", 2: "<f2", 3: "u1", 4: "<i4", 5: "i1", 6: "<i8", 7: "?",
                 8: "<i2", 9: "<u2", 10: "<u4", 11: "<u8"}
DTYPE_TO_FLAG = {np.dtype(d).newbyteorder("="): f for f, d in FLAG_TO_DTYPE.items()}
BF16_FLAG, BF16_SIZE = 12, 2
STYPE_NAMES = {0: "default", 1: "row_sparse", 2: "csr"}
SPARSE_AUX_COUNT = {1: 1, 2: 2}      # row_sparse: indices; csr: indptr, indices
DEV_TYPES = {1, 2, 3, 5}             # cpu, gpu, cpu_pinned, cpu_shared
LEGACY_MAX_NDIM = 32                 # a "legacy ndim" above this is a bad magic, not a shape
NPZ_MAGIC = b"PK\x03\x04"


class _Reader:
    """Bounds-checked little-endian cursor over the file bytes; errors name the file and the current item."""

    def __init__(self, buf: bytes, path: str):
        self.buf, self.path, self.pos, self.item = buf, path, 0, "header"

    def fail(self, message: str, **kw) -> ParamsError:
        return ParamsError(f"{self.path}: {self.item}: {message}", **kw)

    def need(self, nbytes: int, what: str) -> int:
        """Reserve `nbytes` for `what`; return their offset. Checked before anything is allocated."""
        left = len(self.buf) - self.pos
        if nbytes > left:
            raise self.fail(f"file truncated: {what} needs {nbytes} bytes at offset {self.pos}, "
                            f"only {left} left", expected=nbytes, got=left)
        start, self.pos = self.pos, self.pos + nbytes
        return start

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack_from("<" + fmt, self.buf, self.need(struct.calcsize("<" + fmt), what))

    def one(self, fmt: str, what: str) -> int:
        return self.unpack(fmt, what)[0]


def load_params(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Load an MXNet `.params` file (any record version) or an `.npz` into `{name: array}`.

    Names are kept exactly as stored. A file saved from a list (`nd.save(f, [a, b])`) has no names; its
    arrays are keyed "0", "1", ... by position. "None" arrays (records without a shape, which MXNet can
    write for uninitialized NDArrays) carry no shape or dtype and are skipped; the other arrays keep their
    positional key. Arrays are returned C-contiguous, native byte order, writable, sharing memory with
    nothing else.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            buf = f.read()
    except OSError as e:
        raise ParamsError(f"{path}: cannot read params file: {e.strerror or e}") from None
    if path.endswith(".npz") or buf.startswith(NPZ_MAGIC):
        return _load_npz(buf, path)
    return _parse_ndarray_list(_Reader(buf, path))


def _load_npz(buf: bytes, path: str) -> dict[str, np.ndarray]:
    """Keys as np.load gives them (member name minus ".npy"). Parsed member by member rather than with
    np.load so that a corrupted .npy header cannot make numpy allocate its claimed size up front."""
    try:
        out = {}
        with zipfile.ZipFile(io.BytesIO(buf)) as zf:
            for info in zf.infolist():
                key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with zf.open(info) as member:
                    out[key] = _read_npy_member(member, info.file_size, f"{path}: member {info.filename!r}")
        return out
    # what zipfile and its decompressors raise on corrupted archives (RuntimeError: encrypted member,
    # NotImplementedError: unknown compression method, zlib/lzma errors: corrupted compressed data)
    except (OSError, EOFError, ValueError, RuntimeError, NotImplementedError, struct.error, zlib.error,
            lzma.LZMAError, zipfile.BadZipFile, zipfile.LargeZipFile) as e:
        raise ParamsError(f"{path}: not a readable .npz file: {type(e).__name__}: {e}") from None


def _read_npy_member(member, member_size: int, where: str) -> np.ndarray:
    fmt = np.lib.format
    version = fmt.read_magic(member)
    if version not in ((1, 0), (2, 0)):
        raise ParamsError(f"{where}: unsupported .npy format version {version}")
    read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    shape, fortran, dtype = read_header(member)
    if dtype.hasobject:
        raise ParamsError(f"{where}: object arrays are not parameters (pickles are never loaded)")
    if any(d < 0 for d in shape):
        raise ParamsError(f"{where}: negative dimension in shape {shape}", got=shape)
    expected = _prod(shape) * dtype.itemsize
    left = member_size - member.tell()        # the data bytes the zip entry says follow the header
    if expected > left:                       # refused before decompressing anything
        raise ParamsError(f"{where}: shape {shape} {dtype} needs {expected} bytes, member has {left}",
                          expected=expected, got=left)
    data = member.read(expected + 1)          # bounded by the header's claim and by the zip entry
    if len(data) != expected:
        has = len(data) if len(data) <= expected else "more"
        raise ParamsError(f"{where}: shape {shape} {dtype} needs {expected} bytes, member has {has}",
                          expected=expected, got=len(data))
    arr = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")
    native = dtype.newbyteorder("=") if dtype.byteorder in "<>" else dtype
    return np.array(arr, dtype=native, order="C", copy=True)     # writable, owning, native order


def _parse_ndarray_list(r: _Reader) -> dict[str, np.ndarray]:
    header, _reserved, count = r.unpack("QQQ", "the 24-byte list header")
    if header != LIST_MAGIC:
        raise r.fail(f"not an MXNet .params file: header is {header:#x}, expected {LIST_MAGIC:#x}",
                     expected=LIST_MAGIC, got=header)
    # Each record is at least 4 bytes, so a count beyond that is corruption, not a reason to loop.
    if count > (len(r.buf) - r.pos) // 4:
        raise r.fail(f"file truncated or corrupted: array count {count} cannot fit in the "
                     f"{len(r.buf) - r.pos} bytes left",
                     got=count)
    arrays: list[np.ndarray | None | str] = []   # array, None ("none" array) or the reason it is refused
    for i in range(count):
        r.item = f"array #{i}"
        arrays.append(_read_record(r))
    names = _read_names(r, count)
    if r.pos != len(r.buf):
        r.item = "end of file"
        raise r.fail(f"{len(r.buf) - r.pos} unexpected bytes after the last name (corrupted file?)")
    keys = names if names else [str(i) for i in range(count)]
    seen: set[str] = set()
    for k in keys:                           # a set, not keys.count(): files may hold ~10^5 names
        if k in seen:
            raise ParamsError(f"{r.path}: the name {k!r} occurs more than once")
        seen.add(k)
    out = {}
    for i, (key, arr) in enumerate(zip(keys, arrays)):
        if isinstance(arr, str):
            raise ParamsError(f"{r.path}: array #{i} ({key!r}): {arr}", input=key)
        if arr is not None:
            out[key] = arr
    return out


def _read_names(r: _Reader, count: int) -> list[str]:
    r.item = "names"
    n_names = r.one("Q", "the name count")
    if n_names not in (0, count):
        raise r.fail(f"{n_names} names for {count} arrays (must be 0 or {count})",
                     expected=count, got=n_names)
    names = []
    for i in range(n_names):
        r.item = f"name #{i}"
        length = r.one("Q", "the name length")
        start = r.need(length, f"a {length}-byte name")
        try:
            names.append(r.buf[start:start + length].decode("utf-8"))
        except UnicodeDecodeError:
            raise r.fail("name is not valid UTF-8") from None
    return names


def _read_record(r: _Reader) -> np.ndarray | None | str:
    """One NDArray record. Returns the array, None for a "none" array, or a message saying why the
    (skipped) record cannot be used; the caller names it once the names, stored last, are known."""
    magic = r.one("I", "the record magic")
    if magic in (V2_MAGIC, V3_MAGIC):
        stype = r.one("i", "the storage type")
        if stype not in STYPE_NAMES:
            raise r.fail(f"unknown storage type {stype} (expected 0 dense, 1 row_sparse, 2 csr)", got=stype)
        if stype != 0:
            return _skip_sparse(r, stype)
        shape = _read_shape(r, numpy_semantics=magic == V3_MAGIC)
    elif magic == V1_MAGIC:
        shape = _read_shape(r, numpy_semantics=False)
    elif magic <= LEGACY_MAX_NDIM:               # pre-V1: the "magic" is ndim, dims are uint32
        shape = r.unpack(f"{magic}I", f"{magic} legacy uint32 dims") if magic else None
    else:
        raise r.fail(f"bad record magic {magic:#010x} (expected {V2_MAGIC:#x}, {V1_MAGIC:#x}, "
                     f"{V3_MAGIC:#x} or a legacy ndim <= {LEGACY_MAX_NDIM})", got=magic)
    if shape is None:
        return None
    _read_context(r)
    flag = r.one("i", "the type flag")
    if flag == BF16_FLAG:
        r.need(BF16_SIZE * _prod(shape), "bfloat16 data")
        return "dtype bfloat16 (type flag 12) cannot be loaded: numpy has no bfloat16; " \
               "convert the parameters to float32 in MXNet first"
    if flag not in FLAG_TO_DTYPE:
        raise r.fail(f"unknown type flag {flag} (expected 0..12)", got=flag)
    dtype = np.dtype(FLAG_TO_DTYPE[flag])
    n = _prod(shape)
    start = r.need(n * dtype.itemsize, f"{n} x {dtype.name} data of shape {tuple(shape)}")
    if n == 0 and _prod(d for d in shape if d) * dtype.itemsize > np.iinfo(np.intp).max:
        # (0, 2**62, 2**62) holds no data, yet numpy cannot make an array of that shape
        raise r.fail(f"empty shape {tuple(shape)} has dimensions too large for any array", got=tuple(shape))
    # astype copies: the result owns aligned, writable, native-order memory.
    flat = np.frombuffer(r.buf, dtype=dtype, count=n, offset=start)
    return flat.astype(dtype.newbyteorder("="), copy=True).reshape(shape)


def _read_shape(r: _Reader, numpy_semantics: bool) -> tuple[int, ...] | None:
    """TShape: int32 ndim, ndim x int64. None means a "none" array (the record ends after the shape)."""
    ndim = r.one("i", "ndim")
    if numpy_semantics and ndim == -1:
        return None
    if ndim < 0:
        raise r.fail(f"negative ndim {ndim}", got=ndim)
    if ndim == 0 and not numpy_semantics:
        return None
    dims = r.unpack(f"{ndim}q", f"{ndim} int64 dims")
    if numpy_semantics and -1 in dims:       # shape_is_known() is false: MXNet reads a "none" array
        return None
    if any(d < 0 for d in dims):
        raise r.fail(f"negative dimension in shape {dims}", got=dims)
    return dims


def _read_context(r: _Reader) -> None:
    dev_type, dev_id = r.unpack("ii", "the context (dev_type, dev_id)")
    if dev_type not in DEV_TYPES or dev_id < 0:
        raise r.fail(f"bad context dev_type={dev_type} dev_id={dev_id} (expected dev_type 1, 2, 3 or 5)",
                     got=(dev_type, dev_id))


def _skip_sparse(r: _Reader, stype: int) -> str:
    """Walk over a row_sparse/csr record (bounds-checked) so the file can still be named and checked."""
    storage_shape = _read_shape(r, numpy_semantics=False)
    shape = _read_shape(r, numpy_semantics=False)
    if shape is None:
        return f"{STYPE_NAMES[stype]} array without a shape"
    _read_context(r)
    flag = r.one("i", "the type flag")
    aux = [(r.one("i", "an aux type flag"), _read_shape(r, numpy_semantics=False) or ())
           for _ in range(SPARSE_AUX_COUNT[stype])]
    for f, s in [(flag, storage_shape or ())] + aux:
        if f != BF16_FLAG and f not in FLAG_TO_DTYPE:
            raise r.fail(f"unknown type flag {f} in a sparse record (expected 0..12)", got=f)
        size = BF16_SIZE if f == BF16_FLAG else np.dtype(FLAG_TO_DTYPE[f]).itemsize
        r.need(size * _prod(s), "sparse data")
    return (f"storage type {STYPE_NAMES[stype]} (sparse) is not supported; mxcc reads dense arrays "
            f"only (convert with .tostype('default') in MXNet)")


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def save_params(path: str | os.PathLike, params: dict[str, np.ndarray]) -> None:
    """Write `params` atomically: an `.npz` if the path ends with .npz, otherwise MXNet V2 records laid
    out byte for byte as MXNet 1.9 writes them (cpu context, names in dict order).

    NOTE: V2 cannot hold a 0-d array (ndim 0 means "none"); those raise ParamsError, as do dtypes without
    an MXNet type flag (complex, object, bfloat16-like void types).
    """
    path = os.fspath(path)
    arrays = _checked_arrays(path, params, for_npz=path.endswith(".npz"))
    write = _write_npz if path.endswith(".npz") else _write_ndarray_list
    _atomic_write(path, lambda f: write(f, arrays))


def _checked_arrays(path: str, params: dict, for_npz: bool) -> dict[str, np.ndarray]:
    """Validate every name and array before the file is touched; return C-order little-endian arrays."""
    out = {}
    for name, value in params.items():
        if not isinstance(name, str):
            raise ParamsError(f"{path}: parameter names must be str, got {name!r}")
        arr = np.asarray(value)
        if for_npz:
            if arr.dtype.hasobject:
                raise ParamsError(f"{path}: {name!r}: object arrays cannot be saved", input=name)
            out[name] = arr
            continue
        native = arr.dtype.newbyteorder("=") if arr.dtype.byteorder in "<>" else arr.dtype
        if native not in DTYPE_TO_FLAG:
            raise ParamsError(f"{path}: {name!r}: dtype {arr.dtype} has no MXNet type flag", input=name,
                              got=str(arr.dtype))
        if arr.ndim == 0:
            raise ParamsError(f"{path}: {name!r}: a 0-d array cannot be stored in a V2 .params file "
                              f"(ndim 0 means 'none'); reshape it to (1,) or save as .npz", input=name)
        le = arr.dtype.newbyteorder("<") if arr.dtype.itemsize > 1 else arr.dtype
        out[name] = np.ascontiguousarray(arr, dtype=le)
    return out


def _write_ndarray_list(f, arrays: dict[str, np.ndarray]) -> None:
    f.write(struct.pack("<QQQ", LIST_MAGIC, 0, len(arrays)))
    for arr in arrays.values():
        flag = DTYPE_TO_FLAG[arr.dtype.newbyteorder("=")]
        f.write(struct.pack(f"<Iii{arr.ndim}q", V2_MAGIC, 0, arr.ndim, *arr.shape))
        f.write(struct.pack("<iii", 1, 0, flag))       # cpu(0): MXNet saves from a CPU copy
        f.write(arr.reshape(-1).view(np.uint8).data)
    f.write(struct.pack("<Q", len(arrays)))
    for name in arrays:
        raw = name.encode("utf-8")
        f.write(struct.pack("<Q", len(raw)) + raw)


def _write_npz(f, arrays: dict[str, np.ndarray]) -> None:
    # NOTE: not np.savez(**arrays): a parameter called "file" or "allow_pickle" would clash with its
    # keyword arguments. This is the same uncompressed zip of .npy members that np.savez writes.
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, arr, allow_pickle=False)


def _atomic_write(path: str, write) -> None:
    """files.atomic_write, with a write failure as a ParamsError naming the file."""
    try:
        atomic_write(path, write)
    except OSError as e:
        raise ParamsError(f"{path}: cannot write params file: {e.strerror or e}") from None


def split_arg_aux(params: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Split `save_checkpoint` keys into (arg_params, aux_params) on the first ':'.

    Plain names (Gluon `save_parameters` files, `nd.save` lists) go to arg_params. A prefix other than
    arg/aux, or two keys landing on the same name, raise ParamsError rather than losing an array.
    """
    arg, aux = {}, {}
    for key, value in params.items():
        prefix, sep, name = key.partition(":")
        if not sep:
            prefix, name = "arg", key
        if prefix not in ("arg", "aux"):
            raise ParamsError(f"parameter {key!r}: unknown prefix {prefix!r} (expected 'arg:' or 'aux:')",
                              input=key)
        dest = arg if prefix == "arg" else aux
        if name in dest:
            raise ParamsError(f"parameter {key!r}: {prefix} name {name!r} occurs twice", input=key)
        dest[name] = value
    return arg, aux


def join_arg_aux(arg_params: dict[str, np.ndarray],
                 aux_params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The dict `save_checkpoint` writes: `arg:<name>` for every argument, then `aux:<name>`."""
    joined = {f"arg:{k}": v for k, v in arg_params.items()}
    joined.update({f"aux:{k}": v for k, v in aux_params.items()})
    return joined
