"""One transactional id's state (Kafka's ``TransactionMetadata``) and its record in the
compacted ``__transaction_state`` topic, byte for byte as Kafka's transaction coordinator
writes it (key: ``TransactionLogKey`` v0; value: ``TransactionLogValue`` v0, read v0 and v1).

The coordinator (:mod:`.transaction_coordinator`) owns the metadata; this module holds no
state and does no I/O. A tombstone (value null) removes an expired transactional id.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from typing import Any, Final

from storagecore.config import TopicPartition
from storageworker.kafka.offset_records import offsets_partition
from storageworker.kafka.schema import decode, encode
from storageworker.kafka.txn_messages import (
    TRANSACTION_LOG_KEY,
    TRANSACTION_LOG_VALUE,
    TRANSACTION_LOG_VALUE_VERSIONS,
)
from storageworker.kafka.wire import ProtocolError, Reader, Writer

TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
#: Kafka bumps to a new producer id rather than let the epoch reach Short.MAX_VALUE.
EPOCH_MAX: Final = 32767
_I16: Final = struct.Struct(">h")


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState`` ids, as stored in ``transaction_status``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def is_preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclasses.dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = dataclasses.field(default_factory=set)
    start_ms: int = -1
    """When the ongoing transaction began (its first AddPartitionsToTxn); -1 when none."""
    last_update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID
    """The producer id before the last bump to a new one (a retried InitProducerId)."""
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    """The epoch before the last bump (a retried InitProducerId answers the same epoch)."""

    def copy(self) -> TransactionMetadata:
        return dataclasses.replace(self, partitions=set(self.partitions))

    def expired(self, now_ms: int) -> bool:
        """An ongoing transaction older than its timeout (the coordinator aborts it)."""
        return self.state is TxnState.ONGOING and now_ms > self.start_ms + self.timeout_ms


def partition_for(transactional_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % transactionTopicPartitionCount``."""
    return offsets_partition(transactional_id, partitions)


def key_bytes(transactional_id: str) -> bytes:
    out = Writer().int16(0)
    return encode(
        TRANSACTION_LOG_KEY, out, 0, False, {"transactional_id": transactional_id}
    ).bytes()


def value_bytes(meta: TransactionMetadata) -> bytes:
    """``TransactionLogValue`` v0. Kafka writes null partitions for an Empty transaction and
    the sorted partitions by topic otherwise."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(meta.partitions, key=lambda tp: (tp.topic, tp.partition)):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    values: dict[str, Any] = {
        "producer_id": meta.producer_id,
        "producer_epoch": meta.producer_epoch,
        "transaction_timeout_ms": meta.timeout_ms,
        "transaction_status": int(meta.state),
        "transaction_partitions": None
        if meta.state is TxnState.EMPTY
        else [{"topic": t, "partition_ids": ids} for t, ids in by_topic.items()],
        "transaction_last_update_timestamp_ms": meta.last_update_ms,
        "transaction_start_timestamp_ms": meta.start_ms,
    }
    return encode(TRANSACTION_LOG_VALUE, Writer().int16(0), 0, False, values).bytes()


def parse_record(
    key: bytes, value: bytes | None, where: str
) -> tuple[str, TransactionMetadata | None]:
    """(transactional id, its metadata or None for a tombstone). Raises ProtocolError naming
    ``where`` (the partition and offset) for a record that is not Kafka's."""
    reader = Reader(key)
    version = reader.int16()
    if version != 0:
        raise ProtocolError(f"{where}: transaction log key version {version}, not 0")
    transactional_id = decode(TRANSACTION_LOG_KEY, reader, 0, False)["transactional_id"]
    if value is None:
        return transactional_id, None
    reader = Reader(value)
    version = reader.int16()
    if version not in TRANSACTION_LOG_VALUE_VERSIONS:
        raise ProtocolError(f"{where}: transaction log value version {version} is unknown")
    data = decode(TRANSACTION_LOG_VALUE, reader, version, version >= 1)
    try:
        state = TxnState(data["transaction_status"])
    except ValueError:
        raise ProtocolError(
            f"{where}: transaction {transactional_id!r} has unknown status "
            f"{data['transaction_status']}"
        ) from None
    partitions = {
        TopicPartition(item["topic"], index)
        for item in data["transaction_partitions"] or ()
        for index in item["partition_ids"]
    }
    meta = TransactionMetadata(
        transactional_id,
        data["producer_id"],
        data["producer_epoch"],
        data["transaction_timeout_ms"],
        state,
        partitions,
        data["transaction_start_timestamp_ms"],
        data["transaction_last_update_timestamp_ms"],
        data["previous_producer_id"],
    )
    return transactional_id, meta
