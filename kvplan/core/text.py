"""Text that is safe to show: control characters (C0 but newline and tab, DEL, C1) and the
bidirectional overrides are written as visible escapes, so a model folder, scenario or GPU name
cannot move the cursor, retitle the terminal or reorder what is shown. Pure."""

from __future__ import annotations

import re

#: C0 controls but \t and \n, DEL, C1 controls, and the bidi embedding / override / isolate marks
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str, newlines: bool = True) -> str:
    """``text`` with every unsafe character as ``\\xNN`` / ``\\uNNNN`` (and, with
    ``newlines=False``, a newline as ``\\n``: one line stays one line)."""
    def esc(m: re.Match) -> str:
        c = ord(m.group(0))
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    out = _UNSAFE.sub(esc, text)
    return out if newlines else out.replace("\n", "\\n")
