"""Round twenty-nine on the reward and environment side, as the model (and an honest model scored 0) would meet it.

R1. An environment's opening messages had no size bound (round twenty-eight left it open): ``start()`` building its
prompt from a file or a tool's first dump put millions of characters whole into the state, the policy's request, the
record's transcript and the state paused on AWS (only later observations were cut). They are cut to
``max_observation_chars`` the same way, with the same note, and the record counts them.

R2. A Python block whose code starts with a byte-order mark after the blank lines the fence left, or before the
indentation of a fence in a list item, did not compile (``invalid non-printable character U+FEFF``): a right answer
copied from a file saved with a BOM scored 0. The mark before the block's first line of code goes, as Python drops
it at the start of a file; one inside the code stays.
"""

from __future__ import annotations

import pytest

from rewardpipe import TaskRow
from rewardpipe.environment import MAX_OBSERVATION_CHARS
from rewardpipe.episode import start_episode
from rewardpipe.models import Message
from rewardpipe.parsing import TurnKind, parse_turn
from tests.security.test_round_twentyeight_reward import _Echoes, _episode

# -- R1: the opening messages are bounded like every observation ---------------------------------------------------


class _LongOpening(_Echoes):
    """Opens with a prompt of ``opening`` characters (a task built from a file); answers as round twenty-eight's."""

    opening = 10

    def start(self, task):
        messages = [Message(role="system", content="s"), Message(role="user", content="y" * self.opening)]
        return self.state_model(messages=messages)


@pytest.mark.parametrize("size", [10, 3 * MAX_OBSERVATION_CHARS])
def test_an_opening_message_is_bounded_like_every_observation(size):
    """A huge opening is cut (the policy is shown the bound and the note) and the record counts it; one within the
    bound is as it was."""
    env = _LongOpening()
    env.opening = size
    record, policy = _episode(env)
    huge = size > MAX_OBSERVATION_CHARS
    assert record.status == "scored"
    assert (MAX_OBSERVATION_CHARS < policy.longest < MAX_OBSERVATION_CHARS + 300) if huge else policy.longest == size
    assert record.metrics.get("env_observations_cut") == (1 if huge else None)


def test_an_opening_cut_names_start_and_the_environments_bound():
    env = _LongOpening()
    env.max_observation_chars = 50
    env.opening = 1234
    state = start_episode(TaskRow(task_id="t", prompt="p"), env=env, run_id="r", step=0, group_id="g", rollout_id="a")
    opening = state.messages[1].content
    assert opening.startswith("y" * 50) and not opening.startswith("y" * 51)
    assert "start() gave 1,234 characters" in opening and "max_observation_chars is 50" in opening
    assert state.messages[0].content == "s"


# -- R2: a byte-order mark before a block's code ------------------------------------------------------------------

FUNCTION = "def f(x):\n    return x + 1\n"


def _compiles_and_runs(code: str | None) -> bool:
    assert code is not None
    namespace: dict = {}
    exec(compile(code, "<turn>", "exec"), namespace)
    return namespace["f"](1) == 2


@pytest.mark.parametrize(
    "turn",
    [
        "Here:\n```python\n\n\ufeff" + FUNCTION + "```\n",  # a blank line the fence left, then the file
        "Here:\n```python\n\n\n\ufeff" + FUNCTION + "```\r\n",
        # a fence in a list item; the mark before the item's indentation (the file pasted, then indented)
        "1. Here:\n   ```python\n\ufeff   def f(x):\n       return x + 1\n   ```\n",
        "1. Here:\n   ```python\n   \n\ufeff   def f(x):\n       return x + 1\n   ```\n",
    ],
)
def test_a_bom_before_a_blocks_code_is_the_start_of_the_file(turn):
    parsed = parse_turn(turn)
    assert parsed.kind is TurnKind.COMMIT
    assert _compiles_and_runs(parsed.code)


def test_a_bom_inside_the_code_stays():
    """Only the mark before the code's first line goes: later, it is in the code (Python rejects it there too)."""
    code = parse_turn("```python\nx = 1\n\ufeffy = 2\n```\n").code
    assert code == "x = 1\n\ufeffy = 2\n"
    assert parse_turn("```python\n\ufeff\n\ufeffx = 1\n```\n").code == "\n\ufeffx = 1\n"
