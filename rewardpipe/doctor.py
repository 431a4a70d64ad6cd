"""Prove, before training, that every task can be scored and every component can move, for any environment.

``doctor`` plays each task through every scenario of ``env.scenarios(task)`` (one is named ``reference``) with
the real loop and the real sandbox, scores each with the reward, and checks (errors, exit 1):

* ``component_never_varies``: a component takes fewer than 2 distinct values across a task's scenarios
  (it would be dead);
* ``reference_not_best``: the reference scenario leaves an outcome component below its range's maximum, or
  ends in an error record;
* ``out_of_range``: a value outside the component's declared range;
* ``component_raised`` / ``component_timeout`` / ``unexplained_none``: a component that raised, passed its
  ``timeout_s``, or came back None without an explanation (the reward's explain_error);
* ``component_mutated_input``: a component that changed the messages, task, state or execution it was given
  (the components after it and the stored record would see the change);
* ``not_deterministic``: two plays of the reference scenario differ;
* ``state_not_json`` / ``state_mutated``: a state that does not survive a JSON round trip after some step,
  or a hook (``on_policy_turn``, ``respond``, ``execution_job``, ``metrics``, ``transcript_fields``) that changed
  the state it was given;
* ``task_mutated``: a hook (``start`` too) that changed the task it was given, which every rollout
  of it shares;
* ``scenario_failed``: a scenario's policy, or the environment, failed;
* ``replay_failed``: the environment's ``replay()`` given a play's own messages raised, or rebuilt other messages
  or another execution job (``rewardpipe score`` would score each recording as something else, or not at all);
* ``metrics_failed``: the environment's ``metrics()`` raised or returned what a record cannot hold (a run keeps
  the score and says so only in each record's ``env_metrics_error``);
* ``transcript_fields_failed``: the environment's ``transcript_fields()`` raised, returned no dict, a field a
  transcript does not hold or one of the wrong shape (a run leaves it out of every transcript without a word);
* ``bad_tests``: the reference scenario's execution job has tests that cannot run (they do not parse, never
  call the entry point...);
* whatever the environment's own ``check_task`` finds (the ask-before-coding environment: the reference
  solution passes, a stub fails, the simulator reveals every hidden detail).

Warnings (exit 0): ``weak_tests`` (test shapes a model can game, docs/tasks.md), ``gated`` (a component is
constant whenever the outcome is at its minimum), ``cancels`` (two components whose weighted sum never
moves). ``rewardpipe.testing.check_environment`` runs the same checks inside pytest.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Protocol

from rewardpipe.execution.runtime.harness import (
    HarnessError,
    is_fractional_number,
    is_test_method,
    parse_python,
    parse_stdio_suite,
    parse_stdio_tests,
)
from rewardpipe.execution.shape_lint import shape_findings
from rewardpipe.models import NOT_A_SCORE_KINDS
from rewardpipe.rewards.base import how_failed

VALUE_TOLERANCE = 1e-9


class TestedCode(Protocol):
    """What the test-shape lints read: a job's tests and the reference code they are meant to pass."""

    tests: str
    reference_solution: str
    entry_point: str
    tests_format: str


@dataclass(frozen=True)
class Finding:
    check: str
    message: str
    severity: str = "error"  # or "warning"


@dataclass
class TaskDiagnosis:
    task_id: str
    problems: list[str] = field(default_factory=list)
    component_values: dict[str, list[float]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # scorable, but a model can game it / a component may starve
    findings: list[Finding] = field(default_factory=list)

    def add(self, check: str, message: str, severity: str = "error") -> None:
        self.findings.append(Finding(check, message, severity))
        (self.problems if severity == "error" else self.warnings).append(message)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "ok": self.ok,
            "problems": self.problems,
            "warnings": self.warnings,
            "component_values": self.component_values,
            "findings": [{"check": f.check, "severity": f.severity, "message": f.message} for f in self.findings],
        }


def static_problems(task: TestedCode) -> list[str]:
    problems: list[str] = []  # (an empty spec never gets here: the Task model refuses it at the input)
    if task.tests_format == "stdio":  # JSON cases and a whole program: no entry point, no test code to lint
        return _stdio_problems(task)
    try:
        tests_tree = parse_python(task.tests)
    except SyntaxError as exc:
        return [*problems, f"tests do not parse: line {exc.lineno}: {exc.msg}"]
    try:
        reference_tree = parse_python(task.reference_solution)
    except SyntaxError as exc:
        return [*problems, f"reference_solution does not parse: line {exc.lineno}: {exc.msg}"]
    defined = {
        n.name for n in ast.walk(reference_tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    if task.entry_point not in defined:
        problems.append(f"reference_solution does not define entry point '{task.entry_point}'")
    if task.tests_format == "unittest":
        names = {n.id for n in ast.walk(tests_tree) if isinstance(n, ast.Name)}
        if task.entry_point not in names:
            problems.append(f"tests never call the entry point '{task.entry_point}'")
        has_test = any(  # def and async def: what the sandbox counts (an IsolatedAsyncioTestCase's tests run)
            isinstance(node, ast.ClassDef) and any(is_test_method(item) for item in node.body)
            for node in tests_tree.body
        )
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


def _stdio_problems(task: TestedCode) -> list[str]:
    problems = []
    try:
        parse_stdio_tests(task.tests)
    except HarnessError as exc:
        problems.append(f"tests: {exc}")
    try:
        parse_python(task.reference_solution)
    except SyntaxError as exc:
        problems.append(f"reference_solution does not parse: line {exc.lineno}: {exc.msg}")
    return problems


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
    return (
        isinstance(node, ast.Compare)
        and any(isinstance(op, (ast.Gt, ast.GtE)) for op in node.ops)
        and _is_difference(node)
    )


def _nan_tolerance_warnings(tree: ast.Module) -> list[str]:
    """``not (abs(got - want) > tol)`` passes for NaN, because every comparison with NaN is False."""
    found = []
    for node in ast.walk(tree):
        negated = None
        if (
            (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and _greater_than_tolerance(node.operand))
            or (
                isinstance(node, ast.Call)
                and _call_name(node) == "assertFalse"
                and node.args
                and _greater_than_tolerance(node.args[0])
            )
            or (
                isinstance(node, ast.If)
                and _greater_than_tolerance(node.test)
                and any(
                    isinstance(sub, ast.Raise)
                    or (isinstance(sub, ast.Call) and _call_name(sub).startswith("fail"))
                    or (
                        isinstance(sub, ast.Return) and isinstance(sub.value, ast.Constant) and sub.value.value is False
                    )
                    for stmt in node.body
                    for sub in ast.walk(stmt)
                )
            )
        ):
            negated = node
        if negated is not None:
            found.append(
                f"tests line {negated.lineno}: a tolerance check written as 'not (difference > tolerance)' "
                "passes when the model returns NaN; assert 'difference <= tolerance' or use math.isclose"
            )
    return found


def _model_callers(tree: ast.Module, entry_point: str, tests_format: str) -> list[tuple[ast.AST, set[str]]]:
    """Each function of the tests with the names through which it calls the model's code."""
    scopes: list[tuple[ast.AST, set[str]]] = []
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
        calls = sorted(
            (node for node in ast.walk(function) if isinstance(node, ast.Call)), key=lambda n: (n.lineno, n.col_offset)
        )
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
                    found.append(
                        f"tests line {call.lineno}: the expectation {name}({var}) is computed after "
                        f"'{var}' was handed to the model's code, which may have mutated it; compute "
                        "it before the call, or pass a copy"
                    )
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
    provided = {
        node.name for node in reference.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    provided |= {
        target.id
        for node in reference.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    used = {node.id for node in ast.walk(tests) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    helpers = sorted((used & provided) - _bound_names(tests) - {entry_point} - set(dir(builtins)))
    return [
        f"tests use '{name}' without defining it: at scoring time it comes from the model's code, which "
        "can redefine it; define the helper in the tests"
        for name in helpers
    ]


def _own_entry_point_warnings(tests: ast.Module, entry_point: str, tests_format: str) -> list[str]:
    """unittest tests that bind the entry point's name at module level (a copied reference, a prompt's stub, an
    import) call that, never the model's function, so every answer gets its verdict (round twenty-seven; ``check``
    tests are given the model's entry point, whatever the tests define)."""
    if tests_format != "unittest":
        return []
    for node in tests.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = {node.name}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = {name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}
        else:
            continue
        if entry_point in names:
            return [
                f"tests line {node.lineno}: the tests define the entry point '{entry_point}' themselves, so their "
                "calls reach that and never the model's function: every answer gets its verdict; remove it (the "
                "tests call the model's function by name)"
            ]
    return []


def _stdio_float_warnings(tests: str) -> list[str]:
    """Expected outputs holding fractional numbers, compared exactly: a right program printing 0.3333333333 where
    the case says 0.333333 fails, and the group's right answers score like wrong ones."""
    try:
        suite = parse_stdio_suite(tests)
    except HarnessError:
        return []  # reported as a problem by static_problems
    if suite.float_tolerance is not None:
        return []
    for index, (_, expected) in enumerate(suite.cases):
        token = next((t for t in expected.split() if is_fractional_number(t)), None)
        if token is not None:
            shown = token[:40].decode("utf-8", "replace")
            return [
                f"stdio case {index} expects {shown!r} and the cases are compared exactly: a right program "
                "printing the number with other digits fails; give the tests as "
                '{"cases": [...], "float_tolerance": 1e-6} if the problem accepts an error'
            ]
    return []


def weak_test_shapes(task: TestedCode) -> list[str]:
    """Weak test shapes in a task's tests that a model under RL can exploit (see docs/tasks.md)."""
    if task.tests_format == "stdio":
        return _stdio_float_warnings(task.tests)  # no test code: the scorer compares each case's output itself
    try:
        tests = parse_python(task.tests)
        reference = parse_python(task.reference_solution)
    except SyntaxError:
        return []  # reported as a problem by static_problems
    return (
        _nan_tolerance_warnings(tests)
        + _mutation_warnings(tests, task.entry_point, task.tests_format)
        + _helper_warnings(tests, reference, task.entry_point)
        + _own_entry_point_warnings(tests, task.entry_point, task.tests_format)
        + shape_findings(task.tests, getattr(task, "trust_mode", "split"), task.tests_format)
    )


@dataclass
class ScenarioRun:
    """One scenario played on one task: its final state, its execution job and result, and its record
    (``error`` names a failure of the scenario's policy or of the environment)."""

    name: str
    state: Any = None
    job: Any = None
    execution: Any = None
    record: Any = None
    error: str | None = None
    problems: list[Finding] = field(default_factory=list)


def stored_text(state: Any) -> str:
    """``state`` as the JSON text AWS stores between turns (``rewardpipe.aws.state.wire_json``): a lone surrogate
    in the model's text written as its ``\\u`` escape. Pydantic's own JSON writer refuses one anywhere, so a
    scripted turn holding one (what a hostile model writes, and `run` scores) was a false ``state_not_json``."""
    from rewardpipe.aws.state import wire_json

    return wire_json(state.model_dump(mode="json"))


def _state_problem(env: Any, state: Any) -> str | None:
    """Why ``state`` does not survive a JSON round trip (None when it does): the first of the environment's own
    fields that does not, named as a run's error names it (pydantic's first line, "1 validation error for
    MyState", named no field), else what breaks the round trip."""
    from rewardpipe.episode import _BASE_FIELDS, _json_problem

    try:
        named = _json_problem(state, [name for name in type(state).model_fields if name not in _BASE_FIELDS])
    except Exception:  # noqa: BLE001 - the round trip below says what breaks
        named = None
    if named is not None:
        return named
    try:
        text = stored_text(state)
        again = type(state).model_validate(json.loads(text))
        if again.model_dump(mode="json") != json.loads(text):
            return "it reads back different from what was written"
        if not isinstance(state, env.state_model):
            return f"it is a {type(state).__name__}, not the environment's state_model {env.state_model.__name__}"
    except Exception as exc:  # noqa: BLE001 - whatever breaks the round trip is the finding
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


class _Watch:
    """``converse``'s pause hook, used to look at the state before every turn: it must survive JSON, and
    the state handed to the previous step must not have been changed by it."""

    def __init__(self, env: Any, run: ScenarioRun) -> None:
        self.env, self.run = env, run
        self.previous: tuple[Any, str] | None = None

    def look(self, state: Any) -> None:
        if self.previous is not None:
            before, text = self.previous
            try:
                changed = before is not state and stored_text(before) != text
            except Exception:  # noqa: BLE001 - changed into something that cannot even be written
                changed = True
            if changed:
                self._add("state_mutated", "a hook changed the state it was given (hooks must return a new state)")
        problem = _state_problem(self.env, state)
        if problem is not None:
            self._add(
                "state_not_json", f"the state after turn {state.assistant_turns} does not survive JSON: {problem}"
            )
        self.previous = (state, stored_text(state)) if problem is None else None

    def __call__(self, state: Any) -> bool:
        self.look(state)
        return False

    def changed_by(self, hook: str, what: str) -> None:
        from rewardpipe.episode import hook_location

        defined = hook_location(getattr(self.env, "_doctor_env", self.env), hook)
        at = f" ({hook}() is at {defined})" if defined else ""  # as a hook's failure names its definition
        if what == "state":
            self._add("state_mutated", f"{hook}() changed the state it was given (hooks must return a new state){at}")
        else:
            self._add(
                "task_mutated",
                f"{hook}() changed the task it was given, which every rollout of the task shares (keep an "
                f"episode's data in its state){at}",
            )

    def _add(self, check: str, message: str) -> None:
        if not any(f.check == check for f in self.run.problems):
            self.run.problems.append(Finding(check, f"scenario '{self.run.name}': {message}"))


def _written(value: Any) -> str | None:
    """``value`` (a state or a task) as JSON, to compare before and after a hook; None when it cannot be written
    (a state: state_not_json says so)."""
    try:
        return stored_text(value)
    except Exception:  # noqa: BLE001 - whatever keeps it from being written
        return None


class _Watched:
    """The environment as doctor plays it: each hook must leave the state and the task it was given as they were
    (``start``, ``on_policy_turn``, ``respond``, ``execution_job``). The platform hands ``on_policy_turn`` and
    ``respond`` a copy of the state, so the paused states :class:`_Watch` compares never showed a field set on it;
    and the task, shared by every rollout of it, was never compared at all. Every other attribute is the
    environment's own. One for all the plays of a :func:`diagnose` (a hook's calls past ``hook_timeout_s`` are
    counted per environment object); :meth:`report_to` names the play its findings go to."""

    _HOOKS = frozenset({"start", "on_policy_turn", "respond", "execution_job", "metrics", "transcript_fields"})

    def __init__(self, env: Any) -> None:
        self.__dict__["_doctor_env"] = env
        self.__dict__["_doctor_watch"] = None

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._doctor_env, name)
        watch = self._doctor_watch
        if name not in self._HOOKS or watch is None or not callable(value):
            return value

        def watched(*args: Any) -> Any:
            given = args[:1] if name == "start" else args[:2]  # (task) or (state, task)
            before = [_written(arg) for arg in given]
            result = value(*args)
            for arg, text in zip(given, before, strict=True):
                if text is not None and _written(arg) != text:  # (one that no longer writes has changed too)
                    watch.changed_by(name, "task" if arg is given[-1] else "state")
            return result

        return watched

    @staticmethod
    def report_to(env: Any, watch: _Watch) -> None:
        if isinstance(env, _Watched):
            env.__dict__["_doctor_watch"] = watch


def _hook_failed(env: Any, hook: str, exc: BaseException) -> str:
    """``HOOK() failed: Type: message (at file:line)``: a hook's failure as doctor says it, with the line of the
    user's file that raised (or, for the platform's word on what the hook did, where the hook is defined), as a run's
    error record names it. Without it, doctor said a user's start(), execution_job(), scenarios(),
    transcript_fields(), replay() or check_task() failed and not where, though the run's record of it did."""
    from rewardpipe.episode import EpisodeError, HookTimeout, hook_failure, hook_location
    from rewardpipe.rewards.base import user_location

    if isinstance(exc, HookTimeout):  # worded as a run's record words the same hang, not after the class name
        return hook_failure(getattr(env, "_doctor_env", env), hook, exc)
    text = f"{type(exc).__name__}: {exc}"
    where = user_location(exc)
    if where is not None:
        return f"{hook}() failed: {text} (at {where})"
    defined = hook_location(getattr(env, "_doctor_env", env), hook)  # doctor plays a watching wrapper
    said = text if isinstance(exc, EpisodeError) and f"{hook}()" in text else f"{hook}() failed: {text}"
    return f"{said} ({hook}() is at {defined})" if defined and defined not in text else said


def _play(env: Any, task: Any, name: str, policy: Any, max_turns: int | None, run_id: str) -> ScenarioRun:
    from rewardpipe.episode import ConversationError, converse, execution_job, start_episode
    from rewardpipe.policies import BoundedPlayer

    run = ScenarioRun(name)
    watch = _Watch(env, run)
    _Watched.report_to(env, watch)
    turns = max_turns or getattr(policy, "max_turns", None) or env.max_turns
    if getattr(env, "hook_timeout_s", None) is not None:  # the player is the environment's code, as its hooks are
        policy = BoundedPlayer(policy, env.hook_timeout_s)
    try:
        state = start_episode(
            task,
            env=env,
            run_id=run_id,
            step=0,
            group_id=task.task_id,
            rollout_id=f"{task.task_id}:{name}",
            max_turns=turns,
        )
    except Exception as exc:  # noqa: BLE001
        run.error = _hook_failed(env, "start", exc)
        return run
    try:
        state = converse(state, task, policy, env, pause=watch)
    except ConversationError as exc:
        run.state = exc.state
        run.error = f"{exc.kind}: {exc}"
        return run
    watch.look(state)
    run.state = state
    try:
        run.job = execution_job(state, task, env)
    except Exception as exc:  # noqa: BLE001
        run.error = _hook_failed(env, "execution_job", exc)
    return run


def _job_key(job: Any) -> str:
    return job.model_dump_json(exclude={"id"})


def diagnose(
    tasks: Sequence[Any],
    env: Any,
    executor: Any,
    *,
    reward: Any = None,
    workers: int | None = None,
    max_turns: int | None = None,
) -> list[TaskDiagnosis]:
    """One :class:`TaskDiagnosis` per task (see the module docstring); ``reward`` defaults to the
    environment's, ``max_turns`` to each scenario's own limit, else the environment's."""
    from rewardpipe.episode import env_scenarios, episode_metrics, finish_episode
    from rewardpipe.rewards.mutation import changed_inputs, mutating_components, pristine_copy, written_down

    reward = reward if reward is not None else env.reward
    played: Any = _Watched(env)  # the environment, as the episode functions take it
    diagnoses, plays = [], []
    for task in tasks:
        diagnosis = TaskDiagnosis(task.task_id)
        diagnoses.append(diagnosis)
        try:
            scenarios = dict(env_scenarios(env, task))  # bounded by hook_timeout_s, as every hook is
        except Exception as exc:  # noqa: BLE001
            diagnosis.add("scenario_failed", _hook_failed(env, "scenarios", exc))
            scenarios = {}
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - sys.exit() too: the environment's, this task's finding
            diagnosis.add("scenario_failed", f"scenarios() {how_failed(exc)}")
            scenarios = {}
        if not scenarios and not diagnosis.problems:
            # none to play (the default scenarios() gives none): said once, not as a "no value" per component
            diagnosis.add(
                "reference_not_best",
                "the environment gives no scenarios for this task: define scenarios(task) returning named "
                "ScriptedPolicy players, one named 'reference' (the best play); doctor plays them all",
            )
        elif "reference" not in scenarios:
            diagnosis.add(
                "reference_not_best",
                "the environment names no 'reference' scenario for this task (scenarios(task) must return one)",
            )
        runs = {name: _play(played, task, name, policy, max_turns, "doctor") for name, policy in scenarios.items()}
        again = (
            _play(played, task, "reference", scenarios["reference"], max_turns, "doctor")
            if "reference" in scenarios
            else None
        )
        plays.append((task, diagnosis, runs, again))

    # Every execution job of every task in one batch; a job met twice (two scenarios committing the same
    # code) runs once.
    unique: dict[str, Any] = {}
    for _, _, runs, _ in plays:
        for run in runs.values():
            if run.job is not None:
                unique.setdefault(_job_key(run.job), run.job)
    results: dict[str, Any] = {}
    if unique:
        keys = list(unique)
        try:
            outcomes = list(executor.run_batch([unique[k] for k in keys], workers=workers))
        except Exception as exc:  # noqa: BLE001 - the sandbox failed: every execution is missing, and said so
            outcomes = [None] * len(keys)
            for _, diagnosis, _, _ in plays:
                diagnosis.add("scenario_failed", f"the sandbox failed: {type(exc).__name__}: {exc}")
        results = dict(zip(keys, outcomes, strict=True))

    for task, diagnosis, runs, again in plays:
        for run in runs.values():
            if run.job is not None:
                run.execution = results.get(_job_key(run.job))
            if run.error is None and run.state is not None:
                # the environment's metrics() first, watched as its other hooks are (a change it made was blamed
                # on the reward below); then the scoring alone
                _Watched.report_to(played, _Watch(env, run))
                metrics = episode_metrics(run.state, task, played)
                _metrics_failed(metrics, run)
                inputs = {"messages": run.state.messages, "task": task, "state": run.state, "execution": run.execution}
                pristine, before = pristine_copy(inputs), written_down(inputs)
                run.record = finish_episode(run.state, task, run.execution, reward, env, env_metrics=metrics)
                if pristine is not None and changed_inputs(before, inputs):
                    for finding in mutating_components(reward, pristine):
                        diagnosis.add("component_mutated_input", f"scenario '{run.name}': {finding}")
                # after the scoring, as a transcript is written (a change they make is not the reward's)
                _transcript_fields(played, task, run)  # watched too: what the run's transcripts would hold
                _replay(env, task, run)  # what `rewardpipe score` makes of this play's recording
        _check_task(env, task, reward, diagnosis, runs, again)
    return diagnoses


def _metrics_failed(metrics: dict[str, Any], run: ScenarioRun) -> None:
    """A ``metrics()`` that raised or gave what a record cannot hold: a run keeps the score and says so only in each
    record's ``env_metrics_error``, so doctor says it (``metrics_failed``)."""
    error = metrics.get("env_metrics_error")
    if error is None:
        return
    said = error if "metrics()" in error else f"metrics() raised {error}"
    run.problems.append(
        Finding("metrics_failed", f"scenario '{run.name}': {said} (every record says env_metrics_error instead)")
    )


def _transcript_fields(env: Any, task: Any, run: ScenarioRun) -> None:
    """``transcript_fields()`` called as a transcript is written: a run leaves out, without a word, what a failing
    one would have given and every field a transcript cannot hold, so each is a ``transcript_fields_failed``."""
    from pydantic import ValidationError

    from rewardpipe.episode import call_hook
    from rewardpipe.transcripts import ENVIRONMENT_FIELDS, _field_adapter

    def failed(message: str) -> None:
        run.problems.append(
            Finding("transcript_fields_failed", f"scenario '{run.name}': {message} (left out of every transcript)")
        )

    try:
        given = call_hook(env, "transcript_fields", run.state, task)
    except Exception as exc:  # noqa: BLE001 - the environment's failure (sys.exit(), past hook_timeout_s: call_hook's)
        failed(_hook_failed(env, "transcript_fields", exc))
        return
    if not isinstance(given, dict):
        failed(f"transcript_fields() must return a dict, returned {type(given).__name__}")
        return
    unknown = [repr(name) for name in given if name not in ENVIRONMENT_FIELDS]
    if unknown:
        failed(
            f"transcript_fields() returned {', '.join(unknown[:5])}, which a transcript does not hold (it may set "
            f"{', '.join(ENVIRONMENT_FIELDS)})"
        )
    for name in (name for name in ENVIRONMENT_FIELDS if name in given):
        try:
            _field_adapter(name).validate_python(given[name])
        except ValidationError as exc:  # the shape it has not, said
            first = exc.errors()[0]
            where = "".join(f"[{part}]" for part in first["loc"])
            failed(f"transcript_fields()'s {name}{where} is not what a transcript holds: {first['msg']}")


def _replay(env: Any, task: Any, run: ScenarioRun) -> None:
    """``replay(task, messages)`` given the play's own messages, as ``rewardpipe score`` gives a recording: it must
    rebuild the conversation and the execution job the play had (``replay_failed``), or every recording of the
    environment is scored as something else or is a replay_failed error record. An environment calling an LLM with
    the default replay is skipped (``score`` refuses it, saying why)."""
    from rewardpipe.environment import Environment
    from rewardpipe.episode import env_replay, execution_job

    if env.calls_llm and getattr(type(env), "replay", None) is Environment.replay:
        return

    def failed(message: str) -> None:
        run.problems.append(
            Finding("replay_failed", f"scenario '{run.name}': {message} (what `rewardpipe score` does to a recording)")
        )

    with contextlib.suppress(Exception):  # a hook changing it is task_mutated's finding: not passed to the next play
        task = copy.deepcopy(task)
    try:
        state = env_replay(env, task, list(run.state.messages))
        job = execution_job(state, task, env)
    except Exception as exc:  # noqa: BLE001 - the environment's failure, this task's finding
        failed(f"given the play's own messages, {_hook_failed(env, 'replay', exc)}")
        return
    played = [m.model_dump() for m in run.state.messages]
    replayed = [m.model_dump() for m in getattr(state, "messages", [])]
    if replayed != played:
        at = next(
            (i for i, (a, b) in enumerate(zip(played, replayed, strict=False)) if a != b),
            min(map(len, (played, replayed))),
        )
        failed(
            f"replay() of the play's {len(played)} messages rebuilt {len(replayed)}, differing from message {at + 1}"
        )
    elif (None if job is None else _job_key(job)) != (None if run.job is None else _job_key(run.job)):
        failed("replay() of the play's messages gives another execution job than the play had")


def _lint(diagnosis: TaskDiagnosis, run: ScenarioRun | None) -> None:
    """The reference job's tests: problems that make every execution an error, and weak shapes."""
    job = run.job if run is not None else None
    if job is None:
        return
    code = SimpleNamespace(
        tests=job.tests,
        reference_solution=job.code,
        entry_point=job.entry_point,
        tests_format=job.tests_format,
        trust_mode=getattr(job, "trust_mode", "split"),  # (the split-only findings are not an in-process job's)
    )
    for problem in static_problems(code):
        diagnosis.add("bad_tests", problem)
    for warning in weak_test_shapes(code):
        diagnosis.add("weak_tests", warning, "warning")


# Error records of a value that is no score (not finite, or beyond the magnitude any reward reaches).
_NOT_A_SCORE = NOT_A_SCORE_KINDS


def _bare_state_model(env: Any, diagnosis: TaskDiagnosis, runs: dict[str, ScenarioRun]) -> None:
    """An environment that set no ``state_model`` plays bare :class:`EpisodeState` objects: every hook or
    component reading a field of its own fails with "'EpisodeState' object has no attribute ...", and nothing
    said why. Said once a task, beside those failures."""
    from rewardpipe.environment import EpisodeState

    if env.state_model is not EpisodeState:
        return
    missing = f"'{EpisodeState.__name__}' object has no attribute"
    failed = [run.error or "" for run in runs.values()]
    failed += [run.record.error.message for run in runs.values() if run.record is not None and run.record.error]
    if any(missing in text for text in failed):
        diagnosis.add(
            "scenario_failed",
            f"environment '{env.name}' sets no state_model, so its states are bare EpisodeStates without the fields "
            f"its hooks or components read: give the class state_model = <its EpisodeState subclass>",
        )


def _check_task(
    env: Any, task: Any, reward: Any, diagnosis: TaskDiagnosis, runs: dict[str, ScenarioRun], again: ScenarioRun | None
) -> None:
    from rewardpipe.episode import call_hook

    reference = runs.get("reference")
    _lint(diagnosis, reference)
    try:
        for problem in call_hook(env, "check_task", task, runs):  # bounded by hook_timeout_s, as every hook is
            if isinstance(problem, Finding):  # a check of its own, maybe only a warning
                diagnosis.add(problem.check, problem.message, problem.severity)
            else:
                diagnosis.add("environment", problem)
    except Exception as exc:  # noqa: BLE001
        diagnosis.add("environment", _hook_failed(env, "check_task", exc))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - sys.exit(), CancelledError: this task's finding, not doctor's end
        diagnosis.add("environment", f"check_task() {how_failed(exc)}")
    for run in runs.values():
        for finding in run.problems:
            diagnosis.add(finding.check, finding.message)
        if run.error is not None:
            diagnosis.add("scenario_failed", f"scenario '{run.name}' failed: {run.error}")
    _bare_state_model(env, diagnosis, runs)
    components = {c.name: c for c in reward.components}
    values: dict[str, set[float]] = {name: set() for name in components}
    per_run: dict[str, dict[str, float | None]] = {}
    for run in runs.values():
        record = run.record
        if record is None:
            continue
        per_run[run.name] = dict(record.components)
        if record.error is not None and record.error.kind in ("component_raised", "component_timeout"):
            diagnosis.add(record.error.kind, f"scenario '{run.name}': {record.error.message}")
        elif record.error is not None and record.error.kind in _NOT_A_SCORE:
            # NaN, an infinity or an absurd number: the value is left out of the record, so it was never seen
            # below; only the reference scenario's error record was named
            diagnosis.add("out_of_range", f"scenario '{run.name}': {record.error.message}")
        elif record.error is not None and record.error.kind == "component_unavailable":
            diagnosis.add(
                "unexplained_none",
                f"scenario '{run.name}': {record.error.message} (return None only for "
                f"a reason that is not the model's, and say which: explain_error)",
            )
        for name, value in record.components.items():
            if value is None or name not in components:
                continue
            values[name].add(value)
            lo, hi = components[name].value_range
            if not lo - VALUE_TOLERANCE <= value <= hi + VALUE_TOLERANCE:
                diagnosis.add(
                    "out_of_range",
                    f"scenario '{run.name}': component '{name}' is {value:g}, outside its "
                    f"declared range [{lo:g}, {hi:g}]",
                )
    if reference is not None and reference.record is not None:
        record = reference.record
        if record.status == "error":
            diagnosis.add(
                "reference_not_best",
                f"the reference scenario ends in an error record ({record.error.kind}: {record.error.message})",
            )
        else:
            for name in reward.outcome_components:
                value, hi = record.components.get(name), components[name].value_range[1]
                if value is not None and value < hi - VALUE_TOLERANCE:
                    diagnosis.add(
                        "reference_not_best",
                        f"the reference scenario leaves outcome '{name}' at {value:g}, below its maximum {hi:g}",
                    )
    if reference is not None and again is not None and reference.state is not None and again.state is not None:
        try:
            first: str | None = stored_text(reference.state)
            second: str | None = stored_text(again.state)
        except Exception:  # noqa: BLE001 - a state that cannot be written is reported as state_not_json
            first = second = None
        jobs = [None if r.job is None else _job_key(r.job) for r in (reference, again)]
        if first != second or jobs[0] != jobs[1]:
            diagnosis.add(
                "not_deterministic",
                "two plays of the reference scenario differ (use ctx.seed for randomness, and keep an episode's "
                "data in its state, not on the environment, which every rollout shares: the same rollout and turn "
                "must give the same result)",
            )
    diagnosis.component_values = {name: sorted(seen) for name, seen in values.items()}
    for name, seen in values.items():
        if not runs:  # no scenario was played: said once above (no scenarios, or scenarios() failed)
            break
        if not seen:  # every play of it ended without a value: the failures above say why
            diagnosis.add(
                "component_never_varies",
                f"component '{name}' took no value in any scenario (each ended in an error or failed), so whether "
                f"it varies is unknown",
            )
        elif len(seen) < 2:
            diagnosis.add(
                "component_never_varies", f"component '{name}' takes only the value(s) {sorted(seen)}: it would be dead"
            )
    _warnings(reward, diagnosis, per_run, components)


def _warnings(
    reward: Any, diagnosis: TaskDiagnosis, per_run: dict[str, dict[str, float | None]], components: dict[str, Any]
) -> None:
    scored = [values for values in per_run.values() if all(v is not None for v in values.values())]
    outcomes = reward.outcome_components
    at_minimum = [
        values
        for values in scored
        if outcomes and all(abs(values[o] - components[o].value_range[0]) <= VALUE_TOLERANCE for o in outcomes)
    ]
    if len(at_minimum) >= 2:
        for name in components:
            if name in outcomes:
                continue
            if len({values[name] for values in at_minimum}) == 1 and len({values[name] for values in scored}) > 1:
                diagnosis.add(
                    "gated",
                    f"component '{name}' moves only when an outcome is above its minimum: "
                    f"gated behind the outcome, it goes dead whenever the outcome does",
                    "warning",
                )
    names = list(components)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if len(scored) < 2 or len({v[a] for v in scored}) < 2 or len({v[b] for v in scored}) < 2:
                continue
            sums = {round(components[a].weight * v[a] + components[b].weight * v[b], 9) for v in scored}
            if len(sums) == 1:
                diagnosis.add(
                    "cancels",
                    f"components '{a}' and '{b}' cancel: their weighted sum is the same in every scenario",
                    "warning",
                )
