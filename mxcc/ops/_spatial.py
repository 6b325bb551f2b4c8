"""Helpers shared by the spatial operators (Convolution, Deconvolution, Pooling): MXNet's defaults for
stride/pad/dilate, the channel-first layout names, the `mxcc_conv_geom` initializer (runtime_c/conv/), and
the per-channel epilogue of the convolution kernels.

Not an op module (the leading underscore keeps it out of the registry's auto-import).
"""
from __future__ import annotations

# spatial rank -> the channel-first layout MXNet names for it (the only layouts mxcc computes)
CHANNEL_FIRST = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
LAYOUTS = ("NCW", "NCHW", "NCDHW", "NWC", "NHWC", "NDHWC")


def check_layout(layout: str | None, nsp: int) -> None:
    """Raise ValueError (an AttrError once parsed) unless `layout` is None or the channel-first layout."""
    if layout is None:
        return
    want = CHANNEL_FIRST.get(nsp)
    if layout != want:
        raise ValueError(f"layout={layout!r} is not supported: mxcc computes channel-first tensors only "
                         f"({want or 'NCW/NCHW/NCDHW'} for a {nsp}-D kernel); transpose the data instead")


def spatial(value: tuple, nsp: int, default: int, what: str) -> tuple:
    """MXNet's rule: an empty tuple means `default` in every spatial dimension."""
    if not value:
        return (default,) * nsp
    if len(value) != nsp:
        raise ValueError(f"{what}={value} has {len(value)} dimensions, the kernel has {nsp}")
    return tuple(value)


def dilated(k: int, d: int) -> int:
    return d * (k - 1) + 1


def conv_out(x: int, k: int, s: int, p: int, d: int) -> int:
    """Output length of a convolution along one axis (MXNet's ConvolutionShape)."""
    return (x + 2 * p - dilated(k, d)) // s + 1


def pad3(t: tuple, fill: int) -> tuple:
    """Spatial tuple -> (depth, height, width), leading dimensions filled (1-D/2-D as 3-D)."""
    return (fill,) * (3 - len(t)) + tuple(t)


def geom(channels: int, in_sp: tuple, out_sp: tuple, k: tuple, s: tuple, p: tuple, d: tuple) -> list:
    """The fields of a `mxcc_conv_geom` initializer, as (name, C text) pairs."""
    arr = lambda t: "{" + ", ".join(str(int(v)) for v in t) + "}"   # noqa: E731
    return [("channels", str(channels)), ("in", arr(pad3(in_sp, 1))), ("out", arr(pad3(out_sp, 1))),
            ("k", arr(pad3(k, 1))), ("stride", arr(pad3(s, 1))), ("pad", arr(pad3(p, 0))),
            ("dilate", arr(pad3(d, 1)))]


def per_image_epilogue(ctx, bias: str | None, image: int, ld: int) -> dict:
    """The epilogue fields, channels as rows. A fused residual (elemwise_add) is a tensor like the output:
    its pointer moves to image n inside the batch loop (`ep_per_image`), rows of ld = OHW floats."""
    fields = ctx.gemm_epilogue(bias=bias, per_row=True, ld_residual=ld)
    per_image = any(f == "residual" for f, _ in fields)
    if per_image:
        fields = [(f, f"residual + (long)n * {image}" if f == "residual" else v) for f, v in fields]
    return dict(epilogue=fields, ep_per_image=per_image)
