"""The ``kafka`` port with real clients, part two: groups, idempotence, limits, admin, security.

Every test runs a real ``logkeeper serve --kafka-port 0`` process on loopback. Clients:
confluent-kafka (librdkafka 2.x), kafka-python, and :class:`RawClient` for requests that must be
exactly what the test means (duplicates, acks=0, corrupt CRCs, oversize batches).
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as Partition
from confluent_kafka.admin import AdminClient, ConfigResource

from storagecore.records.batch import NewRecord
from storagecore.records.memory_records_builder import build_batch
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic, wait_for
from tests.kafka_support.raw_client import RawClient, produce

pytestmark = pytest.mark.integration
NOW_MS = int(time.time() * 1000)


def start(tmp_path: Path, *extra: str) -> Served:
    return Served(tmp_path, "--kafka-port", "0", *extra)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(
        tmp_path,
        topic("events", 2, {"cleanup.policy": "delete", "segment.bytes": 16384}),
        topic("small", 1, {"max.message.bytes": 2000}),
        topic(
            "profiles",
            1,
            {"cleanup.policy": "compact", "segment.bytes": 4096, "min.cleanable.dirty.ratio": 1.0},
        ),
    )
    return tmp_path


@pytest.fixture
def served(root: Path) -> Iterator[Served]:
    server = start(root)
    yield server
    assert server.terminate() == 0


def fill(address: str, topic_name: str, count: int, **config: Any) -> None:
    errors: list[object] = []
    producer = Producer({"bootstrap.servers": address, "linger.ms": 5, **config})
    for i in range(count):
        producer.produce(
            topic_name,
            key=b"k%d" % i,
            value=b"v%d" % i,
            partition=i % 2 if topic_name == "events" else 0,
            on_delivery=lambda error, _m: errors.append(error) if error else None,
        )
    assert producer.flush(30) == 0
    assert errors == []


def group_consumer(address: str, group: str, **config: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": address,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            **config,
        }
    )


def poll_values(consumer: Consumer, count: int, timeout_s: float = 40) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None or message.error():
            continue
        got.append(message)
    return got


# -- consumer groups ---------------------------------------------------------------------------


def test_group_commits_survive_a_restart_and_the_consumer_resumes(root: Path) -> None:
    server = start(root)
    fill(server.kafka_address, "events", 100)
    first = group_consumer(server.kafka_address, "billing")
    first.subscribe(["events"])
    got = poll_values(first, 100)
    assert sorted(m.value() for m in got) == sorted(b"v%d" % i for i in range(100))
    # Commit only part of each partition: 30 of partition 0's 50 and 20 of partition 1's.
    first.commit(
        offsets=[Partition("events", 0, 30), Partition("events", 1, 20)], asynchronous=False
    )
    committed = first.committed([Partition("events", 0), Partition("events", 1)], timeout=10)
    assert [(p.partition, p.offset) for p in committed] == [(0, 30), (1, 20)]
    first.close()
    assert server.terminate() == 0
    offsets_dirs = sorted(p.name for p in (root / "data").glob("__consumer_offsets-*"))
    assert len(offsets_dirs) == 10

    server = start(root)
    try:
        second = group_consumer(server.kafka_address, "billing")
        second.subscribe(["events"])
        resumed = poll_values(second, 50)
        assert sorted((m.partition(), m.offset()) for m in resumed) == sorted(
            [(0, o) for o in range(30, 50)] + [(1, o) for o in range(20, 50)]
        )
        assert poll_values(second, 1, timeout_s=2) == []
        second.close()
        status = {p["topic"]: p for p in server.status()["partitions"]}
        assert status["__consumer_offsets"]["cleanupPolicy"] == "compact"
    finally:
        assert server.terminate() == 0


def test_two_members_split_the_partitions_and_consume_everything_once(served: Served) -> None:
    fill(served.kafka_address, "events", 200)
    members = [group_consumer(served.kafka_address, "pair") for _ in range(2)]
    # Each member's current assignment: the eager protocol hands the whole assignment to on_assign
    # and takes it all back in on_revoke.
    assigned: list[set[int]] = [set(), set()]

    def on_assign(index: int, parts: list[Partition]) -> None:
        assigned[index] = {p.partition for p in parts}

    def on_revoke(index: int) -> None:
        assigned[index] = set()

    for index, member in enumerate(members):
        member.subscribe(
            ["events"],
            on_assign=lambda _c, parts, i=index: on_assign(i, parts),
            on_revoke=lambda _c, _parts, i=index: on_revoke(i),
        )
    seen: dict[tuple[int, int], int] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        len(seen) < 200 or not all(len(a) == 1 for a in assigned)
    ):
        for index, member in enumerate(members):
            message = member.poll(0.1)
            if message is not None and not message.error():
                seen[(message.partition(), message.offset())] = index
                # A commit during a rebalance fails: the partition's next owner reads on.
                with contextlib.suppress(KafkaException):
                    member.commit(message=message, asynchronous=False)
    for member in members:
        member.close()
    assert len(seen) == 200
    # Once the group settled, each member owned one partition.
    final = {seen[(p, 49)] for p in (0, 1)}
    assert final == {0, 1}


def test_kafka_python_group_consumer_commits_and_resumes(served: Served) -> None:
    from kafka import KafkaConsumer

    fill(served.kafka_address, "events", 40)

    def consumer() -> KafkaConsumer:
        return KafkaConsumer(
            "events",
            bootstrap_servers=served.kafka_address,
            group_id="py",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            consumer_timeout_ms=4000,
        )

    first = consumer()
    got = []
    for message in first:
        got.append(message)
        if len(got) == 40:
            break
    assert len(got) == 40
    first.commit()
    first.close()
    fill(served.kafka_address, "events", 10)
    second = consumer()
    rest = list(second)
    second.close()
    assert len(rest) == 10


# -- idempotent producers ------------------------------------------------------------------------


def test_idempotent_librdkafka_producer(served: Served) -> None:
    fill(served.kafka_address, "events", 1000, **{"enable.idempotence": True, "acks": "all"})
    partitions = {p["topic"] + str(p["partition"]): p for p in served.status()["partitions"]}
    assert partitions["events0"]["logEndOffset"] + partitions["events1"]["logEndOffset"] == 1000


def idempotent_batch(producer_id: int, epoch: int, sequence: int, count: int = 3) -> bytes:
    return build_batch(
        [NewRecord(b"k%d" % (sequence + i), b"v", NOW_MS) for i in range(count)],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


def test_duplicate_batches_are_acknowledged_without_a_second_append(root: Path) -> None:
    server = start(root)
    with RawClient(server.kafka_address) as client:
        init = client.call(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert init["error_code"] == 0
        pid, epoch = init["producer_id"], init["producer_epoch"]
        first = produce(client, "events", 0, idempotent_batch(pid, epoch, 0))
        assert first is not None and (first["error_code"], first["base_offset"]) == (0, 0)
        second = produce(client, "events", 0, idempotent_batch(pid, epoch, 3))
        assert second is not None and second["base_offset"] == 3
        # A retry of either batch: the original offset, nothing appended.
        for sequence, offset in ((0, 0), (3, 3)):
            retry = produce(client, "events", 0, idempotent_batch(pid, epoch, sequence))
            assert retry is not None and (retry["error_code"], retry["base_offset"]) == (0, offset)
        assert server.partition("events-0")["logEndOffset"] == 6
        gap = produce(client, "events", 0, idempotent_batch(pid, epoch, 9))
        assert gap is not None and gap["error_code"] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        newer = produce(client, "events", 0, idempotent_batch(pid, epoch + 1, 0))
        assert newer is not None and (newer["error_code"], newer["base_offset"]) == (0, 6)
        fenced = produce(client, "events", 0, idempotent_batch(pid, epoch, 6))
        assert fenced is not None and fenced["error_code"] == 47  # INVALID_PRODUCER_EPOCH
    assert server.partition("events-0")["logEndOffset"] == 9
    metrics = server.metrics()
    assert metrics["logkeeper_kafka_duplicate_batches_total"] == 2
    assert metrics["logkeeper_kafka_errors_total{api=Produce,code=45}"] == 1
    assert server.terminate() == 0
    # After a restart the producer's last batch is known again (rebuilt from the log).
    server = start(root)
    try:
        with RawClient(server.kafka_address) as client:
            retry = produce(client, "events", 0, idempotent_batch(pid, epoch + 1, 0))
            assert retry is not None and (retry["error_code"], retry["base_offset"]) == (0, 6)
        assert server.partition("events-0")["logEndOffset"] == 9
    finally:
        assert server.terminate() == 0


# -- acks, limits and bad batches ---------------------------------------------------------------


def test_acks_zero_one_all_and_invalid(served: Served) -> None:
    batch = build_batch([NewRecord(b"k", b"v", NOW_MS)])
    with RawClient(served.kafka_address) as client:
        assert produce(client, "events", 1, batch, acks=0) is None
        # No answer to acks=0: the next request's answer is the next thing on the wire.
        for acks, offset in ((1, 1), (-1, 2)):
            answer = produce(client, "events", 1, batch, acks=acks)
            assert answer is not None and (answer["error_code"], answer["base_offset"]) == (
                0,
                offset,
            )
        invalid = produce(client, "events", 1, batch, acks=2)
        assert invalid is not None and invalid["error_code"] == 21  # INVALID_REQUIRED_ACKS
        unknown = produce(client, "nope", 0, batch)
        assert unknown is not None and unknown["error_code"] == 3
    assert served.partition("events-1")["logEndOffset"] == 3


def test_oversize_and_corrupt_batches_are_refused_and_nothing_is_appended(served: Served) -> None:
    with RawClient(served.kafka_address) as client:
        big = build_batch([NewRecord(b"k", os.urandom(5000), NOW_MS)])
        answer = produce(client, "small", 0, big)
        assert answer is not None and answer["error_code"] == 10  # MESSAGE_TOO_LARGE
        assert "small-0" in (answer["error_message"] or "")
        corrupt = bytearray(build_batch([NewRecord(b"k", b"value", NOW_MS)]))
        corrupt[-1] ^= 0xFF  # a record byte: the CRC no longer matches
        answer = produce(client, "small", 0, bytes(corrupt))
        assert answer is not None and answer["error_code"] == 2  # CORRUPT_MESSAGE
        torn = build_batch([NewRecord(b"k", b"value", NOW_MS)])[:-3]
        answer = produce(client, "small", 0, torn)
        assert answer is not None and answer["error_code"] == 2
        good = produce(client, "small", 0, build_batch([NewRecord(b"k", b"ok", NOW_MS)]))
        assert good is not None and (good["error_code"], good["base_offset"]) == (0, 0)
    assert served.partition("small-0")["logEndOffset"] == 1


# -- admin APIs -------------------------------------------------------------------------------


def test_delete_records_and_describe_configs(served: Served) -> None:
    fill(served.kafka_address, "events", 100)
    admin = AdminClient({"bootstrap.servers": served.kafka_address})
    futures = admin.delete_records([Partition("events", 0, 20), Partition("events", 1, -1)])
    results = {tp.partition: f.result(10) for tp, f in futures.items()}
    assert results[0].low_watermark == 20 and results[1].low_watermark == 50
    assert served.partition("events-0")["logStartOffset"] == 20
    resource = ConfigResource(ConfigResource.Type.TOPIC, "profiles")
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert not configs["cleanup.policy"].is_default
    assert configs["retention.ms"].value == "604800000" and configs["retention.ms"].is_default
    missing = ConfigResource(ConfigResource.Type.TOPIC, "nope")
    with pytest.raises(KafkaException):
        admin.describe_configs([missing])[missing].result(10)
    # A consumer positioned before the new log start is told OFFSET_OUT_OF_RANGE and resets.
    consumer = Consumer(
        {
            "bootstrap.servers": served.kafka_address,
            "group.id": "reset",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([Partition("events", 0, 5)])
    got = poll_values(consumer, 30)
    consumer.close()
    assert [m.offset() for m in got] == list(range(20, 50))


def test_consumer_reads_across_rolls_and_compaction_gaps(served: Served) -> None:
    address = served.kafka_address
    producer = Producer({"bootstrap.servers": address, "linger.ms": 0})
    for round_ in range(5):
        for key in range(20):
            producer.produce("profiles", key=b"user-%d" % key, value=b"r%d-" % round_ + b"x" * 100)
        producer.flush(10)
    assert served.partition("profiles-0")["segments"] > 1
    assert served.post("/v1/topics/profiles/compact-now")["_code"] == 200
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        partition = served.partition("profiles-0")
        if partition.get("lastCleanMs"):
            break
        time.sleep(0.2)
    consumer = Consumer(
        {"bootstrap.servers": address, "group.id": "compacted", "enable.auto.commit": False}
    )
    consumer.assign([Partition("profiles", 0, 0)])
    got = poll_values(consumer, 100, timeout_s=8)
    consumer.close()
    latest = {m.key(): (m.offset(), m.value()) for m in got}
    # Every key's latest value is read, past the offsets the cleaner removed.
    assert {k: v for k, (_o, v) in latest.items()} == {
        b"user-%d" % k: b"r4-" + b"x" * 100 for k in range(20)
    }
    assert len(got) < 100  # compaction removed records: the consumer stepped over gaps
    offsets = [m.offset() for m in got]
    assert offsets == sorted(offsets) and offsets[-1] == 99


# -- zero-copy fetch ---------------------------------------------------------------------------


def test_large_fetches_are_sent_with_sendfile_over_plaintext_and_copied_over_tls(
    tmp_path: Path,
) -> None:
    """Fetches of at least ZERO_COPY_MIN_BYTES of a partition go from the segment file to the
    socket with sendfile (counted apart) and a consumer reads them exactly; over TLS the same
    regions are read and written through the TLS transport (nothing counted as zero copy)."""
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(tmp_path, topic("bulk", 1, {"segment.bytes": 1 << 20}))
    cert, key = self_signed(tmp_path)
    values = [random.Random(i).randbytes(1000) for i in range(3000)]

    def round_trip(server: Served, **security: Any) -> None:
        producer = Producer({"bootstrap.servers": server.kafka_address, "linger.ms": 5, **security})
        for i, value in enumerate(values):
            producer.produce("bulk", key=b"k%d" % i, value=value)
        assert producer.flush(30) == 0
        consumer = Consumer(
            {"bootstrap.servers": server.kafka_address, "group.id": "bulk", **security}
        )
        consumer.assign([Partition("bulk", 0, 0)])
        got = poll_values(consumer, len(values))
        consumer.close()
        assert [m.value() for m in got] == values
        assert [m.offset() for m in got] == list(range(len(values)))

    plain = start(tmp_path)
    try:
        round_trip(plain)
        metrics = plain.metrics()
        zero_copy = metrics["logkeeper_kafka_sent_zero_copy_bytes_total"]
        assert zero_copy >= 2_000_000  # most of the ~3 MB of records went by sendfile
        assert metrics["logkeeper_kafka_sent_bytes_total"] > zero_copy
    finally:
        assert plain.terminate() == 0
    tls = start(tmp_path, "--kafka-tls-cert", str(cert), "--kafka-tls-key", str(key))
    try:
        values[:] = values[::-1]
        secure = {"security.protocol": "SSL", "ssl.ca.location": str(cert)}
        producer = Producer({"bootstrap.servers": tls.kafka_address, **secure})
        # The topic now holds the first 3000 values, then these: read all from offset 3000.
        for i, value in enumerate(values):
            producer.produce("bulk", key=b"t%d" % i, value=value)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": tls.kafka_address, "group.id": "tls", **secure})
        consumer.assign([Partition("bulk", 0, 3000)])
        got = poll_values(consumer, len(values))
        consumer.close()
        assert [m.value() for m in got] == values
        metrics = tls.metrics()
        assert metrics["logkeeper_kafka_sent_zero_copy_bytes_total"] == 0
        assert metrics["logkeeper_kafka_sent_bytes_total"] > 3_000_000
    finally:
        assert tls.terminate() == 0


# -- robustness --------------------------------------------------------------------------------


def test_random_and_truncated_frames_while_a_client_keeps_working(served: Served) -> None:
    host, port = served.kafka_address.rsplit(":", 1)
    stop = threading.Event()
    failures: list[BaseException] = []
    sent = [0]

    def fuzz() -> None:
        rng = random.Random(11)
        valid = struct.pack(">hhi", 3, 12, 7) + b"\x00\x04fuzz\x00\x01\x00\x00\x00"
        while not stop.is_set():
            try:
                with socket.create_connection((host, int(port)), timeout=2) as sock:
                    kind = rng.randrange(4)
                    if kind == 0:
                        sock.sendall(os.urandom(rng.randrange(1, 200)))
                    elif kind == 1:  # a valid request cut short
                        frame = struct.pack(">i", len(valid)) + valid
                        sock.sendall(frame[: rng.randrange(1, len(frame))])
                    elif kind == 2:  # a valid header, random body
                        body = valid[:8] + os.urandom(rng.randrange(0, 50))
                        sock.sendall(struct.pack(">i", len(body)) + body)
                    else:  # a valid frame, one byte flipped
                        frame = bytearray(struct.pack(">i", len(valid)) + valid)
                        frame[rng.randrange(4, len(frame))] ^= 1 << rng.randrange(8)
                        sock.sendall(bytes(frame))
                    sent[0] += 1
                    sock.settimeout(0.2)
                    with contextlib.suppress(TimeoutError, ConnectionError):
                        sock.recv(4096)
            except BaseException as exc:  # the worker must keep accepting connections
                failures.append(exc)
                return

    threads = [threading.Thread(target=fuzz) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        producer = Producer({"bootstrap.servers": served.kafka_address, "linger.ms": 1})
        batches = 0
        deadline = time.monotonic() + 60
        while (batches < 20 or sent[0] < 100) and time.monotonic() < deadline:
            for i in range(10):
                producer.produce("events", value=b"%d-%d" % (batches, i), partition=0)
            assert producer.flush(10) == 0
            batches += 1
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert failures == []
    assert sent[0] >= 100
    assert served.partition("events-0")["logEndOffset"] == batches * 10
    assert served.metrics()["logkeeper_kafka_malformed_requests_total"] > 0


# -- kcat (Debian's librdkafka tool) --------------------------------------------------------------


@pytest.mark.skipif(
    not any(os.access(os.path.join(d, "kcat"), os.X_OK) for d in os.environ["PATH"].split(":")),
    reason="kcat is installed by scripts/setup.sh (Debian package kcat)",
)
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produces_and_consumes(served: Served, codec: str) -> None:
    lines = "".join(f"key{i}:value-{i}\n" for i in range(50))
    subprocess.run(
        [
            "kcat",
            "-P",
            "-b",
            served.kafka_address,
            "-t",
            "events",
            "-p",
            "1",
            "-K",
            ":",
            "-z",
            codec,
        ],
        input=lines.encode(),
        check=True,
        timeout=60,
    )
    out = subprocess.run(
        [
            "kcat",
            "-C",
            "-b",
            served.kafka_address,
            "-t",
            "events",
            "-p",
            "1",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%k=%s@%o\n",
        ],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    assert out.splitlines() == [f"key{i}=value-{i}@{i}" for i in range(50)]
    grouped = subprocess.run(
        [
            "kcat",
            "-b",
            served.kafka_address,
            "-G",
            "kcat-group",
            "-o",
            "beginning",
            "-e",
            "-f",
            "%s\n",
            "events",
        ],
        capture_output=True,
        check=True,
        timeout=90,
    ).stdout.decode()
    assert sorted(grouped.split()) == sorted(f"value-{i}" for i in range(50))


# -- security and timeouts ---------------------------------------------------------------------


def self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_sasl_over_tls_with_every_mechanism(root: Path) -> None:
    cert, key = self_signed(root)
    users = root / "users.yaml"
    users.write_text("alice: wonderland\nbob: builder\n", encoding="utf-8")
    server = start(
        root,
        "--kafka-tls-cert",
        str(cert),
        "--kafka-tls-key",
        str(key),
        "--kafka-sasl-users",
        str(users),
    )
    try:
        for n, mechanism in enumerate(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")):
            secure = {
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": str(cert),
                "sasl.mechanism": mechanism,
                "sasl.username": "alice",
                "sasl.password": "wonderland",
            }
            fill(server.kafka_address, "small", 5, **secure)
            consumer = Consumer(
                {"bootstrap.servers": server.kafka_address, "group.id": f"tls{n}", **secure}
            )
            consumer.assign([Partition("small", 0, 5 * n)])
            assert [m.value() for m in poll_values(consumer, 5)] == [b"v%d" % i for i in range(5)]
            consumer.close()
            wrong = Producer(
                {
                    "bootstrap.servers": server.kafka_address,
                    **secure,
                    "sasl.password": "nope",
                    "message.timeout.ms": 3000,
                    "log_level": 0,
                }
            )
            refused: list[Any] = []
            wrong.produce("small", value=b"x", on_delivery=lambda e, _m, r=refused: r.append(e))
            wrong.flush(10)
            del wrong
            assert refused and refused[0] is not None
        assert server.partition("small-0")["logEndOffset"] == 15
        metrics = server.metrics()
        assert metrics["logkeeper_kafka_failed_authentications_total"] >= 3
        # Without TLS the port does not speak to a plaintext client at all.
        with (
            pytest.raises((ConnectionError, OSError, struct.error)),
            RawClient(server.kafka_address, timeout_s=3) as client,
        ):
            client.call(18, 0, {})
        assert "authenticated as alice" in server.log_text()
    finally:
        assert server.terminate() == 0


def test_sasl_without_tls_and_requests_before_authentication(root: Path) -> None:
    users = root / "users.yaml"
    users.write_text("alice: wonderland\n", encoding="utf-8")
    server = start(root, "--kafka-sasl-users", str(users))
    try:
        fill(
            server.kafka_address,
            "small",
            3,
            **{
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "alice",
                "sasl.password": "wonderland",
            },
        )
        with RawClient(server.kafka_address) as client:
            assert client.call(18, 3, {})["error_code"] == 0  # allowed before authentication
            client.send(3, 12, {"topics": None})  # Metadata before authentication: closed
            with pytest.raises(ConnectionError):
                client.receive(3, 12)
        wait_for(lambda: "before SASL authentication" in server.log_text(), "the refusal logged")
    finally:
        assert server.terminate() == 0


def test_plaintext_off_loopback_needs_an_explicit_choice(root: Path) -> None:
    refused = subprocess.run(
        [
            str(Path(os.sys.executable).parent / "logkeeper"),
            "serve",
            "--data-dir",
            str(root / "data"),
            "--topics",
            str(root / "topics"),
            "--http-port",
            "0",
            "--kafka-port",
            "0",
            "--kafka-host",
            "0.0.0.0",
        ],
        capture_output=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert b"not a loopback address" in refused.stderr


def test_a_stalled_request_is_timed_out_and_others_are_served(root: Path) -> None:
    server = start(root, "--kafka-request-timeout-ms", "500")
    try:
        host, port = server.kafka_address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as stalled:
            stalled.sendall(struct.pack(">i", 100) + b"\x00\x03")  # 2 of 100 bytes, then nothing
            fill(server.kafka_address, "small", 2)  # another client is served meanwhile
            stalled.settimeout(5)
            assert stalled.recv(10) == b""  # closed by the worker
        assert server.metrics()["logkeeper_kafka_timed_out_connections_total"] == 1
    finally:
        assert server.terminate() == 0
