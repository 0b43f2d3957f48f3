"""Fetching from the kafka port: a consumer reads across rolls and the gaps compaction left,
and large fetches go by sendfile over plaintext and through the TLS transport over TLS."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as Partition

from tests.integration.storageworker.kafka_clients.clients import poll_values, self_signed, start
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic

pytestmark = pytest.mark.integration


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
