"""Round thirty-two, part 1b: report transcripts, a Reward subclass's own errors, the verl and verifiers adapters.

Each test failed before its fix (see docs/changelog.md, round thirty-two). The real verl and verifiers packages
are tested in their own venvs (``make test-verl`` / ``make test-verifiers``); these need neither."""

from __future__ import annotations

import math

import pytest

from rewardpipe import component
from rewardpipe.models import ErrorInfo, Message
from rewardpipe.rewards import Reward, Score

#: Text ending as a non-finite value's message does (``rewardpipe.models.NOT_FINITE``), from a value that was finite.
_SPOOF = "component 'main': the model says 7 is not a finite number"


@component(range=(0.0, 1.0), role="outcome")
def main(completion: str) -> float:
    return 1.0 if "1" in completion else None  # type: ignore[return-value]


class _OwnError(Reward):
    """A subclass scoring by its own ``score_input``: an error of its own kind ``component_out_of_range``."""

    def score_input(self, data):  # type: ignore[no-untyped-def]
        score = super().score_input(data)
        if score.error is None:
            return score
        return Score(
            dict.fromkeys(score.components),
            score.weights,
            None,
            {},
            ErrorInfo(kind="component_out_of_range", message=_SPOOF),
        )


class TestAnOverriddenScoreInputIsBounded:
    """A Reward subclass overriding ``score_input`` skipped ``_bounded``: the component_out_of_range error it
    returned kept ``non_finite`` None, so TRL's row kind (and every reader of it) was read from its message: text
    ending "is not a finite number" made a finite value's error ``non_finite_score``. Every score_input a subclass
    defines now goes through the same check as the base class's."""

    def test_its_error_says_no_value_was_not_finite(self):
        reward = _OwnError("own_error", [main])
        score = reward.score([Message(role="user", content="q"), Message(role="assistant", content="no")])
        assert score.error is not None and score.error.kind == "component_out_of_range"
        assert score.error.non_finite is False

    def test_the_trl_row_kind_is_not_read_from_its_message(self):
        from rewardpipe.integrations.trl import _row_kind

        reward = _OwnError("own_error", [main])
        scores = reward.score_columns([_input("no"), _input("1")])
        assert scores.errors[1] is None and scores.errors[0] is not None
        assert _row_kind(scores.errors[0]) == "component_out_of_range"

    def test_a_nan_it_returns_is_no_score(self):
        class Nan(Reward):
            def score_input(self, data):  # type: ignore[no-untyped-def]
                return Score({"main": math.nan}, {"main": 1.0}, math.nan, {}, None)

        score = Nan("nan", [main]).score([Message(role="assistant", content="1")])
        assert score.aggregate is None and score.components == {"main": None}
        assert score.error is not None and score.error.non_finite is True

    def test_its_own_error_naming_a_nan_value_says_it_was_not_finite(self):
        class Own(Reward):
            def score_input(self, data):  # type: ignore[no-untyped-def]
                return Score(
                    {"main": math.inf},
                    {"main": 1.0},
                    None,
                    {},
                    ErrorInfo(kind="component_out_of_range", message="mine"),
                )

        score = Own("own", [main]).score([Message(role="assistant", content="1")])
        assert score.error is not None and score.error.message == "mine" and score.error.non_finite is True


def _input(completion: str):  # type: ignore[no-untyped-def]
    from rewardpipe.rewards import ScoringInput

    return ScoringInput(messages=[Message(role="user", content="q"), Message(role="assistant", content=completion)])


class TestReportTranscriptsAreCapped:
    """A report's alarm example listed every message of its transcript (each cut to 4,000 characters, but any
    number of them: an episode of thousands of messages made megabytes per example). It shows the first 20 and the
    last 40, says how many were left out and where, and numbers assistant turns over the whole transcript."""

    @staticmethod
    def _transcript(count: int):  # type: ignore[no-untyped-def]
        from types import SimpleNamespace

        from rewardpipe.transcripts import Verdict

        messages = [Message(role="user", content="the task")] + [
            Message(role="assistant" if i % 2 == 0 else "user", content=f"m{i}") for i in range(count - 1)
        ]
        kinds = [f"k{i}" for i in range(count)]
        return SimpleNamespace(
            messages=messages, turn_kinds=kinds, reveals_spec=False, executed_code=None,
            verdict=Verdict(status="not_executed"), components={}, aggregate=None,
        )  # fmt: skip

    def test_a_long_transcript_shows_its_first_and_last_messages_and_counts_the_rest(self):
        from rewardpipe.monitoring.report import FIRST_MESSAGES, LAST_MESSAGES, _compact_transcript

        count = 5000
        compact = _compact_transcript(self._transcript(count))
        shown = compact["messages"]
        assert len(shown) == FIRST_MESSAGES + LAST_MESSAGES
        assert compact["messages_count"] == count
        assert compact["messages_left_out"] == count - FIRST_MESSAGES - LAST_MESSAGES
        assert compact["messages_left_out_from"] == FIRST_MESSAGES
        assert shown[0]["content"] == "the task" and shown[-1]["content"] == f"m{count - 2}"
        # the last assistant message is turn (count - 2) // 2 of the whole transcript, not of the ones shown
        last_assistant = next(m for m in reversed(shown) if m["role"] == "assistant")
        assert last_assistant["turn"] == (int(last_assistant["content"][1:])) // 2

    def test_the_page_says_how_many_were_left_out_and_names_turns_as_the_transcript_does(self):
        from rewardpipe.monitoring.html import _transcript
        from rewardpipe.monitoring.report import _compact_transcript

        compact = _compact_transcript(self._transcript(1001))
        page = _transcript({"rollout_id": "r", "group_id": "g", "step": 0, "transcript": compact})
        assert f"{compact['messages_left_out']} messages left out" in page
        assert "assistant · turn 499 · k499" in page and "assistant · turn 500" not in page

    def test_a_short_transcript_is_shown_whole(self):
        from rewardpipe.monitoring.report import _compact_transcript

        compact = _compact_transcript(self._transcript(7))
        assert [m["content"] for m in compact["messages"]] == ["the task", *(f"m{i}" for i in range(6))]
        assert compact["messages_left_out"] == 0 and "messages_left_out_from" not in compact
        assert all("turn" not in m for m in compact["messages"])  # as before the cap


class TestVerlNeutralIsTheGroupsMean:
    """verl's batch reward manager with ``error_reward: neutral``: an unscorable sample scores the mean of its group's
    scored samples. A group was read from ``extra_info["question"]`` only; verl's MATH preprocessing (and any dataset
    keeping the prompt in its own column) gives ``extra_info`` ``{"split", "index"}``, so every sample of the batch
    fell in one group and an unscorable sample scored the batch's mean (an advantage far from 0 in a group of
    right answers). verl repeats a row's ``extra_info`` for each of its rollouts: its ``index`` names the group."""

    def test_the_mean_is_of_the_samples_with_its_index(self):
        from rewardpipe.integrations.verl import compute_score

        solutions = ["#### 5", "#### 5", None, "#### 4", "#### 4", None]
        infos = [{"split": "train", "index": index} for index in (0, 0, 0, 1, 1, 1)]
        out = compute_score(
            data_sources=["openai/gsm8k"] * 6, solution_strs=solutions, ground_truths=["5"] * 6, extra_infos=infos,
            error_reward="neutral",
        )  # fmt: skip
        assert [row["reward_error"] for row in out] == [0, 0, 1, 0, 0, 1]
        assert out[2]["score"] == out[0]["score"] and out[5]["score"] == out[3]["score"]
        assert out[0]["score"] != out[3]["score"]

    def test_samples_of_one_question_without_an_index_are_still_one_group(self):
        from rewardpipe.integrations.verl import compute_score

        infos = [{"question": q} for q in ("a", "a", "b", "b")]
        out = compute_score(
            data_sources=["gsm8k"] * 4, solution_strs=["#### 5", None, "#### 4", None], ground_truths=["5"] * 4,
            extra_infos=infos, error_reward="neutral",
        )  # fmt: skip
        assert out[1]["score"] == out[0]["score"] and out[3]["score"] == out[2]["score"]


class TestVerlRewardChoiceIsNeverSilentlyAnother:
    """Which reward scores a verl sample: ``extra_info["rewardpipe_reward"]``, else the data source, else gsm8k. A
    ``rewardpipe_reward`` that is not text (a number, a list: a dataset column of another type) was ignored, and a
    data source rewardpipe does not know (``lighteval/MATH``) scored by gsm8k, both without a word: a run trained on
    another reward than the one asked for. The first is a ValueError naming it (as an unknown name is); the second
    is logged once per data source, naming the reward used and how to choose one."""

    @pytest.mark.parametrize("chosen", [5, ["gsm8k"], b"gsm8k"])
    def test_a_reward_choice_that_is_not_text_is_refused(self, chosen):
        from rewardpipe.integrations.verl import compute_score

        with pytest.raises(ValueError, match="rewardpipe_reward"):
            compute_score("openai/gsm8k", "#### 5", "5", extra_info={"rewardpipe_reward": chosen})
        with pytest.raises(ValueError, match="rewardpipe_reward"):
            compute_score(
                data_sources=["gsm8k"], solution_strs=["#### 5"], ground_truths=["5"],
                extra_infos=[{"rewardpipe_reward": chosen}],
            )  # fmt: skip

    def test_an_unknown_data_source_is_named_once(self, caplog):
        from rewardpipe.integrations import verl

        verl._WARNED_SOURCES.clear()
        with caplog.at_level("WARNING", logger="rewardpipe.verl"):
            for _ in range(3):
                verl.compute_score("lighteval/MATH", "#### 5", "5", extra_info={})
            verl.compute_score("openai/gsm8k", "#### 5", "5", extra_info={})
            verl.compute_score("lighteval/MATH", "#### 5", "5", extra_info={"rewardpipe_reward": "gsm8k"})
        warned = [r.getMessage() for r in caplog.records if r.name == "rewardpipe.verl"]
        assert len(warned) == 1
        assert "lighteval/MATH" in warned[0] and "gsm8k" in warned[0] and "rewardpipe_reward" in warned[0]

    def test_a_missing_choice_read_by_pandas_is_no_choice(self):
        from rewardpipe.integrations.verl import compute_score

        out = compute_score("openai/gsm8k", "#### 5", "5", extra_info={"rewardpipe_reward": math.nan})
        assert out["score"] == 1.5 and out["reward_error"] == 0


def test_verl_neutral_with_an_index_nested_past_the_recursion_limit_is_scored():
    """The group key of ``neutral`` reads ``extra_info["index"]``: one that has no repr is no group of its own, never
    a RecursionError out of the batch."""
    from rewardpipe.integrations.verl import compute_score

    inner: list = []
    for _ in range(5000):
        inner = [inner]
    out = compute_score(
        data_sources=["gsm8k"] * 2, solution_strs=["#### 5", None], ground_truths=["5"] * 2,
        extra_infos=[{"index": inner}, {"index": inner}], error_reward="neutral",
    )  # fmt: skip
    assert [row["reward_error"] for row in out] == [0, 1] and out[1]["score"] == out[0]["score"]


class TestVerlKeysOfItsOwn:
    """verl's validation puts each sample's score under ``reward`` in its per-key lists, then extends them with the
    dict's other keys, and asserts every list is one value a sample. A component named ``reward`` was a key of the
    dict: that list got two values a sample and verl's validation failed its assertion. ``reward`` is one of verl's
    keys, as ``score`` is: the component is scored and summed, and left out of the dict."""

    def test_a_component_named_reward_is_not_a_key(self, tmp_path):
        from rewardpipe.integrations.verl import compute_score

        source = tmp_path / "verl_reward_named_reward.py"
        source.write_text(
            "from rewardpipe.rewards import Reward, component\n"
            "@component(range=(0, 1), role='outcome', name='reward')\n"
            "def reward(completion): return 0.25\n"
            "@component(range=(0, 1), role='shaping')\n"
            "def other(completion): return 1.0\n"
            "REWARD = Reward('mine_reward', [reward, other])\n"
        )
        info = {"rewardpipe_reward": f"{source}:REWARD"}
        assert compute_score("x", "an answer", None, info) == {"score": 1.25, "other": 1.0, "reward_error": 0.0}
        batch = compute_score(data_sources=["x"], solution_strs=["an answer"], ground_truths=None, extra_infos=[info])
        assert batch == [{"score": 1.25, "other": 1.0, "reward_error": 0.0}]


class TestVerifiersScoringThatRaisesIsNan:
    """verifiers turns a rubric function's exception into 0.0. A rubric function of rewardpipe's raised when scoring
    its sample failed outside the reward's components (the sandbox's executor could not be made, an infrastructure
    fault): every component of the sample read 0.0, a wrong answer's score, and nothing said otherwise. Such a
    sample is NaN in every function now (``settle_group`` then settles it, flagged ``reward_error``), and the
    failure is logged."""

    def test_every_function_of_the_sample_is_nan_and_the_failure_is_logged(self, monkeypatch, caplog):
        import rewardpipe.integrations.verifiers as verifiers

        def down(*_args, **_kwargs):
            raise RuntimeError("sandbox unavailable")

        monkeypatch.setattr(verifiers, "score_samples", down)
        funcs, _ = verifiers.rubric_functions("gsm8k")
        with caplog.at_level("WARNING", logger="rewardpipe.verifiers"):
            values = [f(completion="#### 5", answer="5", prompt="q") for f in funcs]
        assert all(math.isnan(v) for v in values)
        assert "sandbox unavailable" in caplog.text

    def test_an_interrupt_still_stops_the_run(self, monkeypatch):
        import rewardpipe.integrations.verifiers as verifiers

        def interrupted(*_args, **_kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(verifiers, "score_samples", interrupted)
        funcs, _ = verifiers.rubric_functions("gsm8k")
        with pytest.raises(KeyboardInterrupt):
            funcs[0](completion="#### 5", answer="5", prompt="q")


class TestVerlRewardKwargsItDoesNotRead:
    """verl hands ``custom_reward_function.reward_kwargs`` to every call. ``compute_score`` took any keyword and read
    only ``error_reward``: a misspelt one (``error_rewards: neutral``) or one it has not (``weights``) was dropped
    without a word, and unscorable samples scored 0.0 where the user had asked for the group's mean. A keyword it
    does not read is named once in a warning; the ones verl itself passes are not."""

    def test_a_keyword_it_does_not_read_is_named_once(self, caplog):
        from rewardpipe.integrations import verl

        verl._WARNED_KWARGS.clear()
        with caplog.at_level("WARNING", logger="rewardpipe.verl"):
            for _ in range(3):
                verl.compute_score("openai/gsm8k", "#### 5", "5", {}, error_rewards="neutral")
            verl.compute_score(
                data_sources=["openai/gsm8k"], solution_strs=["#### 5"], ground_truths=["5"], extra_infos=[{}],
                reward_router_address=None, reward_model_tokenizer=None,
            )  # fmt: skip
        warned = [r.getMessage() for r in caplog.records if r.name == "rewardpipe.verl"]
        assert len(warned) == 1 and "error_rewards" in warned[0] and "error_reward" in warned[0]
