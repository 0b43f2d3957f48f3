"""Robustness of the kafka port: random and truncated frames on other connections while a
client keeps producing."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import struct
import threading
import time

import pytest
from confluent_kafka import Producer

from tests.integration.storageworker.test_serve import Served

pytestmark = pytest.mark.integration


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
