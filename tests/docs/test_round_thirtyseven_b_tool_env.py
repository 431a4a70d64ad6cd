"""Round thirty-seven (second wave), a new user's path: trying the Nova single-turn Lambda with one's own reward."""

import ast
from pathlib import Path

from stacks.config import load_settings
from stacks.user_code import resolve_user_code

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "single_turn_lambda.py"


def example_environment() -> dict[str, str]:
    """The variables examples/single_turn_lambda.py sets before loading the handler (its os.environ.update)."""
    for node in ast.walk(ast.parse(EXAMPLE.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "update":
            return {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    raise AssertionError("the example sets no environment")


def test_the_example_names_the_reward_as_the_stack_does_for_single_turn_reward():
    # It set REWARD_NAME alone, which only a built-in name reaches: a user copying it for their own reward
    # (`REWARD_NAME=pkg.mod:ATTR`) tested another path than the deployed one, whose SINGLE_TURN_REWARD_REF the
    # handler reads first and which takes an import reference only.
    stack = resolve_user_code(load_settings({"single_turn_reward": "gsm8k"})).single_turn_env({})
    example = example_environment()
    assert example.get("SINGLE_TURN_REWARD_REF") == stack["SINGLE_TURN_REWARD_REF"]
    assert "SINGLE_TURN_REWARD_REF" in EXAMPLE.read_text().split('"""')[1]  # its docstring says which


def test_the_guide_says_how_to_point_the_local_handler_at_ones_own_reward():
    guide = (ROOT / "docs" / "guides" / "nova-forge.md").read_text()
    assert "`SINGLE_TURN_REWARD_REF`" in guide


def test_the_inputs_reference_says_what_a_recorded_message_may_carry():
    # A new user recording a tool-using model read only `{"role", "content"}` and "unknown fields are rejected": the
    # tool calls a recording carries were undocumented, and a misspelled one is in fact ignored, not refused.
    inputs = (ROOT / "docs" / "reference" / "inputs.md").read_text()
    rollout = next(line for line in inputs.splitlines() if line.startswith("**Rollout**"))
    for field in ("`tool_calls`", "`tool_call_id`", "`name`", "ignored"):
        assert field in rollout
