"""A lint of hidden-test shapes, for ``rewardpipe doctor``: what makes a test weaker than it reads, and
what the split-trust sandbox cannot run (so every rollout of the task would come back ``error``).

Only the AST of the tests is read; nothing is executed.
"""

from __future__ import annotations

import ast
import builtins
import sys
from collections.abc import Iterable, Iterator

from rewardpipe.execution.runtime.harness import is_test_method, parse_python

# unittest assertions that check one value; their second positional argument is the failure message.
_ONE_OPERAND_ASSERTIONS = {
    "assertTrue",
    "assertFalse",
    "assertIsNone",
    "assertIsNotNone",
    "assert_",
    "failUnless",
    "failIf",
}
_MODEL_MODULE = "solution"  # the name the model's code has in the sandbox (runtime/untrusted.py)


def _is_text(node: ast.AST) -> bool:
    """A string, an f-string, or text built from them: what a failure message looks like."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _is_text(node.left) or _is_text(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"str", "repr", "format"}:
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return True
    return isinstance(node, ast.Name)  # a variable may well hold a message: not flagged


def _name(node: ast.AST) -> str:
    func = node.func if isinstance(node, ast.Call) else node
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def assertion_warnings(tree: ast.Module) -> list[str]:
    """``assertTrue(x, y)`` and ``assert x, y`` check only that ``x`` is truthy (``y`` is the message);
    ``assert (x, y)`` is always true."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and _name(node) in _ONE_OPERAND_ASSERTIONS
            and len(node.args) >= 2
            and not _is_text(node.args[1])
        ):
            found.append(
                f"tests line {node.lineno}: {_name(node)}(x, y) checks only that x is "
                f"{'falsy' if _name(node) in {'assertFalse', 'failIf'} else 'truthy'} (y is the failure "
                "message); did you mean assertEqual(x, y)?"
            )
        elif isinstance(node, ast.Assert):
            if isinstance(node.test, ast.Tuple) and node.test.elts:
                found.append(
                    f"tests line {node.lineno}: 'assert (x, y)' asserts a non-empty tuple, which is "
                    "always true; write 'assert x, y' or 'assert x == y'"
                )
            elif node.msg is not None and not _is_text(node.msg):
                found.append(
                    f"tests line {node.lineno}: 'assert x, y' checks only that x is truthy (y is the "
                    "failure message); did you mean 'assert x == y'?"
                )
    return found


def _reads_sys_modules(node: ast.expr, aliases: dict[str, str]) -> bool:
    """``node`` is ``sys.modules.get`` (or ``.pop``) or ``sys.modules[...]``, however the tests imported ``sys`` or
    ``modules``."""
    return isinstance(node, (ast.Attribute, ast.Subscript)) and _matches(
        _resolved(_dotted(node.value), aliases), "sys.modules"
    )


# Round seventeen: the model's module read from ``sys.modules`` is a KeyError (or None) in the trusted runner, which
# has no such module, so a right answer fails silently where an import of it is a loud error.
_SYS_MODULES_FINDING = (
    f"tests line {{line}}: the tests read the model's module '{_MODEL_MODULE}' from sys.modules, which the split "
    "sandbox's trusted process does not hold (the model's code runs in another process): a right answer fails "
    "silently; test through the entry point, or set trust_mode='inprocess' (weaker)"
)


def split_trust_findings(tree: ast.Module) -> list[str]:
    """Shapes the split sandbox reports as ``error`` (the task needs ``trust_mode="inprocess"``): tests
    that import the model's module or patch a name in it, whose code is in another process."""
    found = []
    aliases = _import_aliases(tree)
    for node in ast.walk(tree):
        reaches = False
        if isinstance(node, ast.Import):
            reaches = any(alias.name.split(".")[0] == _MODEL_MODULE for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            reaches = (node.module or "").split(".")[0] == _MODEL_MODULE and not node.level
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            target = node.args[0].value
            reaches = _name(node) in {"patch", "import_module", "__import__"} and target.split(".")[0] == _MODEL_MODULE
            if _name(node) in {"get", "pop"} and _reads_sys_modules(node.func, aliases) and target == _MODEL_MODULE:
                found.append(_SYS_MODULES_FINDING.format(line=node.lineno))
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and node.slice.value == _MODEL_MODULE
            and _reads_sys_modules(node, aliases)
        ):
            found.append(_SYS_MODULES_FINDING.format(line=node.lineno))
        if reaches and isinstance(node, (ast.stmt, ast.expr)):  # (only imports and calls reach it)
            found.append(
                f"tests line {node.lineno}: the tests import or patch the model's module "
                f"'{_MODEL_MODULE}', which the split sandbox runs in another process: every run is an "
                "error; set trust_mode='inprocess' (weaker) or test through the entry point"
            )
        elif isinstance(node, ast.Call) and any(
            _matches(_resolved(_dotted(node.func), aliases), name) for name in _PICKLERS
        ):
            # Round eight: an object of the model's code cannot be pickled across the boundary (its class is in the
            # other process); the run is an error, and this says so before any run.
            found.append(
                f"tests line {node.lineno}: the tests pickle a value ({_dotted(node.func)}): if it is an object of "
                "the model's code (an instance of its class, a generator), the split sandbox cannot carry it and "
                "every such run is an error; set trust_mode='inprocess' (weaker) or test its plain data"
            )
    return found


_PICKLERS = ("pickle.dumps", "pickle.dump", "copyreg.pickle", "Pickler")


# Patches whose effect does reach the model's code: what it prints is replayed into the trusted process.
_REPLAYED_PATCH_TARGETS = {"sys.stdout", "sys.stderr"}
_PATCHERS = {"patch", "object", "dict", "multiple"}  # mock.patch, patch.object, patch.dict, patch.multiple
# Calls that set state of the process they run in (a dotted name, its last parts matched).
# (``random.seed`` and ``random.setstate`` are not among them since round thirty-three: the model's process adopts the
# state of the generator the tests seeded, trusted.RANDOM_SET.)
_PROCESS_STATE_CALLS = {
    "os.chdir": "changes the tests' working directory",
    "os.putenv": "sets the tests' environment",
    "os.environ.update": "sets the tests' environment",
    "os.environ.setdefault": "sets the tests' environment",
    "locale.setlocale": "sets the tests' locale",
    "decimal.setcontext": "sets the tests' decimal context",
    "decimal.getcontext": "reads or sets the tests' decimal context",
    "time.tzset": "sets the tests' time zone",
    "sys.setrecursionlimit": "sets the tests' recursion limit",
    # Round fourteen: each was a right answer's silent 0 that doctor did not mention (str() of a 5,736-digit int in
    # the model's process, a quotient at the tests' precision, input() the tests replaced).
    "sys.set_int_max_str_digits": "changes the tests' limit on integer digits",
    "decimal.localcontext": "sets a decimal context of the tests' own",
    "socket.setdefaulttimeout": "sets the tests' socket timeout",
}
_PROCESS_STATE_NAMES = {"sys.stdin": "replaces the tests' standard input", "os.environ": "sets the tests' environment"}
_NOT_COUNTED_DECORATORS = {"skip", "skipIf", "skipUnless", "expectedFailure"}


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of names and attributes (calls and subscripts in between are skipped)."""
    parts = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            return ".".join(reversed(parts))
        else:
            return ".".join(reversed(parts))


def _matches(dotted: str, name: str) -> bool:
    return dotted == name or dotted.endswith("." + name)


def _import_aliases(tree: ast.Module) -> dict[str, str]:
    """What each name the tests bind by importing stands for: ``import pickle as pk`` binds ``pk`` to
    ``pickle``, ``from random import seed as reseed`` binds ``reseed`` to ``random.seed`` (relative imports,
    which are the tests' own modules, are left out)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update((alias.asname, alias.name) for alias in node.names if alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            aliases.update(
                (alias.asname or alias.name, f"{node.module}.{alias.name}") for alias in node.names if alias.name != "*"
            )
    return aliases


def _resolved(dotted: str, aliases: dict[str, str]) -> str:
    """``dotted`` with its first name replaced by what the tests imported under it (``dumps(x)`` after
    ``from pickle import dumps`` is ``pickle.dumps``): a check of a dotted name is not dodged by importing it
    under another name."""
    first, dot, rest = dotted.partition(".")
    return f"{aliases[first]}{dot}{rest}" if first in aliases else dotted


def process_state_findings(tree: ast.Module) -> list[str]:
    """Under split trust the model's code runs in another process: a patch (other than of sys.stdout and
    sys.stderr, whose output is replayed), a seed, an environment variable, a working directory, a locale or
    standard input the tests set is the trusted process's only, and correct code fails the test."""
    found = []
    aliases = _import_aliases(tree)
    modules = _imported_modules(tree)
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Call):
            dotted = _resolved(_dotted(node.func), aliases)
            target = node.args[0] if node.args else None
            if (
                _name(node) in _PATCHERS
                and "patch" in dotted.split(".")
                and not (
                    isinstance(target, ast.Constant)
                    and isinstance(target.value, str)
                    and (target.value in _REPLAYED_PATCH_TARGETS or target.value.split(".")[0] == _MODEL_MODULE)
                )
                and not (
                    _name(node) == "object"
                    and target is not None
                    and _dotted(target) == "sys"
                    and _replayed_object(node)
                )
            ):
                what = f"patches {_patch_target(node)} in the tests' process"
            elif dotted == "setattr" and target is not None and _resolved(_dotted(target), aliases) == "builtins":
                what = "replaces a built-in of the tests' process"
            elif dotted == "setattr" and target is not None and _dotted(target) in modules:
                what = f"replaces an attribute of the module {modules[_dotted(target)]} in the tests' process"
            else:
                what = next((text for name, text in _PROCESS_STATE_CALLS.items() if _matches(dotted, name)), None)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                dotted = _resolved(_dotted(target.value if isinstance(target, ast.Subscript) else target), aliases)
                if dotted.startswith("builtins."):  # builtins.input = ...: the model's input() is its own process's
                    what = what or "replaces a built-in of the tests' process"
                what = what or next(
                    (text for name, text in _PROCESS_STATE_NAMES.items() if _matches(dotted, name)), None
                )
                what = what or _module_attribute_replaced(target, modules)
        if what:
            found.append(
                f"tests line {getattr(node, 'lineno', 0)}: the test {what}, but under split trust the model's "
                "code runs in another process and never sees it: correct code fails, or each run that calls it "
                "meanwhile is an error naming the in-process fallback; pass the value to the entry point, or set "
                "trust_mode='inprocess' (weaker)"
            )
    return found


def _imported_modules(tree: ast.Module) -> dict[str, str]:
    """The names the tests bind to a whole module by ``import`` (``import time``, ``import os.path as osp``), with the
    module each stands for; never the model's own module, whose names the tests' patches do reach."""
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.partition(".")[0]
                module = alias.name if alias.asname else bound
                if module.partition(".")[0] != _MODEL_MODULE:
                    modules[bound] = module
    return modules


def _module_attribute_replaced(target: ast.AST, modules: dict[str, str]) -> str | None:
    """``time.time = fake`` or ``math.pi = 3`` in the tests (round thirty-five, third wave): as a ``mock.patch`` of it,
    the model's code, in its own process with its own copy of the module, never sees the change, and the run gave no
    sign of it (a right answer's silent 0). ``sys.stdout``/``sys.stderr`` are left: what the model prints is replayed
    into the tests' process."""
    if not isinstance(target, ast.Attribute):
        return None
    first, dot, rest = _dotted(target.value).partition(".")
    if first not in modules:
        return None
    replaced = f"{modules[first]}{dot}{rest}.{target.attr}"
    return None if replaced in _REPLAYED_PATCH_TARGETS else f"replaces {replaced} in the tests' process"


# Calls that measure, in the process they run in, the code called after them (round thirty-two): its CPU time, its
# allocations, its calls. Under split trust they measure the runner; each call to the model's code while they measure
# is an error naming the in-process fallback (trusted.WATCHED).
_MEASURING_CALLS = {
    "time.process_time": "CPU time",
    "time.process_time_ns": "CPU time",
    "time.thread_time": "CPU time",
    "time.thread_time_ns": "CPU time",
    "resource.getrusage": "CPU time",
    "os.times": "CPU time",
    "tracemalloc.start": "allocations",
    "sys.setprofile": "calls",
    "sys.settrace": "calls",
    "threading.setprofile": "calls",
    "threading.settrace": "calls",
    "cProfile.run": "calls",
    "cProfile.runctx": "calls",
    "cProfile.Profile": "calls",
    "profile.run": "calls",
    "profile.runctx": "calls",
    "profile.Profile": "calls",
}
_CPU_CLOCK_NAMES = {"CLOCK_PROCESS_CPUTIME_ID", "CLOCK_THREAD_CPUTIME_ID"}


def _resolved_calls(tree: ast.Module) -> Iterator[tuple[ast.Call, str, dict[str, str]]]:
    """Each call in the tests, with the dotted name it calls (import aliases resolved) and those aliases."""
    aliases = _import_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node, _resolved(_dotted(node.func), aliases), aliases


def measurement_findings(tree: ast.Module) -> list[str]:
    """Tests that measure the code they call from their own process (CPU time, allocations, calls)."""
    found = []
    for node, dotted, aliases in _resolved_calls(tree):
        what = next((text for name, text in _MEASURING_CALLS.items() if dotted == name), None)
        if what is None and dotted in ("time.clock_gettime", "time.clock_gettime_ns") and node.args:
            clock = _resolved(_dotted(node.args[0]), aliases)
            what = "CPU time" if clock.rpartition(".")[2] in _CPU_CLOCK_NAMES else None
        if what:
            found.append(
                f"tests line {node.lineno}: the test measures {what} in the tests' process ({dotted}), but under split "
                "trust the model's code runs in another process, so it would measure the runner: every run that calls "
                "the model's code while measuring is an error naming the in-process fallback; set "
                "trust_mode='inprocess' (weaker) or bound the cost by wall-clock time"
            )
    return found


# What tests read of their own process as a sign of what the code they called did (round thirty-two): under split trust
# the model's code changes its own process, never the runner's, so a check that nothing changed passes every answer (a
# wrong answer that imports a forbidden module or leaves a thread running) and one that something changed fails all.
_OWN_PROCESS_READS = {"threading.active_count", "threading.activeCount", "threading.enumerate", "signal.getsignal"}


def own_process_read_findings(tree: ast.Module) -> list[str]:
    found = []
    aliases = _import_aliases(tree)
    # (``sys.modules[__name__]``, the tests' own module, is no sign of anything the model's code did)
    own_module = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name) and node.slice.id == "__name__"
    }
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Call) and _resolved(_dotted(node.func), aliases) in _OWN_PROCESS_READS:
            what = _resolved(_dotted(node.func), aliases)
        elif (
            isinstance(node, (ast.Attribute, ast.Name))
            and isinstance(node.ctx, ast.Load)
            and id(node) not in own_module
            and _resolved(_dotted(node), aliases) == "sys.modules"
        ):
            what = "sys.modules"
        if what:
            found.append(
                f"tests line {getattr(node, 'lineno', 0)}: the test reads {what} of the tests' own process as a sign "
                "of what the model's code did, but under split trust that code runs in another process and changes "
                "nothing here: a check that nothing changed passes every answer, one that something changed fails "
                "every answer; test what the entry point returns, or set trust_mode='inprocess' (weaker)"
            )
    return found


# Readers of a function's source or bytecode (round thirty-two): under split trust the model's function is the
# runner's stand-in (inspect finds no source), and its code object's parts are in the model's process.
_SOURCE_READERS = {
    "inspect.getsource",
    "inspect.getsourcelines",
    "inspect.getsourcefile",
    "inspect.getfile",
    "inspect.findsource",
    "inspect.getcomments",
    "dis.dis",
    "dis.get_instructions",
    "dis.Bytecode",
    "dis.code_info",
    "dis.show_code",
}


# Runners of text (round thirty-three): the hidden tests run in the trusted runner, so text they did not write
# themselves (what the model's code returned, printed or documented) is never compiled there: it could forge
# the verdict.
_TEXT_RUNNERS = {"eval", "exec", "compile", "builtins.eval", "builtins.exec", "builtins.compile", "marshal.loads"}
_DOCTEST_RUNNERS = {
    "doctest.testmod",
    "doctest.run_docstring_examples",
    "doctest.DocTestSuite",
    "doctest.DocTestFinder",
}
_UNPICKLERS = {"pickle.loads", "pickle.load", "pickle.Unpickler"}
# (round thirty-four) What builds a code object from bytes or text it is handed: refused as compiling a value is.
_CODE_BUILDERS = {"types.CodeType", "importlib._bootstrap_external._compile_bytecode"}


def _builds_code(node: ast.Call, dotted: str) -> bool:
    """``types.CodeType(...)``, ``code.replace(co_code=...)``, a loader's ``source_to_code(text, path)``."""
    if dotted in _CODE_BUILDERS:
        return True
    method = node.func.attr if isinstance(node.func, ast.Attribute) else None
    return method == "source_to_code" or (
        method == "replace" and any((keyword.arg or "").startswith("co_") for keyword in node.keywords)
    )


def text_run_findings(tree: ast.Module) -> list[str]:
    found = []
    for node, dotted, aliases in _resolved_calls(tree):
        first = node.args[0] if node.args else None
        if (
            dotted in _TEXT_RUNNERS
            and first is not None
            and not (isinstance(first, ast.Constant) and isinstance(first.value, (str, bytes)))
        ):
            what = f"{dotted} of text the tests do not spell ({ast.unparse(first)[:60]})"
        elif dotted in _DOCTEST_RUNNERS:
            what = f"{dotted}, which compiles the examples of docstrings"
        elif _builds_code(node, dotted):
            what = f"{ast.unparse(node.func)[:60]}, which builds a code object from what it is given"
        elif dotted in _UNPICKLERS and not (  # (a round trip of the tests' own pickle: see split_trust_findings)
            isinstance(first, ast.Call) and _resolved(_dotted(first.func), aliases) == "pickle.dumps"
        ):
            what = f"{dotted}, which may only rebuild plain values and the tests' own classes there"
        else:
            continue
        found.append(
            f"tests line {node.lineno}: the test runs {what} in the trusted runner under split trust, where text the "
            "model's code chose could forge the verdict: compiling text the tests do not spell as a literal is an "
            "error naming the in-process fallback, and an unpickled global of another kind fails the test; compare "
            "values (ast.literal_eval for text), or set trust_mode='inprocess' (weaker)"
        )
    return found


def _iterator_of(node: ast.AST) -> ast.AST | None:
    """What ``iter(x)`` or ``x.__iter__()`` is called on, else None."""
    if isinstance(node, ast.Call) and not node.keywords:
        if _dotted(node.func) == "iter" and len(node.args) == 1:
            return node.args[0]
        if isinstance(node.func, ast.Attribute) and node.func.attr == "__iter__" and not node.args:
            return node.func.value
    return None


def own_iterator_findings(tree: ast.Module, model: _ModelCode) -> list[str]:
    """Round thirty-two: ``assertIs(iter(it), it)`` (or ``iter(it) is it``) on an iterator of the model's code. Under
    split trust ``iter`` of a model object is the runner's chunked fetch (its iterator, never the object), so a right
    answer failed silently."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and _dotted(node.func).split(".")[-1] in ("assertIs", "assertIsNot"):
            operands = list(node.args[:2])
        else:
            continue
        for operand in operands:
            of = _iterator_of(operand)
            if of is not None and model.reaches(of):
                found.append(
                    f"tests line {node.lineno}: the test checks that an object of the model's code is its own "
                    f"iterator ({ast.unparse(node)[:60]}); under split trust iter() of it is the runner's iterator "
                    "over its items, never the object, so a right answer fails; check what iterating it yields, or "
                    "set trust_mode='inprocess' (weaker)"
                )
                break
    return found


def class_pattern_findings(tree: ast.Module, model: _ModelCode) -> list[str]:
    """``case Point(x=0)`` where ``Point`` is the model's class (round thirty-four): no class in the trusted runner."""
    return [
        f"tests line {node.lineno}: the test matches a class pattern naming the model's class "
        f"({ast.unparse(node.cls)[:60]}), which is in the model's process under split trust and no class in the "
        "runner: the run is an error naming the in-process fallback; compare its fields instead, or set "
        "trust_mode='inprocess' (weaker)"
        for node in ast.walk(tree)
        if isinstance(node, ast.MatchClass) and model.reaches(node.cls)
    ]


def model_source_findings(tree: ast.Module, model: _ModelCode) -> list[str]:
    found = []
    aliases = _import_aliases(tree)
    for node in ast.walk(tree):
        reads = None
        if isinstance(node, ast.Call) and _resolved(_dotted(node.func), aliases) in _SOURCE_READERS and node.args:
            reads = node.args[0] if model.reaches(node.args[0]) else None
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "__code__"
            and node.attr != "co_flags"
            and model.reaches(node.value.value)
        ):
            reads = node.value.value
        if reads is not None:
            found.append(
                f"tests line {getattr(node, 'lineno', 0)}: the test reads the source or bytecode of the model's code "
                f"({ast.unparse(reads)[:60]}), which is in the model's process under split trust: inspect finds no "
                "source (a right answer fails) and its code object is an error naming the in-process fallback; test "
                "what the code does instead, or set trust_mode='inprocess' (weaker)"
            )
    return found


def _replayed_object(node: ast.Call) -> bool:
    """``patch.object(sys, "stdout", ...)``: replayed, like patch("sys.stdout")."""
    return (
        len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and f"sys.{node.args[1].value!s}" in _REPLAYED_PATCH_TARGETS
    )


def _patch_target(node: ast.Call) -> str:
    if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return repr(node.args[0].value)
    if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant):
        return f"{_dotted(node.args[0])}.{node.args[1].value!s}"
    return _dotted(node.args[0]) or "a name" if node.args else "a name"


def not_counted_findings(tree: ast.Module) -> list[str]:
    """A test that is skipped (``@skip``, ``@skipIf``, ``self.skipTest``) or marked ``@expectedFailure`` never
    counts as passed, and a ``load_tests`` hook makes the suite the loader builds differ from the test methods
    counted: every rollout scores below full (plain unittest would say OK), or the run is an error."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for decorator in node.decorator_list:
                if _name(decorator) in _NOT_COUNTED_DECORATORS:
                    found.append(
                        f"tests line {decorator.lineno}: @{_name(decorator)} on {node.name}: a skipped test or an "
                        "expected failure never counts as passed, so no rollout scores full marks; remove it"
                    )
            if isinstance(node, ast.FunctionDef) and node.name == "load_tests" and node in tree.body:
                found.append(
                    f"tests line {node.lineno}: load_tests: the sandbox counts the test methods of the source and "
                    "runs what the loader finds; a hook that changes the suite makes every run an error (the "
                    "model's failure when the hook raised after calling the model's code)"
                )
        elif isinstance(node, ast.Call) and _name(node) == "skipTest":
            found.append(
                f"tests line {node.lineno}: skipTest: a skipped test never counts as passed, so no rollout "
                "reaching it scores full marks; assert instead"
            )
    return found


def _yields(function: ast.FunctionDef) -> bool:
    """Does ``function``'s own body (not a nested function or class) contain ``yield``?"""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return False


def unrun_test_findings(tree: ast.Module) -> list[str]:
    """Test methods whose body never runs, so every rollout passes them whatever its code: an ``async def
    test_*`` in a plain TestCase (the coroutine is never awaited; IsolatedAsyncioTestCase awaits it) and a
    ``test_*`` containing ``yield`` (calling it only makes a generator)."""
    found = []
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        awaits = any("Async" in _dotted(base) for base in cls.bases)
        for item in cls.body:
            if not is_test_method(item):
                continue
            if isinstance(item, ast.AsyncFunctionDef) and not awaits:
                why = "is async in a plain TestCase: its coroutine is never awaited"
            elif isinstance(item, ast.FunctionDef) and _yields(item):
                why = "contains yield: calling it only makes a generator"
            else:
                continue
            found.append(
                f"tests line {item.lineno}: {item.name} {why}, so its assertions never run and every rollout "
                "passes it; use IsolatedAsyncioTestCase, or assert without yield"
            )
    return found


# What a handler or suppress() must catch to swallow a failed assertion (a bare ``except:`` does too).
_CATCHES_FAILURES = {"AssertionError", "Exception", "BaseException"}


def _catches_failures(node: ast.expr | None) -> bool:
    if node is None:
        return True
    if isinstance(node, ast.Tuple):
        return any(_catches_failures(item) for item in node.elts)
    return _dotted(node).rsplit(".", 1)[-1] in _CATCHES_FAILURES


def _within(nodes: list[ast.stmt], kinds: tuple[type, ...], names: tuple[str, ...] = ()) -> bool:
    """Does any statement of ``nodes`` (outside nested functions and classes) contain a node of ``kinds`` or a
    call whose name starts with one of ``names``?"""
    stack: list[ast.AST] = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, kinds) or (isinstance(node, ast.Call) and names and _name(node).startswith(names)):
            return True
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _asserts(nodes: list[ast.stmt]) -> bool:
    return _within(nodes, (ast.Assert,), ("assert", "fail"))


def swallowed_failure_findings(tree: ast.Module) -> list[str]:
    """Assertions whose failure never reaches unittest, so every rollout passes whatever its code: caught by a
    handler of AssertionError, Exception, BaseException (or a bare ``except:``) that neither raises nor fails,
    suppressed by ``contextlib.suppress`` of one of them, cancelled by a ``return``/``break``/``continue`` in a
    ``finally``; and a comparison written as a statement (``add(1, 2) == 3``: a forgotten ``assert``)."""
    found = []
    for node in ast.walk(tree):
        line, why = getattr(node, "lineno", 0), ""
        if isinstance(node, (ast.Try, ast.TryStar)) and _asserts(node.body):
            for handler in node.handlers:
                if _catches_failures(handler.type) and not _within(handler.body, (ast.Raise,), ("fail",)):
                    line, why = handler.lineno, "its failure is caught here and not raised again"
                    break
            else:
                if _within(node.finalbody, (ast.Return, ast.Break, ast.Continue)):
                    line, why = node.finalbody[0].lineno, "its 'finally' returns, which discards the failure"
        elif isinstance(node, (ast.With, ast.AsyncWith)) and _asserts(node.body):
            for item in node.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and _name(call) == "suppress" and any(map(_catches_failures, call.args)):
                    why = "suppress() discards its failure"
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Compare):
            why = "a comparison written as a statement checks nothing (a forgotten 'assert'?)"
        if why:
            found.append(
                f"tests line {line}: an assertion passes whatever the code does: {why}; let the failure reach unittest"
            )
    return found


def _bound_by_tests(tree: ast.Module) -> set[str]:
    """Every name the tests bind themselves (imports, definitions, assignments, parameters)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return bound


# Built-ins whose call, as a statement, does nothing but return a value or raise: ``int("x")`` there is written to
# raise (``next``, ``print`` and the like have effects of their own).
_RAISING_BUILTINS = {
    "int", "float", "complex", "bool", "str", "bytes", "list", "tuple", "dict", "set", "frozenset", "range",
    "divmod", "pow", "abs", "round", "len", "ord", "chr", "hex", "oct", "bin", "hash", "getattr", "iter", "open",
    "max", "min", "sum", "sorted", "format", "repr", "isinstance", "issubclass",
}  # fmt: skip
_EXCEPTION_SUFFIXES = ("Error", "Exception", "Warning", "Exit", "Interrupt", "Iteration")
_DIVISIONS = (ast.Div, ast.FloorDiv, ast.Mod)


def _names_exception(node: ast.expr) -> bool:
    """Is ``node`` an exception class by its name (``ValueError``, ``errors.ParseError``), or a tuple of them?"""
    if isinstance(node, ast.Tuple):
        return bool(node.elts) and all(map(_names_exception, node.elts))
    return isinstance(node, (ast.Name, ast.Attribute)) and _dotted(node).endswith(_EXCEPTION_SUFFIXES)


def _raising(body: list[ast.stmt], own: set[str], catches: bool) -> ast.AST | None:
    """The first thing in a ``with`` block (outside nested functions and classes) that is there to raise: a
    ``raise``, ``assert False``, ``self.fail()``, or a statement whose value is discarded (``1/0``, ``{}["k"]``,
    ``obj.missing``, ``int("x")``). When the context manager was handed an exception class (``Suppress(KeyError)``,
    so the block is meant to raise), also any call, division, subscript or assertion."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Raise) or (isinstance(node, ast.Call) and _dotted(node.func) == "self.fail"):
            return node
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Constant) and not node.test.value:
            return node
        if isinstance(node, ast.Expr) and (
            isinstance(node.value, (ast.BinOp, ast.Subscript, ast.Attribute, ast.Name))
            or (
                isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id in _RAISING_BUILTINS
                and node.value.func.id not in own  # (a function of the tests named int is theirs)
            )
        ):
            return node.value
        if catches and (
            isinstance(node, (ast.Call, ast.Assert))
            or (isinstance(node, ast.BinOp) and isinstance(node.op, _DIVISIONS))
            or (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load))
        ):
            return node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))
    return None


def _expecting_exception(tree: ast.Module) -> set[int]:
    """The ``with`` statements inside a block of ``assertRaises``/``pytest.raises`` (the tests want the exception to
    come out: a context manager that must not suppress it passes under split trust too). One pass."""
    inside: set[int] = set()
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, expecting = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            expecting = False
        opens = False
        if isinstance(node, (ast.With, ast.AsyncWith)):
            if expecting:
                inside.add(id(node))
            opens = any(
                _name(item.context_expr).startswith("assertRaises") or _name(item.context_expr) == "raises"
                for item in node.items
            )
        stack.extend((child, expecting or opens) for child in ast.iter_child_nodes(node))
    return inside


def model_context_findings(tree: ast.Module) -> list[str]:
    """A ``with`` block that raises, or is there to raise (``1/0``, ``int("x")``, ``{}["k"]``; any call when the
    context manager is handed an exception class), inside a context manager of the model's code (a name the tests
    do not bind): under split trust the model's ``__exit__`` runs but never suppresses the exception (a failed
    assertion, or an error the tests met on a wrong value, would otherwise become a pass), so a right answer whose
    context manager is meant to suppress it fails. A block inside ``assertRaises`` wants the exception out."""
    own = _bound_by_tests(tree)
    bound = own | set(dir(builtins))
    expecting = _expecting_exception(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.With, ast.AsyncWith)) or id(node) in expecting:
            continue
        for item in node.items:
            expr = item.context_expr
            call = expr.func if isinstance(expr, ast.Call) else expr
            if not isinstance(call, ast.Name) or call.id in bound:
                continue
            catches = isinstance(expr, ast.Call) and any(map(_names_exception, expr.args))
            raising = _raising(node.body, own, catches)
            if raising is None:
                continue
            what = "raises" if isinstance(raising, ast.Raise) else f"can raise ({ast.unparse(raising)[:40]})"
            found.append(
                f"tests line {node.lineno}: the block {what} inside the model's context manager {call.id}: under "
                "split trust its __exit__ never suppresses the exception, so a right answer that should "
                "suppress it fails; test that through the entry point, or set trust_mode='inprocess' (weaker)"
            )
    return found


# Round nine: the sandbox answers checks of what kind of object a model value is as one process would
# (isinstance/issubclass with a standard class or an ABC, callable, inspect.is*, type(x), x.__class__, dataclasses'
# is_dataclass/fields/asdict/astuple), since the model's process describes each object it hands over and the hidden
# tests' ``type(x)``, ``issubclass(a, b)`` and ``x.__class__`` are answered by the runner. What is left: ``type`` or
# ``issubclass`` used as a value rather than called (``map(type, xs)``, ``t = type``), which the runner does not see,
# and ``dataclasses.replace``, which constructs the object's class here.
_KIND_CHECK_NAMES = {"type", "issubclass"}


def model_type_findings(tree: ast.Module) -> list[str]:
    """Checks of what kind of object a value is that still see the sandbox's stub of a model object under split
    trust (a right answer fails when the value is an object of the model's code rather than plain data)."""
    bound = _bound_by_tests(tree)
    # Where ``type`` or ``issubclass`` is handed on to be called elsewhere: aliased (``kind = type``), mapped
    # (``map(type, xs)``), a key (``sorted(xs, key=type)``). As a class compared or checked against
    # (``assertIs(type(C), type)``, ``isinstance(C, type)``) it is no call.
    handed_on = [
        value
        for node in ast.walk(tree)
        for value in (
            [node.value]
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr))
            else [*node.args[:1], *(item.value for item in node.keywords)]
            if isinstance(node, ast.Call) and _name(node) in ("map", "starmap")
            else [item.value for item in node.keywords if item.arg == "key"]
            if isinstance(node, ast.Call)
            else []
        )
    ]
    aliases = _import_aliases(tree)
    handed_ids = {id(node) for node in handed_on}
    found = []
    for node in ast.walk(tree):
        what = ""
        if id(node) in handed_ids and isinstance(node, ast.Name) and node.id in _KIND_CHECK_NAMES:
            what = (
                ""
                if node.id in bound
                else f"{node.id} handed on as a value (not called as {node.id}(...) in the tests)"
            )
        elif isinstance(node, ast.Call) and _matches(_resolved(_dotted(node.func), aliases), "dataclasses.replace"):
            what = "dataclasses.replace(...)"
        if what:
            found.append(
                f"tests line {getattr(node, 'lineno', 0)}: {what} sees the sandbox's stub, not the object, when the "
                "value is an object of the model's code (a generator, a function, an instance of its class): a right "
                "answer fails under split trust; call it directly, test what the object does, or set "
                "trust_mode='inprocess' (weaker)"
            )
    return found


# --- the count of tests (rewardpipe/execution/runtime/harness.py count_expected_tests) ---------------------------
# The sandbox counts every ``test*`` method (def or async def) written in a class at the top level of the module and
# compares the count with what unittest's loader finds at run time: when they differ every run is an error.


def _counted(tree: ast.Module) -> int:
    return sum(1 for node in tree.body if isinstance(node, ast.ClassDef) for item in node.body if is_test_method(item))


def _count_finding(line: int, cause: str, more: bool, counted: int, fix: str) -> str:
    error = (
        f"the test source has {counted} test methods but the loader found ..."
        if counted
        else "hidden tests define no test* methods in any class"
    )
    return (
        f"tests line {line}: {cause}: unittest's loader finds {'more' if more else 'fewer'} tests than the "
        f"{counted} test* methods the sandbox counts in the source's module-level classes, so every run is an "
        f"error ('{error}'); {fix}"
    )


def _text_prefix(node: ast.AST) -> str | None:
    """The literal start of a string expression (``"test_"`` of ``f"test_{i}"``), None when there is none."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        return _text_prefix(node.values[0])
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _text_prefix(node.left)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _text_prefix(node.func.value)
    return None


_Method = ast.FunctionDef | ast.AsyncFunctionDef


def _class_body_tests(cls: ast.ClassDef, defined: set[str]) -> tuple[list[_Method], list[tuple[str, ast.stmt]]]:
    """The class's counted test methods, and its test* names the loader runs but the count does not see (a
    ``test_x = lambda self: ...`` or ``test_x = a_function``)."""
    counted = [item for item in cls.body if isinstance(item, _Method) and is_test_method(item)]
    assigned: list[tuple[str, ast.stmt]] = []
    for item in cls.body:
        if isinstance(item, (ast.Assign, ast.AnnAssign)) and item.value is not None:
            value = item.value
            callable_value = isinstance(value, ast.Lambda) or (isinstance(value, ast.Name) and value.id in defined)
            targets = item.targets if isinstance(item, ast.Assign) else [item.target]
            assigned += [
                (target.id, item)
                for target in targets
                if callable_value and isinstance(target, ast.Name) and target.id.startswith("test")
            ]
    return counted, assigned


def count_mismatch_findings(tree: ast.Module) -> list[str]:
    """Shapes that make the loader find another number of tests than the sandbox counts in the source, so every
    run is an error: a test method or a TestCase class name defined twice, test methods inherited from a base
    class or a mixin used more than once, test* methods of a class that is no TestCase, tests added with setattr
    or by assignment, a TestCase class bound under two names or defined inside an if/try block, a runTest."""
    aliases = _import_aliases(tree)
    counted = _counted(tree)
    defined = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    top = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    final: dict[str, ast.ClassDef] = {}
    for node in tree.body:  # the class each name holds when the loader looks
        if isinstance(node, ast.ClassDef):
            final[node.name] = node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            final.pop(node.name, None)

    def base_class(cls: ast.ClassDef, base: ast.expr) -> ast.ClassDef | None:
        """The module-level class a base names, as bound when ``cls`` is defined."""
        if not isinstance(base, ast.Name):
            return None
        earlier = [node for node in top if node.name == base.id and node.lineno < cls.lineno]
        return earlier[-1] if earlier else None

    def is_testcase(cls: ast.ClassDef, seen: frozenset[int] = frozenset()) -> bool | None:
        """True, False, or None when a base is neither a class of the tests nor a TestCase by its name."""
        answer: bool | None = False
        for base in cls.bases:
            parent = base_class(cls, base)
            if parent is not None and id(parent) not in seen:
                verdict = is_testcase(parent, seen | {id(cls)})
            elif _resolved(_dotted(base), aliases).endswith("TestCase"):
                verdict = True
            elif _dotted(base) == "object":
                verdict = False
            else:
                verdict = None
            if verdict:
                return True
            if verdict is None:
                answer = None
        return answer

    def ancestors(cls: ast.ClassDef) -> list[ast.ClassDef]:
        order: list[ast.ClassDef] = []
        stack = [parent for base in reversed(cls.bases) if (parent := base_class(cls, base)) is not None]
        while stack:
            parent = stack.pop()
            if parent not in order and parent is not cls:
                order.append(parent)
                stack.extend(p for base in reversed(parent.bases) if (p := base_class(parent, base)) is not None)
        return order

    found = []
    own = {id(cls): _class_body_tests(cls, defined) for cls in top}
    # A test method defined twice in one class body: the later replaces the earlier.
    for cls in top:
        first: dict[str, int] = {}
        for item in cls.body:
            names = (
                [item.name]
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                else [
                    t.id
                    for t in (item.targets if isinstance(item, ast.Assign) else [item.target])
                    if isinstance(t, ast.Name)
                ]
                if isinstance(item, (ast.Assign, ast.AnnAssign))
                else []
            )
            for name in names:
                if name.startswith("test") and name in first:
                    found.append(
                        _count_finding(
                            item.lineno,
                            f"{cls.name}.{name} is defined again (first at line {first[name]}), replacing the "
                            "earlier definition",
                            False,
                            counted,
                            "give each test method a name of its own",
                        )
                    )
                first.setdefault(name, item.lineno)
    # Where each class's test methods run: in itself (a TestCase the module still names) and in every TestCase
    # the module names that inherits them.
    runners: dict[int, list[ast.ClassDef]] = {id(cls): [] for cls in top}
    for cls in final.values():
        if is_testcase(cls) and cls is final.get(cls.name):
            for holder in [cls, *ancestors(cls)]:
                runners[id(holder)].append(cls)
    for cls in top:
        methods = own[id(cls)][0]
        if not methods:
            continue
        runs_in = runners[id(cls)]
        verdict = is_testcase(cls)
        if final.get(cls.name) is not cls and not runs_in:
            later = next(
                node for node in tree.body if node.lineno > cls.lineno and getattr(node, "name", "") == cls.name
            )
            found.append(
                _count_finding(
                    later.lineno,
                    f"the class name {cls.name} is defined again (first at line {cls.lineno}), so the first "
                    "class's test methods never run",
                    False,
                    counted,
                    "give each TestCase class a name of its own",
                )
            )
        elif verdict is False and not runs_in:
            found.append(
                _count_finding(
                    methods[0].lineno,
                    f"{cls.name} is not a TestCase, yet its methods {', '.join(m.name for m in methods)} are "
                    "named test*, so they are counted but never run",
                    False,
                    counted,
                    "rename them (a helper's method must not start with 'test') or make the class a TestCase",
                )
            )
        elif len(runs_in) > 1 and verdict is not None and all(is_testcase(c) for c in runs_in):
            inheritors = [c.name for c in runs_in if c is not cls]
            found.append(
                _count_finding(
                    cls.lineno,
                    f"the test methods of {cls.name} are inherited by {', '.join(inheritors)}, and the loader runs "
                    "them in every TestCase that has them",
                    True,
                    counted,
                    "define each test method in the one class that runs it (a mixin used by one TestCase only, "
                    "or subTest for the cases)",
                )
            )
    for cls in top:
        for name, item in own[id(cls)][1]:
            found.append(
                _count_finding(
                    item.lineno,
                    f"{cls.name}.{name} is assigned, not written with def",
                    True,
                    counted,
                    "write each test as a def in the class body",
                )
            )
        if (
            is_testcase(cls)
            and final.get(cls.name) is cls
            and not any(own[id(a)][0] for a in [cls, *ancestors(cls)])
            and any(isinstance(item, ast.FunctionDef) and item.name == "runTest" for item in cls.body)
        ):
            found.append(
                _count_finding(
                    cls.lineno,
                    f"{cls.name} has a runTest method and no test* method, and the loader runs runTest",
                    True,
                    counted,
                    "name it test_*",
                )
            )
    test_classes = {name for name, cls in final.items() if is_testcase(cls) and runners[id(cls)]}
    for walked in ast.walk(tree):
        cause = ""
        if (
            isinstance(walked, ast.Call)
            and _name(walked) == "setattr"
            and isinstance(walked.func, ast.Name)
            and len(walked.args) >= 2
        ):
            prefix = _text_prefix(walked.args[1])
            if (
                isinstance(walked.args[0], ast.Name)
                and walked.args[0].id in final
                and (prefix or "").startswith("test")
            ):
                cause = f"setattr adds a test method to {walked.args[0].id} at run time"
        elif isinstance(walked, ast.Assign):
            for target in walked.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr.startswith("test")
                    and isinstance(target.value, ast.Name)
                    and target.value.id in final
                ):
                    cause = f"{target.value.id}.{target.attr} = ... adds a test method at run time"
        if cause:
            found.append(
                _count_finding(
                    getattr(walked, "lineno", 0),
                    cause,
                    True,
                    counted,
                    "write each test as a def in the class body (subTest for a table of cases)",
                )
            )
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Name)
            and node.value.id in test_classes
            and any(isinstance(target, ast.Name) for target in node.targets)
        ):
            found.append(
                _count_finding(
                    node.lineno,
                    f"the TestCase class {node.value.id} is bound to a second name here, and the loader runs its "
                    "tests under each name",
                    True,
                    counted,
                    "remove the second name",
                )
            )
        elif isinstance(node, (ast.If, ast.Try, ast.TryStar, ast.With, ast.For, ast.While)):
            keyword = type(node).__name__.lower().removesuffix("star")
            stack: list[ast.AST] = list(ast.iter_child_nodes(node))
            while stack:
                inner = stack.pop()
                if isinstance(inner, ast.ClassDef):
                    if is_testcase(inner) and any(is_test_method(item) for item in inner.body):
                        found.append(
                            _count_finding(
                                inner.lineno,
                                f"the TestCase class {inner.name} is defined inside an '{keyword}' block, not at the "
                                "top level of the module",
                                True,
                                counted,
                                "define it at the top level of the module",
                            )
                        )
                elif not isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    stack.extend(ast.iter_child_nodes(inner))
    return found


# --- what the model's process cannot share with the tests' process under split trust --------------------------


def _key(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of names and attributes ending in a name (``Model().inc`` is ``Model.inc``)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _key(node.value)
        return f"{inner}.{node.attr}" if inner else None
    if isinstance(node, ast.Call):
        return _key(node.func)
    return None


def _target_keys(target: ast.AST) -> list[str]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [key for item in target.elts for key in _target_keys(item)]
    if isinstance(target, ast.Starred):
        return _target_keys(target.value)
    key = _key(target) if isinstance(target, (ast.Name, ast.Attribute)) else None
    return [key] if key else []


def _bindings(nodes: Iterable[ast.AST]) -> list[tuple[list[str], ast.expr]]:
    """Every (names bound, value) pair among ``nodes``: assignments, ``with ... as``, ``for ... in``, ``:=``."""
    pairs: list[tuple[list[str], ast.expr]] = []
    for node in nodes:
        if isinstance(node, ast.Assign):
            pairs += [(_target_keys(target), node.value) for target in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            pairs.append((_target_keys(node.target), node.value))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            pairs.append((_target_keys(node.optional_vars), node.context_expr))
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            pairs.append((_target_keys(node.target), node.iter))
    return pairs


class _ModelCode:
    """Which calls of the tests reach the model's code: a name the tests do not bind (the entry point, another name
    of the model's module), check()'s candidate, and what the tests keep from such a call (``c = Counter()`` then
    ``c.inc()``, ``coro = f(1)``)."""

    def __init__(self, tree: ast.Module) -> None:
        bound = _bound_by_tests(tree) | set(dir(builtins))
        self.roots = {
            node.id
            for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in bound
        }
        self.roots |= {
            node.args.args[0].arg
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name == "check" and node.args.args
        }
        self.objects: set[str] = set()
        pairs = _bindings(ast.walk(tree))
        for _ in range(3):
            for keys, value in pairs:
                if self.holds(value):
                    self.objects.update(keys)

    def reaches(self, node: ast.AST) -> bool:
        """Is ``node`` (a callee) the model's code or a part of an object of it?"""
        key = _key(node)
        if not key:
            return False
        parts = key.split(".")
        return parts[0] in self.roots or any(".".join(parts[:i]) in self.objects for i in range(1, len(parts) + 1))

    def calls(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Call) and self.reaches(node.func)

    def holds(self, node: ast.AST) -> bool:
        """A call of the model's code, or what the tests keep from one."""
        return self.calls(node) or (isinstance(node, (ast.Name, ast.Attribute)) and _key(node) in self.objects)


def _in_scopes(tree: ast.Module) -> list[ast.AST]:
    """The module, and each function or method the tests define outside any other function (a nested function is
    part of the one around it)."""
    scopes: list[ast.AST] = [tree]
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            scopes.append(node)
        elif isinstance(node, ast.ClassDef):
            stack.extend(node.body)
    return scopes


def _scope_nodes(scope: ast.AST) -> list[ast.AST]:
    """The nodes of a scope; for the module, only those outside every function."""
    if not isinstance(scope, ast.Module):
        return list(ast.walk(scope))
    nodes: list[ast.AST] = []
    stack: list[ast.AST] = list(scope.body)
    while stack:
        node = stack.pop()
        nodes.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return nodes


_FILE_MAKERS = (
    "tempfile.NamedTemporaryFile",
    "tempfile.TemporaryFile",
    "tempfile.SpooledTemporaryFile",
    "tempfile.mkstemp",
    "tempfile.mkdtemp",
    "tempfile.mktemp",
    "tempfile.TemporaryDirectory",
)
_OPENERS = ("open", "io.open", "codecs.open", "os.fdopen")
_PATH_WRITERS = {"write_text", "write_bytes", "mkdir", "touch", "symlink_to", "hardlink_to"}  # pathlib.Path's
_MADE_BY_FIRST = ("os.mkdir", "os.makedirs", "os.mkfifo")
_MADE_BY_SECOND = ("shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree", "shutil.move")
# What keeps a path a path: the test hands the model a name of the file, not what it holds.
_PATH_KEEPING = (
    "str",
    "os.fspath",
    "os.path.join",
    "os.path.abspath",
    "os.path.realpath",
    "os.path.normpath",
    "os.path.dirname",
    "os.path.expanduser",
    "pathlib.Path",
    "pathlib.PurePath",
    "pathlib.PosixPath",
    "Path",
    *_OPENERS,
)
_PATH_KEEPING_METHODS = {"joinpath", "with_name", "with_suffix", "with_stem", "resolve", "absolute", "as_posix", "open"}


def _writes(call: ast.Call, mode_at: int = 1) -> bool:
    """``open(path, "w")`` (or "a", "x", "+"; the mode at argument ``mode_at``, 0 for ``path.open("w")``): a file
    the call creates or changes."""
    mode = (
        call.args[mode_at]
        if len(call.args) > mode_at
        else next((kw.value for kw in call.keywords if kw.arg == "mode"), None)
    )
    return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and bool(set(mode.value) & set("wax+"))


# Literals that hold what is written inside them: a value the tests hand over inside one is handed over too.
_CONTAINERS = (ast.Tuple, ast.List, ast.Set, ast.Starred, ast.Dict)


def _contained(node: ast.AST) -> list[ast.expr]:
    """What a :data:`_CONTAINERS` literal holds: its items, a starred value, a dict's keys and values."""
    if isinstance(node, ast.Starred):
        return [node.value]
    if isinstance(node, ast.Dict):
        return [item for item in [*node.keys, *node.values] if item is not None]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return list(node.elts)
    return []


class _Taint:
    """A flow-insensitive taint over the tests: a name bound anywhere in a function to a value ``holds`` accepts,
    ``self.x`` across the class, the module's names in every function, and what a helper of the tests returns
    (``helpers``: its name, ``self.name`` and ``cls.name``). Three passes, each linear in the tests."""

    def __init__(self, tree: ast.Module) -> None:
        self.helpers: set[str] = set()
        self.tainted: dict[int, set[str]] = {}
        scopes = _in_scopes(tree)
        nodes = {id(scope): _scope_nodes(scope) for scope in scopes}
        calls = {key: [node for node in found if isinstance(node, ast.Call)] for key, found in nodes.items()}
        bindings = {key: _bindings(found) for key, found in nodes.items()}
        returns = {
            key: [node.value for node in found if isinstance(node, ast.Return) and node.value is not None]
            for key, found in nodes.items()
        }
        module_taint: set[str] = set()
        attributes: set[str] = set()  # self.x and cls.x, shared by the methods of a class
        for _ in range(3):
            for scope in scopes:
                taint = self.tainted.setdefault(id(scope), set())
                taint |= module_taint | attributes
                for call in calls[id(scope)]:
                    self._note(call, taint)
                for keys, value in bindings[id(scope)]:
                    if self.holds(value, taint):
                        taint.update(keys)
                attributes |= {key for key in taint if key.startswith(("self.", "cls."))}
                if isinstance(scope, ast.Module):
                    module_taint |= taint
                elif isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    self.returned(value, taint) for value in returns[id(scope)]
                ):
                    self.helpers.update({scope.name, f"self.{scope.name}", f"cls.{scope.name}"})

    def _note(self, call: ast.Call, taint: set[str]) -> None:
        """What a call of the tests taints besides what it binds (nothing, unless a subclass says so)."""

    def holds(self, node: ast.AST, taint: set[str]) -> bool:
        raise NotImplementedError

    def returned(self, node: ast.AST, taint: set[str]) -> bool:
        """Does a helper returning ``node`` return a tainted value?"""
        return self.holds(node, taint)


class _TestFiles(_Taint):
    """The files and directories the tests create, and what holds their names (a path or open file object)."""

    def __init__(self, tree: ast.Module) -> None:
        self.aliases = _import_aliases(tree)
        self.constants: set[str] = set()  # paths written as text: open("in.txt", "w")
        super().__init__(tree)

    def _resolved(self, node: ast.AST) -> str:
        return _resolved(_dotted(node), self.aliases)

    def _mark(self, node: ast.AST, taint: set[str]) -> None:
        """``node`` names a path the tests create."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            self.constants.add(node.value)
        elif isinstance(node, ast.Call) and node.args and not self.holds(node, taint):
            self._mark(node.args[0], taint)  # Path("in.txt").write_text(...)
        else:
            taint.update(_target_keys(node))

    def _note(self, node: ast.Call, taint: set[str]) -> None:
        name = self._resolved(node.func)
        if any(_matches(name, opener) for opener in _OPENERS) and node.args and _writes(node):
            self._mark(node.args[0], taint)
        elif isinstance(node.func, ast.Attribute) and (
            node.func.attr in _PATH_WRITERS or (node.func.attr == "open" and _writes(node, mode_at=0))
        ):
            self._mark(node.func.value, taint)
        elif any(_matches(name, maker) for maker in _MADE_BY_FIRST) and node.args:
            self._mark(node.args[0], taint)
        elif any(_matches(name, maker) for maker in _MADE_BY_SECOND) and len(node.args) >= 2:
            self._mark(node.args[1], taint)

    def made_here(self, node: ast.Call) -> bool:
        name = self._resolved(node.func)
        return any(_matches(name, maker) for maker in _FILE_MAKERS) or (
            any(_matches(name, opener) for opener in _OPENERS) and _writes(node)
        )

    def holds(self, node: ast.AST, taint: set[str]) -> bool:
        """Does ``node`` give the name (or the open file object) of a file or directory the tests create?"""
        if isinstance(node, ast.Name):
            return node.id in taint
        if isinstance(node, ast.Attribute):
            return _key(node) in taint or self.holds(node.value, taint)
        if isinstance(node, ast.Subscript):
            return self.holds(node.value, taint)
        if isinstance(node, ast.Constant):
            return isinstance(node.value, str) and node.value in self.constants
        if isinstance(node, ast.JoinedStr):
            return any(isinstance(v, ast.FormattedValue) and self.holds(v.value, taint) for v in node.values)
        if isinstance(node, ast.BinOp):
            return self.holds(node.left, taint) or self.holds(node.right, taint)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(self.holds(item, taint) for item in node.elts)
        if isinstance(node, ast.Starred):
            return self.holds(node.value, taint)
        if isinstance(node, ast.Dict):
            return any(self.holds(value, taint) for value in node.values)
        if isinstance(node, ast.IfExp):
            return self.holds(node.body, taint) or self.holds(node.orelse, taint)
        if isinstance(node, ast.NamedExpr):
            return self.holds(node.value, taint)
        if isinstance(node, ast.Call):
            if self.made_here(node) or (_key(node.func) or "") in self.helpers:
                return True
            name = self._resolved(node.func)
            arguments = [*node.args, *(kw.value for kw in node.keywords)]
            if isinstance(node.func, ast.Attribute) and node.func.attr in _PATH_KEEPING_METHODS:
                return self.holds(node.func.value, taint)
            if any(_matches(name, keeping) for keeping in _PATH_KEEPING):
                return any(self.holds(argument, taint) for argument in arguments)
        return False


def _handed_to_model(tree: ast.Module, model: _ModelCode, taint: _Taint) -> list[tuple[ast.Call, ast.expr]]:
    """Each call of the model's code that hands it something ``taint`` holds, with the first such argument
    (positional or keyword)."""
    handed = []
    for scope in _in_scopes(tree):
        held = taint.tainted.get(id(scope), set())
        for node in _scope_nodes(scope):
            if model.calls(node):
                assert isinstance(node, ast.Call)
                arguments = [*node.args, *(kw.value for kw in node.keywords)]
                first = next((arg for arg in arguments if taint.holds(arg, held)), None)
                if first is not None:
                    handed.append((node, first))
    return handed


def created_file_findings(tree: ast.Module, model: _ModelCode | None = None) -> list[str]:
    """A file or directory the tests create (tempfile, open(..., "w"), pathlib's write_text, os.mkdir...) whose
    name or open file object the tests hand to the model's code: under split trust the model's process has a
    private /tmp and a job directory of its own and cannot see it, so correct code fails."""
    return [
        f"tests line {node.lineno}: the tests hand the model's code a file or directory they create "
        f"({ast.unparse(handed)[:60]}), but under split trust the model's process has its own "
        "private /tmp and job directory and cannot read files the tests write (PermissionError, "
        "FileNotFoundError; an open file cannot cross at all): correct code fails; pass the content (str "
        "or bytes) instead"
        for node, handed in _handed_to_model(tree, model or _ModelCode(tree), _TestFiles(tree))
    ]


class _TestObjects(_Taint):
    """What the tests make that is code or an object of their own rather than data: a lambda, a function or class
    they define (``self.m`` for a method of theirs), an instance of a class of theirs that no other type underlies
    (a ListNode they build; a subclass of int, tuple or Enum may cross as its base), a ``functools.partial`` of one
    of those, and what holds one (a name, a list, ``self.x``, a helper of the tests returning one). A built-in or
    standard-library callable (``len``, ``str.upper``, ``operator.add``) is none of these."""

    def __init__(self, tree: ast.Module) -> None:
        self.aliases = _import_aliases(tree)
        self.defined: set[str] = set()
        self.classes: set[str] = set()  # classes whose instances are objects of the tests
        plain: dict[str, list[ast.expr]] = {}
        methods: set[int] = set()  # a method is self.name, not a bare name (a local variable may have its name)
        for node in ast.walk(tree):  # (a class before its body)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and id(node) not in methods:
                self.defined.add(node.name)
            if isinstance(node, ast.ClassDef):
                plain[node.name] = node.bases
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        methods.add(id(item))
                        self.defined.update({f"self.{item.name}", f"cls.{item.name}"})
        for _ in range(3):  # a base of the tests' own (class Node: ...; class Leaf(Node): ...)
            self.classes |= {
                name
                for name, bases in plain.items()
                if all(_dotted(base) == "object" or _dotted(base) in self.classes for base in bases)
            }
        super().__init__(tree)

    def holds(self, node: ast.AST, taint: set[str]) -> bool:
        if isinstance(node, ast.Lambda):
            return True
        if isinstance(node, (ast.Name, ast.Attribute)):
            key = _key(node)
            return key in taint or key in self.defined
        if isinstance(node, _CONTAINERS):
            return any(self.holds(part, taint) for part in _contained(node))
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return self.holds(node.elt, taint)
        if isinstance(node, ast.DictComp):
            return self.holds(node.key, taint) or self.holds(node.value, taint)
        if isinstance(node, ast.Call):
            if (isinstance(node.func, ast.Name) and node.func.id in self.classes) or _key(node.func) in self.helpers:
                return True
            return _matches(_resolved(_dotted(node.func), self.aliases), "functools.partial") and any(
                self.holds(arg, taint) for arg in node.args[:1]
            )
        return False

    def returned(self, node: ast.AST, taint: set[str]) -> bool:
        """A helper building a linked list returns ``dummy.next``: a part of an object of the tests."""
        while isinstance(node, ast.Attribute):
            if self.holds(node, taint):
                return True
            node = node.value
        return self.holds(node, taint)


def own_object_findings(tree: ast.Module, model: _ModelCode | None = None) -> list[str]:
    """A lambda, a function or class the tests define, or an instance of a class they define (a ListNode built by
    the tests), handed to the model's code directly or inside a list, tuple or dict: under split trust it cannot
    cross to the model's process, so every run is an error."""
    return [
        f"tests line {node.lineno}: the tests pass the model's code a function, class or object of their own "
        f"({ast.unparse(handed)[:60]}: a lambda, something the tests define, or an instance of a class they "
        "define), which cannot cross the split sandbox's process boundary: every run is an error; pass plain data "
        "(build linked lists and trees with the model's own classes), or set trust_mode='inprocess' (weaker)"
        for node, handed in _handed_to_model(tree, model or _ModelCode(tree), _TestObjects(tree))
    ]


# What makes an iterator, a generator or an open file (round fourteen): none crosses the split sandbox's boundary as
# plain data (a loud ``error`` at run time), and doctor said nothing of them. Exact names, after the tests' imports.
_ITERATOR_MAKERS = frozenset(
    {"iter", "map", "filter", "zip", "enumerate", "reversed", "open", "io.open", "io.StringIO", "io.BytesIO"}
)


class _TestIterators(_Taint):
    """An iterator, a generator or a file object the tests make (``iter(xs)``, ``(x for x in xs)``, ``map(...)``,
    ``itertools.count()``, ``io.StringIO(text)``, ``open(path)``), and what holds one."""

    def __init__(self, tree: ast.Module) -> None:
        self.aliases = _import_aliases(tree)
        super().__init__(tree)

    def holds(self, node: ast.AST, taint: set[str]) -> bool:
        if isinstance(node, ast.GeneratorExp):
            return True
        if isinstance(node, (ast.Name, ast.Attribute)):
            return _key(node) in taint
        if isinstance(node, _CONTAINERS):
            return any(self.holds(part, taint) for part in _contained(node))
        if isinstance(node, ast.Call):
            name = _resolved(_dotted(node.func), self.aliases)
            return name in _ITERATOR_MAKERS or name.startswith("itertools.") or _key(node.func) in self.helpers
        return False


def iterator_argument_findings(tree: ast.Module, model: _ModelCode | None = None) -> list[str]:
    """An iterator, a generator or an open file of the tests handed to the model's code (``f(iter([1, 2]))``,
    ``f(x for x in xs)``, ``f(io.StringIO("1 2"))``): under split trust it cannot cross to the model's process, so
    every run is an error, which doctor did not say before round fourteen."""
    return [
        f"tests line {node.lineno}: the tests pass the model's code an iterator, generator or file object "
        f"({ast.unparse(handed)[:60]}), which cannot cross the split sandbox's process boundary: every run is an "
        "error; pass a list or the text itself, or set trust_mode='inprocess' (weaker)"
        for node, handed in _handed_to_model(tree, model or _ModelCode(tree), _TestIterators(tree))
        # (a standard module's function the tests use without importing it, ``contextlib.redirect_stdout(
        # io.StringIO())``, is not the model's code, whatever the name's binding says)
        if _dotted(node.func).split(".")[0] not in sys.stdlib_module_names
    ]


_ENUM_BASES = frozenset({"Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "ReprEnum"})


class _TestEnums(_Taint):
    """A member of an enum class the tests define (``Color.RED``, ``Color(1)``, ``Color["RED"]``), and what holds
    one. Round fourteen: a plain Enum's member cannot cross (a loud error doctor did not mention); an IntEnum's,
    StrEnum's or IntFlag's crosses as its int or str value, so a right answer reading ``.name`` failed silently."""

    def __init__(self, tree: ast.Module) -> None:
        self.enums: set[str] = set()
        for _ in range(3):  # an enum of the tests' derived from another of theirs
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and any(
                    _dotted(base).split(".")[-1] in _ENUM_BASES or _dotted(base) in self.enums for base in node.bases
                ):
                    self.enums.add(node.name)
        super().__init__(tree)

    def _member_of(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in self.enums

    def holds(self, node: ast.AST, taint: set[str]) -> bool:
        if isinstance(node, ast.Attribute) and self._member_of(node.value):
            return not node.attr.startswith("_")
        if isinstance(node, ast.Subscript) and self._member_of(node.value):
            return True
        if isinstance(node, ast.Call) and self._member_of(node.func):
            return True
        if isinstance(node, ast.Name):
            return node.id in taint
        if isinstance(node, _CONTAINERS):
            return any(self.holds(part, taint) for part in _contained(node))
        return False


def enum_argument_findings(tree: ast.Module, model: _ModelCode | None = None) -> list[str]:
    """A member of the tests' own enum handed to the model's code: see :class:`_TestEnums`."""
    return [
        f"tests line {node.lineno}: the tests pass the model's code a member of an enum of their own "
        f"({ast.unparse(handed)[:60]}): a plain Enum's member cannot cross the split sandbox's process boundary "
        "(every run is an error), and an IntEnum's, StrEnum's or IntFlag's crosses as its int or str value, so its "
        "name and identity are lost and a right answer that reads them fails; pass the plain value or the name, or "
        "set trust_mode='inprocess' (weaker)"
        for node, handed in _handed_to_model(tree, model or _ModelCode(tree), _TestEnums(tree))
        if _dotted(node.func).split(".")[0] not in sys.stdlib_module_names
    ]


# Comparisons whose verdict is the operands' __eq__ (membership compares each item too).
_EQUALITY_ASSERTIONS = {
    "assertEqual", "assertEquals", "failUnlessEqual", "assertNotEqual", "assertNotEquals", "failIfEqual",
    "assertListEqual", "assertTupleEqual", "assertDictEqual", "assertSetEqual", "assertSequenceEqual",
    "assertCountEqual", "assertItemsEqual", "assertIn", "assertNotIn",
}  # fmt: skip
_EQUALITY_OPERATORS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _model_instance(node: ast.AST, model: _ModelCode) -> ast.Call | None:
    """A call of a class of the model's code (a name the tests do not bind, capitalized as classes are:
    ``Point(1, 2)``), directly or inside a list, tuple, set or dict literal."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return next(filter(None, (_model_instance(item, model) for item in node.elts)), None)
    if isinstance(node, ast.Dict):
        return next(filter(None, (_model_instance(item, model) for item in node.values)), None)
    if isinstance(node, ast.Starred):
        return _model_instance(node.value, model)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id[:1].isupper():
        return node if node.func.id in model.roots else None
    return None


def _of_the_model(node: ast.AST, model: _ModelCode) -> bool:
    """Built or named by the model's code alone (``Point(1, 2)``, ``Color.GREEN``, ``ORIGIN``): compared with
    another such, the test is of the class itself (its __eq__, its members)."""
    key = _key(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    return _model_instance(node, model) is not None or (key is not None and key.split(".")[0] in model.roots)


def _plain_literal(node: ast.AST) -> bool:
    """A literal of plain data (``3``, ``(1, "a")``, ``-2.5``): a model object compared with one is never handed
    the plain value's __eq__ question under split trust."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _plain_literal(node.operand)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(map(_plain_literal, node.elts))
    if isinstance(node, ast.Dict):
        return all(item is not None and _plain_literal(item) for item in [*node.keys, *node.values])
    return False


def model_equality_findings(tree: ast.Module, model: _ModelCode | None = None) -> list[str]:
    """Advisory: a result compared with an expected value built from a class of the model's code
    (``assertEqual(parse_point("1,2"), Point(1, 2))``): the model's own __eq__ decides, in one process as under
    split trust, so an __eq__ that always returns True passes. Not flagged: a comparison with a plain literal, and
    two values both built or named from the model's classes (``Point(1, 2) == Point(1, 2)`` and
    ``Color(2) == Color.GREEN`` test the class itself)."""
    model = model or _ModelCode(tree)
    found = []
    for node in ast.walk(tree):
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            pairs = [
                (operands[i], operands[i + 1]) for i, op in enumerate(node.ops) if isinstance(op, _EQUALITY_OPERATORS)
            ]
        elif isinstance(node, ast.Call) and _name(node) in _EQUALITY_ASSERTIONS and len(node.args) >= 2:
            pairs = [(node.args[0], node.args[1])]
        for first, second in pairs:
            for made, other in ((_model_instance(second, model), first), (_model_instance(first, model), second)):
                if made is None or _plain_literal(other) or _of_the_model(other, model):
                    continue
                found.append(
                    f"tests line {made.lineno}: advisory: the expected value {ast.unparse(made)[:60]} is built "
                    f"from the model's own class {_name(made)}, so the model's __eq__ decides the comparison (one that "
                    "always returns True passes, in one process too); compare plain values instead: its fields "
                    "(result.x == 1) or a tuple (dataclasses.astuple(result) == (1, 2))"
                )
                break
    return found


_COROUTINE_RUNNERS = (
    "asyncio.run",
    "asyncio.gather",
    "asyncio.wait",
    "asyncio.wait_for",
    "asyncio.create_task",
    "asyncio.ensure_future",
    "asyncio.shield",
    "asyncio.as_completed",
    "asyncio.run_coroutine_threadsafe",
)
_COROUTINE_METHODS = {"run_until_complete", "create_task"}  # an event loop's, a TaskGroup's


def model_coroutine_findings(tree: ast.Module, model: _ModelCode | None = None) -> list[str]:
    """Tests that await a coroutine of the model's code (``await f(1)``, ``asyncio.run(f(1))``, gather, a loop's
    run_until_complete, ``async for``/``async with`` over it): the split sandbox cannot drive a coroutine across
    the process boundary, so every run is an ``error`` that names the in-process fallback, where it runs."""
    model = model or _ModelCode(tree)
    aliases = _import_aliases(tree)

    def model_coroutines(node: ast.AST) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(map(model_coroutines, node.elts))
        if isinstance(node, ast.Starred):
            return model_coroutines(node.value)
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return model_coroutines(node.elt)
        return model.holds(node)

    found = []
    for node in ast.walk(tree):
        awaited: ast.AST | None = None
        if isinstance(node, ast.Await) and model.holds(node.value):
            awaited = node.value
        elif isinstance(node, ast.AsyncFor) and model.holds(node.iter):
            awaited = node.iter
        elif isinstance(node, ast.AsyncWith):
            awaited = next((item.context_expr for item in node.items if model.holds(item.context_expr)), None)
        elif isinstance(node, ast.Call) and (
            any(_matches(_resolved(_dotted(node.func), aliases), runner) for runner in _COROUTINE_RUNNERS)
            or (isinstance(node.func, ast.Attribute) and node.func.attr in _COROUTINE_METHODS)
        ):
            awaited = next((arg for arg in node.args if model_coroutines(arg)), None)
        if awaited is not None:
            found.append(
                f"tests line {getattr(node, 'lineno', 0)}: the tests await a coroutine of the model's code "
                f"({ast.unparse(awaited)[:60]}), but the split sandbox cannot drive a coroutine across the process "
                "boundary: every run is an error naming the in-process fallback; set trust_mode='inprocess' (weaker), "
                "which runs it, or test a synchronous entry point"
            )
    return found


def shape_findings(tests: str, trust_mode: str = "split", tests_format: str = "unittest") -> list[str]:
    """Every finding for a task's tests (empty when they do not parse: reported elsewhere)."""
    try:
        tree = parse_python(tests)
    except (SyntaxError, ValueError):
        return []
    model = _ModelCode(tree)
    split = (
        split_trust_findings(tree)
        + process_state_findings(tree)
        + measurement_findings(tree)
        + own_process_read_findings(tree)
        + model_context_findings(tree)
        + model_type_findings(tree)
        + created_file_findings(tree, model)
        + own_object_findings(tree, model)
        + iterator_argument_findings(tree, model)
        + enum_argument_findings(tree, model)
        + model_coroutine_findings(tree, model)
        + model_source_findings(tree, model)
        + class_pattern_findings(tree, model)
        + own_iterator_findings(tree, model)
        + text_run_findings(tree)
        if trust_mode == "split"
        else []
    )
    return (
        assertion_warnings(tree)
        + swallowed_failure_findings(tree)
        + unrun_test_findings(tree)
        + not_counted_findings(tree)
        + (count_mismatch_findings(tree) if tests_format == "unittest" else [])
        + model_equality_findings(tree, model)
        + split
    )
