"""Round thirty-five (second wave): what the concept and reference pages claim is what the code does.

Each test reads a claim off a page and checks it against the code or a real run, so the page cannot drift again.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _cli(*args: str, cwd: Path, extra_path: str = "") -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (extra_path, str(ROOT)) if p)
    return subprocess.run(
        [sys.executable, "-m", "rewardpipe", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _scripted_run(cwd: Path, out: str, run_id: str, *, group_size: int, steps: int) -> None:
    """A scripted ask-before-coding run of 4 groups a step, as the demo plays it, stored under ``out``."""
    done = _cli(
        "run", "--tasks", str(ROOT / "rewardpipe" / "data" / "tasks.jsonl"), "--policy", "scripted",
        "--group-size", str(group_size), "--steps", str(steps), "--groups-per-step", "4", "--out", out,
        "--run-id", run_id, cwd=cwd,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def _table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table after ``heading``."""
    section = text[text.index(heading) :]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip("|"))])
        elif rows:
            break
    return [row for row in rows[2:]]  # past the header and its rule


def test_the_record_on_the_record_page_is_the_record_the_demo_run_writes(tmp_path):
    # The page shows step 0's s0-g003-abc-004-parse-bool-k7 of the demo run; it had lost a metric (real_questions).
    page = (DOCS / "concepts" / "record.md").read_text()
    shown = json.loads(re.search(r"```json\n(.*?)```", page, re.S).group(1))
    _scripted_run(tmp_path, str(tmp_path), "demo", group_size=8, steps=1)
    group = tmp_path / "runs" / "demo" / "step=0" / f"group={shown['group_id']}"
    written = json.loads((group / f"{shown['rollout_id']}.json").read_text())
    assert list(shown["metrics"]) == list(written["metrics"])  # every metric, in the order a record has them
    shown["metrics"].pop("exec_ms"), written["metrics"].pop("exec_ms")  # a duration: differs every run
    assert shown == written


def test_the_runs_page_names_every_run_manifest_field_and_the_version_written():
    from rewardpipe.models import MANIFEST_SCHEMA, RunManifest

    page = (DOCS / "reference" / "runs.md").read_text()
    rows = _table_rows(page, "Each run writes `runs/<run_id>/manifest.json`")
    named = {name for row in rows for name in re.findall(r"`([a-z0-9_]+)`", row[0])}
    fields = {field.alias or name for name, field in RunManifest.model_fields.items()}
    assert fields - named == set(), f"runs.md's manifest table lacks {sorted(fields - named)}"
    assert named - fields == set(), f"runs.md's manifest table names fields that do not exist: {sorted(named - fields)}"
    schema_row = next(row for row in rows if row[0] == "`schema`")
    assert schema_row[1].startswith(f"`{MANIFEST_SCHEMA}`")
    # What a resume compares: every identity field is said.
    identity = page[page.index("* `--resume`") :].split("\n\n", 1)[0]
    for said in ("command", "configuration", "reward", "weights", "environment"):
        assert said in identity


def test_the_component_page_says_what_the_monitor_does_with_an_out_of_range_value(tmp_path):
    (tmp_path / "oor.py").write_text(
        "from rewardpipe import Reward, component\n\n"
        "@component(range=(0, 1), role='shaping')\n"
        "def bonus(completion):\n    return 5.0 if '5' in completion else 0.0\n\n"
        "@component(range=(0, 1), role='outcome')\n"
        "def odd(completion):\n    return float(len(completion) % 2)\n\n"
        "R = Reward('oor', [bonus, odd])\n"
    )
    lines = [
        {"rollout_id": f"r{g}-{k}", "group_id": f"g{g}",
         "messages": [{"role": "user", "content": f"q{g}"}, {"role": "assistant", "content": "5" * k}]}
        for g in range(5) for k in range(4)
    ]  # fmt: skip
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    scored = _cli("score", "samples.jsonl", "--reward", "oor:R", "--out", "store", cwd=tmp_path, extra_path=".")
    assert scored.returncode == 0, scored.stderr
    monitored = _cli("monitor", "store", "--json", cwd=tmp_path)
    result = json.loads(monitored.stdout)
    assert result["steps"][0]["components"]["bonus"]["out_of_range_groups"] == 5  # every group has a 5
    assert "values_out_of_range" in json.dumps(result["warnings"])

    page = (DOCS / "concepts" / "component.md").read_text()
    assert "does not count `out_of_range`" not in page
    paragraph = page[page.index("A value outside the declared range") :].split("\n\n", 1)[0]
    assert "`out_of_range_groups`" in paragraph and "`values_out_of_range`" in paragraph


def test_the_reward_page_lists_every_built_in_reward_with_its_components():
    from rewardpipe.references import BUILTIN_REWARDS, resolve_reward

    page = (DOCS / "concepts" / "reward.md").read_text()
    rows = {row[0].strip("`"): row[2] for row in _table_rows(page, "## The built-in rewards")}
    assert set(rows) == set(BUILTIN_REWARDS)
    for name, cell in rows.items():
        components = [component.name for component in resolve_reward(name).components]
        assert re.findall(r"`([a-z_]+)`", cell) == components, name


def _run_defaults() -> dict[str, object]:
    import typer.main

    from rewardpipe.cli import app

    command = typer.main.get_command(app)
    run = command.commands["run"]  # type: ignore[attr-defined]
    return {opt: param.default for param in run.params for opt in param.opts if opt.startswith("--")}


def test_the_configuration_page_gives_run_s_own_defaults():
    defaults = _run_defaults()
    page = (DOCS / "reference" / "configuration.md").read_text()
    checked = 0
    for options_cell, default_cell, _ in _table_rows(page, "**Locally**"):
        options = re.findall(r"`(--[a-z-]+)", options_cell)
        values = [value.strip() for value in default_cell.split(" / ")]
        if len(options) != len(values):
            continue
        for option, value in zip(options, values, strict=True):
            number = re.fullmatch(r"`?(\d[0-9.e-]*)`?(?: s)?", value)
            default = defaults[option]
            if number is not None:
                assert float(number.group(1)) == float(default), f"{option}: page {value}, run {default}"
                checked += 1
            elif default is None:
                # run leaves it to the environment (or to the machine): the page must not give a fixed figure
                assert not re.fullmatch(r"`?[0-9.]+`?", value), f"{option}: page {value}, run takes the environment's"
    assert checked >= 10


def test_the_development_page_s_layout_names_files_and_folders_that_exist():
    page = (DOCS / "reference" / "development.md").read_text()
    layout = re.search(r"```\n(rewardpipe/.*?)```", page, re.S).group(1)
    parent = ""
    missing = []
    for line in layout.splitlines():
        match = re.match(r"( *)(\S+)", line)
        if match is None:
            continue
        indent, name = match.groups()
        if not re.fullmatch(r"[\w./]+", name) or not (name.endswith("/") or name.endswith(".py")):
            continue  # a continuation line of a description
        path = name if not indent else parent + name
        if not indent:
            parent = name
        if not (ROOT / path).exists():
            missing.append(path)
    assert missing == [], f"development.md's layout names {missing}"


def test_the_development_page_s_layout_shows_every_subpackage():
    page = (DOCS / "reference" / "development.md").read_text()
    layout = re.search(r"```\n(rewardpipe/.*?)```", page, re.S).group(1)
    subpackages = sorted(path.parent.name for path in (ROOT / "rewardpipe").glob("*/__init__.py"))
    missing = [name for name in subpackages if not re.search(rf"^ +{name}/ ", layout, re.M)]
    assert missing == [], f"development.md's layout leaves out rewardpipe/{missing}"


def test_the_trl_guide_names_every_argument_of_episode_rollout():
    import inspect

    from rewardpipe.integrations.trl import EpisodeRollout

    page = (DOCS / "guides" / "trl.md").read_text()
    paragraph = page[page.index("Build it with\n`EpisodeRollout(") :].split("\n* ", 1)[0]
    parameters = inspect.signature(EpisodeRollout).parameters
    missing = [name for name in parameters if name != "tasks" and f"{name}=" not in paragraph]
    assert missing == [], f"the TRL guide's EpisodeRollout paragraph leaves out {missing}"
    assert all(p.kind is p.KEYWORD_ONLY for name, p in parameters.items() if name != "tasks")
    assert "Every argument after `tasks` is a keyword" in paragraph


def test_every_make_target_is_on_the_development_page_or_in_the_readme():
    makefile = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:(.*?)(?<!\\)\n", makefile, re.S | re.M).group(1).replace("\\\n", " ").split()
    said = (DOCS / "reference" / "development.md").read_text() + (ROOT / "README.md").read_text()
    missing = [target for target in phony if not re.search(rf"`make {re.escape(target)}`", said)]
    assert missing == [], f"make targets no page names: {missing}"


def test_the_architecture_page_names_every_cdk_construct_module():
    page = (DOCS / "reference" / "architecture.md").read_text()
    constructs = sorted(p.name for p in (ROOT / "stacks" / "constructs").glob("*.py") if p.name != "__init__.py")
    missing = [name for name in constructs if f"`{name}`" not in page]
    assert missing == [], f"architecture.md's construct list leaves out {missing}"


def test_the_monitor_page_shows_the_store_layout_and_how_an_unfinished_run_is_judged(tmp_path):
    import shutil

    from rewardpipe import store

    page = (DOCS / "monitor.md").read_text()
    layout = re.search(r"```\n(runs/<run_id>/.*?)```", page, re.S).group(1)
    shown = {line.split()[0] for line in layout.splitlines()}
    stored = set(re.findall(r"^    (runs/<run_id>/\S+)", store.__doc__ or "", re.M))
    assert stored - shown == set(), f"monitor.md's store layout leaves out {sorted(stored - shown)}"

    # A run whose manifest has no finished_at and whose last step has no marker: judged up to its finished steps.
    _scripted_run(tmp_path, "store", "r", group_size=2, steps=2)
    run = tmp_path / "store" / "runs" / "r"
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "finished_at": None}))
    (run / "finished" / "step=1.json").unlink()
    shutil.rmtree(run / "alarms", ignore_errors=True)
    monitored = _cli("monitor", "store", "--json", cwd=tmp_path)
    result = json.loads(monitored.stdout)
    assert (result["in_progress"], result["unfinished_steps"]) == (True, [1])
    assert [step["step"] for step in result["steps"]] == [0]
    assert _cli("monitor", "store", "--step", "1", cwd=tmp_path).returncode == 1
    paragraph = page[page.index("**A run still being written.**") :].split("\n- ", 1)[0]
    for said in ("`in_progress`", "`unfinished_steps`", "`finished_at`", "exit 1", "finished/step=<n>.json"):
        assert said in paragraph


def test_the_report_page_s_transcript_table_names_every_field_a_transcript_has():
    from rewardpipe.transcripts import RolloutTranscript

    page = (DOCS / "report.md").read_text()
    rows = _table_rows(page, "## Transcripts")
    named = {name for row in rows for name in re.findall(r"`([a-z_]+)`", row[0])}
    fields = {field.alias or name for name, field in RolloutTranscript.model_fields.items()}
    assert fields - named == set(), f"report.md's transcript table lacks {sorted(fields - named)}"
    schema_row = next(row for row in rows if row[0] == "`schema`")
    assert f"`{RolloutTranscript.model_fields['schema_'].default}`" in schema_row[1]


def test_report_reads_every_kind_of_path_the_report_page_names(tmp_path):
    _scripted_run(tmp_path, "store", "r", group_size=2, steps=1)
    records = sorted((tmp_path / "store" / "runs" / "r" / "step=0").rglob("*.json"))
    (tmp_path / "records.jsonl").write_text("".join(path.read_text().strip() + "\n" for path in records))
    page = (DOCS / "report.md").read_text()
    paragraph = page[page.index("PATH is what `rewardpipe monitor` reads") :].split("\n\n", 1)[0]
    for said, path in [("a store directory", "store"), ("a run folder", "store/runs/r"), ("JSONL", "records.jsonl")]:
        assert said in paragraph
        assert _cli("report", path, "--json", cwd=tmp_path).returncode == 0, path
    assert "Parquet" in paragraph


def test_the_readme_s_install_block_names_every_extra():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("## Install") :].split("```", 2)[1]
    missing = [name for name in extras if f"[{name}]" not in block]
    assert missing == [], f"README's install block leaves out the extras {missing}"


def test_the_versioning_contract_names_every_environment_attribute_and_hook_the_concept_page_documents():
    """docs/versioning.md's public API v1 lists the Environment's attributes and hooks; concepts/environment.md
    documented hook_timeout_s, the max_observation_* limits and tool_schemas, which it did not name."""
    concept = (DOCS / "concepts" / "environment.md").read_text(encoding="utf-8")
    documented, table = set(), None
    for line in concept.splitlines():
        if line.startswith("| ") and not line.startswith("| `"):
            table = line.split("|")[1].strip()  # a table's header: "attribute", "hook", "environment"...
        elif line.startswith("| `") and table in ("attribute", "hook"):
            documented.update(re.findall(r"`([a-z_]+)[`(]", line.split("|")[1]))
    row = next(
        line
        for line in (DOCS / "versioning.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `Environment` |")
    )
    named = set(re.findall(r"`([a-z_]+)`", row))
    assert documented and documented - named == set()
