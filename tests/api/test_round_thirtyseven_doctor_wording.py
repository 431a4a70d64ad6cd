"""Round thirty-seven, doctor's word on a hook past ``hook_timeout_s``.

Round thirty-six worded a hung hook like a raising one on every path that records it (``episode.hook_failure``), but
doctor's own finding still began with the platform's class name: ``HookTimeout: environment 'count': start() did not
return within ...``. A user reading doctor's findings saw the one hook failure worded apart from the run's record of
the same hang.
"""

from __future__ import annotations

import threading

import pytest

from rewardpipe.doctor import diagnose
from rewardpipe.runner import NoSandbox
from tests.security.test_round_thirtyone_environments import TASKS, Count

_RELEASE = threading.Event()


@pytest.fixture(scope="module", autouse=True)
def _release_hung_hooks():
    yield
    _RELEASE.set()  # the abandoned calls return and their threads end


class HungStart(Count):
    hook_timeout_s = 0.2

    def start(self, task):
        if task.task_id == "t6":
            _RELEASE.wait(20)
        return super().start(task)


def test_doctor_words_a_hung_hook_as_the_runs_record_does():
    diagnoses = {diagnosis.task_id: diagnosis for diagnosis in diagnose(TASKS, HungStart(), NoSandbox())}
    hung = [text for text in map(str, diagnoses["t6"].problems) if "hook_timeout_s" in text]
    assert hung, diagnoses["t6"].problems
    for text in hung:
        assert "HookTimeout" not in text
        assert "environment 'count': start() did not return within hook_timeout_s=0.2 s" in text
        assert "test_round_thirtyseven_doctor_wording.py:" in text  # where the user's start() is
    assert not any("hook_timeout_s" in str(text) for text in diagnoses["t3"].problems)
