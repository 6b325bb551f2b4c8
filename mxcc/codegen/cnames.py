"""C identifiers from MXNet names: one sanitizer, used everywhere a name becomes C."""
from __future__ import annotations

import re

_C_KEYWORDS = {"auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
               "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
               "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
               "union", "unsigned", "void", "volatile", "while", "main"}


def c_ident(name: str) -> str:
    """Non-[A-Za-z0-9_] -> '_', no leading digit, not a C keyword."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"
    if s[0].isdigit():
        s = "_" + s
    if s in _C_KEYWORDS:
        s += "_"
    return s


def unique_idents(names: list[str]) -> list[str]:
    """Sanitize each name; collisions get _2, _3, ... in order of appearance."""
    seen: dict[str, int] = {}
    out = []
    taken = set()
    for n in names:
        base = c_ident(n)
        s = base
        while s in taken:
            seen[base] = seen.get(base, 1) + 1
            s = f"{base}_{seen[base]}"
        taken.add(s)
        out.append(s)
    return out


def c_string(s: str) -> str:
    """A C string literal for any text (names may hold quotes or backslashes)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
