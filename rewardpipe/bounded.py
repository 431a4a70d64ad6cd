"""User code called with a time limit: a reward component's ``timeout_s``, an environment's ``hook_timeout_s``.

Python cannot stop a thread, so a bounded call runs in a daemon thread of its own and the caller waits for it up
to the limit. A call still running then is *abandoned*: the caller gets the caller's own timeout exception (its
rollout or sample becomes an error record) while the call goes on in the background until it returns or the
process ends. A function that hangs on every input would otherwise leave one more thread behind per call, so
past ``max_abandoned`` calls still running the next call fails at once, with no thread and no wait.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

MAX_ABANDONED_CALLS = 32  # calls of one function still running past their limit before the next is refused


class AbandonedCalls:
    """The calls of one function (one component, one environment hook) that passed their limit, perhaps still
    running; :meth:`call` runs one more under the limit. ``max_abandoned`` defaults to this module's
    ``MAX_ABANDONED_CALLS`` as it is at each call."""

    def __init__(self, thread_name: str, max_abandoned: int | None = None) -> None:
        self.thread_name = thread_name
        self.max_abandoned = max_abandoned
        self._running: list[threading.Thread] = []
        self._lock = threading.Lock()

    def still_running(self) -> int:
        with self._lock:
            self._running[:] = [thread for thread in self._running if thread.is_alive()]
            return len(self._running)

    def call(
        self,
        function: Callable[..., Any],
        args: tuple,
        kwargs: dict[str, Any],
        timeout_s: float,
        timed_out: Callable[[int], BaseException],
    ) -> Any:
        """``function(*args, **kwargs)`` if it returns (or raises) within ``timeout_s``; else raises
        ``timed_out(0)``. With ``max_abandoned`` earlier calls still running, raises ``timed_out(n)`` (``n`` of
        them) without calling. The call runs in a copy of the caller's context (its context variables)."""
        still_running = self.still_running()
        cap = MAX_ABANDONED_CALLS if self.max_abandoned is None else self.max_abandoned
        if still_running >= cap:  # hung on every input: no thread, no wait, without end
            raise timed_out(still_running)
        outcome: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                outcome.append((True, function(*args, **kwargs)))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread as it is
                outcome.append((False, exc))

        context = contextvars.copy_context()
        worker = threading.Thread(target=context.run, args=(run,), name=self.thread_name, daemon=True)
        worker.start()
        worker.join(timeout_s)
        if not outcome:
            with self._lock:
                self._running.append(worker)
            raise timed_out(0)
        returned, value = outcome[0]
        if returned:
            return value
        raise value
