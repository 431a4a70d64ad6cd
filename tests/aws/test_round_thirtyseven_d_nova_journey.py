"""Round thirty-seven (third wave), a Nova Forge user's journey: the reward-Lambda contract, item by item.

* ``reference_answer`` "appears in three places ... inside ``metadata``, at the top level, or as
  ``reference_answer.text``. Read all three." A place left empty as ``{"text": null}`` (the ``.text`` shape with
  nothing in it) hid the other place's answer: the sample was a ``bad_reference``, answered with ``error_reward``
  instead of scored, although its reference was there; so did a blank one (``""``, ``{"text": ""}``), which is
  now the reference only when no place holds another.
"""

from __future__ import annotations

import pytest

from tests.aws.handlers import Context
from tests.aws.test_round_thirtythree_nova import gsm8k  # noqa: F401 - the fixture: the handler with gsm8k


def _conversation(answer: str) -> list[dict]:
    return [
        {"role": "user", "content": "What is 6 * 7? End with #### <answer>."},
        {"role": "assistant", "content": f"6 * 7 = {answer}\n#### {answer}"},
    ]


def _flags(result: dict) -> dict:
    return {m["name"]: m["value"] for m in result["metrics_list"] if m["type"] == "Metric"}


EMPTY_PLACES = [None, {"text": None}, "", {"text": ""}]


@pytest.mark.parametrize("empty", EMPTY_PLACES, ids=["null", "text-null", "blank", "text-blank"])
@pytest.mark.parametrize("filled", ["42", {"text": "42"}], ids=["plain", "text"])
@pytest.mark.parametrize("metadata_empty", [True, False], ids=["metadata-empty", "top-empty"])
def test_an_empty_reference_place_never_hides_the_filled_one(gsm8k, empty, filled, metadata_empty):  # noqa: F811
    sample = {"id": "s", "messages": _conversation("42"), "metadata": {"task_id": "t"}}
    sample["metadata"]["reference_answer"] = empty if metadata_empty else filled
    sample["reference_answer"] = filled if metadata_empty else empty
    right, wrong = gsm8k.lambda_handler([sample, {**sample, "id": "w", "messages": _conversation("41")}], Context())
    assert _flags(right)["reward_error"] == 0, right
    assert right["aggregate_reward_score"] == pytest.approx(1.5)
    assert wrong["aggregate_reward_score"] == pytest.approx(0.5)  # read, and compared: not a constant


def test_a_blank_reference_alone_is_still_the_reference(gsm8k):  # noqa: F811
    """A blank text is a value (a code task whose expected output is empty): only another place's value wins."""
    sample = {"id": "s", "messages": _conversation("42"), "metadata": {"reference_answer": ""}}
    (result,) = gsm8k.lambda_handler([sample], Context())
    assert _flags(result)["error_bad_reference"] == 1  # read as "", which gsm8k refuses as no number


def test_a_sample_whose_every_place_is_empty_is_still_flagged_bad_reference(gsm8k):  # noqa: F811
    sample = {"id": "s", "messages": _conversation("42"), "metadata": {"reference_answer": {"text": None}}}
    sample["reference_answer"] = {"text": None}
    (result,) = gsm8k.lambda_handler([sample], Context())
    assert _flags(result)["reward_error"] == 1 and _flags(result)["error_bad_reference"] == 1
