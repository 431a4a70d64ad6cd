"""Round twenty-nine: the trainer adapters against the inputs the real trainers hand them.

Each test failed before its fix (see docs/changelog.md, round twenty-nine)."""

from __future__ import annotations

import numpy as np

from rewardpipe.integrations.trl import reward_functions

PROMPTS = [[{"role": "user", "content": "2+2?"}]] * 2
UNREADABLE = {"type": "image_url", "image_url": {"url": "x"}}  # a content no text reward can read


class TestTrlReadsTheAnswerItJudges:
    """TRL's adapter judged whether a conversational completion has an answer on its *first* assistant message
    and scored its *last* one. A completion whose final assistant message does not read as text (after a
    readable tool-calling turn) was scored as an empty answer, 0.0 in every component; one whose first
    assistant message did not read but whose final answer did was an error record, its answer never scored."""

    def _scores(self, completions):
        funcs, _ = reward_functions("gsm8k")
        return [fn(PROMPTS, completions, answer=["4", "4"]) for fn in funcs]

    def test_an_unreadable_final_turn_is_an_error_not_a_zero(self):
        completions = [
            [{"role": "assistant", "content": "#### 4"}],
            [{"role": "assistant", "content": "let me see"}, {"role": "assistant", "content": UNREADABLE}],
        ]
        assert [column[1] for column in self._scores(completions)] == [None, None]

    def test_the_final_answer_is_scored_whatever_an_earlier_turn_held(self):
        completions = [
            [{"role": "assistant", "content": "#### 4"}],
            [
                {"role": "assistant", "content": UNREADABLE},
                {"role": "tool", "content": "4"},
                {"role": "Assistant", "content": "#### 4"},
            ],
        ]
        assert [column[1] for column in self._scores(completions)] == [1.0, 1.0]


CODE = "```python\nprint(int(input()) * 2)\n```"
CASES = [{"input": "2\n", "output": "4\n"}, {"input": "5\n", "output": "10\n"}]


class TestVerlReadsParquetValues:
    """verl reads ``reward_model.ground_truth`` from parquet, where a list is a numpy array (a struct is a dict
    whose lists are arrays). A code reference's stdio cases given that way were no tests to the reward: the
    sample was ``reward_error`` with NaN components, where the same cases as a list scored. Numpy values inside
    the ground truth are read as their Python values, in the per-sample and the batch call alike."""

    def _truth(self):
        return {"tests_format": "stdio", "tests": np.array(CASES, dtype=object)}

    def test_per_sample(self):
        from rewardpipe.integrations.verl import compute_score

        info = {"rewardpipe_reward": "code_correctness", "index": np.int64(3)}
        assert compute_score("mine", CODE, self._truth(), info) == {
            "score": 1.0,
            "correctness": 1.0,
            "has_code": 1.0,
            "reward_error": 0.0,
        }

    def test_batch_reward_manager(self):
        from rewardpipe.integrations.verl import compute_score

        out = compute_score(
            data_sources=np.array(["mine"] * 2, dtype=object),
            solution_strs=np.array([CODE, "no code"], dtype=object),
            ground_truths=np.array([self._truth(), self._truth()], dtype=object),
            extra_infos=np.array([{"rewardpipe_reward": "code_correctness"}] * 2, dtype=object),
        )
        assert [(o["correctness"], o["reward_error"]) for o in out] == [(1.0, 0.0), (0.0, 0.0)]

    def test_plain_leaves_python_values_and_deep_nesting_alone(self):
        from rewardpipe.integrations.verl import plain

        assert plain({"a": np.array([[1, 2]]), "b": (np.float64(0.5), "x")}) == {"a": [[1, 2]], "b": (0.5, "x")}
        deep: list = []
        for _ in range(5000):
            deep = [deep]
        assert plain(deep) is not None  # no RecursionError


class TestNovaRftMessageWithoutRole:
    """The Nova Forge SDK's RFT sample makes a message's ``role`` optional. Round twenty-eight left it open: such a
    sample was ``malformed_sample``, its answer never scored. A message without a role is read as a user turn
    of the prompt: the sample is scored on its assistant answer, and a role-less turn is never that answer."""

    def _score(self, messages):
        from rewardpipe.models import nova_fields
        from rewardpipe.single_turn import score_samples

        (out,) = score_samples([{"id": "s", "messages": messages, "reference_answer": "4"}], "gsm8k")
        return out["aggregate_reward_score"], nova_fields(out)[1]

    def test_a_roleless_prompt_turn_is_the_users(self):
        score, flags = self._score(
            [
                {"content": "What is 2+2?"},
                {"role": None, "content": "End with ####."},
                {"role": "assistant", "content": "#### 4"},
            ]
        )
        assert (score, flags.get("reward_error")) == (1.5, 0)

    def test_a_roleless_turn_is_never_the_answer_and_an_empty_role_is_still_refused(self):
        for messages in (
            [{"role": "user", "content": "What is 2+2?"}, {"content": "#### 4"}],
            [{"role": "", "content": "What is 2+2?"}, {"role": "assistant", "content": "#### 4"}],
        ):
            _, flags = self._score(messages)
            assert flags.get("reward_error") == 1 and flags.get("error_malformed_sample") == 1


class TestEpisodeRowCountsTheModelsTurnsOnly:
    """The multi-turn TRL rollout's row (what the reward functions, ``rewardpipe/episode/assistant_turns`` and the
    stored records' metrics say of an episode) counted every assistant message of the conversation, the task
    prompt's few-shot examples included: a two-shot prompt added 2 to every episode's turns. The prompt/completion
    split of a TRL episode is known (the task's prompt messages), and only the turns after it are the model's."""

    def test_few_shot_assistant_turns_in_the_prompt_are_not_the_models(self):
        from rewardpipe.environment import EpisodeState, TaskRow
        from rewardpipe.episode import failure_record
        from rewardpipe.integrations.trl_episodes import Episode, EpisodeTokens
        from rewardpipe.models import Message
        from rewardpipe.rewards import get_reward

        shots = [("user", "Add 1 and 2."), ("assistant", "3"), ("user", "Add 2 and 2."), ("assistant", "4")]
        prompt = [Message(role=r, content=c) for r, c in [*shots, ("user", "Add 3 and 4.")]]
        task = TaskRow(task_id="t", prompt=prompt)
        played = [Message(role="assistant", content="Which base?"), Message(role="user", content="Ten.")]
        state = EpisodeState(messages=[*prompt, *played, Message(role="assistant", content="7")])
        ids = {"run_id": "r", "step": 0, "group_id": "g", "rollout_id": "k", "task_id": "t"}
        record = failure_record(**ids, kind="x", message="-", reward=get_reward("gsm8k"))
        episode = Episode("k", [m.model_dump() for m in prompt], task, EpisodeTokens([1]), state=state, record=record)
        row = episode.row()
        assert (row["assistant_turns"], row["simulator_replies"]) == (2, 1)


class TestVerlScoreIsTheAggregate:
    """verl trains on the dict's ``score``. A reward with a component named ``score`` wrote that component's value
    over it (the docstring said the dict holds the score there): verl trained on one component, 0.25 for an
    aggregate of 1.25. ``score`` is always the aggregate, ``reward_error`` always the flag."""

    def test_a_component_named_score_does_not_replace_the_aggregate(self, tmp_path):
        from rewardpipe.integrations.verl import compute_score, compute_scores

        source = tmp_path / "verl_score_named_reward.py"
        source.write_text(
            "from rewardpipe.rewards import Reward, component\n"
            "@component(range=(0, 1), role='outcome', name='score')\n"
            "def score(completion): return 0.25\n"
            "@component(range=(0, 1), role='shaping', name='reward_error')\n"
            "def flagged(completion): return 1.0\n"
            "REWARD = Reward('mine', [score, flagged])\n"
        )
        info = {"rewardpipe_reward": f"{source}:REWARD"}
        expected = {"score": 1.25, "reward_error": 0.0}
        assert compute_score("x", "an answer", None, info) == expected
        assert compute_scores(["x"], ["an answer"], None, [info]) == [expected]


class TestTrlColumnWithNanIsOneBatch:
    """A dataset column handed over as a numpy array (or pandas Series) is read as its list, made anew at every
    reward-function call. One missing float in it (NaN, which equals no other NaN) made every function's call a
    new batch: the batch was scored once per component (code run again) and never monitored, with a warning that
    blamed the user for not passing every function."""

    def test_the_batch_is_scored_once_and_monitored(self):
        from rewardpipe.integrations.trl import BatchScorer, resolve_reward

        monitored: list[int] = []
        scorer = BatchScorer(resolve_reward("gsm8k", None), on_complete=lambda batch, kwargs: monitored.append(1))
        columns = {"answer": np.array(["4", "5"], dtype=object), "difficulty": np.array([0.5, np.nan])}
        for fn in scorer.functions():
            fn(["q", "q"], ["#### 4", "#### 4"], **columns)
        assert (scorer.batches_scored, scorer.incomplete_batches, monitored) == (1, 0, [1])


class TestNovaGenerateResponseWithoutText:
    """A Nova generate response whose content is no text (a number, an object without ``text``) parsed, then raised
    ValueError out of the router: the message failed until it was dead-lettered and its rollout waited out its
    whole budget. The rollout is now told at once (SendTaskFailure ``PolicyError``: a ``policy_error`` record, the
    error the trainer-callback turns send), and the turn is marked used."""

    def test_the_rollout_ends_as_a_policy_error_at_once(self):
        import json

        from tests.integrations.nova.test_nova_contract import FakeSfn, _bridge

        class Sfn(FakeSfn):
            def __init__(self) -> None:
                super().__init__()
                self.failures: list[dict] = []

            def send_task_failure(self, **kwargs):
                self.failures.append(kwargs)

        bridge, _ = _bridge(sfn=Sfn())
        step = bridge._step_path("s-000_0_0")
        bridge.store.put_json(
            step, {"task_token": "tok", "sample_id": "s-000_0", "step_id": "s-000_0_0", "used": False}
        )
        choice = {"message": {"content": {"type": "image_url"}}, "finish_reason": "stop"}
        response = {"version": "v0", "sample_id": "s-000_0", "step_id": "s-000_0_0", "data": {"choices": [choice]}}
        assert bridge.route_response(json.dumps(response))["status"] == "failed"
        ((failure),) = bridge.sfn.failures
        assert failure["taskToken"] == "tok" and failure["error"] == "PolicyError" and "no text" in failure["cause"]
        assert bridge.store.get_json(step)["used"] is True and not bridge.sfn.successes
        assert bridge.route_response(json.dumps(response))["status"] == "duplicate"
