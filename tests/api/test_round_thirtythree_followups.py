"""Round thirty-three follow-ups: where a raising component was raised."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rewardpipe import Message, Reward, component

HERE = Path(__file__).name


def _helper_that_fails(text: str) -> float:
    return json.loads(text)["value"]  # the innermost user frame: json's own frames are not the user's


@component(range=(0, 1), role="outcome")
def parses(completion: str) -> float:
    return _helper_that_fails(completion)


@component(range=(0, 1), role="outcome")
async def parses_async(completion: str) -> float:
    return _helper_that_fails(completion)


def _line_of(fragment: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if fragment in line and "def " not in line)


@pytest.mark.parametrize("comp", [parses, parses_async], ids=["sync", "async"])
def test_a_component_raised_error_names_the_users_file_and_line(comp):
    error = Reward("r", [comp]).score([Message(role="assistant", content="{not json")]).error
    assert error.kind == "component_raised"
    assert error.message.startswith(f"component '{comp.name}' raised JSONDecodeError: ")
    where = re.search(r"\(at (.+):(\d+)\)$", error.message)
    assert where is not None, error.message
    assert where.group(1).endswith(HERE) and int(where.group(2)) == _line_of('return json.loads(text)["value"]')
    assert "rewardpipe/" not in where.group(1) and "json/" not in where.group(1)


def test_the_location_is_bounded_and_a_returned_wrong_type_has_none(tmp_path):
    deep = tmp_path.joinpath(*["d" * 40] * 8)
    deep.mkdir(parents=True)
    module = deep / "deep_reward.py"
    module.write_text("def boom(completion):\n    raise RuntimeError('x' * 10_000)\n")
    namespace: dict = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)  # the test's own file
    boom = component(range=(0, 1), role="outcome")(namespace["boom"])
    message = Reward("v", [boom]).score([Message(role="assistant", content="a")]).error.message
    assert message.endswith("deep_reward.py:2)") and "(at ..." in message
    assert len(message) < 450

    @component(range=(0, 1), role="outcome")
    def as_text(completion):
        return "1"

    message = Reward("t", [as_text]).score([Message(role="assistant", content="a")]).error.message
    assert "(at " not in message  # rewardpipe refused the value: no user frame raised
