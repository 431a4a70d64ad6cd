"""`rewardpipe report`: one self-contained HTML page, the same content as JSON, triage.jsonl in the store,
two runs compared, records as typed Parquet — with hostile names and transcripts kept inert."""

import json
from html.parser import HTMLParser

import pytest

from rewardpipe.models import Message, Record
from rewardpipe.store import LocalStore
from rewardpipe.transcripts import RolloutTranscript, Verdict
from tests.cli.conftest import BUNDLED_TASKS
from tests.report.conftest import rec

XSS = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'


def _store(tmp_path, run="r", steps=3, hostile=False) -> LocalStore:
    store = LocalStore(tmp_path / "store")
    task = XSS if hostile else "t"
    for s in range(steps):
        for g in range(5):
            for k in range(4):
                data = rec(
                    s,
                    f"s{s}-g{g}",
                    k,
                    f"{task}{g}",
                    run=run,
                    a=float(k % 2) if s < steps - 1 and g != 4 else 0.0,
                    b=float(k % 3 == 0),
                )
                store.put_record(Record.model_validate(data))
                store.put_transcript(
                    RolloutTranscript(
                        run_id=run,
                        step=s,
                        group_id=data["group_id"],
                        rollout_id=data["rollout_id"],
                        task_id=data["task_id"],
                        messages=[
                            Message(role="user", content="Write f."),
                            Message(
                                role="assistant", content=(XSS + "\x1b[2J\u202e") if hostile else "```python\nx=1\n```"
                            ),
                        ],
                        turn_kinds=["commit"],
                        executed_code=XSS if hostile else "x=1\n",
                        verdict=Verdict(status="failed", reason=XSS if hostile else "AssertionError"),
                        components=data["components"],
                        aggregate=data["aggregate"],
                    )
                )
    return store


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)


def _external_references(page: str) -> list[str]:
    """What, parsed as HTML, would make a browser fetch or run something: scripts, links, frames, objects,
    src/href-like attributes, event handlers, CSS url()/@import."""
    parser = _Tags()
    parser.feed(page)
    found = [tag for tag, _ in parser.tags if tag in ("script", "link", "iframe", "object", "embed", "img", "base")]
    for tag, attrs in parser.tags:
        found += [
            f"{tag}[{name}]"
            for name in attrs
            if name in ("src", "href", "action", "srcset", "poster", "background") or name.startswith("on")
        ]
        found += [f"{tag}[style url]" for value in attrs.values() if value and "url(" in value]
    found += [css for css in parser.styles if "url(" in css or "@import" in css]
    return found


def test_report_is_one_self_contained_page_with_every_section(cli, tmp_path):
    _store(tmp_path)
    out = tmp_path / "report.html"
    result = cli("report", tmp_path / "store", "--out", out)
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert _external_references(page) == []
    assert "default-src 'none'" in page
    for heading in (
        "Per component over steps",
        "Verdict timeline",
        "correlation",
        "Share of the GRPO advantage",
        "Task triage",
        "Alarms and example transcripts",
    ):
        assert heading in page
    assert page.count("<svg") >= 6 and page.count("<details>") >= 3  # charts, timeline; expandable examples


def test_hostile_text_is_escaped_everywhere(cli, tmp_path):
    _store(tmp_path, hostile=True)
    out = tmp_path / "report.html"
    assert cli("report", tmp_path / "store", "--out", out).exit_code == 0
    page = out.read_text()
    assert "<script>" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    assert "\x1b" not in page and "\u202e" not in page and "\\x1b[2J" in page
    assert _external_references(page) == []


def test_json_carries_the_same_content_and_triage_is_written_to_the_store(cli, tmp_path):
    store = _store(tmp_path)
    result = cli("report", tmp_path / "store", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["run_id"] == "r" and data["steps"] == [0, 1, 2]
    assert {"series", "alarms", "correlation", "advantage_share", "task_triage"} <= set(data)
    triage = data["task_triage"]
    assert triage and {tuple(sorted(e)) for e in triage} == {
        ("component", "groups", "steps", "task_id", "value", "verdict")
    }
    lines = (tmp_path / "store" / "runs" / "r" / "triage.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == triage
    alarm = next(a for a in data["alarms"] if a["component"] == "a")
    example = alarm["examples"][0]
    assert example["transcript"]["verdict"]["reason"] == "AssertionError"
    assert store.get_transcript(example["transcript_key"]).rollout_id == example["rollout_id"]


def test_compare_two_runs_side_by_side(cli, tmp_path):
    _store(tmp_path, run="base", steps=3)
    _store(tmp_path, run="fixed", steps=4)
    out = tmp_path / "cmp.html"
    result = cli("report", tmp_path / "store", "--run-id", "base", "--run-id", "fixed", "--out", out, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["run_id"] for r in data["runs"]] == ["base", "fixed"]
    row = next(r for r in data["comparison"] if r["component"] == "a")
    assert row["a"]["dead_steps"] == 1 and row["b"]["dead_steps"] == 1
    page = out.read_text()
    assert "base" in page and "fixed" in page and "Side by side" in page and _external_references(page) == []


def test_report_refuses_unclear_requests(cli, tmp_path):
    _store(tmp_path)
    assert "--out" in cli("report", tmp_path / "store").output
    missing = cli("report", tmp_path / "nowhere", "--json")
    assert missing.exit_code == 1 and "not found" in missing.output


def test_parquet_export_has_an_explicit_schema_that_pandas_reads_without_guessing(cli, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pandas as pd
    import pyarrow.parquet as pq

    store = _store(tmp_path)
    broken = Record.model_validate(rec(0, "s0-g0", 7, "t0", status="error", a=None, b=None))
    store.put_record(broken)
    result = cli("report", tmp_path / "store", "--json", "--parquet", tmp_path / "pq")
    assert result.exit_code == 0, result.output
    table = pq.read_table(tmp_path / "pq" / "r.parquet")
    assert table.schema.field("step").type == pa.int64()
    assert table.schema.field("aggregate").type == pa.float64()
    assert table.schema.field("components").type == pa.map_(pa.string(), pa.float64())
    assert table.num_rows == 61
    frame = pd.read_parquet(tmp_path / "pq" / "r.parquet")
    error_row = frame[frame.status == "error"].iloc[0]
    assert dict(error_row.components) == {"a": None, "b": None}  # unknown stays null, never 0
    assert error_row.error_kind == "executor_crash" and pd.isna(error_row["aggregate"])


def test_the_demo_run_reports_its_collapse(cli, tmp_path):
    out = tmp_path / "store"
    assert (
        cli(
            "run",
            "--tasks",
            BUNDLED_TASKS,
            "--policy",
            "scripted",
            "--group-size",
            "4",
            "--steps",
            "3",
            "--collapse-from-step",
            "2",
            "--out",
            out,
            "--run-id",
            "demo",
        ).exit_code
        == 0
    )
    data = json.loads(cli("report", out, "--json").stdout)
    dead = {a["component"] for a in data["alarms"] if a["kind"] == "dead_component"}
    assert {"correctness", "guessed_immediately"} <= dead
    guess = next(a for a in data["alarms"] if a["component"] == "guessed_immediately")
    transcript = guess["examples"][0]["transcript"]
    assert transcript["turn_kinds"] == ["commit"] and transcript["verdict"]["status"] == "failed"
