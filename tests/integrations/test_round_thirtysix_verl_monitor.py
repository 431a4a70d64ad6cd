"""Round thirty-six: within-group monitoring of a verl run, read from its rollout dump (``trainer.rollout_data_dir``).

verl users had the adapter's components but nothing watched them inside groups. ``rewardpipe verl import`` turns the
dump into records and transcripts; the ordinary monitor then judges them. The tests marked ``verl`` (``make
test-verl``) write the dump with verl 0.9.1's own ``_write_generations`` (both trainers': the legacy one holds the
reward's extra info and no group id, v1 the ``{uid}_{session}_{index}`` keys and no extra info), fed by verl's
``NaiveRewardManager`` scoring with rewardpipe's ``compute_score``; the others check the reading rules on lines
written by hand.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rewardpipe.integrations.verl_dump import import_rollout_dump, read_rollout_dump
from rewardpipe.monitoring import monitor_records
from rewardpipe.store import LocalStore

# --------------------------------------------------------------------------------------------------
# Lines written by hand (the reading rules)


def _write(path: Path, lines: list[object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))


def _legacy_step(step: int, groups: int = 5, size: int = 4, flagged: int | None = None) -> list[object]:
    """Legacy-trainer lines: a varying ``correct``, a ``style`` constant inside each group but not across them."""
    lines: list[object] = []
    for g in range(groups):
        for k in range(size):
            correct = float((g + k) % 2)
            line = {
                "input": f"user\nQ{g}",
                "output": f"answer {k}",
                "gts": "7",
                "score": correct + g / 10,
                "step": step,
                "correct": correct,
                "style": g / 10,
                "reward_error": 0.0,
            }
            if flagged is not None and len(lines) == flagged:
                line.update(score=0.0, correct=math.nan, style=math.nan, reward_error=1.0)
            lines.append(line)
    return lines


def test_a_component_constant_in_every_group_is_alarmed_with_example_transcripts(tmp_path):
    _write(tmp_path / "dump/1.jsonl", _legacy_step(1))
    store = LocalStore(tmp_path / "store")
    read = import_rollout_dump(tmp_path / "dump", store, "run")
    assert not read.skipped and not read.grouped_by_uid and read.count == 20
    result = monitor_records(store.iter_records("run"))
    report = result.step(1)
    assert report.components["style"].verdict == "dead"  # varies across groups: the batch std would hide it
    assert report.components["correct"].verdict == "ok"
    (alarm,) = [a for a in result.alarms if a.component == "style"]
    examples = alarm.to_dict()["examples"]
    assert examples
    transcript = store.get_transcript(examples[0]["transcript_key"])  # the evidence is in the store
    assert transcript.messages[0].content.startswith("user\nQ") and transcript.messages[1].role == "assistant"


def test_a_boolean_extra_info_is_a_component_and_text_is_not(tmp_path):
    """verl's DAPO scorer returns ``{"score", "acc": bool, "pred": str}``: ``acc`` is judged (here constant inside
    every group), ``pred`` is not a component."""
    lines = _legacy_step(1)
    for line in lines:
        assert isinstance(line, dict)
        line.update(acc=line["input"].endswith(("0", "2")), pred="7")
    _write(tmp_path / "dump/1.jsonl", lines)
    read = read_rollout_dump(tmp_path / "dump")
    assert list(read.components) == ["correct", "style", "acc"]
    assert monitor_records(read.records).step(1).components["acc"].verdict == "dead"


def test_reward_error_is_an_error_record_never_a_score(tmp_path):
    _write(tmp_path / "dump/3.jsonl", _legacy_step(3, flagged=2))
    read = read_rollout_dump(tmp_path / "dump")
    flagged = read.records[2]
    assert flagged["status"] == "error" and flagged["aggregate"] is None
    assert set(flagged["components"].values()) == {None}
    report = monitor_records(read.records).step(3)
    assert report.errors == 1 and report.scored == 19


def test_bad_lines_are_named_and_skipped_never_the_dump(tmp_path):
    lines = _legacy_step(2)
    lines[1] = "{not json"
    lines[2] = ["a", "list"]
    lines[3] = {"input": "Q0", "output": "x", "score": "high", "step": 2}
    lines[5] = {"input": "Q1", "output": "x", "score": 1.0, "step": True}  # a bool is not a step: the file name is
    _write(tmp_path / "dump/2.jsonl", lines)
    read = read_rollout_dump(tmp_path / "dump")
    assert [s.rsplit(":", 1)[0].rsplit(":", 1)[1] for s in read.skipped] == ["2", "3", "4"]
    assert "not a JSON line" in read.skipped[0] and "score" in read.skipped[2]
    assert len(read.records) == 17 and {r["step"] for r in read.records} == {2}


def test_a_line_with_neither_uid_nor_prompt_is_skipped_not_put_in_one_group_with_the_others(tmp_path):
    """Grouped by an empty prompt, every such line of a step made one group: a component constant inside each real
    group but varying between them looked alive."""
    lines = _legacy_step(5)
    for line in lines:
        assert isinstance(line, dict)
        del line["input"]
    _write(tmp_path / "dump/5.jsonl", lines)
    read = read_rollout_dump(tmp_path / "dump")
    assert not read.records and len(read.skipped) == 20 and "neither a uid nor an input" in read.skipped[0]


def test_v1_keys_group_by_uid_and_a_session_counts_once(tmp_path):
    """v1's ``{uid}_{session}_{index}``: one group per uid (not per prompt text: the groups of one prompt stay
    apart), and an agent loop's several outputs of one session are one rollout, its last output. Every session here
    ends on 1.0, so the aggregate is constant in every group; the session's earlier output (0.0), counted as a
    rollout, made it look alive."""
    lines: list[object] = []
    for g in range(4):
        for session in range(3):
            for index in range(2 if session == 0 else 1):
                lines.append(
                    {
                        "input": "same prompt",
                        "output": f"o{session}.{index}",
                        "gts": None,
                        "score": 0.0 if (session, index) == (0, 0) else 1.0,
                        "step": 7,
                        "uid": f"u-{g}_{session}_{index}",
                    }
                )
    _write(tmp_path / "dump/7.jsonl", lines)
    read = read_rollout_dump(tmp_path / "dump")
    assert read.grouped_by_uid and len(read.records) == 12
    assert {r["group_id"] for r in read.records} == {"u-0", "u-1", "u-2", "u-3"}
    assert [r["aggregate"] for r in read.records if r["rollout_id"] == "u-0_0"] == [1.0]
    assert monitor_records(read.records).step(7).aggregate.verdict == "dead"


def test_the_command_imports_and_the_monitor_alarms(tmp_path):
    from rewardpipe.cli import app

    _write(tmp_path / "dump/1.jsonl", _legacy_step(1))
    _write(tmp_path / "dump/2.jsonl", _legacy_step(2))
    (tmp_path / "dump/notes.txt").write_text("not a step file")
    runner = CliRunner()
    out = runner.invoke(app, ["verl", "import", str(tmp_path / "dump"), "--out", str(tmp_path / "store")])
    assert out.exit_code == 0, out.output
    assert "40 rollouts of 2 step(s)" in out.output and "grouped by prompt text" in out.output
    judged = runner.invoke(app, ["monitor", str(tmp_path / "store"), "--json"])
    assert judged.exit_code == 0, judged.output
    steps = json.loads(judged.stdout)["steps"]
    verdicts = {(s["step"], name): c["verdict"] for s in steps for name, c in s["components"].items()}
    assert verdicts == {(1, "correct"): "ok", (1, "style"): "dead", (2, "correct"): "ok", (2, "style"): "dead"}


def test_importing_a_growing_dump_again_adds_its_new_steps_only(tmp_path):
    store = LocalStore(tmp_path / "store")
    _write(tmp_path / "dump/1.jsonl", _legacy_step(1))
    assert import_rollout_dump(tmp_path / "dump", store, "run").steps == {1}
    judged = monitor_records(store.iter_records("run"))
    _write(tmp_path / "dump/2.jsonl", _legacy_step(2))
    again = import_rollout_dump(tmp_path / "dump", store, "run")
    assert again.steps == {2} and again.already_stored == [1] and again.count == 20
    assert [r.step for r in monitor_records(store.iter_records("run"), previous_state=judged.state).steps] == [1, 2]
    assert import_rollout_dump(tmp_path / "dump", store, "run", again=True).steps == {1, 2}


def test_the_command_names_a_path_that_is_no_dump_and_a_bad_run_id_once(tmp_path):
    from rewardpipe.cli import app

    (tmp_path / "empty").mkdir()
    out = CliRunner().invoke(app, ["verl", "import", str(tmp_path / "empty"), "--out", str(tmp_path / "store")])
    assert out.exit_code == 1 and "holds no <step>.jsonl" in out.output
    _write(tmp_path / "dump/1.jsonl", _legacy_step(1))
    args = ["verl", "import", str(tmp_path / "dump"), "--out", str(tmp_path / "store"), "--run-id", ""]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 2 and out.output.count("--run-id") == 1 and "skipped" not in out.output
    with pytest.raises(ValueError, match="run_id"):
        import_rollout_dump(tmp_path / "dump", LocalStore(tmp_path / "store"), "")


# --------------------------------------------------------------------------------------------------
# verl's own dump writer, fed by verl's reward manager scoring with rewardpipe's compute_score (make test-verl)


def _verls_writer(module: str, cls: str):
    """verl's ``<cls>._write_generations`` (a staticmethod) taken from its installed source and compiled on its own:
    importing the trainer modules needs ray's and transfer_queue's extras the ``[verl]`` venv does not install,
    but the writer needs only json, os and numpy."""
    import importlib.util

    import numpy as np

    spec = importlib.util.find_spec("verl")
    assert spec is not None and spec.submodule_search_locations
    source = Path(spec.submodule_search_locations[0], *module.split(".")[1:]).with_suffix(".py").read_text()
    (klass,) = [n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == cls]
    (function,) = [n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "_write_generations"]
    function.decorator_list = []
    namespace: dict = {"json": json, "os": __import__("os"), "np": np}
    exec(compile(ast.Module(body=[function], type_ignores=[]), module, "exec"), namespace)
    return namespace["_write_generations"]


def _scored_by_verl(groups: int, size: int):
    """(prompts, responses, ground truths, scores, reward_extra_info) of a GRPO batch scored by verl's
    NaiveRewardManager with rewardpipe's compute_score (gsm8k): every response is well formed (``format``
    constant inside every group), half of each group's answers right."""
    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.workers.reward_manager.naive import NaiveRewardManager

    from tests.integrations.test_verl_real import ByteTokenizer, adapter, batch

    samples = [
        (f"{g} + 1?", f"{g} + 1 = {g + 1 + k % 2}\n#### {g + 1 + k % 2}", str(g + 1))
        for g in range(groups)
        for k in range(size)
    ]
    config = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": str(Path(adapter.__file__)), "name": "compute_score"}}}
    )
    manager = NaiveRewardManager(tokenizer=ByteTokenizer(), num_examine=0, compute_score=get_custom_reward_fn(config))
    out = manager(batch(samples), return_dict=True)
    scores = out["reward_tensor"].sum(-1).tolist()
    return [p for p, _, _ in samples], [r for _, r, _ in samples], [g for _, _, g in samples], scores, out


@pytest.mark.verl
def test_verls_legacy_dump_of_rewardpipes_components_alarms_on_the_constant_one(tmp_path):
    prompts, responses, truths, scores, out = _scored_by_verl(groups=5, size=4)
    extra = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in out["reward_extra_info"].items()}
    write = _verls_writer("verl.trainer.ppo.ray_trainer", "RayPPOTrainer")
    write(prompts, responses, truths, scores, extra, str(tmp_path / "dump"), 3)  # as _log_rollout_data calls it

    store = LocalStore(tmp_path / "store")
    read = import_rollout_dump(tmp_path / "dump", store, "verl-run")
    assert not read.skipped and not read.grouped_by_uid and read.count == 20
    assert list(read.components) == ["format", "answer_correct"]
    result = monitor_records(store.iter_records("verl-run"))
    report = result.step(3)
    assert report.components["format"].verdict == "dead"
    assert report.components["answer_correct"].verdict == "ok" and report.aggregate.verdict == "ok"
    assert any(a.component == "format" and a.to_dict()["examples"] for a in result.alarms)


@pytest.mark.verl
def test_verls_v1_dump_groups_by_uid_and_judges_the_score(tmp_path):
    """verl 0.9.1's default trainer dumps only the score and the rollout keys: the aggregate is judged per uid."""
    prompts, responses, truths, _, _ = _scored_by_verl(groups=4, size=3)
    constant = [1.5] * len(prompts)  # every rollout right and well formed: no group has anything to learn from
    keys = [f"uid{i // 3}_{i % 3}_0" for i in range(len(prompts))]  # agent_loop_tq's {uid}_{session_id}_{index}
    write = _verls_writer("verl.trainer.ppo.v1.trainer_base", "PPOTrainer")
    write(prompts, responses, truths, constant, {"uid": keys}, str(tmp_path / "dump"), 5)

    read = read_rollout_dump(tmp_path / "dump")
    assert read.grouped_by_uid and {r["group_id"] for r in read.records} == {"uid0", "uid1", "uid2", "uid3"}
    assert all(r["components"] == {} for r in read.records)
    assert monitor_records(read.records).step(5).aggregate.verdict == "dead"


def test_a_step_verl_is_still_writing_is_not_imported_on_part_of_its_rollouts(tmp_path):
    """Judged on the rollouts written so far, the step would be marked checked and never judged whole."""
    _write(tmp_path / "dump/3.jsonl", _legacy_step(3))
    lines = _legacy_step(4)
    _write(tmp_path / "dump/4.jsonl", lines)
    path = tmp_path / "dump/4.jsonl"
    path.write_text(path.read_text() + json.dumps(lines[0])[:40])  # the dump thread mid-line
    read = read_rollout_dump(tmp_path / "dump")
    assert {r["step"] for r in read.records} == {3} and len(read.records) == 20
    assert len(read.skipped) == 1 and "still writing" in read.skipped[0]


def test_a_rollout_the_store_refuses_loses_itself_only_and_a_long_uid_is_filed(tmp_path):
    class Refusing(LocalStore):
        def put_record(self, record):
            if record.rollout_id == "uid1_2":
                raise ValueError("refused")
            return super().put_record(record)

    lines = _legacy_step(1)
    for index, line in enumerate(lines):
        assert isinstance(line, dict)
        line["uid"] = f"{'u' * 300 if index < 4 else f'uid{index // 4}'}_{index % 4}_0"
    _write(tmp_path / "dump/1.jsonl", lines)
    store = Refusing(tmp_path / "store")
    read = import_rollout_dump(tmp_path / "dump", store, "run")
    assert read.count == 19 and len(read.skipped) == 1 and "refused" in read.skipped[0]
    stored = list(store.iter_records("run"))
    assert len(stored) == 19 and sum(r.group_id == "u" * 300 for r in stored) == 4  # a long id is hashed, kept


@pytest.mark.parametrize("command", ["monitor", "report"])
def test_monitor_and_report_given_the_dump_itself_say_to_import_it(tmp_path, command):
    from rewardpipe.cli import app

    _write(tmp_path / "dump/1.jsonl", _legacy_step(1))
    extra = ["--out", str(tmp_path / "report.html")] if command == "report" else []
    out = CliRunner().invoke(app, [command, str(tmp_path / "dump"), *extra])
    assert out.exit_code == 1 and "not a rewardpipe store" in out.output
    assert f"rewardpipe verl import {tmp_path / 'dump'} --out STORE" in out.output.replace("\n", "")
