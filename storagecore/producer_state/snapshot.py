"""Producer-state snapshot files, ``<20-digit offset>.snapshot``, in Kafka's exact format.

Kafka's ``ProducerStateManager`` writes one at every segment roll (named after the new
segment's base offset), at a clean shutdown and after loading (named after the log end offset);
the loader reads the newest one instead of replaying the whole log. The layout is Kafka's
``ProducerSnapshot`` message, version 1 (``storage/src/main/resources/message/
ProducerSnapshot.json``), big-endian, written here once:

====== ======= =====================================================================
offset size    field
====== ======= =====================================================================
0      2       version int16, always 1
2      4       crc uint32: CRC-32C of every byte from offset 6 to the end
6      4       entry count int32
10     46 * n  entries (below), in no particular order
====== ======= =====================================================================

Each entry: producer id int64, epoch int16, last sequence int32, last offset int64 (-1: no
data batch kept), offset delta int32 (last offset - first offset of that batch), timestamp
int64 (max timestamp of the producer's last entry), coordinator epoch int32, first offset of
the open transaction int64 (-1: none). Only the producer's *last* batch fits in an entry: a
producer loaded from a snapshot knows one batch, and the replay of the log after the snapshot
adds the later ones (up to five).

A file that is too short, has a wrong version, a count that does not match its length, or a
bad CRC raises :class:`~storagecore.errors.CorruptSnapshotError` naming the file; the manager
then falls back to an older snapshot (:mod:`storagecore.producer_state.manager`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from storagecore import durability, files
from storagecore.errors import CorruptSnapshotError
from storagecore.producer_state.entry import BatchMetadata, ProducerStateEntry
from storagecore.records.crc import crc32c

SNAPSHOT_VERSION: Final = 1

HEADER: Final = struct.Struct(">hIi")
"""version int16, crc uint32, entry count int32."""
ENTRY: Final = struct.Struct(">qhiqiqiq")
"""producer id, epoch, last sequence, last offset, offset delta, timestamp, coordinator
epoch, current transaction first offset."""

VERSION_OFFSET: Final = 0
CRC_OFFSET: Final = VERSION_OFFSET + struct.calcsize(">h")
ENTRIES_OFFSET: Final = CRC_OFFSET + struct.calcsize(">I")
"""Where the CRC's coverage starts: the entry count."""
FIRST_ENTRY_OFFSET: Final = ENTRIES_OFFSET + struct.calcsize(">i")

assert HEADER.size == FIRST_ENTRY_OFFSET == 10
assert ENTRY.size == 46


def snapshot_file(directory: Path, offset: int) -> Path:
    return directory / f"{files.filename_prefix(offset)}{files.SNAPSHOT_SUFFIX}"


def is_snapshot_file_name(name: str) -> bool:
    return files.is_segment_file_name(name) and name.endswith(files.SNAPSHOT_SUFFIX)


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The bytes of a snapshot holding ``entries`` (each with at most its last batch)."""
    body = bytearray(FIRST_ENTRY_OFFSET)
    count = 0
    for entry in entries:
        body += ENTRY.pack(
            entry.producer_id,
            entry.producer_epoch,
            entry.last_sequence,
            entry.last_data_offset,
            entry.last_offset_delta,
            entry.last_timestamp,
            entry.coordinator_epoch,
            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset,
        )
        count += 1
    struct.pack_into(">i", body, ENTRIES_OFFSET, count)
    crc = crc32c(memoryview(body)[ENTRIES_OFFSET:])
    HEADER.pack_into(body, 0, SNAPSHOT_VERSION, crc, count)
    return bytes(body)


def decode_snapshot(data: bytes, *, source: str) -> list[ProducerStateEntry]:
    """The entries of a snapshot; CorruptSnapshotError (naming ``source``) for a bad one."""
    if len(data) < FIRST_ENTRY_OFFSET:
        raise CorruptSnapshotError(
            f"{source}: {len(data)} bytes, shorter than the {FIRST_ENTRY_OFFSET}-byte header"
        )
    version, stored_crc, count = HEADER.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(
            f"{source}: unknown snapshot version {version} at offset {VERSION_OFFSET} "
            f"(expected {SNAPSHOT_VERSION})"
        )
    expected_size = FIRST_ENTRY_OFFSET + count * ENTRY.size
    if count < 0 or expected_size != len(data):
        raise CorruptSnapshotError(
            f"{source}: entry count {count} at offset {ENTRIES_OFFSET} does not match the "
            f"file's {len(data)} bytes"
        )
    computed_crc = crc32c(memoryview(data)[ENTRIES_OFFSET:])
    if computed_crc != stored_crc:
        raise CorruptSnapshotError(
            f"{source}: CRC at offset {CRC_OFFSET} is {stored_crc:#010x}, the content's is "
            f"{computed_crc:#010x}"
        )
    entries: list[ProducerStateEntry] = []
    for position in range(FIRST_ENTRY_OFFSET, len(data), ENTRY.size):
        (
            producer_id,
            epoch,
            last_sequence,
            last_offset,
            offset_delta,
            timestamp,
            coordinator_epoch,
            txn_first_offset,
        ) = ENTRY.unpack_from(data, position)
        if last_offset >= 0 and offset_delta < 0:
            raise CorruptSnapshotError(
                f"{source}: producer {producer_id} at offset {position} has a negative "
                f"offset delta {offset_delta}"
            )
        entry = ProducerStateEntry(
            producer_id,
            epoch,
            coordinator_epoch,
            timestamp,
            txn_first_offset if txn_first_offset >= 0 else None,
        )
        if last_offset >= 0:
            entry.batches.append(BatchMetadata(last_sequence, last_offset, offset_delta, timestamp))
        entries.append(entry)
    return entries


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry], *, sync: bool = True) -> None:
    """Replace ``path`` atomically: ``<path>.tmp``, fsync, rename, fsync the directory. A
    crash leaves the previous content (or none) and possibly a ``.snapshot.tmp``, which the
    manager deletes when it loads. With ``sync=False`` both fsyncs are the caller's, later
    (:mod:`storagecore.roll_flush`); a machine crash before then can leave a short or empty
    snapshot, which the load reports as corrupt and replaces with an older one or the log."""
    durability.write_atomically(path, encode_snapshot(entries), sync=sync)


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    """The entries of the snapshot file ``path``; CorruptSnapshotError for a bad file (an
    OSError for one that cannot be read)."""
    return decode_snapshot(path.read_bytes(), source=str(path))
