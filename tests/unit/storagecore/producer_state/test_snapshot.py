"""The ``.snapshot`` codec against bytes assembled by hand from Kafka's ProducerSnapshot
schema (version 1), and its refusals of damaged files."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storagecore.errors import CorruptSnapshotError
from storagecore.producer_state import BatchMetadata, ProducerStateEntry
from storagecore.producer_state.snapshot import (
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
    snapshot_file,
    write_snapshot,
)
from storagecore.records.crc import crc32c


def hand_made(*entries: tuple[int, int, int, int, int, int, int, int]) -> bytes:
    """A snapshot written field by field: int16 version 1, uint32 CRC-32C of what follows,
    int32 count, then per entry int64 pid, int16 epoch, int32 last seq, int64 last offset,
    int32 offset delta, int64 timestamp, int32 coordinator epoch, int64 txn first offset."""
    body = struct.pack(">i", len(entries))
    for pid, epoch, last_seq, last_offset, delta, ts, coordinator, txn in entries:
        body += struct.pack(">q", pid) + struct.pack(">h", epoch) + struct.pack(">i", last_seq)
        body += struct.pack(">q", last_offset) + struct.pack(">i", delta)
        body += struct.pack(">q", ts) + struct.pack(">i", coordinator) + struct.pack(">q", txn)
    return struct.pack(">h", 1) + struct.pack(">I", crc32c(body)) + body


def entry(
    pid: int, epoch: int, *batches: BatchMetadata, txn: int | None = None, coordinator: int = -1
) -> ProducerStateEntry:
    made = ProducerStateEntry(pid, epoch, coordinator, batches[-1].timestamp if batches else -1)
    made.current_txn_first_offset = txn
    made.batches.extend(batches)
    return made


def test_encoding_matches_the_hand_made_bytes() -> None:
    producers = [
        entry(1000, 3, BatchMetadata(9, 41, 4, 1_700_000_000_123)),
        entry(7, 0, BatchMetadata(2, 5, 2, 10), BatchMetadata(6, 12, 3, 11), txn=10, coordinator=4),
        entry(8, 1),  # markers only: no batch
    ]
    expected = hand_made(
        (1000, 3, 9, 41, 4, 1_700_000_000_123, -1, -1),
        (7, 0, 6, 12, 3, 11, 4, 10),  # only the last batch is written
        (8, 1, -1, -1, 0, -1, -1, -1),
    )
    assert encode_snapshot(producers) == expected
    assert len(expected) == 10 + 3 * 46


def test_decoding_hand_made_bytes() -> None:
    data = hand_made((5, 2, 7, 99, 3, 1234, 6, 90), (6, 0, -1, -1, 0, 55, -1, -1))
    first, second = decode_snapshot(data, source="x")
    assert (first.producer_id, first.producer_epoch, first.coordinator_epoch) == (5, 2, 6)
    assert first.current_txn_first_offset == 90
    assert list(first.batches) == [BatchMetadata(7, 99, 3, 1234)]
    assert (first.batches[0].first_sequence, first.batches[0].first_offset) == (4, 96)
    assert (second.producer_id, second.last_timestamp, second.is_empty) == (6, 55, True)
    assert second.current_txn_first_offset is None


def test_an_empty_snapshot_is_ten_bytes() -> None:
    assert encode_snapshot([]) == hand_made() == struct.pack(">hIi", 1, crc32c(b"\0" * 4), 0)
    assert decode_snapshot(hand_made(), source="x") == []


def test_sequence_wraps_in_first_sequence() -> None:
    # Last sequence 1 with delta 3: the batch began at 2^31 - 2.
    assert BatchMetadata(1, 10, 3, 0).first_sequence == (1 << 31) - 2


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:9], r"9 bytes, shorter than the 10-byte header"),
        (lambda b: b[:-1], r"entry count 1 at offset 6 does not match the file's 55 bytes"),
        (lambda b: b + b"\0", r"does not match the file's 57 bytes"),
        (lambda b: struct.pack(">h", 2) + b[2:], r"unknown snapshot version 2 at offset 0"),
        (lambda b: struct.pack(">h", 0) + b[2:], r"unknown snapshot version 0"),
        (lambda b: b[:6] + struct.pack(">i", -1) + b[10:], r"entry count -1"),
        (lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:], r"CRC at offset 2 is 0x"),
        (lambda b: b[:2] + b"\0\0\0\0" + b[6:], r"CRC at offset 2 is 0x00000000"),
    ],
)
def test_damaged_snapshots_are_refused_naming_the_file(damage: object, message: str) -> None:
    good = hand_made((5, 2, 7, 99, 3, 1234, 6, -1))
    assert callable(damage)
    with pytest.raises(CorruptSnapshotError, match=r"^dir/00\.snapshot: .*" + message):
        decode_snapshot(damage(good), source="dir/00.snapshot")


def test_negative_offset_delta_is_refused() -> None:
    with pytest.raises(CorruptSnapshotError, match="negative offset delta -2"):
        decode_snapshot(hand_made((5, 2, 7, 99, -2, 1234, 6, -1)), source="s")


def test_file_name_and_atomic_write(tmp_path: Path) -> None:
    path = snapshot_file(tmp_path, 42)
    assert path.name == "00000000000000000042.snapshot"
    write_snapshot(path, [entry(1, 0, BatchMetadata(0, 0, 0, 5))])
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no .tmp left
    assert path.read_bytes() == hand_made((1, 0, 0, 0, 0, 5, -1, -1))
    assert [e.producer_id for e in read_snapshot(path)] == [1]


int16 = st.integers(-(1 << 15), (1 << 15) - 1)
int32 = st.integers(-(1 << 31), (1 << 31) - 1)
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
snapshot_entries = st.lists(
    st.tuples(
        int64, int16, st.integers(0, (1 << 31) - 1), st.integers(0, 1 << 62),
        st.integers(0, (1 << 31) - 1), int64, int32, st.integers(-1, 1 << 62),
    ),
    max_size=20,
    unique_by=lambda e: e[0],
)  # fmt: skip


@given(snapshot_entries)
def test_round_trip_and_hand_made_agree(rows: list[tuple[int, ...]]) -> None:
    rows = [r for r in rows if r[4] <= r[3]]  # the first offset of a batch is >= 0
    producers = [
        entry(pid, epoch, BatchMetadata(seq, offset, delta, ts), txn=None if txn < 0 else txn,
              coordinator=coordinator)
        for pid, epoch, seq, offset, delta, ts, coordinator, txn in rows
    ]  # fmt: skip
    data = encode_snapshot(producers)
    assert data == hand_made(*rows)  # type: ignore[arg-type]
    decoded = decode_snapshot(data, source="x")
    assert [
        (e.producer_id, e.producer_epoch, e.coordinator_epoch, e.last_timestamp,
         e.current_txn_first_offset, list(e.batches))
        for e in decoded
    ] == [
        (e.producer_id, e.producer_epoch, e.coordinator_epoch, e.last_timestamp,
         e.current_txn_first_offset, list(e.batches))
        for e in producers
    ]  # fmt: skip


@given(st.binary(max_size=200), st.booleans())
def test_arbitrary_bodies_are_decoded_or_refused_never_crash(body: bytes, good_crc: bool) -> None:
    data = struct.pack(">hI", 1, crc32c(body) if good_crc else crc32c(body) ^ 1) + body
    try:
        entries = decode_snapshot(data, source="x")
    except CorruptSnapshotError:
        return
    assert good_crc
    assert len(data) == 10 + 46 * len(entries)
