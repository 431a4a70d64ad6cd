import json

from tests.cli.conftest import BUNDLED_TASKS, make_task, write_jsonl


def test_doctor_passes_on_the_bundled_tasks(cli):
    result = cli("doctor", "--tasks", BUNDLED_TASKS, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["broken"] == []
    assert report["tasks"] >= 15
    # every component of the default reward moves on every task
    for diagnosis in report["diagnoses"]:
        assert all(len(values) >= 2 for values in diagnosis["component_values"].values()), diagnosis


def test_doctor_names_every_broken_task_and_why(cli, tmp_path):
    tasks = write_jsonl(
        tmp_path / "tasks.jsonl",
        [
            make_task("healthy"),
            make_task("wrong-reference", reference_solution="def add(a, b):\n    return a - b\n"),
            make_task(
                "never-calls-entry",
                tests="import unittest\nclass T(unittest.TestCase):\n"
                "    def test_x(self):\n        self.assertTrue(True)\n",
            ),
            make_task("missing-entry", reference_solution="def plus(a, b):\n    return a + b\n"),
        ],
    )
    result = cli("doctor", "--tasks", tasks, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)  # data on stdout; the error line goes to stderr
    assert sorted(report["broken"]) == ["missing-entry", "never-calls-entry", "wrong-reference"]
    problems = {d["task_id"]: " | ".join(d["problems"]) for d in report["diagnoses"]}
    assert "does not pass its own tests" in problems["wrong-reference"]
    assert "never call the entry point" in problems["never-calls-entry"]
    assert "stub" in problems["never-calls-entry"]  # a test that always passes cannot tell right from wrong
    assert "does not define entry point 'add'" in problems["missing-entry"]
    assert problems["healthy"] == ""


def test_doctor_flags_a_component_that_cannot_move():
    from rewardpipe.doctor import diagnose
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.execution import get_executor
    from rewardpipe.models import Task
    from rewardpipe.rewards import Component, get_reward

    base = get_reward("ask_before_coding")
    # A bonus gated behind something no strategy reaches: the blog's silently dead component.
    gated = Component("gated_bonus", 0.5, lambda data: 0.0, "never reachable", (0.0, 1.0))
    reward = base.with_components(base.components + (gated,))
    [diagnosis] = diagnose([Task(**make_task("t"))], ENVIRONMENT, get_executor(), reward=reward)
    assert not diagnosis.ok
    assert diagnosis.problems == ["component 'gated_bonus' takes only the value(s) [0.0]: it would be dead"]
    assert diagnosis.component_values["correctness"] == [0.0, 1.0]
    assert diagnosis.component_values["asked_before_coding"] == [0.0, 0.6, 1.0]


def test_doctor_reports_a_bad_task_file_with_its_line(cli, tmp_path):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [make_task("ok"), {**make_task("extra"), "difficulty": 3}])
    result = cli("doctor", "--tasks", tasks)
    assert result.exit_code == 1
    assert ":2" in result.output and "difficulty" in result.output


def test_doctor_passes_on_all_of_imported_humaneval(cli, tmp_path):
    tasks = tmp_path / "humaneval.jsonl"
    assert cli("tasks", "import-humaneval", "--out", tasks).exit_code == 0
    result = cli("doctor", "--tasks", tasks, "--json")
    report = json.loads(result.output)
    assert report["tasks"] == 164
    assert report["broken"] == [], [d for d in report["diagnoses"] if not d["ok"]][:3]
    assert result.exit_code == 0


def test_a_docstring_with_no_details_gets_an_example_from_the_tests():
    from rewardpipe.humaneval import example_from_check

    tests = "def check(candidate):\n    assert True\n    assert candidate(2, k=3) == [1, 2]\n    assert candidate(0) == []\n"
    assert example_from_check(tests, "solve") == "For example, solve(2, k=3) returns [1, 2]."
    assert example_from_check("def check(c):\n    assert c(1) > 0\n", "solve") is None
