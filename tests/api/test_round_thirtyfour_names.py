"""Round thirty-four: a component named like the single-turn answer's error flag is refused at its definition.

Before, a component named ``reward_error`` made a Nova reward answer carry two ``reward_error`` entries in its
``metrics_list`` (the component's, type ``Reward``, and the flag, type ``Metric``): rewardpipe's readers tell them
apart by type, a reader of the metrics by name (Nova's own logging) does not."""

from __future__ import annotations

import pytest

from rewardpipe import component
from rewardpipe.components import ComponentDefinitionError


def test_a_component_named_like_the_error_flag_is_refused_naming_why():
    with pytest.raises(ComponentDefinitionError, match=r"reward_error.*error flag"):

        @component(range=(0, 1), role="outcome", name="reward_error")
        def flagged(completion):
            return 1.0


def test_names_near_it_and_a_reward_of_that_name_stay_allowed():
    from rewardpipe import Reward

    @component(range=(0, 1), role="outcome", name="reward_errors")
    def near(completion):
        return 1.0

    assert Reward("reward_error", [near]).name == "reward_error"
