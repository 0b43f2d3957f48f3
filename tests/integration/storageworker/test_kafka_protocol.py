"""The ``kafka`` port with real clients, part one: round trips with every codec (kafka-python
and librdkafka), offsets by time, unknown topics, null keys on compacted topics, garbage frames.
Groups, idempotence, limits, admin APIs and security: ``kafka_clients/``.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from storagecore.records.batch import NewRecord
from storagecore.records.memory_records_builder import build_batch
from tests.integration.storageworker.test_serve import (
    SETTINGS,
    Served,
    declare,
    topic,
    wait_for,
)
from tests.kafka_support.raw_client import RawClient, produce

pytestmark = pytest.mark.integration
#: Recent timestamps: the topics keep 7 days (retention runs every 200 ms in these tests).
NOW_MS = int(time.time() * 1000)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(
        tmp_path,
        topic("events", 2, {"cleanup.policy": "delete", "segment.bytes": 16384}),
        topic("profiles", 1, {"cleanup.policy": "compact"}),
    )
    server = Served(tmp_path, "--kafka-port", "0")
    yield server
    assert server.terminate() == 0


def bootstrap(server: Served) -> str:
    return server.kafka_address


def producer(server: Served, **options: object) -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=bootstrap(server),
        enable_idempotence=False,
        max_block_ms=5000,
        request_timeout_ms=10000,
        **options,
    )


def consume_all(server: Served, partitions: list[TopicPartition]) -> list[object]:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap(server),
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    messages = list(consumer)
    consumer.close()
    return messages


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume_round_trip(served: Served, codec: str | None) -> None:
    client = producer(served, compression_type=codec, linger_ms=5)
    sent = []
    for i in range(200):
        record = (
            f"key-{i}".encode(),
            os.urandom(random.Random(i).randrange(0, 300)),
            NOW_MS - 10_000 + i,
            [("trace", f"t{i}".encode()), ("empty", b"")],
        )
        client.send(
            "events",
            key=record[0],
            value=record[1],
            timestamp_ms=record[2],
            headers=record[3],
            partition=i % 2,
        )
        sent.append(record)
    client.flush()
    client.close()
    messages = consume_all(served, [TopicPartition("events", 0), TopicPartition("events", 1)])
    got = sorted(
        ((m.key, m.value, m.timestamp, list(m.headers)) for m in messages),  # type: ignore[attr-defined]
        key=lambda r: int(r[0].split(b"-")[1]),
    )
    assert got == [(k, v, t, h) for k, v, t, h in sent]
    offsets = {(m.partition, m.offset) for m in messages}  # type: ignore[attr-defined]
    assert offsets == {(p, o) for p in (0, 1) for o in range(100)}


def test_list_offsets_and_unknown_topics(served: Served) -> None:
    client = producer(served)
    for i in range(10):
        client.send("events", value=b"x", timestamp_ms=NOW_MS - 60_000 + i * 1000, partition=0)
    client.flush()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(served))
    tp = TopicPartition("events", 0)
    assert consumer.beginning_offsets([tp]) == {tp: 0}
    assert consumer.end_offsets([tp]) == {tp: 10}
    found = consumer.offsets_for_times({tp: NOW_MS - 60_000 + 4_500})[tp]
    assert found is not None and (found.offset, found.timestamp) == (5, NOW_MS - 60_000 + 5_000)
    assert consumer.offsets_for_times({tp: NOW_MS + 3_600_000})[tp] is None
    assert consumer.partitions_for_topic("events") == {0, 1}
    consumer.close()
    with pytest.raises(KafkaError):
        client.send("no-such-topic", value=b"x").get(timeout=10)
    client.close()
    # Nothing was created for the unknown topic.
    assert "no-such-topic" not in [p["topic"] for p in served.status()["partitions"]]


def test_compacted_topic_refuses_null_keys(served: Served) -> None:
    client = producer(served, retries=0)
    with pytest.raises(KafkaError) as refused:
        client.send("profiles", key=None, value=b"v").get(timeout=10)
    assert "InvalidRecord" in type(refused.value).__name__ or "87" in str(refused.value)
    client.send("profiles", key=b"k", value=b"v").get(timeout=10)
    client.close()
    assert served.partition("profiles-0")["logEndOffset"] == 1


def test_garbage_frames_do_not_stop_a_good_client(served: Served) -> None:
    host, port = bootstrap(served).split(":")
    rng = random.Random(3)
    for _ in range(40):
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            kind = rng.randrange(4)
            if kind == 0:
                sock.sendall(os.urandom(rng.randrange(1, 64)))
            elif kind == 1:  # a huge declared size
                sock.sendall(struct.pack(">i", 0x7FFFFFF0) + b"xx")
            elif kind == 2:  # a valid size, a truncated header
                sock.sendall(struct.pack(">i", 20) + os.urandom(20))
            else:  # an unknown API key
                sock.sendall(struct.pack(">ihhih", 10, 999, 0, 1, -1))
            sock.settimeout(2)
            with contextlib.suppress(TimeoutError, ConnectionError):
                sock.recv(1024)
    client = producer(served)
    assert client.send("events", value=b"still here", partition=1).get(timeout=10).offset == 0
    client.close()
    assert served.request("GET", "/healthz")[0] == 200
    metrics = served.metrics()
    assert metrics["logkeeper_kafka_malformed_requests_total"] >= 10
    assert metrics["logkeeper_kafka_requests_total{api=Produce,version=9}"] >= 1
    assert metrics["logkeeper_kafka_received_bytes_total"] > 0
    wait_for(
        lambda: "Malformed Kafka request" in served.log_text() or "refused" in served.log_text(),
        "the malformed requests logged",
    )


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_produce_and_consume(served: Served, codec: str) -> None:
    """confluent-kafka (librdkafka 2.x) negotiates flexible versions (ApiVersions v3,
    Metadata 12, Produce 9, Fetch 12) and round-trips keys, values, headers, timestamps."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as Partition

    errors: list[object] = []
    client = Producer(
        {"bootstrap.servers": bootstrap(served), "compression.type": codec, "linger.ms": 5}
    )
    for i in range(300):
        client.produce(
            "events",
            key=b"k%d" % i,
            value=b"v%d" % i * (i % 7),
            partition=i % 2,
            headers=[("n", str(i).encode())],
            timestamp=NOW_MS - 5_000 + i,
            on_delivery=lambda error, _message: errors.append(error) if error else None,
        )
    assert client.flush(20) == 0 and errors == []
    consumer = Consumer(
        {"bootstrap.servers": bootstrap(served), "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([Partition("events", 0, 0), Partition("events", 1, 0)])
    got = {}
    deadline = time.monotonic() + 30
    while len(got) < 300 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None or message.error():
            continue
        got[message.key()] = (message.value(), message.headers(), message.timestamp()[1])
    consumer.close()
    assert len(got) == 300
    for i in range(300):
        assert got[b"k%d" % i] == (
            b"v%d" % i * (i % 7),
            [("n", str(i).encode())],
            NOW_MS - 5_000 + i,
        )


def test_sigterm_with_open_connections_exits_0_without_a_traceback(tmp_path: Path) -> None:
    """Idle connections, one waiting in a long-poll Fetch and one mid-request: SIGTERM stops
    the worker cleanly (exit 0) and nothing is logged as an error for those connections."""
    from tests.integration.storageworker.test_serve import wait_for
    from tests.kafka_support.raw_client import RawClient

    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(tmp_path, topic("events", 1, {}))
    server = Served(tmp_path, "--kafka-port", "0")
    clients = [RawClient(server.kafka_address) for _ in range(4)]
    try:
        for client in clients[:2]:
            client.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        clients[2].send(
            1,
            12,
            {
                "max_wait_ms": 60_000,
                "min_bytes": 1,
                "topics": [
                    {
                        "topic": "events",
                        "partitions": [
                            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                        ],
                    }
                ],
            },
        )
        clients[3].sock.sendall(struct.pack(">i", 100) + b"\x00\x12")  # a frame begun, not sent
        wait_for(
            lambda: (
                server.metrics().get("logkeeper_kafka_requests_total{api=Fetch,version=12}") == 1
                and server.metrics().get("logkeeper_kafka_open_connections") == 4
            ),
            "the Fetch waiting and four connections open",
        )
        code = server.terminate()
    finally:
        for client in clients:
            client.close()
    log = server.log_text()
    assert code == 0, log
    assert "Traceback" not in log and "CancelledError" not in log, log
    assert "Worker stopped cleanly" in log


def test_a_produce_wakes_a_waiting_fetch(served: Served) -> None:
    """A Fetch waiting for data (max_wait 10 minutes) answers with the records of a Produce
    that arrives on another connection meanwhile: small Produce requests are appended on the
    event loop's thread, which wakes the waiting fetches itself (server.py,
    INLINE_PRODUCE_BYTES_MAX). Not woken, the fetch would outwait the client's 60 s socket
    timeout."""
    fetch = {
        "max_wait_ms": 600_000,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [
            {
                "topic": "events",
                "partitions": [{"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
    }
    with RawClient(served.kafka_address, timeout_s=60) as waiting:
        with RawClient(served.kafka_address) as other:
            sent = waiting.send(1, 12, fetch)
            # One round trip on the other connection: the fetch is then (almost surely) parked.
            other.call(3, 12, {"topics": [], "allow_auto_topic_creation": False})
            answer = produce(other, "events", 1, build_batch([NewRecord(b"k", b"v", NOW_MS)]))
            assert answer is not None and answer["error_code"] == 0, answer
        correlation_id, response = waiting.receive(1, 12)
    assert correlation_id == sent
    partition = response["responses"][0]["partitions"][0]
    assert partition["error_code"] == 0 and partition["high_watermark"] == 1, partition
    assert partition["records"], "the fetch answered without the produced records"


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read the socket")
def test_client_connections_have_kafkas_send_buffer(served: Served) -> None:
    """Each accepted connection gets Kafka's ``socket.send.buffer.bytes`` (100 KiB) instead of
    the kernel's autotuned buffer (listener_settings.py: less CPU per 1 MiB Fetch answer).
    Linux doubles a requested SO_SNDBUF; ``ss -tm`` shows it as ``tb``."""
    assert send_buffers(served) == [2 * 102_400]


def send_buffers(server: Served) -> list[int]:
    """The send buffer (``tb``) of each connection the worker accepted, while one client is
    connected (after one request, so it has been accepted)."""
    port = int(server.kafka_address.rsplit(":", 1)[1])
    with RawClient(server.kafka_address) as client:
        client.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        shown = subprocess.run(
            ["ss", "-tmnH", "state", "established", f"( sport = :{port} )"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return [int(size) for size in re.findall(r"\btb(\d+)", shown)]


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2) to read the socket")
def test_the_send_buffer_is_the_flags(tmp_path: Path) -> None:
    """``--kafka-socket-send-buffer-bytes`` reaches each accepted connection, and a value the
    listener refuses stops ``logkeeper serve`` (exit 2) with the flag named."""
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(tmp_path, topic("events", 1, {}))
    refused = subprocess.run(
        [
            str(Path(sys.executable).parent / "logkeeper"), "serve",
            "--data-dir", str(tmp_path / "data"), "--topics", str(tmp_path / "topics"),
            "--http-port", "0", "--kafka-port", "0", "--kafka-socket-send-buffer-bytes", "0",
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert refused.returncode == 2, refused
    assert "--kafka-socket-send-buffer-bytes must be" in refused.stderr, refused.stderr
    server = Served(tmp_path, "--kafka-port", "0", "--kafka-socket-send-buffer-bytes", "65536")
    try:
        assert send_buffers(server) == [2 * 65_536]
    finally:
        assert server.terminate() == 0
