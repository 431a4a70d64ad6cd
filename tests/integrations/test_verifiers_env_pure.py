"""The parts of ``from_verifiers`` that need no verifiers package (the default suite runs without it): the
state's JSON round trip, task rows, the refusals, rubric flattening, the components' ranges and doctor's
warning for an undeclared one. test_verifiers_env_real.py runs a real verifiers environment."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from rewardpipe.doctor import Finding
from rewardpipe.integrations.verifiers_env import (
    REBUILT_KEYS,
    VerifiersEnvironment,
    VerifiersError,
    VfState,
    flatten_rubric,
    from_verifiers,
    json_problem,
    refuse_code_execution,
    stored_state,
    task_row,
)


@pytest.mark.parametrize(
    "value, problem",
    [
        ({"a": [1, {"b": threading.Lock()}]}, "state['a'][1]['b'] holds a lock"),
        ({"score": float("nan")}, "state['score'] is nan"),
        ({"pair": (1, 2)}, "a tuple reads back as a list"),
        ({"counts": {1: 2}}, "has the key 1, not a string"),
        ({"obj": object()}, "state['obj'] holds a object"),
    ],
)
def test_what_does_not_survive_json_is_named_by_its_key(value, problem):
    assert problem in json_problem(value)


def test_plain_json_survives():
    assert json_problem({"a": [1, 2.5, "x", None, True, {"b": []}]}) is None


def test_stored_state_keeps_the_envs_own_keys_and_drops_what_verifiers_rebuilds():
    vf = {
        "prompt": [{"role": "user", "content": "hi"}],
        "client": object(),
        "timing": object(),
        "trajectory": [object()],
        "attempts": 2,
        "is_completed": True,
        "final_env_response": [SimpleNamespace(model_dump=lambda **_: {"role": "user", "content": "bye"})],
    }
    kept = stored_state(vf, "guess", "env_response")
    assert kept == {"attempts": 2, "is_completed": True, "final_env_response": [{"role": "user", "content": "bye"}]}
    assert not set(kept) & REBUILT_KEYS
    with pytest.raises(VerifiersError, match=r"'guess': after env_response, its state\['cache'\] holds a dict_keys"):
        stored_state({"cache": {}.keys()}, "guess", "env_response")


def test_task_rows_read_verifiers_dataset_rows():
    row = {
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
        "answer": 4,
        "info": '{"level": 1}',
        "task": "math",
        "example_id": 7,
    }
    task = task_row(row, 0)
    assert task.task_id == "vf-7" and task.answer == "4" and task.info == {"level": 1} and task.vf_task == "math"
    assert [m.role for m in task.prompt_messages()] == ["system", "user"]
    assert task_row({"question": "Why?", "answer": None}, 3).prompt == "Why?"
    with pytest.raises(VerifiersError, match="row 2: info is not JSON"):
        task_row({"question": "q", "info": "{oops"}, 2)


def test_environments_that_run_model_code_are_refused_by_class_and_by_tool():
    class SandboxEnv:
        pass

    class MyCodeEnv(SandboxEnv):
        pass

    with pytest.raises(VerifiersError, match=r"it is a SandboxEnv.*bypass rewardpipe's sandbox"):
        refuse_code_execution(MyCodeEnv(), [])

    def python(code):
        return code

    def lookup(word):
        return word

    with pytest.raises(VerifiersError, match=r"its tools \['python'\] run model-written code"):
        refuse_code_execution(SimpleNamespace(tools=[lookup, python]), [])
    refuse_code_execution(SimpleNamespace(tools=[lookup]), [])  # pure tools are fine

    class EnvGroup:
        pass

    with pytest.raises(VerifiersError, match="EnvGroup"):
        refuse_code_execution(EnvGroup(), [EnvGroup])


def fake_env(*funcs_and_weights, max_turns=-1):
    rubric = SimpleNamespace(
        rubrics=[
            SimpleNamespace(funcs=[f for f, _ in funcs_and_weights[:1]], weights=[w for _, w in funcs_and_weights[:1]]),
            SimpleNamespace(funcs=[f for f, _ in funcs_and_weights[1:]], weights=[w for _, w in funcs_and_weights[1:]]),
        ]
    )
    return SimpleNamespace(rubric=rubric, max_turns=max_turns)


def correct(completion, answer):
    return 1.0


def num_turns(state):
    return 3


def brevity(completion):
    return 0.5


def test_rubric_functions_become_components_with_the_rubric_weights_metrics_left_out():
    env = fake_env((correct, 1.0), (num_turns, 0.0), (brevity, 0.2))
    assert [name for _, fn, _ in flatten_rubric(env.rubric) for name in [fn.__name__]] == [
        "correct",
        "num_turns",
        "brevity",
    ]
    wrapped = VerifiersEnvironment(
        env, name="toy", version="1", reward_name="toy", ranges={"correct": (0, 1)}, roles={"brevity": "penalty"}
    )
    comps = wrapped.reward.components
    assert [(c.name, c.weight, c.value_range, c.role) for c in comps] == [
        ("correct", 1.0, (0.0, 1.0), "outcome"),
        ("brevity", 0.2, (0.0, 1.0), "penalty"),
    ]
    assert comps[0].inputs == ("task", "state") and wrapped.undeclared == ["brevity"]
    assert wrapped.max_turns == 6  # verifiers' -1 (no limit): rewardpipe's default limit
    assert (
        VerifiersEnvironment(fake_env((correct, 1.0), max_turns=3), name="t", version="1", reward_name="t").max_turns
        == 3
    )
    with pytest.raises(VerifiersError, match="unknown rubric function"):
        VerifiersEnvironment(env, name="toy", version="1", reward_name="toy", ranges={"corect": (0, 1)})
    with pytest.raises(VerifiersError, match="no rubric function with a weight"):
        VerifiersEnvironment(fake_env((num_turns, 0.0)), name="toy", version="1", reward_name="toy")


def test_doctor_warns_about_an_undeclared_range_with_the_observed_values():
    env = VerifiersEnvironment(
        fake_env((correct, 1.0), (brevity, 0.2)), name="toy", version="1", reward_name="toy", ranges={"correct": (0, 1)}
    )
    runs = {
        name: SimpleNamespace(record=SimpleNamespace(components={"correct": 1.0, "brevity": value}))
        for name, value in (("reference", 0.25), ("other", 0.75), ("broken", None))
    }
    (finding,) = env.check_task(None, runs)
    assert isinstance(finding, Finding) and finding.severity == "warning" and finding.check == "undeclared_range"
    assert "'brevity'" in finding.message and "observed 0.25..0.75" in finding.message


def test_doctor_takes_an_environments_findings_with_their_severity(monkeypatch):
    # The hook doctor reads: texts stay errors; a Finding keeps its own check and severity.
    from rewardpipe.testing import check_environment

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "fixtures" / "user_pkg"))
    import acme_rl.guess as guess

    class Warned(guess.GuessNumber):
        def check_task(self, task, runs):
            return [Finding("style", "a warning of the environment's own", "warning")]

    class Failing(guess.GuessNumber):
        def check_task(self, task, runs):
            return ["an error of the environment's own"]

    rows = [{"task_id": "t1", "prompt": "Guess 1..100", "secret": 37}]
    report = check_environment(Warned(), rows)
    assert report.warnings == ["t1: a warning of the environment's own"]
    with pytest.raises(AssertionError, match=r"\[environment\] an error of the environment's own"):
        check_environment(Failing(), rows)


@pytest.mark.skipif(importlib.util.find_spec("verifiers") is not None, reason="verifiers is installed here")
def test_without_verifiers_from_verifiers_says_what_to_install():
    with pytest.raises(VerifiersError, match=r"pip install 'rewardpipe\[verifiers\]'"):
        from_verifiers("some_env:load_environment")


def test_a_state_model_holds_the_verifiers_state_as_json():
    state = VfState(messages=[{"role": "user", "content": "hi"}], vf_state={"attempts": 1, "hints": ["higher"]})
    assert VfState.model_validate_json(state.model_dump_json()) == state


def test_verifiers_stop_conditions_that_are_rewardpipes_end_reasons_are_named_as_rewardpipe_names_them():
    """Round eighteen: verifiers' prompt_too_long (the rollout outgrew the model's context window) is what
    rewardpipe names context_limit since 6780ef1; it was written under verifiers' own name, so a report grouping
    by end reason split one cause in two."""
    from rewardpipe.episode import CONTEXT_LIMIT
    from rewardpipe.integrations.verifiers_env import _end_reason

    assert _end_reason({"stop_condition": "max_turns_reached"}) == "turn_limit"
    assert _end_reason({"stop_condition": "prompt_too_long"}) == CONTEXT_LIMIT
    assert _end_reason({"stop_condition": "has_final_env_response"}) == "has_final_env_response"
