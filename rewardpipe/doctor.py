"""Prove, before training, that every task can be scored and every component can move.

A task that fails here would feed the trainer a constant (dead) component or a silent infrastructure zero:
the reference must pass, a stub must fail, the tests must call the declared entry point, the simulator must be
able to reveal every hidden detail, and each reward component must take more than one value across
representative strategies (ask then commit, guess, loop, stall then ask).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Sequence

from rewardpipe.episode import converse, execution_job, finish_episode, start_episode, task_job
from rewardpipe.execution.result import ExecutionResult, ExecutionStatus
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

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "ok": self.ok, "problems": self.problems,
                "component_values": self.component_values}


def static_problems(task: Task) -> list[str]:
    problems = []
    if not task.spec:
        problems.append("spec is empty: there is nothing to ask about, so asking cannot help")
    try:
        tests_tree = ast.parse(task.tests)
    except SyntaxError as exc:
        return problems + [f"tests do not parse: line {exc.lineno}: {exc.msg}"]
    try:
        reference_tree = ast.parse(task.reference_solution)
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
    diagnoses = [TaskDiagnosis(task.task_id, static_problems(task)) for task in tasks]

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
        turns = max_turns or len(task.spec) + 3
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
