"""The APIs of the ``kafka`` port: request bodies in, response bodies out.

Versions served (advertised by ApiVersions; clients pick the highest both sides know):

====================  ====  ========  =============================================
API                   key   versions  notes
====================  ====  ========  =============================================
Produce               0     3-8       acks 0/1/-1 (one node: all = 1), per-partition errors
Fetch                 1     4-11      read_uncommitted, byte limits, max wait / min bytes
ListOffsets           2     1-5       earliest (-2), latest (-1), by timestamp
Metadata              3     1-8       this worker as the only broker, leader of everything
ApiVersions           18    0-2       a v3+ request gets UNSUPPORTED_VERSION in v0 format
====================  ====  ========  =============================================

Only non-flexible versions are served for now: every client in use negotiates down to them
(Kafka's own brokers kept them). Unknown topics answer UNKNOWN_TOPIC_OR_PARTITION; topics are
never created by a request. Records are appended through storagecore's leader path
(:meth:`storagecore.log.Log.append`), which validates them exactly as Kafka's broker does; its
errors map to Kafka's codes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from storagecore.config import TopicPartition
from storagecore.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogDirOfflineError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    StorageError,
)
from storagecore.log import FetchResult
from storageworker.kafka.wire import Reader, Writer


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    MESSAGE_TOO_LARGE = 10
    INVALID_REQUIRED_ACKS = 21
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_VERSION = 35
    KAFKA_STORAGE_ERROR = 56
    INVALID_RECORD = 87


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    API_VERSIONS = 18


SUPPORTED: Final[dict[ApiKey, tuple[int, int]]] = {
    ApiKey.PRODUCE: (3, 8),
    ApiKey.FETCH: (4, 11),
    ApiKey.LIST_OFFSETS: (1, 5),
    ApiKey.METADATA: (1, 8),
    ApiKey.API_VERSIONS: (0, 2),
}

EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1


class Broker(Protocol):
    """What the APIs need from the worker (blocking calls run in a thread)."""

    node_id: int
    host: str
    port: int
    cluster_id: str

    def partitions(self) -> dict[str, int]:
        """Topic name → partition count of every topic this worker serves."""

    def append(self, tp: TopicPartition, records: bytes) -> tuple[int, int, int]:
        """(base offset, log append time or -1, log start offset); raises StorageError."""

    def read(self, tp: TopicPartition, offset: int, max_bytes: int) -> FetchResult: ...

    def list_offset(self, tp: TopicPartition, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) for earliest (-2), latest (-1) or a timestamp; (-1, -1) when
        no record is that late."""


@dataclasses.dataclass
class Request:
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Reader


def error_for(exc: Exception) -> ErrorCode:
    if isinstance(exc, RecordTooLargeError):
        return ErrorCode.MESSAGE_TOO_LARGE
    if isinstance(exc, CorruptRecordError):
        return ErrorCode.CORRUPT_MESSAGE
    if isinstance(exc, InvalidRecordError):
        text = str(exc)
        return ErrorCode.INVALID_TIMESTAMP if "timestamp" in text else ErrorCode.INVALID_RECORD
    if isinstance(exc, OffsetOutOfRangeError):
        return ErrorCode.OFFSET_OUT_OF_RANGE
    if isinstance(exc, LogDirOfflineError):
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.UNKNOWN_SERVER_ERROR


# -- ApiVersions -----------------------------------------------------------------------------


def api_versions(request: Request) -> bytes:
    """v0-v2; a newer request is answered in v0 with UNSUPPORTED_VERSION and our versions
    (Kafka's rule: the client then retries with a version from the list)."""
    version = request.version
    supported = version <= SUPPORTED[ApiKey.API_VERSIONS][1]
    out = Writer().int16(ErrorCode.NONE if supported else ErrorCode.UNSUPPORTED_VERSION)
    out.array_length(len(SUPPORTED))
    for key, (low, high) in sorted(SUPPORTED.items()):
        out.int16(key).int16(low).int16(high)
    if supported and version >= 1:
        out.int32(0)  # throttle_time_ms
    return out.bytes()


# -- Metadata --------------------------------------------------------------------------------


def metadata(request: Request, broker: Broker) -> bytes:
    version, body = request.version, request.body
    wanted = body.array(body.string)
    if version >= 4:
        body.boolean()  # allow_auto_topic_creation: never
    if version >= 8:
        body.boolean()
        body.boolean()
    served = broker.partitions()
    names = sorted(served) if wanted is None else wanted
    out = Writer()
    if version >= 3:
        out.int32(0)  # throttle_time_ms
    out.array_length(1)
    out.int32(broker.node_id).nullable_string(broker.host).int32(broker.port)
    out.nullable_string(None)  # rack
    if version >= 2:
        out.nullable_string(broker.cluster_id)
    out.int32(broker.node_id)  # controller
    out.array_length(len(names))
    for name in names:
        count = served.get(name)
        out.int16(ErrorCode.NONE if count is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        out.nullable_string(name).boolean(False)
        out.array_length(count or 0)
        for partition in range(count or 0):
            out.int16(ErrorCode.NONE).int32(partition).int32(broker.node_id)
            if version >= 7:
                out.int32(0)  # leader epoch
            out.array_length(1).int32(broker.node_id)  # replicas
            out.array_length(1).int32(broker.node_id)  # isr
            if version >= 5:
                out.array_length(0)  # offline replicas
        if version >= 8:
            out.int32(-2147483648)  # topic authorized operations: not requested
    if version >= 8:
        out.int32(-2147483648)
    return out.bytes()


# -- Produce ---------------------------------------------------------------------------------


@dataclasses.dataclass
class ProducePartition:
    index: int
    records: bytes | None
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1


def produce(request: Request, broker: Broker) -> tuple[bytes | None, int]:
    """The response (None for acks=0) and the bytes appended."""
    version, body = request.version, request.body
    body.nullable_string()  # transactional_id
    acks = body.int16()
    body.int32()  # timeout_ms

    def partition() -> ProducePartition:
        return ProducePartition(body.int32(), body.nullable_bytes())

    def topic() -> tuple[str, list[ProducePartition]]:
        return body.string(), body.array(partition) or []

    topics = body.array(topic) or []
    served = broker.partitions()
    appended = 0
    for name, partitions in topics:
        for item in partitions:
            if acks not in (0, 1, -1):
                item.error = ErrorCode.INVALID_REQUIRED_ACKS
                continue
            if name not in served or not 0 <= item.index < served[name]:
                item.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if not item.records:
                item.error, item.message = ErrorCode.CORRUPT_MESSAGE, "no records"
                continue
            try:
                item.base_offset, item.log_append_time, item.log_start_offset = broker.append(
                    TopicPartition(name, item.index), item.records
                )
                appended += len(item.records)
            except StorageError as exc:
                item.error, item.message = error_for(exc), str(exc)
    if acks == 0:
        return None, appended
    out = Writer().array_length(len(topics))
    for name, partitions in topics:
        out.nullable_string(name).array_length(len(partitions))
        for item in partitions:
            out.int32(item.index).int16(item.error).int64(item.base_offset)
            out.int64(item.log_append_time)
            if version >= 5:
                out.int64(item.log_start_offset)
            if version >= 8:
                out.array_length(0).nullable_string(item.message)
    out.int32(0)  # throttle_time_ms
    return out.bytes(), appended


# -- Fetch -----------------------------------------------------------------------------------


@dataclasses.dataclass
class FetchPartition:
    index: int
    offset: int
    max_bytes: int
    error: ErrorCode = ErrorCode.NONE
    result: FetchResult | None = None


async def fetch(
    request: Request,
    broker: Broker,
    run: Callable[[Callable[[], Any]], Awaitable[Any]],
) -> tuple[bytes, int]:
    """The response and the record bytes sent. Waits up to max_wait_ms for min_bytes."""
    version, body = request.version, request.body
    body.int32()  # replica_id
    max_wait_ms = body.int32()
    min_bytes = body.int32()
    max_bytes = body.int32()
    body.int8()  # isolation level: read_uncommitted and read_committed read the same here
    if version >= 7:
        body.int32()  # session id: no fetch sessions (full fetches)
        body.int32()

    def partition() -> FetchPartition:
        index = body.int32()
        if version >= 9:
            body.int32()  # current leader epoch
        offset = body.int64()
        if version >= 5:
            body.int64()  # log start offset (of a follower)
        return FetchPartition(index, offset, body.int32())

    def topic() -> tuple[str, list[FetchPartition]]:
        return body.string(), body.array(partition) or []

    topics = body.array(topic) or []
    if version >= 7:
        body.array(lambda: (body.string(), body.array(body.int32)))
    if version >= 11:
        body.string()  # rack id
    served = broker.partitions()
    deadline = time.monotonic() + max(max_wait_ms, 0) / 1000

    def read_all() -> int:
        budget = max_bytes if max_bytes > 0 else 1 << 30
        total = 0
        for name, partitions in topics:
            for item in partitions:
                item.error, item.result = ErrorCode.NONE, None
                if name not in served or not 0 <= item.index < served[name]:
                    item.error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                limit = max(min(item.max_bytes, budget - total), 0)
                try:
                    item.result = broker.read(TopicPartition(name, item.index), item.offset, limit)
                except StorageError as exc:
                    item.error = error_for(exc)
                    continue
                total += len(item.result.records)
        return total

    total = await run(read_all)
    while total < max(min_bytes, 1) and time.monotonic() < deadline:
        await asyncio.sleep(min(0.02, max(deadline - time.monotonic(), 0)))
        total = await run(read_all)
    out = Writer().int32(0)  # throttle_time_ms
    if version >= 7:
        out.int16(ErrorCode.NONE).int32(0)  # error, session id
    out.array_length(len(topics))
    for name, partitions in topics:
        out.nullable_string(name).array_length(len(partitions))
        for item in partitions:
            result = item.result
            high = result.high_watermark if result else -1
            out.int32(item.index).int16(item.error).int64(high)
            out.int64(high)  # last stable offset
            if version >= 5:
                out.int64(result.log_start_offset if result else -1)
            out.array_length(None)  # aborted transactions: none reported (read_uncommitted)
            if version >= 11:
                out.int32(-1)  # preferred read replica
            out.nullable_bytes(result.records if result else None)
    return out.bytes(), total


# -- ListOffsets -----------------------------------------------------------------------------


def list_offsets(request: Request, broker: Broker) -> bytes:
    version, body = request.version, request.body
    body.int32()  # replica id
    if version >= 2:
        body.int8()  # isolation level

    def partition() -> tuple[int, int]:
        index = body.int32()
        if version >= 4:
            body.int32()  # current leader epoch
        return index, body.int64()

    def topic() -> tuple[str, list[tuple[int, int]]]:
        return body.string(), body.array(partition) or []

    topics = body.array(topic) or []
    served = broker.partitions()
    out = Writer()
    if version >= 2:
        out.int32(0)  # throttle_time_ms
    out.array_length(len(topics))
    for name, partitions in topics:
        out.nullable_string(name).array_length(len(partitions))
        for index, timestamp in partitions:
            error, found_timestamp, offset = ErrorCode.NONE, -1, -1
            if name not in served or not 0 <= index < served[name]:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                try:
                    found_timestamp, offset = broker.list_offset(
                        TopicPartition(name, index), timestamp
                    )
                except StorageError as exc:
                    error = error_for(exc)
            out.int32(index).int16(error).int64(found_timestamp).int64(offset)
            if version >= 4:
                out.int32(0)  # leader epoch
    return out.bytes()
