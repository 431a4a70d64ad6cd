"""User code called with a time limit: a reward component's ``timeout_s``, an environment's ``hook_timeout_s``.

Python cannot stop a thread, so a bounded call runs in a daemon thread of its own and the caller waits for it up
to the limit. A call still running then is *abandoned*: the caller gets the caller's own timeout exception (its
rollout or sample becomes an error record) while the call goes on in the background until it returns or the
process ends. A function that hangs on every input would otherwise leave one more thread behind per call, so
past ``max_abandoned`` calls still running the next call fails at once, with no thread and no wait.

On the main thread (a Lambda handler's) a call can instead be stopped in place (:func:`call_on_main_thread_until`):
a kernel timer (a watching thread where there is none) sends the main thread a signal of rewardpipe's own at the limit,
and nothing is left running; a call stuck in one C call that checks for signals (a regex backtracking) is stopped too.
"""

from __future__ import annotations

import contextvars
import math
import numbers
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

MAX_ABANDONED_CALLS = 32  # calls of one function still running past their limit before the next is refused


def real_number(value: Any) -> float | None:
    """``value`` as a float when it is a real number: Python's, numpy's (``numpy.float32(0.5)``,
    ``numpy.int64(2)``: what a weight or a limit computed with numpy is), a Fraction or a Decimal; None for
    anything else, booleans included. Only Python's int and float (and numpy.float64, a float) were taken, so a
    user's finite numpy weight was refused as "must be a finite number"."""
    kind = type(value)
    if isinstance(value, bool) or (kind.__module__ == "numpy" and kind.__name__ in ("bool_", "bool")):
        return None
    if isinstance(value, (numbers.Real, Decimal)):
        try:
            return float(value)
        except (ArithmeticError, ValueError):  # a signalling NaN Decimal
            return None
    return None


def limit_problem(timeout_s: Any, field: str) -> str | None:
    """What is wrong with a time limit a user declared as ``field`` (None when it is fit: None, or seconds
    above 0)."""
    if timeout_s is None:
        return None
    seconds = real_number(timeout_s)
    if seconds is None or not 0 < seconds < math.inf:
        return f"{field} must be a number of seconds above 0 (or None), got {timeout_s!r}"
    return None


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

    def refused(self) -> int:
        """How many calls are still running past their limit when they are enough to refuse the next call (it
        would hang like them: no thread, no wait, without end), else 0."""
        still_running = self.still_running()
        cap = MAX_ABANDONED_CALLS if self.max_abandoned is None else self.max_abandoned
        return still_running if still_running >= cap else 0

    def abandon(self, thread: threading.Thread) -> None:
        """Count ``thread`` (a call past its limit, left running) until it ends."""
        with self._lock:
            self._running.append(thread)

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
        still_running = self.refused()
        if still_running:
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
            self.abandon(worker)
            raise timed_out(0)
        returned, value = outcome[0]
        if returned:
            return value
        raise value


class DeadlineReached(KeyboardInterrupt):
    """Raised into the main thread's call at its deadline (:func:`call_on_main_thread_until`). A KeyboardInterrupt,
    because that is what every catch-all of rewardpipe (a component's failure is its sample's error) and of most
    user code lets through: the call is stopped, not turned into a component's failure."""


_RETRY_S = 0.05  # the stop is sent again this often past the deadline until the call is out of the called code

#: The signal that carries the stop into the main thread: a real-time one nobody else's code uses. SIGALRM was used
#: before, through the interval timer, which the called code shares: a component's own ``signal.alarm(0)`` (the end
#: of every ``math_verify`` timeout) cancelled the deadline, and nothing stopped it if it hung afterwards.
_STOP_SIGNAL: int | None = signal.SIGRTMAX - 2 if hasattr(signal, "SIGRTMAX") else None


class _MainThreadCall:
    """The one call of the main thread under a deadline, if any: ``active`` from just before the called code runs to
    just after it ends, so a stop sent before or after is ignored."""

    __slots__ = ("active", "deadline")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.active = False


class _KernelTimer:
    """A POSIX timer (``timer_create``) that has the kernel send :data:`_STOP_SIGNAL` to the main thread at a
    ``time.monotonic()`` deadline, then every :data:`_RETRY_S` until disarmed.

    The kernel sends it, so it arrives even while the main thread holds the interpreter lock inside one C call: a
    regular expression backtracking, big-integer arithmetic (``math.factorial(10**8)``, ``str`` of a huge int).
    Those check for signals as they go, so the stop is raised there; but a watching *thread* never got the lock
    back to send it, and the call ran on until Lambda killed the invocation with every sample of its batch. Only
    on Linux (``SIGEV_THREAD_ID`` aims it at the main thread, so a blocking system call there is interrupted as
    ``pthread_kill`` does); elsewhere :meth:`create` gives None and the watching thread sends the stop."""

    _CLOCK_MONOTONIC, _SIGEV_THREAD_ID, _TIMER_ABSTIME = 1, 4, 1

    def __init__(self, settime: Any, timer_id: Any, timespec: Any, itimerspec: Any) -> None:
        self._settime, self._id, self._timespec, self._itimerspec = settime, timer_id, timespec, itimerspec

    @classmethod
    def create(cls) -> _KernelTimer | None:
        """A timer aimed at the calling thread (the main one); None where there is none (not Linux, no
        ``timer_create``)."""
        import ctypes
        import sys

        if not sys.platform.startswith("linux") or _STOP_SIGNAL is None or ctypes.sizeof(ctypes.c_void_p) != 8:
            return None

        class Timespec(ctypes.Structure):
            _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

        class Itimerspec(ctypes.Structure):
            _fields_ = [("it_interval", Timespec), ("it_value", Timespec)]

        class Sigevent(ctypes.Structure):  # glibc's struct sigevent on 64-bit Linux: 64 bytes
            _fields_ = [
                ("sigev_value", ctypes.c_void_p),
                ("sigev_signo", ctypes.c_int),
                ("sigev_notify", ctypes.c_int),
                ("sigev_notify_thread_id", ctypes.c_int),
                ("_pad", ctypes.c_int * 11),
            ]

        # Made from the main thread (a bounded call's): its id, which ``main_thread().native_id`` still gives as the
        # parent's in a forked child on Python 3.11.
        main = threading.get_native_id()
        for library in (None, "librt.so.1"):  # in libc since glibc 2.34, in librt before
            try:
                libc = ctypes.CDLL(library, use_errno=True)
                create, settime = libc.timer_create, libc.timer_settime
            except (OSError, AttributeError):
                continue
            event = Sigevent(sigev_signo=_STOP_SIGNAL, sigev_notify=cls._SIGEV_THREAD_ID, sigev_notify_thread_id=main)
            timer_id = ctypes.c_void_p()
            if create(cls._CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer_id)) != 0:
                return None
            return cls(settime, timer_id, Timespec, Itimerspec)
        return None

    def arm(self, deadline: float) -> None:
        """Fire at ``deadline`` (a ``time.monotonic()`` value: the same clock), then every :data:`_RETRY_S`."""
        whole = math.floor(deadline)
        when = self._itimerspec(
            self._timespec(0, int(_RETRY_S * 1e9)), self._timespec(max(whole, 0), int((deadline - whole) * 1e9))
        )
        self._settime(self._id, self._TIMER_ABSTIME, _byref(when), None)

    def disarm(self) -> None:
        self._settime(self._id, 0, _byref(self._itimerspec()), None)


def _byref(value: Any) -> Any:
    import ctypes

    return ctypes.byref(value)


class _Watch:
    """Sends :data:`_STOP_SIGNAL` to the main thread while its current call is past its deadline: by a kernel timer
    (:class:`_KernelTimer`) where there is one, else by a daemon thread. One for the process (made again in a
    forked child: neither a thread nor a timer is inherited), so a bounded call costs two ``timer_settime`` calls
    (or two notifications), not a thread."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.current: _MainThreadCall | None = None
        self.thread: threading.Thread | None = None
        self.timer: _KernelTimer | bool | None = False  # False: not made yet (made in the main thread, at first use)

    def watch(self, call: _MainThreadCall) -> None:
        if self.timer is False:
            self.timer = _KernelTimer.create()
        if isinstance(self.timer, _KernelTimer):
            self.current = call
            self.timer.arm(call.deadline)
            return
        with self.condition:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="rewardpipe-deadline", daemon=True)
                self.thread.start()
            self.current = call
            self.condition.notify()

    def forget(self, call: _MainThreadCall) -> None:
        if isinstance(self.timer, _KernelTimer):
            if self.current is call:
                self.timer.disarm()
                self.current = None
            return
        with self.condition:
            if self.current is call:
                self.current = None
                self.condition.notify()

    def _run(self) -> None:
        main = threading.main_thread().ident
        with self.condition:
            while True:
                call = self.current
                if call is None:
                    self.condition.wait()
                    continue
                left = call.deadline - time.monotonic()
                if left > 0:
                    self.condition.wait(left)
                    continue
                if call.active and main is not None and _STOP_SIGNAL is not None:
                    signal.pthread_kill(main, _STOP_SIGNAL)  # under the lock: the call cannot be forgotten meanwhile
                self.condition.wait(_RETRY_S)


_WATCH = _Watch()


def _after_fork_in_child() -> None:
    global _WATCH
    _WATCH = _Watch()  # the parent's thread and timer are not in the child, and its lock may have been held at the fork


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def main_thread_call_stoppable() -> bool:
    """Whether :func:`call_on_main_thread_until` can stop a call here: this is the main thread, the platform has the
    real-time signal it sends, and no other code took that signal."""
    if _STOP_SIGNAL is None or threading.current_thread() is not threading.main_thread():
        return False
    return signal.getsignal(_STOP_SIGNAL) in (signal.SIG_DFL, signal.SIG_IGN, _interrupt)


def call_on_main_thread_until(
    function: Callable[..., Any], args: tuple, timeout_s: float, timed_out: Callable[[int], BaseException]
) -> Any:
    """``function(*args)`` in this thread (the main one, see :func:`main_thread_call_stoppable`), stopped after
    ``timeout_s`` with ``timed_out(0)``. Unlike :meth:`AbandonedCalls.call` nothing is left running, and the called
    code may use ``signal`` itself, its own timers included (``math_verify``'s timeouts set SIGALRM handlers, which
    raise in any other thread): the stop is a signal of its own, sent by a kernel timer (:class:`_KernelTimer`). So
    one long C call that checks for signals (a regex backtracking, big-integer arithmetic) is stopped too; one that
    never does (a C extension's own loop), or any code running in another thread that holds the interpreter lock,
    is not (docs/aws.md).

    Called within such a call (a component's ``timeout_s`` inside the batch's deadline), the inner call is stopped
    at the earlier of the two deadlines: at its own with ``timed_out(0)``, at the outer one by letting the stop go
    on to the outer call, which answers it with its own ``timed_out``; the outer deadline is watched again after."""
    if timeout_s <= 0:
        raise timed_out(0)
    assert _STOP_SIGNAL is not None
    # Left in place after the call: a stop sent as the call ended may arrive later, and the signal's default
    # action would end the process. Past the call the handler ignores it.
    signal.signal(_STOP_SIGNAL, _interrupt)
    watch = _WATCH
    outer = main_thread_deadline()
    own_deadline = time.monotonic() + timeout_s
    call = _MainThreadCall(own_deadline if outer is None else min(own_deadline, outer.deadline))
    watch.watch(call)
    try:
        call.active = True
        return function(*args)
    except DeadlineReached:
        if outer is not None and outer.deadline < own_deadline and time.monotonic() >= outer.deadline:
            raise  # the outer call's time is up, not this one's: it is that call's timeout
        raise timed_out(0) from None
    finally:
        call.active = False
        watch.forget(call)
        if outer is not None:
            watch.watch(outer)


def main_thread_deadline() -> _MainThreadCall | None:
    """The call of the main thread running under :func:`call_on_main_thread_until` that this code runs within, if
    any (None off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    call = _WATCH.current
    return call if call is not None and call.active else None


def _interrupt(_signum: int, frame: Any) -> None:
    call = _WATCH.current
    if call is None or not call.active:
        return  # sent as the call ended: nothing to stop
    # Landing in this module's own frame (just before or after the called code), it waits for the next stop:
    # raised there, it would escape the call's handler.
    if frame is not None and frame.f_code is _OWN_CODE:
        return
    raise DeadlineReached


_OWN_CODE = call_on_main_thread_until.__code__


class LoopBlocked(Exception):
    """A coroutine held its event loop past its own time limit (a blocking call, ``time.sleep`` or a synchronous
    HTTP request, inside ``async def``): no deadline can fire on a loop that never gets control back, so the
    loop is abandoned with it (``thread``) and the other coroutines go on without it."""

    def __init__(self, limit_s: float, thread: threading.Thread | None = None) -> None:
        super().__init__(f"held the event loop past {limit_s:g} s")
        self.limit_s = limit_s
        self.thread = thread


class _Board:
    """Which coroutine a loop is running a step of, and since when: read from the watching thread."""

    __slots__ = ("current", "only", "since")

    def __init__(self) -> None:
        self.current: int | None = None
        self.since = 0.0
        self.only: int | None = None  # set when the loop is left to one coroutine: the others' steps are not run


class _Tracked:
    """Awaits a coroutine one step at a time, writing each step's start on the board (a step that never gives
    the loop back is then visible from another thread). Values and exceptions pass through as they are."""

    __slots__ = ("board", "coroutine", "index")

    def __init__(self, coroutine: Any, index: int, board: _Board) -> None:
        self.coroutine = coroutine
        self.index = index
        self.board = board

    def __await__(self) -> Any:
        board, index, send, throw = self.board, self.index, self.coroutine.send, self.coroutine.throw
        value: Any = None
        error: BaseException | None = None
        while True:
            if board.only is not None and board.only != index and error is None:
                # The loop is left to one coroutine and this one is made again elsewhere: a step of it now (a
                # wake-up queued before the cancellation) could block the loop that coroutine's result waits on.
                import asyncio

                value, error = None, asyncio.CancelledError()
            board.since = time.monotonic()
            board.current = index
            try:
                yielded = send(value) if error is None else throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                board.current = None
            try:
                value, error = (yield yielded), None
            except BaseException as exc:  # noqa: BLE001 - the loop's (cancellation): handed to the coroutine
                value, error = None, exc


_UNSET = object()

# The coroutine (by index) a task on a watched loop works for: set by each coroutine's own task, inherited by the
# tasks it starts (a task runs in a copy of its creator's context).
_WATCHED_INDEX: contextvars.ContextVar[int | None] = contextvars.ContextVar("rewardpipe_watched_index", default=None)


async def _tracked_task(coroutine: Any, index: int, board: _Board) -> Any:
    return await _Tracked(coroutine, index, board)


def run_watched(
    coroutines: Sequence[Any],
    limits: Sequence[float | None],
    remake: Callable[[int], Any] | None = None,
    poll_s: float = 0.02,
) -> list[Any]:
    """Await ``coroutines`` together on an event loop of their own, in a thread of their own; each result, or
    the exception it raised, in order. A coroutine with a limit in ``limits`` that holds the loop in one step
    for longer than its limit gets :class:`LoopBlocked`: that loop is abandoned (the others' tasks on it are
    cancelled for when it comes back) and the coroutines it had not finished are made again with
    ``remake(index)`` and awaited on a new loop (without ``remake`` they get :class:`LoopBlocked` too). One
    without a limit that holds the loop past the limit of another still running is waited for, on its loop,
    while the others (cancelled there) are made again on a new loop: its blocking is not their timeout."""
    results: list[Any] = [_UNSET] * len(coroutines)
    todo: dict[int, Any] = dict(enumerate(coroutines))
    waited: list[tuple[int, _Waited]] = []  # coroutines without a limit, each still running on a loop of its own
    while todo:
        finished, culprit, thread, left_running = _run_until_blocked(todo, limits, poll_s, remake is not None)
        for index, outcome in finished.items():
            results[index] = outcome
        if culprit is None:
            break
        if left_running is not None:
            waited.append((culprit, left_running))
            assert remake is not None  # only then is a coroutine without a limit left running
            todo = {index: remake(index) for index in todo if results[index] is _UNSET and index != culprit}
            continue
        limit = limits[culprit]
        assert limit is not None  # only a coroutine with a limit is ever found blocking
        results[culprit] = LoopBlocked(limit, thread)
        left = [index for index in todo if results[index] is _UNSET]
        if remake is None:
            for index in left:
                results[index] = LoopBlocked(limit)
            break
        todo = {index: remake(index) for index in left}
    for index, running in waited:
        running.done.wait()
        results[index] = running.finished.get(index, _UNSET)
        if results[index] is _UNSET:  # its loop ended without its result (it cannot, short of the loop failing)
            results[index] = RuntimeError("its event loop ended before it did")
    return results


class _Waited:
    """A loop left running for one coroutine without a limit: its results and when it is done."""

    __slots__ = ("done", "finished")

    def __init__(self, finished: dict[int, Any], done: threading.Event) -> None:
        self.finished = finished
        self.done = done


def _run_until_blocked(
    coroutines: dict[int, Any], limits: Sequence[float | None], poll_s: float, move_others: bool
) -> tuple[dict[int, Any], int | None, threading.Thread, _Waited | None]:
    """Run ``coroutines`` on a new loop in a daemon thread until all are done (culprit None) or one holds the
    loop past its limit (that index). Returns what finished before, the culprit and the loop's thread. With
    ``move_others``, one without a limit holding the loop past the limit of another still running is the
    culprit too, left running on its loop (the :class:`_Waited` returned) while the others there are cancelled."""
    import asyncio

    board = _Board()
    finished: dict[int, Any] = {}
    runner = asyncio.Runner()
    tasks: list[Any] = []
    done = threading.Event()

    async def one(index: int, coroutine: Any) -> None:
        _WATCHED_INDEX.set(index)  # this task's own context: the tasks the coroutine starts inherit it
        try:
            finished[index] = await _Tracked(coroutine, index, board)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - that coroutine's failure, kept as its result
            finished[index] = exc

    def task_factory(loop: Any, coroutine: Any, **kwargs: Any) -> Any:
        # A task a coroutine starts (asyncio.gather, create_task, a TaskGroup) runs its steps outside the
        # coroutine's own: tracked too, on behalf of the coroutine that started it, or a blocking call in it
        # would hold the loop unseen (and every other coroutine on it past its own deadline).
        index = _WATCHED_INDEX.get()
        if index is not None and asyncio.iscoroutine(coroutine):
            coroutine = _tracked_task(coroutine, index, board)
        return asyncio.Task(coroutine, loop=loop, **kwargs)

    async def main() -> None:
        asyncio.get_running_loop().set_task_factory(task_factory)
        tasks.extend(asyncio.ensure_future(one(index, coroutine)) for index, coroutine in coroutines.items())
        await asyncio.gather(*tasks, return_exceptions=True)

    def run() -> None:
        try:
            runner.run(main())
        finally:
            # Every result is in: the caller takes them now. Closing the loop waits for its executor's threads,
            # an ``asyncio.to_thread`` call that a deadline cancelled but that still runs among them: that wait
            # is this thread's, never the batch's.
            done.set()
            runner.close()

    thread = threading.Thread(target=contextvars.copy_context().run, args=(run,), daemon=True)
    thread.name = "rewardpipe-async-components"
    thread.start()
    order = list(coroutines)  # tasks[i] awaits coroutine order[i]
    while not done.wait(poll_s):
        index, since = board.current, board.since
        if index is None:
            continue
        held = time.monotonic() - since
        limit = limits[index]
        if limit is not None and held > limit:
            snapshot = dict(finished)  # what the abandoned loop writes from now on is not taken

            def cancel_the_rest() -> None:
                for task in tasks:
                    task.cancel()

            runner.get_loop().call_soon_threadsafe(cancel_the_rest)
            snapshot.pop(index, None)
            return snapshot, index, thread, None
        if limit is None and move_others:
            # Unbounded, it may take its time, but not the others' deadlines: theirs would pass while it holds
            # the loop, and every one of them would be a timeout it caused.
            snapshot = dict(finished)
            pending = [other for i in order if i != index and i not in snapshot and (other := limits[i]) is not None]
            if pending and held > min(pending):

                def cancel_the_others(keep: int = order.index(index)) -> None:
                    for position, task in enumerate(tasks):
                        if position != keep:
                            task.cancel()

                board.only = index
                runner.get_loop().call_soon_threadsafe(cancel_the_others)
                return snapshot, index, thread, _Waited(finished, done)
    return finished, None, thread, None
