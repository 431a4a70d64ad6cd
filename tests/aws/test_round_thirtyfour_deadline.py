"""Round thirty-four: the single-turn reward's deadline on the main thread survives the component's own timers."""

import contextlib

from tests.aws.test_round_thirtythree_nova import TestTheMainThreadsCallIsStoppedInPlace as _Stopped
from tests.aws.test_round_thirtythree_nova import _sample


class TestTheDeadlineOutlivesTheComponentsOwnTimer:
    """Round thirty-four. The deadline was the interval timer (SIGALRM) a component's own timeouts share: the shape
    of ``math_verify``'s (a handler of its own, ``signal.alarm(n)``, then ``alarm(0)`` and the old handler put back)
    cancelled it, so a component that went on to hang after one such call was never stopped. The deadline now comes
    from a signal of its own, sent by a watching thread, which the component's timer cannot cancel."""

    @staticmethod
    def _timed_then_spins(seconds_spinning):
        import signal
        import time

        from rewardpipe import component

        @component(range=(0, 1), role="outcome", name="verified")
        def verified(completion):
            def too_slow(signum, frame):
                raise TimeoutError

            previous = signal.signal(signal.SIGALRM, too_slow)
            signal.alarm(5)
            try:
                parsed = "42" in completion
            finally:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, previous)
            started = time.monotonic()
            while "hang" in completion and time.monotonic() - started < seconds_spinning:
                sum(range(1000))
            return 1.0 if parsed else 0.0

        return verified

    def test_a_component_that_used_its_own_timer_and_then_hangs_is_stopped(self):
        # 5 s for the batch is for the right answer first on a loaded machine (1 s was a budget its scheduling alone
        # could spend); the hung call spins 60 s, stopped at the deadline or failing the test.
        results = _Stopped._score(
            self._timed_then_spins(60), [_sample("ok", "42"), _sample("stuck", "42 hang"), _sample("no", "41")], 5
        )
        flags = [_Stopped._flags(r) for r in results]
        assert flags[0] == set() and results[0]["aggregate_reward_score"] == 1.0
        assert flags[1] == {"error_component_timeout"}, results[1]

    def test_a_component_using_its_own_interval_timer_keeps_it(self):
        """The component's own ``setitimer`` fires into its own handler as it would unbounded."""
        import signal

        from rewardpipe import component

        @component(range=(0, 1), role="outcome", name="own_timer")
        def own_timer(completion):
            fired = []
            previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
            signal.setitimer(signal.ITIMER_REAL, 0.01)
            try:
                import time

                started = time.monotonic()
                while not fired and time.monotonic() - started < 5:
                    sum(range(1000))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
            return 1.0 if fired else 0.0

        results = _Stopped._score(own_timer, [_sample("a", "x")], 30)
        assert results[0]["aggregate_reward_score"] == 1.0, results

    def test_no_stop_lands_after_the_call_returned(self):
        """A call that ends as its deadline passes: nothing is raised later into the caller's code."""
        import time

        from rewardpipe.bounded import call_on_main_thread_until

        for seconds in (0.001, 0.002, 0.005):
            for _ in range(20):
                with contextlib.suppress(TimeoutError):
                    call_on_main_thread_until(lambda: sum(range(20000)), (), seconds, lambda n: TimeoutError())
                started = time.monotonic()
                while time.monotonic() - started < 0.003:  # a stop landing here would fail the test
                    sum(range(100))
