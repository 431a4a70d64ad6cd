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


# --- verl: the number an unscorable sample gets is the error_reward setting, given as a reward_kwarg


def _verl_batch(**reward_kwargs):
    """What verl's batch reward manager passes, with ``custom_reward_function.reward_kwargs`` merged in
    (``verl.trainer.ppo.reward``: the config's kwargs take precedence over the call's)."""
    from rewardpipe.integrations.verl import compute_score

    questions = ["What is 6 * 7?", "What is 6 * 7?", "What is 6 * 7?", "What is 2 + 2?"]
    return compute_score(
        data_sources=["openai/gsm8k"] * 4,
        solution_strs=["#### 42", "#### 41", "#### 42", "#### 4"],
        ground_truths=["42", "42", "forty-two", "4"],  # the third cannot be scored (reference has no number)
        extra_infos=[{"question": q} for q in questions],
        **reward_kwargs,
    )


def test_verl_error_reward_neutral_gives_an_unscorable_sample_its_prompts_mean():
    """verl has no "no reward" value, so a number is forced: rewardpipe ignored an ``error_reward`` reward_kwarg
    (swallowed by ``**kwargs``) and always gave 0.0, a genuine-failure signal in a group of successes."""
    scores = _verl_batch(error_reward="neutral")
    assert [s["reward_error"] for s in scores] == [0.0, 0.0, 1.0, 0.0]
    assert scores[2]["score"] == pytest.approx((scores[0]["score"] + scores[1]["score"]) / 2)
    assert scores[2]["score"] != 0.0


def test_verl_error_reward_defaults_to_zero_and_fail_batch_refuses_the_batch():
    from rewardpipe.single_turn import BatchFailed

    assert _verl_batch()[2]["score"] == 0.0  # unchanged default
    assert _verl_batch(error_reward="zero")[2]["score"] == 0.0
    with pytest.raises(BatchFailed):
        _verl_batch(error_reward="fail_batch")
    with pytest.raises(ValueError, match="error_reward"):
        _verl_batch(error_reward="nuetral")


def test_verl_per_sample_call_takes_error_reward_too():
    from rewardpipe.integrations.verl import compute_score

    out = compute_score("openai/gsm8k", "#### 42", "forty-two", {"question": "q"}, error_reward="zero")
    assert out["reward_error"] == 1.0 and out["score"] == 0.0
    with pytest.raises(ValueError, match="error_reward"):
        compute_score("openai/gsm8k", "#### 42", "42", {"question": "q"}, error_reward="bogus")


# --- Nova multi-turn: an optional field sent as null is that field absent


def _rollout_request(**changes):
    body = {
        "version": "v0",
        "timestamp": 1764900000,
        "sample_id": "sample-000_0",
        "max_length": 10240,
        "rewards": {"range": [0.0, 1.0]},
        "data": {"task_id": "t1"},
    }
    body.update(changes)
    return body


@pytest.mark.parametrize(
    ("field", "value", "read"),
    [
        ("rewards", None, lambda r: r.rewards.range == (0.0, 1.0)),
        ("rewards", {"range": None}, lambda r: r.rewards.range == (0.0, 1.0)),
        ("data", None, lambda r: r.data == {}),
        ("version", None, lambda r: r.version == "v0"),
    ],
    ids=["rewards-null", "range-null", "data-null", "version-null"],
)
def test_a_rollout_request_with_an_optional_field_null_reads_as_if_absent(field, value, read):
    """Absent, ``rewards`` is the default range and ``data`` empty; sent as null they made the whole request a
    ``bad_request`` (answered as an error rollout), where the same request without the key was run."""
    from rewardpipe.integrations.nova.protocol import RolloutRequest, parse

    absent = _rollout_request()
    del absent[field]
    assert read(parse(RolloutRequest, absent))  # the documented default
    assert read(parse(RolloutRequest, _rollout_request(**{field: value})))


def test_a_generate_response_with_version_null_is_read():
    from rewardpipe.integrations.nova.protocol import GenerateResponse, parse

    body = {
        "version": None,
        "sample_id": "sample-000_0",
        "step_id": "sample-000_0_0",
        "data": {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]},
        "finish_reason": "stop",
    }
    response = parse(GenerateResponse, body)
    assert response.text == "hi" and response.stop == "stop"


def test_a_malformed_range_is_still_refused():
    from rewardpipe.integrations.nova.protocol import NovaProtocolError, RolloutRequest, parse

    with pytest.raises(NovaProtocolError, match=r"rewards\.range"):
        parse(RolloutRequest, _rollout_request(rewards={"range": [1.0, 0.0]}))
