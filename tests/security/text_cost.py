"""A deterministic operation count for code that reads model text: how much work a call does, not how long
it takes (no clock: the same count on an idle or a loaded machine).

The count of one call is the sum of

* **Python bytecode instructions** executed (``sys.settrace`` with opcode events), anywhere below the call
  (difflib's quadratic matcher shows here: it is pure Python);
* **regular-expression steps**: every compiled pattern a watched module holds (and every ``re.*`` function
  it calls) is replaced during the call by a :class:`CountingPattern`, which lets the real engine give the
  result but also runs the same pattern on a backtracking interpreter of ``re``'s own parse tree that
  counts each attempt to match a node at a position. The interpreter's matches are checked against the real
  engine's on every call, so the count is the work of *that* pattern on *that* text (a backtracking blow-up
  in the C engine, invisible to a tracer, is counted here).

Work done inside a C function (``str.split``, ``"".join``) counts as one instruction: string builtins are
linear, which is why only Python code and regexes need counting.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from re import _constants as C  # noqa: N812 - re's own parse-tree vocabulary
from re import _parser
from typing import Any

_NOT_COUNTED = (re.__file__.rsplit("/", 1)[0], "<frozen importlib")


_TREES: dict[tuple[str | bytes, int], list] = {}
_IN_SETS: dict[tuple[int, bool, bool, str], bool] = {}
_CHARACTER_NODES = frozenset((C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN))


def _plain(nodes: Any) -> list:
    """``re._parser``'s tree as nested lists and tuples, each group's nodes a list (indexing a SubPattern is a
    Python call), a look-behind with its width; the same nodes in the same order, so the same steps."""
    plain: list = []
    for op, av in nodes:
        if op is C.SUBPATTERN:
            av = (*av[:3], _plain(av[3]))
        elif op is C.BRANCH:
            av = (av[0], [_plain(alternative) for alternative in av[1]])
        elif op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            av = (av[0], av[1], _plain(av[2]))
        elif op is C.ATOMIC_GROUP:
            av = _plain(av)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            av = (av[0], _plain(av[1]), av[1].getwidth())
        plain.append((op, av))
    return plain


def _tree(pattern: re.Pattern) -> list:
    """The pattern's parse tree, parsed once per pattern and flags (an interpreter is made for every call)."""
    key = (pattern.pattern, pattern.flags)
    if key not in _TREES:
        _TREES[key] = _plain(_parser.parse(pattern.pattern, pattern.flags))
    return _TREES[key]


class Interpreter:
    """Backtracking matcher over ``re._parser``'s tree (the constructs rewardpipe's patterns use; anything
    else raises NotImplementedError), counting steps in ``self.steps``."""

    def __init__(self, pattern: re.Pattern) -> None:
        self.flags = pattern.flags
        # The flags as plain booleans: testing an enum flag costs a Python call, and this runs per character.
        self.ascii_only = bool(pattern.flags & re.ASCII)
        self.ignore_case = bool(pattern.flags & re.IGNORECASE)
        self.dot_all = bool(pattern.flags & re.DOTALL)
        self.multiline = bool(pattern.flags & re.MULTILINE)
        self.tree = _tree(pattern)
        self.steps = 0
        self.text = ""

    # -- single characters ---------------------------------------------------------------------------------

    def _word(self, ch: str) -> bool:
        if self.ascii_only:
            return ch.isascii() and (ch.isalnum() or ch == "_")
        return ch.isalnum() or ch == "_"

    def _category(self, category: Any, ch: str) -> bool:
        ascii_only = self.ascii_only
        if category in (C.CATEGORY_DIGIT, C.CATEGORY_NOT_DIGIT):
            value = ch.isdecimal() and (ch.isascii() or not ascii_only)
            return value if category is C.CATEGORY_DIGIT else not value
        if category in (C.CATEGORY_SPACE, C.CATEGORY_NOT_SPACE):
            value = ch in " \t\n\r\f\v" if ascii_only else ch.isspace()
            return value if category is C.CATEGORY_SPACE else not value
        if category in (C.CATEGORY_WORD, C.CATEGORY_NOT_WORD):
            value = self._word(ch)
            return value if category is C.CATEGORY_WORD else not value
        raise NotImplementedError(f"category {category}")

    def _same(self, code: int, ch: str) -> bool:
        if ord(ch) == code:
            return True
        return self.ignore_case and chr(code).lower() == ch.lower()

    def _in(self, items: list, ch: str) -> bool:
        # A set's answer for a character never changes (one step either way, counted by _char): remembered per
        # set (the trees are kept, so a set's id stands for it) and flags.
        key = (id(items), self.ignore_case, self.ascii_only, ch)
        known = _IN_SETS.get(key)
        if known is None:
            known = _IN_SETS[key] = self._in_uncached(items, ch)
        return known

    def _in_uncached(self, items: list, ch: str) -> bool:
        negate, hit = False, False
        for op, av in items:
            if op is C.NEGATE:
                negate = True
            elif op is C.LITERAL:
                hit = hit or self._same(av, ch)
            elif op is C.RANGE:
                lo, hi = av
                codes = {ord(ch)} | (
                    {ord(c) for c in (ch.lower(), ch.upper()) if len(c) == 1} if self.ignore_case else set()
                )
                hit = hit or any(lo <= code <= hi for code in codes)
            elif op is C.CATEGORY:
                hit = hit or self._category(av, ch)
            else:
                raise NotImplementedError(f"in-set item {op}")
        return hit != negate

    def _char(self, node: tuple, pos: int) -> bool:
        """One step: does the single-character ``node`` match the character at ``pos``?"""
        self.steps += 1
        if pos >= len(self.text):
            return False
        op, av = node
        ch = self.text[pos]
        if op is C.LITERAL:
            return self._same(av, ch)
        if op is C.NOT_LITERAL:
            return not self._same(av, ch)
        if op is C.ANY:
            return ch != "\n" or self.dot_all
        if op is C.IN:
            return self._in(av, ch)
        raise NotImplementedError(f"character node {op}")

    @staticmethod
    def _single(nodes: list) -> bool:
        return len(nodes) == 1 and nodes[0][0] in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN)

    def _at(self, where: Any, pos: int) -> bool:
        self.steps += 1
        text, n = self.text, len(self.text)
        multiline = self.multiline
        if where is C.AT_BEGINNING:
            return pos == 0 or (multiline and text[pos - 1] == "\n")
        if where is C.AT_BEGINNING_STRING:
            return pos == 0
        if where is C.AT_END:
            return pos == n or (pos == n - 1 and text[pos] == "\n") or (multiline and pos < n and text[pos] == "\n")
        if where is C.AT_END_STRING:
            return pos == n
        if where in (C.AT_BOUNDARY, C.AT_NON_BOUNDARY):
            before = pos > 0 and self._word(text[pos - 1])
            after = pos < n and self._word(text[pos])
            return (before != after) == (where is C.AT_BOUNDARY)
        raise NotImplementedError(f"anchor {where}")

    # -- sequences, with a continuation for what follows -------------------------------------------------

    def _seq(self, nodes: list, i: int, pos: int, k: Callable[[int], Any]) -> Any:
        # A run of single-character nodes is matched in a loop (the same steps as one call per node).
        while i < len(nodes) and nodes[i][0] in _CHARACTER_NODES:
            if not self._char(nodes[i], pos):
                return None
            i, pos = i + 1, pos + 1
        if i == len(nodes):
            return k(pos)
        op, av = nodes[i]

        def rest(p: int) -> Any:
            return self._seq(nodes, i + 1, p, k)

        if op is C.AT:
            return rest(pos) if self._at(av, pos) else None
        if op is C.SUBPATTERN:
            return self._seq(av[3], 0, pos, rest)
        if op is C.BRANCH:
            for alternative in av[1]:
                self.steps += 1
                found = self._seq(alternative, 0, pos, rest)
                if found is not None:
                    return found
            return None
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            return self._repeat(op, av, pos, rest)
        if op is C.ATOMIC_GROUP:
            end = self._seq(av, 0, pos, lambda p: p)
            return None if end is None else rest(end)
        if op in (C.ASSERT, C.ASSERT_NOT):
            direction, sub, (lo, hi) = av
            if direction == 1:
                held = self._seq(sub, 0, pos, lambda p: p) is not None
            else:
                if lo != hi:
                    raise NotImplementedError("a look-behind of variable width")
                start = pos - lo
                held = start >= 0 and self._seq(sub, 0, start, lambda p: p if p == pos else None) is not None
            return rest(pos) if held == (op is C.ASSERT) else None
        raise NotImplementedError(f"node {op}")

    def _repeat(self, op: Any, av: tuple, pos: int, rest: Callable[[int], Any]) -> Any:
        lo, hi, sub = av
        if self._single(sub):
            # re's REPEAT_ONE: take the run, then give back one character at a time
            run = 0
            while run < hi and self._char(sub[0], pos + run):
                run += 1
            if run < lo:
                return None
            counts = range(run, lo - 1, -1) if op is not C.MIN_REPEAT else range(lo, run + 1)
            if op is C.POSSESSIVE_REPEAT:
                counts = range(run, run + 1)
            for count in counts:
                self.steps += 1
                found = rest(pos + count)
                if found is not None:
                    return found
            return None
        if op is C.POSSESSIVE_REPEAT:
            raise NotImplementedError("possessive repeat of a group")

        def again(count: int, p: int) -> Any:
            self.steps += 1
            if op is C.MIN_REPEAT and count >= lo:
                found = rest(p)
                if found is not None:
                    return found
            if count < hi:
                found = self._seq(sub, 0, p, lambda q: None if q == p else again(count + 1, q))
                if found is not None:
                    return found
            if op is not C.MIN_REPEAT and count >= lo:
                return rest(p)
            return None

        return again(0, pos)

    # -- the entry points re offers ------------------------------------------------------------------------

    def match_at(self, text: str, pos: int, full: bool = False, refuse_empty: bool = False) -> int | None:
        self.text = text
        n = len(text)

        def accept(end: int) -> Any:
            if full and end != n:
                return None
            if refuse_empty and end == pos:
                return None
            return end

        return self._seq(self.tree, 0, pos, accept)

    def search(self, text: str, pos: int, must_advance: bool = False) -> tuple[int, int] | None:
        for start in range(pos, len(text) + 1):
            self.steps += 1
            end = self.match_at(text, start, refuse_empty=must_advance and start == pos)
            if end is not None:
                return start, end
        return None


class CountingPattern:
    """A compiled pattern's stand-in: the real engine answers, the interpreter counts (and must agree)."""

    def __init__(self, real: re.Pattern, counter: OpCounter) -> None:
        self._real = real
        self._counter = counter
        self.pattern, self.flags, self.groups, self.groupindex = real.pattern, real.flags, real.groups, real.groupindex

    def _interpreter(self) -> Interpreter:
        with _untraced():  # the counting machinery is not the code under test
            return Interpreter(self._real)

    def _count(self, steps: int) -> None:
        self._counter.regex_steps += steps

    def _check_sequence(self, text: str, pos: int, endpos: int | None) -> None:
        """Count the searches an iterating method (findall, finditer, sub, split) makes, and check them."""
        subject = text if endpos is None else text[:endpos]
        engine = self._interpreter()
        current, must_advance = pos, False
        with _untraced():
            for match in self._real.finditer(text, pos, *(() if endpos is None else (endpos,))):
                found = engine.search(subject, current, must_advance)
                if found != match.span():
                    raise AssertionError(f"interpreter found {found}, re found {match.span()} for {self.pattern!r}")
                current, must_advance = match.end(), match.end() == match.start()
            if engine.search(subject, current, must_advance) is not None and current <= len(subject):
                raise AssertionError(f"interpreter found a match re did not for {self.pattern!r}")
        self._count(engine.steps)

    def _anchored(self, full: bool, text: str, pos: int, endpos: int | None) -> Any:
        result = (self._real.fullmatch if full else self._real.match)(text, pos, *(() if endpos is None else (endpos,)))
        engine = self._interpreter()
        with _untraced():
            end = engine.match_at(text if endpos is None else text[:endpos], pos, full=full)
        self._agree(end, None if result is None else result.end())
        self._count(engine.steps)
        return result

    def match(self, text: str, pos: int = 0, endpos: int | None = None) -> Any:
        return self._anchored(False, text, pos, endpos)

    def fullmatch(self, text: str, pos: int = 0, endpos: int | None = None) -> Any:
        return self._anchored(True, text, pos, endpos)

    def search(self, text: str, pos: int = 0, endpos: int | None = None) -> Any:
        result = self._real.search(text, pos, *(() if endpos is None else (endpos,)))
        engine = self._interpreter()
        with _untraced():
            found = engine.search(text if endpos is None else text[:endpos], pos)
        self._agree(found, None if result is None else result.span())
        self._count(engine.steps)
        return result

    def _agree(self, mine: Any, real: Any) -> None:
        if mine != real:
            raise AssertionError(f"interpreter gave {mine}, re gave {real} for {self.pattern!r}")

    def finditer(self, text: str, pos: int = 0, endpos: int | None = None) -> Iterator[Any]:
        self._check_sequence(text, pos, endpos)
        return self._real.finditer(text, pos, *(() if endpos is None else (endpos,)))

    def findall(self, text: str, pos: int = 0, endpos: int | None = None) -> list:
        self._check_sequence(text, pos, endpos)
        return self._real.findall(text, pos, *(() if endpos is None else (endpos,)))

    def sub(self, repl: Any, text: str, count: int = 0) -> str:
        if count:
            raise NotImplementedError("sub with a count")
        self._check_sequence(text, 0, None)
        return self._real.sub(repl, text)

    def subn(self, repl: Any, text: str, count: int = 0) -> tuple[str, int]:
        if count:
            raise NotImplementedError("subn with a count")
        self._check_sequence(text, 0, None)
        return self._real.subn(repl, text)

    def split(self, text: str, maxsplit: int = 0) -> list:
        if maxsplit:
            raise NotImplementedError("split with maxsplit")
        self._check_sequence(text, 0, None)
        return self._real.split(text)


class _CountingRe(types.ModuleType):
    """The ``re`` module as a watched module sees it: its functions compile and count."""

    def __init__(self, counter: OpCounter) -> None:
        super().__init__("re")
        self._counter = counter

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    def compile(self, pattern: Any, flags: int = 0) -> Any:
        return CountingPattern(re.compile(pattern, flags), self._counter)

    def _call(self, method: str, pattern: Any, *args: Any, flags: int = 0) -> Any:
        return getattr(self.compile(pattern, flags), method)(*args)

    def match(self, pattern, string, flags=0):
        return self._call("match", pattern, string, flags=flags)

    def fullmatch(self, pattern, string, flags=0):
        return self._call("fullmatch", pattern, string, flags=flags)

    def search(self, pattern, string, flags=0):
        return self._call("search", pattern, string, flags=flags)

    def findall(self, pattern, string, flags=0):
        return self._call("findall", pattern, string, flags=flags)

    def finditer(self, pattern, string, flags=0):
        return self._call("finditer", pattern, string, flags=flags)

    def sub(self, pattern, repl, string, count=0, flags=0):
        return self._call("sub", pattern, repl, string, count, flags=flags)

    def subn(self, pattern, repl, string, count=0, flags=0):
        return self._call("subn", pattern, repl, string, count, flags=flags)

    def split(self, pattern, string, maxsplit=0, flags=0):
        return self._call("split", pattern, string, maxsplit, flags=flags)


@contextmanager
def _untraced() -> Iterator[None]:
    """The interpreter's own work is not the code under test: no bytecode counting inside it."""
    previous = sys.gettrace()
    sys.settrace(None)
    try:
        yield
    finally:
        sys.settrace(previous)


class OverBudget(Exception):
    """Raised inside the counted call once it passed :func:`operations`' ``limit`` (a run that would take
    minutes traced stops there)."""


class OpCounter:
    """Counts the operations of calls made inside :meth:`counting` (see the module docstring)."""

    def __init__(self, modules: list[types.ModuleType], limit: int | None = None) -> None:
        self.modules = modules
        self.instructions = 0
        self.regex_steps = 0
        self.limit = limit

    @property
    def total(self) -> int:
        return self.instructions + self.regex_steps

    def _trace(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "call":
            if frame.f_code.co_filename.startswith(_NOT_COUNTED):
                return None  # compiling a pattern (re's cache decides when) or importing: not the text's work
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
            return self._local
        return None

    def _local(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode":
            self.instructions += 1
            if self.limit is not None and self.instructions > self.limit:
                raise OverBudget(f"more than {self.limit} operations")
        return self._local

    @contextmanager
    def counting(self) -> Iterator[OpCounter]:
        saved: list[tuple[types.ModuleType, str, Any]] = []
        for module in self.modules:
            for name, value in list(vars(module).items()):
                if isinstance(value, re.Pattern):
                    saved.append((module, name, value))
                    setattr(module, name, CountingPattern(value, self))
                elif value is re:
                    saved.append((module, name, value))
                    setattr(module, name, _CountingRe(self))
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 200_000))  # the interpreter recurses once per repeated group
        previous = sys.gettrace()
        sys.settrace(self._trace)
        try:
            yield self
        finally:
            sys.settrace(previous)
            sys.setrecursionlimit(limit)
            for module, name, value in saved:
                setattr(module, name, value)


def operations(
    call: Callable[[], Any],
    modules: list[types.ModuleType],
    clear: Callable[[], None] = lambda: None,
    limit: int | None = None,
) -> int:
    """Operations ``call()`` performs (caches emptied first by ``clear``, so every call does its full work).

    ``call`` runs once uncounted first: a first call's one-off work (a lazy import, a class built on first
    use) is not the text's. With ``limit``, neither run goes on past that many instructions: the count is then
    ``limit + 1`` (a target that is far over budget is known to be at once, not after minutes traced)."""
    clear()
    counter = OpCounter(modules, limit)
    try:
        if limit is None:
            call()
        else:
            with counter.counting():
                call()  # the warm-up, counted only to be stopped
        clear()
        counter = OpCounter(modules, limit)
        with counter.counting():
            call()
    except OverBudget:
        return limit + 1 if limit is not None else counter.total
    return counter.total
