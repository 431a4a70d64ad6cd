"""Tagged spans in model-written text (``<guess>crane</guess>``, ``<tool_call>{...}</tool_call>``), found in
linear time.

Everything a model writes is hostile: a turn may hold thousands of opening tags and no closing one, which a
lazy regular expression (``<guess>(.*?)</guess>``) answers in quadratic time. :func:`tagged_spans` scans the
text once for the tags alone and pairs them in order:

* an opening tag followed by a closing tag is a span (its content is what lies between them);
* an opening tag followed by another opening tag is *unclosed* (the later one may still be closed);
* a closing tag with no opening tag before it is *stray*.

Tags match case-insensitively (``<GUESS>``) and take no attributes or inner spaces; nesting is not a thing.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class TagScan:
    """The spans of one tag in a text: ``spans`` are ``(start, end)`` offsets of each content, in order."""

    text: str
    spans: tuple[tuple[int, int], ...]
    unclosed: int
    stray_closing: int

    @property
    def contents(self) -> list[str]:
        return [self.text[start:end] for start, end in self.spans]

    def last(self) -> str | None:
        """The content of the last complete span (None when there is none)."""
        if not self.spans:
            return None
        start, end = self.spans[-1]
        return self.text[start:end]

    @property
    def any_tag(self) -> bool:
        """Whether the text holds the tag at all (complete, unclosed or stray)."""
        return bool(self.spans or self.unclosed or self.stray_closing)


@lru_cache(maxsize=32)
def _tag_pattern(tag: str) -> re.Pattern[str]:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", tag):
        raise ValueError(f"a tag name is letters, digits, '_' or '-', got {tag!r}")
    return re.compile(rf"<(/?){re.escape(tag)}>", re.IGNORECASE)


def tagged_spans(text: str, tag: str) -> TagScan:
    """Every ``<tag>...</tag>`` span of ``text`` (see the module docstring), in one linear pass."""
    spans: list[tuple[int, int]] = []
    unclosed = stray = 0
    open_end: int | None = None
    for match in _tag_pattern(tag).finditer(text):
        if match.group(1):  # a closing tag
            if open_end is None:
                stray += 1
            else:
                spans.append((open_end, match.start()))
                open_end = None
        else:
            if open_end is not None:
                unclosed += 1
            open_end = match.end()
    if open_end is not None:
        unclosed += 1
    return TagScan(text, tuple(spans), unclosed, stray)


#: Digits grouped by thousands separators, as a whole number's digits: "1,234,567", or the Indian "1,00,000" (not "2,5"
#: or "41,42"). The gsm8k reward's grouping rule and the tool_call answer's.
GROUPED_DIGITS = re.compile(r"\d{1,3}(?:,\d{3})+|\d{1,2}(?:,\d{2})+,\d{3}")

#: What may wrap a whole tag's content without being part of it: Markdown emphasis and code marks, quotes.
_WRAPPING = "*_`\"'\u201c\u201d\u2018\u2019"
# Full-width forms (what a CJK input method types: ``７``, ``ｃｒａｎｅ``) as the ASCII they stand for. Not NFKC: it
# reads a superscript as a digit, and ``7²`` (49) would then be ``72``.
FULL_WIDTH = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


def plain_content(text: str) -> str:
    """A tag's content as its writer meant it: full-width forms read as ASCII, invisible format characters (a
    zero-width space, a BOM) dropped, trimmed, and Markdown emphasis, code marks or quotes around the whole of it
    dropped, with a final period (``**7**``, `` `crane` ``, ``"gizmo".``). What lies between the marks is kept as it
    is: nothing it says is changed, only how it was set off. Linear in the text."""
    folded = text.translate(FULL_WIDTH)
    visible = "".join(char for char in folded if unicodedata.category(char) != "Cf")
    content = visible.strip().rstrip(".").rstrip()
    if content and content[0] in _WRAPPING and content[-1] in _WRAPPING:  # one pass: "**7.**", "`7`", "\"7\""
        content = content.strip(_WRAPPING + " ").rstrip(".").rstrip()
    return content
