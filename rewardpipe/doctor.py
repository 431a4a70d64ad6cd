"""Prove, before training, that every task can be scored and every component can move.

A task that fails here would feed the trainer a constant (dead) component or a silent infrastructure zero:
the reference must pass, a stub must fail, the tests must call the declared entry point, the simulator must be
able to reveal every hidden detail, and each reward component must take more than one value across
representative strategies (ask then commit, guess, loop, stall then ask).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from typing import Any, Sequence

from rewardpipe.episode import MAX_TURNS, converse, execution_job, finish_episode, start_episode, task_job
from rewardpipe.execution.result import ExecutionResult, ExecutionStatus
from rewardpipe.execution.runtime.harness import parse_python
from rewardpipe.models import Task
from rewardpipe.policies import fenced, stub_guess
from rewardpipe.rewards import Reward
from rewardpipe.simulator import RuleBasedSimulator

GENERIC_QUESTION = "Could you tell me more about the requirements?"


@dataclass
class TaskDiagnosis:
    task_id: str
    problems: list[str] = field(default_factory=list)
    component_values: dict[str, list[float]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # weak test shapes: scorable, but a model can game them

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "ok": self.ok, "problems": self.problems,
                "warnings": self.warnings, "component_values": self.component_values}


def static_problems(task: Task) -> list[str]:
    problems = []  # (an empty spec never gets here: the Task model refuses it at the input)
    try:
        tests_tree = parse_python(task.tests)
    except SyntaxError as exc:
        return problems + [f"tests do not parse: line {exc.lineno}: {exc.msg}"]
    try:
        reference_tree = parse_python(task.reference_solution)
    except SyntaxError as exc:
        return problems + [f"reference_solution does not parse: line {exc.lineno}: {exc.msg}"]
    defined = {n.name for n in ast.walk(reference_tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    if task.entry_point not in defined:
        problems.append(f"reference_solution does not define entry point '{task.entry_point}'")
    if task.tests_format == "unittest":
        names = {n.id for n in ast.walk(tests_tree) if isinstance(n, ast.Name)}
        if task.entry_point not in names:
            problems.append(f"tests never call the entry point '{task.entry_point}'")
        has_test = any(
            isinstance(node, ast.ClassDef) and any(
                isinstance(item, ast.FunctionDef) and item.name.startswith("test") for item in node.body)
            for node in tests_tree.body)
        if not has_test:
            problems.append("tests define no TestCase method named test*")
    else:
        checks = [n for n in tests_tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
        if not checks:
            problems.append("tests_format is 'check' but the tests define no check(candidate) function")
        elif len(checks[0].args.args) != 1:
            problems.append("check() must take exactly one argument (the candidate)")
        else:
            param = checks[0].args.args[0].arg
            if param not in {n.id for n in ast.walk(checks[0]) if isinstance(n, ast.Name)}:
                problems.append(f"check() never calls its candidate '{param}'")
    return problems


# --- weak test shapes (an AST lint over a task's tests; docs/tasks.md shows the safe forms) -------------

_ASSERT_PREFIXES = ("assert", "fail")


def _call_name(node: ast.AST) -> str:
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _is_difference(node: ast.AST) -> bool:
    """abs(...), math.fabs(...) or a subtraction somewhere in ``node``: the shape of a tolerance check."""
    return any(
        (isinstance(sub, ast.Call) and _call_name(sub) in {"abs", "fabs"})
        or (isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.Sub))
        for sub in ast.walk(node)
    )


def _greater_than_tolerance(node: ast.AST) -> bool:
    return (isinstance(node, ast.Compare) and any(isinstance(op, (ast.Gt, ast.GtE)) for op in node.ops)
            and _is_difference(node))


def _nan_tolerance_warnings(tree: ast.Module) -> list[str]:
    """``not (abs(got - want) > tol)`` passes for NaN, because every comparison with NaN is False."""
    found = []
    for node in ast.walk(tree):
        negated = None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and _greater_than_tolerance(node.operand):
            negated = node
        elif isinstance(node, ast.Call) and _call_name(node) == "assertFalse" and node.args \
                and _greater_than_tolerance(node.args[0]):
            negated = node
        elif isinstance(node, ast.If) and _greater_than_tolerance(node.test) and any(
                isinstance(sub, ast.Raise) or (isinstance(sub, ast.Call) and _call_name(sub).startswith("fail"))
                or (isinstance(sub, ast.Return) and isinstance(sub.value, ast.Constant) and sub.value.value is False)
                for stmt in node.body for sub in ast.walk(stmt)):
            negated = node
        if negated is not None:
            found.append(f"tests line {negated.lineno}: a tolerance check written as 'not (difference > tolerance)' "
                         "passes when the model returns NaN; assert 'difference <= tolerance' or use math.isclose")
    return found


def _model_callers(tree: ast.Module, entry_point: str, tests_format: str) -> list[tuple[ast.AST, set[str]]]:
    """Each function of the tests with the names through which it calls the model's code."""
    scopes = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = {entry_point}
            if tests_format == "check" and node.name == "check" and node.args.args:
                names.add(node.args.args[0].arg)
            scopes.append((node, names))
    return scopes


def _mutation_warnings(tree: ast.Module, entry_point: str, tests_format: str) -> list[str]:
    """An expectation computed from an argument *after* the model got it: a model that mutates its
    argument (sorts it, empties it) then agrees with the expectation by construction."""
    found = []
    for function, model_names in _model_callers(tree, entry_point, tests_format):
        calls = sorted((node for node in ast.walk(function) if isinstance(node, ast.Call)),
                       key=lambda n: (n.lineno, n.col_offset))
        handed: dict[str, tuple[int, int]] = {}  # argument name -> position of the first model call
        for call in calls:
            name = _call_name(call)
            args = [*call.args, *(kw.value for kw in call.keywords)]
            if isinstance(call.func, ast.Name) and name in model_names:
                for arg in args:
                    if isinstance(arg, ast.Name):
                        handed.setdefault(arg.id, (call.lineno, call.col_offset))
                continue
            if name.startswith(_ASSERT_PREFIXES):
                continue  # comparing the mutated argument itself with a literal is the in-place test
            derived = [arg.id for arg in args if isinstance(arg, ast.Name)]
            if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
                derived.append(call.func.value.id)
            for var in derived:
                if var in handed and handed[var] < (call.lineno, call.col_offset):
                    found.append(f"tests line {call.lineno}: the expectation {name}({var}) is computed after "
                                 f"'{var}' was handed to the model's code, which may have mutated it; compute "
                                 "it before the call, or pass a copy")
                    handed.pop(var)
    return found


def _bound_names(tree: ast.Module) -> set[str]:
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound


def _helper_warnings(tests: ast.Module, reference: ast.Module, entry_point: str) -> list[str]:
    """A name the tests read but do not define comes from the model's code at scoring time, so a
    model can redefine the helper a hand-written check relies on (``def poly(xs, x): return 0``)."""
    provided = {node.name for node in reference.body
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    provided |= {target.id for node in reference.body if isinstance(node, ast.Assign)
                 for target in node.targets if isinstance(target, ast.Name)}
    used = {node.id for node in ast.walk(tests) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    helpers = sorted((used & provided) - _bound_names(tests) - {entry_point} - set(dir(builtins)))
    return [f"tests use '{name}' without defining it: at scoring time it comes from the model's code, which "
            "can redefine it; define the helper in the tests" for name in helpers]


def weak_test_shapes(task: Task) -> list[str]:
    """Weak test shapes in a task's tests that a model under RL can exploit (see docs/tasks.md)."""
    try:
        tests = parse_python(task.tests)
        reference = parse_python(task.reference_solution)
    except SyntaxError:
        return []  # reported as a problem by static_problems
    return (_nan_tolerance_warnings(tests) + _mutation_warnings(tests, task.entry_point, task.tests_format)
            + _helper_warnings(tests, reference, task.entry_point))




class _ScenarioPolicy:
    """Plays one fixed strategy so the doctor sees every component's reachable values."""

    def __init__(self, name: str, questions: int = 0):
        self.name, self.questions = name, questions

    def next_turn(self, state, task: Task) -> str:
        turn = state.assistant_turns
        if self.name == "guess":
            return fenced(stub_guess(task))
        if self.name == "loop":
            return "Can you explain again what exactly you need?"
        if self.name == "stall_then_ask" and turn == 0:
            return "Let me think about this first."
        asked = turn - (1 if self.name == "stall_then_ask" else 0)
        if asked < self.questions:
            return GENERIC_QUESTION
        code = task.reference_solution if len(state.revealed) >= len(task.spec) else stub_guess(task)
        return fenced(code)


def diagnose(tasks: Sequence[Task], reward: Reward, executor: Any, workers: int | None = None,
             max_turns: int | None = None) -> list[TaskDiagnosis]:
    diagnoses = [TaskDiagnosis(task.task_id, static_problems(task), warnings=weak_test_shapes(task))
                 for task in tasks]

    # Reference and stub runs, batched for the whole task set.
    jobs = []
    for task in tasks:
        for label, code in (("reference", task.reference_solution), ("stub", stub_guess(task))):
            jobs.append(task_job(task, code, f"{task.task_id}:{label}"))
    results = {r.id: r for r in executor.run_batch(jobs, workers=workers)}
    simulator = RuleBasedSimulator()
    for task, diagnosis in zip(tasks, diagnoses):
        reference = results.get(f"{task.task_id}:reference")
        stub = results.get(f"{task.task_id}:stub")
        if reference is None or reference.status is not ExecutionStatus.PASSED:
            detail = f"{reference.status.value}: {reference.reason}" if reference else "no result"
            diagnosis.problems.append(f"reference solution does not pass its own tests ({detail})")
        if stub is None or stub.status is ExecutionStatus.PASSED:
            diagnosis.problems.append("a stub that returns None passes the tests: they cannot tell right from wrong")
        elif stub.status is ExecutionStatus.ERROR:
            diagnosis.problems.append(f"the harness fails on a stub solution ({stub.reason})")
        turns = max_turns or min(len(task.spec) + 3, MAX_TURNS)  # a spec holds at most MAX_TURNS - 1 items
        _check_components(task, reward, simulator, {"reference": reference, "stub": stub}, diagnosis, turns)
    return diagnoses


def _check_components(task: Task, reward: Reward, simulator: RuleBasedSimulator,
                      runs: dict[str, ExecutionResult | None], diagnosis: TaskDiagnosis, max_turns: int) -> None:
    scenarios = [_ScenarioPolicy("ask_then_commit", len(task.spec)), _ScenarioPolicy("guess"),
                 _ScenarioPolicy("loop"), _ScenarioPolicy("stall_then_ask", 1)]
    values: dict[str, set[float]] = {name: set() for name in reward.component_names}
    for policy in scenarios:
        state = start_episode(task, run_id="doctor", step=0, group_id=task.task_id,
                              rollout_id=f"{task.task_id}:{policy.name}", max_turns=max_turns)
        state = converse(state, task, policy, simulator)
        if policy.name == "ask_then_commit" and len(state.revealed) < len(task.spec):
            missing = sorted(set(range(len(task.spec))) - set(state.revealed))
            diagnosis.problems.append(f"the simulator never revealed spec item(s) {missing} to generic questions")
        job = execution_job(state, task)
        execution = None
        if job is not None:
            execution = runs["reference"] if job.code.strip() == task.reference_solution.strip() else runs["stub"]
        record = finish_episode(state, task, execution, reward)
        for name, value in record.components.items():
            if value is not None:
                values[name].add(value)
    diagnosis.component_values = {name: sorted(v) for name, v in values.items()}
    for name, seen in values.items():
        if len(seen) < 2:
            diagnosis.problems.append(f"component '{name}' takes only the value(s) {sorted(seen)}: it would be dead")
