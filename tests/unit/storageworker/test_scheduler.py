"""The worker's scheduler on a manual clock: intervals, isolation of failures, new intervals."""

from __future__ import annotations

import time

from storagecore.clock import ManualClock, ScaledClock
from storageworker.scheduler import Scheduler


def test_tasks_run_on_their_own_intervals() -> None:
    clock = ManualClock(0)
    scheduler = Scheduler(clock)
    runs: list[str] = []
    scheduler.schedule("fast", 100, lambda: runs.append("fast"))
    scheduler.schedule("slow", 250, lambda: runs.append("slow"), delay_ms=250)
    assert scheduler.run_pending() == ["fast"]  # no delay: due at once
    clock.advance(100)
    assert scheduler.run_pending() == ["fast"]
    clock.advance(150)
    assert scheduler.run_pending() == ["fast", "slow"]
    clock.advance(10)
    assert scheduler.run_pending() == []
    assert runs == ["fast", "fast", "fast", "slow"]


def test_a_failing_task_is_counted_and_the_others_run() -> None:
    clock = ManualClock(0)
    scheduler = Scheduler(clock)
    ran: list[int] = []

    def broken() -> None:
        raise RuntimeError("disk on fire")

    scheduler.schedule("a-broken", 10, broken)
    scheduler.schedule("b-fine", 10, lambda: ran.append(1))
    scheduler.run_pending()
    clock.advance(10)
    scheduler.run_pending()
    tasks = scheduler.tasks
    assert tasks["a-broken"].errors == 2 and tasks["a-broken"].runs == 2
    assert tasks["a-broken"].last_error == "RuntimeError: disk on fire"
    assert ran == [1, 1]


def test_no_pile_up_after_a_stall_and_new_intervals_apply() -> None:
    clock = ManualClock(0)
    scheduler = Scheduler(clock)
    scheduler.schedule("t", 100, lambda: None)
    scheduler.run_pending()
    clock.advance(1_000)  # ten intervals missed: one run, not ten
    assert scheduler.run_pending() == ["t"]
    assert scheduler.run_pending() == []
    scheduler.set_interval("t", 5_000)
    clock.advance(4_999)
    assert scheduler.run_pending() == []
    clock.advance(1)
    assert scheduler.run_pending() == ["t"]


def test_scaled_clock_runs_faster_and_tells_its_speed() -> None:
    clock = ScaledClock(1000.0, start_ms=0)
    assert clock.speed == 1000.0
    first = clock.milliseconds()
    time.sleep(0.02)
    # 20 ms of real time are at least 20 s on this clock (sleep never returns early).
    assert clock.milliseconds() - first >= 20_000
