"""``logkeeper produce``: append JSON lines from stdin to a topic-partition as they arrive.

Like kafka-console-producer: records are gathered into a batch that is appended when it holds
``--batch-records`` records (batch.size, counted in records) or ``--linger-ms`` has passed
since its first record arrived (linger.ms), and at end of input. So ``tail -f app.log |
logkeeper produce ...`` appends within the linger, and a producer killed at any moment leaves
the log holding an exact prefix of its input: every batch appended before the kill (the page
cache keeps it after SIGKILL; after a machine crash, what was flushed). Flushing follows the
topic's ``flush.messages`` (the Log flushes on append) and ``flush.ms`` (this loop runs the
LogManager's flusher when it is due).

Invariant: the records of stdin lines are appended in input order and a batch is appended
whole or not at all, so the log always holds the records of lines 1..N for some N.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol, TextIO

from logkeeper.line_reader import LineReader
from logkeeper.topic_args import topic_config

if TYPE_CHECKING:
    from storagecore import Clock, Compression, Log, LogConfig, LogManager, TopicPartition
    from storagecore.records.batch import NewRecord


class Lines(Protocol):
    """What the loop reads: :class:`LineReader` over stdin, or a script in the unit tests."""

    eof: bool

    def poll(self, timeout_ms: int | None) -> list[tuple[int, bytes]]: ...


@dataclasses.dataclass
class PendingBatch:
    first_line: int
    last_line: int
    records: list[NewRecord]


class Batcher:
    """Kafka's RecordAccumulator for one partition, by record count and linger; time is given."""

    def __init__(self, batch_records: int, linger_ms: int) -> None:
        assert batch_records >= 1 and linger_ms >= 0
        self.batch_records = batch_records
        self.linger_ms = linger_ms
        self._pending: PendingBatch | None = None
        self._first_ms = 0

    def __len__(self) -> int:
        return 0 if self._pending is None else len(self._pending.records)

    def add(self, line_number: int, record: NewRecord, now_ms: int) -> None:
        if self._pending is None:
            self._pending = PendingBatch(line_number, line_number, [])
            self._first_ms = now_ms
        self._pending.records.append(record)
        self._pending.last_line = line_number

    @property
    def full(self) -> bool:
        return len(self) >= self.batch_records

    @property
    def due_ms(self) -> int | None:
        """When the batch must be appended by linger; None when there is none."""
        return None if self._pending is None else self._first_ms + self.linger_ms

    def take(self) -> PendingBatch | None:
        pending, self._pending = self._pending, None
        return pending


class Appender:
    """Appends pending batches to one partition's log and prints their offsets."""

    def __init__(
        self,
        manager: LogManager,
        tp: TopicPartition,
        config: LogConfig,
        compression: Compression,
        out: TextIO,
    ) -> None:
        self._manager = manager
        self._tp = tp
        self._config = config
        self._compression = compression
        self._out = out
        # The partition is created by the first batch that is valid: a rejected produce
        # creates nothing.
        self.log: Log | None = manager.logs.get(tp)
        self._first_offset: int | None = None
        self._last_offset = -1
        self._last_line = 0

    def append(self, pending: PendingBatch | None) -> None:
        from storagecore.errors import StorageError
        from storagecore.log_validator import validate_and_assign_offsets
        from storagecore.records.memory_records_builder import build_batch

        if pending is None:
            return
        batch = build_batch(pending.records, compression=self._compression)
        try:
            if self.log is None:
                validate_and_assign_offsets(
                    batch,
                    tp=self._tp,
                    config=self._config,
                    next_offset=0,
                    now_ms=self._manager.clock.milliseconds(),
                )
                self.log = self._manager.get_or_create_log(self._tp, self._config)
            info = self.log.append(batch)
        except StorageError as exc:
            raise type(exc)(
                f"stdin lines {pending.first_line}-{pending.last_line}: {exc}; {self.progress()}"
            ) from exc
        if self._first_offset is None:
            self._first_offset = info.first_offset
        self._last_offset = info.last_offset
        self._last_line = pending.last_line
        partition = self._tp.partition
        self._out.write(
            "".join(
                f'{{"partition": {partition}, "offset": {offset}}}\n'
                for offset in range(info.first_offset, info.last_offset + 1)
            )
        )
        self._out.flush()  # a reader of our stdout sees each batch as it is appended

    def progress(self) -> str:
        """What this run has appended, for an error message (where to resume)."""
        if self._first_offset is None:
            return "nothing was appended"
        return (
            f"stdin lines 1-{self._last_line} were appended (offsets {self._first_offset}-"
            f"{self._last_offset}), nothing after them"
        )

    def flush_due_ms(self) -> int | None:
        """When ``flush.ms`` next asks for a flush; None when nothing waits for one."""
        from storagecore.config import LONG_MAX

        if self.log is None or self.log.unflushed_messages == 0:
            return None
        if self._config.flush_ms >= LONG_MAX:
            return None
        return self.log.last_flush_ms + self._config.flush_ms


def parse_line(line: bytes, number: int, now_ms: int) -> NewRecord:
    from storagecore.errors import ConfigError
    from storagecore.records.batch import NewRecord

    try:
        obj = json.loads(line)
    except ValueError as exc:  # JSONDecodeError, or UnicodeDecodeError for bytes not UTF-8
        raise ConfigError(f"stdin line {number}: not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"stdin line {number}: expected a JSON object")
    unknown = set(obj) - {"key", "value", "timestamp", "headers"}
    if unknown:
        raise ConfigError(f"stdin line {number}: unknown field(s) {sorted(unknown)}")

    def text(field: str) -> bytes | None:
        value = obj.get(field)
        if value is None:
            return None
        if not isinstance(value, str):
            raise ConfigError(
                f"stdin line {number}: {field} must be a string or null, got {value!r}"
            )
        return value.encode("utf-8")

    timestamp = obj.get("timestamp", now_ms)
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise ConfigError(f"stdin line {number}: timestamp must be a non-negative integer (ms)")
    headers = obj.get("headers") or {}
    if not isinstance(headers, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, str)) for k, v in headers.items()
    ):
        raise ConfigError(f"stdin line {number}: headers must map strings to strings")
    return NewRecord(
        key=text("key"),
        value=text("value"),
        timestamp=timestamp,
        headers=tuple((k, None if v is None else v.encode("utf-8")) for k, v in headers.items()),
    )


class StopSignals:
    """SIGINT and SIGTERM end the input like EOF: the handler only sets ``requested`` (an
    append is never cut in the middle) and the wake-up pipe ends the reader's wait."""

    def __init__(self) -> None:
        self.requested = False
        self.wake_fd: int | None = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[StopSignals]:
        if threading.current_thread() is not threading.main_thread():
            yield self  # signals reach the main thread only; called in-process by a test
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        previous_wakeup = signal.set_wakeup_fd(write_fd)
        previous = {
            sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        self.wake_fd = read_fd
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_wakeup)
            os.close(read_fd)
            os.close(write_fd)
            self.wake_fd = None

    def _handle(self, signum: int, frame: object) -> None:
        self.requested = True


def produce(
    reader: Lines,
    batcher: Batcher,
    appender: Appender,
    *,
    clock: Clock,
    flush_dirty_logs: Callable[[], object],
    stop: StopSignals,
) -> None:
    """The loop: read what arrived, append full or lingered batches, run the flusher when
    ``flush.ms`` is due; at end of input (or a stop signal) append the rest."""
    from storagecore.errors import ConfigError

    while not reader.eof and not stop.requested:
        now_ms = clock.milliseconds()
        deadlines = [d for d in (batcher.due_ms, appender.flush_due_ms()) if d is not None]
        timeout_ms = max(min(deadlines) - now_ms, 0) if deadlines else None
        try:
            lines = reader.poll(timeout_ms)
        except ConfigError as exc:  # a line too long to hold
            appender.append(batcher.take())
            raise ConfigError(f"{exc}; {appender.progress()}") from None
        now_ms = clock.milliseconds()
        for number, line in lines:
            if not line.strip():
                continue
            try:
                record = parse_line(line, number, now_ms)
            except ConfigError as exc:
                appender.append(batcher.take())  # the lines before it: the log stays a prefix
                raise ConfigError(f"{exc}; {appender.progress()}") from None
            batcher.add(number, record, now_ms)
            if batcher.full:
                appender.append(batcher.take())
        due_ms = batcher.due_ms
        if due_ms is not None and now_ms >= due_ms:
            appender.append(batcher.take())
        flush_due_ms = appender.flush_due_ms()
        if flush_due_ms is not None and now_ms >= flush_due_ms:
            flush_dirty_logs()
    appender.append(batcher.take())


def cmd_produce(args: argparse.Namespace) -> int:
    from storagecore import Compression, LogManager, SystemClock, TopicPartition

    config, configs = topic_config(args)
    compression = Compression.from_name(args.compression)
    clock = SystemClock()
    tp = TopicPartition(args.topic, args.partition)
    stop = StopSignals()
    with LogManager([args.dir], config_for=configs, clock=clock) as manager, stop.installed():
        produce(
            LineReader(sys.stdin.fileno(), wake_fd=stop.wake_fd),
            Batcher(args.batch_records, args.linger_ms),
            Appender(manager, tp, config, compression, sys.stdout),
            clock=clock,
            flush_dirty_logs=manager.flush_dirty_logs,
            stop=stop,
        )
    return 0
