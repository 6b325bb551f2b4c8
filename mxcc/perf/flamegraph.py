"""Folded stacks (`a;b;c count` lines) -> a self-contained flame graph SVG, with no dependency.

The layout is Brendan Gregg's: one box per frame, width proportional to samples, callers below callees,
siblings in name order. Each box has a tooltip (samples, share); clicking a box zooms into it (a few lines
of script inside the SVG; click "Reset zoom" to go back). Colours say what kind of code a frame is: the
network's own layers, mxcc's runtime, OpenMP, the C library, the kernel. Any other renderer (flamegraph.pl,
inferno, speedscope) reads the same folded file, so this one only has to be clear, not clever.
"""
from __future__ import annotations

import hashlib
from html import escape

WIDTH, FRAME_H, FONT, PAD, MIN_PX = 1200, 17, 12, 10, 0.3
CHAR_W = FONT * 0.59

_SCRIPT = """
var W = %(inner)s, P = %(pad)s, C = %(charw)s;
function fit(g, w) {
  var t = g.querySelector('text'), n = g.getAttribute('data-n'), k = Math.floor((w - 6) / C);
  t.textContent = k < 3 ? '' : (n.length <= k ? n : n.slice(0, k - 2) + '..');
}
function zoom(g) {
  var x0 = +g.getAttribute('data-x'), w0 = +g.getAttribute('data-w'), d0 = +g.getAttribute('data-d');
  document.querySelectorAll('g.f').forEach(function (e) {
    var x = +e.getAttribute('data-x'), w = +e.getAttribute('data-w'), d = +e.getAttribute('data-d');
    var inside = x >= x0 && x + w <= x0 + w0 + 1e-9, above = d < d0 && x <= x0 && x + w >= x0 + w0 - 1e-9;
    if (!(inside && d >= d0) && !above) { e.style.display = 'none'; return; }
    e.style.display = '';
    var nx = above ? 0 : (x - x0) / w0 * W, nw = above ? W : w / w0 * W, r = e.querySelector('rect');
    r.setAttribute('x', P + nx); r.setAttribute('width', Math.max(nw - 0.5, 0.1));
    e.querySelector('text').setAttribute('x', P + nx + 3); fit(e, nw);
  });
}
function reset() {
  document.querySelectorAll('g.f').forEach(function (e) {
    var x = +e.getAttribute('data-x'), w = +e.getAttribute('data-w'), r = e.querySelector('rect');
    e.style.display = ''; r.setAttribute('x', P + x * W); r.setAttribute('width', Math.max(w * W - 0.5, 0.1));
    e.querySelector('text').setAttribute('x', P + x * W + 3); fit(e, w * W);
  });
}
document.querySelectorAll('g.f').forEach(function (e) {
  e.addEventListener('click', function () { zoom(e); });
});
"""


def _tree(folded: dict[str, float]) -> dict:
    root = {"n": 0.0, "c": {}}
    for stack, count in folded.items():
        if count <= 0:
            continue
        node = root
        node["n"] += count
        for name in stack.split(";"):
            node = node["c"].setdefault(name, {"n": 0.0, "c": {}})
            node["n"] += count
    return root


# the runtime's public symbols and the static helpers of runtime_c/gemm and conv that show up as frames
RUNTIME_PREFIXES = ("mxcc_", "tile_", "gemm_", "pack_a_panel", "pack_b_panel", "pack_bt_panel", "depthwise_")


def colour(name: str, net: str | None = None) -> str:
    """A stable colour per frame, hue by kind: layers blue, runtime orange, OpenMP grey, system red."""
    h = int(hashlib.md5(name.encode()).hexdigest()[:4], 16) / 0xFFFF
    base = name.split("._omp_fn")[0]
    if net and base.startswith(net + "_") or base.startswith("("):
        return f"rgb({int(90 + 60 * h)},{int(150 + 50 * h)},{int(215 + 30 * h)})"        # the network
    if base.startswith(RUNTIME_PREFIXES):
        return f"rgb({int(235 + 20 * h)},{int(140 + 60 * h)},{int(40 + 30 * h)})"         # mxcc runtime
    if "gomp" in base.lower() or base.startswith("GOMP_"):
        return f"rgb({int(170 + 30 * h)},{int(170 + 30 * h)},{int(170 + 30 * h)})"        # OpenMP
    if base.endswith("_[k]") or base == "[kernel]":
        return f"rgb({int(220 + 30 * h)},{int(90 + 40 * h)},{int(80 + 30 * h)})"          # kernel
    return f"rgb({int(200 + 40 * h)},{int(200 + 30 * h)},{int(90 + 50 * h)})"              # everything else


def render_svg(folded: dict[str, float], title: str = "Flame graph", subtitle: str = "",
               net: str | None = None, width: int = WIDTH) -> str:
    """The flame graph of `folded` ({"a;b;c": samples}) as SVG text."""
    root = _tree(folded)
    total = root["n"] or 1.0
    inner = width - 2 * PAD
    boxes = []          # (depth, x fraction, w fraction, name, samples)

    def walk(node, depth, x):
        for name in sorted(node["c"]):
            child = node["c"][name]
            w = child["n"] / total
            if w * inner >= MIN_PX:
                boxes.append((depth, x, w, name, child["n"]))
                walk(child, depth + 1, x)
            x += w

    walk(root, 0, 0.0)
    depth = max((b[0] for b in boxes), default=0) + 1
    top = 58
    height = top + depth * FRAME_H + PAD + 8
    out = [f'<?xml version="1.0" standalone="no"?>\n'
           f'<svg version="1.1" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'xmlns="http://www.w3.org/2000/svg">\n'
           f'<style>text {{ font-family: Verdana, sans-serif; font-size: {FONT}px; fill: #000; }} '
           f'g.f {{ cursor: pointer; }} g.f:hover rect {{ stroke: #222; stroke-width: 0.6; }}</style>\n'
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="#f8f8f4"/>\n'
           f'<text x="{width / 2}" y="22" text-anchor="middle" style="font-size:16px">{escape(title)}</text>\n'
           f'<text x="{width / 2}" y="40" text-anchor="middle" style="fill:#555">{escape(subtitle)}</text>\n'
           f'<text x="{PAD}" y="40" style="fill:#336;text-decoration:underline" onclick="reset()" '
           f'cursor="pointer">Reset zoom</text>\n']
    for d, x, w, name, n in boxes:
        px, pw = PAD + x * inner, w * inner
        y = height - PAD - (d + 1) * FRAME_H
        k = int((pw - 6) // CHAR_W)
        text = "" if k < 3 else (name if len(name) <= k else name[: k - 2] + "..")
        out.append(f'<g class="f" data-n="{escape(name)}" data-x="{x:.6f}" data-w="{w:.6f}" data-d="{d}">'
                   f'<title>{escape(name)} ({n:,.0f} samples, {100 * n / total:.2f}%)</title>'
                   f'<rect x="{px:.2f}" y="{y}" width="{max(pw - 0.5, 0.1):.2f}" height="{FRAME_H - 1}" '
                   f'rx="2" fill="{colour(name, net)}"/>'
                   f'<text x="{px + 3:.2f}" y="{y + FRAME_H - 5}">{escape(text)}</text></g>\n')
    out.append("<script><![CDATA[" + _SCRIPT % {"inner": inner, "pad": PAD, "charw": CHAR_W}
               + "]]></script>\n</svg>\n")
    return "".join(out)
