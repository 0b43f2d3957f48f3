"""The streaming producer's parts without processes: the accumulator by count and linger, the
line reader over a pipe, and the loop on a manual clock (flush.ms, a bad line)."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from logkeeper.line_reader import LineReader
from logkeeper.produce import Appender, Batcher, StopSignals, produce
from storagecore import Compression, LogConfig, LogManager, ManualClock, TopicPartition
from storagecore.errors import ConfigError
from storagecore.records.batch import NewRecord

TP = TopicPartition("t", 0)


def record(i: int) -> NewRecord:
    return NewRecord(key=b"k%d" % i, value=b"v%d" % i, timestamp=1_000 + i, headers=())


def test_batcher_is_full_at_batch_records_and_due_a_linger_after_its_first_record() -> None:
    batcher = Batcher(batch_records=2, linger_ms=100)
    assert batcher.due_ms is None and batcher.take() is None
    batcher.add(3, record(0), now_ms=1_000)
    batcher.add(5, record(1), now_ms=1_050)  # the linger runs from the first record
    assert batcher.full and batcher.due_ms == 1_100
    pending = batcher.take()
    assert pending is not None and (pending.first_line, pending.last_line) == (3, 5)
    assert len(batcher) == 0 and batcher.due_ms is None


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    """A pipe whose write end the test closes (the end of input)."""
    read_fd, write_fd = os.pipe()
    yield read_fd, write_fd
    os.close(read_fd)


def test_line_reader_returns_complete_lines_numbered_and_the_last_one_at_eof(
    pipe: tuple[int, int],
) -> None:
    read_fd, write_fd = pipe
    reader = LineReader(read_fd)
    assert reader.poll(0) == []  # nothing yet: the timeout ends the wait
    os.write(write_fd, b'{"a"\n\n{"b"')
    assert reader.poll(None) == [(1, b'{"a"'), (2, b"")]  # blank lines count
    os.write(write_fd, b"}\n{tail")
    assert reader.poll(None) == [(3, b'{"b"}')]
    os.close(write_fd)
    assert reader.poll(None) == [(4, b"{tail")] and reader.eof


class Script:
    """Lines that arrive at given times on a manual clock: ``poll`` moves the clock to the
    next arrival, or to the end of the timeout when it comes first."""

    def __init__(self, clock: ManualClock, arrivals: list[tuple[int, bytes]]) -> None:
        self.clock = clock
        self.arrivals = arrivals
        self.number = 0
        self.eof = False
        self.timeouts: list[int | None] = []

    def poll(self, timeout_ms: int | None) -> list[tuple[int, bytes]]:
        self.timeouts.append(timeout_ms)
        if not self.arrivals:
            self.eof = True
            return []
        at_ms, text = self.arrivals[0]
        now_ms = self.clock.milliseconds()
        if timeout_ms is not None and now_ms + timeout_ms < at_ms:
            self.clock.advance(timeout_ms)
            return []
        self.clock.advance(max(at_ms - now_ms, 0))
        self.arrivals.pop(0)
        self.number += 1
        return [(self.number, text)]


def run_script(
    tmp_path: Path, config: LogConfig, arrivals: list[tuple[int, bytes]], *, linger_ms: int
) -> tuple[Script, list[int], LogManager]:
    clock = ManualClock(0)
    manager = LogManager([tmp_path], config_for={"t": config}, clock=clock)
    script = Script(clock, arrivals)
    flushes: list[int] = []

    def flush_dirty_logs() -> int:
        flushes.append(clock.milliseconds())
        return manager.flush_dirty_logs()

    appender = Appender(manager, TP, config, Compression.NONE, io.StringIO())
    try:
        produce(
            script,
            Batcher(batch_records=10, linger_ms=linger_ms),
            appender,
            clock=clock,
            flush_dirty_logs=flush_dirty_logs,
            stop=StopSignals(),
        )
    except BaseException:
        manager.shutdown()
        raise
    return script, flushes, manager


def test_loop_appends_by_linger_and_runs_the_flusher_when_flush_ms_is_due(tmp_path: Path) -> None:
    config = LogConfig.from_topic_config({"flush.ms": "500"})
    line = b'{"key": "k", "value": "v"}'
    script, flushes, manager = run_script(
        tmp_path, config, [(0, line), (50, line), (2_000, line)], linger_ms=100
    )
    with manager:
        log = manager.get_log(TP)
        # Lines 1-2 went at 100 ms (the linger of the first) and were flushed by flush.ms
        # 500 ms after the log was made; line 3 went at EOF and waits for the shutdown's flush.
        counts = [
            h.last_offset - h.base_offset + 1 for s in log.segments for h in s.log.batch_headers()
        ]
        assert counts == [2, 1]
        assert flushes == [600] and log.recovery_point == 2
        assert script.timeouts[:4] == [None, 100, 50, 500]


def test_loop_appends_the_lines_before_a_bad_line_and_names_it(tmp_path: Path) -> None:
    good = b'{"key": "k", "value": "v"}'
    with pytest.raises(ConfigError) as raised:
        run_script(tmp_path, LogConfig(), [(0, good), (1, good), (2, b"{bad")], linger_ms=100)
    assert "stdin line 3: not JSON" in str(raised.value)
    assert "stdin lines 1-2 were appended (offsets 0-1), nothing after them" in str(raised.value)
    with LogManager([tmp_path]) as manager:
        assert manager.get_log(TP).log_end_offset == 2


def test_line_reader_takes_descriptors_above_1023() -> None:
    """select() cannot watch a descriptor numbered 1024 or more; a process holding many open
    segment files gets such numbers for its pipes."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.fail(f"the open-files hard limit {hard} is below what this test needs")
    if soft != resource.RLIM_INFINITY and soft < 1100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1100, hard))
    read_end, write_end = os.pipe()
    high = os.dup2(read_end, 1050)
    try:
        os.write(write_end, b"one\ntwo\n")
        reader = LineReader(high)
        assert reader.poll(1000) == [(1, b"one"), (2, b"two")]
        os.close(write_end)
        assert reader.poll(1000) == [] and reader.eof
    finally:
        for fd in (read_end, high):
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
