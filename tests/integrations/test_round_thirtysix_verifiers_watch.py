"""Round thirty-six: within-group monitoring of a verifiers run (:class:`GroupWatch` fed by ``rubric(watch=...)``).

verifiers users had rewardpipe's components as rubric metrics but nothing judged them inside groups. The rubric
scores a group whole (``score_group``), so it hands every group to a :class:`GroupWatch`, which judges each
``groups_per_step`` groups as a step with rewardpipe's monitor. The test marked ``verifiers`` (``make
test-verifiers``) plays real ``vf.SingleTurnEnv`` groups against a local chat endpoint.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math

import pytest

from rewardpipe.integrations.verifiers_watch import GroupWatch

WEIGHTS = {"format": 0.5, "answer_correct": 1.0}


def _group(right: list[float], form: float = 1.0) -> list[dict[str, float]]:
    return [{"format": form, "answer_correct": r, "reward_error": 0.0} for r in right]


def test_a_component_constant_in_every_group_is_alarmed_with_its_example(caplog):
    watch = GroupWatch(groups_per_step=4, run_id="vf")
    conversation = [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "\x1b[31m#### 4"}]
    with caplog.at_level(logging.WARNING, logger="rewardpipe.verifiers"):
        for _ in range(3):
            assert watch.add_group(_group([1.0, 0.0, 1.0, 0.0]), WEIGHTS, [conversation] * 4) is None
        report = watch.add_group(_group([1.0, 0.0, 1.0, 0.0]), WEIGHTS, [conversation] * 4)
    assert report.step == 0 and report.components["format"].verdict == "dead"
    assert report.components["answer_correct"].verdict == "ok"
    (alarm,) = [a for a in watch.alarms if a.component == "format"]
    example = alarm.to_dict()["examples"][0]
    assert watch.transcript(example) == conversation
    logged = [r.getMessage() for r in caplog.records if "ALARM" in r.getMessage()]
    assert logged and "format" in logged[0] and "#### 4" in logged[0]
    assert "\x1b" not in logged[0]  # the model's text is shown inert in the log


def test_an_unscorable_sample_is_an_error_record_not_the_settled_mean():
    watch = GroupWatch(groups_per_step=4)
    for _ in range(4):
        group = _group([1.0, 0.0, 1.0, 0.0])
        group[3] = {"format": math.nan, "answer_correct": math.nan, "reward_error": 1.0}
        report = watch.add_group(group, WEIGHTS)
    assert report.errors == 4 and report.scored == 12


def test_flush_judges_the_last_groups_and_steps_count_on():
    watch = GroupWatch(groups_per_step=5)
    for _ in range(7):
        watch.add_group(_group([1.0, 0.0]), WEIGHTS)
    assert [r.step for r in watch.reports] == [0]
    assert watch.flush().step == 1 and watch.flush() is None


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_groups_per_step_must_be_a_whole_number(bad):
    with pytest.raises(ValueError, match="groups_per_step"):
        GroupWatch(groups_per_step=bad)


@pytest.mark.verifiers
def test_a_real_rubric_hands_each_group_to_the_watch():
    vf = pytest.importorskip("verifiers")
    from openai import AsyncOpenAI
    from verifiers.clients.openai_chat_completions_client import OpenAIChatCompletionsClient

    from rewardpipe.integrations.verifiers import rubric
    from tests.integrations.test_verifiers_real import _dataset, chat_server

    watch = GroupWatch(groups_per_step=4, run_id="vf-real")
    rub = rubric("gsm8k", watch=watch)
    answers = iter(["#### 12", "#### 13"] * 8)  # always well formed (format constant), right half the time
    server, url, _ = chat_server(lambda messages: next(answers))
    try:
        env = vf.SingleTurnEnv(dataset=_dataset(), rubric=rub)
        client = OpenAIChatCompletionsClient(AsyncOpenAI(base_url=url, api_key="local"))
        for _ in range(4):
            group = [{"prompt": [{"role": "user", "content": "5 + 7?"}], "example_id": 0, "answer": "12"}] * 4
            asyncio.run(env.run_group(group, client, "scripted", {}))
    finally:
        server.shutdown()
    (report,) = watch.reports
    assert report.records == 16 and report.errors == 0
    assert report.components["format"].verdict == "dead" and report.components["answer_correct"].verdict == "ok"
    (alarm,) = [a for a in watch.alarms if a.component == "format"]
    conversation = watch.transcript(alarm.to_dict()["examples"][0])
    assert conversation[0]["content"] == "5 + 7?" and conversation[-1]["content"] in ("#### 12", "#### 13")


def test_with_a_store_the_run_is_read_by_monitor_and_report_and_goes_on_after_a_restart(tmp_path):
    from typer.testing import CliRunner

    from rewardpipe.cli import app
    from rewardpipe.store import LocalStore

    conversation = [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "#### 4"}]
    watch = GroupWatch(groups_per_step=4, run_id="vf", store=str(tmp_path / "store"))
    for _ in range(4):
        watch.add_group(_group([1.0, 0.0, 1.0, 0.0]), WEIGHTS, [conversation] * 4)
    assert not watch.failures
    store = LocalStore(tmp_path / "store")
    (alarm,) = [a for a in watch.alarms if a.component == "format"]
    stored = store.get_transcript(alarm.to_dict()["examples"][0]["transcript_key"])
    assert [m.content for m in stored.messages] == ["2 + 2?", "#### 4"]
    assert any("format" in key for key in store.list_keys("runs/vf/alarms/"))

    again = GroupWatch(groups_per_step=4, run_id="vf", store=store)  # a restarted run: step 1 next, state kept
    for _ in range(4):
        again.add_group(_group([1.0, 0.0, 1.0, 0.0]), WEIGHTS, [conversation] * 4)
    assert [r.step for r in again.reports] == [1] and not again.alarms  # the open alarm is not raised twice
    out = CliRunner().invoke(app, ["monitor", str(tmp_path / "store"), "--json"])
    assert out.exit_code == 0, out.output
    verdicts = [s["components"]["format"]["verdict"] for s in json.loads(out.stdout)["steps"]]
    assert verdicts == ["dead", "dead"]


def test_a_store_that_refuses_writes_never_stops_the_watch(tmp_path):
    from rewardpipe.store import LocalStore

    class Refusing(LocalStore):
        def put_record(self, record):
            raise OSError("disk full")

    watch = GroupWatch(groups_per_step=4, store=Refusing(tmp_path / "store"))
    for _ in range(4):
        report = watch.add_group(_group([1.0, 0.0, 1.0, 0.0]), WEIGHTS)
    assert report.components["format"].verdict == "dead"
    assert watch.failures and "disk full" in watch.failures[0]


def test_a_conversation_that_is_no_transcript_loses_its_transcript_only(tmp_path):
    from rewardpipe.store import LocalStore

    store = LocalStore(tmp_path / "store")
    good = [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": "#### 4"}]
    bad = [{"role": "user", "content": "2 + 2?"}, {"role": "assistant", "content": {"parts": ["#### 4"]}}]
    watch = GroupWatch(groups_per_step=4, store=store)
    for _ in range(4):
        watch.add_group(_group([1.0, 0.0, 1.0, 0.0]), WEIGHTS, [bad, good, good, good])
    assert len(watch.failures) == 4 and all("transcript of g" in f for f in watch.failures)
    assert len(list(store.iter_records("verifiers"))) == 16  # every record stored
    assert len(store.list_keys("runs/verifiers/transcripts/")) == 12
