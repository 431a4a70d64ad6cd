"""Round twenty-nine: the trainer adapters against the inputs the real trainers hand them.

Each test failed before its fix (see docs/changelog.md, round twenty-nine)."""

from __future__ import annotations

from rewardpipe.integrations.trl import reward_functions

PROMPTS = [[{"role": "user", "content": "2+2?"}]] * 2
UNREADABLE = {"type": "image_url", "image_url": {"url": "x"}}  # a content no text reward can read


class TestTrlReadsTheAnswerItJudges:
    """TRL's adapter judged whether a conversational completion has an answer on its *first* assistant message
    and scored its *last* one. A completion whose final assistant message does not read as text (after a
    readable tool-calling turn) was scored as an empty answer, 0.0 in every component; one whose first
    assistant message did not read but whose final answer did was an error record, its answer never scored."""

    def _scores(self, completions):
        funcs, _ = reward_functions("gsm8k")
        return [fn(PROMPTS, completions, answer=["4", "4"]) for fn in funcs]

    def test_an_unreadable_final_turn_is_an_error_not_a_zero(self):
        completions = [
            [{"role": "assistant", "content": "#### 4"}],
            [{"role": "assistant", "content": "let me see"}, {"role": "assistant", "content": UNREADABLE}],
        ]
        assert [column[1] for column in self._scores(completions)] == [None, None]

    def test_the_final_answer_is_scored_whatever_an_earlier_turn_held(self):
        completions = [
            [{"role": "assistant", "content": "#### 4"}],
            [
                {"role": "assistant", "content": UNREADABLE},
                {"role": "tool", "content": "4"},
                {"role": "Assistant", "content": "#### 4"},
            ],
        ]
        assert [column[1] for column in self._scores(completions)] == [1.0, 1.0]
