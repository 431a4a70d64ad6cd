"""Review of round seven: the reviewer's reproductions.

``_standard_module`` (cf8c60d) imports, in the long-lived trusted runner, a standard-library module the model's code
named. The import went through every import hook and every ``sys.path`` entry of the runner: ``import distutils``
in the model's code made the runner import setuptools and pkg_resources (setuptools' ``_distutils_hack``, a
site-packages .pth hook, answers for ``distutils``), whose code ran in the trusted process and whose import hooks
stayed in its ``sys.meta_path`` for every later job; a standard-library name the host lacks was whatever a
``sys.path`` entry held under it; and a package's own regression tests (``unittest.test``, ``ctypes.test``) pulled
in the ``test`` package the deny-list names."""

from __future__ import annotations

import importlib
import sys
import textwrap

import pytest

from rewardpipe.execution import ExecutionJob, ExecutionStatus
from rewardpipe.execution.runtime import trusted

PROBE_TESTS = """
import sys
import unittest

class T(unittest.TestCase):
    def test_nothing_outside_the_standard_library_was_imported(self):
        loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("setuptools", "pkg_resources"))
        self.assertEqual(loaded, [])
        self.assertNotIn("VendorImporter", [type(finder).__name__ for finder in sys.meta_path])

    def test_answer(self):
        self.assertEqual(square(3), 9)
        try:  # read, so the runner binds it: left unbound (a NameError) rather than setuptools' distutils
            self.assertIsNone(M)
        except NameError:
            pass
"""


def test_model_import_of_distutils_runs_no_site_package_in_the_runner(one_worker):
    # Both jobs on one runner: the second would see what the first left loaded.
    for code in ("import distutils as M\n", "M = None\n"):
        result = one_worker.run(
            ExecutionJob(code=code + "def square(x):\n    return x * x\n", tests=PROBE_TESTS, entry_point="square")
        )
        assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_a_hook_of_site_packages_is_never_asked_for_a_standard_module():
    asked = []

    class Hook:
        def find_spec(self, name, path=None, target=None):
            asked.append(name)

    saved = sys.modules.pop("colorsys", None)
    sys.meta_path.insert(0, Hook())
    try:
        module = trusted._standard_module("colorsys")
    finally:
        sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, Hook)]
        sys.modules.pop("colorsys", None)
        if saved is not None:
            sys.modules["colorsys"] = saved
    assert asked == []
    assert module is not None and module.__file__.startswith(trusted._stdlib_paths()[0])


def test_a_standard_name_the_host_lacks_is_never_taken_from_sys_path(tmp_path, monkeypatch):
    # ``nt`` is a standard-library name (Windows): on this host only a sys.path entry could provide it.
    (tmp_path / "nt.py").write_text("IMPOSTOR = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        assert trusted._standard_module("nt") is None
        assert "nt" not in sys.modules or not getattr(sys.modules["nt"], "IMPOSTOR", False)
    finally:
        if getattr(sys.modules.get("nt"), "IMPOSTOR", False):
            del sys.modules["nt"]


@pytest.mark.parametrize("name", ["unittest.test", "ctypes.test", "distutils", "lib2to3.tests", "idlelib.idle_test"])
def test_no_regression_suite_or_installer_is_imported(name):
    assert trusted._standard_module(name) is None


def test_the_import_leaves_the_runner_paths_as_they_were():
    path, meta_path = sys.path[:], sys.meta_path[:]
    trusted._standard_module("graphlib")
    trusted._standard_module("no_such_module_anywhere")
    assert sys.path == path and sys.meta_path == meta_path


def test_a_right_answer_still_gets_its_standard_module(one_worker):
    code = "import xml.etree.ElementTree as ET\nimport graphlib\ndef square(x):\n    return x * x\n"
    tests = textwrap.dedent(
        """
        import unittest
        class T(unittest.TestCase):
            def test(self):
                self.assertEqual(square(3), 9)
                self.assertEqual(ET.fromstring("<a/>").tag, "a")
                self.assertEqual(list(graphlib.TopologicalSorter({1: [2]}).static_order()), [2, 1])
        """
    )
    result = one_worker.run(ExecutionJob(code=code, tests=tests, entry_point="square"))
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)
