"""Round twenty-nine on the reward and environment side, as the model (and an honest model scored 0) would meet it.

R2. A Python block whose code starts with a byte-order mark after the blank lines the fence left, or before the
indentation of a fence in a list item, did not compile (``invalid non-printable character U+FEFF``): a right answer
copied from a file saved with a BOM scored 0. The mark before the block's first line of code goes, as Python drops
it at the start of a file; one inside the code stays.
"""

from __future__ import annotations

import pytest

from rewardpipe.parsing import TurnKind, parse_turn

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
