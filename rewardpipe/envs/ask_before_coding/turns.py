"""The turn classifier: what one assistant turn does to an ask-before-coding episode.

A turn that commits code (a fenced Python block not followed by a question, :mod:`rewardpipe.parsing`)
ends the episode: its code is what runs against the hidden tests. A question, or anything else (a
statement, a plan, an empty turn), hands the turn to the user, who answers it (or says what they want to
know). The fence and question rules themselves are :func:`rewardpipe.parsing.parse_turn`'s, shared with the
transcript view every reward sees.
"""

from __future__ import annotations

from rewardpipe.parsing import TurnKind, parse_turn


def classify(text: str) -> tuple[TurnKind, str | None]:
    """``(kind, committed code)`` of one assistant turn; the code is None unless the turn commits."""
    parsed = parse_turn(text)
    return parsed.kind, parsed.code if parsed.kind is TurnKind.COMMIT else None
