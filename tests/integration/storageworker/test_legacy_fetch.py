"""The kafka port serves an old log dir's v0/v1 messages as Kafka 4.x does: the stored bytes,
neither up- nor down-converted (Kafka 4.0 removed down-conversion, KIP-724; it never
up-converted on fetch), which librdkafka and kafka-python decode themselves (issue 21, point 4).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as Partition
from kafka import KafkaConsumer, TopicPartition

from storagecore.records.batch import NewRecord
from storagecore.records.memory_records_builder import build_batch
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic
from tests.legacy_data import Message, kp_entry, kp_read, write_segment

pytestmark = pytest.mark.integration

TS = int(time.time() * 1000) - 3_600_000


def legacy_partition(root: Path) -> list[Message]:
    """A partition a 0.9 -> 0.10 -> 0.11 broker left: every legacy variant, then v2."""
    parts: list[bytes] = []
    offset = 0
    for magic, codec, count in [(0, 0, 3), (0, 1, 5), (0, 2, 4), (0, 3, 6), (1, 0, 2),
                                (1, 1, 5), (1, 2, 7), (1, 3, 4)]:  # fmt: skip
        messages = [(TS + offset + i, b"k%d" % i, b"v%d" % (offset + i)) for i in range(count)]
        parts.append(kp_entry(magic, codec, messages, offset))
        offset += count
    v2 = build_batch(
        [NewRecord(b"k", b"v2-%d" % i, TS + 100 + i) for i in range(3)], base_offset=offset
    )
    write_segment(root / "data" / "old-0", 0, [*parts, v2])
    model = kp_read(b"".join(parts))
    return model + [Message(offset + i, TS + 100 + i, b"k", b"v2-%d" % i) for i in range(3)]


def test_legacy_messages_are_fetched_as_stored_and_clients_decode_them(tmp_path: Path) -> None:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(tmp_path, topic("old", 1, {"cleanup.policy": "delete"}))
    model = legacy_partition(tmp_path)
    served = Served(tmp_path, "--kafka-port", "0")
    try:
        consumer = Consumer(
            {"bootstrap.servers": served.kafka_address, "group.id": "legacy",
             "enable.auto.commit": False, "max.partition.fetch.bytes": 256}  # several fetches
        )  # fmt: skip
        consumer.assign([Partition("old", 0, 0)])
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < len(model) and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                got.append(message)
        consumer.close()
        assert [(m.offset(), m.key(), m.value()) for m in got] == [
            (m.offset, m.key, m.value) for m in model
        ]
        # librdkafka: v1 and v2 timestamps as stored (type 1, CreateTime); v0 has none (type 0:
        # TIMESTAMP_NOT_AVAILABLE, value 0).
        stamps = [message.timestamp() for message in got]
        assert stamps == [(0, 0) if m.timestamp < 0 else (1, m.timestamp) for m in model]

        python_consumer = KafkaConsumer(
            bootstrap_servers=served.kafka_address, enable_auto_commit=False, group_id=None,
            consumer_timeout_ms=5000, fetch_max_bytes=2048,
        )  # fmt: skip
        partition = TopicPartition("old", 0)
        python_consumer.assign([partition])
        python_consumer.seek(partition, 20)  # inside the v0 lz4 wrapper (offsets 18..23)
        records = list(python_consumer)
        python_consumer.close()
        assert [(r.offset, r.key, r.value) for r in records] == [
            (m.offset, m.key, m.value) for m in model if m.offset >= 20
        ]
    finally:
        assert served.terminate() == 0
