"""The built docs site in a real headless browser (Debian's chromium), served over HTTP on 127.0.0.1 as a docs
host would serve it: the home page and a guide render their content, with no console message at all (a
script error, a blocked request) and no request the server could not answer (a missing asset, script or
search index).

`make docs` builds the site into site/, installs chromium when it is missing, then runs this file. Without a
built site or without chromium these tests skip and say why.
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs

SITE = Path(__file__).resolve().parents[2] / "site"
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
    "--virtual-time-budget=5000",
]  # let the page's scripts (search worker, navigation) run before the dump
CONSOLE = re.compile(r":CONSOLE[:(]")


class _Recording(http.server.SimpleHTTPRequestHandler):
    """Answers from a folder and keeps (path, status) of every request in ``requests``."""

    requests: list[tuple[str, int]]

    def log_request(self, code="-", size="-"):
        self.requests.append((self.path, int(code) if str(code).isdigit() else 0))

    def log_message(self, *args):  # quiet: the test reads what log_request keeps
        pass


@pytest.fixture
def served():
    """Serve a folder on 127.0.0.1 (an ephemeral port): yields ``serve(folder) -> (url, requests)``."""
    servers = []

    def serve(folder: Path) -> tuple[str, list[tuple[str, int]]]:
        requests: list[tuple[str, int]] = []
        handler = functools.partial(type("Handler", (_Recording,), {"requests": requests}), directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/", requests

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


def _open(url: str, profile: Path) -> tuple[list[str], str]:
    """(console lines, the DOM after the page's scripts ran)."""
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (`make docs` installs Debian's chromium)")
    proc = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"chromium exited {proc.returncode}: {proc.stderr[-2000:]}"
    return [line for line in proc.stderr.splitlines() if CONSOLE.search(line)], proc.stdout


@pytest.mark.parametrize(
    "page, must_show",
    [
        ("", ["rewardpipe scores", "Start here"]),
        ("guides/trl/", ["Use from TRL", "reward_functions(", "gsm8k_format: [1.0"]),
    ],
)
def test_the_site_renders_without_console_messages(served, tmp_path, page, must_show):
    if not (SITE / "index.html").is_file():
        pytest.skip("the site is not built (`make docs` builds it, then runs this test)")
    url, requests = served(SITE)
    console, dom = _open(url + page, tmp_path / "profile")
    assert console == [], "\n".join(console)
    failed = [(path, status) for path, status in requests if status >= 400]
    assert not failed, f"requests the site could not answer: {failed}"
    assert any(path.endswith("search_index.json") for path, _ in requests), (
        f"the search index was never fetched: did the page's scripts run? {requests}"
    )
    for text in must_show:  # the page's own content, and the code and output its snippets include
        assert text in dom, f"{page or 'index'}: {text!r} not on the page"


def test_the_console_check_does_catch_a_script_error_and_a_missing_asset(served, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "index.html").write_text(
        '<!DOCTYPE html><html><head><script src="missing.js"></script></head>'
        "<body><p>x</p><script>undefinedFunction()</script></body></html>"
    )
    url, requests = served(folder)
    console, _ = _open(url, tmp_path / "profile")
    assert any("undefinedFunction" in line for line in console), console
    assert ("/missing.js", 404) in requests, requests
