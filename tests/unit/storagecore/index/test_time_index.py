"""Kafka TimeIndexTest scenarios (kafka-log-layer.md §2.3, §10 item 77)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**31), 2**31 - 1)),
        min_size=1,
        max_size=12,
    )
)
def test_sanity_check_of_whole_columns_matches_the_entry_loop(
    tmp_path_factory: pytest.TempPathFactory, raw: list[tuple[int, int]]
) -> None:
    """The column check (C speed) and the per-entry rule agree on every file, including an
    entry out of order between a first and a last that are in order."""
    path = tmp_path_factory.mktemp("idx") / "00000000000000000045.timeindex"
    path.write_bytes(b"".join(struct.pack(">qi", t, r) for t, r in raw))
    index = TimeIndex(path, BASE, len(raw) * 12, writable=False)
    timestamps = [t for t, _ in raw]
    offsets = [BASE + r for _, r in raw]
    valid = (
        timestamps[-1] >= timestamps[0]
        and offsets[-1] >= BASE
        and all(b > a for a, b in zip([-2, *timestamps], timestamps, strict=False))
        and all(b >= a for a, b in zip([-1, *offsets], offsets, strict=False))
    )
    if valid:
        index.sanity_check()
    else:
        with pytest.raises(CorruptIndexError):
            index.sanity_check()
    index.close_without_trim()


def test_sanity_check_finds_an_entry_out_of_order_in_the_middle(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000045.timeindex"
    entries = [(100, 1), (300, 2), (200, 3), (400, 4)]
    path.write_bytes(b"".join(struct.pack(">qi", t, r) for t, r in entries))
    with pytest.raises(CorruptIndexError, match="entry 2 .* does not follow"):
        TimeIndex(path, BASE, len(entries) * 12, writable=False).sanity_check()
