"""Round thirty-six, adoption: the synth refuses an environment's reward as the single-turn Lambda's reward.

The synth refused a single-turn reward (one reading ``reference``) as the rollouts' reward, but took the other
mistake: an environment's reward (its components read ``state``) as ``single_turn_reward``. A single-turn sample
has no episode, so on AWS every sample of the Nova single-turn Lambda was an error record. No synth is needed.
"""

from __future__ import annotations

import pytest

from stacks.config import SettingsError, load_settings


@pytest.mark.parametrize("reward, readers", [("wordle", "solved"), ("ask_before_coding", "asked_before_coding")])
def test_an_environments_reward_as_the_single_turn_reward_fails_the_synth_naming_it(reward, readers):
    with pytest.raises(SettingsError) as caught:
        load_settings({"single_turn_reward": reward})
    said = str(caught.value)
    assert "rewardpipe.single_turn_reward" in said and "'state'" in said and readers in said
    assert "rewardpipe.reward" in said  # where such a reward belongs


def test_the_single_turn_rewards_still_deploy():
    for reward in ("gsm8k", "code_correctness"):
        assert load_settings({"single_turn_reward": reward}).single_turn_reward == reward
