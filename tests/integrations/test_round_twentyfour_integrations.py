"""Round twenty-four: an independent review of the trainer integrations (TRL, verl, verifiers, Nova Forge).
Each class's docstring names the bug it pins."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rewardpipe.integrations.verifiers_env import VerifiersEnvironment, VerifiersError


def _env(*funcs_and_weights):
    rubric = SimpleNamespace(funcs=[f for f, _ in funcs_and_weights], weights=[w for _, w in funcs_and_weights])
    return SimpleNamespace(rubric=rubric, max_turns=-1)


def _wrap(vf_env, **kwargs):
    return VerifiersEnvironment(vf_env, name="toy", version="1", reward_name="toy", **kwargs)


def correct(completion, answer):
    return 1.0


class TestRubricFunctionNames:
    """``from_verifiers`` named each component after its rubric function's ``__name__``, which verifiers takes
    as Python gives it. A rubric holding a lambda (``vf.Rubric(funcs=[lambda completion, answer: ...])``) or a
    function whose name is over 64 characters could not be wrapped at all (``component name '<lambda>' must
    start with a letter``), and a second function of an already-suffixed name (``f``, ``f_2``, ``f``) was
    named ``f_2`` twice (``reward 'toy' has two components named 'f_2'``). The name is now made valid
    (other characters ``_``, cut at 64, never a reserved name) and unique."""

    def test_a_lambda_is_a_component(self):
        wrapped = _wrap(_env((correct, 1.0), (lambda completion: 0.5, 0.2)))
        assert wrapped.reward.component_names == ["correct", "_lambda_"]
        assert [c.weight for c in wrapped.reward.components] == [1.0, 0.2]

    def test_two_lambdas_get_two_names(self):
        wrapped = _wrap(_env((lambda completion: 1.0, 1.0), (lambda completion: 0.5, 0.5)))
        assert wrapped.reward.component_names == ["_lambda_", "_lambda__1"]

    def test_a_long_name_is_cut_and_stays_unique(self):
        def long(completion):
            return 1.0

        other = lambda completion: 0.0  # noqa: E731 - renamed below
        long.__name__ = other.__name__ = "x" * 80
        wrapped = _wrap(_env((long, 1.0), (other, 1.0)))
        first, second = wrapped.reward.component_names
        assert first == "x" * 64 and len(second) == 64 and second.endswith("_1") and first != second

    def test_a_suffixed_name_already_taken_is_skipped(self):
        def f(completion):
            return 1.0

        def f_2(completion):
            return 1.0

        g = lambda completion: 1.0  # noqa: E731 - renamed below
        g.__name__ = "f"
        assert _wrap(_env((f, 1.0), (f_2, 1.0), (g, 1.0))).reward.component_names == ["f", "f_2", "f_3"]

    def test_reserved_and_unnamed(self):
        from rewardpipe.integrations.verifiers_env import component_name

        assert component_name("aggregate", set()) == "aggregate_fn"
        assert component_name("1st", set()) == "_1st"
        assert component_name("", set()) == "rubric_function"

    def test_ranges_are_keyed_by_the_component_name(self):
        wrapped = _wrap(_env((lambda completion: 3.0, 1.0)), ranges={"_lambda_": (0.0, 5.0)})
        assert wrapped.reward.components[0].value_range == (0.0, 5.0)
        with pytest.raises(VerifiersError, match="the rubric has \\['_lambda_'\\]"):
            _wrap(_env((lambda completion: 3.0, 1.0)), ranges={"<lambda>": (0.0, 5.0)})


def _train(callback, batches, completions):
    """``batches`` training batches of four groups of four through the callback's reward functions, as TRL
    calls them (the trainer is ``log_metric``'s owner)."""

    class Trainer:
        reward_funcs, reward_weights, num_generations = callback.reward_funcs, [0.5, 1.0], 4
        model = SimpleNamespace(training=True)
        state = SimpleNamespace(global_step=0)

        def log(self, name, value):
            pass

    trainer = Trainer()
    prompts = [f"q{g}" for g in range(4) for _ in range(4)]
    for _ in range(batches):
        for fn in callback.reward_funcs:
            fn(prompts=prompts, completions=completions, answer=["1"] * 16, log_metric=trainer.log, trainer_state=None)
        trainer.state.global_step += 1


class TestResumedRunKeepsItsStoredSteps:
    """The TRL callback numbered its records' steps from 0 in every process it ran in. A run resumed from a
    checkpoint with its ``run_id`` (the way to keep one run in the store) wrote its first batches over the
    stored steps 0, 1, ... of the run before it (``put_record`` replaces a record of the same step and
    rollout), and its fresh monitor state over the saved one, which lost the alarms' hysteresis and marked the
    earlier steps unchecked again. The main process now reads the run's stored steps and state before its
    first write and goes on after the last one."""

    def test_a_resumed_run_goes_on_after_the_stored_steps(self, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor
        from rewardpipe.monitoring.state import MonitorState, state_key
        from rewardpipe.store import LocalStore

        store = LocalStore(tmp_path)
        dead = [f"#### {i % 2}" for i in range(16)]  # format always 1.0: dead
        first = RewardPipeMonitor(reward="gsm8k", run_id="run", store=store)
        _train(first, 3, dead)
        assert store.list_steps("run") == [0, 1, 2]
        before = {r.rollout_id: r.aggregate for r in store.iter_records("run", 0)}

        resumed = RewardPipeMonitor(reward="gsm8k", run_id="run", store=store)
        _train(resumed, 2, ["no answer"] * 16)
        assert store.list_steps("run") == [0, 1, 2, 3, 4]
        assert {r.rollout_id: r.aggregate for r in store.iter_records("run", 0)} == before
        saved = MonitorState.from_dict(__import__("json").loads(store.get_bytes(state_key("run"))))
        assert saved.is_checked(0) and saved.is_checked(2) and saved.last_step == 4
        assert [r.step for r in resumed.reports] == [3, 4]
        assert not resumed.failures

    def test_a_new_run_starts_at_step_zero(self, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor
        from rewardpipe.store import LocalStore

        store = LocalStore(tmp_path)
        callback = RewardPipeMonitor(reward="gsm8k", run_id="fresh", store=store)
        _train(callback, 1, ["#### 1"] * 16)
        assert store.list_steps("fresh") == [0] and not callback.failures

    def test_a_store_that_cannot_list_is_not_written_over_and_is_tried_again(self, tmp_path):
        from rewardpipe.integrations.trl import RewardPipeMonitor
        from rewardpipe.store import LocalStore

        store = LocalStore(tmp_path)
        _train(RewardPipeMonitor(reward="gsm8k", run_id="run", store=store), 1, ["#### 1"] * 16)
        listing = store.list_steps

        def refused(run_id, **kwargs):
            raise OSError("throttled")

        store.list_steps = refused  # type: ignore[method-assign]
        resumed = RewardPipeMonitor(reward="gsm8k", run_id="run", store=store)
        _train(resumed, 1, ["no answer"] * 16)
        assert [r.aggregate for r in store.iter_records("run", 0)] == [1.5] * 16  # not replaced
        assert any("throttled" in f for f in resumed.failures) and len(resumed.reports) == 1
        store.list_steps = listing  # type: ignore[method-assign]
        _train(resumed, 1, ["no answer"] * 16)
        assert store.list_steps("run") == [0, 1]


SEEN: list[list[tuple[str, str]]] = []


def _conversation_seen(messages) -> float:
    SEEN.append([(m.role, m.content) for m in messages])
    return 1.0


class TestVerlChatPrompt:
    """verl's ``compute_score`` made ``extra_info["question"]`` (else ``["prompt"]``) the content of one user
    message, whatever it held. A chat prompt, verl's own ``prompt`` format (``[{"role": "system", ...},
    {"role": "user", ...}]``), became a user message whose content was that list (read as text: empty), and
    one read through numpy (an object array, a one-string array) became its repr
    (``"[{'role': 'system', ...} {...}]"``, ``"['What is 2+2?']"``): a reward reading the conversation scored
    a question it was never asked. A chat prompt is now the conversation itself, an array its list."""

    @pytest.fixture
    def reward(self):
        from rewardpipe.rewards import Reward, component

        SEEN.clear()
        seen = component(range=(0.0, 1.0), role="outcome", name="seen", description="the conversation")(
            _conversation_seen
        )
        return Reward("seen_conversation", [seen])

    @pytest.mark.parametrize("as_array", [False, True])
    def test_a_chat_prompt_is_the_conversation(self, reward, monkeypatch, as_array):
        import numpy as np

        from rewardpipe.integrations import verl

        monkeypatch.setattr(verl, "get_reward", lambda name: reward)
        chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
        prompt = np.array(chat, dtype=object) if as_array else chat
        out = verl.compute_score("mine", "#### 4", "4", {"prompt": prompt})
        assert out == {"score": 1.0, "seen": 1.0, "reward_error": 0.0}
        assert SEEN == [[("system", "Be brief."), ("user", "What is 2+2?"), ("assistant", "#### 4")]]

    def test_a_question_read_as_an_array_is_its_text(self, reward, monkeypatch):
        import numpy as np

        from rewardpipe.integrations import verl

        monkeypatch.setattr(verl, "get_reward", lambda name: reward)
        verl.compute_score("mine", "#### 4", "4", {"question": np.array(["What is 2+2?"])})
        verl.compute_score("mine", "#### 4", "4", {"question": np.str_("What is 3+3?")})
        verl.compute_score("mine", "#### 4", "4", {"question": np.int64(7)})
        assert [conversation[0] for conversation in SEEN] == [
            ("user", "What is 2+2?"),
            ("user", "What is 3+3?"),
            ("user", "7"),
        ]


class TestVerifiersAnswerThatDoesNotSort:
    """verifiers' rubric functions keyed each sample by ``json.dumps(..., sort_keys=True)``: an answer dict whose
    keys do not sort together (``{1: "4", "unit": "m"}``) raised ``TypeError`` out of every rubric function,
    and verifiers turns a raising reward function into 0.0, the silent zero the adapter promises never to
    give. Such a sample is now keyed by its repr: NaN like any unscorable sample, still scored once."""

    def test_an_unsortable_answer_is_nan_scored_once(self):
        from rewardpipe.integrations.verifiers import rubric_functions

        funcs, _ = rubric_functions("gsm8k")
        values = [fn(completion="#### 4", answer={1: "4", "unit": "m"}, prompt="q") for fn in funcs]
        assert len(values) == 2 and all(v != v for v in values)  # NaN, not verifiers' 0.0
        assert funcs[0].rewardpipe_scorer.samples_scored == 1

    def test_a_sortable_answer_is_keyed_as_before(self):
        from rewardpipe.integrations.verifiers import rubric_functions

        funcs, _ = rubric_functions("gsm8k")
        assert [fn(completion="#### 4", answer="4", prompt="q") for fn in funcs] == [1.0, 1.0]
        assert funcs[0].rewardpipe_scorer.samples_scored == 1
