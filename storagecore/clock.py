"""Time, injected: every storagecore decision that depends on "now" asks a Clock.

Tests of rolls, retention, lag and horizons pass a :class:`ManualClock` and never sleep.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int:
        """Wall-clock time in epoch milliseconds (what record timestamps are compared with)."""
        ...


class SystemClock:
    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms

    def milliseconds(self) -> int:
        return self._now_ms

    def advance(self, delta_ms: int) -> None:
        assert delta_ms >= 0, "time does not go backwards"
        self._now_ms += delta_ms

    def set(self, now_ms: int) -> None:
        self._now_ms = now_ms


class ScaledClock:
    """Wall-clock time that runs ``speed`` times faster from the moment it is made (the demo
    shows hours of retention and compaction lag in seconds). ``speed`` also tells schedulers
    how much real time a clock interval takes."""

    def __init__(self, speed: float, start_ms: int | None = None) -> None:
        assert speed > 0, "a clock must move forwards"
        self.speed = speed
        self._start_ms = time.time_ns() // 1_000_000 if start_ms is None else start_ms
        self._origin_s = time.monotonic()

    def milliseconds(self) -> int:
        return self._start_ms + int((time.monotonic() - self._origin_s) * 1000 * self.speed)
