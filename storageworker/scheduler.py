"""Periodic tasks on an injected clock (Kafka's ``KafkaScheduler`` as the LogManager uses it).

Each task has its own interval in clock milliseconds. :meth:`Scheduler.run_pending` runs the
tasks that are due and is all a test needs (with a ManualClock, no sleeping);
:meth:`Scheduler.start` runs it on a thread that sleeps until the next task is due, in real
time divided by the clock's ``speed`` when it has one (the demo's fast clock). A task that
raises is logged and counted and runs again at its next interval: one failing task never
stops the others.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable

from storagecore.clock import Clock

logger = logging.getLogger(__name__)

#: Longest real sleep between checks, so that an interval changed by a reload applies soon.
MAX_SLEEP_S = 0.5


@dataclasses.dataclass(slots=True)
class Task:
    name: str
    interval_ms: int
    run: Callable[[], object]
    next_due_ms: int
    runs: int = 0
    errors: int = 0
    last_error: str | None = None
    last_run_ms: int | None = None


class Scheduler:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._tasks: dict[str, Task] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def schedule(
        self, name: str, interval_ms: int, run: Callable[[], object], *, delay_ms: int = 0
    ) -> None:
        assert interval_ms > 0, f"task {name}: interval must be positive"
        with self._lock:
            self._tasks[name] = Task(name, interval_ms, run, self.clock.milliseconds() + delay_ms)

    def set_interval(self, name: str, interval_ms: int) -> None:
        """A new interval, counted from the task's last run (or from now)."""
        with self._lock:
            task = self._tasks[name]
            if task.interval_ms != interval_ms:
                base = (
                    task.last_run_ms if task.last_run_ms is not None else self.clock.milliseconds()
                )
                task.interval_ms = interval_ms
                task.next_due_ms = base + interval_ms

    @property
    def tasks(self) -> dict[str, Task]:
        with self._lock:
            return {name: dataclasses.replace(task) for name, task in self._tasks.items()}

    def run_pending(self) -> list[str]:
        """Run every due task once, in name order; the names of those that ran."""
        now = self.clock.milliseconds()
        with self._lock:
            due = sorted(
                (t for t in self._tasks.values() if t.next_due_ms <= now), key=lambda t: t.name
            )
        ran: list[str] = []
        for task in due:
            if self._stop.is_set():
                break
            try:
                task.run()
            except Exception as exc:
                logger.exception("Scheduled task %s failed", task.name)
                task.errors += 1
                task.last_error = f"{type(exc).__name__}: {exc}"
            task.runs += 1
            task.last_run_ms = self.clock.milliseconds()
            # Kafka's fixed-rate scheduling, without piling up runs after a stall.
            task.next_due_ms += task.interval_ms
            if task.next_due_ms <= now:
                task.next_due_ms = now + task.interval_ms
            ran.append(task.name)
        return ran

    def _sleep_s(self) -> float:
        with self._lock:
            next_due = min((t.next_due_ms for t in self._tasks.values()), default=None)
        if next_due is None:
            return MAX_SLEEP_S
        wait_ms = max(next_due - self.clock.milliseconds(), 0)
        speed = float(getattr(self.clock, "speed", 1.0))
        return min(wait_ms / 1000 / speed, MAX_SLEEP_S)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_pending()
            self._stop.wait(self._sleep_s())

    def start(self) -> None:
        assert self._thread is None, "scheduler already started"
        self._thread = threading.Thread(target=self._loop, name="logkeeper-scheduler", daemon=True)
        self._thread.start()

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """No new task starts; a running one finishes (up to ``timeout_s``)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
