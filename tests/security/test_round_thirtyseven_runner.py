"""Round thirty-seven, the trusted runner between jobs (issue 19: nothing around one job can touch another).

The trusted runner serves up to 500 jobs of any task. What one job's hidden tests change in the runner's interpreter
must not decide a later job's verdict: each task's tests were written for an interpreter of their own.

* **Standard state changed in place.** Since round thirty-five a module attribute the tests rebind is put back and
  since round thirty-six a standard class's attribute, but state changed *in place* lasted until the runner was
  recycled: an ABC registration (``collections.abc.Sequence.register(dict)``), ``copy._deepcopy_dispatch``,
  ``copyreg.pickle``, ``mimetypes.add_type``, a codec search function, ``csv.field_size_limit`` and dialects, a
  list or dict of a standard module (``keyword.kwlist``, ``http.client.responses``, ``json.decoder._CONSTANTS``,
  ``urllib.parse.uses_relative``), a module-level instance's settings (``reprlib.aRepr.maxlist``,
  ``calendar.setfirstweekday``), names added to ``sys`` and ``__main__``, a module put in ``sys.modules`` under a
  second name, ``sys.path_importer_cache`` and ``linecache`` entries. Each failed the next task's right answer.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys

import pytest

from rewardpipe.execution import ExecutionStatus
from rewardpipe.execution.sandbox import make_executor
from tests.security import test_round_thirtyone_sandbox as thirtyone
from tests.security.test_round_nine_files import _lambda_like

IDENTITY = "def f(n):\n    return n\n"
HEADER = "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
BODY = "        self.assertEqual(f(1), 1)\n"


@pytest.fixture(scope="module", params=["full", "lambda"])
def worker(request, tmp_path_factory):
    """One worker (one trusted runner for consecutive jobs), started in a scratch directory."""
    before = os.getcwd()
    os.chdir(tmp_path_factory.mktemp("scorer"))
    try:
        executor = make_executor(workers=1) if request.param == "full" else _lambda_like()
        yield executor
        executor.close()
    finally:
        os.chdir(before)


def _passes_after(executor, first_top: str, second_top: str) -> None:
    """A job whose tests run ``second_top`` at module level passes right after a passing job whose tests ran
    ``first_top`` (the same worker, so the same trusted runner)."""
    first = thirtyone._run(executor, "first", IDENTITY, first_top + HEADER + BODY, entry_point="f")
    assert first.status is ExecutionStatus.PASSED, (first.status, first.reason)
    second = thirtyone._run(executor, "second", IDENTITY, second_top + HEADER + BODY, entry_point="f")
    assert second.status is ExecutionStatus.PASSED, (second.status, second.reason)


# Each case: what the first task's tests do at module level, and what a second task's tests check at module level,
# which holds in a fresh interpreter (checked by test_each_check_holds_in_a_fresh_interpreter).
IN_PLACE = {
    "an ABC registration": (
        "import collections.abc\ncollections.abc.Sequence.register(dict)\n",
        "import collections.abc\nassert not isinstance({}, collections.abc.Sequence)\n",
    ),
    "an ABC registration, as a decorator": (
        "import io\n@io.IOBase.register\nclass Mine:\n    pass\nio.IOBase.register(int)\n",
        "import io\nassert not isinstance(1, io.IOBase)\n",
    ),
    "copy's dispatch table": (
        "import copy\ncopy._deepcopy_dispatch[list] = lambda x, memo: 'copied'\n",
        "import copy\nassert copy.deepcopy([1]) == [1]\n",
    ),
    "copyreg's dispatch table": (
        "import copyreg\ncopyreg.pickle(complex, lambda c: (str, ('x',)))\n",
        "import pickle\nassert pickle.loads(pickle.dumps(1j)) == 1j\n",
    ),
    "a MIME type": (
        "import mimetypes\nmimetypes.add_type('text/x-mine', '.py')\n",
        "import mimetypes\nassert mimetypes.guess_type('a.py')[0] == 'text/x-python'\n",
    ),
    "a codec search function": (
        "import codecs\ncodecs.register(lambda name: codecs.lookup('rot13') if name == 'utf_9' else None)\n",
        "import codecs\ntry:\n    codecs.lookup('utf_9')\nexcept LookupError:\n    pass\n"
        "else:\n    raise AssertionError\n",
    ),
    "csv's field limit": (
        "import csv\ncsv.field_size_limit(5)\n",
        "import csv, io\nassert list(csv.reader(io.StringIO('abcdefgh'))) == [['abcdefgh']]\n",
    ),
    "a csv dialect": (
        "import csv\ncsv.register_dialect('rp_semicolons', delimiter=';')\n",
        "import csv\nassert 'rp_semicolons' not in csv.list_dialects()\n",
    ),
    "a standard module's list": (
        "import keyword\nkeyword.kwlist.append('mine')\n",
        "import keyword\nassert 'mine' not in keyword.kwlist\n",
    ),
    "a standard module's dict": (
        "import http.client\nhttp.client.responses[200] = 'Fine'\n",
        "import http.client\nassert http.client.responses[200] == 'OK'\n",
    ),
    "a submodule's dict, reached through its package": (
        "import json\njson.decoder._CONSTANTS['NaN'] = 0\n",
        "import json, math\nassert math.isnan(json.loads('NaN'))\n",
    ),
    "a standard module's list, removed from": (
        "import urllib.parse\nurllib.parse.uses_relative.remove('http')\n",
        "import urllib.parse\nassert urllib.parse.urljoin('http://a/b/c', 'd') == 'http://a/b/d'\n",
    ),
    "an enum's member map": (
        "import http\nhttp.HTTPStatus._value2member_map_[200] = None\n",
        "import http\nassert http.HTTPStatus(200).phrase == 'OK'\n",
    ),
    "a module-level instance's setting": (
        "import reprlib\nreprlib.aRepr.maxlist = 1\n",
        "import reprlib\nassert reprlib.repr([1, 2, 3]) == '[1, 2, 3]'\n",
    ),
    "a module-level instance of another module's class": (
        "import json\njson._default_encoder.item_separator = ';'\n",
        "import json\nassert json.dumps([1, 2]) == '[1, 2]'\n",
    ),
    "a module-level instance's setting, by a function": (
        "import calendar\ncalendar.setfirstweekday(6)\n",
        "import calendar\nassert calendar.firstweekday() == 0\n",
    ),
    "an archive format": (
        "import shutil\nshutil.unregister_archive_format('zip')\n",
        "import shutil\nassert 'zip' in [name for name, _ in shutil.get_archive_formats()]\n",
    ),
    "a name added to sys": (
        "import sys\nsys.rp_flag = 1\n",
        "import sys\nassert not hasattr(sys, 'rp_flag')\n",
    ),
    "a name added to __main__": (
        "import __main__\n__main__.rp_flag = 1\n",
        "import __main__\nassert not hasattr(__main__, 'rp_flag')\n",
    ),
    "a module put in sys.modules under a second name": (
        "import sys, json\nsys.modules['rp_alias'] = json\n",
        "import sys\nassert 'rp_alias' not in sys.modules\n",
    ),
    "an entry of sys.path_importer_cache": (
        "import sys\nsys.path_importer_cache['/rp/nowhere'] = None\n",
        "import sys\nassert '/rp/nowhere' not in sys.path_importer_cache\n",
    ),
    "an entry of linecache": (
        "import linecache\nlinecache.cache['/rp/made.py'] = (1, None, ['x = 1\\n'], '/rp/made.py')\n",
        "import linecache\nassert linecache.getline('/rp/made.py', 1) == ''\n",
    ),
    "a mock sentinel": (
        "from unittest import mock\nmock.sentinel.rp_mark\n",
        "from unittest import mock\nassert 'rp_mark' not in mock.sentinel._sentinels\n",
    ),
}


@pytest.mark.parametrize("case", sorted(IN_PLACE))
def test_standard_state_a_job_changes_in_place_is_back_for_the_next_job(worker, case):
    _passes_after(worker, *IN_PLACE[case])


# What a standard module registers as it is first imported is its own (a fresh interpreter has it): never undone.
# The first job imports modules the runner may not have loaded (importlib.abc: not, when this was written; in a
# test's fixture, so while the job runs); the next job relies on their import-time state.
IMPORTED_STATE = {
    "importlib.abc's registrations": (
        "def setUpModule():\n    __import__('importlib.abc')\n",  # (by a name the runner does not read ahead)
        "import importlib.abc, importlib.machinery\n"
        "assert issubclass(importlib.machinery.PathFinder, importlib.abc.MetaPathFinder)\n",
    ),
    "numbers' registrations": (
        "import numbers, fractions\n",
        "import numbers\nassert isinstance(1, numbers.Integral)\n",
    ),
    "email's codecs and charsets": (
        "import email.charset\n",
        "import email.charset\nassert email.charset.Charset('utf-8').header_encoding == email.charset.SHORTEST\n",
    ),
    "a mimetypes database the tests initialised": (
        "import mimetypes\nmimetypes.init()\n",
        "import mimetypes\nassert mimetypes.guess_type('a.py')[0] == 'text/x-python'\n",
    ),
}


def test_each_check_holds_in_a_fresh_interpreter():
    for case, (_, check) in {**IN_PLACE, **IMPORTED_STATE}.items():
        ran = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60, check=False)
        assert ran.returncode == 0, (case, ran.stderr[-500:])


@pytest.mark.parametrize("case", sorted(IMPORTED_STATE))
def test_what_a_standard_module_sets_up_as_it_loads_stays(worker, case):
    _passes_after(worker, *IMPORTED_STATE[case])


def test_a_job_that_changes_standard_state_in_place_still_sees_its_change(worker):
    # (put back when the job ends, never while its tests run)
    tests = (
        "import collections.abc, copy, keyword\ncollections.abc.Sequence.register(dict)\nkeyword.kwlist.append('x')\n"
        + HEADER
        + "        self.assertIsInstance({}, collections.abc.Sequence)\n        self.assertIn('x', keyword.kwlist)\n"
        + BODY
    )
    result = thirtyone._run(worker, "own", IDENTITY, tests, entry_point="f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


def test_the_standard_modules_a_test_source_names():
    import ast

    from rewardpipe.execution.runtime import runner_globals

    source = (
        "import json, numpy\nfrom unittest import mock\nimport xml.etree.ElementTree as ET\n"
        "def setUpModule():\n    import http.client\n"
        "json.decoder._CONSTANTS['NaN'] = 0\nET.register_namespace('a', 'b')\n"
    )
    names = runner_globals.named_standard_modules(ast.parse(source))
    for expected in ("json", "json.decoder", "unittest", "unittest.mock", "xml.etree.ElementTree", "http.client"):
        assert expected in names, (expected, names)
    assert not any(name.startswith("numpy") for name in names)


# --- the tests' own changes to the trusted runner's limits and scheduling --------------------------------------------
# The runner checks its own limits and scheduling after each job: only the model's code could have changed them, so a
# change was scored as the model's failure. But hidden tests may set their own process's limits (a memory cap around
# a call, a descriptor limit) or priority, as they would in one process: every rollout, a right answer too, scored 0
# ("the sandbox's trusted side was disturbed during the job"). What the tests themselves set is theirs: the verdict
# stands, and the runner is replaced before the next job.
OWN_STATE = {
    "niceness": "import os\nos.nice(1)\n",
    "a priority set by setpriority": (
        "import os\nos.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + 1)\n"
    ),
    "the address-space limit": (
        "import resource\nsoft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
        "resource.setrlimit(resource.RLIMIT_AS, ((900 << 20) if hard < 0 or hard > (900 << 20) else hard, hard))\n"
    ),
    "the descriptor limit, in a fixture": (
        "import resource\ndef setUpModule():\n    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "    resource.setrlimit(resource.RLIMIT_NOFILE, (soft - 1, hard))\n"
    ),
    "the CPU limit, by prlimit": (
        "import resource\nsoft, hard = resource.prlimit(0, resource.RLIMIT_CPU)\n"
        "resource.prlimit(0, resource.RLIMIT_CPU, (3600 if hard < 0 else hard, hard))\n"
    ),
}


@pytest.mark.parametrize("case", sorted(OWN_STATE))
def test_limits_the_tests_set_on_their_own_process_are_theirs(worker, case):
    top = OWN_STATE[case]
    right = thirtyone._run(worker, "right", IDENTITY, top + HEADER + BODY, entry_point="f")
    assert right.status is ExecutionStatus.PASSED, (right.status, right.reason)
    wrong = thirtyone._run(worker, "wrong", "def f(n):\n    return n + 1\n", top + HEADER + BODY, entry_point="f")
    assert wrong.status is ExecutionStatus.FAILED, (wrong.status, wrong.reason)
    assert "disturbed" not in (wrong.reason or ""), wrong.reason
    after = thirtyone._run(worker, "after", IDENTITY, HEADER + BODY, entry_point="f")
    assert after.status is ExecutionStatus.PASSED, (after.status, after.reason)


# --- more of the runner's process that one job's tests leave to the next ---------------------------------------------
# Each: what the first task's tests do, and a check at the second task's module level that holds in a fresh
# interpreter. A process the tests start outlives their job (it wrote a file the next job's tests read back); a
# thread trace or profile function set with threading's setters ran in every later job's threads; a faulthandler
# signal registration and a reconfigured standard stream (``errors``, ``encoding``) lasted for every later
# job (an ``ascii`` stdout made a later task's ``print('é')`` raise), and so did a signal wakeup descriptor (at the
# next signal, a later job's SIGALRM timeout, the interpreter writes a byte to that number, which a later job's own
# descriptors reuse).
# (the started process writes 3 s in, well after its job ends even on a loaded machine: at 0.4 s, a first job slowed
# past that by load saw the file written within its own run, which the check then read as a process outliving it)
PROCESS_LEFT = {
    "a process the tests started": (
        "import subprocess\nsubprocess.Popen(['/bin/sh', '-c', 'sleep 3; echo 41 > /tmp/rp37-late'])\n",
        "import os, time\ntime.sleep(4)\nassert not os.path.exists('/tmp/rp37-late')\n",
    ),
    "a process the tests forked": (
        "import os, time\nif os.fork() == 0:\n    time.sleep(3)\n    open('/tmp/rp37-forked', 'w').close()\n"
        "    os._exit(0)\n",
        "import os, time\ntime.sleep(4)\nassert not os.path.exists('/tmp/rp37-forked')\n",
    ),
    "threading's trace function": (
        "import threading\nthreading.settrace(lambda *args: None)\n",
        "import threading\nassert threading._trace_hook is None\n",
    ),
    "threading's profile function": (
        "import threading\nthreading.setprofile(lambda *args: None)\n",
        "import threading\nassert threading._profile_hook is None\n",
    ),
    "a faulthandler signal": (
        "import faulthandler, signal\nfaulthandler.register(signal.SIGUSR1)\n",
        "import faulthandler, signal\nassert not faulthandler.unregister(signal.SIGUSR1)\n",
    ),
    "a signal wakeup descriptor": (  # (closed: its number is the next job's, maybe its channel's, at a signal)
        "import os, signal\nr, w = os.pipe()\nos.set_blocking(w, False)\nsignal.set_wakeup_fd(w)\n"
        "os.close(r)\nos.close(w)\n",
        "import signal\nassert signal.set_wakeup_fd(-1) == -1\n",
    ),
    "a reconfigured stdout": (
        "import sys\nsys.stdout.reconfigure(encoding='ascii', errors='strict')\n",
        "print('\\u00e9')\n",
    ),
}


@pytest.mark.parametrize("case", sorted(PROCESS_LEFT))
def test_what_a_jobs_tests_leave_in_the_runners_process_is_gone_for_the_next_job(worker, case):
    # (names of this test's own under /tmp: on Lambda's mode that is this host's, shared with the suite's other
    # process, whose run of the same case would otherwise remove or write them mid-job)
    prefix = f"/tmp/rp37-{secrets.token_hex(6)}-"
    first_top, check = (part.replace("/tmp/rp37-", prefix) for part in PROCESS_LEFT[case])
    try:
        _passes_after(worker, first_top, check)
    finally:
        for name in ("late", "forked"):
            with contextlib.suppress(OSError):
                os.unlink(prefix + name)


def test_objects_the_tests_freeze_from_the_collector_have_the_runner_replaced():
    # (the runner starts with the fork server's frozen objects, so a later job cannot tell them apart: asked here)
    import atexit
    import gc
    import threading

    from rewardpipe.execution.runtime import runner_globals

    # (only what unrestorable() reads: a whole Baseline would watch every module of this test process)
    baseline = runner_globals.Baseline.__new__(runner_globals.Baseline)
    baseline.threads, baseline.descriptors = threading.active_count(), runner_globals._open_descriptors()
    baseline.exit_callbacks, baseline.audit_hook_added = atexit._ncallbacks(), False
    original = gc.freeze
    runner_globals.note_gc_freeze()  # (as the runner has it: its gc.freeze notes the call)
    try:
        assert "objects its tests froze from the collector" not in baseline.unrestorable()
        gc.freeze()
        assert "objects its tests froze from the collector" in baseline.unrestorable()
        assert "objects its tests froze from the collector" not in baseline.unrestorable()  # (said for its job only)
    finally:
        gc.freeze = original
        gc.unfreeze()


def test_a_monitoring_tool_the_tests_register_is_gone_for_the_next_job_on_python_3_13():
    # sys.monitoring (3.12+; the Lambda functions run 3.13): a tool id the tests took, with its events and callback,
    # lasted for every later job of the runner (its PY_START callback ran on each of their calls).
    from tests.execution.test_python313 import _python313

    executor = make_executor(workers=1, interpreter=_python313())
    try:
        taking = (
            "import sys\nm = sys.monitoring\nm.use_tool_id(4, 'rp')\nm.set_events(4, m.events.PY_START)\n"
            "m.register_callback(4, m.events.PY_START, lambda *args: None)\n"
        )
        _passes_after(executor, taking, "import sys\nassert sys.monitoring.get_tool(4) is None\n")
        _passes_after(executor, taking, "import sys\nassert sys.monitoring.get_events(4) == 0\n")
    finally:
        executor.close()
