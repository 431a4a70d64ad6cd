"""Static screening of model code for the in-process fallback mode.

In ``inprocess`` mode the hidden tests run beside the model's code, so the code could patch the test
runner or read the tests. The split mode makes that impossible; this screen only raises the bar for the
fallback by rejecting the constructs every known in-process reward hack needs. It is a deny-list and
therefore incomplete by nature: use ``inprocess`` only for tasks whose tests cannot run split.
"""

from __future__ import annotations

import ast

from rewardpipe.execution.runtime.harness import parse_python

SUSPICIOUS_NAMES = {
    "unittest",
    "sys",
    "gc",
    "ctypes",
    "inspect",
    "builtins",
    "importlib",
    "__import__",
    "exec",
    "eval",
    "compile",
    "globals",
    "locals",
    "vars",
    "getattr",
    "setattr",
    "delattr",
    "open",
    "os",
    "subprocess",
    "signal",
    "traceback",
    "__builtins__",
    "breakpoint",
    "threading",
    "multiprocessing",
    "atexit",
    "io",
    "faulthandler",
    "marshal",
    "pickle",
    "types",
}
SUSPICIOUS_ATTRIBUTES = {
    "_getframe",
    "f_back",
    "f_code",
    "f_locals",
    "f_globals",
    "f_lasti",
    "co_consts",
    "co_code",
    "tb_frame",
    "gi_frame",
    "__subclasses__",
    "__globals__",
    "__code__",
    "__closure__",
    "__dict__",
    "__class__",
    "__bases__",
    "__mro__",
    "__builtins__",
    "__import__",
    "_exit",
    "stderr",
    "stdout",
    "modules",
    "TestCase",
    "TestResult",
    "TextTestRunner",
    "TestLoader",
    "SkipTest",
    "addFailure",
    "addError",
    "__reduce__",
    "__setattr__",
    "__getattribute__",
    "__del__",
}


def screen(code: str) -> list[str]:
    """Reasons the code is unfit for in-process testing; empty when nothing suspicious was found."""
    try:
        tree = parse_python(code)
    except SyntaxError:
        return []  # a syntax error fails on its own when the code is loaded
    except (ValueError, RecursionError, MemoryError) as exc:
        # Code built to break the parser (absurd nesting) is the model's doing: rejected, never a
        # harness crash that would drop the rollout as an infrastructure error.
        return [f"the code cannot be parsed for screening ({type(exc).__name__})"]
    findings: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in SUSPICIOUS_NAMES:
            findings.append(f"name {node.id!r} (line {node.lineno})")
        elif isinstance(node, ast.Attribute) and node.attr in SUSPICIOUS_ATTRIBUTES:
            findings.append(f"attribute .{node.attr} (line {node.lineno})")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                if module.split(".")[0] in SUSPICIOUS_NAMES:
                    findings.append(f"import of {module!r} (line {node.lineno})")
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and any(n in SUSPICIOUS_NAMES for n in node.names):
            findings.append(f"rebinding a sensitive name (line {node.lineno})")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and any(marker in node.value for marker in ("__subclasses__", "_getframe", "co_consts", "__import__"))
        ):
            findings.append(f"string naming an introspection hook (line {node.lineno})")
        elif isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(raised, ast.Name) and raised.id in {
                "SystemExit",
                "KeyboardInterrupt",
                "BaseException",
                "GeneratorExit",
            }:
                findings.append(f"raises {raised.id} (line {node.lineno})")
        elif isinstance(node, ast.ClassDef):
            for base in node.bases:
                if isinstance(base, ast.Name) and base.id in {
                    "BaseException",
                    "SystemExit",
                    "KeyboardInterrupt",
                    "GeneratorExit",
                }:
                    findings.append(f"class derives from {base.id} (line {node.lineno})")
    return findings[:10]
