"""How each kernel's parallel work splits over T threads: a pure-Python model of the runtime's splits.

The runtime decides its splits at run time from the thread count (runtime_c/parallel.h and each kernel's
driver: the GEMM's `choose_split`, conv1x1's pixel-or-weight split, the Winograd unit split, ...). This module
repeats those decisions for a lowered KernelCall and a thread count T, and weighs each thread's share in the
kernel's own cost unit (a micro-kernel tile over K, a pixel panel, a plane, a loop iteration), so `mxcc
inspect --threads T` can show, without a build or a T-core machine, how many parts every kernel makes and
how evenly they load the threads:

    efficiency = one thread's work / threads / the busiest thread's work   (over the threads the call uses; the
                 mean over the busiest where a split repeats no work; the pointwise kernel's repeated reads
                 count against it)
    ideal      = the same for the best split of the kernel's atoms (its finest independent units) into
                 `threads` contiguous ranges, or of the kernel's splits as weighed here: what any split of
                 this algorithm could reach

`threads` is T, or fewer where the work does not pay for more (MIN_FLOPS_PER_THREAD per thread: a fork
costs more than it saves) or has fewer atoms than T. The model is checked against the C it describes: the
runtime's split simulator (`<net>_bench --simulate-threads T`, runtime_c/pool/) runs each job's chunks one
by one and reports their count, which tests/codegen/test_splits.py compares with `parts` here.

Constants follow the C headers named beside them; they differ per ISA (the micro-kernel's MR x NR).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from mxcc.codegen.batchvar import at_max
from mxcc.files import cpuinfo

MIN_FLOPS_PER_THREAD = 1 << 19   # runtime_c/gemm/gemm_config.h MXCC_GEMM_MIN_FLOPS_PER_THREAD
SMALLM_MAX = 32                  # MXCC_GEMM_SMALLM_MAX
SMALLM_MAX_A = 1 << 18           # MXCC_GEMM_SMALLM_MAX_A
SMALLM_PACKED_TAIL = 2           # MXCC_GEMM_SMALLM_PACKED_TAIL


@dataclass(frozen=True)
class Isa:
    """The blocking of one build (runtime_c/gemm/gemm_config.h, conv/conv1x1_f32.c, conv/conv_direct_f32.c)."""
    name: str
    mr: int          # GEMM micro-kernel rows (MXCC_GEMM_MR)
    nr: int          # GEMM micro-kernel columns (MXCC_GEMM_NR)
    mc: int
    kc: int
    nc: int
    pw_mr: int       # conv1x1 weight panel rows (MR)
    pw_step: int     # conv1x1 tile heights compiled (MR_STEP)
    lanes: int       # MXCC_SIMD_SIZE_F32
    direct_ob: int   # conv_direct OB


ISAS = {
    "avx512": Isa("avx512", 14, 32, 112, 512, 3072, 12, 4, 16, 8),
    "avx2": Isa("avx2", 6, 16, 144, 384, 3072, 6, 2, 8, 4),
    "c": Isa("c", 6, 16, 96, 256, 2048, 4, 4, 8, 4),
}


def host_isa() -> str:
    """The ISA a build for this machine uses (-march=native): 'avx512', 'avx2' or 'c'."""
    flags = cpuinfo().get("flags", "").split()
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags and "fma" in flags else "c"


@dataclass(frozen=True)
class Split:
    """One runtime call's split at T threads."""
    kernel: str                  # the runtime split modelled: gemm, batch_gemm, gemm_small_m, gemm_row, conv1x1,
                                 # conv_packed, winograd, direct, depthwise, softmax_rows, parts (a generated loop),
                                 # openmp, serial
    threads: int                 # threads the work pays for: T, or fewer by the FLOPs rule (parallel.h)
    parts: int                   # chunks of its job (0: no job, the call runs serially or as an OpenMP region)
    atoms: int                   # the finest independent units of its work
    loads: tuple = ()            # work per thread, len == threads, 0 for a thread the split leaves idle (empty
                                 # when not modelled)
    how: str = ""                # the split chosen, in words
    calls: int = 1               # runtime calls per kernel call (e.g. one per image)
    best: float | None = None    # the ideal when atoms differ in cost (the best of the kernel's splits as
                                 # weighed here: pointwise, Winograd), else None: by count
    jobs_per_call: int = 1       # parallel jobs of one runtime call (Winograd's shared transforms: 2)
    work: float | None = None    # one thread's work when a split adds to it (pointwise: reads of pixels and
                                 # weights that several threads repeat): efficiency = work / threads / max load

    @property
    def efficiency(self) -> float | None:
        if not self.loads or max(self.loads) <= 0:
            return None
        return (self.work if self.work is not None else sum(self.loads)) / len(self.loads) / max(self.loads)

    @property
    def ideal(self) -> float:
        if self.best is not None:
            return self.best
        t = max(1, self.threads)
        return self.atoms / (t * math.ceil(self.atoms / t)) if self.atoms >= 1 else 1.0

    @property
    def jobs(self) -> int:
        """Parallel jobs (regions) this kernel call runs per forward."""
        return self.calls * self.jobs_per_call if self.parts > 1 or self.kernel == "openmp" else 0


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _split_at(n: int, parts: int, part: int) -> int:
    return n * part // parts   # parallel.h mxcc_split_at, mxcc_pool.h mxcc_part_begin


def _ranges(n: int, parts: int) -> list[tuple[int, int]]:
    return [(_split_at(n, parts, p), _split_at(n, parts, p + 1)) for p in range(parts)]


def threads_for(flops: float, max_threads: int) -> int:
    """parallel.h mxcc_threads_for."""
    fit = flops / MIN_FLOPS_PER_THREAD
    return 1 if fit < 2.0 else (int(fit) if fit < max_threads else max_threads)


def _serial(kernel: str, atoms: int = 1, load: float = 1.0, how: str = "serial") -> Split:
    return Split(kernel, 1, 0, atoms, (load,), how)


def _padded(loads, threads: int) -> tuple:
    """Per-thread loads of a split into fewer parts than the threads the work pays for: the rest idle."""
    loads = tuple(float(x) for x in loads)
    return loads + (0.0,) * (threads - len(loads))


# ---- GEMM (runtime_c/gemm/gemm_f32.c) --------------------------------------------------------------------

def gemm_panel_rows(m: int, isa: Isa) -> int:
    """gemm_f32.c panel_rows: the rows the micro-kernel computes for a row panel of m rows."""
    if isa.name == "avx512":
        return 4 if m <= 4 else 7 if m <= 7 else m
    if isa.name == "avx2":
        return 3 if m <= 3 else m
    return isa.mr


def _rows_balance(M: int, ways: int, isa: Isa) -> float:
    """gemm_f32.c rows_balance: the lower of the panels and the rows computed per row group, each over ways
    times the most."""
    units = _cdiv(M, isa.mr)
    groups = [sum(gemm_panel_rows(min(isa.mr, M - u * isa.mr), isa) for u in range(b, e))
              for b, e in _ranges(units, ways)]
    by_rows = sum(groups) / (ways * max(groups)) if max(groups) else 0.0
    return min(by_rows, units / (ways * _cdiv(units, ways)))


def gemm_choose_ways(M: int, N: int, nt: int, prepacked: bool, isa: Isa) -> tuple[int, int]:
    """gemm_f32.c choose_ways: the ic_ways x jr_ways grid of nt threads."""
    units_n = _cdiv(min(N, isa.nc), isa.nr)
    best, ways = -1.0, (nt, 1)
    for a in range(1, nt + 1):
        if nt % a:
            continue
        b = nt // a
        eff_m = _rows_balance(M, a, isa)
        eff_n = units_n / (b * _cdiv(units_n, b))
        per_thread = units_n * isa.nr / b / 16.0
        score = eff_m * eff_n * (0.97 if a > 1 and not prepacked else 1.0) / (1.0 + 0.02 * (b - 1))
        score *= per_thread / 4.0 if per_thread < 4.0 else 1.0
        if score > best:
            best, ways = score, (a, b)
    return ways


def _gemm_tiles(M: int, N: int, isa: Isa) -> tuple[list[int], list[list[int]]]:
    """Row panels (rows each) and, per jc block, its column panels (columns each)."""
    rows = [min(isa.mr, M - i) for i in range(0, M, isa.mr)]
    nc_step = _cdiv(_cdiv(N, _cdiv(N, isa.nc)), isa.nr) * isa.nr
    blocks = [[min(isa.nr, min(nc_step, N - jc) - j) for j in range(0, min(nc_step, N - jc), isa.nr)]
              for jc in range(0, N, nc_step)]
    return rows, blocks


def gemm_split(M: int, N: int, K: int, T: int, isa: Isa, *, prepacked: bool, trans_a: bool = False,
               trans_b: bool = False) -> Split:
    """mxcc_gemm_f32 / mxcc_gemm_f32_packed_b at T threads. Work: micro-kernel tiles x K (a partial tile costs
    a whole one: the kernel runs MR x NR lanes masked)."""
    if M <= 0 or N <= 0 or K <= 0:
        return _serial("gemm", 1, 0.0)
    # mxcc_gemm_f32_packed_b: a last row panel of 1-2 rows by the panel kernel, a job of its own after the others';
    # the AVX-512 build's balanced panel heights (gemm_f32.c row_height) leave one only for M <= 2
    tail = (M if M <= SMALLM_PACKED_TAIL else 0) if isa.name == "avx512" else M % isa.mr
    if prepacked and not trans_a and M <= SMALLM_MAX and 1 <= tail <= SMALLM_PACKED_TAIL:
        if M == tail:
            return gemm_row_split(M, N, K, T, isa)
        s, rows = gemm_split(M - tail, N, K, T, isa, prepacked=True), gemm_row_split(tail, N, K, T, isa)
        how = f"{s.how}; then {tail} row(s) by the panel kernel, {rows.how}"
        if s.parts <= 1 and rows.parts > 1:   # the tail's job is the call's only one
            return replace(rows, how=how)
        return replace(s, how=how, jobs_per_call=s.jobs_per_call + (rows.parts > 1))
    small_m = not prepacked and M <= SMALLM_MAX and M * K <= SMALLM_MAX_A and not trans_a and trans_b
    flops = 2.0 * (16 if small_m and M < 16 else M) * N * K
    nt = threads_for(flops, T)
    if small_m:
        groups = _cdiv(N, 4)   # columns in groups of 4, the rowdot register tile
        if nt == 1:
            return _serial("gemm_small_m", groups, float(M * N * K))
        loads = tuple(float(M * K * (min(e * 4, N) - min(b * 4, N))) for b, e in _ranges(groups, nt))
        return Split("gemm_small_m", nt, nt, groups, loads, f"columns in {nt} parts")
    rows, blocks = _gemm_tiles(M, N, isa)
    atoms = len(rows) * sum(len(b) for b in blocks)
    if nt == 1:
        return _serial("gemm", atoms, float(atoms * K))
    split = gemm_plan(M, N, nt, prepacked, isa)
    loads = tuple(float(len(part) * K) for part in split.tiles)
    return Split("gemm", nt, nt, atoms, loads, split.how)


def batch_gemm_split(batch: int, M: int, N: int, K: int, T: int, isa: Isa, *, trans_a: bool = False,
                     trans_b: bool = False) -> Split:
    """mxcc_gemm_f32_batched (gemm_f32.c batched_parts): the entries in one part per thread the batch pays for
    (one per entry if fewer), where that keeps the threads 3/4 busy; else each GEMM split on its own."""
    nt = threads_for(2.0 * M * N * max(K, 1) * batch, T) if M > 0 and N > 0 else 1
    parts = min(nt, batch)
    if nt > 1 and batch >= 2 and batch / (nt * _cdiv(batch, parts)) >= 0.75:
        loads = _padded([(e - b) * M * N * K for b, e in _ranges(batch, parts)], nt)
        return Split("batch_gemm", nt, parts, batch, loads, f"{batch} GEMMs in {parts} parts")
    s = gemm_split(M, N, K, T, isa, prepacked=False, trans_a=trans_a, trans_b=trans_b)
    return replace(s, calls=s.calls * batch, how=f"{batch} GEMMs one after another, each {s.how}")


@dataclass(frozen=True)
class GemmPlan:
    how: str
    tiles: tuple = field(default=())   # per part: the (row panel, column panel) tiles it computes, per jc block


def _gemm_ranges(M: int, N: int, nt: int, ic: int, jr: int, isa: Isa) -> bool:
    """gemm_f32.c grid_ranges: tiles in row-major ranges rather than grid cells."""
    um, un = _cdiv(M, isa.mr), _cdiv(N, isa.nr)
    tiles = um * un
    if N > isa.nc or tiles < nt:
        return False
    grid = tiles / (ic * _cdiv(um, ic) * jr * _cdiv(un, jr))
    ranges = tiles / (nt * _cdiv(tiles, nt))
    return grid < 0.9 and ranges > grid + 0.02


def gemm_plan(M: int, N: int, nt: int, prepacked: bool, isa: Isa) -> GemmPlan:
    """The parts of a parallel GEMM (gemm_f32.c gemm_run): an ic_ways x jr_ways grid (choose_ways), or ranges
    of its tiles in row-major order (grid_ranges), when no part waits for another (B prepacked, a grid of one
    row group, or mxcc's pool: the pool is what the model assumes)."""
    rows, blocks = _gemm_tiles(M, N, isa)
    ic, jr = gemm_choose_ways(M, N, nt, prepacked, isa)
    if _gemm_ranges(M, N, nt, ic, jr, isa):
        tiles = [(r, q) for r in range(len(rows)) for q in range(len(blocks[0]))]
        return GemmPlan(f"{len(tiles)} tiles in {nt} row-major ranges",
                        tuple(tuple(tiles[b:e]) for b, e in _ranges(len(tiles), nt)))
    parts = []
    for t in range(nt):
        r0, r1 = _ranges(len(rows), ic)[t // jr]
        tiles = []
        for b in blocks:
            q0, q1 = _ranges(len(b), jr)[t % jr]
            tiles += [(r, q) for r in range(r0, r1) for q in range(q0, q1)]
        parts.append(tiles)
    return GemmPlan(f"{ic}x{jr} grid (rows x columns)", tuple(tuple(p) for p in parts))


def gemm_row_split(M: int, N: int, K: int, T: int, isa: Isa, parallel: bool = True) -> Split:
    """mxcc_gemm_f32_small_m_packed_b (smallm_packed_f32.c): one row of A against NR-column weight panels."""
    npanels = _cdiv(N, isa.nr)
    pays = threads_for(2.0 * 16 * N * K, T) if parallel else 1
    nt = min(pays, npanels)
    if nt <= 1:
        return Split("gemm_row", pays, 0, npanels, _padded([npanels], pays), "serial")
    loads = _padded([e - b for b, e in _ranges(npanels, nt)], pays)
    return Split("gemm_row", pays, nt, npanels, loads, f"weight panels in {nt} parts")


# ---- convolutions (runtime_c/conv/) ----------------------------------------------------------------------

def _pw_panel_cost(np_: int, isa: Isa) -> int:
    """conv1x1_f32.c panel_cost: a pixel panel of np pixels in 1/24 of a full tile."""
    nr = 2 * isa.lanes
    if np_ >= nr:
        return 24 + np_ - nr   # ride columns: one FMA per pixel and channel
    widths3 = isa.name == "avx512"
    cost, left = 0, np_
    while left > 0:
        if left <= 5:   # COL_MAX
            return cost + left
        take = 16 if widths3 and left >= 16 else (left if left < 8 else 8)
        cost += (12 if take == 16 else 6) if widths3 else 12
        left -= take
    return cost


def _pw_units_cost(u0: int, u1: int, panels: int, tail: int) -> int:
    tails = u1 // panels - u0 // panels
    return (u1 - u0 - tails) * 24 + tails * tail


def pw_weight_panels(O: int, isa: Isa) -> int:
    """conv1x1_f32.c weight_panels: ceil(O / MR), one more where that is odd and at least 16 (MR > MR_STEP)."""
    n = _cdiv(O, isa.pw_mr)
    return n + 1 if isa.pw_mr > isa.pw_step and n >= 16 and n % 2 else n


def conv1x1_split(batch: int, C: int, P: int, O: int, T: int, isa: Isa, parallel: bool = True,
                  strided: bool = False) -> Split:
    """mxcc_conv1x1_f32: pixel panels (NR pixels of one image) x weight panels (MR channels); strided
    (mxcc_conv1x1_strided_f32): each part gathers its pixel units (_READ_GATHER a unit)."""
    read_unit = _READ_GATHER if strided else _READ_UNIT
    nr = 2 * isa.lanes
    ride = 4 if isa.name == "avx512" else 0   # RIDE_MAX: an image's last few pixels ride along the panel before
    panels = P // nr if P > nr and 0 < P % nr <= ride else _cdiv(P, nr)
    nb = pw_weight_panels(O, isa)
    units = batch * panels
    atoms = units * nb
    nt = threads_for(2.0 * batch * P * O * C, T) if parallel else 1
    tail = _pw_panel_cost(P - (panels - 1) * nr, isa)
    if nt == 1:
        return _serial("conv1x1", atoms, float(_pw_units_cost(0, units, panels, tail) * nb))
    total = _pw_units_cost(0, units, panels, tail)

    def block_loads(pu: int, pw: int) -> list[int]:
        return [_pw_units_cost(b, e, panels, tail) * (c1 - c0) + (e - b) * read_unit + (c1 - c0) * _READ_PANEL
                if e > b and c1 > c0 else 0 for b, e in _ranges(units, pu) for c0, c1 in _ranges(nb, pw)]

    # the blocks: pu pixel groups x nt // pu weight groups (no more of either than items), the busiest cheapest
    # (ties: more pixel groups)
    plain, blocks = None, None
    for pu in range(min(nt, units), 0, -1):
        pw = min(nt // pu, nb)
        busiest = max(_pw_units_cost(b, e, panels, tail) for b, e in _ranges(units, pu))
        share = _cdiv(nb, pw)
        cost = busiest * share + _cdiv(units, pu) * read_unit + share * _READ_PANEL
        if plain is None or cost < plain:
            plain, blocks = cost, (pu, pw)
    cap, grid_at = _pw_grid_split(units, nb, panels, tail, nt, read_unit)
    grid_loads = [sum(tail if a // nb % panels == panels - 1 else 24 for a in range(grid_at[p], grid_at[p + 1]))
                  + len({a // nb for a in range(grid_at[p], grid_at[p + 1])}) * read_unit
                  + len({a % nb for a in range(grid_at[p], grid_at[p + 1])}) * _READ_PANEL for p in range(nt)]
    grid = (cap + min(_cdiv(units * nb, nt), nb) * _READ_PANEL
            if 100 * (total * nb + units * read_unit) < 97 * plain * nt else plain)
    pu, pw = blocks
    if 100 * grid < 97 * plain:   # the grid only when 3% better: it streams every weight panel through each part
        parts, loads, how = nt, grid_loads, f"{units} pixel x {nb} weight panels in {nt} parts"
    else:
        parts, loads = pu * pw, block_loads(pu, pw)
        how = (f"pixel panels in {pu} parts" if pw == 1 else f"weight panels in {pw} parts" if pu == 1
               else f"{pu} pixel groups x {pw} weight groups = {pu * pw} parts")
    # efficiency: one thread's time (tiles and one read of everything) over T, against the busiest thread's (a
    # split that balances the tiles may have threads read the same panels, which is what the C weighs too); the
    # ideal: the best of the kernel's splits so weighed
    work = float(total * nb + units * read_unit + nb * _READ_PANEL)
    candidates = [grid_loads] + [block_loads(q, min(nt // q, nb)) for q in range(1, min(nt, units) + 1)]
    best = work / nt / min(max(x) for x in candidates)
    return Split("conv1x1", nt, parts, atoms, tuple(float(x) for x in _padded(loads, nt)), how,
                 best=max(best, work / nt / max(loads)), work=work)


_READ_UNIT, _READ_PANEL = 8, 24   # conv1x1_f32.c READ_UNIT, READ_PANEL: a part's reads of a pixel unit, a weight panel
_READ_GATHER = 64                 # conv1x1_f32.c READ_GATHER: a strided layer's gather of a pixel unit


def _pw_grid_fill(units: int, nb: int, panels: int, tail: int, cap: int, parts: int,
                  read_unit: int = _READ_UNIT) -> list | None:
    """conv1x1_f32.c grid_fill: the first tiles of the parts (parts + 1 entries), or None when cap needs more."""
    at, p, load, a = [0] * (parts + 1), 0, 0, 0
    for u in range(units):
        c = tail if u % panels == panels - 1 else 24
        load += read_unit
        left = nb
        while left > 0:
            fit = (cap - load) // c
            if fit <= 0:
                p += 1
                if p >= parts:
                    return None
                at[p], load = a, read_unit
                fit = (cap - load) // c
            take = min(fit, left)
            load, left, a = load + take * c, left - take, a + take
    for q in range(p + 1, parts + 1):
        at[q] = a
    return at


def _pw_grid_split(units: int, nb: int, panels: int, tail: int, parts: int,
                   read_unit: int = _READ_UNIT) -> tuple[int, list]:
    """conv1x1_f32.c grid_split: the least capacity that fits in `parts` parts, and their first tiles."""
    total = _pw_units_cost(0, units, panels, tail) * nb + units * read_unit
    lo = max(_cdiv(total, parts), 24 + read_unit)
    hi = max(total + parts * read_unit, lo)
    while lo < hi:
        mid = lo + (hi - lo) // 2
        if _pw_grid_fill(units, nb, panels, tail, mid, parts, read_unit) is not None:
            hi = mid
        else:
            lo = mid + 1
    return lo, _pw_grid_fill(units, nb, panels, tail, lo, parts, read_unit)


def conv_packed_split(batch: int, P: int, O: int, K: int, T: int, isa: Isa, parallel: bool = True,
                      channels: int = 2) -> Split:
    """mxcc_conv_packed_f32: MR-pixel panels x NR-channel weight panels, K deep (K = channels x taps)."""
    M = batch * P
    panels, nq = _cdiv(M, isa.mr), _cdiv(O, isa.nr)
    atoms = panels * nq
    nt = threads_for(2.0 * M * O * K, T) if parallel else 1
    if nt == 1:
        return _serial("conv_packed", atoms, float(atoms * K))
    # conv_packed_f32.c packed_split: the fewest tiles for the busiest part; ties: pixels, weights, grid, except
    # that weights win a tie when the pixels are one block (gathered once, shared; each part streams only its
    # share of the weight)
    one_block = panels <= max(1, _PACKED_BLOCK_BYTES // (4 * isa.mr * K))
    by_pixels, by_weights, by_grid = _cdiv(panels, nt) * nq, panels * _cdiv(nq, nt), _cdiv(panels * nq, nt)
    if 100 * by_grid < 97 * min(by_pixels, by_weights):
        loads = [(e - b) * K for b, e in _ranges(panels * nq, nt)]
        how = f"{panels} pixel x {nq} weight panels in {nt} parts"
    elif by_pixels < by_weights or (by_pixels == by_weights and not one_block):
        loads, how = [(e - b) * nq * K for b, e in _ranges(panels, nt)], f"pixel panels in {nt} parts"
    else:
        loads, how = [panels * (e - b) * K for b, e in _ranges(nq, nt)], f"weight panels in {nt} parts"
        if one_block:   # gathered once, by all parts (a gather of one channel is one chunk: the caller's, no job)
            return Split("conv_packed", nt, nt, atoms, tuple(float(x) for x in loads), how + ", block gathered once",
                         jobs_per_call=2 if channels > 1 else 1)
    return Split("conv_packed", nt, nt, atoms, tuple(float(x) for x in loads), how)


_PACKED_BLOCK_BYTES = 1 << 20   # conv_packed_f32.c CONV_PACKED_BLOCK_BYTES


_V_BYTES, _M_BYTES, _MIN_TB_PANELS = 1 << 20, 512 << 10, 4   # winograd_f32.c


def _rup(a: int, b: int) -> int:
    return _cdiv(a, b) * b


def winograd_plan(C: int, OH: int, OW: int, batch: int, O: int, isa: Isa) -> tuple[int, int]:
    """winograd_f32.c plan_of: (tiles, tb)."""
    mr, nr = isa.mr, isa.nr
    tiles = batch * _cdiv(OH, 4) * _cdiv(OW, 4)
    tb = mr * max(_MIN_TB_PANELS, _V_BYTES // (36 * C * 4 * mr))
    tb = min(tb, mr * max(_MIN_TB_PANELS, _M_BYTES // (36 * nr * 4 * mr)))
    tb = min(tb, _rup(tiles, mr))
    return tiles, _rup(_cdiv(tiles, _cdiv(tiles, tb)), mr)


def _winograd_scratch(C: int, W: int, OW: int, O: int, tb: int, isa: Isa, ob_max: int | None = None) -> int:
    """winograd_f32.c with_tb: per_thread floats with tile blocks of tb (output-channel blocks of at most ob_max)."""
    nr = isa.nr
    ob = nr * max(1, _M_BYTES // (36 * tb * 4 * nr))
    ob = min(ob, _rup(O, nr))
    if ob_max is not None:
        ob = min(ob, ob_max)
    ob = _rup(_cdiv(O, _cdiv(O, ob)), nr)
    return _winograd_rest(C, W, OW, tb, isa) + _rup(36 * tb * ob, 16)


def _winograd_rest(C: int, W: int, OW: int, tb: int, isa: Isa) -> int:
    """winograd_f32.c with_tb: per_thread floats besides M's (the guard, V, the strips, a zero row)."""
    tw = _cdiv(OW, 4)
    row_group = isa.lanes // tw if isa.name != "c" and 2 * tw <= isa.lanes else 1   # strips of a vector pass
    return 16 + _rup(36 * C * tb, 16) + 6 * row_group * (4 * _rup(tw, 16) + 16) + _rup(W, 16)


def _winograd_fits(C: int, W: int, OW: int, O: int, tb: int, tb0: int, isa: Isa) -> bool:
    """winograd_f32.c mxcc_winograd_f43_f32: whether blocks of tb tiles fit the scratch sized for tb0's, their
    output-channel blocks cut back to M's room where needed."""
    room = _winograd_scratch(C, W, OW, O, tb0, isa)
    if _winograd_scratch(C, W, OW, O, tb, isa) <= room:
        return True
    ob_max = (room - _winograd_rest(C, W, OW, tb, isa)) // (36 * tb) // isa.nr * isa.nr
    return ob_max >= isa.nr and _winograd_scratch(C, W, OW, O, tb, isa, ob_max) <= room


WINOGRAD_WHOLE_U_BYTES = 4 << 20   # winograd_f32.c WHOLE_U_BYTES
WINOGRAD_WHOLE_MIN_EFF = 0.875     # and WHOLE_MIN_EFF


def winograd_units(tiles: int, tb0: int, npanels: int, nt: int, isa: Isa, whole_u: bool = False) -> tuple[int, int]:
    """winograd_f32.c choose_units: (tb, nparts) for nt threads. whole_u: U (36 C O floats) is at most
    WHOLE_U_BYTES; where the balanced split's channel parts would share V (no more blocks than threads), the
    largest tile blocks alone that give every thread one are taken if they balance to WHOLE_MIN_EFF."""
    tb, nparts = _winograd_balanced_units(tiles, tb0, npanels, nt, isa)
    if not whole_u or nparts <= 1 or _cdiv(tiles, tb) > nt:
        return tb, nparts
    tp = _cdiv(tiles, isa.mr)
    for bp in range(tb0 // isa.mr, 0, -1):
        nblocks = _cdiv(tp, bp)
        if nblocks < nt:
            continue
        bpb = _cdiv(tp, nblocks)
        if tp / nt / (_cdiv(nblocks, nt) * bpb) >= WINOGRAD_WHOLE_MIN_EFF:
            return bpb * isa.mr, 1
        break
    return tb, nparts


def _winograd_balanced_units(tiles: int, tb0: int, npanels: int, nt: int, isa: Isa) -> tuple[int, int]:
    """winograd_f32.c balanced_units."""
    mr = isa.mr
    tp, nblocks0 = _cdiv(tiles, mr), _cdiv(tiles, tb0)
    tb, nparts = tb0, (min(npanels, _cdiv(2 * nt, nblocks0)) if nt > 1 and nblocks0 < 2 * nt else 1)
    best, seen = -1.0, -1
    for bp in range(tb0 // mr, 0, -1):
        if nt <= 1:
            break
        nblocks = _cdiv(tp, bp)
        if nblocks == seen:
            continue
        seen = nblocks
        bpb = _cdiv(tp, nblocks)
        for np_ in range(1, npanels + 1):
            if np_ > 1 and _cdiv(npanels, np_) == _cdiv(npanels, np_ - 1):
                continue
            units = nblocks * np_
            eff = tp * npanels / nt / (_cdiv(units, nt) * bpb * _cdiv(npanels, np_))
            if bp == tb0 // mr and np_ == nparts and eff >= 0.9:
                return tb0, nparts
            if eff > best + 1e-9:
                best, tb, nparts = eff, bpb * mr, np_
    return tb, nparts


def winograd_split(C: int, H: int, W: int, OH: int, OW: int, batch: int, O: int, T: int, isa: Isa,
                   parallel: bool = True) -> Split:
    """mxcc_winograd_f43_f32: units (tile block, part of the output-channel panels). Work per unit: its tiles
    x (input transform C + panels x (GEMM 36 C NR / 2 + output transform NR)), in multiply-adds per tile."""
    tiles, tb0 = winograd_plan(C, OH, OW, batch, O, isa)
    npanels = _cdiv(O, isa.nr)
    atoms = _cdiv(tiles, isa.mr) * npanels
    pays = T if parallel else 1   # no FLOPs rule: tiles are big
    tb, nparts = winograd_units(tiles, tb0, npanels, pays, isa, 36 * C * O * 4 <= WINOGRAD_WHOLE_U_BYTES)
    if tb != tb0 and not _winograd_fits(C, W, OW, O, tb, tb0, isa):
        nblocks0 = _cdiv(tiles, tb0)
        tb, nparts = tb0, (min(npanels, _cdiv(2 * pays, nblocks0)) if pays > 1 and nblocks0 < 2 * pays else 1)
    tw = _cdiv(OW, 4)
    loads, nt = _winograd_loads(C, O, tiles, tb, tw, nparts, pays, isa)
    # the ideal: the best of every block size and channel split choose_units could take, weighed as here
    best = max(_eff(_winograd_loads(C, O, tiles, bp * isa.mr, tw, np_, pays, isa)[0])
               for bp in range(1, tb0 // isa.mr + 1) for np_ in range(1, npanels + 1))
    blocks = winograd_blocks(tiles, tb, tw, isa, nt)
    nblocks = len(blocks)
    units = nblocks * nparts
    if nt <= 1:
        return Split("winograd", pays, 0, atoms, loads, "serial", best=best)
    shared = _winograd_shared(nblocks, nparts, nt)
    even = nblocks > 1 and blocks[0] < tb   # block_grain
    sizes = f"{min(blocks)}-{max(blocks)}" if even and min(blocks) < max(blocks) else f"{max(blocks)}"
    return Split("winograd", pays, max(nt, nblocks * _cdiv(nt, nblocks)) if shared else nt, atoms, loads,
                 f"{nblocks} {'even ' if even else ''}tile blocks of {sizes}"
                 + (f" x {nparts} channel parts" if nparts > 1 else "")
                 + f" = {units} units in {nt} parts" + (", input transforms shared" if shared else ""),
                 best=max(best, _eff(loads)), jobs_per_call=2 if shared else 1)


def _eff(loads) -> float:
    return sum(loads) / len(loads) / max(loads) if loads and max(loads) > 0 else 1.0


def _winograd_gemm_rows(t: int, isa: Isa) -> int:
    """winograd_f32.c gemm_rows: the GEMM rows a block of t tiles costs (the micro-kernels' edge tiles; AVX2's
    tails of 4 or 5 rows as whole panels, as choose_units counts them)."""
    tail = t % isa.mr
    if isa.name == "avx512":
        return t
    return t - tail + (0 if tail == 0 else 3 if isa.name == "avx2" and tail <= 3 else isa.mr)


def winograd_blocks(tiles: int, tb: int, tw: int, isa: Isa, threads: int = 2) -> list[int]:
    """winograd_f32.c block_tiles: the tiles of each block (tw tiles a row), tb each or, on several threads,
    even shares of grains (block_grain: tile rows where blocks of tb start on rows, else single tiles) where the
    busiest block then computes fewer GEMM rows."""
    nblocks = _cdiv(tiles, tb)
    grain = tw if tb % tw == 0 else 1
    busiest = _cdiv(tiles // grain, nblocks) * grain
    if nblocks > 1 and threads > 1 and _winograd_gemm_rows(busiest, isa) < _winograd_gemm_rows(tb, isa):
        return [grain * (e - b) for b, e in _ranges(tiles // grain, nblocks)]
    return [min(tiles, (b + 1) * tb) - b * tb for b in range(nblocks)]


def _winograd_loads(C: int, O: int, tiles: int, tb: int, tw: int, nparts: int, pays: int,
                    isa: Isa) -> tuple[tuple, int]:
    """Per-thread work of Winograd units (tile blocks of tb, tw tiles a row, x nparts channel parts) on `pays`
    threads. With channel parts and no more blocks than threads (_winograd_shared), the blocks' input transforms
    run first, a channel slice per chunk, their cost added to the thread that runs the slice."""
    npanels = _cdiv(O, isa.nr)
    nblocks = _cdiv(tiles, tb)
    units = nblocks * nparts
    nt = min(pays, units)
    blocks = winograd_blocks(tiles, tb, tw, isa, nt)
    shared = _winograd_shared(nblocks, nparts, nt)

    def unit_cost(u: int, have: int) -> float:
        b, pp = divmod(u, nparts)
        t = blocks[b]
        pa, pb = npanels * pp // nparts, npanels * (pp + 1) // nparts
        cols = min(O, pb * isa.nr) - pa * isa.nr
        # GEMM: 36 products of (t x C) . (C x cols) over the rows the kernels compute; transforms ~ 6 per value
        gemm = 36 * _winograd_gemm_rows(t, isa) * C * cols
        return gemm + (6 * 36 * t * C if b != have and not shared else 0) + 6 * 36 * t * cols

    def part_cost(u0: int, u1: int) -> float:
        cost, have = 0.0, -1
        for u in range(u0, u1):
            cost += unit_cost(u, have)
            have = u // nparts
        return cost

    if nt <= 1:
        return _padded([part_cost(0, units)], pays), nt
    loads = list(_padded([part_cost(b, e) for b, e in _ranges(units, nt)], pays))
    if shared:   # transform chunk c (block c // slices, a channel slice) on thread c % nt: the pool's own-first order
        slices = _cdiv(nt, nblocks)
        for c in range(nblocks * slices):
            b, k = divmod(c, slices)
            t = blocks[b]
            loads[c % nt] += 6 * 36 * t * (C * (k + 1) // slices - C * k // slices)
    return tuple(loads), nt


def _winograd_shared(nblocks: int, nparts: int, nt: int) -> bool:
    """winograd_f32.c: the blocks' V made once, by all threads, before the channel parts read it."""
    return nparts > 1 and nblocks <= nt and nt > 1


def direct_split(C: int, OH: int, OW: int, KH: int, KW: int, sh: int, dh: int, dw: int, batch: int, O: int, T: int,
                 isa: Isa, parallel: bool = True) -> Split:
    """mxcc_conv_direct_f32: items (image, block of R output rows, block of OB output channels)."""
    V = isa.lanes
    nvr = _cdiv(OW, V)
    L = _cdiv(nvr * V + (KW - 1) * dw // 1, 16) * 16
    flat = sh == 1 and OW < 0.9 * nvr * V
    row_bytes = 4 * C * (KW * OW if flat else sh * L)
    fit = (48 * 1024) // row_bytes - (KH - 1) * dh - 1
    R = min(fit // sh + 1 if fit > 0 else 1, OH)
    nrb, ncb = _cdiv(OH, R), _cdiv(O, isa.direct_ob)
    items = batch * nrb * ncb
    pays = threads_for(2.0 * batch * O * OH * OW * C * KH * KW, T) if parallel else 1
    nt = min(pays, items)

    def item_cost(i: int) -> float:
        rb = (i // ncb) % nrb
        rows = min(R, OH - rb * R)
        return float(rows * OW * isa.direct_ob)   # a short channel block still runs OB lanes

    if nt <= 1:
        return Split("direct", pays, 0, items, _padded([sum(item_cost(i) for i in range(items))], pays), "serial")
    loads = _padded([sum(item_cost(i) for i in range(b, e)) for b, e in _ranges(items, nt)], pays)
    return Split("direct", pays, nt, items, loads, f"{items} items (row blocks of {R} x channel blocks) in {nt} parts")


def depthwise_split(planes: int, T: int, parallel: bool = True) -> Split:
    """mxcc_conv_depthwise_f32 (the SIMD kernels): planes (image, channel) in equal ranges, no flops rule."""
    nt = T if parallel else 1
    if nt <= 1:
        return _serial("depthwise", planes, float(planes))
    loads = tuple(float(e - b) for b, e in _ranges(planes, nt))
    return Split("depthwise", nt, nt, planes, loads, f"{planes} planes in {nt} parts")


_RNN_CELL_FLOPS = {"lstm": 120.0, "gru": 90.0, "rnn": 25.0, "tanh": 25.0, "relu": 2.0}   # rnn_f32.c CELL_FLOPS
_RNN_CELL_BLOCK = 128


def rnn_cells_split(mode: str, steps: int, N: int, H: int, calls: int, T: int) -> Split:
    """mxcc_rnn_<mode>_f32's cell pass of each step (rnn_f32.c for_cell_blocks): blocks of (batch row, 128
    columns) in contiguous ranges, one job per step of each layer and direction. The steps' GEMMs are jobs of
    their own, not counted here."""
    per_row = _cdiv(H, _RNN_CELL_BLOCK)
    blocks = N * per_row
    nt = min(threads_for(_RNN_CELL_FLOPS.get(mode, 120.0) * N * H, T), blocks)
    cols = [min(_RNN_CELL_BLOCK, H - (b % per_row) * _RNN_CELL_BLOCK) for b in range(blocks)]
    if nt <= 1:
        return Split("rnn_cells", 1, 0, blocks, (float(sum(cols)),), "serial (the step GEMMs aside)",
                     calls=steps * calls)
    loads = tuple(float(sum(cols[b:e])) for b, e in _ranges(blocks, nt))
    return Split("rnn_cells", nt, nt, blocks, loads, f"{blocks} cell blocks in {nt} parts per step (the step GEMMs "
                 "aside)", calls=steps * calls)


def rows_split(kernel: str, rows: int, T: int, flops: float | None, what: str) -> Split:
    """A range of equal rows in `threads` parts: softmax rows (flops rule) or a generated loop (parts = T)."""
    nt = threads_for(flops, T) if flops is not None else T
    if nt <= 1 or rows <= 0:
        return _serial(kernel, max(rows, 1), float(rows))
    loads = tuple(float(e - b) for b, e in _ranges(rows, nt))
    return Split(kernel, nt, nt, rows, loads, f"{rows} {what} in {nt} parts")


# ---- a lowered kernel call -------------------------------------------------------------------------------

# generated kernels run in parts (render.SPMD): the variable holding their parallel loop's extent
_LOOP_EXTENT = {
    "kernels/elemwise.c.j2": ("n", "elements"), "kernels/math_cast.c.j2": ("n", "elements"),
    "kernels/embedding.c.j2": ("n", "rows"), "kernels/pool2d.c.j2": ("planes", "planes"),
    "kernels/resize_adaptive_pool.c.j2": ("planes", "planes"), "kernels/resize_crop.c.j2": ("planes", "planes"),
    "kernels/resize_pad.c.j2": ("planes", "planes"), "kernels/lrn.c.j2": ("planes", "planes"),
    "kernels/norm_rows.c.j2": ("rows", "rows"), "kernels/batch_norm.c.j2": ("rows", "rows"),
    "kernels/softmax.c.j2": ("rows", "rows"),
}


def _int(x) -> int:
    x = at_max(x)
    if isinstance(x, str):
        x = x.rstrip("Ll")
    return int(x)


def _flag(x) -> bool:
    """A condition of the call (a dynamic batch's Cond: at the maximum batch)."""
    return bool(at_max(x))


def _geom(v) -> dict:
    out = {}
    for name, text in v["geom"]:
        nums = [int(s) for s in re.findall(r"-?\d+", str(text))]
        out[name] = nums if len(nums) > 1 or "{" in str(text) else nums[0]
    return out


def call_split(call, T: int, isa: Isa | str) -> Split:
    """The split of one lowered KernelCall (codegen/lower.py) at T threads."""
    from mxcc.codegen.render import _spmd   # the same rule that renders the kernel in parts

    isa = ISAS[isa] if isinstance(isa, str) else isa
    v, t = call.vars, call.template
    if t == "kernels/conv2d.c.j2":
        path, par = v["path"], _flag(v["parallel"])
        batch = _int(v["batch"])
        if path == "pointwise":
            return conv1x1_split(batch, _int(v["k"]), _int(v["n"]), _int(v["o"]), T, isa, par,
                                 bool(v.get("strided")))
        if path in ("packed", "winograd", "direct"):
            g = _geom(v)
            C, (_, OH, OW), (_, KH, KW) = g["channels"], g["out"], g["k"]
            O = _int(v["o"])
            if path == "packed":
                return conv_packed_split(batch, OH * OW * g["out"][0], O, C * KH * KW * g["k"][0], T, isa, par, C)
            if path == "winograd":
                return winograd_split(C, g["in"][1], g["in"][2], OH, OW, batch, O, T, isa, par)
            return direct_split(C, OH, OW, KH, KW, g["stride"][1], g["dilate"][1], g["dilate"][2], batch, O, T,
                                isa, par)
        if path in ("depthwise", "depthwise_flat"):
            g = _geom(v)
            if v["ep_per_image"]:
                s = depthwise_split(g["channels"], T, par)
                return Split(s.kernel, s.threads, s.parts, s.atoms, s.loads, s.how + ", per image", calls=batch)
            return depthwise_split(batch * g["channels"], T, par)
        if path == "gemm":
            s = gemm_split(_int(v["m"]), _int(v["n"]), _int(v["k"]), T, isa, prepacked=False)
            return Split(s.kernel, s.threads, s.parts, s.atoms, s.loads, s.how, calls=batch * _int(v["groups"]))
        # im2col (im2col_f32.c): the column block's rows in contiguous parts, one job per image, every thread
        # the call may use; then the GEMM's own jobs, not modelled here
        g = _geom(v)
        rows = g["channels"] * g["k"][0] * g["k"][1] * g["k"][2]
        nt = min(T, rows) if par else 1
        if nt <= 1:
            return _serial("im2col", rows, float(rows), "serial (the GEMM aside)")
        return Split("im2col", nt, nt, rows, tuple(float(e - b) for b, e in _ranges(rows, nt)),
                     f"{rows} im2col rows in {nt} parts (the GEMM aside)", calls=batch)
    if t == "kernels/gemm.c.j2":
        m, n, k = _int(v["m"]), _int(v["n"]), _int(v["k"])
        trans_a = str(v["trans_a"]) == "MXCC_TRANS"
        if v["bp"] and _flag(v["small_m"]):
            return gemm_row_split(m, n, k, T, isa)
        if v["bp"] and not _flag(v["unpacked"]):
            return gemm_split(m, n, k, T, isa, prepacked=True, trans_a=trans_a)
        return gemm_split(m, n, k, T, isa, prepacked=False, trans_a=trans_a,
                          trans_b=str(v["trans_b"]) == "MXCC_TRANS")
    if t == "kernels/batch_gemm.c.j2":
        return batch_gemm_split(_int(v["batch"]), _int(v["m"]), _int(v["n"]), _int(v["k"]), T, isa,
                                trans_a=str(v["trans_a"]) == "MXCC_TRANS", trans_b=str(v["trans_b"]) == "MXCC_TRANS")
    if t == "kernels/rnn.c.j2":
        mode = str(v["calls"][0]["fn"]).split("_")[2]   # mxcc_rnn_<mode>_f32
        return rnn_cells_split(mode, _int(v["T"]), _int(v["N"]), _int(v["H"]), len(v["calls"]), T)
    if t == "kernels/softmax.c.j2" and v["inner"] == 1:
        rows, n = _int(v["rows"]), _int(v["n"])
        return rows_split("softmax_rows", rows, T, 20.0 * rows * n if _flag(v["parallel"]) else 0.0, "rows")
    if _spmd(call):
        if t == "kernels/copy_rows.c.j2":
            return rows_split("parts", _int(v["total"]), T, None, "floats")
        if t in ("kernels/loops.c.j2", "kernels/reduce.c.j2"):
            outer = v["loops"][:v["collapse"]] if t == "kernels/loops.c.j2" else v["outer"]
            n = math.prod(_int(loop["n"]) for loop in outer)
            return rows_split("parts", n, T, None, "outer iterations")
        key, what = _LOOP_EXTENT[t]
        return rows_split("parts", _int(v[key]), T, None, what)
    text = " ".join(str(x) for x in v.values())
    if "parallel" in v and _flag(v["parallel"]) or "omp" in text:
        return Split("openmp", T, 0, 0, (), "OpenMP loop")
    return _serial("serial")


@dataclass(frozen=True)
class KernelSplit:
    fn: str
    group: str
    template: str
    flops: int
    split: Split


def network_splits(calls, T: int, isa: Isa | str | None = None) -> list[KernelSplit]:
    """Every forward kernel's split at T threads (KernelCalls of codegen.lower.lower)."""
    isa = isa or host_isa()
    return [KernelSplit(c.fn, c.group, c.template, c.flops, call_split(c, T, isa))
            for c in calls if c.phase == "forward"]


def summary(splits: list[KernelSplit]) -> dict:
    """Jobs per forward, and the FLOP-weighted efficiency of the kernels that split (the forward's time on T
    threads if every kernel's time followed its FLOPs: sum(flops) / sum(flops / efficiency))."""
    split = [k for k in splits if k.split.efficiency is not None and k.split.threads > 1]
    weighted = sum(k.flops for k in split) / sum(k.flops / k.split.efficiency for k in split) if split else None
    return {"jobs": sum(k.split.jobs for k in splits), "openmp": sum(1 for k in splits if k.split.kernel == "openmp"),
            "weighted_efficiency": weighted}


def splits_report(calls, T: int, isa: str) -> dict:
    """`mxcc inspect --threads T` (plan JSON "splits"): every forward kernel's split and the summary."""
    ks = network_splits(calls, T, isa)
    return {"isa": isa, "summary": summary(ks), "kernels": [
        {"function": k.fn, "group": k.group, "split": k.split.kernel, "threads": k.split.threads,
         "parts": k.split.parts, "atoms": k.split.atoms, "calls": k.split.calls, "how": k.split.how,
         "efficiency": k.split.efficiency, "ideal": k.split.ideal, "flops": k.flops,
         "loads": list(k.split.loads)} for k in ks]}
