"""@component and Reward: inputs by parameter name (a closed vocabulary, checked at decoration), ranges and
roles, weights, sync and async functions, and inputs built only when a component reads them."""

from __future__ import annotations

import asyncio
import importlib.util
import textwrap

import pytest

from rewardpipe import ComponentDefinitionError, Message, Reward, ScoringInput, component
from rewardpipe.rewards.base import Transcript


def test_parameter_names_pick_the_inputs():
    seen = {}

    @component(range=(0, 1), role="outcome")
    def reads_everything(completion, messages, transcript, task, state, execution, reference):
        seen.update(
            completion=completion,
            messages=messages,
            transcript=transcript,
            task=task,
            state=state,
            execution=execution,
            reference=reference,
        )
        return 1.0

    messages = [
        Message(role="user", content="q"),
        Message(role="assistant", content="a1"),
        Message(role="user", content="more"),
        Message(role="assistant", content="a2"),
    ]
    Reward("r", [reads_everything]).score(messages, None, "ref", task="T", state="S")
    assert seen["completion"] == "a2"  # the last assistant message
    assert list(seen["messages"]) == messages and seen["transcript"].assistant_texts == ("a1", "a2")
    assert (seen["task"], seen["state"], seen["execution"], seen["reference"]) == ("T", "S", None, "ref")


def test_an_unknown_parameter_fails_at_decoration_naming_it():
    with pytest.raises(ComponentDefinitionError, match=r"'complection'.*completion, messages"):

        @component(range=(0, 1), role="shaping")
        def typo(complection):
            return 1.0


def test_an_unknown_parameter_fails_when_the_users_module_is_imported(tmp_path):
    module = tmp_path / "user_reward.py"
    module.write_text(
        textwrap.dedent("""
        from rewardpipe import component

        @component(range=(0, 1), role="outcome")
        def graded(completion, gold_answer):
            return 1.0
    """)
    )
    spec = importlib.util.spec_from_file_location("user_reward", module)
    with pytest.raises(ComponentDefinitionError, match="parameter 'gold_answer' is not an input") as caught:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert "user_reward.py:4" in str(caught.value)  # where the function is


@pytest.mark.parametrize("signature", ["*args", "**kwargs", "completion, *, extra=1"])
def test_catch_all_or_extra_parameters_are_refused(signature):
    namespace = {}
    exec(f"def f({signature}):\n    return 1.0", namespace)
    with pytest.raises(ComponentDefinitionError):
        component(range=(0, 1), role="shaping")(namespace["f"])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"role": "outcome"}, "range"),
        ({"range": (0, 1)}, "role"),
        ({"range": (0, 1), "role": "bonus"}, "role must be one of outcome, shaping, penalty"),
        ({"range": (1, 0), "role": "outcome"}, "lo < hi"),
        ({"range": (0, float("inf")), "role": "outcome"}, "finite"),
        ({"range": "01", "role": "outcome"}, "range"),
        ({"range": (0, 1), "role": "outcome", "weight": float("nan")}, "weight"),
        ({"range": (0, 1), "role": "outcome", "name": "aggregate"}, "reserved"),
        ({"range": (0, 1), "role": "outcome", "name": "a/b"}, "name"),
    ],
)
def test_a_bad_declaration_is_refused_at_decoration(kwargs, match):
    def answer(completion):
        return 1.0

    with pytest.raises(ComponentDefinitionError, match=match):
        component(**kwargs)(answer)


def test_a_lambda_needs_a_name():
    with pytest.raises(ComponentDefinitionError, match="name="):
        component(range=(0, 1), role="outcome")(lambda completion: 1.0)


def test_a_bare_decorator_says_what_is_missing():
    with pytest.raises(ComponentDefinitionError, match=r"range=.*role="):

        @component
        def bare(completion):
            return 1.0


def test_a_decorated_function_stays_callable_and_describes_itself():
    @component(range=(-1, 0), role="penalty", weight=0.3)
    def rambles(completion: str) -> float:
        """Too long an answer."""
        return -1.0 if len(completion) > 10 else 0.0

    assert rambles(completion="short") == 0.0 and rambles("a long answer here") == -1.0
    assert (rambles.name, rambles.range, rambles.role, rambles.weight) == ("rambles", (-1.0, 0.0), "penalty", 0.3)
    assert rambles.description == "Too long an answer." and rambles.inputs == ("completion",)
    assert rambles.describe() == {"range": [-1.0, 0.0], "role": "penalty", "weight": 0.3}


def test_reward_weights_override_by_name_and_an_unknown_name_is_an_error():
    a = component(range=(0, 1), role="outcome", name="a")(lambda completion: 1.0)
    b = component(range=(0, 1), role="shaping", name="b")(lambda completion: 0.5)
    reward = Reward("r", [a, b], weights={"b": 2.0})
    assert reward.weights == {"a": 1.0, "b": 2.0}
    assert reward.score([Message(role="assistant", content="x")]).aggregate == pytest.approx(2.0)
    with pytest.raises(ValueError, match=r"no component.*'c'"):
        Reward("r", [a, b], weights={"c": 1.0})


def test_a_reward_takes_only_components_with_unique_names():
    a = component(range=(0, 1), role="outcome", name="a")(lambda completion: 1.0)
    with pytest.raises(ComponentDefinitionError, match="not a component; decorate it"):
        Reward("r", [a, lambda completion: 1.0])
    with pytest.raises(ComponentDefinitionError, match="two components named 'a'"):
        Reward("r", [a, a])
    with pytest.raises(ComponentDefinitionError, match="at least one"):
        Reward("r", [])


def test_async_components_are_awaited_and_a_batch_awaits_them_together():
    running, peak = [0], [0]

    @component(range=(0, 1), role="outcome")
    async def judged(completion):
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.01)
        running[0] -= 1
        return 1.0 if "yes" in completion else 0.0

    sync = component(range=(0, 1), role="shaping", name="length")(lambda completion: min(1.0, len(completion) / 10))
    reward = Reward("judge", [judged, sync])
    assert reward.score([Message(role="assistant", content="yes")]).components == {"judged": 1.0, "length": 0.3}
    inputs = [ScoringInput(messages=[Message(role="assistant", content=t)]) for t in ("yes", "no", "yes!") * 4]
    scores = reward.score_many(inputs)
    assert [s.components["judged"] for s in scores] == [1.0, 0.0, 1.0] * 4
    assert peak[0] == 12  # awaited concurrently, not one after the other


def test_async_components_work_inside_a_running_event_loop():
    @component(range=(0, 1), role="outcome")
    async def judged(completion):
        await asyncio.sleep(0)
        return 1.0

    async def inside():
        return Reward("j", [judged]).score([Message(role="assistant", content="x")]).aggregate

    assert asyncio.run(inside()) == 1.0


def test_a_component_that_reads_the_completion_never_parses_a_transcript(monkeypatch):
    built = []
    original = Transcript.assistant_turns.fget
    monkeypatch.setattr(Transcript, "assistant_turns", property(lambda self: built.append(1) or original(self)))
    cheap = Reward("cheap", [component(range=(0, 1), role="outcome", name="c")(lambda completion: 1.0)])
    cheap.score([Message(role="assistant", content="```python\nx = 1\n```")])
    assert built == []
    parsed = Reward(
        "parsed",
        [component(range=(0, 1), role="outcome", name="p")(lambda transcript: 1.0 if transcript.final_code else 0.0)],
    )
    assert parsed.score([Message(role="assistant", content="```python\nx = 1\n```")]).aggregate == 1.0
    assert built


def test_a_single_parameter_named_data_receives_the_scoring_input():
    @component(range=(0, 1), role="outcome")
    def legacy(data):
        return 1.0 if data.reference == data.completion else 0.0

    assert Reward("l", [legacy]).score([Message(role="assistant", content="7")], None, "7").aggregate == 1.0


def test_none_is_cannot_compute_with_its_explanation_never_zero():
    @component(range=(0, 1), role="outcome")
    def needs_reference(completion, reference):
        return None if reference is None else 1.0

    plain = Reward("n", [needs_reference])
    score = plain.score([Message(role="assistant", content="x")])
    assert score.aggregate is None and score.error.kind == "component_unavailable"
    assert "needs_reference" in score.error.message
    from rewardpipe.models import ErrorInfo

    explained = Reward(
        "n", [needs_reference], explain_error=lambda reference: ErrorInfo(kind="bad_reference", message="no reference")
    )
    assert explained.score([Message(role="assistant", content="x")]).error.kind == "bad_reference"


def test_a_value_that_is_not_a_number_is_an_error_naming_the_component():
    text = component(range=(0, 1), role="outcome", name="chatty")(lambda completion: "high")
    score = Reward("t", [text]).score([Message(role="assistant", content="x")])
    assert score.error.kind == "component_raised" and "chatty" in score.error.message
    assert "not a number" in score.error.message


def test_ranges_and_roles_travel_with_the_reward():
    a = component(range=(0, 1), role="outcome", name="a")(lambda completion: 1.0)
    p = component(range=(-2, 0), role="penalty", name="p", weight=0.5)(lambda completion: 0.0)
    reward = Reward("r", [a, p])
    assert reward.describe() == {
        "a": {"range": [0.0, 1.0], "role": "outcome", "weight": 1.0},
        "p": {"range": [-2.0, 0.0], "role": "penalty", "weight": 0.5},
    }
    assert reward.outcome_components == ("a",) and reward.roles == {"a": "outcome", "p": "penalty"}


def test_the_single_turn_scorer_awaits_a_batchs_async_components_together():
    from rewardpipe.single_turn import score_samples

    running, peak = [0], [0]

    @component(range=(0, 1), role="outcome")
    async def judged(completion):
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.02)
        running[0] -= 1
        return 1.0 if completion == "yes" else 0.0

    samples = [{"id": i, "messages": [{"role": "assistant", "content": "yes" if i % 2 else "no"}]} for i in range(8)]
    results = score_samples(samples, Reward("judge", [judged]))
    assert [r["aggregate_reward_score"] for r in results] == [0.0, 1.0] * 4
    assert [r["id"] for r in results] == list(range(8)) and peak[0] == 8


def test_equality_replace_and_copies_cover_every_parameter_of_a_component():
    """``Component.SETTINGS`` (what equality compares, ``replace`` starts from and a copy is made of) is exactly
    the constructor's parameters: a parameter added to one and not the other would be lost by a copy."""
    import copy
    import inspect

    from rewardpipe.components import SETTINGS, Component

    assert tuple(inspect.signature(Component.__init__).parameters)[1:] == SETTINGS
    made = Component("c", 2.0, lambda completion: 1.0, "d", (0.0, 2.0), "outcome", 5.0)
    assert copy.deepcopy(made) == made and made.replace() == made
    assert all(made.replace(**{name: value}) != made for name, value in [("weight", 1.0), ("timeout_s", None)])
