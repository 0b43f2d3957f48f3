"""Kafka OffsetIndexTest scenarios (kafka-log-layer.md §2.2, §10 item 77)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storagecore.errors import CorruptIndexError
from storagecore.index import OffsetIndex, OffsetPosition

BASE = 45


def make(tmp_path: Path, max_bytes: int = 30 * 8) -> OffsetIndex:
    return OffsetIndex(tmp_path / "00000000000000000045.index", BASE, max_bytes)


def test_preallocated_to_whole_entries_and_trimmed_on_close(tmp_path: Path) -> None:
    index = make(tmp_path, max_bytes=30 * 8 + 5)
    assert index.path.stat().st_size == 30 * 8
    assert index.max_entries == 30
    index.append(BASE + 1, 10)
    index.close()
    assert index.path.stat().st_size == 8


def test_lookup_empty_and_before_first(tmp_path: Path) -> None:
    index = make(tmp_path)
    assert index.lookup(100) == OffsetPosition(BASE, 0)
    index.append(BASE + 5, 100)
    assert index.lookup(BASE + 4) == OffsetPosition(BASE, 0)
    assert index.lookup(BASE + 5) == OffsetPosition(BASE + 5, 100)
    assert index.lookup(BASE + 1000) == OffsetPosition(BASE + 5, 100)


def test_lookup_is_largest_lower_bound(tmp_path: Path) -> None:
    index = make(tmp_path)
    entries = [(BASE + o, p) for o, p in [(2, 10), (5, 40), (9, 80), (20, 300)]]
    for offset, position in entries:
        index.append(offset, position)
    for target in range(BASE, BASE + 30):
        expected = max((e for e in entries if e[0] <= target), default=(BASE, 0))
        assert tuple(index.lookup(target)) == expected


def test_append_out_of_order_is_a_bug(tmp_path: Path) -> None:
    index = make(tmp_path)
    index.append(BASE + 5, 0)
    with pytest.raises(AssertionError, match="appended after"):
        index.append(BASE + 5, 10)


def test_append_to_full_index_is_a_bug(tmp_path: Path) -> None:
    index = make(tmp_path, max_bytes=16)
    index.append(BASE + 1, 0)
    index.append(BASE + 2, 10)
    assert index.is_full()
    with pytest.raises(AssertionError, match="full index"):
        index.append(BASE + 3, 20)


def test_fetch_upper_bound_offset(tmp_path: Path) -> None:
    index = make(tmp_path)
    index.append(BASE + 1, 100)
    index.append(BASE + 3, 200)
    index.append(BASE + 5, 300)
    assert index.fetch_upper_bound_offset(BASE + 1, 150) == OffsetPosition(BASE + 5, 300)
    assert index.fetch_upper_bound_offset(BASE + 1, 100) == OffsetPosition(BASE + 3, 200)
    assert index.fetch_upper_bound_offset(BASE + 3, 500) is None


def test_truncate_to_removes_entries_at_and_above(tmp_path: Path) -> None:
    index = make(tmp_path)
    for i in range(1, 10):
        index.append(BASE + i * 2, i * 100)
    index.truncate_to(BASE + 8)  # an entry exactly at 8: removed
    assert index.entries == 3 and index.last_offset == BASE + 6
    index.truncate_to(BASE + 5)  # between entries
    assert index.entries == 2 and index.last_offset == BASE + 4
    index.truncate_to(BASE)
    assert index.entries == 0 and index.last_offset == BASE


def test_reopen_keeps_entries(tmp_path: Path) -> None:
    index = make(tmp_path)
    index.append(BASE + 3, 30)
    index.append(BASE + 7, 70)
    index.close()
    reopened = make(tmp_path)
    assert reopened.entries == 2
    assert reopened.lookup(BASE + 8) == OffsetPosition(BASE + 7, 70)
    assert reopened.path.stat().st_size == 30 * 8  # writable again: preallocated


def test_sanity_last_offset_equal_to_base_offset(tmp_path: Path) -> None:
    index = make(tmp_path)
    index.append(BASE, 0)
    index.sanity_check(log_size_bytes=100)


def test_sanity_detects_preallocated_zero_tail(tmp_path: Path) -> None:
    index = make(tmp_path)
    index.append(BASE + 3, 30)
    index.flush()
    index.close_without_trim()  # a crash: the file keeps its preallocated zeros
    reopened = OffsetIndex(index.path, BASE, 30 * 8, writable=False)
    assert reopened.entries == 30  # Kafka's trap: every whole entry counts
    with pytest.raises(CorruptIndexError, match="does not follow"):
        reopened.sanity_check(log_size_bytes=100)


def test_sanity_detects_bad_length_and_positions_past_the_log(tmp_path: Path) -> None:
    index = make(tmp_path)
    index.append(BASE + 3, 500)
    index.close()
    with pytest.raises(CorruptIndexError, match="past the 100-byte log"):
        OffsetIndex(index.path, BASE, 240, writable=False).sanity_check(log_size_bytes=100)
    with index.path.open("ab") as handle:
        handle.write(b"\x01\x02\x03")
    with pytest.raises(CorruptIndexError, match="not a multiple of the 8-byte entry"):
        OffsetIndex(index.path, BASE, 240, writable=False).sanity_check()


def test_resize_keeps_entries(tmp_path: Path) -> None:
    index = make(tmp_path)
    for i in range(1, 6):
        index.append(BASE + i, i * 10)
    index.resize(16 * 8)
    assert index.max_entries == 16 and index.entries == 5
    index.resize(8)  # never below the valid entries
    assert index.entries == 5 and index.lookup(BASE + 5).position == 50


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1)),
        min_size=1,
        max_size=12,
    ),
    st.integers(0, 2**31),
)
def test_sanity_check_of_whole_columns_matches_the_entry_loop(
    tmp_path_factory: pytest.TempPathFactory, raw: list[tuple[int, int]], log_size: int
) -> None:
    """The column check (C speed) and the per-entry rule agree on every file: an index whose
    entries break the order anywhere, or point past the log, is rejected."""
    path = tmp_path_factory.mktemp("idx") / "00000000000000000045.index"
    path.write_bytes(b"".join(struct.pack(">ii", r, p) for r, p in raw))
    index = OffsetIndex(path, BASE, len(raw) * 8, writable=False)
    offsets = [BASE + r for r, _ in raw]
    positions = [p for _, p in raw]
    valid = (
        offsets[-1] >= BASE
        and all(b > a for a, b in zip([-1, *offsets], offsets, strict=False))
        and all(b >= a for a, b in zip([-1, *positions], positions, strict=False))
        and all(p < max(log_size, 1) for p in positions)
    )
    if valid:
        index.sanity_check(log_size)
    else:
        with pytest.raises(CorruptIndexError):
            index.sanity_check(log_size)
    index.close_without_trim()
