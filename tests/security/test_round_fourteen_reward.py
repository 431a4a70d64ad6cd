"""Round fourteen: the ask-before-coding reward, its text and its output, attacked as a policy would.

F1. The loop check read only a hand-picked list of look-alike letters (some Cyrillic and Greek, small capitals)
as Latin: the same question again with its letters swapped for the Armenian, Lisu, Cherokee or IPA look-alikes
Unicode lists (``Sh\u0585uld`` with an Armenian o, ``\ua4e2\ua4e7\ua4f3\ua4f4\ua4e1\ua4d3`` in Lisu), or for
Cyrillic and Greek letters outside that list (``\u043fega\u0442ive``), escaped the loop penalty in a live episode
and where a transcript is scored on its own. Loops are now judged on the look-alikes of every script Unicode's
confusables list (UTS #39, ``envs/ask_before_coding/confusables.py``) plus the few letters it leaves out.

F2. The loop check compares turns by anchoring up to a budget per transcript; two long statements whose pair
used it up (37,480 characters each) left a misspelt repeat of a question, which only anchoring catches,
uncompared. The cheapest pairs are now compared first.

F3. Output: the spill files of ``run`` (records and transcripts the store refused) were written with a model's
U+2028, U+2029 and NEL raw, so ``str.splitlines()`` split one JSON object in two. They are now escaped.
"""

from __future__ import annotations

import pytest

from rewardpipe.envs.ask_before_coding.similarity import LOOP_SIMILARITY_THRESHOLD, find_loop, turn_similarity
from rewardpipe.models import Message
from rewardpipe.rewards import get_reward
from tests.security.test_round_thirteen_reward import COMMIT, NEGATIVE, play

# --- F1: look-alike letters of other scripts -------------------------------------------------------------------

ARMENIAN = {"o": "\u0585", "u": "\u057d", "h": "\u0570", "n": "\u0578", "g": "\u0581"}
IPA = {"a": "\u0251", "g": "\u0261", "i": "\u0269", "o": "\u1d0f"}
LISU = dict(
    zip(
        "ABCDEFGHIJKLMNOPRSTUVWXYZ",
        "\ua4ee\ua4d0\ua4da\ua4d3\ua4f0\ua4dd\ua4d6\ua4e7\ua4f2\ua4d9\ua4d7"
        "\ua4e1\ua4df\ua4e0\ua4f3\ua4d1\ua4e3\ua4e2\ua4d4\ua4f4\ua4e6\ua4ea\ua4eb\ua4ec\ua4dc",
        strict=True,
    )
)
CHEROKEE = dict(
    zip(
        "ABCEHJKLMPSTVWZ",
        "\u13aa\u13f4\u13df\u13ac\u13bb\u13ab\u13e6\u13de\u13b7\u13e2\u13da\u13a2\u13d9\u13d4\u13c3",
        strict=True,
    )
)
CYRILLIC = {"t": "\u0442", "n": "\u043f", "r": "\u0433", "m": "\u043c", "u": "\u0446", "k": "\u043a"}
GREEK = {"e": "\u03b5", "t": "\u03c4", "w": "\u03c9", "n": "\u03b7"}

DISGUISES = {
    "Armenian": lambda t: "".join(ARMENIAN.get(c, c) for c in t),
    "IPA": lambda t: "".join(IPA.get(c, c) for c in t),
    "Lisu capitals": lambda t: "".join(LISU.get(c, c) for c in t.upper()),
    "Cherokee capitals": lambda t: "".join(CHEROKEE.get(c, c) for c in t.upper()),
    "Cyrillic beyond the old list": lambda t: "".join(CYRILLIC.get(c, c) for c in t),
    "Greek beyond the old list": lambda t: "".join(GREEK.get(c, c) for c in t),
}


@pytest.mark.parametrize("name", DISGUISES)
def test_a_question_repeated_in_look_alike_letters_is_a_loop(name):
    again = DISGUISES[name](NEGATIVE)
    assert again != NEGATIVE and not again.isascii()
    assert turn_similarity(again, NEGATIVE) > LOOP_SIMILARITY_THRESHOLD
    assert find_loop([NEGATIVE, again]) is not None
    assert find_loop([NEGATIVE, again], new_details={0}, by_values=False) is not None


@pytest.mark.parametrize("name", DISGUISES)
def test_the_look_alike_repeat_costs_the_loop_penalty_in_a_live_episode(name):
    components = play([NEGATIVE, DISGUISES[name](NEGATIVE), COMMIT])
    assert components["loop_penalty"] == -0.5
    assert components["asked_before_coding"] == 1.0


@pytest.mark.parametrize("name", DISGUISES)
def test_the_look_alike_repeat_costs_the_loop_penalty_without_bookkeeping(name):
    assert loop_penalty_without_bookkeeping(DISGUISES[name](NEGATIVE)) == -0.5


def loop_penalty_without_bookkeeping(again: str) -> float:
    """``loop_penalty`` of NEGATIVE asked, answered with a detail, then ``again`` asked and left unanswered before
    the commit, scored from the messages alone (``Reward.score``, no simulator bookkeeping)."""
    from tests.security.test_round_four_reward_gaming import DURATION

    messages = [
        Message(role="user", content=DURATION.prompt),
        Message(role="assistant", content=NEGATIVE),
        Message(role="user", content=DURATION.spec[3]),
        Message(role="assistant", content=again),
        Message(role="user", content="Could you be more specific about what you need to know?"),
        Message(role="assistant", content=COMMIT),
    ]
    return get_reward("ask_before_coding").score(messages).components["loop_penalty"]


@pytest.mark.parametrize(
    "turns",
    [
        [
            "\u0427\u0442\u043e \u0434\u0435\u043b\u0430\u0442\u044c \u0441 \u043e\u0442\u0440\u0438\u0446\u0430\u0442"
            "\u0435\u043b\u044c\u043d\u044b\u043c\u0438 \u0447\u0438\u0441\u043b\u0430\u043c\u0438?",
            "\u041a\u0430\u043a \u043e\u043a\u0440\u0443\u0433\u043b\u044f\u0442\u044c \u0434\u0440\u043e\u0431\u043d"
            "\u044b\u0435 \u0441\u0435\u043a\u0443\u043d\u0434\u044b?",
        ],
        [
            "\u0531\u0575\u0578, \u0578\u0580\u0584\u0561\u0576 \u0567 \u056a\u0561\u0574\u0568?",
            "\u053b\u0576\u0579\u057a\u0565\u057d \u0563\u0580\u0565\u056c \u057e\u0561\u0575\u0580\u056f\u0575\u0561"
            "\u0576\u0576\u0565\u0580\u0568?",
        ],
        [NEGATIVE, "Are fractional seconds truncated or rounded?"],
    ],
)
def test_different_questions_in_other_scripts_stay_different(turns):
    assert find_loop(turns) is None


# --- F2: long turns spending the loop check's budget -----------------------------------------------------------

MISSPELT = "Shuold a negtaive duraiton riase a VlaueError or retrun an emtpy stirng?"
QUESTION = "Should a negative duration raise a ValueError or return an empty string?"


def _padding(length: int, seed: int) -> str:
    import random
    import string

    chars = random.Random(seed)
    return "".join(chars.choice(string.ascii_lowercase) for _ in range(length - 1)) + "."


@pytest.mark.parametrize("length", [37_480, 37_490, 18_740, 30_000])
@pytest.mark.parametrize("where", ["before", "between"])
def test_long_turns_cannot_spend_the_budget_before_a_repeat_is_compared(length, where):
    """Comparing by anchoring is bounded per transcript (COMPARED_CHARS_PER_TRANSCRIPT): two statements whose
    lengths, summed over their pair on the text and on the letters, use up all but a few characters of it used
    to leave the misspelt repeat of a question, which only anchoring catches, uncompared (no loop)."""
    assert find_loop([QUESTION, MISSPELT]) is not None  # the repeat alone is a loop
    pads = [_padding(length, 1), _padding(length, 2)]
    turns = [*pads, QUESTION, MISSPELT] if where == "before" else [QUESTION, *pads, MISSPELT]
    assert find_loop(turns) is not None
    assert find_loop(turns, new_details={turns.index(QUESTION)}, by_values=False) is not None


def test_the_padded_repeat_costs_the_loop_penalty_without_bookkeeping():
    from tests.security.test_round_four_reward_gaming import DURATION

    turns = [QUESTION, _padding(37_480, 1), _padding(37_480, 2), MISSPELT, COMMIT]
    replies = [DURATION.spec[3], "Okay.", "Sounds good.", "As I said: " + DURATION.spec[3], "Thanks."]
    messages = [Message(role="user", content=DURATION.prompt)]
    for turn, reply in zip(turns, replies, strict=True):
        messages += [Message(role="assistant", content=turn), Message(role="user", content=reply)]
    score = get_reward("ask_before_coding").score(messages)
    assert score.components["loop_penalty"] == -0.5
    assert score.components["asked_before_coding"] == 1.0


# --- F3: a spilled record or transcript split in lines by the model's text -------------------------------------

SEPARATORS = {"line separator": "\u2028", "paragraph separator": "\u2029", "next line": "\x85"}


class _RefusingStore:
    """A store that refuses everything, so every record and transcript is spilled."""

    location = "refusing"

    def put_record(self, record):
        from rewardpipe.store import StoreError

        raise StoreError(f"refused {record.rollout_id}")

    put_transcript = put_record


class _Transcript:
    def __init__(self, text: str) -> None:
        self.rollout_id = "x"
        self.text = text

    def to_json_dict(self) -> dict:
        return {"rollout_id": self.rollout_id, "messages": [{"role": "assistant", "content": self.text}]}


@pytest.mark.parametrize("name", SEPARATORS)
def test_a_spill_file_keeps_one_json_line_per_object_for_every_reader(tmp_path, name):
    """The spill files (``--spill``: records and transcripts the store refused) are JSONL for the user to read
    or replay. A model's text in a record (an ``exec_reason`` quoting its exception) or a transcript holding
    U+2028, U+2029 or NEL was written raw: ``str.splitlines()`` read one object as two broken lines."""
    import json

    from rewardpipe.cli.common import RecordWriter
    from rewardpipe.models import Record

    text = f"ValueError: nope{SEPARATORS[name]}#### 42"
    record = Record(
        run_id="r",
        step=0,
        group_id="g",
        rollout_id="x",
        task_id="t",
        status="scored",
        components={"c": 0.0},
        weights={"c": 1.0},
        aggregate=0.0,
        metrics={"exec_reason": text},
    )
    writer = RecordWriter(_RefusingStore(), tmp_path / "records.jsonl")
    writer.write([record])
    writer.write_transcripts([_Transcript(text)])
    writer.close()
    lines = (tmp_path / "records.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["metrics"]["exec_reason"] == text
    lines = writer.transcript_spill_path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["messages"][0]["content"] == text
