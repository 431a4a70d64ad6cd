"""Round seventeen: reward, monitor and outputs, attacked as a policy optimising against the reward would.

F1. A reward's ``diagnostics`` went into the record unchecked. A user diagnostics that reports what the model's
answer parsed to (``{"answer": json.loads(...)}``) handed the model the record's validation: an answer of
``[1]`` or ``{"a": 1}`` made ``Record`` fail to validate, a string ``"\\ud800"`` (a lone surrogate, valid JSON)
made it fail to serialise, and a number too large for a float made ``nova_output`` raise ``OverflowError``.
Each failed the whole ``rewardpipe score`` run (``unexpected ValidationError``) or the whole reward-Lambda
batch, for one sample's text. The diagnostics are now checked as an environment's ``metrics()`` are (round
sixteen): text keys with number/text/boolean/None values are kept, the rest named in ``diagnostics_error``;
lone surrogates become U+FFFD, in ``metrics()`` values too.
"""

from __future__ import annotations

import json

import pytest

from rewardpipe import component
from rewardpipe.models import Message
from rewardpipe.rewards.base import Reward, ScoringInput
from rewardpipe.single_turn import score_samples

# --- F1: diagnostics that carry what the model wrote -----------------------------------------------------------


@component(range=(0.0, 1.0), role="outcome", description="1 when the answer says yes")
def _says_yes(completion: str) -> float:
    return 1.0 if completion.startswith("yes") else 0.0


def _parsed(completion: str) -> dict:
    """A user's diagnostics: what the JSON after "JSON:" parsed to (None when there is none)."""
    try:
        return {"answer": json.loads(completion.split("JSON:", 1)[1])}
    except (IndexError, ValueError):
        return {"answer": None}


PARSING = Reward("parsing", [_says_yes], diagnostics=_parsed)
HOSTILE_ANSWERS = {
    "a list": "yes JSON: [1, 2]",
    "an object": 'yes JSON: {"a": 1}',
    "a lone surrogate": 'yes JSON: "\\ud800 tail"',
    "a number no float holds": "yes JSON: 1" + "0" * 400,
}


def _samples(answer: str) -> list[dict]:
    honest = ["yes JSON: 1", "no JSON: 2"]
    return [
        {"id": i, "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": text}]}
        for i, text in enumerate([*honest, answer])
    ]


@pytest.mark.parametrize("name", list(HOSTILE_ANSWERS))
def test_diagnostics_carrying_model_values_keep_every_score_of_the_batch(name):
    out = score_samples(_samples(HOSTILE_ANSWERS[name]), PARSING, error_reward="zero")
    json.dumps(out, allow_nan=False)  # the Lambda's answer can be sent
    assert [o["aggregate_reward_score"] for o in out] == [1.0, 0.0, 1.0]
    assert all({m["name"]: m["value"] for m in o["metrics_list"]}["reward_error"] == 0 for o in out)


@pytest.mark.parametrize("name", list(HOSTILE_ANSWERS))
def test_the_record_of_such_a_sample_is_scored_and_serialisable(name):
    from rewardpipe.episode import record_from_score

    data = ScoringInput(
        messages=[Message(role="user", content="q"), Message(role="assistant", content=HOSTILE_ANSWERS[name])]
    )
    record = record_from_score(PARSING.score_input(data), run_id="r", step=0, group_id="g", rollout_id="x", task_id="t")
    line = record.to_json()
    assert record.status == "scored" and record.aggregate == 1.0
    line.encode("utf-8")
    if name == "a lone surrogate":
        assert record.metrics["answer"] == "\ufffd tail"
    else:
        assert "answer" not in record.metrics and "answer" in record.metrics["diagnostics_error"]


def test_rewardpipe_score_keeps_the_batch_when_one_answer_is_hostile(tmp_path, monkeypatch):
    import sys

    from typer.testing import CliRunner

    from rewardpipe.cli import app

    module = tmp_path / "parsing_reward.py"
    module.write_text("from tests.security.test_round_seventeen_reward import PARSING\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "parsing_reward", raising=False)
    answers = ["yes JSON: 1", "no JSON: 2", *HOSTILE_ANSWERS.values()]
    lines = [
        {"group_id": "g", "task_id": "t", "rollout_id": f"r{i}", "messages": _samples(answer)[2]["messages"]}
        for i, answer in enumerate(answers)
    ]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = CliRunner().invoke(
        app, ["score", str(samples), "--reward", "parsing_reward:PARSING", "--out", str(tmp_path / "store"), "--json"]
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(records) == len(lines) and all(r["status"] == "scored" for r in records)


def test_metrics_text_with_a_lone_surrogate_is_kept_readable():
    from rewardpipe.models import recordable_metrics

    kept, problem = recordable_metrics({"said": "a\ud800b", "n": 2, "ok": True, "none": None}, "metrics()")
    assert kept == {"said": "a\ufffdb", "n": 2, "ok": True, "none": None} and problem is None
