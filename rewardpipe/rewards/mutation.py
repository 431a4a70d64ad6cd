"""Which component changes the inputs it is given: a check ``doctor`` and ``rewardpipe.testing`` run, not the scorer.

The components of a reward share one sample's inputs, and the platform goes on using them after scoring: the
messages become the stored transcript, and a task row is every later rollout of its group. A component that
sorts the messages it reads, or appends to the task's spec, changes what the components after it score and
what is stored. Copying every input for every component would cost more than most components do, so the
scorer hands them the inputs as they are, and this check, run before training, names the component instead.

It costs nothing unless something changed: the inputs are copied and written down once, scored as usual, and
compared; only when they differ is each component run alone on a fresh copy to name it.
"""

from __future__ import annotations

import contextlib
import copy
import pickle
from collections.abc import Mapping
from typing import Any

#: The ScoringInput arguments a component can change (completion is text, which nothing can change).
MUTABLE_INPUTS = ("messages", "task", "state", "execution", "reference")


def _written_down(value: Any) -> bytes | None:
    """The value's content as bytes (None when it cannot be written down: it is then never called changed)."""
    dump = getattr(value, "model_dump_json", None)
    try:
        if callable(dump):
            return dump().encode()
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - a user's object that neither pydantic nor pickle can write
        return None


def _messages_written_down(messages: Any) -> bytes | None:
    try:
        return b"\n".join(_written_down(m) or b"?" for m in messages) + f"#{len(messages)}".encode()
    except Exception:  # noqa: BLE001 - not a sequence: as any other value
        return _written_down(messages)


def written_down(inputs: Mapping[str, Any]) -> dict[str, bytes | None]:
    """Each mutable input of a sample (ScoringInput keyword arguments), written down to compare later."""
    return {
        name: (_messages_written_down if name == "messages" else _written_down)(inputs[name])
        for name in MUTABLE_INPUTS
        if inputs.get(name) is not None
    }


def changed_inputs(before: Mapping[str, bytes | None], inputs: Mapping[str, Any]) -> list[str]:
    """The inputs whose content differs from ``before`` (:func:`written_down` of the same inputs earlier)."""
    after = written_down(inputs)
    return [name for name, was in before.items() if was is not None and after.get(name) != was]


def pristine_copy(inputs: Mapping[str, Any]) -> dict[str, Any] | None:
    """A deep copy to replay from (one copy of the whole: the state's messages stay the messages), or None."""
    try:
        return copy.deepcopy(dict(inputs))
    except Exception:  # noqa: BLE001 - an input that cannot be copied cannot be checked
        return None


def mutating_components(reward: Any, pristine: Mapping[str, Any]) -> list[str]:
    """One finding per component that changes a fresh copy of ``pristine`` when it scores it alone
    ("component 'name' changed the messages it was given"); for a reward whose scoring changed its inputs
    (so call it only then) and no component does alone, one finding saying so."""
    from rewardpipe.rewards.base import Reward, ScoringInput

    findings: list[str] = []
    for component in reward.components:
        inputs = pristine_copy(pristine)
        if inputs is None:
            return findings
        before = written_down(inputs)
        # Alone and without the reward's hooks; a failure is reported by the checks that score, only changes count.
        with contextlib.suppress(Exception):
            Reward(reward.name, [component]).score_input(ScoringInput(**inputs))
        changed = changed_inputs(before, inputs)
        if changed:
            findings.append(f"component '{component.name}' changed the {' and the '.join(changed)} it was given{_WHY}")
    if not findings:  # none alone: the reward's diagnostics or explain_error, or components only together
        findings.append(
            f"scoring with reward '{reward.name}' changed its inputs (no component does alone: its diagnostics "
            f"or explain_error?){_WHY}"
        )
    return findings


_WHY = (
    " (a component must not change its inputs: the components after it and the stored record see the change; "
    "copy before changing)"
)
