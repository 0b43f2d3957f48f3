"""Kafka TimeIndexTest scenarios (kafka-log-layer.md §2.3, §10 item 77)."""

from __future__ import annotations

from pathlib import Path

import pytest

from storagecore.errors import CorruptIndexError
from storagecore.index import TimeIndex, TimestampOffset

BASE = 45
MAX_ENTRIES = 30


def make(tmp_path: Path) -> TimeIndex:
    return TimeIndex(tmp_path / "00000000000000000045.timeindex", BASE, MAX_ENTRIES * 12)


def test_look_up(tmp_path: Path) -> None:
    index = make(tmp_path)
    assert index.lookup(100) == TimestampOffset(-1, BASE)
    for i in range(1, MAX_ENTRIES):
        index.maybe_append(i * 10, BASE + i * 10)  # Kafka's test: timestamp i*10 at base + i*10
    assert index.lookup(9) == TimestampOffset(-1, BASE)
    assert index.lookup(10) == TimestampOffset(10, BASE + 10)
    assert index.lookup(15) == TimestampOffset(10, BASE + 10)
    last = (MAX_ENTRIES - 1) * 10
    assert index.lookup(10_000) == TimestampOffset(last, BASE + last)


def test_only_greater_timestamps_are_appended(tmp_path: Path) -> None:
    index = make(tmp_path)
    index.maybe_append(100, BASE + 1)
    index.maybe_append(100, BASE + 2)  # equal timestamp: ignored
    assert index.entries == 1
    with pytest.raises(AssertionError, match="timestamp 99 appended after 100"):
        index.maybe_append(99, BASE + 3)
    with pytest.raises(AssertionError, match="appended after"):
        index.maybe_append(101, BASE)


def test_is_full_keeps_a_slot_for_the_final_entry(tmp_path: Path) -> None:
    index = make(tmp_path)
    for i in range(MAX_ENTRIES - 1):
        index.maybe_append(1000 + i, BASE + i)
    assert index.is_full()
    with pytest.raises(AssertionError, match="full time index"):
        index.maybe_append(5000, BASE + 100)
    index.maybe_append(5000, BASE + 100, skip_full_check=True)
    assert index.entries == MAX_ENTRIES


def test_truncate(tmp_path: Path) -> None:
    index = make(tmp_path)
    for i in range(1, 10):
        index.maybe_append(i * 100, BASE + i * 2)
    index.truncate_to(BASE + 6)
    assert index.last_entry == TimestampOffset(200, BASE + 4)
    index.truncate_to(BASE)
    assert index.entries == 0 and index.last_entry == TimestampOffset(-1, BASE)


def test_sanity_check(tmp_path: Path) -> None:
    index = make(tmp_path)
    index.maybe_append(100, BASE + 1)
    index.maybe_append(200, BASE + 5)
    index.sanity_check(next_offset=BASE + 6)
    with pytest.raises(CorruptIndexError, match="past the segment end"):
        index.sanity_check(next_offset=BASE + 5)
    index.close()
    raw = bytearray(index.path.read_bytes())
    raw[0:8] = (300).to_bytes(8, "big")  # first timestamp above the last one
    index.path.write_bytes(bytes(raw))
    with pytest.raises(CorruptIndexError, match="below the first"):
        TimeIndex(index.path, BASE, MAX_ENTRIES * 12, writable=False).sanity_check()


def test_resize_and_reopen(tmp_path: Path) -> None:
    index = make(tmp_path)
    index.maybe_append(100, BASE + 1)
    index.close()
    assert index.path.stat().st_size == 12
    reopened = make(tmp_path)
    assert reopened.entries == 1 and reopened.max_entries == MAX_ENTRIES
    assert reopened.last_entry == TimestampOffset(100, BASE + 1)
