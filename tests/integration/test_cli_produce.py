"""``logkeeper produce`` as a stream: real subprocesses fed through a pipe, the log read while
the producer runs, and a SIGKILL in the middle. Every wait is on a condition with a deadline."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import pytest

from storagecore.errors import StorageError
from storagecore.records.file_records import FileRecords

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
PRODUCE = [sys.executable, "-m", "logkeeper.cli", "produce"]
#: Room for a loaded 2-core CI machine on top of the linger being tested.
SLACK_S = 3.0


class Producer:
    """A ``logkeeper produce`` process fed through a pipe; its ``{"partition", "offset"}``
    lines are collected by a thread as they come."""

    def __init__(self, directory: Path, *flags: str) -> None:
        self.process = subprocess.Popen(
            [*PRODUCE, "--dir", str(directory), "--topic", "t", *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.stdin: IO[str] = self.process.stdin
        self.offsets: list[int] = []
        self._reader = threading.Thread(
            target=self._read_acks, args=(self.process.stdout,), daemon=True
        )
        self._reader.start()

    def _read_acks(self, stdout: IO[str]) -> None:
        for ack in stdout:
            self.offsets.append(json.loads(ack)["offset"])

    def write(self, text: str) -> None:
        self.stdin.write(text)
        self.stdin.flush()

    def running(self) -> bool:
        return self.process.poll() is None

    def finish(self) -> int:
        """Close stdin (end of input) and wait for the exit status."""
        self.stdin.close()
        return self.wait()

    def wait(self) -> int:
        status = self.process.wait(timeout=60)
        self._reader.join(timeout=60)
        return status

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.running():
            self.process.kill()
        self.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None and not stream.closed:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``condition`` until it holds; return the seconds it took."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.005)
    return time.monotonic() - start


def log_values(directory: Path) -> list[str]:
    """The record values in the segment files, read as an outside reader would while the
    producer holds the log dir (no lock, complete batches only)."""
    return [value for batch in log_batches(directory) for value in batch]


def log_batches(directory: Path) -> list[list[str]]:
    batches: list[list[str]] = []
    for path in sorted((directory / "t-0").glob("*.log")):
        segment = FileRecords(path, create=False, writable=False)
        try:
            for _position, batch in segment.batches():
                batches.append([r.value.decode() for r in batch.records() if r.value is not None])
        except StorageError:
            pass  # a batch being written: the next poll sees it whole
        finally:
            segment.close()
    return batches


def line(i: int) -> str:
    return json.dumps({"key": f"k{i}", "value": f"v{i}"}) + "\n"


def consume_values(directory: Path) -> list[str]:
    """Reload the log dir (recovery included) with ``logkeeper consume``."""
    result = subprocess.run(
        [sys.executable, "-m", "logkeeper.cli", "consume", "--dir", str(directory), "--topic", "t"],
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(out)["value"] for out in result.stdout.splitlines()]


def test_lines_fed_slowly_are_readable_within_the_linger(tmp_path: Path) -> None:
    linger_s = 0.3
    with Producer(tmp_path, "--linger-ms", "300", "--batch-records", "1000") as producer:
        # The first line also waits for the interpreter to start: not timed.
        producer.write(line(0))
        wait_for(lambda: log_values(tmp_path) == ["v0"], 60, "the first line in the log")
        for i in range(1, 4):
            producer.write(line(i))
            took_s = wait_for(
                lambda n=i + 1: len(log_values(tmp_path)) == n,
                linger_s + SLACK_S,
                f"line {i} in the log",
            )
            # Appended by the linger, not by a full batch or the end of input.
            assert took_s >= linger_s * 0.9
            assert producer.running()
            wait_for(lambda n=i + 1: len(producer.offsets) == n, SLACK_S, f"the ack of line {i}")
        assert log_values(tmp_path) == ["v0", "v1", "v2", "v3"]
        assert producer.offsets == [0, 1, 2, 3]
        assert producer.finish() == 0
    assert consume_values(tmp_path) == ["v0", "v1", "v2", "v3"]


def test_sigkill_mid_stream_leaves_an_exact_prefix_with_every_flushed_batch(
    tmp_path: Path,
) -> None:
    # flush.messages=1: every batch is fsynced before its offsets are printed, so every acked
    # line is one that was flushed.
    flags = ("--linger-ms", "20", "--batch-records", "3", "--config", "flush.messages=1")
    with Producer(tmp_path, *flags) as producer:
        written = 0
        while len(producer.offsets) < 30:
            producer.write(line(written))
            written += 1
            if written % 4 == 0:  # some batches go by linger, some by count
                wait_for(lambda n=written: len(producer.offsets) >= n - 3, 60, "acks")
        producer.write("".join(line(written + i) for i in range(5)))  # in flight at the kill
        written += 5
        acked = len(producer.offsets)
        producer.process.send_signal(signal.SIGKILL)
        assert producer.wait() == -signal.SIGKILL
    values = consume_values(tmp_path)
    assert acked <= len(values) <= written
    assert values == [f"v{i}" for i in range(len(values))], "an exact prefix of the input"


def test_batches_are_cut_by_batch_records_and_at_end_of_input(tmp_path: Path) -> None:
    file_input = tmp_path / "in.jsonl"
    file_input.write_text("".join(line(i) for i in range(7)))
    with file_input.open() as stdin:
        result = subprocess.run(
            [*PRODUCE, "--dir", str(tmp_path / "a"), "--topic", "t", "--batch-records", "3"],
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            env=ENV,
            check=False,
        )
    assert result.returncode == 0, result.stderr
    assert [len(b) for b in log_batches(tmp_path / "a")] == [3, 3, 1]

    # Through a pipe with a linger far away: a full batch goes at once, the rest at EOF.
    with Producer(tmp_path / "b", "--linger-ms", "600000", "--batch-records", "2") as producer:
        producer.write(line(0) + line(1) + line(2))
        wait_for(lambda: producer.offsets == [0, 1], 60, "the full batch")
        assert producer.running()
        assert log_batches(tmp_path / "b") == [["v0", "v1"]]
        assert producer.finish() == 0
    assert log_batches(tmp_path / "b") == [["v0", "v1"], ["v2"]]


def unread_bytes(stream: IO[str]) -> int:
    """Bytes written to a pipe that its reader has not read yet (FIONREAD works on either
    end of a Linux pipe)."""
    return struct.unpack("i", fcntl.ioctl(stream.fileno(), termios.FIONREAD, b"\0" * 4))[0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_appends_the_pending_batch_and_shuts_down_cleanly(
    tmp_path: Path, sig: signal.Signals
) -> None:
    with Producer(tmp_path, "--linger-ms", "600000", "--batch-records", "1000") as producer:
        producer.write(line(0) + line(1))
        wait_for(lambda: unread_bytes(producer.stdin) == 0, 60, "the producer to read stdin")
        assert log_values(tmp_path) == []  # held for the linger
        producer.process.send_signal(sig)
        assert producer.wait() == 0
        assert producer.offsets == [0, 1]
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    assert consume_values(tmp_path) == ["v0", "v1"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--batch-records", "0"], "argument --batch-records: must be in [1, 1000000], got 0"),
        (["--batch-records", "x"], "argument --batch-records: expected an integer, got 'x'"),
        (["--linger-ms", "-1"], "argument --linger-ms: must be in [0, 86400000], got -1"),
    ],
)
def test_bad_flags_are_named(tmp_path: Path, flags: list[str], message: str) -> None:
    result = subprocess.run(
        [*PRODUCE, "--dir", str(tmp_path), "--topic", "t", *flags],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
        check=False,
    )
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "t-0").exists()
