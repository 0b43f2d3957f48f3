"""Kafka's ``Throttler``: the cleaner threads' shared I/O budget
(``log.cleaner.io.max.bytes.per.second``).

Called by :class:`storagecore.cleaner.cleaner.Cleaner` for every byte it reads and writes; it
only sleeps, and never touches a log.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class Throttler:
    """Kafka's ``Throttler``: shared by the cleaner threads; every ~300 ms it compares the bytes
    seen with the desired rate and sleeps off any excess."""

    def __init__(
        self,
        bytes_per_second: float,
        *,
        check_interval_ms: int = 300,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bytes_per_second = bytes_per_second
        self.check_interval_s = check_interval_ms / 1000
        self._sleep = sleep
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._period_start = monotonic()
        self._observed = 0.0
        self.total_wait_s = 0.0

    def set_rate(self, bytes_per_second: float) -> None:
        with self._lock:
            self.bytes_per_second = bytes_per_second

    def maybe_throttle(self, observed_bytes: float) -> float:
        """Account ``observed_bytes``; sleep if the rate is exceeded. Returns seconds slept."""
        if math.isinf(self.bytes_per_second):
            return 0.0
        with self._lock:
            self._observed += observed_bytes
            now = self._monotonic()
            elapsed = now - self._period_start
            if elapsed < self.check_interval_s:
                return 0.0
            wait = self._observed / self.bytes_per_second - elapsed
            self._period_start = now
            self._observed = 0.0
            if wait <= 0:
                return 0.0
            # Sleeping under the lock makes the other threads wait too: the budget is shared.
            self._sleep(wait)
            self.total_wait_s += wait
            self._period_start = self._monotonic()
            return wait
