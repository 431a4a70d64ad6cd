"""The report in a real headless browser (Debian's chromium): it renders with no console message at all
(the page has no scripts, so any message is a CSP violation or an error) and its screenshot is not blank.

`make test-browser` installs chromium when it is missing; without it this test skips and says why.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.report.test_report_cli import _store

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]
CONSOLE = re.compile(r":CONSOLE[:(]")


def _load(page: Path, tmp_path: Path, name: str) -> tuple[list[str], Path]:
    """Load ``page`` in a fresh profile; return (console lines, screenshot path)."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (run `make test-browser`, which installs Debian's chromium)")
    shot = tmp_path / f"{name}.png"
    proc = subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={tmp_path / ('profile-' + name)}",
            "--window-size=1280,2000",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.exists(), f"chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return [line for line in proc.stderr.splitlines() if CONSOLE.search(line)], shot


def _ink(shot: Path) -> float:
    """Share of pixels that are not (near) white."""
    from PIL import Image

    image = Image.open(shot).convert("L")
    histogram = image.histogram()
    return 1 - sum(histogram[245:]) / (image.width * image.height)


def test_the_report_renders_without_console_errors_and_is_not_blank(cli, tmp_path):
    _store(tmp_path, hostile=True)  # hostile names and transcripts: escaping must hold in a real browser
    page = tmp_path / "report.html"
    assert cli("report", tmp_path / "store", "--out", page).exit_code == 0
    console, shot = _load(page, tmp_path, "report")
    assert console == []
    assert _ink(shot) > 0.03


def test_the_console_check_does_catch_errors(tmp_path):
    """The detector above is live: a page that errors and breaks its CSP is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><head><meta http-equiv="Content-Security-Policy" '
        'content="default-src \'none\'"></head><body><p>x</p><img src="http://example.invalid/x.png">'
        "</body></html>"
    )
    console, _ = _load(bad, tmp_path, "bad")
    assert any("Content Security Policy" in line for line in console)
