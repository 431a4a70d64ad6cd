"""Round twenty-four: an independent review of the trainer integrations (TRL, verl, verifiers, Nova Forge).
Each class's docstring names the bug it pins."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rewardpipe.integrations.verifiers_env import VerifiersEnvironment, VerifiersError


def _env(*funcs_and_weights):
    rubric = SimpleNamespace(funcs=[f for f, _ in funcs_and_weights], weights=[w for _, w in funcs_and_weights])
    return SimpleNamespace(rubric=rubric, max_turns=-1)


def _wrap(vf_env, **kwargs):
    return VerifiersEnvironment(vf_env, name="toy", version="1", reward_name="toy", **kwargs)


def correct(completion, answer):
    return 1.0


class TestRubricFunctionNames:
    """``from_verifiers`` named each component after its rubric function's ``__name__``, which verifiers takes
    as Python gives it. A rubric holding a lambda (``vf.Rubric(funcs=[lambda completion, answer: ...])``) or a
    function whose name is over 64 characters could not be wrapped at all (``component name '<lambda>' must
    start with a letter``), and a second function of an already-suffixed name (``f``, ``f_2``, ``f``) was
    named ``f_2`` twice (``reward 'toy' has two components named 'f_2'``). The name is now made valid
    (other characters ``_``, cut at 64, never a reserved name) and unique."""

    def test_a_lambda_is_a_component(self):
        wrapped = _wrap(_env((correct, 1.0), (lambda completion: 0.5, 0.2)))
        assert wrapped.reward.component_names == ["correct", "_lambda_"]
        assert [c.weight for c in wrapped.reward.components] == [1.0, 0.2]

    def test_two_lambdas_get_two_names(self):
        wrapped = _wrap(_env((lambda completion: 1.0, 1.0), (lambda completion: 0.5, 0.5)))
        assert wrapped.reward.component_names == ["_lambda_", "_lambda__1"]

    def test_a_long_name_is_cut_and_stays_unique(self):
        def long(completion):
            return 1.0

        other = lambda completion: 0.0  # noqa: E731 - renamed below
        long.__name__ = other.__name__ = "x" * 80
        wrapped = _wrap(_env((long, 1.0), (other, 1.0)))
        first, second = wrapped.reward.component_names
        assert first == "x" * 64 and len(second) == 64 and second.endswith("_1") and first != second

    def test_a_suffixed_name_already_taken_is_skipped(self):
        def f(completion):
            return 1.0

        def f_2(completion):
            return 1.0

        g = lambda completion: 1.0  # noqa: E731 - renamed below
        g.__name__ = "f"
        assert _wrap(_env((f, 1.0), (f_2, 1.0), (g, 1.0))).reward.component_names == ["f", "f_2", "f_3"]

    def test_reserved_and_unnamed(self):
        from rewardpipe.integrations.verifiers_env import component_name

        assert component_name("aggregate", set()) == "aggregate_fn"
        assert component_name("1st", set()) == "_1st"
        assert component_name("", set()) == "rubric_function"

    def test_ranges_are_keyed_by_the_component_name(self):
        wrapped = _wrap(_env((lambda completion: 3.0, 1.0)), ranges={"_lambda_": (0.0, 5.0)})
        assert wrapped.reward.components[0].value_range == (0.0, 5.0)
        with pytest.raises(VerifiersError, match="the rubric has \\['_lambda_'\\]"):
            _wrap(_env((lambda completion: 3.0, 1.0)), ranges={"<lambda>": (0.0, 5.0)})
