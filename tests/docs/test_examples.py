"""Every example under examples/ runs and prints what its .out file (which the guides include) says."""

from __future__ import annotations

import pytest

from scripts.run_examples import EXAMPLES, discover

ALL = discover()


def test_the_examples_are_found():
    names = {example.name for example in ALL}
    assert {
        "single_turn_lambda.py",
        "trl_reward_funcs.py",
        "verl_compute_score.py",
        "verifiers_rubric_functions.py",
        "verifiers_rubric.py",
        "your_own_reward/score.py",
        "your_own_reward/test_my_reward.py",
        "your_own_environment/doctor_it.py",
        "your_own_environment/run_it.py",
        "your_own_environment/score_it.py",
        "your_own_environment/test_animals.py",
    } <= names
    assert "your_own_reward/my_reward.py" not in names  # a module the example imports, not an example
    assert "your_own_environment/animals_env.py" not in names


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
            f"printed:\n{result.stdout}"
        )


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


def test_the_environment_examples_pyproject_registers_what_exists(monkeypatch):
    """examples/your_own_environment/pyproject.toml (shown in docs/extending.md) names modules and objects that
    exist: each entry point loads as the kind of thing its group holds, and its modules are the package's."""
    import tomllib

    from rewardpipe import Environment, Reward
    from rewardpipe.references import ENVIRONMENT_GROUP, REWARD_GROUP, load_import_reference

    folder = EXAMPLES / "your_own_environment"
    project = tomllib.loads((folder / "pyproject.toml").read_text())
    monkeypatch.syspath_prepend(str(folder))
    modules = set(project["tool"]["setuptools"]["py-modules"])
    expected = {ENVIRONMENT_GROUP: Environment, REWARD_GROUP: Reward}
    assert set(project["project"]["entry-points"]) == set(expected)
    for group, entries in project["project"]["entry-points"].items():
        for name, reference in entries.items():
            assert reference.split(":")[0] in modules, reference
            value = load_import_reference(reference)
            assert isinstance(value, expected[group]) and value.name == name, (group, name, value)


def test_a_variable_a_test_left_behind_does_not_reach_an_example(monkeypatch):
    # A deployed function's weights, left in os.environ by an in-process Lambda invocation, once made the
    # single-turn example fail (gsm8k has none of the ask-before-coding components): examples run as from a
    # fresh shell, with the environment the process started with.
    monkeypatch.setenv("REWARD_WEIGHTS", '{"correctness": 1.0, "loop_penalty": 0.5}')
    (example,) = [example for example in ALL if example.name == "single_turn_lambda.py"]
    result = example.run()
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == example.expected_output.read_text()
