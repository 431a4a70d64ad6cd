"""Every example under examples/ runs and prints what its .out file (which the guides include) says."""

from __future__ import annotations

import pytest

from scripts.run_examples import EXAMPLES, discover

ALL = discover()


def test_the_examples_are_found():
    names = {example.name for example in ALL}
    assert {"single_turn_lambda.py", "trl_reward_funcs.py", "verl_compute_score.py",
            "verifiers_rubric_functions.py", "verifiers_rubric.py", "your_own_reward/score.py"} <= names
    assert "your_own_reward/my_reward.py" not in names  # a module the example imports, not an example


@pytest.mark.parametrize("example", ALL, ids=[example.name for example in ALL])
def test_example_runs_and_prints_its_recorded_output(example):
    why_not = example.missing()
    if why_not:
        pytest.skip(f"{example.name}: {why_not}")
    result = example.run()
    assert result.returncode == 0, f"{example.name} exited {result.returncode}:\n{result.stderr[-3000:]}"
    if example.expected_output.exists():
        assert result.stdout == example.expected_output.read_text(), (
            f"{example.name} printed something else than {example.expected_output.relative_to(EXAMPLES.parent)} "
            f"(which the docs show): if the change is intended, run `make docs-gen` and commit the result.\n"
            f"printed:\n{result.stdout}")


def test_a_missing_requirement_or_api_is_a_skip_reason(tmp_path, monkeypatch):
    from scripts import run_examples

    monkeypatch.setattr(run_examples, "EXAMPLES", tmp_path)
    needs_lib = tmp_path / "a.py"
    needs_lib.write_text("# requires: surely_not_installed_pkg\nif __name__ == '__main__':\n    pass\n")
    needs_api = tmp_path / "b.py"
    needs_api.write_text("# requires-api: rewardpipe:surely_not_exported\nif __name__ == '__main__':\n    pass\n")
    plain = tmp_path / "c.py"
    plain.write_text("import sys\nif __name__ == '__main__':\n    print('hi'); sys.exit(3)\n")
    found = {e.name: e for e in run_examples.discover()}
    assert "surely_not_installed_pkg not installed" in found["a.py"].missing()
    assert "rewardpipe:surely_not_exported is not in this code base yet" in found["b.py"].missing()
    assert found["c.py"].missing() is None
    result = found["c.py"].run()
    assert result.returncode == 3 and result.stdout == "hi\n"
