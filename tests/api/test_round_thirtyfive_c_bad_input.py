"""Round thirty-five (third wave), bad input: a component declared wrongly is refused when it is defined, naming
what was wrong, instead of being read as something else or failing every sample it scores."""

from __future__ import annotations

import pytest

from rewardpipe import component
from rewardpipe.components import Component, ComponentDefinitionError


def _answer(completion):
    return 1.0


@pytest.mark.parametrize("bad_range", [("0", "1"), (False, True), (0, "1"), {0.0, 1.0}, {"lo": 0, "hi": 1}])
def test_a_range_that_is_not_two_numbers_is_refused_naming_it(bad_range):
    with pytest.raises(ComponentDefinitionError, match=r"range must be two numbers \(lo, hi\)") as raised:
        component(range=bad_range, role="outcome")(_answer)
    assert repr(bad_range) in str(raised.value)


def test_a_range_of_real_numbers_of_any_kind_is_still_taken():
    from fractions import Fraction

    assert component(range=[Fraction(-1, 2), 1], role="shaping")(_answer).range == (-0.5, 1.0)


def _yields(completion):
    yield 1.0


async def _yields_async(completion):
    yield 1.0


@pytest.mark.parametrize(("function", "kind"), [(_yields, "a generator"), (_yields_async, "an async generator")])
def test_a_generator_function_is_refused_when_decorated_not_an_error_on_every_sample(function, kind):
    with pytest.raises(ComponentDefinitionError, match=f"{function.__name__} is {kind} function") as raised:
        component(range=(0, 1), role="outcome")(function)
    assert "test_round_thirtyfive_c_bad_input.py" in str(raised.value)  # names where it is defined
    with pytest.raises(ComponentDefinitionError, match="generator"):
        Component("direct", 1.0, function, value_range=(0, 1), role="outcome")


def test_a_component_decorated_twice_is_named_as_such():
    once = component(range=(0, 1), role="outcome")(_answer)
    with pytest.raises(ComponentDefinitionError, match="'_answer' is already a component"):
        component(range=(0, 1), role="shaping")(once)


# -- score_samples, the library's batch scorer ----------------------------------------------------------------------


def _sample(**fields):
    messages = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "#### 4"}]
    return {"messages": messages, **fields}


def _error_kinds(answers):
    return [[m["name"] for m in a["metrics_list"] if m["name"].startswith("error_")] for a in answers]


@pytest.mark.parametrize("batch", [tuple, lambda items: (item for item in items)], ids=["tuple", "generator"])
def test_a_batch_given_as_a_tuple_or_generator_is_answered_sample_by_sample(batch):
    from rewardpipe.single_turn import score_samples

    answers = score_samples(batch([_sample(id="a", reference_answer="4"), _sample(id="b", reference_answer="5")]))
    assert [a["id"] for a in answers] == ["a", "b"]  # one answer each, not one malformed_event for the batch
    assert [a["aggregate_reward_score"] for a in answers] == [1.5, 0.5]
    assert _error_kinds(answers) == [[], []]


@pytest.mark.parametrize(
    "fields", [{"reference": "4"}, {"metadata": {"reference": "4"}}], ids=["top level", "in metadata"]
)
def test_a_reference_under_the_files_field_name_is_named_not_read_as_no_reference(fields):
    from rewardpipe.single_turn import Sample, misnamed_reference, score_samples

    problem = misnamed_reference(Sample.model_validate(_sample(**fields)))
    where = "metadata.reference" if "metadata" in fields else "'reference'"
    assert problem is not None and where in problem and "'reference_answer'" in problem
    (answer,) = score_samples([_sample(**fields)])
    assert _error_kinds([answer]) == [["error_malformed_sample"]]  # was error_bad_reference: "not a number: None"
    # with reference_answer given, a stray `reference` is only an extra field, as before
    assert misnamed_reference(Sample.model_validate(_sample(reference_answer="4", **fields))) is None


# -- weights given as something other than a mapping --------------------------------------------------------------


@pytest.mark.parametrize("weights", [["format"], [("format", 0.5)], "format=0.5", 0], ids=repr)
def test_weights_that_are_not_a_mapping_are_refused_naming_what_was_given(weights):
    from rewardpipe import Reward
    from rewardpipe.rewards import get_reward

    gsm8k = get_reward("gsm8k")
    for make in (
        lambda: gsm8k.with_weights(weights),
        lambda: get_reward("gsm8k", weights),
        lambda: Reward("mine", gsm8k.components, weights),
    ):
        with pytest.raises(TypeError, match="weights must be a mapping of component name to weight") as raised:
            make()
        assert type(weights).__name__ in str(raised.value)


def test_unknown_weight_names_of_mixed_types_are_listed_not_a_sorting_error():
    from rewardpipe.rewards import get_reward

    with pytest.raises(ValueError, match=r"has no component\(s\) .*'x'.*; known: \['format', 'answer_correct'\]"):
        get_reward("gsm8k").with_weights({1: 1.0, "x": 2.0})


# -- check_reward's samples --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ({"completion": 5}, "sample 1: 'completion' must be the answer's text, got int"),
        ({"messages": "4"}, "sample 1: 'messages' must be a list of messages"),
        ({"messages": [{"role": "user", "content": "q"}, {"role": "bot", "content": "4"}]}, "field 'messages[1].role'"),
        ({"messages": [{"role": "assistant", "content": 4}]}, "field 'messages[0].content'"),
    ],
)
def test_check_reward_names_the_sample_and_field_it_cannot_read(bad, named):
    from rewardpipe.testing import check_reward

    with pytest.raises(ValueError) as raised:
        check_reward("gsm8k", [{"completion": "#### 4", "reference": "4"}, {**bad, "reference": "4"}])
    assert named in str(raised.value)
    assert "validation error for" not in str(raised.value)  # not pydantic's report of a model the user never named
