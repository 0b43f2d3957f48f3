"""The connection's read timeouts with one timer (``deadline.ReadDeadline``): a read armed
after a long idle wait still times out at its own deadline, never later; a disarmed deadline
never cancels; and a real listener closes a silent connection at ``idle_timeout_ms``."""

from __future__ import annotations

import asyncio
import heapq
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storagecore.clock import ManualClock
from storageworker.kafka.deadline import ReadDeadline
from storageworker.kafka.listener_settings import ListenerSettings
from storageworker.kafka.server import KafkaServer
from storageworker.worker import Worker

IDLE_S, REQUEST_S = 600.0, 30.0


class ManualTimers:
    """An event loop's clock and timers, moved by hand: run_until(t) runs every callback
    due by t in order, each at its own time."""

    def __init__(self) -> None:
        self.now = 0.0
        self._due: list[tuple[float, int, asyncio.TimerHandle]] = []
        self._loop = asyncio.new_event_loop()  # only to build handles; never run
        self.fired_at: list[float] = []

    def close(self) -> None:
        self._loop.close()

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], object], /) -> asyncio.TimerHandle:
        handle = asyncio.TimerHandle(when, callback, (), self._loop)
        heapq.heappush(self._due, (when, id(handle), handle))
        return handle

    def run_until(self, until: float) -> None:
        while self._due and self._due[0][0] <= until:
            when, _, handle = heapq.heappop(self._due)
            if handle.cancelled():
                continue
            self.now = when
            self.fired_at.append(when)
            handle._run()
        self.now = until


class Task:
    def __init__(self) -> None:
        self.cancelled_at: list[float] = []
        self.timers: ManualTimers | None = None

    def cancel(self) -> bool:
        assert self.timers is not None
        self.cancelled_at.append(self.timers.now)
        return True


@pytest.fixture
def timers() -> Iterator[ManualTimers]:
    timers = ManualTimers()
    yield timers
    timers.close()


def deadline_of(timers: ManualTimers) -> tuple[ReadDeadline, Task]:
    task = Task()
    task.timers = timers
    return ReadDeadline(timers, task, min(IDLE_S, REQUEST_S)), task  # type: ignore[arg-type]


def test_a_request_read_after_a_long_idle_wait_times_out_at_its_own_deadline(
    timers: ManualTimers,
) -> None:
    deadline, task = deadline_of(timers)
    deadline.arm(IDLE_S)  # waiting for the next request from t=0
    timers.run_until(100.0)  # checks ran, nothing expired
    assert task.cancelled_at == [] and not deadline.expired
    timers.now = 117.5  # a request header arrives; its body must follow within 30 s
    deadline.arm(REQUEST_S)
    timers.run_until(1000.0)
    assert task.cancelled_at == [117.5 + REQUEST_S]
    assert deadline.expired


def test_the_idle_timeout_fires_at_its_deadline(timers: ManualTimers) -> None:
    deadline, task = deadline_of(timers)
    timers.now = 3.25
    deadline.arm(IDLE_S)
    timers.run_until(10_000.0)
    assert task.cancelled_at == [3.25 + IDLE_S]
    assert len(timers.fired_at) <= IDLE_S / REQUEST_S + 2  # a check per period, not per turn


def test_reads_that_return_in_time_are_never_cancelled(timers: ManualTimers) -> None:
    deadline, task = deadline_of(timers)
    for request in range(1000):  # a request every 0.1 s, each read in time
        deadline.arm(IDLE_S)
        timers.run_until(request * 0.1 + 0.05)
        deadline.arm(REQUEST_S)
        timers.run_until(request * 0.1 + 0.06)
        deadline.disarm()
        timers.run_until(request * 0.1 + 0.1)
    timers.run_until(5000.0)  # a long request (a group join) outside any read
    assert task.cancelled_at == [] and not deadline.expired
    deadline.close()
    assert timers._due == [] or all(h.cancelled() for _, _, h in timers._due)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    (tmp_path / "topics").mkdir()
    worker = Worker([tmp_path / "data"], tmp_path / "topics", None, clock=ManualClock(0))
    worker.start(background=False)
    yield worker
    worker.shutdown()


def test_a_silent_connection_is_closed_at_the_idle_timeout(worker: Worker) -> None:
    server = KafkaServer(worker, ListenerSettings(host="127.0.0.1", port=0, idle_timeout_ms=200))
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as silent:
            assert silent.recv(10) == b""  # closed by the worker, having sent nothing
        assert server.counters.timed_out_connections == 1
    finally:
        server.stop()
