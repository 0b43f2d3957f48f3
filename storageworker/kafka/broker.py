"""The worker as the Kafka port sees it: a single-node cluster that leads every partition it
holds (:class:`WorkerBroker`, the :class:`~storageworker.kafka.apis.Broker` of the APIs), and
the specs of the internal topics the port keeps (``__consumer_offsets``,
``__transaction_state``). Called from :mod:`.server`; the blocking calls run in threads.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Final

from storagecore.config import LogConfig, TopicPartition, TopicSpec
from storagecore.errors import (
    InvalidRecordError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from storagecore.log import Log
from storagecore.log_validator import AppendOrigin
from storagecore.records import layout
from storageworker.kafka import apis, topic_configs
from storageworker.kafka.counters import KafkaCounters
from storageworker.kafka.offset_records import OFFSETS_TOPIC
from storageworker.kafka.producers import ProducerIds
from storageworker.kafka.transaction_coordinator import TransactionCoordinator
from storageworker.topic_admin import TopicAdmin
from storageworker.worker import Worker

logger = logging.getLogger(__name__)

OFFSETS_TOPIC_CONFIG: Final = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 * 1024 * 1024),
    "compression.type": "producer",
}
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")


class WorkerBroker:
    """The worker as a single-node Kafka cluster that leads every partition it holds."""

    def __init__(self, worker: Worker, host: str, port: int, node_id: int = 0) -> None:
        self.worker = worker
        self.host = host
        self.port = port
        self.node_id = node_id
        self.cluster_id = "logkeeper"
        self.producer_ids = ProducerIds()
        #: CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs.
        self.topic_admin = TopicAdmin(worker)
        self.counters: KafkaCounters | None = None
        self.on_append: Callable[[], None] = lambda: None
        self.transactions: TransactionCoordinator | None = None

    def partitions(self) -> dict[str, int]:
        """Per topic, the partitions served (those of its declared count that have a log).

        Every Produce, Fetch, Metadata and OffsetCommit asks, on the event loop. So no copy of
        ``LogManager.logs``, which takes the manager's lock: the scheduler's thread holds that
        lock while it writes the checkpoints, four fsyncs that took 1-107 ms each on this
        machine with 650 MB of dirty pages (and seconds under writeback), and every connection
        waited for them (the rounds of bench_broker that fell below 0.80 at random). A lookup
        of one partition needs no lock (``LogManager.find_log``)."""
        result: dict[str, int] = {}
        for name in self.worker.topics:
            count = self.partition_count(name)
            if count:
                result[name] = count
        return result

    def partition_count(self, topic: str) -> int:
        """The partitions of ``topic`` served: from 0, those of its declared count that have a
        log (0 for a topic not declared). ``partitions()`` for one topic: a Produce asks for
        the topics it writes only (all of them took 10-14 us of each of the Java producer's
        requests with the 20 partitions of the internal topics)."""
        manager = self.worker.log_manager
        spec = self.worker.topics.get(topic)
        if manager is None or spec is None:
            return 0
        count = 0
        while count < spec.partitions and manager.find_log(TopicPartition(topic, count)):
            count += 1
        return count

    def is_internal(self, topic: str) -> bool:
        return topic in self.worker.internal_topics

    def log_of(self, tp: TopicPartition) -> Log:
        manager = self.worker.log_manager
        log = manager.find_log(tp) if manager is not None else None
        if log is None:
            raise UnknownTopicOrPartitionError(f"{tp} is not on this worker")
        return log

    def append(self, tp: TopicPartition, records: bytes) -> apis.Appended:
        """Append through the leader path. An idempotent producer's batch is checked against
        the partition's producer state by the log itself (:mod:`storagecore.producer_state`):
        a retry of one of the producer's last five batches is acknowledged with the original
        offset and not appended again."""
        log = self.log_of(tp)
        manager = self.worker.log_manager
        if manager is not None and not self.is_internal(tp.topic):
            # Below the free-space floor new data is refused (retriable); the worker's own
            # offsets topic may still write into the floor's reserve, so consumers keep
            # committing while producers wait.
            manager.ensure_writable(log.parent_dir, len(records))
        producer_id = (
            _I64.unpack_from(records, layout.PRODUCER_ID_OFFSET)[0]
            if len(records) >= layout.RECORD_BATCH_OVERHEAD
            else layout.NO_PRODUCER_ID
        )
        if producer_id != layout.NO_PRODUCER_ID:
            declared = layout.LOG_OVERHEAD + _I32.unpack_from(records, layout.LENGTH_OFFSET)[0]
            if declared != len(records):
                raise InvalidRecordError(
                    f"{tp}: an idempotent produce request must hold exactly one record batch "
                    f"({len(records)} bytes, the first batch declares {declared})"
                )
        info = log.append(records)
        if info.duplicate:
            if self.counters is not None:
                self.counters.duplicate_batches += 1
            logger.info(
                "%s: duplicate batch of producer %d acknowledged at offset %d without appending",
                tp,
                producer_id,
                info.first_offset,
            )
            return apis.Appended(info.first_offset, -1, info.log_start_offset, True)
        self.on_append()
        return apis.Appended(info.first_offset, info.log_append_time, info.log_start_offset)

    def read(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        *,
        zero_copy: bool = False,
        committed: bool = False,
    ) -> apis.Stable:
        """Records from ``offset``; with ``committed`` (read_committed) only below the last
        stable offset, with the aborted transactions the client must filter."""
        region_min = apis.ZERO_COPY_MIN_BYTES if zero_copy else None
        log = self.log_of(tp)
        lso = log.last_stable_offset
        max_offset = lso if committed else None
        result = log.read(offset, max_bytes, region_min_bytes=region_min, max_offset=max_offset)
        aborted = log.aborted_transactions(offset, lso) if committed else None
        return apis.Stable(result, lso, aborted)

    def last_stable_offset(self, tp: TopicPartition) -> int:
        return self.log_of(tp).last_stable_offset

    def write(self, tp: TopicPartition, records: bytes, coordinator: bool) -> int:
        """The transaction coordinator's appends: its ``__transaction_state`` records, the
        transactional offset commits, and (as the coordinator) the markers."""
        origin = AppendOrigin.COORDINATOR if coordinator else AppendOrigin.CLIENT
        info = self.log_of(tp).append(records, origin=origin)
        self.on_append()
        return info.first_offset

    def verify_transaction(self, transactional_id: str, tp: TopicPartition, records: bytes) -> int:
        """KIP-890 part 1: a transactional batch is appended only inside its producer's
        ongoing transaction holding ``tp`` (an error code, 0 when it may be)."""
        if self.transactions is None or len(records) < layout.RECORD_BATCH_OVERHEAD:
            return apis.ErrorCode.INVALID_TXN_STATE
        producer_id = _I64.unpack_from(records, layout.PRODUCER_ID_OFFSET)[0]
        epoch = _I16.unpack_from(records, layout.PRODUCER_EPOCH_OFFSET)[0]
        return self.transactions.verify(transactional_id, producer_id, epoch, tp)

    def list_offset(self, tp: TopicPartition, timestamp: int) -> tuple[int, int]:
        found = self.log_of(tp).offset_for_timestamp(timestamp)
        return (-1, -1) if found is None else (int(found.timestamp), int(found.offset))

    def delete_records(self, tp: TopicPartition, offset: int) -> int:
        log = self.log_of(tp)
        if offset == -1:
            offset = log.high_watermark
        if offset > log.high_watermark:
            raise OffsetOutOfRangeError(
                f"{tp}: cannot delete records up to {offset}, past the high watermark "
                f"{log.high_watermark}"
            )
        new_start = log.delete_records(offset)
        logger.info("%s: records before offset %d deleted by request", tp, new_start)
        return new_start

    def topic_config(self, topic: str) -> tuple[dict[str, str], set[str]]:
        spec = self.worker.topics[topic]
        values = topic_configs.reported(spec.config.to_topic_config(), dict(spec.topic_config))
        return values, set(spec.topic_config) & values.keys()

    def topic_config_read_only(self, topic: str) -> bool:
        """Whether a client may change the topic's configs (IncrementalAlterConfigs): a client
        topic's, yes (read_only false, as Kafka's broker reports every topic config); a topic a
        Topic resource owns (or an internal one), no: changes go through the resource."""
        return self.worker.client_topics.get(topic) is None

    def next_producer_id(self) -> int:
        return self.producer_ids.next()


def offsets_topic_spec(partitions: int, name: str = OFFSETS_TOPIC) -> TopicSpec:
    """``__consumer_offsets`` (or, with ``name``, ``__transaction_state``: the same config,
    as Kafka's ``transaction.state.log.*`` defaults)."""
    return TopicSpec(
        name,
        partitions,
        LogConfig.from_topic_config(OFFSETS_TOPIC_CONFIG),
        topic_config=dict(OFFSETS_TOPIC_CONFIG),
    )
