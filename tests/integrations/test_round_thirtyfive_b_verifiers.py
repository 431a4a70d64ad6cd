"""Round thirty-five (second wave), verifiers and verl adapters: the verifiers side against the real package
(``make test-verifiers``; skipped where verifiers is absent). Each test failed before its fix (see
docs/changelog.md)."""

from __future__ import annotations

import pytest

pytest.importorskip("verifiers")
try:  # verifiers 0.3.1 keeps the classic API under verifiers.legacy; 0.2 has it at the top
    import verifiers.legacy as vf
except ImportError:
    import verifiers as vf
pytestmark = pytest.mark.verifiers

from datasets import Dataset  # noqa: E402

from rewardpipe import ScriptedPolicy  # noqa: E402
from rewardpipe.integrations.verifiers import from_verifiers  # noqa: E402
from rewardpipe.integrations.verifiers_env import VerifiersError  # noqa: E402
from tests.integrations.test_verifiers_env_real import play  # noqa: E402


def matches_level(completion, answer, level) -> float:
    """Reads the dataset's own ``level`` column by name, as verifiers passes a row's columns to a rubric function."""
    text = completion[-1].content if hasattr(completion[-1], "content") else completion[-1]["content"]
    return 1.0 if (answer in text) == (level == "easy") else 0.0


def level_of(**kwargs) -> float:
    """Reads it through ``**kwargs``: a missing column was not an error there, it silently scored 0.5."""
    return {"easy": 1.0, "hard": 0.0}.get(kwargs.get("level"), 0.5)


def load_levels():
    rows = [
        {"question": "Say 7.", "answer": "7", "level": "easy"},
        {"question": "Say 3.", "answer": "3", "level": "hard"},
    ]
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[matches_level, level_of]))


class TestADatasetsOwnColumnsReachTheRubricFunctions:
    """verifiers passes a dataset row's columns beyond ``prompt``/``answer``/``info``/``example_id`` (``level``,
    ``difficulty``...) to its rubric functions by name (verifiers 0.2's ``Rubric.score_objects``). ``from_verifiers``
    kept only those four and ``task``: a function naming a column raised on every rollout (each an error record,
    the run unscored) and one reading it from ``**kwargs`` got its default, a score verifiers never gives, with no
    error at all. The task row keeps the other columns (``columns``, written to the task file too) and the
    verifiers state rebuilt for each call holds them, as verifiers' own does."""

    def test_each_function_gets_the_rows_column(self):
        env = from_verifiers(f"{__name__}:load_levels", ranges={"matches_level": (0, 1), "level_of": (0, 1)})
        easy, hard = env.task_rows()
        record = play(env, easy, ScriptedPolicy(lambda s, t: "It is 7."))[0]
        assert record.status == "scored", record.error
        assert record.components == {"matches_level": 1.0, "level_of": 1.0}
        record = play(env, hard, ScriptedPolicy(lambda s, t: "It is 3."), "r1")[0]
        assert record.components == {"matches_level": 0.0, "level_of": 0.0}

    def test_the_columns_survive_the_task_file(self, tmp_path):
        env = from_verifiers(f"{__name__}:load_levels", ranges={"matches_level": (0, 1), "level_of": (0, 1)})
        path = env.write_tasks(tmp_path / "tasks.jsonl")
        reread = [type(env.task_rows()[0]).model_validate_json(line) for line in path.read_text().splitlines()]
        assert [row.columns.get("level") for row in reread] == ["easy", "hard"]
        assert play(env, reread[1], ScriptedPolicy(lambda s, t: "3"))[0].components["level_of"] == 0.0


def said_seven(completion, **kwargs) -> float:
    text = completion[-1].content if hasattr(completion[-1], "content") else completion[-1]["content"]
    return float("7" in text)


def ranked(completion, **kwargs) -> list[float]:
    """A group function by its return annotation alone: verifiers calls it once per group, with ``completions``."""
    return [1.0 / (1 + rank) for rank, _ in enumerate(kwargs["completions"])]


ranked.__annotations__["return"] = list[float]  # the type itself (this module's annotations are text)


class TestAGroupFunctionKnownByItsReturnAnnotationIsRefused:
    """verifiers takes a rubric function annotated to return a list as a group function (called once per group
    with ``completions``, ``states``...), whatever its parameter names. ``from_verifiers`` looked at the parameter
    names only and wrapped it as a per-rollout component: it raised (or returned a list) on every rollout, every
    record an error. It is refused when the environment is wrapped, as a group function named by its parameters
    is."""

    def test_it_is_refused_naming_it(self):
        env = vf.SingleTurnEnv(
            dataset=Dataset.from_list([{"question": "Say 7.", "answer": "7"}]),
            rubric=vf.Rubric(funcs=[said_seven, ranked]),
        )
        assert vf.Rubric()._is_group_func(ranked)  # verifiers' own reading
        with pytest.raises(VerifiersError, match=r"ranked.*whole group"):
            from_verifiers(env)

    def test_a_per_rollout_function_is_still_wrapped(self):
        env = vf.SingleTurnEnv(
            dataset=Dataset.from_list([{"question": "Say 7.", "answer": "7"}]), rubric=vf.Rubric(funcs=[said_seven])
        )
        assert [c.name for c in from_verifiers(env).reward.components] == ["said_seven"]


def hits_target(completion, task, target) -> float:
    """Reads the task payload a row carries under ``info["task"]``, as ``task`` and by its field names."""
    text = completion[-1].content if hasattr(completion[-1], "content") else completion[-1]["content"]
    return float(str(task["target"]) in text and target == task["target"])


def load_targets():
    rows = [{"question": "Say 7.", "answer": "7", "info": {"task": {"target": 7}}}]
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[hits_target]))


class TestATaskPayloadInInfoIsTheRubricsTask:
    """verifiers takes a row's ``info["task"]`` as the rollout's task payload (its ``state["task"]``, handed to the
    rubric functions as ``task`` and field by field). ``from_verifiers`` handed them the whole row instead: a
    function reading ``task["target"]`` or ``target`` raised on every rollout. The task is now what verifiers makes
    of the row (its own ``flatten_task_input`` where the release has it)."""

    def test_the_function_reads_the_payload(self):
        env = from_verifiers(f"{__name__}:load_targets", ranges={"hits_target": (0, 1)})
        record = play(env, env.task_rows()[0], ScriptedPolicy(lambda s, t: "It is 7."))[0]
        assert record.status == "scored", record.error
        assert record.components == {"hits_target": 1.0}


def answer_listed(completion, answer) -> float:
    """Reads the answer as the dataset holds it: a list of accepted answers, or a number."""
    text = (completion[-1].content if hasattr(completion[-1], "content") else completion[-1]["content"]).strip()
    if isinstance(answer, list):
        return float(text in answer)
    return float(text.isdigit() and int(text) == answer)


def load_typed_answers():
    rows = [{"question": "Say 7.", "answer": 7}, {"question": "Say 3.", "answer": 3}]
    listed = [{"question": "Say seven.", "answer": ["7", "seven"]}]
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(rows), eval_dataset=Dataset.from_list(listed), rubric=vf.Rubric(funcs=[answer_listed])
    )


class TestAnAnswerThatIsNotTextReachesTheRubricAsItIs:
    """verifiers hands a rubric function the row's ``answer`` as the dataset holds it (an int, a list of accepted
    answers). ``from_verifiers`` handed it the answer's text (``"7"``, ``"['7', 'seven']"``): a function comparing
    numbers, or testing membership in the list, silently scored 0 (a substring test on the list's text could score
    1 for a wrong answer). ``VfTask.answer`` stays the text (the scripted reference answers it); ``vf_answer`` holds
    the row's own value, the one the rubric functions get."""

    def test_a_number_and_a_list_are_passed_as_they_are(self):
        env = from_verifiers(f"{__name__}:load_typed_answers", ranges={"answer_listed": (0, 1)})
        seven = env.task_rows()[0]
        assert seven.answer == "7" and seven.vf_answer == 7
        assert play(env, seven, ScriptedPolicy(lambda s, t: "7"))[0].components == {"answer_listed": 1.0}
        (listed,) = env.task_rows("eval")
        assert play(env, listed, ScriptedPolicy(lambda s, t: "seven"), "r1")[0].components == {"answer_listed": 1.0}
        assert play(env, listed, ScriptedPolicy(lambda s, t: "seve"), "r2")[0].components == {"answer_listed": 0.0}
