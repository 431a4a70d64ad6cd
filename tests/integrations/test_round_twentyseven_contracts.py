"""Round twenty-seven: rewardpipe's adapters against the exact external contracts.

Sources: the Nova Forge SDK (``amzn_nova_forge.dataset.dataset_validator.rft_dataset_validator``: an RFT
sample's ``messages[].role`` is optional and compared case-insensitively with "system", "user" and
"assistant"; ``reference_answer`` a string or an object) and verl (``verl.trainer.ppo.reward``: a custom reward
function is called with the config's ``custom_reward_function.reward_kwargs`` merged into every call).
"""

from __future__ import annotations

import pytest

from rewardpipe.models import nova_fields
from rewardpipe.single_turn import score_samples


def _sample(sample_id, answer, roles=("user", "assistant"), reference="42"):
    return {
        "id": sample_id,
        "reference_answer": reference,
        "messages": [
            {"role": roles[0], "content": "What is 6 * 7? End with #### <answer>."},
            {"role": roles[1], "content": f"6 * 7 = {answer}\n#### {answer}"},
        ],
    }


@pytest.mark.parametrize("roles", [("User", "Assistant"), ("USER", "ASSISTANT"), ("user", "Nova_Assistant")])
def test_nova_roles_are_read_whatever_their_case(roles):
    """The SDK's RFT sample accepts any case of a role (``role.lower()``); rewardpipe refused "Assistant" as an
    unknown role, so a sample Nova accepts was a malformed sample (flagged, never scored)."""
    right, wrong = score_samples([_sample("r", 42, roles), _sample("w", 41, roles)], "gsm8k")
    assert nova_fields(right)[1]["reward_error"] == 0, right
    assert right["aggregate_reward_score"] == pytest.approx(1.5)
    assert wrong["aggregate_reward_score"] == pytest.approx(0.5)


def test_an_unknown_role_is_still_refused():
    (out,) = score_samples([_sample("x", 42, ("user", "asistant"))], "gsm8k")
    assert nova_fields(out)[1]["reward_error"] == 1 and nova_fields(out)[1]["error_malformed_sample"] == 1


def test_a_capitalised_assistant_turn_is_not_part_of_the_prompt_its_group_is_keyed_by():
    """Under ``error_reward="neutral"`` a flagged sample gets its own prompt's mean: the prompt is the
    conversation before the last assistant turn, "Assistant" included (else each sample was a group of one
    and got the batch's mean)."""
    roles = ("User", "Assistant")
    other = _sample("other", 41, roles)
    other["messages"][0]["content"] = "Another question. End with #### <answer>."
    outs = score_samples(
        [_sample("right", 42, roles), _sample("unscorable", 43, roles, reference=None), other],
        "gsm8k",
        error_reward="neutral",
    )
    assert [nova_fields(o)[1]["reward_error"] for o in outs] == [0, 1, 0]
    assert outs[1]["aggregate_reward_score"] == pytest.approx(1.5)  # its prompt's mean, not the batch's 1.0
