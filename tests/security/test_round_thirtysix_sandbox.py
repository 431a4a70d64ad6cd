"""Round thirty-six, the sandbox: the Lambda/Fargate mode and the trusted runner's state.

* **The model's KeyboardInterrupt and GeneratorExit.** Since round thirty-five they arrive in the trusted runner as
  ``harness.ModelBaseException`` (no ``except Exception`` catches them, as in one process), but only ``SystemExit`` kept
  its class: a right answer that raises ``KeyboardInterrupt`` (or ``GeneratorExit``) on purpose **failed** tests
  doing ``with self.assertRaises(KeyboardInterrupt): f()``, which pass in one process. Each now arrives as a subclass
  of both; uncaught, it still ends the run, the model's failure.
"""

from __future__ import annotations

import pytest

from rewardpipe.execution import ExecutionStatus
from tests.security import test_round_thirtyfive_c_sandbox as thirtyfive_c
from tests.security import test_round_thirtyone_sandbox as thirtyone

executor = thirtyone.executor

HEADER = "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n"
RAISING = {
    "KeyboardInterrupt": "def f(x):\n    if x < 0:\n        raise KeyboardInterrupt('stop')\n    return x * x\n",
    "GeneratorExit": "def f(x):\n    if x < 0:\n        raise GeneratorExit('stop')\n    return x * x\n",
    "its own KeyboardInterrupt subclass": (
        "class Stop(KeyboardInterrupt):\n    pass\n"
        "def f(x):\n    if x < 0:\n        raise Stop('stop')\n    return x * x\n"
    ),
    "KeyboardInterrupt under another name": (
        "Stop = KeyboardInterrupt\ndef f(x):\n    if x < 0:\n        raise Stop('stop')\n    return x * x\n"
    ),
}


def _expecting(kind: str) -> str:
    return (
        HEADER + f"        with self.assertRaises({kind}):\n            f(-1)\n"
        f"        try:\n            f(-2)\n        except {kind}:\n            pass\n"
        "        else:\n            self.fail('nothing raised')\n        self.assertEqual(f(3), 9)\n"
    )


@pytest.mark.parametrize("case", sorted(RAISING))
def test_a_right_answer_raising_a_base_exception_passes_tests_expecting_it(executor, case):
    code = RAISING[case]
    kind = "GeneratorExit" if case == "GeneratorExit" else "KeyboardInterrupt"
    tests = _expecting(kind)
    assert thirtyfive_c._passes_in_one_process(code, tests)
    result = thirtyone._run(executor, "raises", code, tests, entry_point="f")
    assert result.status is ExecutionStatus.PASSED, (result.status, result.reason)


@pytest.mark.parametrize("case", sorted(RAISING))
def test_an_answer_raising_the_wrong_one_still_fails(executor, case):
    # (the KeyboardInterrupt answers against a GeneratorExit test and the other way round; and one that raises nothing)
    code = RAISING[case]
    kind = "KeyboardInterrupt" if case == "GeneratorExit" else "GeneratorExit"
    tests = HEADER + f"        with self.assertRaises({kind}):\n            f(-1)\n"
    result = thirtyone._run(executor, "wrong kind", code, tests, entry_point="f")
    assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
    silent = thirtyone._run(executor, "silent", "def f(x):\n    return x * x\n", _expecting("KeyboardInterrupt"), "f")
    assert silent.status is ExecutionStatus.FAILED, (silent.status, silent.reason)


def test_an_uncaught_keyboard_interrupt_ends_the_run_as_the_models_failure(executor):
    tests = HEADER + "        self.assertEqual(f(-1), 1)\n\n    def test_b(self):\n        self.assertEqual(f(2), 4)\n"
    for case in ("KeyboardInterrupt", "KeyboardInterrupt under another name"):
        assert not thirtyfive_c._passes_in_one_process(RAISING[case], tests)
        result = thirtyone._run(executor, "uncaught", RAISING[case], tests, entry_point="f")
        assert result.status is ExecutionStatus.FAILED, (result.status, result.reason)
        assert not result.is_infrastructure_error
    right = thirtyone._run(executor, "after", RAISING["KeyboardInterrupt"], _expecting("KeyboardInterrupt"), "f")
    assert right.status is ExecutionStatus.PASSED, (right.status, right.reason)
