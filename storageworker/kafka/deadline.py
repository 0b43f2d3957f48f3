"""One timer per connection for the reads' timeouts of :mod:`.server`.

A connection waits for the next request under ``idle_timeout_ms`` and for the rest of a request
under ``request_timeout_ms``. ``asyncio.timeout`` around each of the two reads scheduled and
cancelled two timer handles per request (about 17 us of the event loop's time a request of
the Java producer, 5% of its whole cost); here a read only sets the time it must end by, and a
single timer checks it, re-armed from its own callback.

What it must not do: cancel the connection's task anywhere but inside a read (the deadline is
cleared when the read returns, and the check does nothing without one), or fire late.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final, Protocol

#: The shortest period of the checks: a timeout under it (0 ms, which no one means) may fire up
#: to that late, instead of the check running on every turn of the loop.
PERIOD_MIN_S: Final = 0.001


class Timers(Protocol):
    """What the deadline needs from its event loop."""

    def time(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], object], /) -> asyncio.TimerHandle: ...


class ReadDeadline:
    """Cancels ``task`` when a read armed with :meth:`arm` has not returned in time;
    :attr:`expired` then tells the task that the cancellation is a timeout."""

    def __init__(self, loop: Timers, task: asyncio.Task[object] | None, period_s: float) -> None:
        self._loop = loop
        self._task = task
        #: The shortest timeout that :meth:`arm` is called with (or a shorter one).
        self._period_s = max(period_s, PERIOD_MIN_S)
        #: When the current read must have returned (loop time); None outside reads.
        self.at: float | None = None
        self.expired = False
        # Invariant: a pending check runs at most ``period_s`` after it was scheduled, and no
        # later than the ``at`` it was scheduled for; so it runs no later than any ``at`` set
        # since, each of which is at least ``period_s`` from its arm() (never a late timeout).
        self._check_handle: asyncio.TimerHandle | None = None

    def arm(self, timeout_s: float) -> None:
        """The read about to start must return within ``timeout_s`` (>= ``period_s``)."""
        now = self._loop.time()
        self.at = now + timeout_s
        if self._check_handle is None:
            self._schedule(now)

    def disarm(self) -> None:
        """The read returned."""
        self.at = None

    def close(self) -> None:
        self.at = None
        if self._check_handle is not None:
            self._check_handle.cancel()
            self._check_handle = None

    def _schedule(self, now: float) -> None:
        assert self.at is not None
        when = min(self.at, now + self._period_s)
        self._check_handle = self._loop.call_at(when, self._check)

    def _check(self) -> None:
        self._check_handle = None
        if self.at is None:
            return  # between reads: the next arm() schedules the next check
        now = self._loop.time()
        if now < self.at:
            self._schedule(now)
            return
        self.expired = True
        if self._task is not None:
            self._task.cancel()
