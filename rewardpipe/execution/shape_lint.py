"""A lint of hidden-test shapes, for ``rewardpipe doctor``: what makes a test weaker than it reads, and
what the split-trust sandbox cannot run (so every rollout of the task would come back ``error``).

Only the AST of the tests is read; nothing is executed.
"""

from __future__ import annotations

import ast

from rewardpipe.execution.runtime.harness import parse_python

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


def split_trust_findings(tree: ast.Module) -> list[str]:
    """Shapes the split sandbox reports as ``error`` (the task needs ``trust_mode="inprocess"``): tests
    that import the model's module or patch a name in it, whose code is in another process."""
    found = []
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
        if reaches:
            found.append(
                f"tests line {node.lineno}: the tests import or patch the model's module "
                f"'{_MODEL_MODULE}', which the split sandbox runs in another process: every run is an "
                "error; set trust_mode='inprocess' (weaker) or test through the entry point"
            )
    return found


def shape_findings(tests: str, trust_mode: str = "split") -> list[str]:
    """Every finding for a task's tests (empty when they do not parse: reported elsewhere)."""
    try:
        tree = parse_python(tests)
    except (SyntaxError, ValueError):
        return []
    return assertion_warnings(tree) + (split_trust_findings(tree) if trust_mode == "split" else [])
