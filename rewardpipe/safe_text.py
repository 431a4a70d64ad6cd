"""Make model-written text safe to print on a terminal.

Everything a model writes is hostile: an ANSI escape can recolour or clear the terminal, a carriage return
can overwrite what came before, bidirectional overrides can make code read differently from what runs
("Trojan Source"), and Rich markup (``[red]``, ``[link=...]``) would be interpreted by our own console.
:func:`printable` replaces every control and format character except newline and tab with a visible escape
(``\\x1b``, ``\\u202e``); callers still pass the result through ``rich.markup.escape`` or print it with
markup off.
"""

from __future__ import annotations

import re
import unicodedata

_KEEP = {"\n", "\t"}


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with control (Cc), format (Cf: bidi overrides, zero-width) and surrogate characters shown as
    escapes; Unicode line and paragraph separators become escapes too, so one line stays one line. Tabs are
    kept, and newlines unless ``keep_newlines`` is False (a message that must stay on one line)."""
    keep = _KEEP if keep_newlines else _KEEP - {"\n"}
    out = []
    for char in text:
        if char in keep:
            out.append(char)
        elif unicodedata.category(char) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            out.append(_escape(char))
        else:
            out.append(char)
    return "".join(out)


# A lone surrogate (model text can hold one: JSON's "\\ud800" decodes to it) has no UTF-8 form.
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_lone_surrogates(json_text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with each lone surrogate written as its ``\\u``
    escape: only a string can hold one, where the escape reads back as the same text, so the line is the same
    JSON and always encodes as UTF-8."""
    return _LONE_SURROGATE.sub(lambda match: f"\\u{ord(match[0]):04x}", json_text)


def encodable(text: str) -> str:
    """``text`` with each lone surrogate replaced by one U+FFFD (a pair of them read as the character it
    encodes), so it is always UTF-8."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text
