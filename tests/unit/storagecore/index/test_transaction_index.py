"""Kafka's TransactionIndexTest scenarios (kafka-log-layer.md §2.4) and the search against a
simple model."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storagecore.errors import CorruptIndexError
from storagecore.index.transaction_index import ENTRY, AbortedTxn, TransactionIndex

BASE = 0


def make(tmp_path: Path, base: int = BASE) -> TransactionIndex:
    return TransactionIndex(tmp_path / f"{base:020d}.txnindex", base)


def test_entry_bytes_are_kafkas(tmp_path: Path) -> None:
    """version int16 0, producerId, firstOffset, lastOffset, lastStableOffset: big-endian."""
    index = make(tmp_path)
    index.append(AbortedTxn(first_offset=5, last_offset=9, producer_id=77, last_stable_offset=6))
    data = index.path.read_bytes()
    assert len(data) == 34
    assert data == struct.pack(">hqqqq", 0, 77, 5, 9, 6)


def test_no_file_until_the_first_entry_and_no_descriptor_held(tmp_path: Path) -> None:
    index = make(tmp_path)
    assert index.entries() == [] and not index.path.exists()
    fds = len(list(Path("/proc/self/fd").iterdir()))
    index.append(AbortedTxn(0, 3, 1, 4))
    assert len(list(Path("/proc/self/fd").iterdir())) == fds
    assert index.path.exists()


def test_entries_survive_a_reopen(tmp_path: Path) -> None:
    first = make(tmp_path)
    txns = [AbortedTxn(0, 5, 1, 2), AbortedTxn(2, 8, 2, 9), AbortedTxn(9, 12, 1, 13)]
    for txn in txns:
        first.append(txn)
    first.flush()
    assert make(tmp_path).entries() == txns


def test_last_offset_must_increase(tmp_path: Path) -> None:
    index = make(tmp_path)
    index.append(AbortedTxn(0, 5, 1, 6))
    with pytest.raises(AssertionError, match="does not follow"):
        index.append(AbortedTxn(1, 5, 2, 6))
    with pytest.raises(AssertionError, match="does not follow"):
        index.append(AbortedTxn(1, 4, 2, 6))
    assert index.entries() == [AbortedTxn(0, 5, 1, 6)]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (ENTRY.pack(0, 1, 0, 5, 6)[:20], "not a multiple of the entry size"),
        (ENTRY.pack(1, 1, 0, 5, 6), "version 1"),
        (ENTRY.pack(0, 1, 0, 5, 6) + ENTRY.pack(0, 2, 1, 5, 6), "out of order"),
    ],
)
def test_a_corrupt_file_fails_its_check_naming_it(
    tmp_path: Path, data: bytes, problem: str
) -> None:
    index = make(tmp_path)
    index.path.write_bytes(data)
    with pytest.raises(CorruptIndexError, match=problem) as failure:
        index.sanity_check()
    assert str(index.path) in str(failure.value)


def test_an_entry_below_the_segment_base_fails_the_check(tmp_path: Path) -> None:
    """Kafka's testSanityCheck: every last offset is at or above the segment's base."""
    index = make(tmp_path, base=100)
    index.path.write_bytes(ENTRY.pack(0, 1, 0, 99, 100))
    with pytest.raises(CorruptIndexError, match="below the segment base 100"):
        index.sanity_check()


def test_truncate_drops_markers_at_and_after_the_offset(tmp_path: Path) -> None:
    index = make(tmp_path)
    txns = [AbortedTxn(0, 2, 1, 3), AbortedTxn(1, 5, 2, 6), AbortedTxn(7, 9, 1, 10)]
    index.append_all(txns)
    index.truncate_to(9)
    assert index.entries() == txns[:2]
    assert make(tmp_path).entries() == txns[:2]
    index.truncate_to(3)
    assert make(tmp_path).entries() == txns[:1]
    index.truncate_to(0)
    assert index.entries() == [] and not index.path.exists()
    index.append(AbortedTxn(0, 1, 3, 2))  # appends again after a truncation
    assert make(tmp_path).entries() == [AbortedTxn(0, 1, 3, 2)]


def test_rename_follows_the_segment_with_or_without_a_file(tmp_path: Path) -> None:
    index = make(tmp_path)
    index.rename_to(index.path.with_name(index.path.name + ".cleaned"))
    assert not index.path.exists()
    index.append(AbortedTxn(0, 1, 3, 2))
    target = tmp_path / "00000000000000000000.txnindex.swap"
    index.rename_to(target)
    assert target.exists() and index.path == target
    assert TransactionIndex(target, BASE).entries() == [AbortedTxn(0, 1, 3, 2)]
    index.delete()
    assert not target.exists()


def test_collect_stops_once_the_lso_reaches_the_upper_bound(tmp_path: Path) -> None:
    """Kafka's testCollectAbortedTransactions: complete when an entry's LSO >= the bound."""
    index = make(tmp_path)
    txns = [AbortedTxn(0, 10, 0, 11), AbortedTxn(5, 20, 1, 21), AbortedTxn(15, 30, 2, 31)]
    index.append_all(txns)
    result = index.collect(0, 32)
    assert result.aborted == txns and not result.complete
    result = index.collect(0, 21)
    assert result.aborted == txns[:2] and result.complete
    result = index.collect(11, 21)
    assert result.aborted == txns[1:2] and result.complete
    result = index.collect(31, 40)
    assert result.aborted == [] and not result.complete


@st.composite
def _transactions(draw: st.DrawFn) -> list[AbortedTxn]:
    offset = 0
    txns: list[AbortedTxn] = []
    for _ in range(draw(st.integers(0, 12))):
        first = offset + draw(st.integers(0, 5))
        last = first + draw(st.integers(0, 5))
        txns.append(AbortedTxn(first, last, draw(st.integers(0, 3)), last + 1))
        offset = last + 1
    return txns


@settings(max_examples=60, deadline=None)
@given(txns=_transactions(), fetch=st.integers(0, 80), span=st.integers(0, 40))
def test_collect_matches_a_model(
    tmp_path_factory: pytest.TempPathFactory, txns: list[AbortedTxn], fetch: int, span: int
) -> None:
    index = make(tmp_path_factory.mktemp("txn"))
    index.append_all(txns)
    upper = fetch + span
    result = index.collect(fetch, upper)
    expected = [t for t in txns if t.last_offset >= fetch and t.first_offset < upper]
    # The LSOs here never undercut a transaction's own end: the search may stop early only
    # past every qualifying entry.
    assert result.aborted == expected
    assert result.complete == any(t.last_stable_offset >= upper for t in txns)
