"""Produce, Fetch, ListOffsets and DeleteRecords against both peers, compared.

Kafka's Java producer and librdkafka produce with every codec, idempotent or not; kafka-python
and kcat read everything back. The exact answers (error codes, offsets, timestamps) come from
requests sent as the test means them (:class:`RawClient`), the same bytes to both peers.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from typing import Any

import pytest

from storagecore.records.batch import NewRecord
from storagecore.records.memory_records_builder import build_batch
from tests.integration.peer.conftest import CODECS, SEGMENT_BYTES, Peers
from tests.kafka_support.java_client import java_client
from tests.kafka_support.raw_client import RawClient, produce

pytestmark = [pytest.mark.integration, pytest.mark.kafka_peer]


def read_back(address: str, topic: str) -> list[tuple[int, bytes | None, bytes | None]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=address, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    end = consumer.end_offsets([tp])[tp]
    got: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 60
    while consumer.position(tp) < end and time.monotonic() < deadline:
        for message in consumer.poll(500).get(tp, []):
            got.append((message.offset, message.key, message.value))
    consumer.close()
    return got


def librdkafka_produce(address: str, topic: str, codec: str, idempotent: bool) -> list[Any]:
    from confluent_kafka import Producer

    outcomes: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": address,
            "compression.codec": codec,
            "enable.idempotence": idempotent,
            "linger.ms": 5,
        }
    )
    for i in range(50):
        producer.produce(
            topic,
            key=b"rd-%d" % i,
            value=b"librdkafka-%d" % i,
            partition=0,
            on_delivery=lambda error, m: outcomes.append(error.code() if error else m.offset()),
        )
    assert producer.flush(30) == 0
    return outcomes


def kcat_read(address: str, topic: str) -> list[str]:
    kcat = shutil.which("kcat")
    assert kcat is not None, "kcat is installed by scripts/setup.sh dev"
    done = subprocess.run(
        [kcat, "-C", "-b", address, "-t", topic, "-p", "0", "-o", "beginning", "-e", "-q",
         "-f", "%o %k %s\\n"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.splitlines()


@pytest.mark.parametrize("idempotent", [True, False], ids=["idem", "plain"])
@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_with_and_without_idempotence(
    peers: Peers, codec: str, idempotent: bool
) -> None:
    topic = f"produce-{codec}-{'idem' if idempotent else 'plain'}"
    outcomes = {}
    for name, address in peers.both():
        java = java_client("produce", address, topic, 0, codec, idempotent, 50)
        rd = librdkafka_produce(address, topic, codec, idempotent)
        outcomes[name] = (java, rd, read_back(address, topic), kcat_read(address, topic))
    assert outcomes["logkeeper"] == outcomes["kafka"]
    java, rd, records, lines = outcomes["kafka"]
    assert java == {"offsets": list(range(50)), "errors": []}
    assert rd == list(range(50, 100))
    assert [offset for offset, _k, _v in records] == list(range(100))
    assert lines[99] == "99 rd-49 librdkafka-49"


def list_offsets(client: RawClient, topic: str, partition: int, timestamp: int) -> dict[str, Any]:
    answer = client.call(
        2,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [{"partition_index": partition, "timestamp": timestamp}],
                }
            ],
        },
    )
    part: dict[str, Any] = answer["topics"][0]["partitions"][0]
    return part


def fetch(client: RawClient, topic: str, partition: int, offset: int) -> dict[str, Any]:
    answer = client.call(
        1,
        12,
        {
            "max_wait_ms": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "fetch_offset": offset,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
        },
    )
    part: dict[str, Any] = answer["responses"][0]["partitions"][0]
    return part


def answer_of(part: dict[str, Any], *keys: str) -> tuple[Any, ...]:
    return tuple(part[key] for key in keys)


def test_list_offsets_and_fetch_answers(peers: Peers) -> None:
    base_ms = int(time.time() * 1000) - 60_000
    batch = build_batch([NewRecord(b"k%d" % i, b"v%d" % i, base_ms + 1000 * i) for i in range(10)])
    answers = {}
    for name, address in peers.both():
        with RawClient(address) as client:
            produced = produce(client, "offsets", 0, batch)
            assert produced is not None
            asked = [
                list_offsets(client, "offsets", 0, t)
                for t in (-2, -1, -3, base_ms + 4500, base_ms + 60_000)
            ]
            fetches = [fetch(client, "offsets", 0, offset) for offset in (0, 10, 11, -1)]
            answers[name] = {
                "produce": answer_of(produced, "error_code", "base_offset", "log_start_offset"),
                "list": [answer_of(p, "error_code", "timestamp", "offset") for p in asked],
                "unknown partition": answer_of(
                    list_offsets(client, "offsets", 7, -1), "error_code", "offset"
                ),
                "unknown topic": answer_of(
                    list_offsets(client, "no-such-topic", 0, -1), "error_code", "offset"
                ),
                "fetch": [
                    (
                        *answer_of(p, "error_code", "high_watermark", "log_start_offset"),
                        len(p["records"]) > 0,
                    )
                    for p in fetches
                ],
                "fetch unknown": answer_of(
                    fetch(client, "offsets", 3, 0), "error_code", "high_watermark"
                ),
            }
    assert answers["logkeeper"] == answers["kafka"]
    assert answers["kafka"]["list"] == [
        (0, -1, 0),
        (0, -1, 10),
        (0, base_ms + 9000, 9),
        (0, base_ms + 5000, 5),
        (0, -1, -1),
    ]
    assert [f[0] for f in answers["kafka"]["fetch"]] == [0, 0, 1, 1]


def test_delete_records_answers(peers: Peers) -> None:
    batch = build_batch(
        [NewRecord(b"k%d" % i, b"v%d" % i, int(time.time() * 1000)) for i in range(10)]
    )
    answers = {}
    for name, address in peers.both():
        with RawClient(address) as client:
            assert produce(client, "deletes", 0, batch) is not None

            def delete(partition: int, offset: int) -> tuple[int, int]:
                answer = client.call(
                    21,
                    2,
                    {
                        "topics": [
                            {
                                "name": "deletes",
                                "partitions": [{"partition_index": partition, "offset": offset}],
                            }
                        ],
                        "timeout_ms": 10_000,
                    },
                )
                part = answer["topics"][0]["partitions"][0]
                return part["error_code"], part["low_watermark"]

            answers[name] = {
                "to 4": delete(0, 4),
                "past the end": delete(0, 11),
                "backwards": delete(0, 2),
                "unknown partition": delete(5, 1),
                "earliest": answer_of(
                    list_offsets(client, "deletes", 0, -2), "error_code", "offset"
                ),
                "fetch below": fetch(client, "deletes", 0, 2)["error_code"],
                "to the end": delete(0, -1),
            }
    assert answers["logkeeper"] == answers["kafka"]
    assert answers["kafka"]["to 4"] == (0, 4)
    assert answers["kafka"]["to the end"] == (0, 10)


def test_oversized_batches(peers: Peers) -> None:
    now_ms = int(time.time() * 1000)
    # Over segment.bytes but under max.message.bytes; and over max.message.bytes too.
    larger_than_a_segment = build_batch([NewRecord(b"k", b"x" * (SEGMENT_BYTES + 1000), now_ms)])
    larger_than_allowed = build_batch([NewRecord(b"k", b"x" * ((2 << 20) + 1000), now_ms)])
    answers = {}
    for name, address in peers.both():
        with RawClient(address) as client:
            answers[name] = [
                produce(client, "oversize", 0, records)["error_code"]  # type: ignore[index]
                for records in (larger_than_a_segment, larger_than_allowed)
            ]
    assert answers["logkeeper"] == answers["kafka"] == [18, 10]


def test_unknown_topics_and_partitions_in_produce_and_metadata(peers: Peers) -> None:
    batch = build_batch([NewRecord(b"k", b"v", int(time.time() * 1000))])
    answers = {}
    for name, address in peers.both():
        with RawClient(address) as client:
            metadata = client.call(
                3,
                12,
                {
                    "topics": [{"topic_id": uuid.UUID(int=0), "name": "no-such-topic"}],
                    "allow_auto_topic_creation": True,
                },
            )
            answers[name] = {
                "produce topic": produce(client, "no-such-topic", 0, batch)["error_code"],  # type: ignore[index]
                "produce partition": produce(client, "offsets", 9, batch)["error_code"],  # type: ignore[index]
                "metadata": [
                    (t["name"], t["error_code"], t["partitions"]) for t in metadata["topics"]
                ],
            }
    assert answers["logkeeper"] == answers["kafka"]
    assert answers["kafka"]["produce topic"] == 3
