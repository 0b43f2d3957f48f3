"""The records of ``__consumer_offsets``: which partition a group's offsets go to, and the
offset-commit key (v1) and value (v3) as Kafka writes them.

Used by :mod:`.groups` (which appends and reads them back); it holds no state and does no I/O.
Group metadata records (key v2) are not written: membership is not persisted.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from storagecore.config import TopicPartition
    from storagecore.records.batch import RecordBatch

logger = logging.getLogger(__name__)

OFFSETS_TOPIC: Final = "__consumer_offsets"

_KEY_V1: Final = 1
_VALUE_V3: Final = 3
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return _I16.pack(len(data)) + data


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(_KEY_V1) + _string(group) + _string(topic) + _I32.pack(partition)


def offset_value(offset: int, leader_epoch: int, metadata: str, commit_ms: int) -> bytes:
    return (
        _I16.pack(_VALUE_V3)
        + _I64.pack(offset)
        + _I32.pack(leader_epoch)
        + _string(metadata)
        + _I64.pack(commit_ms)
    )


@dataclasses.dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_ms: int


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: struct.Struct) -> int:
        (value,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return int(value)

    def string(self) -> str:
        size = self.take(_I16)
        if size < 0:
            return ""
        text = self.data[self.pos : self.pos + size].decode("utf-8")
        self.pos += size
        return text


def parse_offset_record(
    key: bytes, value: bytes | None
) -> tuple[tuple[str, str, int], CommittedOffset | None] | None:
    """((group, topic, partition), offset or None for a tombstone); None for a record that
    is not an offset commit (group metadata, key v2). Raises ValueError/struct.error on
    malformed bytes."""
    cursor = _Cursor(key)
    version = cursor.take(_I16)
    if version not in (0, 1):
        return None
    ident = (cursor.string(), cursor.string(), cursor.take(_I32))
    if value is None:
        return ident, None
    cursor = _Cursor(value)
    version = cursor.take(_I16)
    offset = cursor.take(_I64)
    epoch = cursor.take(_I32) if version >= 3 else -1
    metadata = cursor.string()
    commit_ms = cursor.take(_I64)
    return ident, CommittedOffset(offset, epoch, metadata, commit_ms)


def batch_offset_commits(
    batch: RecordBatch, tp: TopicPartition
) -> Iterator[tuple[str, str, int, CommittedOffset | None]]:
    """The offset commits (group, topic, partition, offset; None for a tombstone) of a batch of
    ``__consumer_offsets`` partition ``tp``; a record that is not an offset commit (a group's
    metadata, or one that does not parse: logged with its offset) is skipped."""
    for record in batch.records():
        if record.key is None:
            continue
        try:
            parsed = parse_offset_record(record.key, record.value)
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            logger.warning(
                "%s offset %d: not an offset commit record, skipped: %s", tp, record.offset, exc
            )
            continue
        if parsed is not None:
            (group, topic, partition), committed = parsed
            yield group, topic, partition, committed
