"""The generated reference pages (scripts/gen_docs.py) are current, and the schemas describe real documents."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from scripts import gen_docs

ROOT = Path(__file__).resolve().parents[2]
BUNDLED_TASKS = ROOT / "rewardpipe" / "data" / "tasks.jsonl"


def test_every_generated_page_is_current():
    stale = gen_docs.stale() + gen_docs.orphans()
    assert not stale, (
        f"stale generated docs: {', '.join(stale)}; regenerate them with `{gen_docs.REGENERATE}` and commit the result"
    )


def test_the_staleness_check_catches_an_edited_a_missing_and_a_left_over_page(tmp_path):
    for path in gen_docs.pages():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / path, tmp_path / path)
    assert gen_docs.stale(tmp_path) == [] and gen_docs.orphans(tmp_path) == []

    settings = tmp_path / "docs/reference/settings.md"
    settings.write_text(settings.read_text().replace("`group_size`", "`groups`"))
    (tmp_path / "docs/reference/cli.md").unlink()
    (tmp_path / "docs/reference/schemas/gone.schema.json").write_text("{}")
    assert set(gen_docs.stale(tmp_path)) == {"docs/reference/settings.md", "docs/reference/cli.md"}
    assert gen_docs.orphans(tmp_path) == ["docs/reference/schemas/gone.schema.json"]

    assert gen_docs.write(tmp_path)  # and regenerating repairs all three
    assert gen_docs.stale(tmp_path) == [] and gen_docs.orphans(tmp_path) == []


def test_the_generated_pages_do_not_depend_on_where_the_checkout_is():
    for path, render in gen_docs.pages().items():
        assert str(ROOT) not in render(), f"{path} names this checkout's folder ({ROOT}): it would be stale elsewhere"


def test_the_cli_page_has_every_command_and_option_of_the_app():
    import typer.main

    from rewardpipe.cli import app

    page = (ROOT / "docs/reference/cli.md").read_text()

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            assert f"`{' '.join([*path, name])}`" in page, f"{' '.join([*path, name])} missing from cli.md"
            for param in sub.params:
                for opt in param.opts:
                    if opt.startswith("--"):
                        assert f"`{opt}" in page or f"/ {opt}" in page, f"{name} {opt} missing from cli.md"
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), ["rewardpipe"])


def test_every_setting_is_documented_and_every_hand_written_note_names_a_real_setting():
    keys = gen_docs.setting_keys()
    unknown = sorted(set(gen_docs.SETTING_NOTES) - set(keys))
    assert not unknown, f"scripts/gen_docs.py SETTING_NOTES names settings that no longer exist: {unknown}"
    undocumented = [
        key
        for context_key, reference, _ in gen_docs.SETTINGS_MODELS
        for key, *_, doc in gen_docs._settings_rows(gen_docs.load_model(reference), gen_docs._note_prefix(context_key))
        if not doc
    ]
    assert not undocumented, (
        f"settings with no description: {undocumented}; give the field a "
        f"Field(description=...) or a comment above it in its settings model"
    )


def _schema(stem: str) -> dict:
    return json.loads((ROOT / f"docs/reference/schemas/{stem}.schema.json").read_text())


def test_the_record_transcript_and_manifest_schemas_validate_what_a_real_run_writes(tmp_path):
    from typer.testing import CliRunner

    from rewardpipe.cli import app

    store = tmp_path / "store"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--tasks",
            str(BUNDLED_TASKS),
            "--steps",
            "1",
            "--group-size",
            "2",
            "--groups-per-step",
            "2",
            "--out",
            str(store),
            "--run-id",
            "docs",
        ],
    )
    assert result.exit_code == 0, result.output
    run = store / "runs" / "docs"
    records = [p for p in run.glob("step=*/group=*/*.json")]
    transcripts = list((run / "transcripts").rglob("*.json"))
    assert len(records) == 4 and len(transcripts) == 4
    for path in records:
        jsonschema.validate(json.loads(path.read_text()), _schema("record"))
    for path in transcripts:
        jsonschema.validate(json.loads(path.read_text()), _schema("transcript"))
    jsonschema.validate(json.loads((run / "manifest.json").read_text()), _schema("run-manifest"))


def test_the_schemas_refuse_what_the_models_refuse():
    record = {
        "schema": "rewardpipe.record/v1",
        "run_id": "r",
        "step": 0,
        "group_id": "g",
        "rollout_id": "x",
        "task_id": "t",
        "status": "scored",
        "error": None,
        "components": {"a": 1.0},
        "weights": {"a": 1.0},
        "aggregate": 1.0,
        "metrics": {},
    }
    jsonschema.validate(record, _schema("record"))
    for broken in (
        {**record, "schema": "rewardpipe.record/v2"},
        {**record, "status": "done"},
        {k: v for k, v in record.items() if k != "components"},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, _schema("record"))


def test_the_nova_schemas_validate_the_single_turn_handlers_real_answers(monkeypatch):
    from rewardpipe.single_turn import score_samples

    samples = [
        {
            "id": "ok",
            "messages": [{"role": "user", "content": "6 * 7?"}, {"role": "assistant", "content": "#### 42"}],
            "metadata": {"reference_answer": "42"},
        },
        {"id": 7, "messages": [{"role": "assistant", "content": "#### 42"}], "metadata": {}},
        {"id": "bad", "messages": "not a list"},
    ]
    for sample in samples[:2]:
        jsonschema.validate(sample, _schema("nova-reward-sample"))
    results = score_samples(samples, "gsm8k")
    assert len(results) == 3
    for result in results:
        jsonschema.validate(result, _schema("nova-reward-output"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**results[0], "score": 1.0}, _schema("nova-reward-output"))
