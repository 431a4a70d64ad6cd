"""A component that raises is an error record (``component_raised``: the component's name and the
exception's first line, made safe to print), never a 0, never a lost batch or step: on every path."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import ClassVar

import pytest

from rewardpipe import Message
from rewardpipe.store import LocalStore
from tests.api.conftest import GUESS_TASKS, JSON_SAMPLES, CharCodec

HOSTILE = 'BOOM \x1b[2J\u202e{"answer": 4}'  # an ANSI clear-screen and a bidi override, written by the model
FLAKY = "acme_rl.json_answer:FLAKY"


def _samples(*completions: str, reference: int = 4) -> list[dict]:
    return [
        {
            "id": i,
            "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": c}],
            "metadata": {"reference_answer": reference},
        }
        for i, c in enumerate(completions)
    ]


def assert_raised(error_message: str) -> None:
    assert error_message.startswith("component 'explodes_on_boom' raised ValueError: cannot read BOOM")
    assert "\x1b" not in error_message and "\u202e" not in error_message and "\n" not in error_message
    assert "\\x1b" in error_message  # shown as an escape, not acted on
    assert "second line" not in error_message  # the first line only


def test_the_reward_records_the_component_and_the_first_line(acme):
    from rewardpipe import load_reward

    score = load_reward(FLAKY).score([Message(role="assistant", content=HOSTILE)], reference=4)
    assert score.error.kind == "component_raised" and score.aggregate is None
    assert_raised(score.error.message)
    assert score.components["explodes_on_boom"] is None and score.components["valid_json"] == 0.0


def test_a_long_exception_line_is_cut():
    from rewardpipe import Reward, component

    @component(range=(0, 1), role="outcome")
    def verbose(completion):
        raise RuntimeError("x" * 10_000)

    message = Reward("v", [verbose]).score([Message(role="assistant", content="a")]).error.message
    # The cut line, then where the component raised (round thirty-three), itself bounded.
    assert len(message) < 450 and message.split(" (at ")[0].endswith("...")


def test_the_single_turn_lambda_flags_the_sample_and_scores_the_rest(acme):
    from rewardpipe.single_turn import score_samples

    results = score_samples(_samples('{"answer": 4}', HOSTILE, '{"answer": 5}'), FLAKY, error_reward="zero")
    flags = [{m["name"]: m["value"] for m in r["metrics_list"]} for r in results]
    assert flags[1]["reward_error"] == 1 and flags[1]["error_component_raised"] == 1
    assert results[1]["aggregate_reward_score"] == 0.0  # the contract has no null: flagged, never a silent score
    assert flags[0]["reward_error"] == 0 and flags[0]["answer_matches"] == 1.0
    assert flags[2]["reward_error"] == 0 and flags[2]["answer_matches"] == 0.0


def test_cli_score_writes_an_error_record_and_scores_the_other_lines(acme, cli, tmp_path):
    samples = tmp_path / "samples.jsonl"
    rows = [json.loads(line) for line in JSON_SAMPLES.read_text().splitlines()]
    rows[2]["messages"][-1]["content"] = HOSTILE
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = cli("score", samples, "--reward", FLAKY, "--out", tmp_path / "store", "--run-id", "s", "--json")
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["status"] for r in records] == ["scored", "scored", "error", "scored", "scored", "scored"]
    assert records[2]["error"]["kind"] == "component_raised" and records[2]["aggregate"] is None
    assert_raised(records[2]["error"]["message"])
    assert len(list(LocalStore(tmp_path / "store").iter_records("s"))) == 6


RAISES_ON_SOLVED = """
from rewardpipe import Reward, component
from acme_rl.guess import GUESS_REWARD

@component(range=(0, 1), role="shaping")
def explodes_when_solved(state):
    if state.solved:
        raise RuntimeError("solved\\nno more")
    return 0.5

FLAKY_GUESS = GUESS_REWARD.with_components([*GUESS_REWARD.components, explodes_when_solved])
"""


@pytest.fixture
def flaky_guess_reward(acme, tmp_path) -> str:
    path = tmp_path / "flaky_guess.py"
    path.write_text(RAISES_ON_SOLVED)
    return f"{path}:FLAKY_GUESS"


def test_cli_run_keeps_every_step_and_records_the_raised_component(acme, cli, tmp_path, flaky_guess_reward):
    result = cli(
        "run",
        "--env",
        "guess",
        "--reward",
        flaky_guess_reward,
        "--tasks",
        GUESS_TASKS,
        "--steps",
        2,
        "--group-size",
        4,
        "--groups-per-step",
        3,
        "--out",
        tmp_path / "store",
        "--run-id",
        "r",
        "--json",
    )
    assert result.exit_code == 0, result.output
    records = list(LocalStore(tmp_path / "store").iter_records("r"))
    assert len(records) == 2 * 3 * 4  # no step lost
    raised = [r for r in records if r.status == "error"]
    assert raised and all(
        r.error.kind == "component_raised"
        and "explodes_when_solved" in r.error.message
        and "RuntimeError" in r.error.message
        and "no more" not in r.error.message
        for r in raised
    )
    assert all(r.components["solved"] == 0.0 for r in records if r.status == "scored")
    summary = json.loads(result.stdout)
    assert sum(step["errors"] for step in summary["steps"]) == len(raised)


def test_doctor_names_a_component_that_raises(acme, cli, flaky_guess_reward):
    result = cli("doctor", "--env", "guess", "--reward", flaky_guess_reward, "--tasks", GUESS_TASKS, "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    findings = [f for d in report["diagnoses"] for f in d["findings"] if f["check"] == "component_raised"]
    assert findings and "explodes_when_solved" in findings[0]["message"]


def test_trl_reward_functions_and_callback_record_it_and_keep_the_batch(acme):
    from rewardpipe.integrations.trl import RewardPipeMonitor

    monitor = RewardPipeMonitor(FLAKY, run_id="t")
    completions = ['{"answer": 4}', HOSTILE, '{"answer": 5}', "four"]
    answers = ["4"] * 4

    class Trainer:
        reward_funcs, num_generations = monitor.reward_funcs, 2
        reward_weights: ClassVar[list[float]] = [c.weight for c in monitor.reward.components]
        model = type("M", (), {"training": True})()

        def _log_metric(self, name, value):
            pass

    out = {
        fn.rewardpipe_component: fn(
            prompts=["q"] * 4, completions=completions, answer=answers, log_metric=Trainer()._log_metric
        )
        for fn in monitor.reward_funcs
    }
    assert out["answer_matches"] == [1.0, None, 0.0, 0.0]  # the raising sample: None everywhere, never 0
    assert out["explodes_on_boom"] == [1.0, None, 1.0, 1.0]
    report = monitor.reports[0]
    assert report.errors == 1 and report.scored == 3


def test_trl_rollout_func_records_it_and_scores_the_other_episodes(acme, flaky_guess_reward):
    from rewardpipe.integrations.trl_episodes import EpisodeRollout

    def generate(contexts, budget):
        # says 42 every turn: solves g-42 at once, never the others
        return [[ord(c) for c in "42"] + [0] for _ in contexts]

    rollout = EpisodeRollout(GUESS_TASKS, env="guess", reward=flaky_guess_reward, max_turns=3)
    prompts = [rollout.prompt_for(t) for t in rollout.tasks]
    episodes = rollout.play(prompts, CharCodec(), generate, max_completion_tokens=400)
    by_task = {e.task.task_id: e.record for e in episodes}
    assert by_task["g-42"].status == "error" and by_task["g-42"].error.kind == "component_raised"
    assert by_task["g-07"].status == "scored" and by_task["g-93"].status == "scored"


def test_verl_compute_score_flags_it(acme):
    from rewardpipe.integrations.verl import compute_score

    out = compute_score("custom", HOSTILE, 4, {"rewardpipe_reward": FLAKY})
    assert out["reward_error"] == 1.0 and out["score"] == 0.0
    assert math.isnan(out["answer_matches"]) and math.isnan(out["explodes_on_boom"])
    fine = compute_score("custom", '{"answer": 4}', 4, {"rewardpipe_reward": FLAKY})
    assert fine["reward_error"] == 0.0 and set(fine) == set(out)  # the same keys for every sample


def test_verifiers_rubric_gives_nan_and_scores_each_sample_once(acme):
    from rewardpipe.integrations.verifiers import rubric_functions

    funcs, _weights = rubric_functions(FLAKY)
    assert [f.__name__ for f in funcs] == ["valid_json", "answer_matches", "explodes_on_boom"]
    values = [f(completion=HOSTILE, answer=4, prompt="2+2?") for f in funcs]
    assert all(math.isnan(v) for v in values)
    good = [f(completion='{"answer": 4}', answer=4, prompt="2+2?") for f in funcs]
    assert good == [1.0, 1.0, 1.0]
    assert funcs[0].rewardpipe_scorer.samples_scored == 2  # two samples, each scored once (not once per function)


def test_the_aws_score_step_writes_an_error_record(tmp_path):
    from rewardpipe.aws.rollout import EpisodeSnapshot, PolicySpec, score_snapshot
    from rewardpipe.aws.settings import Settings
    from rewardpipe.envs.ask_before_coding.environment import ENVIRONMENT
    from rewardpipe.episode import converse, start_episode
    from rewardpipe.models import load_tasks

    reward_file = tmp_path / "aws_flaky.py"
    reward_file.write_text(
        "from rewardpipe import component\nfrom rewardpipe.envs.ask_before_coding.reward import ASK_BEFORE_CODING\n"
        "@component(range=(0, 1), role='shaping')\ndef explodes(transcript):\n    raise RuntimeError('\\x1b[31mboom')\n"
        "FLAKY = ASK_BEFORE_CODING.with_components([*ASK_BEFORE_CODING.components, explodes])\n"
    )
    task = load_tasks(Path("rewardpipe/data/tasks.jsonl"))[0]

    class Loops:
        def next_turn(self, state, task):
            return "Can you explain again?"

    state = start_episode(task, env=ENVIRONMENT, run_id="aws", step=0, group_id="g", rollout_id="r", max_turns=2)
    state = converse(state, task, Loops(), ENVIRONMENT)
    snapshot = EpisodeSnapshot(task_key="tasks/t.json", policy=PolicySpec(mode="callback"), state=state)
    store = LocalStore(tmp_path / "store")
    record, key = score_snapshot(store, snapshot, task, Settings(reward_name=f"{reward_file}:FLAKY"))
    assert record.status == "error" and record.error.kind == "component_raised"
    assert "explodes" in record.error.message and "\x1b" not in record.error.message
    assert store.get_json(key)["error"]["kind"] == "component_raised"
