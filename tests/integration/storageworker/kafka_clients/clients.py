"""Helpers of the kafka_clients tests: a worker started with a kafka port, and librdkafka
producers, group consumers and a self-signed TLS certificate to talk to it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer

from tests.integration.storageworker.test_serve import Served


def start(tmp_path: Path, *extra: str) -> Served:
    return Served(tmp_path, "--kafka-port", "0", *extra)


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
