"""Classify an assistant turn as a question, a code commit, or neither, and pull out its code.

The rules (documented in the README, each covered by tests):

1. Code is the content of *fenced* blocks (three or more backticks or tildes, closed by a fence of the same
   character at least as long, indented at most three columns more than the opening one, as Markdown has it: a
   fence line indented further, such as a Markdown example in a docstring, is the code's; in a turn that closes a
   block no other way, any fence line closes). In a Python block, a fence line inside a triple-quoted string (a
   Markdown example in a docstring or a template) is the string's; when the code leaves such a string open to the
   end of the turn, fence lines close as written. A fence may be indented (models nest blocks in list items); the
   block's lines lose that indentation so the code still parses (counted in columns, a tab reaching the next multiple
   of four, as Markdown counts it, so tabs and spaces may differ between the fence and the code). A
   byte-order mark before a fence or before a block's first line of code (after blank lines, before or after
   the fence's indentation) is ignored, as Python ignores one at the start of a file. A block whose info string
   names a language other than Python (``bash``, ``text``, ``json``...) is not code for this purpose; an
   untagged block counts as Python, and so does ``python:main.py`` or ``python3.11`` (the language is the
   leading word of the info string). An unterminated fence at the end of a turn still counts (outputs are often
   cut at max_length). A Python block whose first line is a ``>>>`` (or IPython's ``In [1]:``) prompt is a console
   session: its code is what was typed at the prompts (the prompts gone), its output lines are no code. Blank
   blocks are ignored. Unfenced code is not code: committing means fencing it.
2. The *prose* is the turn with every fenced block removed. Inline code spans (single backticks) are
   removed from the prose too, so ``x?`` inside backticks is not a question mark.
3. A turn is a **question** when its prose asks something: a sentence ending in ``?`` (or the full-width
   full-width ``？``; closing quotes and brackets of any script, emphasis, ``!``, an ellipsis, emoji and other
   symbols, common emoticons, a Markdown hard break, invisible characters and markup tags such as ``<br>`` or
   ``</s>`` may follow it, but no words) appears in the prose *after the last code block* (or
   anywhere, when there is no code). Code followed by "Does that match what you want?" is asking for
   confirmation, so it is a question, not a commit. A question mark that appears only before the code ("You
   want it sorted? Here it is:") does not make the turn a question.
4. A turn **commits** when it has code (rule 1) and is not a question (rule 3).
5. Anything else is **other** (statements, plans, refusals, empty turns).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache

#: Python ignores a byte-order mark at the start of a source file; so does reading a turn (its start, a fence line,
#: a block's first character).
BOM = "\ufeff"
PYTHON_TAGS = {"", "python", "py", "python3", "py3", "ipython", "pycon"}

_INLINE_CODE = re.compile(r"`[^`\n]+`")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# Question marks of any script or style: ASCII, fullwidth, small, double, interrobangs, the emoji, Arabic.
QUESTION_MARKS = "?？﹖⁇⁈⁉‽❓❔؟"
# After the mark, what a reader passes over: closing quotes and brackets of any script (Unicode's final, initial
# and closing punctuation: ``”``, ``’``, ``»``, ``“`` as German closes, ``」``, ``）``), Markdown emphasis, an emphatic
# "!" ("?!"), an ellipsis ("?…", "?..."), a Markdown hard break ("\\"), a tilde or wave dash, emoji and other symbols
# (``😊``, ``🤔``, skin tones, keycaps, variation selectors), invisible characters (zero-width space, joiners, BOM,
# any format character), common emoticons (":)", ";-)", ":D", "^_^"), and markup tags or entities ("<br>",
# "</s>", "<|im_end|>", "&nbsp;"). Nothing with letters in it but those emoticons and tags: a question mark
# followed by words is inside a sentence, not at its end.
_TRAILING_CHARACTERS = frozenset("\"'*_!~\\.…⋯〜～")
_TRAILING_CATEGORIES = frozenset({"Pe", "Pf", "Pi", "So", "Sk", "Cf", "Mn", "Me"})
_EMOTICONS = (
    ":-)",
    ":)",
    ":-(",
    ":(",
    ":-D",
    ":D",
    ";-)",
    ";)",
    ";D",
    ":-P",
    ":P",
    ":-p",
    ":p",
    ":-O",
    ":O",
    ":-o",
    ":o",
    ":-/",
    ":/",
    ":-|",
    ":|",
    ":']",
    ":')",
    ":'(",
    ":]",
    ":3",
    "=)",
    "=D",
    "=]",
    "<3",
    "xD",
    "XD",
    "B)",
    "8)",
    "^_^",
    "^-^",
    "^^",
    "o_O",
    "O_o",
    "o.O",
    "-_-",
    "T_T",
    ":*",
    ";P",
    ";p",
    "(:",
    "\\o/",
)
_MARKUP = re.compile(r"<[^<>\s]{1,24}>|&[a-z]{2,8};")
_MARKUP_LONGEST = 26  # "<" + 24 characters + ">"
# Where a sentence ends inside one line: after . ! or a question mark and whitespace, or right after a
# full-width question mark (CJK text puts no space after it).
_SENTENCE_BREAK = re.compile(rf"(?<=[.!{QUESTION_MARKS}])\s+|(?<=[？﹖])")
# A console session's first prompt (Python's ">>> ", IPython's "In [1]: "), and any prompt code is typed at (those,
# and the continuation prompts "... " and IPython's "   ...: "); a prompt alone on its line is an empty line typed.
_SESSION_START = re.compile(r">>>(?: |\Z)|In \[\d{1,9}\]:(?: |\Z)")
_SESSION_PROMPT = re.compile(r"(?:>>>|\.\.\.)(?: |\Z)|In \[\d{1,9}\]:(?: |\Z)|[ \t]*\.\.\.+:(?: |\Z)")
# The language of an info string: "python", "python:main.py", "python3.11", "{.python}", "py title=x".
_INFO_LANGUAGE = re.compile(r"[{.\s]*([A-Za-z0-9_+#-]*)")


class TurnKind(str, Enum):
    QUESTION = "question"
    COMMIT = "commit"
    OTHER = "other"


@dataclass(frozen=True)
class ParsedTurn:
    kind: TurnKind
    code: str | None  # concatenated Python blocks, or None
    prose: str


def _split_fences(text: str) -> tuple[list[tuple[str, str]], list[str]]:
    """Return ([(info, body), ...], [prose segments]) with prose segments in order around the blocks."""
    blocks: list[tuple[str, str]] = []
    prose: list[str] = []
    current: list[str] = []
    # Markdown and Python break lines only at \n, \r\n and \r; str.splitlines() also breaks at form feed,
    # NEL, U+2028 and other separators, which may sit raw inside a string literal of the code.
    lines = _LINE_BREAK.split(text)
    lenient = False  # whether a closing fence may be indented any amount (see _block_end)
    reads_strings = True  # whether a fence line inside a Python block's triple-quoted string is the string's
    i = 0
    while i < len(lines):
        opening = _fence_opening(lines[i])
        if opening is None:
            current.append(lines[i])
            i += 1
            continue
        indent, fence, info_string = opening
        language = _INFO_LANGUAGE.match(info_string.strip())  # every part optional: it always matches
        info = language.group(1).lower() if language else ""
        body: list[str] = []
        started = False  # whether the block's code has begun (a line that is not blank)
        i += 1
        strings = reads_strings and info in PYTHON_TAGS
        end = _block_end(lines, i, fence, indent, not lenient, strings)
        if end == len(lines) and not lenient:
            # No closing fence as Markdown places one: this writer indents them further (a sloppy list item), so
            # from here on any fence line closes (at most one scan of the rest of the turn is spent finding out).
            lenient = True
            end = _block_end(lines, i, fence, indent, False, strings)
        if end == len(lines) and strings:
            # No fence outside a string closes the block: its code leaves a string open (cut at max_length, or
            # broken), so from here on fence lines close as written, strings or not (at most one more such scan).
            reads_strings = False
            end = _block_end(lines, i, fence, indent, not lenient, False)
            if end == len(lines) and not lenient:
                lenient = True
                end = _block_end(lines, i, fence, indent, False, False)
        while i < end:
            line = lines[i]
            if not started and line.strip():
                # The code's first line: a byte-order mark before it (before or after the fence's indentation,
                # after blank lines the fence left) is the start of the file, which Python ignores there.
                line = _dedent(line.removeprefix(BOM), indent).removeprefix(BOM)
                started = True
            else:
                line = _dedent(line, indent)
            body.append(line)
            i += 1
        i += 1  # skip the closing fence (or run past the end for an unterminated block)
        prose.append("\n".join(current))
        current = []
        blocks.append((info, "\n".join(body)))
    prose.append("\n".join(current))
    return blocks, prose


def _block_end(lines: list[str], start: int, fence: str, indent: int, strict: bool, strings: bool = False) -> int:
    """The index of the line closing a block opened by ``fence`` (indented ``indent`` columns) whose body starts at
    ``start``, or ``len(lines)`` for a block left open. A closing fence is the fence's character, at least as many.
    ``strict``: indented at most three columns more than the opening one, as Markdown has it; a fence line indented
    further is the code's (a Markdown example in an indented docstring: ``    ```""). Without it, any indentation.
    ``strings``: the body is Python, and a fence line while one of its triple-quoted strings is open is the
    string's (a Markdown example in a docstring or a template, at the string's own indentation)."""
    open_string: str | None = None  # the triple quote of a string still open at this line, if any
    for index in range(start, len(lines)):
        line = lines[index]
        closing = line.strip()
        if (
            open_string is None
            and closing.startswith(fence)
            and not closing.strip(fence[0])
            and (not strict or _columns(line[: len(line) - len(line.lstrip(" \t"))]) <= indent + 3)
        ):
            return index
        if strings:
            open_string = _string_open_after(line, open_string)
    return len(lines)


# Outside a string, what starts a comment or a string; inside one, what ends it (a backslash escapes the next
# character, in a raw string too as far as where the string ends goes). Each is a choice of fixed strings, tried
# once per position: no backtracking.
_CODE_TOKEN = re.compile(r"""#|\"\"\"|'''|"|'""")
_STRING_END = {quote: re.compile(r"\\.|" + re.escape(quote)) for quote in ('"""', "'''", '"', "'")}


def _string_open_after(line: str, open_string: str | None) -> str | None:
    """The triple quote of the string still open at the end of ``line`` (a line of Python), given the one open at
    its start, or None. A string opened with one quote ends with its line (closed, or a syntax error no fence rule
    needs to read). One pass over the line."""
    position = 0
    while True:
        if open_string is not None:
            end = _STRING_END[open_string].search(line, position)
            while end is not None and end.group() != open_string:  # an escaped character inside the string
                end = _STRING_END[open_string].search(line, end.end())
            if end is None:
                return open_string if len(open_string) == 3 else None
            position = end.end()
        token = _CODE_TOKEN.search(line, position)
        if token is None or token.group() == "#":
            return None
        open_string, position = token.group(), token.end()


def _fence_opening(line: str) -> tuple[int, str, str] | None:
    """``(indentation, fence, info string)`` when ``line`` opens a fenced block, else None.

    Written with string operations rather than a regular expression: the pattern's optional whitespace
    and its info string could both take the same spaces, and a line of 30,000 spaces ending in a backtick
    made the regex engine try every split (quadratic). Each step here looks at each character once.
    """
    line = line.removeprefix(BOM)  # a byte-order mark (a turn decoded with one) is no character of the line
    code = line.lstrip(" \t")
    if not code.startswith(("```", "~~~")):
        return None
    info = code.lstrip(code[0])
    if "`" in info:  # a backtick in the info string: inline code, not a fence (either kind, as before)
        return None
    return _columns(line[: len(line) - len(code)]), code[: len(code) - len(info)], info


def _columns(indentation: str) -> int:
    """How many columns leading spaces and tabs take, a tab reaching the next multiple of 4 (Markdown's)."""
    column = 0
    for char in indentation:
        column = column + 4 - column % 4 if char == "\t" else column + 1
    return column


def _dedent(line: str, indent: int) -> str:
    """Drop up to ``indent`` columns of leading whitespace: the fence's own indentation, not the code's.

    Counted in columns, as Markdown counts them, not characters: a fence indented by four spaces over code
    whose lines begin with a tab (or the other way round) loses the same indentation from every line. A tab
    straddling the fence's indentation leaves its remaining columns as spaces."""
    column, cut = 0, 0
    while cut < len(line) and line[cut] in " \t" and column < indent:
        column = column + 4 - column % 4 if line[cut] == "\t" else column + 1
        cut += 1
    return " " * max(column - indent, 0) + line[cut:]


def _asks(prose: str) -> bool:
    cleaned = _INLINE_CODE.sub("", prose)
    for line in cleaned.splitlines():
        for sentence in _SENTENCE_BREAK.split(line.strip()):
            if _ends_in_question(sentence):
                return True
    return False


def _ends_in_question(sentence: str) -> bool:
    """Whether ``sentence`` ends in a question mark, passing over what may follow one (``_TRAILING_CHARACTERS``...).

    Read from the end, each step dropping at least one character and looking at a bounded stretch (an emoticon,
    a tag of at most 26 characters): linear in the sentence's tail, with no pattern that could backtrack."""
    end = len(sentence)
    while end:
        char = sentence[end - 1]
        if char in QUESTION_MARKS:
            return True
        if sentence.endswith(_EMOTICONS, 0, end):
            end -= next(len(face) for face in _EMOTICONS if sentence.endswith(face, 0, end))
        elif char.isspace() or char in _TRAILING_CHARACTERS or unicodedata.category(char) in _TRAILING_CATEGORIES:
            end -= 1
        elif char in ">;":
            start = sentence.rfind("&" if char == ";" else "<", max(0, end - _MARKUP_LONGEST), end - 1)
            if start < 0 or not _MARKUP.fullmatch(sentence, start, end):
                return False
            end = start
        else:
            return False
    return False


# Scoring one recorded rollout parses each of its turns several times (the reward's components, the
# question rule, the transcript): a few recent results are kept (the result is immutable). Bounded, so
# memory stays flat however many rollouts are scored.
def _session_input(body: str) -> str:
    """A block written as a console session (its first line a ``>>>`` or IPython's ``In [1]:`` prompt) as the
    program typed into it: the lines typed at a prompt (``>>>``, ``...``, ``In [N]:``, ``...:``) without it, and no
    output lines. Joined as written, a right answer shown as a session (``>>> def f(x):``, ``...     return x``,
    ``>>> f(2)``, ``2``) did not compile (round twenty-eight). No program starts with a prompt: any other block is
    taken as written. One look at each line's start."""
    lines = body.split("\n")
    first = next((line for line in lines if line.strip()), "")
    if not _SESSION_START.match(first):
        return body
    typed = []
    for line in lines:
        prompt = _SESSION_PROMPT.match(line)
        if prompt is not None:
            typed.append(line[prompt.end() :])
    return "\n".join(typed)


@lru_cache(maxsize=256)
def parse_turn(text: str) -> ParsedTurn:
    blocks, prose_segments = _split_fences(text or "")
    blocks = [(info, _session_input(body) if info in PYTHON_TAGS else body) for info, body in blocks]
    code_parts = [body for info, body in blocks if info in PYTHON_TAGS and body.strip()]
    code = "\n\n".join(part.rstrip() for part in code_parts) + "\n" if code_parts else None
    all_prose = "\n".join(prose_segments)
    if code is None:
        kind = TurnKind.QUESTION if _asks(all_prose) else TurnKind.OTHER
        return ParsedTurn(kind, None, all_prose)
    # Only prose after the last Python block decides whether code is offered for confirmation.
    last_python = max(idx for idx, (info, body) in enumerate(blocks) if info in PYTHON_TAGS and body.strip())
    trailing = "\n".join(prose_segments[last_python + 1 :])
    kind = TurnKind.QUESTION if _asks(trailing) else TurnKind.COMMIT
    return ParsedTurn(kind, code, all_prose)


def classify_turn(text: str) -> TurnKind:
    return parse_turn(text).kind


def extract_code(text: str) -> str | None:
    return parse_turn(text).code
