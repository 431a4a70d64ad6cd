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
