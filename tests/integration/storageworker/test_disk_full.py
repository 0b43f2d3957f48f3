"""A full disk is an expected condition (issue 20): a real ``logkeeper serve`` whose data directory
is a small tmpfs, under an idempotent acks=all producer (librdkafka).

- Below the free-space floor (``minFreeBytes``) produce is refused with the retriable
  KAFKA_STORAGE_ERROR before the disk fills; status, metrics and the directory say so; stored
  records stay readable.
- With the floor at 0 the filesystem itself fills: the append that hits ENOSPC fails with the
  same retriable error, leaves the log at its last complete batch, and the directory stays
  online (Kafka would take it offline).
- Once space is free again, writes resume by themselves, without a restart.
- Nothing acknowledged is lost, no record is written twice, and ``logkeeper verify`` passes.

Mounting a tmpfs needs root (CI runs as root on this machine kind).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer

from tests.integration.storageworker.test_serve import (
    SETTINGS,
    Served,
    declare,
    topic,
    wait_for,
)

pytestmark = pytest.mark.integration

FS_BYTES = 24 * 1024 * 1024
FLOOR = 6 * 1024 * 1024
VALUE = 8 * 1024
TOPIC_CONFIG = {"segment.bytes": 1024 * 1024, "segment.index.bytes": 65536}


@pytest.fixture
def volume(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.fail("mounting the test's tmpfs needs root (CI on this machine kind runs as root)")
    data = tmp_path / "data"
    data.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(data)], check=True
    )
    (tmp_path / "topics").mkdir()
    try:
        yield tmp_path
    finally:
        subprocess.run(["umount", "-l", str(data)], check=False)


def settings(min_free_bytes: int) -> str:
    return SETTINGS + f"minFreeBytes: {min_free_bytes}\n"


class Feed:
    """An idempotent acks=all producer that records what was acknowledged and what failed."""

    def __init__(self, address: str) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": address,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 4000,
            }
        )
        self.acked: list[bytes] = []
        self.failed: list[KafkaError] = []
        self.sent = 0

    def _done(self, error: KafkaError | None, message: Any) -> None:
        if error is None:
            self.acked.append(message.value())
        else:
            self.failed.append(error)

    def send(self, count: int) -> None:
        for _ in range(count):
            value = b"%08d" % self.sent + b"x" * (VALUE - 8)
            self.sent += 1
            self.producer.produce("events", value=value, partition=0, on_delivery=self._done)
            self.producer.poll(0)
        self.producer.flush(30)


def consume_all(address: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": f"check-{os.getpid()}-{id(address)}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["events"])
    values: list[bytes] = []
    idle = 0
    while idle < 20:
        message = consumer.poll(0.25)
        if message is None:
            idle += 1 if values else 0
            continue
        assert message.error() is None, message.error()
        values.append(message.value())
        idle = 0
    consumer.close()
    return values


def storage_errors(served: Served) -> float:
    return served.metrics().get("logkeeper_kafka_errors_total{api=Produce,code=56}", 0.0)


def test_a_full_disk_refuses_writes_keeps_serving_and_recovers_without_a_restart(
    volume: Path,
) -> None:
    (volume / "settings.yaml").write_text(settings(FLOOR), encoding="utf-8")
    declare(volume, topic("events", 1, TOPIC_CONFIG))
    served = Served(volume, "--kafka-port", "0")
    data = volume / "data"
    feed = Feed(served.kafka_address)
    try:
        # 1. Produce until the floor refuses: the refusals are retriable, the producer lives on.
        while not feed.failed:
            assert feed.sent < FS_BYTES // VALUE, "never refused"
            feed.send(100)
        (entry,) = served.status()["dirs"]
        assert entry["online"] and entry["diskPressure"]["underFloor"]
        assert entry["diskPressure"]["floorBytes"] == FLOOR
        assert "below the floor" in entry["diskPressure"]["reason"]
        metrics = served.metrics()
        assert metrics[f"logkeeper_dir_disk_pressure{{dir={data}}}"] == 1.0
        assert storage_errors(served) > 0
        assert all(e.code() == KafkaError._MSG_TIMED_OUT and not e.fatal() for e in feed.failed)
        acked_at_floor = len(feed.acked)
        assert acked_at_floor > 0
        # Stored records stay readable.
        assert consume_all(served.kafka_address) == feed.acked

        # 2. Floor 0: the filesystem itself fills. A filler takes all but a little space.
        (volume / "settings.yaml").write_text(settings(0), encoding="utf-8")
        wait_for(lambda: served.status()["settings"]["minFreeBytes"] == 0, "settings reload")
        free = os.statvfs(data).f_bavail * os.statvfs(data).f_frsize
        with open(data / "filler", "wb") as filler:
            filler.write(b"\0" * max(free - 3 * VALUE, 0))
        errors_before = storage_errors(served)
        feed.failed.clear()
        while not feed.failed:
            feed.send(20)
        assert storage_errors(served) > errors_before
        (entry,) = served.status()["dirs"]
        assert entry["online"], "ENOSPC took the directory offline"
        assert entry["diskPressure"]["underFloor"]
        assert served.request("GET", "/readyz")[0] == 200
        assert consume_all(served.kafka_address) == feed.acked
        stored = served.partition("events-0")
        assert stored["logEndOffset"] == len(feed.acked)

        # 3. Space is back: writes resume without a restart.
        (data / "filler").unlink()
        acked = len(feed.acked)
        wait_for(lambda: not served.status()["dirs"][0]["diskPressure"]["underFloor"], "space")
        feed.failed.clear()
        feed.send(50)
        assert feed.failed == [] and len(feed.acked) == acked + 50
        assert served.metrics()[f"logkeeper_dir_disk_pressure{{dir={data}}}"] == 0.0
    finally:
        feed.producer.flush(10)
        assert served.terminate() == 0
    # Nothing acknowledged was lost, nothing was written twice, and the files verify.
    assert len(set(feed.acked)) == len(feed.acked)
    verified = subprocess.run(
        [sys.executable, "-m", "logkeeper.cli", "verify", "--dir", str(data)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    served = Served(volume, "--kafka-port", "0")
    try:
        assert consume_all(served.kafka_address) == feed.acked
    finally:
        assert served.terminate() == 0
