"""The suite's own harness: tests marked with one ``xdist_group`` run on one worker under ``make test``'s
``-n 2 --dist loadgroup``. The sandbox tests that share a uid (tests/security/test_round_four.py) and the
CDK synth tests rely on it; pytest 9.2 with pytest-xdist 3.8 silently dropped the grouping, and a test of
one worker then attacked the other worker's sandbox (a flaky failure, never a loud one)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests import synth_group


def test_a_group_of_tests_runs_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(
        textwrap.dedent("""
            import os, pytest

            @pytest.mark.xdist_group("one")
            @pytest.mark.parametrize("n", range(6))
            def test_grouped(n):
                with open("workers.txt", "a") as handle:
                    handle.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

            @pytest.mark.parametrize("n", range(6))
            def test_free(n):
                pass
        """)
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "xdist",
            "-n",
            "2",
            "--dist",
            "loadgroup",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},  # xdist alone: the other plugins cost seconds
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers


def test_a_synth_outside_the_cdk_group_is_refused(monkeypatch):
    monkeypatch.setattr(synth_group, "running", ("tests/x.py::test_y", None))
    with pytest.raises(RuntimeError, match=r"tests/x.py::test_y synthesizes .* xdist_group\('cdk'\)"):
        synth_group.check_may_synthesize()
    monkeypatch.setattr(synth_group, "running", ("tests/x.py::test_y", "cdk"))
    synth_group.check_may_synthesize()
    monkeypatch.setattr(synth_group, "running", None)  # between tests (a session fixture, collection)
    synth_group.check_may_synthesize()
