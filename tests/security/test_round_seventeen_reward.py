"""Round seventeen: reward, monitor and outputs, attacked as a policy optimising against the reward would.

F1. A reward's ``diagnostics`` went into the record unchecked. A user diagnostics that reports what the model's
answer parsed to (``{"answer": json.loads(...)}``) handed the model the record's validation: an answer of
``[1]`` or ``{"a": 1}`` made ``Record`` fail to validate, a string ``"\\ud800"`` (a lone surrogate, valid JSON)
made it fail to serialise, and a number too large for a float made ``nova_output`` raise ``OverflowError``.
Each failed the whole ``rewardpipe score`` run (``unexpected ValidationError``) or the whole reward-Lambda
batch, for one sample's text. The diagnostics are now checked as an environment's ``metrics()`` are (round
sixteen): text keys with number/text/boolean/None values are kept, the rest named in ``diagnostics_error``;
lone surrogates become U+FFFD, in ``metrics()`` values too.

F2. The same lone surrogate through the other hooks and writers: a user's ``explain_error`` whose message quotes
the answer it could not read (``ErrorInfo(kind=..., message="could not read: " + completion)``) made the record
unserialisable, and ``rewardpipe score`` ended with ``unexpected PydanticSerializationError`` for the whole run;
a transcript the store refused was spilled with ``encode("utf-8", "surrogateescape")``, which raised
``UnicodeEncodeError`` for U+D800 (the run failed where it was to keep the transcript) and wrote a raw byte
0x80, invalid UTF-8 in a JSONL file, for U+DC80. ``ErrorInfo`` replaces lone surrogates by U+FFFD; the spill
files write them as their JSON escapes (the text reads back exactly).

F3. Two more encoders of the model's text: ``rewardpipe score`` names the group of a line without ids by a hash
of the conversation before the answer, which encoded it as strict UTF-8, so a line whose earlier assistant turn
held a lone surrogate ended the whole run (``unexpected UnicodeEncodeError``); and the AWS client's and
rollout's ``payload_size`` (Step Functions' budget) raised the same on replayed turns holding one. The hash
reads the text with ``surrogatepass``; the size counts a lone surrogate as its escape.

F4. A reward's ``explain_error`` returning something other than an ``ErrorInfo`` (a text, a dict, a tuple: what a
hook written in a hurry returns) failed the whole reward-Lambda batch (``AttributeError: 'str' object has no
attribute 'kind'``, outside the per-sample guard) and the whole ``rewardpipe score`` run (the record's
validation), for the one sample that could not be computed. A dict of ErrorInfo's fields is read as one; anything
else is that sample's ``component_unavailable`` naming what explain_error returned.

F5. ``score_samples`` (the reward Lambda's and the trainer adapters' scorer) echoes an id JSON cannot carry as
its text, but an id with no text either (an int past Python's 4300-digit limit, a list nested past the
recursion limit) raised from ``str()`` and failed the batch. Such an id is answered as a placeholder naming its
type; the sample is scored.

F6. A diagnostic named like a component (or ``reward_error``, or ``error_<kind>``) was listed beside it in the
Nova ``metrics_list``, and every reader that keys that list by name took the diagnostic's value: the TRL
reward function of a code reward, verl's and verifiers' component values became the diagnostic's (a
component the model scored 1.0 on was trained as 0.0), a diagnostic ``reward_error`` = 1 flagged a scored sample
(``error_reward=neutral`` then paid it the group's mean), and an ``error_*`` diagnostic was read as the error's
kind. Such diagnostics stay in the record but are left out of the Nova list.

F7. The other way round: a component named like a flag (``reward_error``, ``error_count``: valid component names)
was read as the flag. A ``reward_error`` component at 1.0 flagged its scored sample (``is_flagged``, so
``error_reward=neutral`` paid it the group's mean) and verl, verifiers and TRL's code path read the flag's 0 as
the component's value. Every reader of a Nova output now keys components and flags apart
(``models.nova_fields``: the ``"Reward"`` entries, the others).
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


def _score_cli(tmp_path, monkeypatch, reward: str, answers: list[str]) -> list[dict]:
    """``rewardpipe score`` of one group of ``answers`` with the reward ``reward`` of this module (its records)."""
    import sys

    from typer.testing import CliRunner

    from rewardpipe.cli import app

    module = tmp_path / "hostile_reward.py"
    module.write_text(f"from tests.security.test_round_seventeen_reward import {reward}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hostile_reward", raising=False)
    lines = [
        {"group_id": "g", "task_id": "t", "rollout_id": f"r{i}", "messages": _samples(answer)[2]["messages"]}
        for i, answer in enumerate(answers)
    ]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = str(tmp_path / "store")
    result = CliRunner().invoke(
        app, ["score", str(samples), "--reward", f"hostile_reward:{reward}", "--out", out, "--json"]
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(records) == len(lines)
    return records


def test_rewardpipe_score_keeps_the_batch_when_one_answer_is_hostile(tmp_path, monkeypatch):
    records = _score_cli(tmp_path, monkeypatch, "PARSING", ["yes JSON: 1", "no JSON: 2", *HOSTILE_ANSWERS.values()])
    assert all(r["status"] == "scored" for r in records)


def test_metrics_text_with_a_lone_surrogate_is_kept_readable():
    from rewardpipe.models import recordable_metrics

    kept, problem = recordable_metrics({"said": "a\ud800b", "n": 2, "ok": True, "none": None}, "metrics()")
    assert kept == {"said": "a\ufffdb", "n": 2, "ok": True, "none": None} and problem is None


# --- F2: a lone surrogate through explain_error and the spill files ---------------------------------------------


@component(range=(0.0, 1.0), role="outcome", description="None (cannot compute) unless the answer says yes")
def _yes_or_unknown(completion: str) -> float | None:
    return 1.0 if completion.startswith("yes") else None


def _explain(completion: str):
    from rewardpipe.models import ErrorInfo

    return ErrorInfo(kind="unreadable", message="could not read: " + completion)


EXPLAINING = Reward("explaining", [_yes_or_unknown], explain_error=_explain)


def test_an_explanation_quoting_a_lone_surrogate_keeps_the_run(tmp_path, monkeypatch):
    records = _score_cli(tmp_path, monkeypatch, "EXPLAINING", ["yes", 'maybe JSON: "\\ud800"', "maybe \udc80 \ud83d"])
    assert [r["status"] for r in records] == ["scored", "error", "error"]
    assert records[2]["error"] == {"kind": "unreadable", "message": "could not read: maybe \ufffd \ufffd"}


@pytest.mark.parametrize("text", ["a\ud800b", "a\udc80b", "\ud83d then \ude00 apart", "pair \U0001f600 kept"])
def test_a_spilled_transcript_with_a_lone_surrogate_is_utf8_and_reads_back_exactly(tmp_path, text):
    from rewardpipe.cli.common import RecordWriter
    from tests.security.test_round_fourteen_reward import _RefusingStore, _Transcript

    writer = RecordWriter(_RefusingStore(), tmp_path / "records.jsonl")
    writer.write_transcripts([_Transcript(text)])
    writer.close()
    lines = writer.transcript_spill_path.read_bytes().decode("utf-8").splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["messages"][0]["content"] == text


# --- F3: a lone surrogate in an earlier turn: the group hash and the Step Functions size ----------------------


def test_a_line_whose_earlier_turn_holds_a_lone_surrogate_is_scored_in_its_prompts_group(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from rewardpipe.cli import app

    def line(rollout: str, earlier: str, answer: str) -> str:
        turns = [("user", "q"), ("assistant", earlier), ("user", "go on"), ("assistant", answer)]
        messages = [{"role": r, "content": c} for r, c in turns]
        return json.dumps({"rollout_id": rollout, "messages": messages, "reference": "1"}) + "\n"

    samples = tmp_path / "samples.jsonl"
    samples.write_text(line("a", "first \ud800", "yes") + line("b", "first \ud800", "no") + line("c", "other", "yes"))
    out = str(tmp_path / "store")
    result = CliRunner().invoke(app, ["score", str(samples), "--reward", "gsm8k", "--out", out, "--json"])
    assert result.exit_code == 0, result.output
    records = {r["rollout_id"]: r for r in map(json.loads, result.stdout.splitlines()) if "rollout_id" in r}
    assert set(records) == {"a", "b", "c"}
    assert records["a"]["group_id"] == records["b"]["group_id"] != records["c"]["group_id"]


def test_the_step_functions_size_of_a_lone_surrogate_is_its_escape():
    from rewardpipe.aws.state import payload_size

    turns = {"turns": ["a\ud800", "\U0001f600"]}
    # the size of the ASCII JSON, the emoji counted as its 4 UTF-8 bytes instead of its 12-character escape
    assert payload_size(turns) == len(json.dumps(turns, separators=(",", ":")).replace("\\ud83d\\ude00", "1234"))


# --- F4: an explain_error that returns something else than an ErrorInfo -----------------------------------------


def _explaining_with(returned):
    def explain(completion: str):
        return returned

    return Reward("r", [_yes_or_unknown], explain_error=explain)


@pytest.mark.parametrize(
    ("returned", "kind"),
    [
        ("cannot read it", "component_unavailable"),
        ({"kind": "unreadable", "message": "no yes"}, "unreadable"),
        ({"kind": "unreadable"}, "component_unavailable"),
        (("unreadable", "no yes"), "component_unavailable"),
    ],
)
def test_an_explanation_of_the_wrong_type_is_that_samples_error_not_the_batchs(returned, kind):
    from rewardpipe.episode import record_from_score

    reward = _explaining_with(returned)
    out = score_samples(_samples("maybe")[::2], reward, error_reward="zero")
    flags = [{m["name"]: m["value"] for m in o["metrics_list"]} for o in out]
    assert [o["aggregate_reward_score"] for o in out] == [1.0, 0.0]
    assert flags[0]["reward_error"] == 0 and flags[1]["reward_error"] == 1 and flags[1][f"error_{kind}"] == 1
    data = ScoringInput(messages=[Message(role="user", content="q"), Message(role="assistant", content="maybe")])
    record = record_from_score(reward.score_input(data), run_id="r", step=0, group_id="g", rollout_id="x", task_id="t")
    assert record.status == "error" and record.error.kind == kind and record.aggregate is None
    if kind == "component_unavailable":
        assert type(returned).__name__ in record.error.message


# --- F5: an id that has no text ---------------------------------------------------------------------------------


def _nested(depth: int) -> list:
    inner: list = []
    for _ in range(depth):
        inner = [inner]
    return inner


@pytest.mark.parametrize("sample_id", [10**5000, _nested(5000)], ids=["a 5000-digit int", "a list nested 5000 deep"])
def test_an_id_with_no_text_is_answered_not_the_batch(sample_id):
    samples = _samples("x")[:2]
    samples[0]["id"] = sample_id
    out = score_samples(samples, PARSING, error_reward="zero")
    json.dumps(out, allow_nan=False)
    assert [o["aggregate_reward_score"] for o in out] == [1.0, 0.0] and out[1]["id"] == 1
    assert isinstance(out[0]["id"], str) and type(sample_id).__name__ in out[0]["id"]


# --- F6: a diagnostic named like a component or a flag ------------------------------------------------------------


def _shadowing(completion: str) -> dict:
    said_yes = completion.startswith("yes")
    return {"_says_yes": 0.0 if said_yes else 1.0, "reward_error": said_yes, "error_shadow": 1, "kept": 2}


SHADOWING = Reward("shadowing", [_says_yes], diagnostics=_shadowing)


def test_a_diagnostic_never_shadows_a_component_or_a_flag_in_the_nova_list():
    out = score_samples(_samples("x")[:2], SHADOWING, error_reward="neutral")
    assert [o["aggregate_reward_score"] for o in out] == [1.0, 0.0]  # not flagged, so not the group's mean
    for o, value in zip(out, [1.0, 0.0], strict=True):
        names = [m["name"] for m in o["metrics_list"]]
        assert len(names) == len(set(names)), names
        by_name = {m["name"]: m["value"] for m in o["metrics_list"]}
        assert by_name["_says_yes"] == value and by_name["reward_error"] == 0 and by_name["kept"] == 2
        assert "error_shadow" not in by_name


def test_the_adapters_read_the_components_value_not_the_diagnostics():
    from rewardpipe.integrations.verifiers import SampleScorer
    from rewardpipe.integrations.verl import compute_score

    assert compute_score(
        "x", "yes", None, {"rewardpipe_reward": "tests.security.test_round_seventeen_reward:SHADOWING"}
    ) == {
        "score": 1.0,
        "_says_yes": 1.0,
        "reward_error": 0.0,
    }
    assert SampleScorer(SHADOWING).value("_says_yes", "yes", None, "q") == 1.0


# --- F7: a component named like a flag ---------------------------------------------------------------------------


@component(range=(0.0, 1.0), role="shaping", name="reward_error", description="named like the flag")
def _named_like_the_flag(completion: str) -> float:
    return 1.0 if completion.startswith("yes") else 0.0


FLAG_NAMED = Reward("flag_named", [_says_yes, _named_like_the_flag])


def test_a_component_named_like_the_flag_is_never_read_as_the_flag():
    from rewardpipe.integrations.verifiers import SampleScorer
    from rewardpipe.integrations.verl import compute_score

    out = score_samples(_samples("x")[:2], FLAG_NAMED, error_reward="neutral")
    assert [o["aggregate_reward_score"] for o in out] == [2.0, 0.0]  # neither flagged nor paid the mean
    ref = {"rewardpipe_reward": "tests.security.test_round_seventeen_reward:FLAG_NAMED"}
    assert compute_score("x", "yes", None, ref) == {"score": 2.0, "_says_yes": 1.0, "reward_error": 0.0}
    assert SampleScorer(FLAG_NAMED).value("reward_error", "yes", None, "q") == 1.0

    from rewardpipe.models import nova_fields

    assert [nova_fields(o) for o in out] == [
        ({"_says_yes": 1.0, "reward_error": 1.0}, {"reward_error": 0}),
        ({"_says_yes": 0.0, "reward_error": 0.0}, {"reward_error": 0}),
    ]
