"""What one job's hidden tests can leave behind in the trusted runner's interpreter, and putting it back.

The trusted runner is long-lived: it runs the hidden tests of one task after another in one process (it is
replaced after ``runner_recycle_jobs`` jobs). The tests are trusted code, but each task's were written for an
interpreter of their own. Round thirteen: a task whose tests ran ``logging.disable(logging.CRITICAL)`` or
``decimal.getcontext().prec = 6`` at module level failed a later task's right answer (``assertLogs``, a
``Decimal`` compared at full precision), and could have passed a wrong one computed at that precision.

:class:`Baseline` records the interpreter-wide settings tests change (``record`` at the runner's start) and puts
them back after every job (``restore``), comparing each first so that a job that changed nothing costs a few
dictionary comparisons. What it cannot put back (a module's function patched by hand, a thread left running) is
bounded by the runner's recycling; a part that fails to restore has the runner replaced before the next job.
"""

from __future__ import annotations

import _abc
import abc
import ast
import atexit
import builtins
import codecs
import collections
import decimal
import faulthandler
import functools
import gc
import importlib
import io
import locale
import logging
import os
import random
import signal
import socket
import sys
import threading
import time
import types
import unittest
import warnings
import weakref
from typing import Any

# Signals whose handlers tests set (a timeout by SIGALRM, a handler for SIGTERM or SIGINT under test).
_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGALRM", "SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGPIPE", "SIGCHLD", "SIGVTALRM")
    if hasattr(signal, name)
)
_TIMERS = tuple(
    getattr(signal, name) for name in ("ITIMER_REAL", "ITIMER_VIRTUAL", "ITIMER_PROF") if hasattr(signal, name)
)


# unittest's classes the runner itself loads and runs every job's tests with (a class attribute a job's tests set,
# ``unittest.TestLoader.testMethodPrefix = "check"``, had every later job of the runner find no tests), and TestCase,
# whose attributes (``maxDiff``, ``longMessage``) decide what later jobs' assertions report.
_UNITTEST_CLASSES = (
    unittest.TestCase,
    unittest.TestLoader,
    unittest.TestSuite,
    unittest.TestResult,
    unittest.TextTestResult,
    unittest.TextTestRunner,
)
# Error handlers every interpreter starts with (codecs.register_error replaces one for the life of the process).
_CODEC_ERROR_HANDLERS = (
    "strict",
    "ignore",
    "replace",
    "xmlcharrefreplace",
    "backslashreplace",
    "namereplace",
    "surrogateescape",
    "surrogatepass",
)
# Modules whose attributes are restored by their own part of the baseline (or are this runner's and the tests').
_UNWATCHED_MODULES = frozenset({"sys", "builtins", "__main__", "hidden_tests"})


class WatchedModule(types.ModuleType):
    """A module whose attributes a job's code rebinds or deletes (``json.dumps = fake``, ``del string.capwords``,
    ``unittest.util._MAX_LENGTH = 5``) notes the value it had, for the job's end to put back. Round thirty-five: a
    standard module's attribute a job's tests replaced stayed replaced for every later job of the runner (any task's),
    where each task's tests, in one process, find the module as it loads. Only the attributes a job touches cost
    anything (one note each); a name the tests add is left (an earlier round's tests keep a model's object there to
    show it is dead in the next job), and so is what the module's own code rebinds through its globals."""

    def __setattr__(self, name: str, value: object) -> None:
        _note_rebinding(self, name)
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        _note_rebinding(self, name)
        super().__delattr__(name)


# (its name and module are the module type's, for what reads them outside the tests' type() and __class__)
WatchedModule.__name__ = WatchedModule.__qualname__ = "module"
WatchedModule.__module__ = "builtins"  # (and the tests' own type(m) and m.__class__ are types.ModuleType: trusted.py)
_REBOUND: dict[tuple[int, str], tuple[types.ModuleType, str, object]] = {}


def _note_rebinding(module: types.ModuleType, name: str) -> None:
    key = (id(module), name)
    if key not in _REBOUND:
        namespace = vars(module)
        if name in namespace:
            _REBOUND[key] = (module, name, namespace[name])


def _watch_modules(modules: dict) -> None:
    """Have each loaded module (of the plain module type) note what a job rebinds in it."""
    for name, module in list(modules.items()):
        if type(module) is types.ModuleType and name not in _UNWATCHED_MODULES and not name.startswith("rewardpipe"):
            try:
                module.__class__ = WatchedModule
            except TypeError:  # (a module that refuses: left unwatched)
                continue


def _restore_rebound() -> None:
    notes = list(_REBOUND.values())
    _REBOUND.clear()
    for module, name, value in notes:
        namespace = vars(module)
        if name not in namespace or namespace[name] is not value:
            namespace[name] = value


def _import_root(node: ast.expr) -> tuple[str, int] | None:
    """The name an attribute chain starts from and how many attributes it has (``json.JSONEncoder.x``: json, 2)."""
    depth = 0
    while isinstance(node, ast.Attribute):
        node, depth = node.value, depth + 1
    return (node.id, depth) if isinstance(node, ast.Name) else None


def class_changing_imports(tree: ast.Module) -> tuple[tuple[str, bool], ...]:
    """The standard modules the tests import, when they set or delete an attribute of a class they may have got from
    one: ``json.JSONEncoder.item_separator = ";"``, ``Counter.__missing__ = ...`` after ``from collections import
    Counter``, ``setattr(fractions.Fraction, ...)``. Empty when they do none (a module's own attribute, ``json.x = 1``,
    is :class:`WatchedModule`'s). Each with whether the tests import it at their top level (which runs at once, at
    load). Read once per test source; what it misses (an alias made at run time) is bounded by the runner's
    recycling."""
    top_level = {
        alias.name if isinstance(node, ast.Import) else str(node.module)
        for node in tree.body
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    modules: dict[str, str] = {}  # a name an import binds -> the module imported
    from_imported: set[str] = set()  # names bound by ``from module import name``
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                modules[alias.asname or alias.name.partition(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                modules[alias.asname or alias.name] = node.module
                from_imported.add(alias.asname or alias.name)
    if not modules:
        return ()
    changed = False
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            targets.append(node)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
        ):
            targets.append(ast.Attribute(node.args[0], "_", ast.Store()))
        for target in targets:
            root = _import_root(target)
            if root is not None and root[0] in modules and (root[1] >= 2 or root[0] in from_imported):
                changed = True
    if not changed:
        return ()
    standard = sorted({name for name in modules.values() if name.partition(".")[0] in sys.stdlib_module_names})
    return tuple((name, name in top_level) for name in standard)


class ClassAttributes:
    """The attributes of the standard library's classes a job's tests may change (:func:`class_changing_imports`),
    recorded before the tests load and put back when they are done. Round thirty-six: ``json.JSONEncoder.
    item_separator = ";"`` or ``Counter.__missing__ = ...`` at a task's module level stayed for every later job of the
    runner (any task's), whose right answers then failed, and the runner's own verdict was written with the changed
    encoder. The modules the tests import at their top level are imported first (the tests import them at once
    anyway), so a class of a module this job loads first is recorded too; one they import later and this runner had
    not loaded has the runner replaced (:meth:`restore` raises). Only jobs whose tests change such an attribute pay
    (a dictionary copy a class of those modules)."""

    def __init__(self, changes: tuple[tuple[str, bool], ...]):
        for name, top_level in changes:
            if top_level:
                try:
                    importlib.import_module(name)
                except Exception:  # noqa: BLE001 - (the tests' own import reports it, as in one process)
                    continue
        self.unrecorded = [name for name, _ in changes if name not in sys.modules]
        roots = tuple({name.partition(".")[0] for name, _ in changes})
        self.saved: dict[type, dict] = {}
        for name, module in list(sys.modules.items()):
            if name.partition(".")[0] in roots and isinstance(module, types.ModuleType):
                for value in list(vars(module).values()):
                    if isinstance(value, type) and value not in self.saved:
                        self.saved[value] = dict(vars(value))

    def restore(self) -> None:
        """Put back every recorded class whose namespace differs (a name the tests added to one is removed); raise if
        the tests loaded a module they name that was not recorded (its classes may be changed for good)."""
        for cls, saved in self.saved.items():
            try:
                same = vars(cls) == saved
            except Exception:  # noqa: BLE001 - a value of the tests' whose comparison raises: put back
                same = False
            if not same:
                _restore_namespace(
                    dict(vars(cls)),
                    saved,
                    lambda name, value, cls=cls: setattr(cls, name, value),
                    lambda name, cls=cls: delattr(cls, name),
                )
        loaded = [name for name in self.unrecorded if name in sys.modules]
        if loaded:
            raise RuntimeError(f"standard modules loaded and maybe changed by the tests: {', '.join(loaded)}")


# Standard modules whose state another part of the baseline puts back, or that hold the runner's own live state
# (threads, imports, processes, weak references, the environment): never put back by :class:`ModuleContents`.
_LIVE_STATE_MODULES = frozenset(
    {
        *_UNWATCHED_MODULES,
        "os",
        "posix",
        "abc",
        "_abc",
        "logging",
        "warnings",
        "threading",
        "_thread",
        "weakref",
        "_weakrefset",
        "gc",
        "atexit",
        "signal",
        "importlib",
        "asyncio",
        "concurrent",
        "multiprocessing",
        "subprocess",
        "selectors",
        "random",
        "faulthandler",
        "tracemalloc",
        "_io",
        "io",
        "queue",
        "_queue",
        "sched",
        "socket",
        "socketserver",
        "ssl",
        "contextvars",
    }
)
# Standard modules never imported ahead of the tests (importing them acts: a browser, a terminal, a banner).
_NEVER_IMPORTED_AHEAD = frozenset(
    {"this", "antigravity", "turtle", "turtledemo", "tkinter", "idlelib", "readline", "__hello__", "__phello__"}
)
_CONTENTS_DEPTH = 4  # module -> instance -> its attribute -> a tuple -> a dict (mimetypes' database)
_CONTENTS_BUDGET = 50_000  # items copied for one job at most (beyond: the rest is left, the runner recycled)


def named_standard_modules(tree: ast.Module) -> tuple[str, ...]:
    """Every standard module the tests import, anywhere in their source, and each module an attribute chain from
    one may name (``from unittest import mock``: ``unittest.mock``; ``json.decoder._CONSTANTS`` after ``import
    json``: ``json.decoder``). Only the names that are modules at run time count. Read once per test source."""
    bound: dict[str, str] = {}  # a name an import binds -> what it names
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    root = alias.name.partition(".")[0]
                    bound[root] = root
                    bound[alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            bound[node.module] = node.module
            for alias in node.names:
                if alias.name != "*":
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    names = set(bound.values())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts = []
            value: ast.expr = node
            while isinstance(value, ast.Attribute):
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                chain = bound[value.id]
                for part in reversed(parts[1:]):  # (the last attribute names what the module holds)
                    chain = f"{chain}.{part}"
                    names.add(chain)
    return tuple(sorted(name for name in names if name.partition(".")[0] in sys.stdlib_module_names))


def _signature(value: object) -> tuple:
    """What a container holds, by identity (its keys and values in order, its items): compared at C speed."""
    if isinstance(value, dict):
        return tuple(map(id, value)), tuple(map(id, value.values()))
    if isinstance(value, set):
        return (frozenset(map(id, value)),)
    return (tuple(map(id, value)),)  # type: ignore[call-overload]


def _copy_of(value: object) -> object:
    return value.copy() if isinstance(value, (dict, set)) else list(value)  # type: ignore[call-overload]


def _put_back(value: Any, copy: Any) -> None:
    value.clear()
    if isinstance(value, (dict, set)):
        value.update(copy)
    else:
        value.extend(copy)


_CONTAINERS = (dict, list, set, collections.deque, collections.OrderedDict, collections.defaultdict)
# A module's name -> (its namespace's signature, the containers and the instances' attribute dicts found in it):
# found again only when the module's names are bound to other objects.
_FOUND: dict[str, tuple[tuple, list, bool]] = {}
# A container's id -> (it, its copy, its signature): the copy is made again only when what it holds changed (a job
# that changes nothing has it put back as it was, so the next job's copy would be the same).
_COPIES: dict[int, tuple[object, object, tuple]] = {}
_COPIES_KEPT = 4096


def _settings_instance(kind: type) -> bool:
    """Whether an instance of ``kind`` a standard module holds is recorded: a standard class of a module whose
    objects hold no live state (:data:`_LIVE_STATE_MODULES`)."""
    root = str(getattr(kind, "__module__", "")).partition(".")[0]
    return root in sys.stdlib_module_names and root not in _LIVE_STATE_MODULES and root != "builtins"


_NOT_IMPORTED: set[str] = set()  # names the tests import that are no module here (bounded by the tests' sources)


def _may_be_module(name: str) -> bool:
    """Whether importing ``name`` ahead may find a module: not one of _NEVER_IMPORTED_AHEAD, nor a name inside a
    loaded module that is no package (``typing.List``)."""
    if name.partition(".")[0] in _NEVER_IMPORTED_AHEAD:
        return False
    parent = sys.modules.get(name.rpartition(".")[0]) if "." in name else None
    return parent is None or hasattr(parent, "__path__")


def _find_contents(module: types.ModuleType) -> tuple[list, bool]:
    """The containers a module holds (and the attribute dicts of the instances of its own classes it holds, and
    what those hold in turn, to _CONTENTS_DEPTH), and whether there were more than _CONTENTS_BUDGET items."""
    namespace = vars(module)
    signature = _signature(namespace)
    found = _FOUND.get(module.__name__)
    if found is not None and found[0] == signature:
        return found[1], found[2]
    own = module.__name__
    containers: list = []
    seen: set[int] = set()
    budget = [_CONTENTS_BUDGET]

    def walk(value: object, depth: int) -> None:
        if depth <= 0 or id(value) in seen:
            return
        kind = type(value)
        if kind in _CONTAINERS:
            seen.add(id(value))
            budget[0] -= len(value)  # type: ignore[arg-type]
            if budget[0] >= 0:
                containers.append(value)
                if kind is not set:
                    items: Any = value.values() if isinstance(value, dict) else value
                    for item in list(items):
                        walk(item, depth - 1)
        elif kind is tuple:
            seen.add(id(value))
            for item in value:  # type: ignore[attr-defined]
                walk(item, depth - 1)
        elif isinstance(value, type):
            if value.__module__ == own:  # a class of the module's own: the containers it holds (an enum's member map)
                seen.add(id(value))
                for item in list(vars(value).values()):
                    if type(item) in _CONTAINERS:
                        walk(item, depth - 1)
        elif _settings_instance(kind) and type(getattr(value, "__dict__", None)) is dict:
            # an instance of a standard class the module holds (reprlib.aRepr, calendar's TextCalendar,
            # mock.sentinel, json's default encoder): never one with live state (a lock, a queue, a logger)
            seen.add(id(value))
            containers.append(vars(value))
            for item in list(vars(value).values()):
                walk(item, depth - 1)

    for name, value in list(namespace.items()):
        if name != "__builtins__":  # (built-ins: Baseline's own part)
            walk(value, _CONTENTS_DEPTH)
    _FOUND[own] = (signature, containers, budget[0] < 0)
    return containers, budget[0] < 0


class ModuleContents:
    """What the standard modules the tests import hold in place, recorded before the tests load and put back when
    they are done. Round thirty-seven: state a task's tests changed *in place* lasted for every later job of the
    runner (any task's): ``copy._deepcopy_dispatch[list] = ...``, ``mimetypes.add_type``, ``copyreg.pickle``,
    ``keyword.kwlist.append``, ``http.client.responses[200] = ...``, ``reprlib.aRepr.maxlist = 1``,
    ``calendar.setfirstweekday(6)``: each failed a later task's right answer. Recorded: the globals of each named
    module (or loaded submodule of it) that its own code rebinds (a name the tests add is left, as
    :class:`WatchedModule` leaves it), the dicts, lists, sets and deques it holds, the attributes of the instances of
    its own classes it holds, and what those hold in turn (to :data:`_CONTENTS_DEPTH`): a shallow copy of each,
    compared by identity and put back in place. State kept in C (``csv``'s limit and dialects) has its own record;
    ABC registrations and codec search functions are noted as they are made (:class:`Registrations`). Where each
    container is is found once per module (again when its names change); a job copies and compares what its tests'
    modules hold (tens of microseconds for unittest's)."""

    def __init__(self, names: tuple[str, ...]):
        for name in names:
            if name not in sys.modules and name not in _NOT_IMPORTED and _may_be_module(name):
                try:  # (the tests import it at once, or in a test: imported ahead, it is recorded as it loads)
                    importlib.import_module(name)
                except Exception:  # noqa: BLE001 - (the tests' own import reports it; or a name, not a module)
                    _NOT_IMPORTED.add(name)  # (not tried again: ``from collections import Counter`` names one)
        modules = sys.modules
        self.modules = [
            modules[name]
            for name in names
            if name in modules
            and name.partition(".")[0] not in _LIVE_STATE_MODULES
            and isinstance(modules[name], types.ModuleType)
        ]
        self.namespaces = [(module, dict(vars(module)), _signature(vars(module))) for module in self.modules]
        self.copies: list[tuple[object, object, tuple]] = []
        self.overflowed = False
        seen: set[int] = set()
        for module in self.modules:
            containers, overflowed = _find_contents(module)
            self.overflowed = self.overflowed or overflowed
            for value in containers:
                if id(value) not in seen:
                    seen.add(id(value))
                    signature = _signature(value)
                    kept = _COPIES.get(id(value))
                    if kept is None or kept[0] is not value or kept[2] != signature:
                        if len(_COPIES) >= _COPIES_KEPT:  # (containers a module replaced: their copies go)
                            _COPIES.clear()
                        kept = _COPIES[id(value)] = (value, _copy_of(value), signature)
                    self.copies.append(kept)
        self.c_state = {name: get() for name, (get, _) in _C_STATE.items() if name in sys.modules}

    def restore(self) -> None:
        """Put back every recorded global, container and instance that differs; raise if some were too many to
        record."""
        restored = False
        for module, saved, signature in self.namespaces:
            namespace = vars(module)
            if _signature(namespace) != signature:
                for name, value in saved.items():
                    if namespace.get(name, saved) is not value:
                        namespace[name] = value
                        restored = True
        for value, copy, signature in self.copies:
            if _signature(value) != signature:
                _put_back(value, copy)
                restored = True
        for name, state in self.c_state.items():
            get, put = _C_STATE[name]
            if get() != state:
                put(state)
        if restored and any(module.__name__.startswith("encodings") for module in self.modules):
            flush_codec_caches()  # (a lookup cached an alias the tests added)
        if self.overflowed:
            raise RuntimeError("standard modules holding more than the runner records for one job")


def _csv_state() -> tuple:
    import csv

    return csv.field_size_limit(), {name: csv.get_dialect(name) for name in csv.list_dialects()}


def _put_csv_state(state: tuple) -> None:
    import csv

    limit, dialects = state
    csv.field_size_limit(limit)
    for name in csv.list_dialects():
        if name not in dialects:
            csv.unregister_dialect(name)
    for name, dialect in dialects.items():
        csv.register_dialect(name, dialect)


# State a standard module keeps in C, which no container records: how to read it and put it back, by module.
_C_STATE = {"_csv": (_csv_state, _put_csv_state)}


def flush_codec_caches() -> None:
    """Empty the interpreter's codec lookup cache (unregistering a search function does; there is no other way)."""
    encodings = sys.modules.get("encodings")
    if encodings is not None and isinstance(getattr(encodings, "_cache", None), dict):
        encodings._cache.clear()

    def nothing(_name: str) -> None:
        return None

    codecs.register(nothing)
    codecs.unregister(nothing)


class Registrations:
    """ABC registrations and codec search functions a job's tests make, noted as they are made and undone when the
    job ends. Round thirty-seven: ``collections.abc.Sequence.register(dict)`` or ``codecs.register(search)`` lasted
    for every later job of the runner (both live in C, out of any module's reach). What a standard module registers
    as it is first imported is its own (``numbers`` registers ``int`` as ``Integral``) and stays: the runner's
    wrappers do not note a call made while a module is being imported."""

    def __init__(self) -> None:
        self.abc: dict[int, tuple[weakref.ref, list[type]]] = {}
        self.codecs: list[object] = []

    def note_abc(self, cls: type) -> None:
        if id(cls) not in self.abc:
            registry = _abc._get_dump(cls)[0]
            alive = [ref() for ref in registry]
            self.abc[id(cls)] = (weakref.ref(cls), [sub for sub in alive if sub is not None])

    def note_codec_search(self, function: object) -> None:
        self.codecs.append(function)

    def restore(self) -> None:
        noted, self.abc = self.abc, {}
        for ref, subclasses in noted.values():
            cls = ref()
            if cls is None:  # (the tests' own ABC, gone with them)
                continue
            _abc._reset_registry(cls)
            for subclass in subclasses:
                _abc._abc_register(cls, subclass)
            for ancestor in cls.__mro__:  # (each caches what it found a subclass through cls's registry)
                if isinstance(ancestor, abc.ABCMeta):
                    _abc._reset_caches(ancestor)
        functions, self.codecs = self.codecs, []
        for function in functions:
            codecs.unregister(function)  # type: ignore[arg-type]  # (it empties the lookup cache too)


# The attributes of a function that CPython audits when set or deleted ("object.__setattr__", "object.__delattr__").
_AUDITED_FUNCTION_ATTRIBUTES = frozenset({"__defaults__", "__kwdefaults__", "__code__"})
_FUNCTIONS_CHANGED: dict[tuple[int, str], tuple[types.FunctionType, str, object]] = {}


def note_function_change(args: tuple, loaded: dict) -> None:
    """From the audit event of setting or deleting a function's defaults or code (``textwrap.fill.__defaults__ =
    (5,)``, ``json.dumps.__kwdefaults__ = ...``): note the value it had, for the job's end to put back. Round
    thirty-six: a standard function's defaults a task's tests set stayed so for every later job of the runner (any
    task's). Only a function of a module ``loaded`` before the job began: the tests' own are theirs to change (their
    module ends with the job), so are those made on the fly (a namedtuple's ``__new__`` gets its defaults so), and a
    module loading during the job sets its own functions' (asyncio's ``@types.coroutine`` replaces a ``__code__`` as
    it loads: put back, every later ``await asyncio.sleep(0)`` failed)."""
    if len(args) < 2 or type(args[0]) is not types.FunctionType or args[1] not in _AUDITED_FUNCTION_ATTRIBUTES:
        return
    function, name = args[0], args[1]
    key = (id(function), name)
    if key not in _FUNCTIONS_CHANGED and function.__module__ in loaded:
        _FUNCTIONS_CHANGED[key] = (function, name, getattr(function, name))


def _restore_functions() -> None:
    notes = list(_FUNCTIONS_CHANGED.values())
    for function, name, value in notes:
        if getattr(function, name) is not value:
            setattr(function, name, value)
    _FUNCTIONS_CHANGED.clear()  # (after: putting one back is an audited change too)


def _is_imported(module: object) -> bool:
    """Whether a module in sys.modules came from an import (a finder's spec) rather than a test's hand."""
    return isinstance(module, types.ModuleType) and getattr(module, "__spec__", None) is not None


DESCRIPTORS_WATCHED = 64  # descriptor numbers compared after each job (a job's own four are closed by then)


def _open_descriptors() -> frozenset[int]:
    """The descriptors open among the first DESCRIPTORS_WATCHED numbers (one fstat each: the runner has no /proc).
    A descriptor a job leaves open takes the lowest number free, which is among them unless the job holds more than
    about sixty at once and closes the lower ones first."""
    found = set()
    for fd in range(DESCRIPTORS_WATCHED):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.add(fd)
    return frozenset(found)


# Audit events by which code creates a path: its new name is the argument at this index (``open`` with O_CREAT only).
CREATING_EVENTS = {"open": 0, "os.mkdir": 0, "os.rename": 1, "os.replace": 1, "os.symlink": 1, "os.link": 1}
MAX_CREATED_PATHS = 4096  # paths one job's tests create that are noted for removal (beyond: the runner is replaced)


class CreatedPaths:
    """Files and directories a job's tests create outside the runner's own directories (``/tmp/out.json``, a
    directory of fixtures at an absolute path), removed when the job ends. Round thirty-five: the runner's own
    directories were emptied after every job, but a path the tests wrote elsewhere (the fork server's ``/tmp``, the
    host's on Lambda) outlived the job: the next job's tests (any task's) found it, and an ``os.mkdir`` of the same
    name failed the next rollout's right answer; where the tests wrote the model's answer there, the next job read
    it. Noted from the audit events that create a path (a path that existed before is not the job's, and is left);
    each costs one ``lstat`` of a path the tests create, nothing for any other event."""

    def __init__(self, own: tuple[str, ...]):
        self.own = tuple(os.path.join(path, "") for path in own)
        self.paths: list[str] = []
        self.overflowed = False
        self.active = False

    def note(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        if event == "open" and not (len(args) > 2 and type(args[2]) is int and args[2] & os.O_CREAT):
            return
        try:
            path = os.path.abspath(os.fsdecode(args[CREATING_EVENTS[event]]))
        except (TypeError, ValueError, IndexError):  # (a descriptor, a path relative to a dir_fd: not a name here)
            return
        if path.startswith(self.own) or os.path.lexists(path):
            return
        if len(self.paths) >= MAX_CREATED_PATHS:
            self.overflowed = True
            return
        self.paths.append(path)

    def remove(self) -> str | None:
        """Remove what the job created (newest first); what could not be, for the runner's reply."""
        from . import layers

        paths, self.paths = self.paths, []
        overflowed, self.overflowed = self.overflowed, False
        left = [path for path in reversed(paths) if os.path.lexists(path) and not layers.remove_tree(path)]
        if left or overflowed:
            return "files its tests created outside its directories"
        return None


def _event_loop_policy() -> object:
    """asyncio's event loop policy as set (None until asyncio makes its default one, or when asyncio is not loaded)."""
    events = sys.modules.get("asyncio.events")
    return None if events is None else vars(events).get("_event_loop_policy")


def _logger_state(logger: logging.Logger) -> tuple:
    return (logger.level, logger.disabled, logger.propagate, tuple(logger.handlers), tuple(logger.filters))


def _set_logger_state(logger: logging.Logger, state: tuple) -> None:
    logger.level, logger.disabled, logger.propagate = state[0], state[1], state[2]
    logger.handlers[:] = state[3]
    logger.filters[:] = state[4]


def _logging_factories() -> tuple:
    """The class of new loggers (logging's, and the manager's own, which getLogger prefers) and the record factory."""
    return (logging.getLoggerClass(), logging.getLogRecordFactory(), logging.root.manager.loggerClass)


_NEW_LOGGER = (logging.NOTSET, False, True, (), ())  # a logger first made by one job's tests, as logging makes it


def partial_setattr(target: object):
    return lambda name, value: setattr(target, name, value)


def partial_delattr(target: object):
    return lambda name: delattr(target, name)


def _restore_namespace(current: dict, saved: dict, set_item, delete_item) -> None:
    for name in [name for name in current if name not in saved]:
        delete_item(name)
    for name, value in saved.items():
        if name not in current or current[name] is not value:
            set_item(name, value)


_MONITORING_TOOLS = range(6)  # sys.monitoring's tool ids (3.12+)


def _monitoring_tools() -> tuple:
    """Which ``sys.monitoring`` tool ids are taken, by whom (3.12+; the Lambda runtime is 3.13)."""
    monitoring = getattr(sys, "monitoring", None)
    return () if monitoring is None else tuple(monitoring.get_tool(tool) for tool in _MONITORING_TOOLS)


def _free_monitoring_tools(baseline: tuple) -> None:
    """Free each tool id a job's tests took: its events off and its callbacks gone first (3.13's free_tool_id does
    neither). Round thirty-seven: a tool the tests registered, and its PY_START callback, ran in every later job."""
    monitoring = sys.monitoring  # type: ignore[attr-defined]  # (3.12+: _monitoring_tools found it)
    for tool in _MONITORING_TOOLS:
        if monitoring.get_tool(tool) is not None and baseline[tool] is None:
            monitoring.set_events(tool, 0)
            for name in dir(monitoring.events):
                event = getattr(monitoring.events, name)
                if name.isupper() and isinstance(event, int) and event and not event & (event - 1):
                    monitoring.register_callback(tool, event, None)
            monitoring.free_tool_id(tool)


# Whether a job's tests called gc.freeze() (noted by the wrapper note_gc_freeze puts in the runner's gc module). Asking
# the collector instead (gc.get_freeze_count() before and after each job) walked every frozen object, the fork
# server's whole heap the runner starts with, twice a job: ~10 % of a HumanEval job's CPU through the CLI.
GC_FROZEN_BY_THE_TESTS = [False]


def note_gc_freeze() -> None:
    """Have ``gc.freeze()`` calls noted in :data:`GC_FROZEN_BY_THE_TESTS` (the runner's own process only)."""
    freeze = gc.freeze
    if getattr(freeze, "_rewardpipe_noted", False):
        return

    @functools.wraps(freeze)
    def noted_freeze() -> None:
        GC_FROZEN_BY_THE_TESTS[0] = True
        freeze()

    noted_freeze._rewardpipe_noted = True  # type: ignore[attr-defined]
    gc.freeze = noted_freeze


def _stream_settings(stream: object) -> dict | None:
    """What ``reconfigure`` sets on a text stream (None for a stream that has no such settings)."""
    if not isinstance(stream, io.TextIOWrapper):
        return None
    return {
        "encoding": stream.encoding,
        "errors": stream.errors,
        "line_buffering": stream.line_buffering,
        "write_through": stream.write_through,
    }


def _environ_data() -> dict:
    """os.environ's own table (bytes to bytes): compared as it is, without decoding every variable each job."""
    data = getattr(os.environ, "_data", None)
    return data if isinstance(data, dict) else dict(os.environ)


def _umask() -> int:
    value = os.umask(0o022)
    os.umask(value)
    return value


def _decimal_settings(context: decimal.Context) -> tuple:
    """What of a decimal context decides results (not its flags, which arithmetic sets)."""
    traps = tuple(sorted(signal.__name__ for signal, on in context.traps.items() if on))
    return (context.prec, context.rounding, context.Emin, context.Emax, context.capitals, context.clamp, traps)


class Baseline:
    """The runner's interpreter-wide settings as its first job finds them."""

    def __init__(self) -> None:
        self.builtins = dict(vars(builtins))
        self.testcase = dict(vars(unittest.TestCase))
        self.unittest_classes = {cls: dict(vars(cls)) for cls in _UNITTEST_CLASSES}
        self.default_loader = dict(vars(unittest.defaultTestLoader))
        self.modules = dict(sys.modules)
        _watch_modules(self.modules)
        self.module_count = len(sys.modules)
        self.codec_errors = {name: codecs.lookup_error(name) for name in _CODEC_ERROR_HANDLERS}
        self.faulthandler = faulthandler.is_enabled()
        self.threads = threading.active_count()
        self.descriptors = _open_descriptors()
        self.exit_callbacks = atexit._ncallbacks()
        self.environ = dict(os.environ)
        self.environ_data = dict(_environ_data())
        try:
            self.cwd: str | None = os.getcwd()
        except OSError:
            self.cwd = None
        self.path = list(sys.path)
        self.meta_path = list(sys.meta_path)  # the runner's guard against importing the model's module among them
        self.streams = (sys.stdin, sys.stdout, sys.stderr)
        self.hooks = (sys.displayhook, sys.excepthook, sys.breakpointhook, sys.unraisablehook)
        self.import_settings = (sys.dont_write_bytecode, list(sys.path_hooks))
        self.coroutine_settings = (sys.get_asyncgen_hooks(), sys.get_coroutine_origin_tracking_depth())
        self.trace = (sys.gettrace(), sys.getprofile())
        self.limits = (sys.getrecursionlimit(), sys.get_int_max_str_digits(), sys.getswitchinterval())
        self.decimal = decimal.getcontext().copy()
        self.decimal_settings = _decimal_settings(self.decimal)
        # decimal.DefaultContext, which every new context (``decimal.Context()``) and thread starts from, and the
        # stack size of new threads: interpreter-wide defaults a call or an attribute sets (round thirty-six)
        self.default_decimal = decimal.DefaultContext.copy()
        self.default_decimal_settings = _decimal_settings(decimal.DefaultContext)
        self.thread_stack_size = threading.stack_size()
        self.warnings = (list(warnings.filters), warnings.showwarning, warnings.formatwarning)
        self.logging_disable = logging.root.manager.disable
        # What logging's own setters change inside the module (setLoggerClass, setLogRecordFactory, addLevelName),
        # which no attribute note sees (round thirty-six: each lasted for every later job of the runner).
        self.logging_factories = _logging_factories()
        self.level_names = (dict(logging._levelToName), dict(logging._nameToLevel))
        self.root_logger = _logger_state(logging.root)
        self.loggers = {
            name: _logger_state(logger)
            for name, logger in logging.root.manager.loggerDict.items()
            if isinstance(logger, logging.Logger)
        }
        self.socket_timeout = socket.getdefaulttimeout()
        self.locale = locale.setlocale(locale.LC_ALL)
        self.umask = _umask()
        self.signals = {number: signal.getsignal(number) for number in _SIGNALS}
        self.signal_mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())
        self.wakeup_fd = signal.set_wakeup_fd(-1)  # (read by setting: set back at once)
        if self.wakeup_fd != -1:
            signal.set_wakeup_fd(self.wakeup_fd)
        self.gc_callbacks = list(gc.callbacks)
        self.event_loop_policy = _event_loop_policy()
        self.gc = (gc.isenabled(), gc.get_threshold())
        # threading's trace and profile functions for new threads, and the standard streams' configuration
        # (``sys.stdout.reconfigure(encoding="ascii")`` is in place: the stream object is the same)
        self.thread_hooks = (getattr(threading, "_trace_hook", None), getattr(threading, "_profile_hook", None))
        self.stream_settings = [_stream_settings(stream) for stream in self.streams]
        self.monitoring_tools = _monitoring_tools()
        self.classes: ClassAttributes | None = None  # this job's, where its tests change a standard class
        self.contents: ModuleContents | None = None  # this job's: what the standard modules it imports hold
        self.registrations = Registrations()  # ABC registrations and codec search functions this job made
        # sys's and __main__'s names (both unwatched: a name added to either lasted until the runner was recycled)
        self.sys_names = dict(vars(sys))
        main = sys.modules.get("__main__")
        self.main = (main, dict(vars(main))) if isinstance(main, types.ModuleType) else None
        self.path_importer_cache = dict(sys.path_importer_cache)
        self.audit_hook_added = False  # set from the runner's audit hook (sys.addaudithook's own event)

    def unseen_change(self) -> str | None:
        """The first setting the current job's tests changed that the model's code, in its own process, would read
        in one process (round thirty-two; every job starts from this baseline, :meth:`restore`), else None."""
        if sys.stdin is not self.streams[0]:
            return "standard input"
        if vars(builtins) != self.builtins:
            return "built-ins"
        if _environ_data() != self.environ_data:
            return "environment"
        try:
            moved = self.cwd is not None and os.getcwd() != self.cwd
        except OSError:
            moved = True
        if moved:
            return "working directory"
        if (sys.getrecursionlimit(), sys.get_int_max_str_digits()) != self.limits[:2]:
            return "recursion limit or integer-digit limit"
        if _decimal_settings(decimal.getcontext()) != self.decimal_settings:
            return "decimal context"
        if socket.getdefaulttimeout() != self.socket_timeout or locale.setlocale(locale.LC_ALL) != self.locale:
            return "socket timeout or locale"
        return None

    def restore(self) -> list[str]:
        """Put every recorded setting back; the names of those that could not be (then the runner is replaced)."""
        failed = []
        for name, part in (
            ("builtins", self._builtins),
            ("unittest.TestCase", self._testcase),
            ("unittest", self._unittest),
            ("modules", self._modules),
            ("standard classes", self._classes),
            ("standard modules' contents", self._contents),
            ("registrations", self.registrations.restore),
            ("sys and __main__", self._namespaces),
            ("function defaults", _restore_functions),
            ("environment", self._environment),
            ("interpreter", self._interpreter),
            ("decimal", self._decimal),
            ("warnings", self._warnings),
            ("logging", self._logging),
            ("process", self._process),
            ("signals", self._signals),
            ("random", self._random),
            ("codecs", self._codecs),
            ("faulthandler", self._faulthandler),
        ):
            try:
                part()
            except Exception:  # noqa: BLE001 - whatever the tests left, the runner must still answer
                failed.append(name)
        return failed

    def unrestorable(self) -> list[str]:
        """What a job left that cannot be taken back in this process (the runner is replaced before the next job),
        asked once what the job left unreferenced has been collected (a file object the tests' module held is closed):
        a thread still running (it would go on acting during later jobs), a descriptor left open (one job's open file
        for the next job's tests to read; and, job after job, the runner's descriptor limit), an exit callback (the
        tests' code, run when the runner ends), an audit hook (run on every later job's events).
        DESCRIPTORS_WATCHED fstat calls a job."""
        left = []
        if threading.active_count() > self.threads:
            left.append("a thread its tests started")
        if _open_descriptors() - self.descriptors:
            left.append("a descriptor its tests left open")
        if atexit._ncallbacks() != self.exit_callbacks:
            left.append("an exit callback its tests registered")
        if GC_FROZEN_BY_THE_TESTS[0]:  # (gc.freeze: what it froze cannot be told from the rest)
            GC_FROZEN_BY_THE_TESTS[0] = False
            left.append("objects its tests froze from the collector")
        if self.audit_hook_added:  # (round thirty-six: it ran during every later job; no hook can be taken out)
            self.audit_hook_added = False
            left.append("an audit hook its tests added")
        return left

    def _builtins(self) -> None:
        current = vars(builtins)
        if current != self.builtins:
            _restore_namespace(current, self.builtins, current.__setitem__, current.__delitem__)

    def _testcase(self) -> None:
        current = vars(unittest.TestCase)
        if current != self.testcase:
            _restore_namespace(
                dict(current),
                self.testcase,
                lambda name, value: setattr(unittest.TestCase, name, value),
                lambda name: delattr(unittest.TestCase, name),
            )

    def _unittest(self) -> None:
        for cls, saved in self.unittest_classes.items():
            if cls is not unittest.TestCase and vars(cls) != saved:
                _restore_namespace(
                    dict(vars(cls)),
                    saved,
                    lambda name, value, cls=cls: setattr(cls, name, value),
                    lambda name, cls=cls: delattr(cls, name),
                )
        loader = vars(unittest.defaultTestLoader)
        if loader != self.default_loader:
            _restore_namespace(dict(loader), self.default_loader, loader.__setitem__, loader.__delitem__)

    def _modules(self) -> None:
        """Module attributes a job rebound, put back (:class:`WatchedModule`); sys.modules as the runner had it
        (an entry a job replaced, restored; one it put there by hand, ``sys.modules["helpers"] = fake``, removed),
        keeping what the job imported (importing again each job would cost its time, and a fresh interpreter would
        import the same), with those modules watched from now on. About as many dictionary look-ups as modules
        loaded, each job."""
        _restore_rebound()
        modules = sys.modules
        for name, module in self.modules.items():
            if modules.get(name) is not module:
                modules[name] = module
        if len(modules) != self.module_count:
            added = {name: module for name, module in modules.items() if name not in self.modules}
            known = {id(module) for module in self.modules.values()}
            for name, module in list(added.items()):
                # put there by hand: a module no import made, or one the runner had, under a second name
                # (``sys.modules["helpers"] = json``, which a later job's ``import helpers`` found)
                if not _is_imported(module) or (id(module) in known and module.__spec__.name != name):  # type: ignore[union-attr]  # (_is_imported: it has a spec)
                    del modules[name]
                    added.pop(name)
            self.modules.update(added)
            _watch_modules(added)
            self.module_count = len(modules)

    def before_the_verdict(self) -> None:
        """Put back what the runner's own writing of the verdict uses (json's module and classes: tests that set
        ``json.JSONEncoder.item_separator`` garbled their own job's verdict, an ``error``). Done again, and any
        failure reported, by :meth:`restore`."""
        _restore_rebound()
        _restore_functions()
        if self.classes is not None:
            self.classes.restore()
        if self.contents is not None:
            self.contents.restore()

    def _classes(self) -> None:
        classes, self.classes = self.classes, None
        if classes is not None:
            classes.restore()

    def _contents(self) -> None:
        contents, self.contents = self.contents, None
        if contents is not None:
            contents.restore()

    def _namespaces(self) -> None:
        """sys's names and __main__'s as the runner started (a name the tests added to either removed), and
        sys.path_importer_cache (an entry the tests set: ``None`` hid a directory from every later job's imports)."""
        # (compared by identity: a value the tests bound there, the model's stub among them, is never asked ==)
        current = vars(sys)
        if _signature(current) != _signature(self.sys_names):
            _restore_namespace(dict(current), self.sys_names, partial_setattr(sys), partial_delattr(sys))
        if self.main is not None:
            main, saved = self.main
            if _signature(vars(main)) != _signature(saved):
                _restore_namespace(dict(vars(main)), saved, partial_setattr(main), partial_delattr(main))
        cache = sys.path_importer_cache
        if _signature(cache) != _signature(self.path_importer_cache):
            _restore_namespace(dict(cache), self.path_importer_cache, cache.__setitem__, cache.__delitem__)

    def _codecs(self) -> None:
        for name, handler in self.codec_errors.items():
            if codecs.lookup_error(name) is not handler:
                codecs.register_error(name, handler)

    def _faulthandler(self) -> None:
        faulthandler.cancel_dump_traceback_later()
        for number in _SIGNALS:  # (faulthandler.register: a handler in C, which signal.getsignal does not show)
            faulthandler.unregister(number)
        if faulthandler.is_enabled() != self.faulthandler:
            faulthandler.disable()

    def _environment(self) -> None:
        if _environ_data() != self.environ_data:
            timezone = os.environ.get("TZ")
            os.environ.clear()
            os.environ.update(self.environ)
            if timezone != self.environ.get("TZ"):
                time.tzset()
        if self.cwd is not None:
            try:
                moved = os.getcwd() != self.cwd
            except OSError:  # its directory was removed under it
                moved = True
            if moved:
                os.chdir(self.cwd)

    def _interpreter(self) -> None:
        if sys.path != self.path:
            sys.path[:] = self.path
        if sys.meta_path != self.meta_path:
            sys.meta_path[:] = self.meta_path
        sys.stdin, sys.stdout, sys.stderr = self.streams
        for stream, settings in zip(self.streams, self.stream_settings, strict=True):
            if isinstance(stream, io.TextIOWrapper) and _stream_settings(stream) != settings:
                stream.reconfigure(**settings)  # type: ignore[arg-type]  # (its own settings, read back)
        if _monitoring_tools() != self.monitoring_tools:
            _free_monitoring_tools(self.monitoring_tools)
        if (getattr(threading, "_trace_hook", None), getattr(threading, "_profile_hook", None)) != self.thread_hooks:
            threading.settrace(self.thread_hooks[0])  # (None: none, as it started)
            threading.setprofile(self.thread_hooks[1])
        sys.displayhook, sys.excepthook, sys.breakpointhook, sys.unraisablehook = self.hooks
        dont_write_bytecode, path_hooks = self.import_settings
        sys.dont_write_bytecode = dont_write_bytecode
        if sys.path_hooks != path_hooks:
            sys.path_hooks[:] = path_hooks
            sys.path_importer_cache.clear()
        asyncgen_hooks, origin_depth = self.coroutine_settings
        if sys.get_asyncgen_hooks() != asyncgen_hooks:
            sys.set_asyncgen_hooks(*asyncgen_hooks)
        if sys.get_coroutine_origin_tracking_depth() != origin_depth:
            sys.set_coroutine_origin_tracking_depth(origin_depth)
        if (sys.gettrace(), sys.getprofile()) != self.trace:
            sys.settrace(self.trace[0])
            sys.setprofile(self.trace[1])
        recursion, digits, interval = self.limits
        if sys.getrecursionlimit() != recursion:
            sys.setrecursionlimit(recursion)
        if sys.get_int_max_str_digits() != digits:
            sys.set_int_max_str_digits(digits)
        if sys.getswitchinterval() != interval:
            sys.setswitchinterval(interval)

    def _decimal(self) -> None:
        decimal.setcontext(self.decimal.copy())
        default = decimal.DefaultContext
        if _decimal_settings(default) != self.default_decimal_settings:
            saved = self.default_decimal
            default.prec, default.rounding, default.Emin, default.Emax = (
                saved.prec,
                saved.rounding,
                saved.Emin,
                saved.Emax,
            )
            default.capitals, default.clamp = saved.capitals, saved.clamp
            for condition, on in saved.traps.items():
                default.traps[condition] = on

    def _warnings(self) -> None:
        filters, show, format_warning = self.warnings
        if warnings.filters != filters:
            warnings.filters[:] = filters  # type: ignore[index]  # a list at run time
            warnings._filters_mutated()  # type: ignore[attr-defined]  # the registries' cache key, as resetwarnings does
        warnings.showwarning, warnings.formatwarning = show, format_warning

    def _logging(self) -> None:
        manager = logging.root.manager
        changed = False
        if _logging_factories() != self.logging_factories:
            logger_class, record_factory, manager.loggerClass = self.logging_factories
            logging.setLoggerClass(logger_class)
            logging.setLogRecordFactory(record_factory)
        to_name, to_level = self.level_names
        if logging._levelToName != to_name or logging._nameToLevel != to_level:
            logging._levelToName.clear()
            logging._levelToName.update(to_name)
            logging._nameToLevel.clear()
            logging._nameToLevel.update(to_level)
        if manager.disable != self.logging_disable:
            manager.disable = self.logging_disable
            changed = True
        if _logger_state(logging.root) != self.root_logger:
            _set_logger_state(logging.root, self.root_logger)
            changed = True
        for name, logger in list(manager.loggerDict.items()):
            if isinstance(logger, logging.Logger):
                state = self.loggers.get(name, _NEW_LOGGER)
                if _logger_state(logger) != state:
                    _set_logger_state(logger, state)
                    changed = True
        if changed:
            manager._clear_cache()  # type: ignore[attr-defined]  # each logger caches isEnabledFor's answers

    def _process(self) -> None:
        if socket.getdefaulttimeout() != self.socket_timeout:
            socket.setdefaulttimeout(self.socket_timeout)
        if locale.setlocale(locale.LC_ALL) != self.locale:
            locale.setlocale(locale.LC_ALL, self.locale)
        os.umask(self.umask)
        enabled, threshold = self.gc
        if gc.isenabled() != enabled:
            (gc.enable if enabled else gc.disable)()
        if gc.get_threshold() != threshold:
            gc.set_threshold(*threshold)
        if threading.stack_size() != self.thread_stack_size:
            threading.stack_size(self.thread_stack_size)
        if gc.callbacks != self.gc_callbacks:
            gc.callbacks[:] = self.gc_callbacks
        events = sys.modules.get("asyncio.events")
        if events is not None and _event_loop_policy() is not self.event_loop_policy:
            # (set_event_loop_policy binds a global of asyncio.events: put back the same way; None is a fresh
            # interpreter's, which asyncio replaces by its default policy when first asked)
            vars(events)["_event_loop_policy"] = self.event_loop_policy

    @staticmethod
    def _random() -> None:
        """Reseed the module-level generator from the operating system, as a fresh interpreter seeds it. Round
        thirty-four: it went on from where the previous job's tests left it, so that job's seed and its count of
        draws (which its model's answer could set) chose every unseeded "random" input of the next job's tests.
        numpy's module-level generator too, where the tests loaded it (its seeding from the system then, each job)."""
        random.seed()
        numpy_random = sys.modules.get("numpy.random")
        if numpy_random is not None and callable(getattr(numpy_random, "seed", None)):
            numpy_random.seed()

    def _signals(self) -> None:
        for timer in _TIMERS:  # no timer of a job's tests may go off during a later job
            signal.setitimer(timer, 0)
        # (a signal the tests blocked stays blocked for the thread: a later job's SIGALRM timeout would never fire)
        if signal.pthread_sigmask(signal.SIG_BLOCK, ()) != self.signal_mask:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.signal_mask)
        for number, handler in self.signals.items():
            if signal.getsignal(number) is not handler and handler is not None:
                signal.signal(number, handler)
        # a wakeup descriptor the tests set: at every later signal the interpreter wrote a byte to that number,
        # which a later job's own descriptors (its channel to the model's process) take once the tests close it
        if signal.set_wakeup_fd(-1) != -1 and self.wakeup_fd != -1:
            signal.set_wakeup_fd(self.wakeup_fd)  # (the runner's own, were it to have one)
