"""The APIs of the ``kafka`` port: decoded requests in, responses (as dicts) out.

Versions served (ApiVersions advertises them; clients pick the highest both sides know; the
field layouts are in :mod:`~storageworker.kafka.messages`):

=================  ===  ========  ===========================================================
API                key  versions  notes
=================  ===  ========  ===========================================================
Produce            0    3-9       acks 0/1/-1 (one node: all = 1); idempotent producers
Fetch              1    4-12      read_committed (last stable offset, aborted transactions)
                                  and read_uncommitted; byte limits, max wait / min bytes
ListOffsets        2    1-7       earliest (-2), latest (-1), max timestamp (-3), by time
Metadata           3    1-12      this worker as the only broker, leader of everything
OffsetCommit       8    2-8       stored in ``__consumer_offsets``
OffsetFetch        9    1-7
FindCoordinator    10   0-4       this worker coordinates every group and transaction
JoinGroup          11   0-9       the classic group protocol (:mod:`.groups`)
Heartbeat          12   0-4
LeaveGroup         13   0-5
SyncGroup          14   0-5
SaslHandshake      17   0-1       PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 when configured
ApiVersions        18   0-3       a newer request gets UNSUPPORTED_VERSION in v0
DeleteRecords      21   0-2       moves the log start offset (Kafka's rule)
InitProducerId     22   0-5       idempotent producers; transactional ids: the coordinator
AddPartitionsToTxn 24   0-3       transactions (:mod:`.transaction_coordinator`); Kafka 4
AddOffsetsToTxn    25   0-4       clients use transaction version 1 with this worker (it
EndTxn             26   0-4       advertises no ``transaction.version`` feature)
TxnOffsetCommit    28   0-4
DescribeConfigs    32   1-4       topic configs (Kafka's keys and values)
SaslAuthenticate   36   0-2
=================  ===  ========  ===========================================================

The Admin API's topic calls (CreateTopics, DeleteTopics, CreatePartitions,
IncrementalAlterConfigs) are :mod:`storageworker.kafka.admin_topics`'s. Unknown topics answer
UNKNOWN_TOPIC_OR_PARTITION; Metadata never creates a topic.
Records are appended through storagecore's leader path (:meth:`storagecore.log.Log.append`),
which validates them exactly as Kafka's broker does; its errors map to Kafka's codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, NamedTuple, Protocol

from storagecore.config import TopicPartition
from storagecore.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    LogDirFullError,
    LogDirOfflineError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    ResourceExhaustedError,
    StorageError,
    UnknownTopicOrPartitionError,
)
from storagecore.log import FetchResult
from storagecore.records.file_records import FileRegion
from storagecore.transactions import AbortedTxn
from storageworker.kafka import messages


class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    MESSAGE_TOO_LARGE = 10
    RECORD_LIST_TOO_LARGE = 18
    INVALID_REQUIRED_ACKS = 21
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SASL_AUTHENTICATION_FAILED = 58
    KAFKA_STORAGE_ERROR = 56
    INVALID_RECORD = 87


SUPPORTED: Final[dict[int, tuple[int, int]]] = {
    key: (m.versions.low, m.versions.high) for key, m in sorted(messages.MESSAGES.items())
}

READ_COMMITTED: Final = 1
EARLIEST_TIMESTAMP: Final = -2
LATEST_TIMESTAMP: Final = -1
MAX_TIMESTAMP: Final = -3
RESOURCE_TOPIC: Final = 2
CONFIG_SOURCE_DYNAMIC_TOPIC: Final = 1
CONFIG_SOURCE_DEFAULT: Final = 5


class Stable(NamedTuple):
    """A read and the partition's transaction facts: the last stable offset and, for a
    read_committed fetch, the aborted transactions overlapping it (else None)."""

    result: FetchResult
    last_stable_offset: int
    aborted: list[AbortedTxn] | None


@dataclasses.dataclass(frozen=True, slots=True)
class Appended:
    base_offset: int
    log_append_time: int
    log_start_offset: int
    duplicate: bool = False


class Broker(Protocol):
    """What the APIs need from the worker (blocking calls run in a thread)."""

    node_id: int
    host: str
    port: int
    cluster_id: str

    def partitions(self) -> dict[str, int]:
        """Topic name → partition count of every topic this worker serves."""

    def partition_count(self, topic: str) -> int:
        """``partitions().get(topic, 0)``, without looking at the other topics."""

    def is_internal(self, topic: str) -> bool: ...

    def append(self, tp: TopicPartition, records: bytes) -> Appended:
        """Raises StorageError (a ProducerStateError for a refused idempotent batch)."""

    def read(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        *,
        zero_copy: bool = False,
        committed: bool = False,
    ) -> Stable:
        """With ``zero_copy`` a large enough read comes back as a file region to sendfile;
        with ``committed`` (read_committed) only records below the last stable offset."""

    def last_stable_offset(self, tp: TopicPartition) -> int: ...

    def verify_transaction(self, transactional_id: str, tp: TopicPartition, records: bytes) -> int:
        """0 when a transactional batch may be appended to ``tp`` (KIP-890 part 1), else the
        error code."""

    def list_offset(self, tp: TopicPartition, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) for earliest (-2), latest (-1), max timestamp (-3) or a
        timestamp; (-1, -1) when no record is that late."""

    def delete_records(self, tp: TopicPartition, offset: int) -> int:
        """The new log start offset; -1 as ``offset`` means the high watermark."""

    def topic_config(self, topic: str) -> tuple[dict[str, str], set[str]]:
        """Kafka keys → values of a served topic, and the keys set explicitly."""

    def topic_config_read_only(self, topic: str) -> bool: ...

    def next_producer_id(self) -> int: ...


@dataclasses.dataclass
class Request:
    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    data: dict[str, Any]


def error_for(exc: Exception) -> ErrorCode | int:
    if isinstance(exc, RecordBatchTooLargeError):
        return ErrorCode.RECORD_LIST_TOO_LARGE
    if isinstance(exc, OutOfOrderSequenceError):
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    if isinstance(exc, InvalidProducerEpochError):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if isinstance(exc, InvalidTxnStateError):
        return ErrorCode.INVALID_TXN_STATE
    if isinstance(exc, RecordTooLargeError):
        return ErrorCode.MESSAGE_TOO_LARGE
    if isinstance(exc, CorruptRecordError):
        return ErrorCode.CORRUPT_MESSAGE
    if isinstance(exc, InvalidRecordError):
        text = str(exc)
        return ErrorCode.INVALID_TIMESTAMP if "timestamp" in text else ErrorCode.INVALID_RECORD
    if isinstance(exc, OffsetOutOfRangeError):
        return ErrorCode.OFFSET_OUT_OF_RANGE
    if isinstance(exc, UnknownTopicOrPartitionError):
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, LogDirOfflineError | LogDirFullError | ResourceExhaustedError):
        # Retriable for Kafka's clients (KafkaStorageException): an idempotent producer
        # retries with its sequence, so a resource error costs a retry, never a fatal error.
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.UNKNOWN_SERVER_ERROR


def _served(served: Mapping[str, int], name: str | None, index: int) -> bool:
    return name is not None and 0 <= index < served.get(name, 0)


# -- ApiVersions -----------------------------------------------------------------------------


def api_versions(version: int, supported: Mapping[int, tuple[int, int]]) -> dict[str, Any]:
    """A request newer than we know is answered in v0 with UNSUPPORTED_VERSION and our
    versions (Kafka's rule: the client then retries with a version from the list)."""
    high = supported[messages.API_VERSIONS.api_key][1]
    return {
        "error_code": ErrorCode.NONE if version <= high else ErrorCode.UNSUPPORTED_VERSION,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": top}
            for key, (low, top) in sorted(supported.items())
        ],
    }


# -- Metadata --------------------------------------------------------------------------------


def metadata(request: Request, broker: Broker) -> dict[str, Any]:
    wanted = request.data["topics"]
    served = broker.partitions()
    if wanted is None or (request.version == 0 and not wanted):
        # Every topic, the internal ones too (marked is_internal), as Kafka answers: admin
        # clients filter them unless asked (``listTopics(listInternal=true)``).
        names: list[str | None] = [name for name in sorted(served)]
    else:
        names = [t["name"] for t in wanted]
    node = broker.node_id
    topics = []
    for name in names:
        count = served.get(name) if name is not None else None
        topics.append(
            {
                "error_code": ErrorCode.NONE
                if count is not None
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                "name": name,
                "is_internal": name is not None and broker.is_internal(name),
                "partitions": [
                    {
                        "partition_index": index,
                        "leader_id": node,
                        "leader_epoch": 0,
                        "replica_nodes": [node],
                        "isr_nodes": [node],
                    }
                    for index in range(count or 0)
                ],
            }
        )
    return {
        "brokers": [{"node_id": node, "host": broker.host, "port": broker.port, "rack": None}],
        "cluster_id": broker.cluster_id,
        "controller_id": node,
        "topics": topics,
    }


# -- Produce ---------------------------------------------------------------------------------


def produce(request: Request, broker: Broker) -> tuple[dict[str, Any] | None, int]:
    """The response (None for acks=0) and the bytes appended."""
    data = request.data
    acks = data["acks"]
    appended = 0
    responses = []
    for topic in data["topic_data"]:
        name = topic["name"]
        served = broker.partition_count(name)
        answers = []
        for item in topic["partition_data"]:
            index, records = item["index"], item["records"]
            answer: dict[str, Any] = {"index": index, "base_offset": -1}
            answers.append(answer)
            if acks not in (0, 1, -1):
                answer["error_code"] = ErrorCode.INVALID_REQUIRED_ACKS
            elif not 0 <= index < served or broker.is_internal(name):
                answer["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not records:
                answer["error_code"] = ErrorCode.CORRUPT_MESSAGE
                answer["error_message"] = "no records"
            elif data["transactional_id"] is not None and (
                code := broker.verify_transaction(
                    data["transactional_id"], TopicPartition(name, index), records
                )
            ):
                answer["error_code"] = code
                answer["error_message"] = _UNVERIFIED.get(
                    code, "refused by the transaction coordinator"
                ).format(tp=f"{name}-{index}", txn=data["transactional_id"])
            else:
                try:
                    done = broker.append(TopicPartition(name, index), records)
                except StorageError as exc:
                    answer["error_code"], answer["error_message"] = error_for(exc), str(exc)
                else:
                    answer["base_offset"] = done.base_offset
                    answer["log_append_time_ms"] = done.log_append_time
                    answer["log_start_offset"] = done.log_start_offset
                    if not done.duplicate:
                        appended += len(records)
        responses.append({"name": name, "partition_responses": answers})
    if acks == 0:
        return None, appended
    return {"responses": responses}, appended


#: Why a transactional batch is refused (KIP-890 part 1), by error code.
_UNVERIFIED: Final[dict[int, str]] = {
    ErrorCode.INVALID_TXN_STATE: (
        "{tp} is not in an ongoing transaction of {txn!r} (AddPartitionsToTxn first)"
    ),
    ErrorCode.INVALID_PRODUCER_EPOCH: "the producer epoch is older than {txn!r}'s current one",
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: "the producer id is not {txn!r}'s",
}


# -- Fetch -----------------------------------------------------------------------------------


#: Reads of at least this many bytes of one partition are sent with sendfile (zero copy);
#: smaller ones are copied (a region costs a descriptor and a send call of its own).
ZERO_COPY_MIN_BYTES: Final = 16 << 10


def release(results: list[tuple[int, Stable | None]]) -> None:
    """Close the file regions of fetch results that will not be sent."""
    for _error, stable in results:
        if stable is not None and stable.result.region is not None:
            stable.result.region.close()


async def fetch(
    request: Request,
    broker: Broker,
    run: Callable[[Callable[[], Any]], Awaitable[Any]],
    next_append: Callable[[], asyncio.Event],
    *,
    zero_copy: bool = False,
) -> tuple[dict[str, Any], int]:
    """The response and the record bytes sent. Waits up to max_wait_ms for min_bytes.

    ``next_append()`` is an event set by the next append anywhere on the worker; it is taken
    *before* each read, so an append that lands between the read and the wait still wakes it.
    With ``zero_copy`` the response's large ``records`` are file regions: the caller sends
    them (sendfile) and closes them.
    """
    data = request.data
    max_bytes = data["max_bytes"] if data["max_bytes"] > 0 else 1 << 30
    served = broker.partitions()
    deadline = time.monotonic() + max(data["max_wait_ms"], 0) / 1000
    wanted = [
        (topic["topic"], p["partition"], p["fetch_offset"], p["partition_max_bytes"])
        for topic in data["topics"]
        for p in topic["partitions"]
    ]
    results: list[tuple[int, Stable | None]] = []
    committed = data["isolation_level"] == READ_COMMITTED

    def read_all() -> int:
        release(results)  # a re-read after a wait: the earlier regions are not sent
        results.clear()
        total = 0
        for name, index, offset, partition_max in wanted:
            if not _served(served, name, index):
                results.append((ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None))
                continue
            limit = max(min(partition_max, max_bytes - total), 0)
            try:
                stable = broker.read(
                    TopicPartition(name, index),
                    offset,
                    limit,
                    zero_copy=zero_copy,
                    committed=committed,
                )
            except StorageError as exc:
                results.append((error_for(exc), None))
                continue
            results.append((ErrorCode.NONE, stable))
            total += stable.result.size_bytes
        return total

    min_bytes = max(data["min_bytes"], 1)
    appended = next_append()
    try:
        total = await run(read_all)

        def failed() -> bool:  # an error answers at once, as Kafka's DelayedFetch does
            return any(error != ErrorCode.NONE for error, _result in results)

        while total < min_bytes and not failed() and time.monotonic() < deadline:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(appended.wait(), max(deadline - time.monotonic(), 0))
            appended = next_append()
            total = await run(read_all)
    except BaseException:
        release(results)
        raise
    responses: list[dict[str, Any]] = []
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (name, index, _offset, _max), (error, stable) in zip(wanted, results, strict=True):
        result = stable.result if stable is not None else None
        partitions = by_topic.get(name)
        if partitions is None:
            partitions = by_topic[name] = []
            responses.append({"topic": name, "partitions": partitions})
        # Kafka sends empty records, never null, with an error (librdkafka refuses null).
        # A file region is written by the connection with sendfile, then closed.
        records: bytes | FileRegion = b""
        if result is not None:
            records = result.region if result.region is not None else result.records
        partitions.append(
            {
                "partition_index": index,
                "error_code": error,
                "high_watermark": result.high_watermark if result else -1,
                "last_stable_offset": stable.last_stable_offset if stable else -1,
                "log_start_offset": result.log_start_offset if result else -1,
                "aborted_transactions": None
                if stable is None or stable.aborted is None
                else [
                    {"producer_id": a.producer_id, "first_offset": a.first_offset}
                    for a in stable.aborted
                ],
                "records": records,
            }
        )
    return {"responses": responses}, total


# -- ListOffsets -----------------------------------------------------------------------------


def _each_partition(
    request: Request,
    broker: Broker,
    answer: Callable[[TopicPartition, dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    """``{"topics": [{"name", "partitions": [...]}]}`` for a request addressed by topic name
    and ``partition_index``: unknown partitions get UNKNOWN_TOPIC_OR_PARTITION, the others
    ``answer(tp, partition)`` (a StorageError becomes its Kafka code)."""
    served = broker.partitions()
    topics = []
    for topic in request.data["topics"]:
        name = topic["name"]
        answers = []
        for partition in topic["partitions"]:
            index = partition["partition_index"]
            out: dict[str, Any] = {"partition_index": index, "error_code": ErrorCode.NONE}
            if not _served(served, name, index):
                out["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                try:
                    out.update(answer(TopicPartition(name, index), partition))
                except StorageError as exc:
                    out["error_code"] = error_for(exc)
            answers.append(out)
        topics.append({"name": name, "partitions": answers})
    return {"topics": topics}


def list_offsets(request: Request, broker: Broker) -> dict[str, Any]:
    def answer(tp: TopicPartition, partition: dict[str, Any]) -> dict[str, Any]:
        timestamp = partition["timestamp"]
        if timestamp < MAX_TIMESTAMP or (timestamp == MAX_TIMESTAMP and request.version < 7):
            return {"error_code": ErrorCode.UNSUPPORTED_VERSION}
        found_ts, offset = broker.list_offset(tp, timestamp)
        if request.data["isolation_level"] == READ_COMMITTED and timestamp != EARLIEST_TIMESTAMP:
            # read_committed sees the log up to the last stable offset (Kafka's
            # lastFetchableOffset): latest is the LSO, a later record is not found.
            stable = broker.last_stable_offset(tp)
            if timestamp == LATEST_TIMESTAMP:
                offset = stable
            elif offset >= stable:
                found_ts, offset = -1, -1
        return {"timestamp": found_ts, "offset": offset, "leader_epoch": 0}

    return _each_partition(request, broker, answer)


# -- DeleteRecords ---------------------------------------------------------------------------


def delete_records(request: Request, broker: Broker) -> dict[str, Any]:
    def answer(tp: TopicPartition, partition: dict[str, Any]) -> dict[str, Any]:
        return {"low_watermark": broker.delete_records(tp, partition["offset"])}

    return _each_partition(request, broker, answer)


# -- DescribeConfigs -------------------------------------------------------------------------


def describe_configs(request: Request, broker: Broker) -> dict[str, Any]:
    served = broker.partitions()
    results = []
    for resource in request.data["resources"]:
        result: dict[str, Any] = {
            "resource_type": resource["resource_type"],
            "resource_name": resource["resource_name"],
            "error_code": ErrorCode.NONE,
            "error_message": None,
            "configs": [],
        }
        results.append(result)
        name = resource["resource_name"]
        if resource["resource_type"] != RESOURCE_TOPIC:
            result["error_code"] = ErrorCode.INVALID_REQUEST
            result["error_message"] = "only topic configs are served by this worker"
            continue
        if name not in served:
            result["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result["error_message"] = f"topic {name!r} is not on this worker"
            continue
        values, explicit = broker.topic_config(name)
        read_only = broker.topic_config_read_only(name)
        keys = resource["configuration_keys"]
        for key in sorted(values) if keys is None else keys:
            if key not in values:
                continue
            source = CONFIG_SOURCE_DYNAMIC_TOPIC if key in explicit else CONFIG_SOURCE_DEFAULT
            result["configs"].append(
                {
                    "name": key,
                    "value": values[key],
                    # A Topic resource's configs change through it, not through Kafka.
                    "read_only": read_only,
                    "is_default": key not in explicit,
                    "config_source": source,
                    "is_sensitive": False,
                    "synonyms": [{"name": key, "value": values[key], "source": source}]
                    if request.data["include_synonyms"]
                    else [],
                    "documentation": None,
                }
            )
    return {"results": results}


# -- InitProducerId --------------------------------------------------------------------------


def init_producer_id(request: Request, broker: Broker) -> dict[str, Any]:
    """An idempotent producer's id (a transactional id goes to the transaction coordinator)."""
    assert request.data["transactional_id"] is None, "transactional ids are the coordinator's"
    return {"error_code": ErrorCode.NONE, "producer_id": broker.next_producer_id()}


# -- FindCoordinator -------------------------------------------------------------------------

#: FindCoordinator key types: a consumer group, a transactional id.
KEY_TYPE_GROUP: Final = 0
KEY_TYPE_TRANSACTION: Final = 1


def find_coordinator(request: Request, broker: Broker) -> dict[str, Any]:
    """This worker coordinates every group and every transactional id; other key types
    (share groups) are answered INVALID_REQUEST with a message saying why."""
    data = request.data
    node = {"node_id": broker.node_id, "host": broker.host, "port": broker.port}
    known = data["key_type"] in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION)
    error = ErrorCode.NONE if known else ErrorCode.INVALID_REQUEST
    message = None if known else f"coordinator key type {data['key_type']} is not served"
    if request.version >= 4:
        return {
            "coordinators": [
                {"key": key, **node, "error_code": error, "error_message": message}
                for key in data["coordinator_keys"]
            ]
        }
    return {**node, "error_code": error, "error_message": message}
