"""Convolution: N-D (1-D NCW, 2-D NCHW, 3-D NCDHW) cross-correlation with stride, pad, dilation and groups.

    out[n, o, p] = bias[o] + sum_{c in group(o), q} weight[o, c, q] * data[n, c, p * stride - pad + q * dilate]

An ANCHOR: the GEMM epilogue adds the bias per output channel (a row of the GEMM), then a fused residual
(elemwise_add) and activation. The lowering picks one path per layer (all decided here, printed by kernels/conv2d.c.j2):

  depthwise  groups == C_in == C_out (1-D/2-D): the direct kernel of runtime_c/conv/, epilogue inline; its
             plane kernel picked by the runtime (AVX-512: small 3x3 planes 16 channels at a time)
  depthwise_flat  the same kernel with the per-plane kernels only (flat where it fits, else rows), never the
             16-channel blocks: a candidate where those would run (_dw_channel_blocks), for the tuner (AMD Zen 4
             runs them slower than the flat kernel, Intel faster)
  direct     one group, 1-D/2-D, at most DIRECT_MAX_C input channels (first layers; before winograd only up
             to DIRECT_FIRST_MAX_C), a weight fixed at bind time, not a plain 1x1: runtime_c/conv/conv_direct_f32.c, vectorized over output pixels of a row,
             the weight repacked once by <net>_prepare; its scratch (staged input rows) is per thread
  winograd   2-D 3x3, stride 1, dilation 1, one group, a weight fixed at bind time, and enough output tiles
             (WINOGRAD_MIN_PIXELS or WINOGRAD_MIN_BATCH): Winograd F(4x4, 3x3) (runtime_c/conv/winograd_f32.c), the weight transformed
             once by <net>_prepare; 4x fewer multiplies, float32 error ~1e-6..3e-6 of sum |w||x| (10x direct's)
  pointwise  1x1, stride 1, pad 0, one group, a weight fixed at bind time and POINTWISE_MIN_PIXELS (7x7) pixels
             per image: tiles of output channels x pixels written straight into NCHW (runtime_c/conv/conv1x1_f32.c),
             the weight packed once by <net>_prepare; 2-D 1x1 layers with a stride and no pad too, from
             STRIDED_POINTWISE_MIN_PIXELS output pixels (mxcc_conv1x1_strided_f32 gathers the strided pixels)
  packed     one group and a weight fixed at bind time (inference): the weight is packed once by <net>_prepare
             and the whole batch is one GEMM with output pixels as rows, gathered straight into the GEMM's
             packed panels (runtime_c/conv/conv_packed_f32.c); its scratch is per thread, in the context
  dense      1x1, stride 1, pad 0, one group, a weight fixed at bind time, on a 1-pixel image (a classifier after
             global pooling: MobileNet v2's 1280 -> 1000): FullyConnected's GEMM, out (N, O) = data (N, C) .
             weight (O, C)^T, whose small-M path reads the weight's rows as they are (a GEMV streams the weight
             once; the packed path computed 7 pixel rows for 1)
  gemm       1x1 kernel, stride 1, pad 0: out[n] (O, HW) = weight (O, C) . data[n] (C, HW), per group
  im2col     otherwise, block by block of output pixels: im2col of a block of data[n]'s columns into the
             workspace (C*K, NB), then one GEMM per group writing that block's NB output columns in place
             (ldc = OHW); the workspace is one block (col_block), not the whole image's columns

path() is the heuristics above (thresholds measured on one CPU); candidates() lists every path that can compute a
layer. A tuned build (mxcc.compile(tune=True), compiler/tune.py) times the candidates on the host and fixes the
fastest in the layer's attrs (chosen_path, via CompileOptions.conv_paths and passes/choose_paths.py), which
path() then returns, so that workspace sizing and lowering agree.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from math import prod
from typing import Literal, Optional

from mxcc.codegen.batchvar import at_max, cond_of
from mxcc.ops import register
from mxcc.ops._pack import conv1x1_weight, conv_direct_weight, gemm_pack_b, winograd_f43_weight
from mxcc.ops._spatial import LAYOUTS, check_layout, conv_out, dilated, geom, per_image_epilogue, spatial
from mxcc.ops.base import Fusion, OpDef
from mxcc.ops.fully_connected import prepack_pays, small_m_packed, unpacked_rows

PARALLEL_MIN_ELEMENTS = 1 << 15   # below this an OpenMP fork costs more than the loop
# The same bound counted in multiply-adds, for the decision of a whole layer: counting only its input
# elements left MobileNet's 512->1024@7 (49 pixels x 512 channels = 25k elements, 26M MACs) and its 512-channel
# depthwise @7 on one thread, the whole layer as slow with 2 threads as with 1 (567 vs 582 us).
PARALLEL_MIN_MACS = 1 << 17

# The im2col block: C*K rows x NB output pixels, built then multiplied at once. Bounded so that (1) the
# scratch stays small next to the activations (a whole image's columns were 7.4 MiB in ResNet-50's first
# layer, 1.2x the lower bound of its arena) and (2) the GEMM reads the block while it is still in L2
# (2 MiB per core here; the GEMM's packed A block, 216 KiB, and B panel share it): COL_BLOCK_BYTES is a
# quarter of it. NB is a multiple of the GEMM's register tile width (NR = 16: no padded panel but the last)
# and at least COL_BLOCK_MIN: every GEMM call packs the weights (M x K) again, about one element moved per
# 2 * NB flops, so narrow blocks pay for it (profile of ResNet-18 at NB = 64: packing A took 19% of
# stage 3's time in 4 blocks of 196 columns, against 11% with the whole image). With both bounds every
# reference network's arena stays at its lower bound at batch 1 (docs/performance.md).
COL_BLOCK_BYTES = 512 << 10
# Winograd F(4x4, 3x3) wins where its transformed weight (36 x C x O floats, 4x the kernel's) is read by enough
# 4x4 tiles. benchmarks/winograd.py (1 thread, ORT time / Winograd time): 64@56 2.3, 128@28 2.0, 256@14 1.3
# at batch 1 (>= 196 output pixels), but 512@7 (4 tiles, a 37.7 MB transformed weight) 0.77-1.04 at batch 1
# and 1.7 at batch 64; the packed path does 512@7 at ~1.0x ORT. 13x13 (16 tiles, as 14x14): SqueezeNet 1.1's
# 48->192 and 64->256 in the network, packed / Winograd, 214 / 174 us (Intel Xeon model 167, 1 thread), 1.31-1.65x
# each by the tuner (AMD Zen 4, 1 and 2 threads). So: 13x13 outputs and up, or batch >= 16.
WINOGRAD_MIN_PIXELS = 13 * 13
# A 1x1 stride-1 layer with few input channels is bound by its output's memory traffic, and the packed path's
# transposed store loses there (benchmarks/conv_packed.py, MobileNet 32->64@112: 0.65x the gemm path); it
# wins from 512->512@14 on. The gemm path (the image is its own column matrix) keeps K <= this.
PACKED_MIN_K_1X1 = 64
WINOGRAD_MIN_BATCH = 16
# The pointwise kernel against the packed path, benchmarks/conv1x1.py --threads 1 --rounds 3, MobileNet at
# batch 1, ORT time / pointwise vs / packed: 32->64@112 1.09 vs 0.67, 64->128@56 1.03 vs 0.77, 128->128@56
# 1.01 vs 0.83, 256->256@28 1.02 vs 0.93; with its column tiles for a panel's last pixels: 256->512@14 1.08
# vs 1.00, 512->512@14 1.07 vs 1.01, 512->1024@7 0.97 vs 0.89, 1024->1024@7 0.99 vs 0.89. Smaller images
# were not measured: they stay on the packed path (or gemm).
POINTWISE_MIN_PIXELS = 7 * 7
# 1x1 layers with a stride (ResNet's downsampling), the pointwise kernel on gathered pixels against the packed
# path's own gather (a C driver, 1 thread, AMD Zen 4, us, 2026-11-28): 256->512 56x56 s2 2007 vs 2221-2495,
# 256->128 56x56 s2 549-596 vs 598-638, 64->128 56x56 s2 146-151 vs 176-184; at 14x14 and 7x7 outputs the two
# tie (512->1024 28x28 s2 1924-2037 vs 1940-2048, 512->256 509-517 vs 509-515, 1024->2048 14x14 s2 1921-2077
# vs 1895-2043). Same bits either way.
STRIDED_POINTWISE_MIN_PIXELS = 28 * 28
# Layers with few input channels go to the direct kernel: the packed path gathers K = C*KH*KW taps per pixel
# into panels and stores its tile transposed, too much work per multiply-add when K is small. Packed time /
# direct time (1 thread; `benchmarks/conv_direct.py --threads 1` for the first layers, a C driver for the
# rest): MobileNet conv0 3->32 3x3s2@224 1.81, ResNet-18 stem 3->64 7x7s2@224 1.45, SqueezeNet 1.1 conv0 1.68,
# LeNet conv1 1->20 5x5@28 b64 2.88 (ORT / direct: 1.02, 1.02, 1.03, 1.37); 3x3 s1 @56 ->64: C=8 1.25,
# 16 1.10; LeNet conv2 20->50 5x5@12 b64 1.16; but C=32: 3x3s2
# @56 ->128 0.94, 3x3 @28 ->64 0.86. Winograd beats direct on 3x3 stride 1 from C=8 (@56 ->64: direct /
# winograd C=3 0.88, 4 0.95, 8 1.14, 16 2.1), so only up to DIRECT_FIRST_MAX_C does direct go before it.
DIRECT_MAX_C = 20
DIRECT_FIRST_MAX_C = 4
COL_BLOCK_MIN = 192
COL_BLOCK_ALIGN = 16


def col_block(rows: int, ncols: int) -> int:
    """Columns per im2col block for a (rows, ncols) column matrix: the widest multiple of COL_BLOCK_ALIGN
    within COL_BLOCK_BYTES (at least COL_BLOCK_MIN), then evened out over the blocks it needs."""
    nb = max(COL_BLOCK_MIN, COL_BLOCK_BYTES // (4 * rows) // COL_BLOCK_ALIGN * COL_BLOCK_ALIGN)
    if nb >= ncols:
        return ncols
    nblocks = -(-ncols // nb)
    even = -(-ncols // nblocks)
    return min(nb, -(-even // COL_BLOCK_ALIGN) * COL_BLOCK_ALIGN)


@dataclass(frozen=True)
class ConvAttrs:
    kernel: tuple[int, ...]
    num_filter: int
    stride: tuple[int, ...] = ()
    dilate: tuple[int, ...] = ()
    pad: tuple[int, ...] = ()
    num_group: int = 1
    no_bias: bool = False
    layout: Optional[Literal[LAYOUTS]] = None
    # The path a tuned build (compiler/tune.py) or CompileOptions.conv_paths fixed for this layer, set by
    # passes/choose_paths.py after checking it against candidates(); "" = path()'s heuristics. Not an MXNet
    # attribute: a symbol file cannot set it (INTERNAL).
    chosen_path: str = ""

    IGNORED = ("workspace", "cudnn_tune", "cudnn_off")   # GPU/cuDNN tuning: no effect on the result
    INTERNAL = ("chosen_path",)

    def __post_init__(self):
        nsp = len(self.kernel)
        if not 1 <= nsp <= 3:
            raise ValueError(f"kernel={self.kernel}: only 1-D, 2-D and 3-D convolutions exist")
        if any(k <= 0 for k in self.kernel):
            raise ValueError(f"kernel={self.kernel} must be positive")
        if self.num_filter <= 0:
            raise ValueError(f"num_filter must be positive, got {self.num_filter}")
        if self.num_group <= 0 or self.num_filter % self.num_group:
            raise ValueError(f"num_filter={self.num_filter} must be a multiple of num_group={self.num_group}")
        for what, v, lo in (("stride", self.stride, 1), ("dilate", self.dilate, 1), ("pad", self.pad, 0)):
            if any(x < lo for x in spatial(v, nsp, lo, what)):
                raise ValueError(f"{what}={v} must be >= {lo}")
        check_layout(self.layout, nsp)

    @property
    def nsp(self) -> int:
        return len(self.kernel)

    def geometry(self):
        """(kernel, stride, pad, dilate), each one entry per spatial dimension."""
        n = self.nsp
        return (self.kernel, spatial(self.stride, n, 1, "stride"), spatial(self.pad, n, 0, "pad"),
                spatial(self.dilate, n, 1, "dilate"))


def _inputs(a: ConvAttrs):
    return ("data", "weight") if a.no_bias else ("data", "weight", "bias")


def _out_spatial(a: ConvAttrs, x: tuple) -> tuple:
    k, s, p, d = a.geometry()
    return tuple(conv_out(x[2 + i], k[i], s[i], p[i], d[i]) for i in range(a.nsp))


def _infer(a: ConvAttrs, s):
    x = s.known("data")
    nsp = a.nsp
    if len(x) != nsp + 2:
        s.fail(f"input 'data' has shape {x}: a {nsp}-D kernel {a.kernel} needs {nsp + 2}-D data "
               f"({'NCW NCHW NCDHW'.split()[nsp - 1]})", input="data")
    c = x[1]
    if c % a.num_group:
        s.fail(f"input 'data' has {c} channels, not a multiple of num_group={a.num_group}", input="data")
    s.expect("weight", (a.num_filter, c // a.num_group, *a.kernel),
             f"(num_filter={a.num_filter}, {c // a.num_group} channels per group, kernel {a.kernel})")
    if not a.no_bias:
        s.expect("bias", (a.num_filter,), f"(num_filter={a.num_filter})")
    k, st, p, d = a.geometry()
    out = _out_spatial(a, x)
    for i in range(nsp):
        if out[i] <= 0:
            s.fail(f"kernel {a.kernel} (dilated {dilated(k[i], d[i])}) is larger than the padded input "
                   f"{x[2 + i]} + 2*{p[i]} along spatial axis {i}", input="data")
    return [(x[0], a.num_filter, *out)]


def _flops(a: ConvAttrs, ins, outs):
    x, y = ins[0].shape, outs[0].shape
    k_per_out = (x[1] // a.num_group) * prod(a.kernel)
    return 2 * prod(y) * k_per_out + (0 if a.no_bias else prod(y))


def _plain_1x1(k, s, p) -> bool:
    return all(v == 1 for v in k) and all(v == 1 for v in s) and not any(p)


def _strided_1x1(k, s, p) -> bool:
    """A 2-D 1x1 layer with a stride and no pad: the pointwise kernel on gathered pixels (mxcc_conv1x1_strided_f32)."""
    return len(k) == 2 and all(v == 1 for v in k) and any(v > 1 for v in s) and not any(p)


def _dw_channel_blocks(a: ConvAttrs, x: tuple) -> bool:
    """Whether an AVX-512 build computes this depthwise layer 16 channels at a time (depthwise_f32.c: where the
    flat kernel fits, mxcc_depthwise_flat_fits with 16 lanes, and mxcc_depthwise_cblock_kernel takes the
    geometry; a fused residual, unknown here, sends it back to the flat kernel, which the tuner then times
    twice, as it does on AMD family 25, where MXCC_DW_AUTO keeps the flat kernel). 2-D, 3x3, equal strides of 1 or 2, no dilation, at least 16 channels, planes of at most 16 x 16."""
    k, s, p, d = a.geometry()
    if a.nsp != 2 or tuple(k) != (3, 3) or tuple(d) != (1, 1) or s[0] != s[1] or s[0] > 2 or x[1] < 16:
        return False
    (H, W), (OH, OW) = x[2:], _out_spatial(a, x)
    vecs = -(-OH * OW // 16)
    cblock = (max(p) <= 2 and H <= 16 and W <= 16 and ((OH - 1) * s[0] + 3) * ((OW - 1) * s[1] + 3) <= 324
              and OH * OW <= 256)
    if s[0] == 1:
        flat = (OH, OW) == (H, W) and tuple(p) == (1, 1)
    else:
        flat = vecs >= 3 and tuple(p) == (1, 1) and (OH, OW) == ((H + 1) // 2, (W + 1) // 2)
    return cblock and flat and OW <= 8 and vecs <= 8


def candidates(a: ConvAttrs, x: tuple, const: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """Every path that can compute this layer, in a fixed order (path() picks one of them by its heuristics;
    compiler/tune.py times them all where there are several). Only a weight fixed at bind time (`const`, an
    inference forward) gives a choice: the prepacked paths need it.

      depthwise (groups == C_in == C_out, 1-D/2-D)         depthwise, depthwise_flat (_dw_channel_blocks)
      one group, constant weight, 3x3 stride 1 dilation 1  winograd, packed, direct (C_in <= DIRECT_MAX_C)
      one group, constant weight, 1x1 stride 1 pad 0       dense (1-pixel images), pointwise, packed, gemm
      one group, constant weight, 2-D 1x1 strided pad 0    pointwise, packed, direct (C_in <= DIRECT_MAX_C)
      one group, constant weight, otherwise                packed, direct (1-D/2-D, C_in <= DIRECT_MAX_C)
      anything else (groups, a weight the forward computes) gemm (1x1 stride 1 pad 0) or im2col

    Winograd and pointwise are legal on any image size (the kernels crop their tiles); the heuristic takes them
    only where they were measured to win (WINOGRAD_MIN_PIXELS, POINTWISE_MIN_PIXELS)."""
    k, s, p, d = a.geometry()
    plain = _plain_1x1(k, s, p)
    if a.num_group == x[1] == a.num_filter and a.nsp <= 2:
        return ("depthwise",) + (("depthwise_flat",) if _dw_channel_blocks(a, x) else ())
    if a.num_group != 1 or "weight" not in const:
        return ("gemm",) if plain else ("im2col",)
    if plain:
        return (("dense",) if prod(x[2:]) == 1 else ()) + ("pointwise", "packed", "gemm")
    direct = ("direct",) if a.nsp <= 2 and x[1] <= DIRECT_MAX_C else ()
    if tuple(k) == (3, 3) and tuple(s) == (1, 1) and tuple(d) == (1, 1):
        return ("winograd", "packed") + direct
    if _strided_1x1(k, s, p):
        return ("pointwise", "packed") + direct
    return ("packed",) + direct


def path(a: ConvAttrs, x: tuple, const: frozenset[str] = frozenset()) -> str:
    """Which kernel computes this layer: 'depthwise', 'direct', 'winograd', 'pointwise', 'packed', 'gemm' (1x1)
    or 'im2col'. `const`: the inputs fixed at bind time (an inference forward's params): a constant weight can
    be packed once. A layer whose path was chosen for it (a.chosen_path: a tuned build, checked against
    candidates() by passes/choose_paths.py) takes that one; the others the heuristic's."""
    return a.chosen_path or heuristic(a, x, const)


def heuristic(a: ConvAttrs, x: tuple, const: frozenset[str] = frozenset()) -> str:
    """The path the measured thresholds above pick among candidates()."""
    c = candidates(a, x, const)
    if len(c) == 1 or c[0] == "depthwise":
        return c[0]
    k, s, p, _ = a.geometry()
    plain = _plain_1x1(k, s, p)
    if "dense" in c:
        return "dense"
    if "direct" in c and x[1] <= DIRECT_FIRST_MAX_C:
        return "direct"
    if "winograd" in c and (prod(_out_spatial(a, x)) >= WINOGRAD_MIN_PIXELS or at_max(x[0]) >= WINOGRAD_MIN_BATCH):
        return "winograd"
    if "pointwise" in c and (prod(x[2:]) >= POINTWISE_MIN_PIXELS if plain
                             else prod(_out_spatial(a, x)) >= STRIDED_POINTWISE_MIN_PIXELS):
        return "pointwise"
    if "direct" in c:
        return "direct"
    if not (plain and x[1] <= PACKED_MIN_K_1X1):
        return "packed"
    return "gemm"


def _workspace(a: ConvAttrs, ins, outs, const=frozenset()) -> int:
    x, y = ins[0].shape, outs[0].shape
    if path(a, x, const) != "im2col":
        return 0
    rows = x[1] * prod(a.kernel)
    return rows * col_block(rows, prod(y[2:])) * 4      # one block of columns (C*K, NB)


def _lower(a: ConvAttrs, ctx):
    x = ctx.in_type("data").shape
    y = ctx.out_type(0).shape
    kern, st, p, d = a.geometry()
    g, c, o = a.num_group, x[1], a.num_filter
    cg, og = c // g, o // g
    hw, ohw, k = prod(x[2:]), prod(y[2:]), prod(kern)
    kind = path(a, x, ctx.const)
    if kind == "dense":
        return _lower_dense(a, ctx, x)
    if kind in ("packed", "winograd", "pointwise", "direct"):
        return _lower_packed(a, ctx, x, y, kind)
    macs = x[0] * o * ohw * cg * k       # the layer's multiply-adds (depthwise: cg = 1)
    nb = col_block(c * k, ohw) if kind == "im2col" else ohw
    shape = "x".join(map(str, kern))
    dw = f"depthwise {shape}: out[n, c] = sum over the {shape} window of weight[c] * data[n, c]"
    desc = {"depthwise": dw, "depthwise_flat": f"{dw}, by the per-plane kernels (no channel blocks)",
            "gemm": f"out[n] ({o}, {ohw}) = weight ({o}, {cg}) . data[n] ({c}, {hw})",
            "im2col": f"out[n] ({o}, {ohw}) = weight ({o}, {cg * k}) . im2col(data[n]) ({c * k}, {ohw}), "
                      f"in blocks of {nb} columns"}[kind]
    if g > 1 and not kind.startswith("depthwise"):
        desc += f", one GEMM per group of {og} x {cg} channels"
    ys = ctx.plane_stride("out")   # depthwise only (_planes_apart)
    if ys:
        desc += f"; out's planes {ys} floats apart (rows on cache lines for the pointwise layer after)"
    return "kernels/conv2d.c.j2", dict(
        path=kind, batch=x[0], groups=g, m=og, n=ohw, nb=nb, k=cg * (k if kind == "im2col" else 1),
        x_img=c * hw, y_img=o * (ys or ohw), w_grp=og * cg * k, ldx=0, strided=None,
        b_grp=cg * hw, y_grp=og * ohw,
        geom=geom(c, x[2:], y[2:], kern, st, p, d) + ([("y_plane", str(ys))] if ys else []) if kind != "gemm" else [],
        **per_image_epilogue(ctx, None if a.no_bias else "bias", o * ohw, ohw),
        parallel=cond_of(c * k * nb >= PARALLEL_MIN_ELEMENTS if kind == "im2col" else macs >= PARALLEL_MIN_MACS),
        what=f"{desc}; stride {st} pad {p} dilate {d} groups {g}", o=o, thread_scratch=None, weight="weight", fn="",
    )


def _lower_packed(a: ConvAttrs, ctx, x, y, kind: str):
    """The paths that read the weight transformed at bind time: packed (GEMM panels), winograd, pointwise and direct."""
    kern, st, p, d = a.geometry()
    c, o = x[1], a.num_filter
    k, ohw = c * prod(kern), prod(y[2:])
    if kind == "pointwise":
        return _lower_pointwise(a, ctx, x, o, ohw)
    fn = {"packed": "mxcc_conv_packed", "winograd": "mxcc_winograd_f43", "direct": "mxcc_conv_direct"}[kind]
    weight = ctx.packed_input("weight", {"packed": lambda: gemm_pack_b(k, o, trans=True),
                                       "winograd": lambda: winograd_f43_weight(o, c),
                                       "direct": lambda: conv_direct_weight(k, o)}[kind]())
    gm = geom(c, x[2:], y[2:], kern, st, p, d)
    literal = "(const mxcc_conv_geom){ " + ", ".join(f".{f} = {v}" for f, v in gm) + " }"
    what = {"packed": f"out^T ({x[0]}*{ohw}, {o}) = im2col(data)^T ({x[0]}*{ohw}, {k}) . weight^T ({k}, {o}), "
                      f"one GEMM with pixels as rows, the weight packed at bind time",
            "winograd": f"Winograd F(4x4, 3x3): out = A^T [(B^T d B) . (G g G^T)] A over 4x4 tiles, "
                        f"36 GEMMs (tiles, {c}) . ({c}, {o}), the weight transformed at bind time",
            "direct": f"direct: out ({x[0]}, {o}, {ohw}) over {k} taps, vectorized over output pixels of a row, "
                      f"a block of channels in registers, the weight repacked at bind time"}[kind]
    return "kernels/conv2d.c.j2", dict(
        path=kind, fn=fn, batch=x[0], groups=1, m=o, n=ohw, nb=ohw, k=k, x_img=c * prod(x[2:]), y_img=o * ohw, ldx=0,
        strided=None,
        w_grp=o * k, b_grp=0, y_grp=0, geom=gm, o=o, weight=weight,
        epilogue=ctx.gemm_epilogue(bias=None if a.no_bias else "bias", per_row=True, ld_residual=ohw),
        ep_per_image=False, parallel=cond_of(x[0] * ohw * k * o >= PARALLEL_MIN_MACS),
        thread_scratch=f"{fn}_scratch_floats(&{literal}, {x[0]}, {o}, threads)",
        what=f"{what}; stride {st} pad {p} dilate {d}")


def _lower_dense(a: ConvAttrs, ctx, x):
    """A 1x1 convolution of 1-pixel images is FullyConnected: data (N, C, 1..) is (N, C), out (N, O). Its GEMM and
    its choice of small-M / prepacked paths are FullyConnected's (ops/fully_connected.py)."""
    m, k, o = x[0], x[1], a.num_filter
    return "kernels/gemm.c.j2", dict(
        m=m, n=o, k=k, trans_a="MXCC_NO_TRANS", trans_b="MXCC_TRANS",
        a="data", lda=k, b="weight", ldb=k, c="out", ldc=o, small_m=small_m_packed(m, o),
        bp=ctx.packed_input("weight", gemm_pack_b(k, o, trans=True)) if prepack_pays(m, True, k, o) else None,
        unpacked=unpacked_rows(m, k, o, False, True, prepack_pays(m, True, k, o)),
        epilogue=ctx.gemm_epilogue(bias=None if a.no_bias else "bias", per_row=False, ld_residual=o),
        what=f"a 1x1 convolution of 1-pixel images as FullyConnected: out[{m},{o}] = data[{m},{k}] . "
             f"weight[{o},{k}]^T",
    )


def _lower_pointwise(a: ConvAttrs, ctx, x, o: int, ohw: int):
    c = x[1]
    kern, st, p, _ = a.geometry()
    strided = tuple(x[2:]) + tuple(st) if _strided_1x1(kern, st, p) else None   # (H, W, sh, sw)
    ldx = 0 if strided else ctx.plane_stride("data")   # data's planes further apart than ohw (_planes_apart), else 0
    apart = (f"; stride {tuple(st)}: the pixels of {x[2]}x{x[3]} gathered per block of pixel panels" if strided
             else f"; data's planes {ldx} floats apart, rows read in place on cache lines" if ldx else "")
    return "kernels/conv2d.c.j2", dict(
        path="pointwise", fn="mxcc_conv1x1", batch=x[0], groups=1, m=o, n=ohw, nb=ohw, k=c,
        x_img=c * (ldx or prod(x[2:])), ldx=ldx, strided=strided,
        y_img=o * ohw, w_grp=o * c, b_grp=0, y_grp=0, geom=[], o=o,
        weight=ctx.packed_input("weight", conv1x1_weight(o, c)),
        epilogue=ctx.gemm_epilogue(bias=None if a.no_bias else "bias", per_row=True, ld_residual=ohw),
        ep_per_image=False, parallel=cond_of(x[0] * ohw * c * o >= PARALLEL_MIN_MACS),
        thread_scratch=f"mxcc_conv1x1_scratch_floats({c}, threads)",
        what=f"out[n] ({o}, {ohw}) = weight ({o}, {c}) . data[n] ({c}, {ohw}), tiles of output channels x "
             f"pixels stored into NCHW, the weight packed at bind time{apart}")


def _planes_apart(a: ConvAttrs, ins, const=frozenset()) -> tuple[str, ...]:
    """OpDef.planes_apart: the depthwise kernels write their output planes mxcc_conv_geom.y_plane apart, the
    pointwise kernel reads its input's planes ldx apart (mxcc_conv1x1_planes_f32); 2-D images only."""
    x = ins[0].shape
    if len(x) != 4:
        return ()
    kind = path(a, x, const)
    plain = _plain_1x1(*a.geometry()[:3])   # a strided pointwise layer gathers its pixels
    return ("out",) if kind in ("depthwise", "depthwise_flat") else ("data",) if kind == "pointwise" and plain else ()


def _grad(a: ConvAttrs, g):
    attrs = {f.name: getattr(a, f.name) for f in fields(ConvAttrs) if f.name not in ConvAttrs.INTERNAL}
    outs = g.emit("_backward_Convolution", [g.ograd(), g.input("data"), g.input("weight")],
                  data_grad=g.needs("data"), **attrs)
    names = _bwd_outputs(ConvBackwardAttrs(**attrs, data_grad=g.needs("data")))
    return {n[:-len("_grad")]: r for n, r in zip(names, outs)}


def _paths(a: ConvAttrs, ins, const=frozenset()) -> tuple[tuple[str, ...], str]:
    """OpDef.paths: the candidates of the layer and the heuristics' choice (whatever a.chosen_path says)."""
    x = ins[0].shape
    return candidates(a, x, const), heuristic(a, x, const)


def _residual_in_place(a: ConvAttrs, ins, const=frozenset()) -> bool:
    """OpDef.residual_in_place: the pointwise, packed, direct and Winograd kernels (runtime_c/conv/
    conv1x1_f32.c, conv_packed_f32.c, conv_direct_f32.c, winograd_f32.c) add each residual element to its
    finished sum over all of C (in registers, or from the tile's scratch) and then store that output element, on
    every ISA: their output may take the storage of a residual that dies there (ResNet-50's bottleneck ends; 2
    threads, Intel Xeon: 31.0 -> 30.0 ms, no write-allocate of a second 3.2 MB buffer at 56x56). Not the GEMM
    paths (im2col, gemm, dense), whose epilogue runs over the stored raw sums, nor depthwise (not measured)."""
    return path(a, ins[0].shape, const) in ("pointwise", "packed", "direct", "winograd")


CONVOLUTION = register(OpDef(
    name="Convolution", attrs=ConvAttrs, inputs=_inputs, infer=_infer, fusion=Fusion.ANCHOR, epilogue_axis=1,
    flops=_flops, lower=_lower, workspace=_workspace, paths=_paths, grad=_grad,
    residual_in_place=_residual_in_place, planes_apart=_planes_apart, doc=__doc__))


# -- backward: one kernel per layer computing (data_grad), weight_grad, (bias_grad) -----------------------
@dataclass(frozen=True)
class ConvBackwardAttrs(ConvAttrs):
    data_grad: bool = True        # False for the first layer: nobody needs the gradient of the input


def _bwd_outputs(a: ConvBackwardAttrs) -> tuple[str, ...]:
    return (("data_grad",) if a.data_grad else ()) + ("weight_grad",) + (() if a.no_bias else ("bias_grad",))


def _bwd_infer(a: ConvBackwardAttrs, s):
    x, w = s.known("data"), s.known("weight")
    return ([x] if a.data_grad else []) + [w] + ([] if a.no_bias else [(a.num_filter,)])


def _bwd_flops(a: ConvBackwardAttrs, ins, outs):
    fwd = _flops(a, [ins[1]], [ins[0]])
    return fwd * (2 if a.data_grad else 1)


def _bwd_workspace(a: ConvBackwardAttrs, ins, outs, const=frozenset()) -> int:
    return _workspace(a, [ins[1]], [ins[0]])


def _bwd_lower(a: ConvBackwardAttrs, ctx):
    x, y = ctx.in_type("data").shape, ctx.in_type("ograd").shape
    kern, st, p, d = a.geometry()
    g, c, o = a.num_group, x[1], a.num_filter
    cg, og = c // g, o // g
    hw, ohw, k = prod(x[2:]), prod(y[2:]), prod(kern)
    kind = path(a, x)
    names = _bwd_outputs(a)
    out = {n: (f"out{i}" if len(names) > 1 else "out") for i, n in enumerate(names)}
    ck = cg * (k if kind == "im2col" else 1)
    nb = col_block(c * k, ohw) if kind == "im2col" else ohw
    desc = {"depthwise": "depthwise: the direct backward kernel (data scatter, weight sums per channel)",
            "gemm": f"1x1: dweight_g ({og}, {cg}) += ograd[n]_g . data[n]_g^T, ddata[n]_g = weight_g^T . ograd[n]_g",
            "im2col": f"dweight_g ({og}, {ck}) += ograd[n]_g ({og}, {ohw}) . im2col(data[n])_g^T; "
                      f"ddata[n] = col2im(weight_g^T . ograd[n]_g), in blocks of {nb} columns"}[kind]
    return "kernels/conv2d_backward.c.j2", dict(
        path=kind, batch=x[0], groups=g, m=og, n=ohw, nb=nb, k=ck, x_img=c * hw, y_img=o * ohw, w_grp=og * ck,
        b_grp=cg * hw, y_grp=og * ohw,
        geom=geom(c, x[2:], y[2:], kern, st, p, d) if kind != "gemm" else [],
        dx=out.get("data_grad"), dw=out["weight_grad"], db=out.get("bias_grad"), out_channels=o,
        parallel=cond_of((c * k * nb if kind == "im2col" else x[0] * c * ohw) >= PARALLEL_MIN_ELEMENTS),
        what=f"{desc}; stride {st} pad {p} dilate {d} groups {g}")


CONVOLUTION_BACKWARD = register(OpDef(
    name="_backward_Convolution", attrs=ConvBackwardAttrs, inputs=lambda a: ("ograd", "data", "weight"),
    output_names=_bwd_outputs, infer=_bwd_infer, fusion=Fusion.OPAQUE, flops=_bwd_flops, lower=_bwd_lower,
    workspace=_bwd_workspace))
