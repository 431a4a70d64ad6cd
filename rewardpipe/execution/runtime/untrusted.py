"""The untrusted side: runs the model's code and answers calls from the trusted harness.

Everything in this process is under the model's control once its code has run, so nothing here is
relied on for the verdict. It only has to be useful to honest code: it executes the code as module
``solution``, lists what the code defined, and serves calls with plain data in and out.
"""

from __future__ import annotations

import abc
import contextlib
import io
import linecache
import logging
import operator
import os
import random
import socket
import sys
import types
import warnings
from collections.abc import Callable  # (logging has loaded collections.abc already)

from . import wire

# What the model's code prints, warns or logs while the trusted side waits on one request travels back
# with the reply, bounded, and is replayed there: tests that capture it (assertWarns, assertLogs,
# redirect_stdout, mock.patch("sys.stdout")) see it as they would in one process.
MAX_EFFECT_TEXT = 64 * 1024  # characters of stdout and of stderr per request
MAX_EFFECT_ITEMS = 100  # warnings and log records per request
MAX_EFFECT_MESSAGE = 4000
MAX_REFERABLE_PARTS = 10_000  # argument parts a result may refer back to (beyond it: the arguments only)
MODEL_FILENAME = "<model code>"


def compile_model_code(code: str) -> types.CodeType:
    """The model's code, compiled as ``python program.py`` or an import would have it: its lines registered in
    linecache under its file name, so ``inspect.getsource`` of its functions (by tests beside it in-process, or by the
    program itself) and its tracebacks find them (round thirty-two: an OSError, even where the tests ran beside it).
    The model's own code only: the hidden tests' source is never put where the model's code could read it."""
    linecache.cache[MODEL_FILENAME] = (len(code), None, code.splitlines(True), MODEL_FILENAME)  # (mtime None: kept)
    return compile(code, MODEL_FILENAME, "exec", dont_inherit=True)


_IMMUTABLE_PARTS = (str, int, float, complex, bytes)
MAX_TAKE = 1 << 20
MAX_EXCEPTION_MRO = 32  # the model's own classes named in an exception's ancestry
MAX_EXCEPTION_ATTRIBUTES = 64  # an exception's own attributes carried with it (plain data only)
MAX_EXCEPTION_DATA = 64 * 1024  # bytes of an exception's encoded args and attributes; beyond, its message alone
MAX_EXCEPTION_NOTES = 16  # notes (add_note) carried with an exception
MAX_EXCEPTION_CHAIN = 3  # causes and contexts carried, each level deep (raise ... from ..., raised in an except)

BINARY_OPS = {
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "mod",
    "pow",
    "and_",
    "or_",
    "xor",
    "lshift",
    "rshift",
    "lt",
    "le",
    "gt",
    "ge",
    "eq",
    "ne",
    "matmul",
    "iadd",
    "isub",
    "imul",
    "iand",
    "ior",
    "ixor",
    # Round thirty-three: the rest of the in-place operators, and divmod (``a //= b`` was ``a = a // b`` there, a new
    # object where the model's ``__ifloordiv__`` changes its own; ``divmod(a, b)`` was refused).
    "ifloordiv",
    "itruediv",
    "imod",
    "ipow",
    "ilshift",
    "irshift",
    "imatmul",
    "divmod",
}


class Handles:
    def __init__(self):
        self.objects: dict[int, object] = {}
        self.ids: dict[int, int] = {}
        self.fresh: list[
            int
        ] = []  # handles handed over since the last reply and never described: their kind goes with it
        self.described: set[int] = set()
        self.exceptions_kept = 0  # raised exceptions kept for the tests to hand back (see describe_exception)

    def add(self, obj, describe: bool = True) -> int:
        """The handle of ``obj``; ``describe``: it is being handed over as a stub (a module-level value listed by
        name is not: it is fetched, as plain data when it is, only if the tests read it)."""
        key = id(obj)
        existing = self.ids.get(key)
        if existing is not None and self.objects.get(existing) is obj:
            if describe and existing not in self.described:
                self.described.add(existing)
                self.fresh.append(existing)
            return existing
        handle = len(self.objects) + 1
        self.objects[handle] = obj
        self.ids[key] = handle
        if describe:
            self.described.add(handle)
            self.fresh.append(handle)
        return handle

    def kinds(self) -> list | None:
        """``[[handle, description], ...]`` of the handles made since the last call (and of the classes those
        name), for the reply that hands them over: the trusted side builds each stub to answer checks of what
        kind of object it is as the object would (:func:`describe_kind`). None when there are none."""
        described: list = []
        position = 0
        while position < len(self.fresh) and position < MAX_DESCRIBED:  # (describing one may hand over its class)
            handle = self.fresh[position]
            position += 1
            try:
                described.append([handle, describe_kind(self.objects[handle], self)])
            except Exception:  # noqa: BLE001 - the model's metaclass may do anything: then a stub of no known kind
                continue
        self.fresh.clear()
        return described or None

    def get(self, handle):
        if type(handle) is not int or handle not in self.objects:
            raise LookupError(f"unknown handle {handle!r}")
        return self.objects[handle]


MAX_CLASS_ATTRIBUTES_SEEN = 256  # of each exported class, looked through for exception classes
MAX_DESCRIBED = 10_000  # kind descriptions in one reply (beyond: stubs of no known kind)
MAX_EXCEPTIONS_KEPT = 1024  # raised exceptions a job's process keeps to be handed back (beyond: the model's failure)


def describe_kind(obj, handles: Handles) -> list:
    """A small fixed description of what kind of object ``obj`` is (see wire.PROTOCOL_DUNDERS, wire.KIND_TYPES):
    ``["t", kind name, mask, code flags]`` for the interpreter's own kinds (a generator, a function...);
    ``["x", exception description]`` for an exception instance; ``["c", mask, metaclass, instance mask, base,
    fields]`` for a class; ``["o", mask, class, base, fields]`` for any other object. A class is ``[handle, module,
    qualname]``, a base (the nearest class of another module than the model's, for isinstance against a standard
    class) is ``[module, qualname]``, fields a dataclass's field names (else None). The trusted side treats all of
    it as the model's word: it decides checks of what kind a stub is, never a value."""
    kind = type(obj)
    mask = wire.protocol_mask(kind)
    name = wire.KIND_NAMES.get(kind)
    if name is not None:
        flags = obj.__code__.co_flags & wire.CODE_KIND_FLAGS if kind is types.FunctionType else 0
        return ["t", name, mask, flags]
    if issubclass(kind, BaseException):
        return ["x", describe_exception(obj, handles=handles)]
    if issubclass(kind, type):
        meta = None if kind is type else _class_reference(kind, handles)
        instances = wire.protocol_mask(obj)
        if "__class_getitem__" in dir(obj):
            mask |= 1 << wire.PROTOCOL_DUNDERS.index("__getitem__")
        return ["c", mask, meta, instances, _standard_base(obj), _dataclass_fields(obj)]
    return ["o", mask, _class_reference(kind, handles), _standard_base(kind), _dataclass_fields(kind)]


def _dataclass_fields(cls) -> list | None:
    """The field names of a dataclass (dataclasses.is_dataclass, fields, asdict and astuple read them), else None."""
    if not isinstance(getattr(cls, "__dataclass_fields__", None), dict):
        return None
    import dataclasses

    return [field.name for field in dataclasses.fields(cls)][: wire.MAX_DATACLASS_FIELDS]


def _class_reference(cls, handles: Handles) -> list:
    return [handles.add(cls), *_class_name(cls)]


def _class_name(cls) -> list:
    module, qualname = getattr(cls, "__module__", None), getattr(cls, "__qualname__", None)
    if type(module) is not str or type(qualname) is not str:
        return [None, None]
    return [module[: wire.MAX_CLASS_NAME], qualname[: wire.MAX_CLASS_NAME]]


def _standard_base(cls) -> list | None:
    """The nearest class of ``cls``'s ancestry (itself included) that is not the model's code's, but ``object``."""
    for klass in cls.__mro__:
        if klass is not object and getattr(klass, "__module__", None) != "solution":
            return _class_name(klass)
    return None


def _builtin_base(cls) -> str:
    """The first built-in exception class of ``cls``'s ancestry: ``SystemExit`` or ``BaseException`` too, which the
    trusted side rebuilds as no ``Exception`` (round thirty-five: each was reported as an ``Exception``)."""
    for klass in cls.__mro__:
        if klass.__module__ == "builtins" and issubclass(klass, BaseException):
            return klass.__name__
    return "Exception"


def describe_exception(exc: BaseException, depth: int = 0, handles: Handles | None = None) -> dict:
    """What the trusted side rebuilds a raised exception from: its class, message, data (:func:`_exception_data`),
    its notes (``add_note``) and, up to MAX_EXCEPTION_CHAIN deep, the exceptions it was raised from or during
    (``raise ... from e``, or inside an ``except``): ``assertIsInstance(cm.exception.__cause__, KeyError)``.

    With ``handles``, an exception of a class the wire cannot carry back by value (neither built in nor the model's
    own, which is made again where its class lives: a ``json.JSONDecodeError``, a ``binascii.Error``) also carries a
    handle, so the tests handing it back to the model's code hand over this very object (round twenty-six)."""
    cls = type(exc)
    try:
        message = str(exc)
    except BaseException:  # noqa: BLE001 - the model's __str__ may do anything
        message = "<unprintable>"
    info: dict[str, object] = {
        "type": cls.__name__,
        "module": str(getattr(cls, "__module__", "")),
        "base": _builtin_base(cls),
        "msg": message[:2000],
    }
    if (
        handles is not None
        and handles.exceptions_kept < MAX_EXCEPTIONS_KEPT
        and getattr(cls, "__module__", None) not in ("builtins", "solution")
    ):
        with contextlib.suppress(BaseException):
            handles.exceptions_kept += 1  # (each keeps its traceback's frames alive for the job: bounded)
            info["h"] = handles.add(exc, describe=False)
    with contextlib.suppress(BaseException):  # the names of its class and its ancestors of the model's own code
        info["mro"] = [klass.__name__ for klass in cls.__mro__ if klass.__module__ == "solution"][:MAX_EXCEPTION_MRO]
    with contextlib.suppress(BaseException):  # the model's exception may do anything; its message is enough
        info.update(_exception_data(exc))
    with contextlib.suppress(BaseException):
        notes = exc.__notes__ if "__notes__" in vars(exc) else None
        if type(notes) is list:
            info["notes"] = [str.__str__(note)[:2000] for note in notes[:MAX_EXCEPTION_NOTES] if isinstance(note, str)]
    if depth < MAX_EXCEPTION_CHAIN:
        with contextlib.suppress(BaseException):
            for key, linked in (("cause", exc.__cause__), ("context", exc.__context__)):
                if isinstance(linked, BaseException) and linked is not exc:
                    info[key] = describe_exception(linked, depth + 1, handles)
            if exc.__suppress_context__:
                info["suppress"] = True
    return info


def _exception_data(exc: BaseException) -> dict:
    """The exception's ``args`` and its own public attributes (``balance`` of an ``InsufficientFunds``,
    ``pos`` of a ``JSONDecodeError``), as plain data, when they are: the tests read them through
    ``assertRaises(...) as cm`` (round seven: a right answer failed, its exception arriving as its message
    alone). What is not plain data, or too large, stays behind."""
    found: dict = {}
    with contextlib.suppress(wire.Unencodable, RecursionError, ValueError):
        args = exc.args
        if type(args) is tuple:
            found["args"] = wire.encode(list(args))
        if isinstance(exc, OSError) and exc.filename is not None:  # not in its args: errno, strerror only
            found["files"] = wire.encode([exc.filename, exc.filename2])
    attrs = _plain_attributes(getattr(exc, "__dict__", None))
    if attrs:
        found["attrs"] = attrs
    members = wire.exception_members(exc)  # AttributeError.name, ImportError.path... (round nineteen)
    if members:
        found["members"] = members
    return found if len(wire.encode_json(found)) <= MAX_EXCEPTION_DATA else {}


def _plain_attributes(namespace) -> dict:
    """The public attributes in ``namespace`` (an object's or a class's own) that are plain data, encoded."""
    found = {}
    items = namespace.items() if isinstance(namespace, (dict, types.MappingProxyType)) else ()
    for name, value in list(items)[:MAX_EXCEPTION_ATTRIBUTES]:
        if type(name) is str and name.isidentifier() and not name.startswith("_"):
            with contextlib.suppress(wire.Unencodable, RecursionError, ValueError):
                found[name] = wire.encode(value)
    return found


def describe_exports(namespace: dict, handles: Handles) -> dict:
    exports: dict[str, dict[str, object]] = {}
    # Round eight: every name but the module machinery (``__all__`` and ``__version__`` were never exported, so a
    # test reading them failed a right answer on a NameError).
    items = [(name, value) for name, value in list(namespace.items()) if name not in wire.MODULE_MACHINERY]
    # The model's own exception classes by identity, so each one names its parents among them: the trusted side
    # rebuilds the hierarchy (assertRaises(AppError) catches the model's NotFound(AppError)).
    exception_names = {
        id(value): name for name, value in items if isinstance(value, type) and issubclass(value, BaseException)
    }
    # An exception class reached through another class (``class Stack: class EmptyError(Exception)``, or
    # ``Parser.Error = ParseError``) is rebuilt too, under its dotted name, which no test reads as a name: the tests
    # get it through the class (``assertRaises(Stack.EmptyError)``), as the local copy (round thirteen: a stub of
    # it, which assertRaises refused).
    nested = []
    for name, value in items:
        if isinstance(value, type):
            with contextlib.suppress(Exception):  # the model's metaclass may do anything
                for attribute, inner in list(vars(value).items())[:MAX_CLASS_ATTRIBUTES_SEEN]:
                    if (
                        isinstance(inner, type)
                        and issubclass(inner, BaseException)
                        and id(inner) not in exception_names
                    ):
                        exception_names[id(inner)] = f"{name}.{attribute}"
                        nested.append((f"{name}.{attribute}", inner))
    for name, value in nested:
        exports[name] = _describe_exception_class(value, exception_names, handles)
    for name, value in items:
        if isinstance(value, types.ModuleType):
            exports[name] = {"kind": "module", "name": value.__name__}
        elif isinstance(value, type) and issubclass(value, BaseException):
            exports[name] = _describe_exception_class(value, exception_names, handles)
        elif callable(value):
            exports[name] = {"kind": "callable", "h": handles.add(value)}
            with contextlib.suppress(Exception):  # a class's metaclass may do anything; then it is just a callable
                kind = _value_class(value)
                if kind is not None:
                    exports[name]["cls"] = kind
        else:
            # Fetched only if the tests use the name: a module with a large table stays cheap.
            exports[name] = {"kind": "value", "h": handles.add(value, describe=False)}
    return exports


def _describe_exception_class(cls: type, exception_names: dict, handles: Handles) -> dict:
    """An exception class the model's code exports, for the trusted side to rebuild: its parents among the model's
    exported classes, and its other direct bases by module and name (all of them, round thirteen: only the first
    built-in one was kept, so ``assertRaises(ValueError)`` missed a ``class InvalidMove(KeyError, ValueError)``).
    A class of another module (``from json import JSONDecodeError``) is named as that class (``std``): the tests
    get the class itself, which is what the model's code raises."""
    described: dict[str, object] = {
        "kind": "exception",
        "base": _builtin_base(cls),
        "parents": [exception_names[id(base)] for base in cls.__bases__ if id(base) in exception_names],
        "class": cls.__name__,
        "h": handles.add(cls, describe=False),
    }
    if getattr(cls, "__module__", None) != "solution":
        described["std"] = _class_name(cls)
        return described
    others = [base for base in cls.__bases__ if getattr(base, "__module__", None) != "solution"]
    described["std_bases"] = [_class_name(base) for base in others[:8]]
    with contextlib.suppress(Exception):  # its class-level data (``status = 404``), which the tests read off it
        attributes = _plain_attributes(vars(cls))
        if attributes and len(wire.encode_json(attributes)) <= MAX_EXCEPTION_DATA:
            described["class_attrs"] = attributes
    return described


def _value_class(value) -> list | None:
    """What the trusted side needs to tell its own instances of the class ``value`` (they cross the wire as its
    own values: a ``deque``, a ``datetime``, a namedtuple rebuilt from its name and fields): ``["nt", name,
    fields]`` for a namedtuple class of the model's, ``["std", module, qualname]`` for a class of another module
    (``from collections import deque``); None for anything else."""
    if not isinstance(value, type):
        return None
    fields = getattr(value, "_fields", None) if issubclass(value, tuple) else None
    if type(fields) is tuple and all(type(field) is str for field in fields):
        return ["nt", value.__name__, list(fields)]
    module, qualname = value.__module__, value.__qualname__
    if type(module) is str and type(qualname) is str and module != "solution":
        return ["std", module, qualname]
    return None


class Effects:
    """Collects stdout, stderr, warnings and log records while a request is being served."""

    def __init__(self):
        self.active = False
        self.text: dict[str, list[str]] = {"out": [], "err": []}
        self.streams: tuple = ()  # the real stdout and stderr (the job's output files)
        self.size = {"out": 0, "err": 0}
        self.items: dict[str, list[object]] = {"warn": [], "log": []}

    def start(self) -> None:
        self.active = True

    def flush_streams(self) -> None:
        """Push what the model's code printed into the job's output files before each reply: once the tests
        are done the process is killed, and a last line without a newline would still sit in a buffer."""
        for stream in self.streams:
            with contextlib.suppress(Exception):  # the model may have closed or replaced it
                stream.flush()

    def take(self) -> dict | None:
        self.active = False
        found: dict[str, object] = {}
        for key, parts in self.text.items():
            if parts:
                found[key] = "".join(parts)
                parts.clear()
                self.size[key] = 0
        for key, items in self.items.items():
            if items:
                found[key] = list(items)
                items.clear()
        return found or None

    def write(self, key: str, text) -> None:
        if self.active and type(text) is str and self.size[key] < MAX_EFFECT_TEXT:
            text = text[: MAX_EFFECT_TEXT - self.size[key]]
            self.text[key].append(text)
            self.size[key] += len(text)

    def add(self, key: str, item: list) -> bool:
        if self.active and len(self.items[key]) < MAX_EFFECT_ITEMS:
            self.items[key].append(item)
            return True
        return False


class CappedFileIO(io.FileIO):
    """The raw file under a child's stdout or stderr: what is written past ``cap`` bytes of the file is dropped (and
    reported written), as a judge ignores what a program prints beyond what it reads. ``RLIMIT_FSIZE`` caps the file
    at the same size, and a write past it raised ``File too large`` in the model's own code: a right answer that
    printed many debug lines, over the calls of one job, failed (round twenty-eight). ``cap`` None: writes past the
    limit fail, as for a stdio program's stdout (over the limit its case fails anyway, and the error ends it)."""

    cap: int | None = None

    def write(self, data, /):
        if self.cap is None:
            return super().write(data)
        with memoryview(data) as view:
            room = self.cap - self.tell()
            if room >= view.nbytes:
                return super().write(view)
            if room > 0:
                return super().write(view[:room])  # (the buffer offers the rest again, to be dropped)
            return view.nbytes


def capped_stream(fd: int, cap: int) -> io.TextIOWrapper:
    """A line-buffered UTF-8 text stream on ``fd`` (a standard stream of the model's process) over a
    :class:`CappedFileIO` (not closing ``fd``)."""
    raw = CappedFileIO(fd, "w", closefd=False)
    raw.cap = cap
    stream = io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8", errors="backslashreplace", line_buffering=True)
    stream.mode = "w"  # type: ignore[misc]  # (as open() sets it)
    return stream


def uncap(stream) -> None:
    """Let writes past the limit to a :func:`capped_stream` fail again (``File too large``)."""
    stream.buffer.raw.cap = None


class _Tee(io.TextIOBase):
    """sys.stdout/sys.stderr: writes go to the real stream and, during a request, to the effects."""

    def __init__(self, stream, effects: Effects, key: str):
        self._stream, self._effects, self._key = stream, effects, key

    def write(self, text):
        self._effects.write(self._key, text)
        return self._stream.write(text)

    def flush(self):
        return self._stream.flush()

    def __getattr__(self, name):
        return getattr(self._stream, name)


_CALL_HANDLERS = logging.Logger.callHandlers
_RECORD_FIELDS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
MAX_RECORD_EXTRA = 32  # fields a record's ``extra`` carries across (plain data only)


def _extra(record: logging.LogRecord) -> list:
    """The fields ``log.info(..., extra={...})`` put on the record, as plain data (others are left out)."""
    found: list = []
    for key, value in list(vars(record).items()):
        if len(found) >= MAX_RECORD_EXTRA:
            break
        if type(key) is str and key not in _RECORD_FIELDS:
            with contextlib.suppress(Exception):  # not plain data: it stays in the model's process
                found.append([key[:200], wire.encode(value)])
    return found


def _logged(record: logging.LogRecord) -> list | None:
    """``msg`` and ``args`` as the model's code logged them, when the one is text and the other plain data (a tuple or
    a mapping, small): a test of lazy logging reads them (``record.args == (42,)``, round nineteen). Else None, and the
    record crosses with its formatted message as ``msg``, as before."""
    msg = record.msg
    if type(msg) is not str or len(msg) > MAX_EFFECT_MESSAGE:
        return None
    try:
        tree = wire.encode(record.args)
        if len(wire.encode_json(tree)) > MAX_EFFECT_MESSAGE:
            return None
    except Exception:  # noqa: BLE001 - not plain data: it stays in the model's process
        return None
    return [msg, tree]


class _LogCapture:
    """Records each log record as it reaches its logger's handlers (``Logger.callHandlers``, after the logger's own
    level and filters), with the last logger its propagation reaches here. Round seventeen: a handler on the root
    logger missed every record of a logger with ``propagate = False`` (a library's own logger with a handler of its
    own), so ``assertLogs("app")`` failed a right answer that logs there."""

    def __init__(self, effects: Effects):
        self.effects = effects

    def call_handlers(self, logger: logging.Logger, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # whatever the model made of the record, its own logging goes on
            try:
                message = record.getMessage()[:MAX_EFFECT_MESSAGE]
            except Exception:  # noqa: BLE001 - a bad format string is the model's problem, not ours
                message = str(record.msg)[:MAX_EFFECT_MESSAGE]
            end = logger
            while end.propagate and end.parent is not None:
                end = end.parent
            # The traceback ``log.exception(...)`` carries, as a formatter prints it after the message (assertLogs'
            # output holds it in one process).
            trace = logging.Formatter().formatException(record.exc_info) if record.exc_info else record.exc_text
            trace = str(trace)[:MAX_EFFECT_MESSAGE] if trace else None
            item = [
                str(record.name)[:200],
                int(record.levelno),
                message,
                str(end.name)[:200],
                trace,
                _extra(record),
                _logged(record),
            ]
            self.effects.add("log", item)
        _CALL_HANDLERS(logger, record)


class Capture:
    """The hooks that capture what the model's code prints, warns and logs, built apart from their
    installation: a fork server builds them once, and each child installs its copy before the model's code
    runs (which may reconfigure them as it likes). In a freshly forked child every object made costs
    copy-on-write page faults."""

    def __init__(self, effects: Effects, streams: tuple):
        self.effects = effects
        effects.streams = streams
        self.tees = (_Tee(streams[0], effects, "out"), _Tee(streams[1], effects, "err"))
        self.log_handler = _LogCapture(effects)
        self.original_show = warnings.showwarning

    def install(self) -> None:
        self._before = (sys.stdout, sys.stderr, logging.root.level)
        self._warnings_before = warnings.catch_warnings()  # the stdlib's own save and restore of both
        self._warnings_before.__enter__()
        sys.stdout, sys.stderr = self.tees
        self.original_show = warnings.showwarning
        warnings.showwarning = self.show
        warnings.simplefilter("always")  # every occurrence, as assertWarns sees it (the model may narrow this)
        capture = self.log_handler
        logging.Logger.callHandlers = lambda logger, record: capture.call_handlers(logger, record)  # type: ignore[method-assign,assignment]
        logging.root.setLevel(1)  # records at every level exist, for an assertLogs at any level

    def uninstall(self) -> None:
        """Undo :meth:`install` (in a process forked from one that installed the hooks for its children)."""
        sys.stdout, sys.stderr, level = self._before
        self._warnings_before.__exit__(None, None, None)
        logging.Logger.callHandlers = _CALL_HANDLERS  # type: ignore[method-assign]
        logging.root.setLevel(level)

    def show(self, message, category, filename, lineno, file=None, line=None):
        item = [
            category.__name__,
            str(getattr(category, "__module__", "")),
            _warning_base(category),
            str(message)[:MAX_EFFECT_MESSAGE],
            lineno if type(lineno) is int else 0,
            # Attributed to this runtime's own frame: the caller of the model's code (``stacklevel=2``), which in one
            # process is the tests' line that called it (the runner replays it there).
            os.path.dirname(str(filename)) == _RUNTIME_DIRECTORY,
            # The warning's own args and public attributes (``warnings.warn(RateWarning(rate))``: ``cm.warning.rate``,
            # round nineteen), as an exception's cross.
            _warning_data(message),
        ]
        if not self.effects.add("warn", item) and not self.effects.active:
            self.original_show(message, category, filename, lineno, file, line)


_RUNTIME_DIRECTORY = os.path.dirname(os.path.abspath(__file__))


def _warning_data(message) -> dict:
    """What :func:`_exception_data` carries of a warning given as an instance (its args, its own attributes)."""
    try:
        return _exception_data(message) if isinstance(message, Warning) else {}
    except Exception:  # noqa: BLE001 - the model's warning may do anything; its text is enough
        return {}


def _warning_base(cls) -> str:
    for klass in cls.__mro__:
        if klass.__module__ == "builtins" and issubclass(klass, Warning):
            return klass.__name__
    return "UserWarning"


def _math_function(name: str) -> Callable[[object], object]:
    """math.floor, ceil or trunc, imported when first asked for (every module a child imports costs it pages)."""

    def call(value):
        import math

        return getattr(math, name)(value)

    return call


class ModelSideResolver:
    """What the tests' values refer to here: the model's objects by handle, and the standard callables the tests hand
    over by name (``str.upper``, ``math.sqrt``, a ``functools.partial``: wire.standard_callable), which only this
    side rebuilds."""

    __slots__ = ("handles",)

    def __init__(self, handles: Handles):
        self.handles = handles

    def __call__(self, handle):
        return self.handles.get(handle)

    def standard(self, tag: str, body):
        return wire.decode_standard_callable(tag, body, lambda part: wire.decode(part, self))


def _linkable_references(value) -> int:
    """The references to ``value`` when it may be linked (wire.LINKABLE), else 0: most calls pass no container, and
    those they pass are counted alike before and after the call (each held by the same names then as now)."""
    return sys.getrefcount(value) if type(value) in wire.LINKABLE else 0


def adopt_random_state(state) -> None:
    """Give the module-level ``random`` generator the state the tests' generator has (trusted._random_state)."""
    version, words, gauss_next = state
    random.setstate((version, tuple(words), gauss_next))


class Server:
    def __init__(self, rfd: int, wfd: int, effects: Effects | None = None):
        self.rfd = rfd
        self.wfd = wfd
        self.handles = Handles()
        self.resolver = ModelSideResolver(self.handles)
        self.module = types.ModuleType("solution")
        self.effects = effects or Effects()
        self.links = wire.Links()  # containers of the tests' whose copies this process holds, and its own handed over

    def load(self, code: str) -> None:
        sys.modules["solution"] = self.module
        load_error = None
        try:
            # dont_inherit: never this module's ``from __future__ import annotations`` (round eight: the model's
            # annotations were strings, ``f.__annotations__["x"] is int`` failed a right answer).
            exec(compile_model_code(code), self.module.__dict__)
        except BaseException as exc:  # noqa: BLE001 - SystemExit at import is a model failure too
            load_error = describe_exception(exc)
        self.effects.flush_streams()
        exports = describe_exports(self.module.__dict__, self.handles)
        ready: dict[str, object] = {"ready": True, "load_error": load_error, "exports": exports}
        kinds = self.handles.kinds()
        if kinds:
            ready["k"] = kinds
        wire.send_json(self.wfd, ready)

    def serve_forever(self) -> None:
        while True:
            try:
                request = wire.recv_json(self.rfd)
            except wire.PeerClosed:
                return
            self.effects.start()
            try:
                if "sy" in request:
                    self.links.apply(request["sy"])
                if "ul" in request:  # (after their last changes)
                    self.links.forget(request["ul"])
                if "rs" in request:  # the tests seeded their random generator: the model's code draws from it
                    adopt_random_state(request["rs"])
                reply = self.handle(request)
            except BaseException as exc:  # noqa: BLE001 - report, never die on the model's behalf
                reply = {"exc": describe_exception(exc, handles=self.handles)}
            try:
                changed = self.links.changed()
            except BaseException:  # noqa: BLE001 - the model's own containers: its failure shows in the values
                changed = []
            if changed:
                reply["lk"] = changed
            gone = self.links.take_gone()
            if gone:
                reply["ul"] = gone
            kinds = self.handles.kinds()
            if kinds:
                reply["k"] = kinds
            effects = self.effects.take()
            if effects:
                reply["fx"] = effects
            self.effects.flush_streams()
            try:
                wire.send_json(self.wfd, reply)
            except (ValueError, RecursionError) as exc:
                wire.send_json(self.wfd, {"exc": describe_exception(exc, handles=self.handles)})

    def _decode(self, tree, nodes: list | None = None):
        return wire.decode(tree, self.resolver, nodes=nodes)

    def _encode(self, value, refs: dict | None = None):
        return wire.encode(value, self.handles.add, refs=refs)

    def _linked(self, reply: dict, result, fresh: list, arguments=(), given=()) -> dict:
        """``reply``, naming in ``nl`` the containers it hands over that are now linked (wire.Links): the call's
        arguments its code kept, by position or keyword, and the result as None when the model's code holds it
        elsewhere too (a list of its state, ``self._items``): it has more references than ``fresh``, a new list held
        by the caller as the result is (an argument handed back, ``given``, is the caller's own already)."""
        found = []
        linked = self.links.link_of(result)
        if linked is not None and not any(value is result for value in given):
            reply["rl"] = linked  # (a container linked before, handed back: the tests' own, as in one process)
        kept = type(result) in wire.LINKABLE and sys.getrefcount(result) > sys.getrefcount(fresh)
        kept = kept and not any(value is result for value in given)
        held = [(None, result)] if kept else []
        for key, value in [*arguments, *held]:
            if self.links.add(self.links.made, value):  # (numbered once for the job: never a number used before)
                found.append([key, self.links.made])
                self.links.made += 1
        if found:
            reply["nl"] = found
        return reply

    def _resolve_linked(self, linked, args: list, kwargs: dict, nodes: list, tops: list) -> None:
        """Put this process's linked copy in place of each argument the tests' side names in ``la`` as one of its
        linked containers (wire.Links.resolve): ``f(xs)`` of a list its code kept is that list, as in one process."""
        keys: list = [*range(len(args)), *kwargs]
        for item in linked if type(linked) is list else ():
            key, link = item if type(item) is list and len(item) == 2 else (None, None)
            if type(key) not in (int, str) or key not in keys:
                continue
            position = keys.index(key)
            value = self.links.resolve(link, args[key] if type(key) is int else kwargs[key])
            if type(key) is int:
                args[key] = value
            else:
                kwargs[key] = value
            nodes[tops[position]] = value

    def _store(self, request: dict, store) -> dict:
        """``store(value)`` of the request's value (``obj.items = xs``, ``obj[k] = xs``): a container its code then
        holds is linked (the tests' later ``xs.append(3)`` reaches it, as in one process), one linked before is its own
        copy (wire.Links), as a call's arguments are."""
        values = [self._decode(request["value"])]
        self._resolve_linked(request.get("la"), values, {}, values[:], [0])
        before = sys.getrefcount(values[0])
        store(values[0])
        kept = sys.getrefcount(values[0]) > before
        return self._linked({"ok": None}, None, [], [(0, values[0])] if kept else [])

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "inprocess":
            return self.run_inprocess(request)
        target = self.handles.get(request.get("h"))
        if op == "call":
            raw_args = request.get("args", [])
            raw_kwargs = request.get("kwargs", [])
            nodes: list = []  # every part of the arguments, in the order the caller encoded them
            tops: list[int] = []  # where each argument itself sits in it
            args = []
            kwargs = {}
            with wire.one_value():  # (as the caller encoded them: one list in two arguments is one list)
                for item in raw_args:
                    tops.append(len(nodes))
                    args.append(self._decode(item, nodes))
                for key, value in raw_kwargs:
                    tops.append(len(nodes))
                    kwargs[str(key)] = self._decode(value, nodes)
            self._resolve_linked(request.get("la"), args, kwargs, nodes, tops)
            given = [*args, *kwargs.values()]
            before = [_linkable_references(value) for value in given]
            result = target(*args, **kwargs)
            # The arguments its code kept a reference to (``self.data = data``), the ones worth linking (wire.Links).
            # (counted as before the call, then compared: the same frames hold them both times)
            after = [_linkable_references(value) - (value is result) for value in given]
            kept = [now > then for now, then in zip(after, before, strict=True)]
            # A result that is (or holds) one of the arguments, or an immutable part of one, goes back as a
            # reference to it, so the caller gets its own object: assertIs(f(xs), xs), the caller's NaN
            # handed back inside a list. Nested containers are sent by value (a mutation inside them must
            # reach the caller through the write-back below).
            refs = {id(nodes[position]): position for position in tops}
            if len(nodes) <= MAX_REFERABLE_PARTS:
                refs.update(
                    (id(node), position) for position, node in enumerate(nodes) if type(node) in _IMMUTABLE_PARTS
                )
            reply = {"ok": self._encode(result, refs)}
            write_back = []
            for key, before, value in [
                *zip(range(len(args)), raw_args, args, strict=True),
                *((str(k), v, kwargs[str(k)]) for k, v in raw_kwargs),
            ]:
                if type(value) in wire.MIRRORED_TYPES and self._encode(value) != before:
                    inner = {ident: position for ident, position in refs.items() if ident != id(value)}
                    write_back.append([key, self._encode(value, inner)])
            if write_back:
                reply["wb"] = write_back
            keys = [*range(len(args)), *kwargs]
            fresh: list = []  # (held as ``result`` is: by one name here)
            kept_arguments = [(key, value) for key, value, keep in zip(keys, given, kept, strict=True) if keep]
            return self._linked(reply, result, fresh, kept_arguments, given)
        if op == "get":  # (a module-level value the tests read: ``HISTORY``, a list its functions append to)
            fresh = []
            return self._linked({"ok": self._encode(target)}, target, fresh)
        if op == "getattr":
            value = getattr(target, str(request["name"]))
            fresh = []
            return self._linked({"ok": self._encode(value)}, value, fresh)
        if op == "ancestry":  # a class's __bases__, __mro__ or __base__: see trusted._model_ancestry
            which = {"bases": "__bases__", "mro": "__mro__", "base": "__base__"}[str(request.get("which"))]
            if not isinstance(target, type):
                raise TypeError("only a class has an ancestry")
            found = vars(type)[which].__get__(target)  # (the type's own slot: no metaclass of the model's answers it)
            classes = found if isinstance(found, tuple) else (found,)
            named = [[None if klass.__module__ == "solution" else _class_name(klass), klass] for klass in classes]
            return {"ok": self._encode(named)}
        if op == "type_hints":  # (typing.get_type_hints of the model's object, resolved in its own namespace)
            import typing

            value = typing.get_type_hints(target, include_extras=request.get("extras") is True)
            fresh = []
            return self._linked({"ok": self._encode(value)}, value, fresh)
        if op == "annotations":  # (inspect.get_annotations of the model's object, evaluated in its own namespace)
            import inspect

            value = inspect.get_annotations(target, eval_str=request.get("eval_str") is True)
            fresh = []
            return self._linked({"ok": self._encode(value)}, value, fresh)
        if op == "setattr":
            return self._store(request, lambda value: setattr(target, str(request["name"]), value))
        if op == "delattr":
            delattr(target, str(request["name"]))
            return {"ok": None}
        if op == "enter":
            return {"ok": self._encode(type(target).__enter__(target))}
        if op == "exit":
            kind = wire.builtin_exception(str(request.get("kind"))) if request.get("kind") is not None else None
            type(target).__exit__(target, kind, kind() if kind is not None else None, None)
            return {"ok": None}
        if op == "getitem":
            value = target[self._decode(request["key"])]
            fresh = []
            return self._linked({"ok": self._encode(value)}, value, fresh)
        if op == "setitem":
            return self._store(request, lambda value: target.__setitem__(self._decode(request["key"]), value))
        if op == "delitem":
            del target[self._decode(request["key"])]
            return {"ok": None}
        if op == "len":
            return {"ok": len(target)}
        if op == "iter":
            return {"ok": {"h": self.handles.add(iter(target))}}
        if op == "take":  # the next items of an iteration the tests drive, n at a time
            count = request.get("n")
            if type(count) is not int or not 0 < count <= MAX_TAKE:
                raise ValueError("bad item count")
            items, end, error = [], False, None
            try:
                for _ in range(count):
                    items.append(next(target))
            except StopIteration:
                end = True
            except BaseException as exc:  # noqa: BLE001 - raised after the items already produced
                end, error = True, describe_exception(exc, handles=self.handles)
            reply = {"ok": self._encode(items), "end": end}
            if error is not None:
                reply["exc_after"] = error
            return reply
        if op == "next":
            try:
                return {"ok": self._encode(next(target))}
            except StopIteration as end:
                reply = {"stop": True}
                if end.value is not None:
                    with contextlib.suppress(BaseException):  # a value that cannot cross: the end without it
                        reply["value"] = self._encode(end.value)
                return reply
        if op == "bool":
            return {"ok": bool(target)}
        if op == "str":
            return {"ok": str(target)}
        if op == "format":
            return {"ok": format(target, str(request.get("spec", "")))}
        if op == "repr":
            return {"ok": repr(target)}
        if op == "hash":
            return {"ok": hash(target)}
        if op == "binop":
            name = request.get("name")
            if name not in BINARY_OPS:
                raise ValueError(f"unsupported operator {name!r}")
            other = self.handles.get(request.get("other"))
            function = divmod if name == "divmod" else getattr(operator, name)
            result = function(other, target) if request.get("reflected") else function(target, other)
            return {"ok": self._encode(result)}
        if op == "unary":
            name = request.get("name")
            functions: dict[str, Callable[..., object]] = {
                "neg": operator.neg,
                "pos": operator.pos,
                "abs": abs,
                "invert": operator.invert,
                "int": int,
                "float": float,
                "index": operator.index,
                "floor": _math_function("floor"),
                "ceil": _math_function("ceil"),
                "trunc": _math_function("trunc"),
                "complex": complex,
                "bytes": bytes,
            }
            if name == "round":
                ndigits = request.get("ndigits")
                if ndigits is not None and type(ndigits) is not int:
                    raise TypeError("round() takes an int number of digits")
                return {"ok": self._encode(round(target) if ndigits is None else round(target, ndigits))}
            if name not in functions:
                raise ValueError(f"unsupported operator {name!r}")
            return {"ok": self._encode(functions[name](target))}
        if op == "copy":
            import copy

            return {"ok": self._encode(copy.deepcopy(target) if request.get("deep") is True else copy.copy(target))}
        if op == "signature":
            import inspect

            signature = inspect.signature(target, eval_str=request.get("eval_str") is True)
            empty = inspect.Parameter.empty
            described = [
                [
                    parameter.name,
                    int(parameter.kind),
                    parameter.default is not empty,
                    None if parameter.default is empty else parameter.default,
                    parameter.annotation is not empty,
                    None if parameter.annotation is empty else parameter.annotation,
                ]
                for parameter in signature.parameters.values()
            ]
            returned = signature.return_annotation
            return {"ok": self._encode([described, returned is not empty, None if returned is empty else returned])}
        if op == "dir":
            return {"ok": self._encode([name for name in dir(target) if type(name) is str])}
        if op == "isinstance":
            return {"ok": isinstance(target, self.handles.get(request.get("cls")))}
        if op == "issubclass":
            return {"ok": issubclass(target, self.handles.get(request.get("cls")))}
        raise ValueError(f"unknown operation {op!r}")

    def run_inprocess(self, request: dict) -> dict:
        """The documented fallback: tests run here, beside the model's code. Forgeable by design; the
        trusted side screens the code statically and cross-checks the counts."""
        from . import harness

        namespace = self.module.__dict__
        entry_point = str(request["entry_point"])
        candidate = namespace.get(entry_point, harness.MISSING)  # before the tests' own names (a ``def check``)
        exec(compile(str(request["tests"]), "<hidden tests>", "exec", dont_inherit=True), namespace)
        suite = harness.build_suite(namespace, self.module, str(request["format"]), entry_point, candidate)
        return {"ok": wire.encode(harness.summarize(harness.run_suite(suite, self.module)))}


class EventfdSocket:
    """One end of a wake-up channel over an eventfd, with the few socket methods asyncio's event loop calls on its
    self-pipe (``setblocking``, ``fileno``, ``recv``, ``send``, ``close``). The model's process may not make
    sockets or pipes (their inode numbers come from a counter the whole host shares: a channel between jobs),
    so ``asyncio.run`` in a right answer raised PermissionError; every eventfd shares one anonymous inode."""

    def __init__(self, fd: int):
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def setblocking(self, flag: bool) -> None:  # always non-blocking (EFD_NONBLOCK), as asyncio sets it
        pass

    def recv(self, size: int) -> bytes:
        count = int.from_bytes(os.read(self.fd, 8), "little")  # BlockingIOError when nothing was sent
        return bytes(min(count, size))  # zero bytes: the unix loop reads any other byte as a signal number

    def send(self, data: bytes) -> int:
        os.write(self.fd, (1).to_bytes(8, "little"))
        return len(data)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


_SOCKETPAIR = socket.socketpair


def _socketpair_or_eventfd(*args, **kwargs):
    """``socket.socketpair`` in the model's process: where the sandbox refuses sockets, a default pair (what
    asyncio's event loop asks for its wake-ups) is two ends of one eventfd; any other pair stays refused."""
    try:
        return _SOCKETPAIR(*args, **kwargs)
    except PermissionError:
        if args or kwargs:
            raise
        fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        return EventfdSocket(fd), EventfdSocket(os.dup(fd))


def run_program(code: str, streams: tuple) -> int:
    """A stdio job, in its hardened child: run ``code`` as ``python program.py`` would, as ``__main__`` with
    ``streams`` (stdin: the case's input on fd 0; stdout and stderr: the job's output files) as its standard
    streams (``sys.__stdout__`` and the others too), and return the exit status that would have: 0, a
    ``SystemExit``'s code as Python turns it into one, or 1 after an uncaught exception (its traceback on stderr).
    Then, as at interpreter exit: the streams are flushed as the module's code ends, non-daemon threads are waited
    for (those they start too), the program's ``atexit`` functions run (never the fork server's), ``__main__``'s
    objects are finalized (a file object it never closed flushes) and the streams are flushed."""
    import atexit
    import builtins
    import gc
    import threading
    import traceback

    atexit._clear()  # whatever the fork server registered is not the program's to run
    sys.stdin, sys.stdout, sys.stderr = streams
    for name, stream in zip(("__stdin__", "__stdout__", "__stderr__"), streams, strict=True):
        setattr(sys, name, stream)  # as for python program.py: the same objects
    with contextlib.suppress(Exception):
        streams[1].reconfigure(line_buffering=False)  # a program's stdout to a file is block-buffered
    sys.argv = [MODEL_FILENAME]
    _recursion_room_as_at_the_top()
    module = types.ModuleType("__main__")
    module.__file__ = sys.argv[0]  # as python program.py sets it (local-testing templates read it)
    # __main__'s __builtins__ is the module (exec() would put in its dict): ``__builtins__.input`` (round thirty)
    module.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = module
    status = 0
    try:
        try:
            exec(compile_model_code(code), module.__dict__)
        finally:
            _flush_as_the_module_ends()
            _join_non_daemon_threads(threading)
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException as exc:  # noqa: BLE001 - the program's own failure, reported as Python would
        with contextlib.suppress(BaseException):
            frames = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # from the program's own
            traceback.print_exception(type(exc), exc, frames)
        status = 1
    with contextlib.suppress(BaseException):
        _join_non_daemon_threads(threading)  # (after a SystemExit that cut the first wait short too)
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()  # (prints what they raise; the exit status stays, as in Python)
    # As Python's exit (Py_FinalizeEx), round twenty-eight: the standard streams are flushed while the program's
    # module still stands (a fast-output class's flush reads its globals), then the original streams are put back, the
    # module is cleared (its objects are finalized: open files flush), and those are flushed again, as they are
    # finalized (what cannot be written then is lost, the status stays: another file on fd 1 may have closed it).
    status = _flush_standard_streams(status, getattr(sys, "stdout", None), getattr(sys, "stderr", None))
    sys.stdout, sys.stderr = streams[1:]
    with contextlib.suppress(BaseException):
        module.__dict__.clear()
        gc.collect()
    _flush_standard_streams(0, *streams[1:])
    return status


# Signals whose default action ends a process and that no fault raises: as the first process of its pid namespace
# (pidns), the program ignored these when it sent them to itself (``os.kill(os.getpid(), SIGTERM)``, ``signal.alarm``),
# where ``python program.py`` ends (round thirty-two: it went on, passing where it fails elsewhere, and where the
# sandbox runs it as an ordinary process).
_ENDING_SIGNALS = ("SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGTERM", "SIGVTALRM", "SIGPROF", "SIGIO")
_ENDING_SIGNALS_LINUX = ("SIGPWR", "SIGSTKFLT")


# The calls by which a program sends itself one of those signals, wrapped once in the fork server (Prepared.install)
# so that every child inherits the wrappers: installing the ~40 handlers in each child cost it ~0.4 ms of CPU, and
# even wrapping these six there ~0.1-0.3 ms (page copies), on every job, for what few programs do.
_SENDERS: tuple[tuple[str, str], ...] = (("os", "kill"), ("os", "killpg"), ("signal", "raise_signal"))
_SENDERS += (("signal", "pthread_kill"), ("signal", "alarm"), ("signal", "setitimer"))
_ENDING_INSTALLED = [False]  # (per process: a child's copy is set by its own first call)


def _ended_by_signals_sent_to_itself() -> None:
    """Where this process (a program, or the model's process of a function's tests) is pid 1, each of those signals it
    has left at their default ends it (exit 128 + the signal's number, as a shell reports one; no buffer flushed, as
    for a real kill), and ``signal.signal`` and ``signal.getsignal`` show that default as ``SIG_DFL``, as in an
    ordinary process. Called by the wrapped senders (:func:`wrap_signal_senders`) before they send: a signal sent
    by other means (``ctypes``) is ignored, as the kernel ignores it for the first process of a pid namespace."""
    if _ENDING_INSTALLED[0] or os.getpid() != 1:
        return
    _ENDING_INSTALLED[0] = True
    import signal

    _end_on_default_signals(signal)


def wrap_signal_senders() -> list[tuple[object, str, object]]:
    """Wrap each of :data:`_SENDERS` so that it calls :func:`_ended_by_signals_sent_to_itself` first; returns what
    :func:`unwrap_signal_senders` puts back (the fork server's trusted runner does, before it runs any tests)."""
    import functools
    import signal

    modules = {"os": os, "signal": signal}
    wrapped: list[tuple[object, str, object]] = []

    def installing_first(original):
        @functools.wraps(original)
        def sender(*args, **kwargs):
            _ended_by_signals_sent_to_itself()
            return original(*args, **kwargs)

        return sender

    for module, name in _SENDERS:
        original = getattr(modules[module], name, None)
        if original is not None:
            wrapped.append((modules[module], name, original))
            setattr(modules[module], name, installing_first(original))
    return wrapped


def unwrap_signal_senders(wrapped: list[tuple[object, str, object]]) -> None:
    for module, name, original in wrapped:
        setattr(module, name, original)


def _end_on_default_signals(signal) -> None:
    """Make each of the ending signals left at its default end this process (see _ended_by_signals_sent_to_itself)."""
    names = _ENDING_SIGNALS + _ENDING_SIGNALS_LINUX
    ending = {getattr(signal, name) for name in names if hasattr(signal, name)}
    ending.update(range(signal.SIGRTMIN, signal.SIGRTMAX + 1))
    set_handler, get_handler = signal.signal, signal.getsignal

    def end(signum, _frame):
        os._exit(128 + signum)

    def handler_for(signalnum, handler):
        return end if signalnum in ending and not callable(handler) and handler == signal.SIG_DFL else handler

    for number in ending:
        with contextlib.suppress(OSError, ValueError):
            set_handler(number, handler_for(number, get_handler(number)))

    def signal_(signalnum, handler, /):
        previous = set_handler(signalnum, handler_for(signalnum, handler))
        return signal.SIG_DFL if previous is end else previous

    def getsignal(signalnum, /):
        current = get_handler(signalnum)
        return signal.SIG_DFL if current is end else current

    signal.signal, signal.getsignal = signal_, getsignal


def _recursion_room_as_at_the_top() -> None:
    """Give the program the recursion depth it has under ``python program.py``, where its module's code is the first
    frame: here it runs below the fork server's frames, which count against the same limit, and a recursion of the
    default limit's depth failed with RecursionError (round twenty-eight). How many levels they take (frames, and on
    CPython 3.11 each entry into the evaluation loop, ``exec()``'s included) is measured from where the program will
    run, under a low limit (a few dozen calls); the limit is raised by that many, and ``sys.setrecursionlimit`` and
    ``sys.getrecursionlimit`` set and read it net of them."""
    set_limit, get_limit = sys.setrecursionlimit, sys.getrecursionlimit
    limit = get_limit()
    probe_limit = _frames_from(sys._getframe()) + _RECURSION_PROBE_ROOM
    namespace: dict = {}
    try:
        set_limit(probe_limit)
        try:
            exec(_RECURSION_PROBE, namespace)
        finally:
            set_limit(limit)
    except RecursionError:  # deeper than expected: left as it is
        return
    # Under python program.py a function called from the module's code reaches the limit less two; the probe ran
    # one frame (this function's) deeper than the program will.
    offset = probe_limit - 2 - namespace["reached"] - 1
    if offset <= 0:
        return

    asked = [limit]

    def setrecursionlimit(new_limit, /):
        new_limit = operator.index(new_limit)
        if not 1 <= new_limit <= _C_INT_MAX:
            set_limit(new_limit)  # Python's own ValueError or OverflowError
        # (round thirty: a limit within the offset of the C int's largest, sys.setrecursionlimit(2**31 - 1), raised
        # OverflowError here only; it is held there, and read back as the program set it)
        set_limit(min(new_limit + offset, _C_INT_MAX))
        asked[0] = new_limit

    def getrecursionlimit():
        return asked[0]

    setrecursionlimit.__doc__, getrecursionlimit.__doc__ = set_limit.__doc__, get_limit.__doc__
    set_limit(limit + offset)
    sys.setrecursionlimit, sys.getrecursionlimit = setrecursionlimit, getrecursionlimit


def _frames_from(frame) -> int:
    count = 0
    while frame is not None:
        count += 1
        frame = frame.f_back
    return count


_RECURSION_PROBE_ROOM = 48
_C_INT_MAX = 2**31 - 1  # the largest limit sys.setrecursionlimit takes (a C int)
_RECURSION_PROBE = compile(
    "def d(n):\n    try:\n        return d(n + 1)\n    except RecursionError:\n        return n\nreached = d(0)\n",
    "<recursion probe>",
    "exec",
)


def _flush_as_the_module_ends() -> None:
    """As ``python program.py`` does the moment the module's code ends, however it ends (CPython's ``flush_io``),
    before it waits for threads and runs ``atexit`` functions: ``sys.stderr``, then ``sys.stdout``, whatever they are,
    and nothing they raise changes the status. Round thirty: flushed only after those, the answer of a program that
    then ended with ``os._exit(0)`` (an ``atexit`` function, a thread outliving the module's code) was lost. (The
    status is the exit's to decide, later.)"""
    _flush_standard_streams(0, getattr(sys, "stderr", None), getattr(sys, "stdout", None))


def _flush_standard_streams(status: int, *streams) -> int:
    """Flush each stream as Python's exit does: none that is missing (a program may delete ``sys.stdout``) or closed;
    output that could not be written makes the status 120."""
    for stream in streams:
        try:
            if stream is not None and not _closed(stream):
                stream.flush()
        except BaseException:  # noqa: BLE001 - as Python's exit: output that could not be written fails it
            status = status or 120
    return status


def _closed(stream) -> bool:
    """``stream.closed`` as Python's exit reads it: a stream that cannot say is open."""
    try:
        return bool(stream.closed)
    except BaseException:  # noqa: BLE001 - the program's object
        return False


# What a program may open for its standard streams: symbolic links into /proc/self/fd, which the child cannot see
# (/proc is covered). CP programs open them (``open("/dev/stdin")``), so they name the stream's descriptor here.
_STANDARD_STREAM_PATHS = {
    **{f"/dev/{name}": fd for fd, name in enumerate(("stdin", "stdout", "stderr"))},
    **{f"{root}/{fd}": fd for root in ("/dev/fd", "/proc/self/fd") for fd in range(3)},
}


# Filled in the model's process by :func:`open_named_descriptors`: the names above, and ``os.devnull``.
_NAMED_DESCRIPTORS: dict[str, int] = {}


def _named_descriptor(path: object) -> int | None:
    """The descriptor a path in :data:`_NAMED_DESCRIPTORS` names, else None (a descriptor, another path, or one the
    real call refuses, as it would). The names are absolute: a ``dir_fd`` changes nothing for them."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        return None
    try:
        return _NAMED_DESCRIPTORS.get(os.fsdecode(path))
    except BaseException:  # noqa: BLE001 - a path the real call refuses, as it would
        return None


_FILE_IO = io.FileIO  # (at import, in the fork server: the real class)


class _IsFileIO(abc.ABCMeta):  # (an ABCMeta as typeshed has io.IOBase's)
    """``isinstance`` and ``issubclass`` answer for the real ``io.FileIO``: the files ``open`` makes are of it."""

    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, _FILE_IO)

    def __subclasscheck__(cls, subclass: type) -> bool:
        return issubclass(subclass, _FILE_IO)


class _NamedFileIO(io.FileIO, metaclass=_IsFileIO):
    """``io.FileIO`` for the model's process: ``io.FileIO("/dev/stdin")`` opens no file of its own."""

    def __init__(self, file, mode="r", closefd=True, opener=None):
        fd = _named_descriptor(file)
        if fd is None:
            super().__init__(file, mode, closefd, opener)
        else:
            super().__init__(os.dup(fd), mode, True)


def open_named_descriptors(null_fd: int) -> None:
    """Make ``open`` (``builtins.open``, ``io.open``, which pathlib uses), ``os.open`` and ``io.FileIO`` give a
    path in :data:`_STANDARD_STREAM_PATHS` a duplicate of that stream's descriptor, as the kernel would give the
    program the same file through /proc, and ``os.devnull`` one of ``null_fd`` (this child's own /dev/null, open for
    reading and writing): Landlock and the read-only file system refuse to open it for writing (round twenty-eight:
    ``sys.stdout = open(os.devnull, "w")`` failed a right answer). In the model's own process: nothing but its own
    streams depends on it."""
    import builtins

    _NAMED_DESCRIPTORS.update(_STANDARD_STREAM_PATHS, **{os.devnull: null_fd})
    real_open = io.open

    def open(file, mode="r", *args, **kwargs):  # (builtins.open, for the program)
        if isinstance(file, os.PathLike):
            file = os.fspath(file)  # (pathlib's read_text and the like; once, as io.open would)
        fd = _named_descriptor(file) if type(file) in (str, bytes) else None
        if fd is None:
            return real_open(file, mode, *args, **kwargs)
        kwargs.pop("closefd", None)  # (a name, closed with the file: the duplicate is its own)
        return real_open(os.dup(fd), mode, *args, **kwargs)

    builtins.open = io.open = open
    real_os_open = os.open

    def os_open(path, flags, mode=0o777, *, dir_fd=None):  # (os.open too: os.open("/dev/stdin") is a CP idiom)
        fd = _named_descriptor(path)
        if fd is None:
            return real_os_open(path, flags, mode, dir_fd=dir_fd)
        return os.dup(fd)  # (non-inheritable, as every descriptor os.open makes)

    os.open = os_open
    io.FileIO = _NamedFileIO  # type: ignore[misc]


def _join_non_daemon_threads(threading: types.ModuleType) -> None:
    """Wait, as interpreter exit does, until no non-daemon thread is left (one may start another meanwhile), after
    the functions registered to run before that wait (``threading._register_atexit``: a ``ThreadPoolExecutor``
    never shut down tells its idle workers to end there). Not ``threading._shutdown``: forked without the
    interpreter's fork hooks, this child still holds the fork server's shutdown locks."""
    for call in reversed(list(getattr(threading, "_threading_atexits", ()))):
        call()
    while True:
        left = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
        if not left:
            return
        for thread in left:
            thread.join()


def _exit_status(code: object) -> int:
    """The exit status ``sys.exit(code)`` gives a Python program: an int (``True``/``False`` too) modulo 256,
    255 for one beyond a C long; anything else is printed on stderr and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int) and issubclass(type(code), int):  # (type(): a __class__ property passes isinstance)
        with contextlib.suppress(BaseException):
            value = int.__index__(code)  # its value, whatever the subclass overrides
            return value & 0xFF if -(1 << 63) <= value < (1 << 63) else 255
        return 255
    with contextlib.suppress(BaseException):
        sys.stderr.write(f"{code}\n")
    return 1


class Prepared:
    """Everything that does not depend on the job's code, built ahead (by the fork server, once) for
    children that read ``stdin``, write to ``streams`` and talk over ``rfd``/``wfd``. The fork server
    installs the standard streams and the hooks on stdout, stderr, warnings and logging in itself
    (:meth:`install`; its trusted runner takes them off, :meth:`uninstall`), so each child starts with them;
    each child calls :meth:`start` on its own copy once hardened, which tells the trusted side so."""

    def __init__(self, rfd: int, wfd: int, stdin, streams: tuple):
        effects = Effects()
        self.stdin = stdin
        self.capture = Capture(effects, streams)
        self.server = Server(rfd, wfd, effects)
        # Encoded here, once: in a child every object it builds costs page copies.
        self.hardened = wire.frame(wire.encode_json({"hardened": True}))
        self._stdin_before: object = None
        self._signal_senders: list[tuple[object, str, object]] = []

    def install(self) -> None:
        self._stdin_before = sys.stdin
        sys.stdin = self.stdin
        self.capture.install()
        socket.socketpair = _socketpair_or_eventfd
        self._signal_senders = wrap_signal_senders()  # (see _ended_by_signals_sent_to_itself)

    def uninstall(self) -> None:
        unwrap_signal_senders(self._signal_senders)
        socket.socketpair = _SOCKETPAIR
        self.capture.uninstall()
        sys.stdin = self._stdin_before

    def start(self) -> Server:
        wire.write_all(self.server.wfd, self.hardened)
        return self.server
