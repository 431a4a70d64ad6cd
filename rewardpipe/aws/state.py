"""Rollout state kept in S3, so no Step Functions payload ever carries a transcript.

Step Functions refuses any state input or output over 256 KiB (262,144 bytes) with
``States.DataLimitExceeded``, which a ``States.ALL`` Catch does not catch: the execution just fails
with no record. A transcript of a few long turns passes that size easily, so the states pass only
small references and the bulky things live here, one folder per execution attempt::

    runs/<run>/state/<attempt>/episode.json       the episode as far as it got (its ``version`` counts the writes)
    runs/<run>/state/<attempt>/failed-<n>.json    the turns a step that failed mid-way had got to
    runs/<run>/state/<attempt>/replay.json        the replay turns, stored once at the start
    runs/<run>/state/<attempt>/reply-<n>.json     a trainer reply too large for SendTaskSuccess
    runs/<run>/state/<attempt>/tools.json         a trainer-queue callback rollout's tools (read by its client), once
    runs/<run>/state/<attempt>/scored.json        the attempt's scored record, kept before it is written
    runs/<run>/state/inputs/<attempt>/...         large execution inputs the client stored first

``<attempt>`` is the execution name (unique per state machine, [0-9A-Za-z_-], at most 80 characters),
so a re-run of the same rollout never reads an older attempt's state. The conversation states pass
each other nothing but the trainer's reply (rewardpipe.aws.rollout), so they find the episode at one
key per attempt; a retried step recognises a reply it already applied by the entry it applied it in.

The folder sits under ``runs/<run>/`` but outside every ``step=<n>/`` folder, so the record readers
never list it; it shares the runs lifecycle rule.

API (used by the rollout workflow and meant for any other multi-turn driver):

* :class:`StateStore` — ``save_head(obj)`` / ``load(key)`` for the episode, ``put(name, obj)`` /
  ``get(key)`` for other objects of the attempt; every key it reads must be its own attempt's.
* :func:`wire_json` — the JSON text to send Step Functions, whose size :func:`payload_size` measures.
* :func:`guard_payload` — raise :class:`PayloadTooLarge` (a normal, catchable Lambda error) before a
  handler returns something Step Functions would refuse.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Step Functions' hard limit on a state's input/output, an execution's input and a task result.
STATE_PAYLOAD_LIMIT = 262_144
# What we allow ourselves: comfortably under the limit, so that the state machine's own additions
# (a Catch's error object, the callback reply) never push a payload over.
PAYLOAD_BUDGET = 200_000

STATE_FOLDER = "state"
INPUTS_FOLDER = "inputs"  # state/inputs/: what a client stores first (the TrainerPolicy may write there)
_ATTEMPT = re.compile(r"^[0-9A-Za-z_-]{1,80}$")


class PayloadTooLarge(RuntimeError):
    """A handler was about to return more than :data:`PAYLOAD_BUDGET` bytes to Step Functions."""


def wire_json(obj: Any) -> str:
    """``obj`` as the JSON text to send Step Functions (an execution input, a task result): compact, non-ASCII
    text as itself. Step Functions counts the string it is sent, so ``json.dumps``' default ``\\u`` escapes
    (6 characters for one CJK character, 12 for an emoji) would make text that fits :data:`PAYLOAD_BUDGET` as
    UTF-8 up to six times as large and over the limit; this text's UTF-8 size is :func:`payload_size`."""
    from rewardpipe.safe_text import escape_lone_surrogates

    # A lone surrogate in model text (a replayed turn) is written as its \u escape: raw, it has no UTF-8 form.
    return escape_lone_surrogates(json.dumps(obj, separators=(",", ":"), ensure_ascii=False))


def payload_size(obj: Any) -> int:
    """Bytes of ``obj`` as Step Functions counts them: the UTF-8 size of :func:`wire_json`."""
    return len(wire_json(obj).encode("utf-8"))


def guard_payload(obj: Any, what: str, budget: int = PAYLOAD_BUDGET) -> Any:
    """Return ``obj`` unchanged, or raise PayloadTooLarge naming ``what`` and its size."""
    size = payload_size(obj)
    if size > budget:
        raise PayloadTooLarge(
            f"{what} is {size} bytes, over the {budget}-byte budget for a Step Functions "
            f"payload (hard limit {STATE_PAYLOAD_LIMIT}); bulky data must go through S3"
        )
    return obj


def check_attempt(attempt: str) -> str:
    if not isinstance(attempt, str) or not _ATTEMPT.fullmatch(attempt):  # "$" also matches before a final "\n"
        raise ValueError(f"attempt must be an execution name ([0-9A-Za-z_-], 1-80 characters), got {attempt!r}")
    if attempt == INPUTS_FOLDER:  # its state folder would be the inputs folder, which trainers may write to
        raise ValueError(f"an execution may not be named {INPUTS_FOLDER!r}: that is the folder of stored inputs")
    return attempt


def attempt_prefix(run: str, attempt: str) -> str:
    """``runs/<run>/state/<attempt>/``"""
    from rewardpipe.store import run_prefix

    return f"{run_prefix(run)}{STATE_FOLDER}/{check_attempt(attempt)}/"


def inputs_prefix(run: str, attempt: str) -> str:
    """``runs/<run>/state/inputs/<attempt>/``: where a client stores execution inputs too large to send."""
    from rewardpipe.store import run_prefix

    return f"{run_prefix(run)}{STATE_FOLDER}/{INPUTS_FOLDER}/{check_attempt(attempt)}/"


class StateStore:
    """The state objects of one execution attempt, on any :class:`rewardpipe.store.Store`."""

    def __init__(self, store: Any, run: str, attempt: str) -> None:
        self.store = store
        self.run = run
        self.attempt = attempt
        self.prefix = attempt_prefix(run, attempt)

    @property
    def head_key(self) -> str:
        """The episode as far as it got: every conversation step reads and rewrites this one object."""
        return f"{self.prefix}episode.json"

    def key(self, name: str) -> str:
        if not re.fullmatch(r"[0-9A-Za-z_.-]{1,100}", name) or set(name) == {"."}:
            raise ValueError(f"state object name must be a plain file name, got {name!r}")
        return self.prefix + name

    def owns(self, key: Any) -> bool:
        return isinstance(key, str) and key.startswith(self.prefix) and ".." not in key.split("/")

    def save_head(self, obj: Any) -> str:
        return self.store.put_json(self.head_key, obj)

    def put(self, name: str, obj: Any) -> str:
        return self.store.put_json(self.key(name), obj)

    def get(self, key: str) -> Any:
        """An object of this attempt; a key outside it is refused (keys arrive in events)."""
        if not self.owns(key):
            raise ValueError(f"state key {key!r} does not belong to {self.prefix}")
        try:
            return self.store.get_json(key)
        except KeyError:
            raise FileNotFoundError(f"state object {key} does not exist") from None

    load = get
