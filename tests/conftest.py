"""Shared fixtures. Warnings are errors (pyproject), time is a ManualClock, files are real."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from storagecore import LogConfig, LogManager, ManualClock, NewRecord, TopicPartition, build_batch
from storagecore.records.codecs import Compression

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.register_profile("dev", max_examples=30, deadline=None)
settings.register_profile("long", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

START_MS = 1_700_000_000_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def manager_factory(tmp_path: Path, clock: ManualClock) -> Iterator[object]:
    """Open LogManagers over ``tmp_path/data``; everything opened is shut down at the end."""
    opened: list[LogManager] = []

    def make(config: LogConfig | None = None, dirs: list[Path] | None = None) -> LogManager:
        manager = LogManager(
            dirs or [tmp_path / "data"], default_config=config or LogConfig(), clock=clock
        )
        opened.append(manager)
        return manager

    yield make
    for manager in opened:
        manager.shutdown()


def records(
    count: int,
    *,
    start_ms: int = START_MS,
    key_prefix: str = "key",
    value_size: int = 10,
    keys: int | None = None,
) -> list[NewRecord]:
    """``count`` records with distinct (or ``keys`` cycling) keys and increasing timestamps."""
    return [
        NewRecord(
            key=f"{key_prefix}-{i if keys is None else i % keys}".encode(),
            value=(f"value-{i}-".encode() * value_size)[:value_size],
            timestamp=start_ms + i,
        )
        for i in range(count)
    ]


def batch(
    count: int = 1, *, compression: Compression = Compression.NONE, **kwargs: object
) -> bytes:
    return build_batch(records(count, **kwargs), compression=compression)  # type: ignore[arg-type]


TP = TopicPartition("topic", 0)


def break_disk(log: object) -> None:
    """Make the active segment's writes fail with EBADF, as a dead disk would: the descriptor is
    swapped for a read-only one (closing the real one outright would let the number be reused
    by another file and spread the fault)."""
    records = log.active_segment.log  # type: ignore[attr-defined]
    # The number stays: a file cache keeps it open (the tests' caches never fill up).
    with records.pinned() as fd:
        read_only = os.open(records.path, os.O_RDONLY)
        os.dup2(read_only, fd)
        os.close(read_only)
