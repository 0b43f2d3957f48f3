"""The cleaner's throttler and its settings (the log.cleaner.* keys of CleanerConfig)."""

from __future__ import annotations

import pytest

from storagecore.cleaner import Throttler
from storagecore.config import CleanerConfig


# -- throttling -----------------------------------------------------------------------------------
def test_throttler_sleeps_off_the_excess() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    throttler = Throttler(1000.0, sleep=sleep, monotonic=lambda: now[0])
    now[0] = 0.5
    assert throttler.maybe_throttle(1500) == pytest.approx(1.0)
    assert slept == [pytest.approx(1.0)] and throttler.total_wait_s == pytest.approx(1.0)
    now[0] += 0.5
    assert throttler.maybe_throttle(400) == 0.0, "under the rate: no wait"
    unthrottled = Throttler(float("inf"), sleep=sleep)
    assert unthrottled.maybe_throttle(10**12) == 0.0


def test_cleaner_config_validation_names_the_key() -> None:
    assert CleanerConfig.from_properties({"log.cleaner.threads": "2"}).threads == 2
    with pytest.raises(ValueError, match="log.cleaner.threads"):
        CleanerConfig.from_properties({"log.cleaner.threads": "0"})
    with pytest.raises(ValueError, match="log.cleaner.bogus"):
        CleanerConfig.from_properties({"log.cleaner.bogus": "1"})
    with pytest.raises(ValueError, match="log.cleaner.backoff.ms"):
        CleanerConfig.from_properties({"log.cleaner.backoff.ms": "soon"})
    config = CleanerConfig(threads=4, dedupe_buffer_size=1 << 20)
    assert config.map_memory_per_thread == 1 << 18
