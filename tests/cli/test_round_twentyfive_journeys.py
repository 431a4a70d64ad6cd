"""Round twenty-five: the new user's journeys (README, the guides, `rewardpipe init` → doctor → run → monitor →
report) with a reward and an environment of one's own, and the natural mistakes on the way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewardpipe import ScriptedPolicy
from rewardpipe.episode import run_episode
from rewardpipe.models import ErrorInfo, Record
from rewardpipe.monitoring.monitor import monitor_records
from rewardpipe.references import ReferenceProblem, resolve_reward

DOCS = Path(__file__).resolve().parents[2] / "docs"
IDS = dict(run_id="run", step=0, group_id="g", rollout_id="r")


def _records(kind: str, message: str) -> list[Record]:
    """Two groups of four rollouts at step 0, every one an error record of ``kind``."""
    return [
        Record(
            run_id="run",
            step=0,
            group_id=f"g{g}",
            rollout_id=f"g{g}-k{k}",
            task_id=f"t{g}",
            status="error",
            error=ErrorInfo(kind=kind, message=message),
            components={"found": None},
            weights={"found": 1.0},
            aggregate=None,
        )
        for g in range(2)
        for k in range(4)
    ]


def _error_alarm(kind: str, message: str) -> str:
    result = monitor_records(_records(kind, message))
    (alarm,) = [a for a in result.alarms if a.kind == "error_rate"]
    return alarm.message


def test_an_error_rate_alarm_of_a_component_that_raised_points_at_the_reward_not_the_sandbox():
    # A user's component returning a string made every record component_raised; the alarm said "check the
    # executor/sandbox", which the user's reward never touched.
    message = _error_alarm("component_raised", "component 'as_str' raised TypeError: returned str '1'")
    assert "executor/sandbox" not in message
    assert "reward" in message and "component" in message


def test_an_error_rate_alarm_of_the_environment_points_at_its_hooks():
    message = _error_alarm("simulator_error", "environment 'num': respond() raised RuntimeError: boom")
    assert "executor/sandbox" not in message and "environment" in message


def test_an_error_rate_alarm_of_the_sandbox_still_points_at_the_sandbox():
    assert "executor/sandbox" in _error_alarm("executor_crash", "BrokenPipeError: the fork server went away")


RAISING_ENV = """
from rewardpipe import Environment, EpisodeState, Reward, ScriptedPolicy, TaskRow, component


class NumTask(TaskRow):
    secret: int


class NumState(EpisodeState):
    found: bool = False


@component(range=(0, 1), role="outcome")
def found(state):
    return float(state.found)


class NumEnv(Environment):
    name = "num"
    version = "1"
    task_model = NumTask
    state_model = NumState
    max_turns = 3
    reward = Reward("num", [found])
    failing = "respond"

    def on_policy_turn(self, state, task, text):
        if self.failing == "on_policy_turn":
            raise KeyError("secret")
        if text == str(task.secret):
            return state.evolve(found=True, next_action="score")
        return state.evolve(next_action="env")

    def respond(self, state, task, ctx):
        raise KeyError("secret")

    def scenarios(self, task):
        return {"reference": ScriptedPolicy([str(task.secret)]), "wrong": ScriptedPolicy(["0", "0", "0"])}


ENVIRONMENT = NumEnv()
"""


def _raising_env():
    """A fresh instance of RAISING_ENV's environment (a user's, whose hooks raise an exception that does not
    say where it came from)."""
    namespace: dict = {}
    exec(compile(RAISING_ENV, "num_env.py", "exec"), namespace)
    return namespace["ENVIRONMENT"], namespace["NumTask"]


def test_an_environment_hook_that_raises_is_named_in_the_error_record():
    # "simulator_error: KeyError: 'secret'" did not say which of the environment's hooks raised.
    for hook in ("respond", "on_policy_turn"):
        env, task_model = _raising_env()
        env.failing = hook
        task = task_model(task_id="a", prompt="Guess", secret=3)
        record = run_episode(task, ScriptedPolicy(["5"]), env, None, **IDS)
        assert record.status == "error" and record.error.kind == "simulator_error"
        assert f"{hook}()" in record.error.message and "environment 'num'" in record.error.message
        assert "KeyError: 'secret'" in record.error.message


def test_write_an_environment_says_the_stack_runs_your_own_environment():
    # The page said "the deployed stack runs the built-in environment today", while deploy-your-own-package
    # (and the README) say every AWS path runs yours once cdk.json names it.
    for page in (
        DOCS / "guides" / "write-an-environment.md",
        DOCS / "extending.md",
        DOCS / "concepts" / "environment.md",
    ):
        text = " ".join(page.read_text().split())
        assert "runs the built-in environment" not in text and "runs this environment today" not in text, page
        assert "deploy-your-own-package.md" in text


def test_the_environment_concept_page_lists_every_built_in_environment():
    # "The built-in environments" listed ask_before_coding only, while `rewardpipe envs` lists three.
    from rewardpipe.references import BUILTIN_ENVIRONMENTS

    page = (DOCS / "concepts" / "environment.md").read_text()
    table = page.split("## The built-in environments", 1)[1].split("\n\n", 2)[1]
    for name in BUILTIN_ENVIRONMENTS:
        assert f"`{name}`" in table, name


def test_the_run_summary_does_not_call_an_environments_failure_an_infrastructure_error(tmp_path, cli):
    # A user's respond() raising made "... 24 infrastructure errors": the user's own hook, not rewardpipe's
    # machinery. The summary now counts error records and names their kinds.
    (tmp_path / "num_env.py").write_text(RAISING_ENV)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"task_id": t, "prompt": "Guess", "secret": 3}) + "\n" for t in "ab"))
    result = cli(
        "run", "--env", f"{tmp_path / 'num_env.py'}:ENVIRONMENT", "--tasks", tasks, "--policy", "scripted",
        "--steps", "1", "--out", tmp_path / "runs", "--seed", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "infrastructure error" not in result.output
    summary = next(line for line in result.output.splitlines() if " rollouts, " in line)
    assert "error records" in summary and "simulator_error" in summary, summary


def test_a_file_named_without_its_attribute_says_to_name_the_reward_in_it(tmp_path, cli):
    # `--reward my_reward.py` (the file, no :ATTR) said "unknown reward 'my_reward.py'" and advised registering
    # `my_reward.py = "your_package.module:ATTR"` as an entry-point name.
    (tmp_path / "my_reward.py").write_text("")
    (tmp_path / "toy_env.py").write_text("")
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"messages": [{"role": "assistant", "content": "hi"}]}) + "\n")
    result = cli("score", samples, "--reward", tmp_path / "my_reward.py", "--out", tmp_path / "store")
    assert result.exit_code == 2
    assert f"{tmp_path / 'my_reward.py'}:ATTR" in result.output and "entry-points" not in result.output
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"task_id": "a", "prompt": "p"}) + "\n")
    result = cli("doctor", "--env", tmp_path / "toy_env.py", "--tasks", tasks)
    assert result.exit_code == 2
    assert f"{tmp_path / 'toy_env.py'}:ATTR" in result.output and "entry-points" not in result.output
    with pytest.raises(ReferenceProblem, match=r"package\.module:ATTR, its package installed"):
        resolve_reward("my_reward.py", allow_files=False)  # a deployment's setting: no file reference there


def test_monitor_or_report_of_the_unscored_samples_says_to_score_them_first(tmp_path, cli):
    # `rewardpipe monitor samples.jsonl` (the input, not the store `score` wrote) said "field 'run_id': Field
    # required" for every line and "has no readable records": nothing said these are rollouts, not records.
    samples = tmp_path / "samples.jsonl"
    line = {"rollout_id": "r1", "reference": "42", "messages": [{"role": "assistant", "content": "42"}]}
    samples.write_text(json.dumps(line) + "\n")
    for command in (["monitor", samples], ["report", samples, "--out", tmp_path / "r.html"]):
        result = cli(*command)
        assert result.exit_code == 1
        assert "rollouts, not records" in result.output and "rewardpipe score" in result.output, result.output
    junk = tmp_path / "junk.jsonl"
    junk.write_text(json.dumps({"a": 1}) + "\n")
    assert "rollouts, not records" not in cli("monitor", junk).output  # only what looks like rollouts


def test_trl_reads_a_reference_column_and_warns_when_the_reward_finds_none(caplog):
    # The README's reward reads `reference`, as its samples' field is named; in TRL a dataset column named
    # `reference` was not read (only reference_answer, answer, solution), so every completion was scored
    # against None: answer_correct 0.0 for a right answer, with no word.
    from rewardpipe.integrations.trl import reward_functions

    reference = f"{DOCS.parent / 'examples' / 'your_own_reward' / 'my_reward.py'}:json_answer"
    func, *_ = reward_functions(reference)[0]
    assert func.rewardpipe_component == "answer_correct"
    completions = ['{"answer": "42"}', '{"answer": "41"}']
    assert func(prompts=["q", "q"], completions=completions, reference=["42", "42"]) == [1.0, 0.0]
    assert func(prompts=["q", "q"], completions=completions, answer=["42", "42"]) == [1.0, 0.0]  # as before

    func, *_ = reward_functions(reference)[0]
    with caplog.at_level("WARNING", logger="rewardpipe.trl"):
        func(prompts=["q", "q"], completions=completions, ground=["42", "42"])
        func(prompts=["q", "q"], completions=completions[::-1], ground=["42", "42"])
    warnings = [r.getMessage() for r in caplog.records if "reference" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once, not once a batch
    assert "ground" in warnings[0] and "reference_answer" in warnings[0]


def test_score_says_what_its_error_records_were_and_warns_of_a_reward_of_episodes(tmp_path, cli):
    # `score samples.jsonl --reward toy_env.py:NUM_REWARD` (a reward of an environment's episodes, reading
    # `state`) printed "scored 0, errors 3" and exited 0: what the errors were took --json to find.
    (tmp_path / "num_env.py").write_text(RAISING_ENV)
    samples = tmp_path / "samples.jsonl"
    line = {"rollout_id": "r1", "messages": [{"role": "user", "content": "Guess"}]}
    line["messages"].append({"role": "assistant", "content": "3"})
    samples.write_text(json.dumps(line) + "\n")
    result = cli("score", samples, "--reward", f"{tmp_path / 'num_env.py'}:NumEnv.reward", "--out", tmp_path / "s")
    assert result.exit_code == 1, result.output  # nothing was scored (round thirty: that exits 1)
    assert "reads `state`" in result.output and "--env" in result.output  # the warning, before scoring
    assert "errors 1" in result.output
    assert "component_raised 1" in result.output and "e.g. r1: component 'found' raised" in result.output


NAN_ENV = """
import math

from rewardpipe import Reward, component


@component(range=(0, 1), role="shaping")
def steady(state):
    return 0.5 if state.found else math.nan  # NaN whenever the number was not found


class NanEnv(NumEnv):
    reward = Reward("nan", [found, steady])

    def respond(self, state, task, ctx):
        return state.append({"role": "user", "content": "no"}, next_action="policy")


ENVIRONMENT = NanEnv()
"""


def test_doctor_names_a_scenario_whose_component_is_not_a_finite_number(tmp_path, cli):
    # A component returning NaN in a scenario other than the reference made an error record doctor never
    # mentioned: `steady` showed as "takes only the value(s) [0.5]", the NaN lost.
    (tmp_path / "nan_env.py").write_text(RAISING_ENV + NAN_ENV)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"task_id": "a", "prompt": "Guess", "secret": 3}) + "\n")
    result = cli("doctor", "--env", f"{tmp_path / 'nan_env.py'}:ENVIRONMENT", "--tasks", tasks)
    assert result.exit_code == 1
    assert "scenario 'wrong': component 'steady': nan is not a finite number" in result.output, result.output


def test_doctor_says_a_component_with_no_value_took_none_not_that_it_takes_the_values_of_an_empty_list(tmp_path, cli):
    # Every scenario failed, so no component took a value: doctor said "takes only the value(s) []: it would
    # be dead", a verdict on values nobody saw.
    (tmp_path / "num_env.py").write_text(RAISING_ENV + "\n\nclass AllFail(NumEnv):\n    failing = 'on_policy_turn'\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"task_id": "a", "prompt": "Guess", "secret": 3}) + "\n")
    result = cli("doctor", "--env", f"{tmp_path / 'num_env.py'}:AllFail", "--tasks", tasks)
    assert result.exit_code == 1
    assert "on_policy_turn() raised KeyError" in result.output
    assert "value(s) []" not in result.output, result.output
    assert "component 'found' took no value in any scenario" in result.output
    # rewardpipe.testing.check_reward said the same of samples that all failed
    from rewardpipe.testing import check_reward

    env, _ = _raising_env()
    sample = {"messages": [{"role": "user", "content": "Guess"}, {"role": "assistant", "content": "3"}]}
    with pytest.raises(AssertionError) as failed:
        check_reward(env.reward, [sample, sample])
    assert "value(s) []" not in str(failed.value) and "took no value on any sample" in str(failed.value)


def test_show_takes_the_stores_only_run_as_monitor_and_report_do(tmp_path, cli):
    # After `score ... --out store`, `monitor store` and `report store` need no --run-id, but `show store
    # --rollout r1` was a usage error, "Missing option '--run-id'".
    samples = tmp_path / "samples.jsonl"
    samples.write_text((DOCS.parent / "examples" / "your_own_reward" / "samples.jsonl").read_text())
    reward = f"{DOCS.parent / 'examples' / 'your_own_reward' / 'my_reward.py'}:json_answer"
    store = tmp_path / "store"
    assert cli("score", samples, "--reward", reward, "--out", store).exit_code == 0
    result = cli("show", store, "--rollout", "r1")
    assert result.exit_code == 0, result.output
    assert "r1" in result.output and "run scored" in result.output
    assert cli("score", samples, "--reward", reward, "--out", store, "--run-id", "again").exit_code == 0
    result = cli("show", store, "--rollout", "r1")
    assert result.exit_code == 1 and "--run-id" in result.output and "again" in result.output


def test_a_component_out_of_its_range_is_one_warning_line_not_python_s_warning_with_its_source_line(tmp_path, cli):
    # The OutOfRangeWarning printed as Python prints warnings: ".../rewardpipe/rewards/base.py:399:
    # OutOfRangeWarning: ..." and then the line of rewardpipe's code that warned.
    (tmp_path / "big.py").write_text(
        "from rewardpipe import Reward, component\n"
        "@component(range=(0, 1), role='outcome')\n"
        "def big(completion):\n    return 7.0\n"
        "R = Reward('r', [big])\n"
    )
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"messages": [{"role": "assistant", "content": "hi"}]}) + "\n")
    result = cli("score", samples, "--reward", f"{tmp_path / 'big.py'}:R", "--out", tmp_path / "store")
    assert result.exit_code == 0, result.output
    assert "warning: reward 'r': component big=7 outside [0, 1]" in result.output, result.output
    assert "base.py" not in result.output and "OutOfRangeWarning" not in result.output
