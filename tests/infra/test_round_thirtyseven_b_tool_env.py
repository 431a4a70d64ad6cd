"""Round thirty-seven (second wave), a new user's tool-use environment: the synth's settings for a package."""

import pytest

from stacks.config import SettingsError, load_settings


@pytest.mark.parametrize("environment", [None, "tool_call", "wordle"])
def test_weights_left_from_another_reward_name_the_setting_as_the_user_wrote_it(environment):
    # The environment's own reward (`reward` unset) with `reward_weights` left over from this repository's cdk.json
    # (what deploy-your-own-package.md says to delete): the message showed `rewardpipe.environment = "<the reward's
    # import reference>"`, a value the user never wrote and that is not an environment.
    raw = {"reward_weights": {"loudness": 1.0}}
    if environment is not None:
        raw["environment"] = environment
    with pytest.raises(SettingsError) as caught:
        load_settings(raw)
    message = str(caught.value)
    shown = environment or "ask_before_coding"
    assert message.startswith(f'rewardpipe.environment = "{shown}"'), message
    assert "rewardpipe.reward is unset" in message and "rewardpipe.reward_weights" in message
    assert "loudness" in message and ".reward:" not in message
