"""Requests pipelined on one connection (several in one write, as the Java producer's five in
flight arrive): every answer comes, in order, whether the worker writes some together or not
(``framing.HeldAnswers``); an answer never waits for a request that waits (a long-polling
Fetch) nor for a client that stops reading, and none is lost when the connection ends."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from storagecore.records.batch import NewRecord
from storagecore.records.memory_records_builder import build_batch
from tests.integration.storageworker.kafka_clients.clients import fill, start
from tests.integration.storageworker.test_serve import Served, wait_for
from tests.kafka_support.raw_client import RawClient, produce_data

pytestmark = pytest.mark.integration
NOW_MS = int(time.time() * 1000)


def idempotent_batches(client: RawClient, count: int, records: int = 3) -> list[bytes]:
    init = client.call(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert init["error_code"] == 0
    return [
        build_batch(
            [NewRecord(b"k", b"v%d" % (n * records + i), NOW_MS) for i in range(records)],
            producer_id=init["producer_id"],
            producer_epoch=init["producer_epoch"],
            base_sequence=n * records,
        )
        for n in range(count)
    ]


def answers(client: RawClient, sent: list[int]) -> list[dict[str, Any]]:
    out = []
    for correlation_id in sent:
        got, answer = client.receive(0, 9)
        assert got == correlation_id
        out.append(answer["responses"][0]["partition_responses"][0])
    return out


def test_pipelined_produce_requests_are_all_answered_in_order(served: Served) -> None:
    with RawClient(served.kafka_address) as client:
        batches = idempotent_batches(client, 40)
        for start_at in range(0, 40, 20):  # twice 20 requests, each time in one write
            framed = [client.frame(0, 9, produce_data("events", 0, b)) for b in batches]
            framed = framed[start_at : start_at + 20]
            client.sock.sendall(b"".join(data for _, data in framed))
            got = answers(client, [correlation_id for correlation_id, _ in framed])
            assert [(a["error_code"], a["base_offset"]) for a in got] == [
                (0, 3 * n) for n in range(start_at, start_at + 20)
            ]


def test_a_produce_answer_does_not_wait_for_a_long_polling_fetch(served: Served) -> None:
    with RawClient(served.kafka_address, timeout_s=20) as client:
        batch = build_batch([NewRecord(b"k", b"v", NOW_MS)])
        produced, first = client.frame(0, 9, produce_data("events", 0, batch))
        fetch = {  # partition 1 stays empty: the fetch waits its 30 s
            "max_wait_ms": 30_000,
            "min_bytes": 1,
            "topics": [
                {
                    "topic": "events",
                    "partitions": [
                        {"partition": 1, "fetch_offset": 0, "partition_max_bytes": 1024}
                    ],
                }
            ],
        }
        _, second = client.frame(1, 12, fetch)
        client.sock.sendall(first + second)
        # Within the socket's 20 s: the answer is written before the fetch starts waiting.
        assert answers(client, [produced])[0]["error_code"] == 0


def test_answers_to_requests_served_are_sent_before_a_malformed_frame_closes(
    served: Served,
) -> None:
    with RawClient(served.kafka_address) as client:
        batches = idempotent_batches(client, 5)
        framed = [client.frame(0, 9, produce_data("events", 1, b)) for b in batches]
        garbage = struct.pack(">i", 12) + struct.pack(">hhi", 0, 9, 99) + b"\xff\xff\xff\xff"
        produce_bad = struct.pack(">i", len(garbage) - 4) + garbage[4:]
        client.sock.sendall(b"".join(data for _, data in framed) + produce_bad)
        got = answers(client, [correlation_id for correlation_id, _ in framed])
        assert [(a["error_code"], a["base_offset"]) for a in got] == [(0, 3 * n) for n in range(5)]
        assert client.sock.recv(10) == b""  # then the worker closed the connection


def test_a_producer_that_reads_no_answers_is_timed_out(root: Path) -> None:
    """Answers held or not, a client that sends and never reads fills the buffers, and the
    write that cannot be drained within ``request_timeout_ms`` ends the connection."""
    server = start(root, "--kafka-request-timeout-ms", "500")
    try:
        with RawClient(server.kafka_address) as client:
            batches = idempotent_batches(client, 3000, records=1)
            client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            payload = b"".join(client.frame(0, 9, produce_data("events", 0, b))[1] for b in batches)
            client.sock.settimeout(30)
            with contextlib.suppress(OSError):  # closed by the worker while we still send
                client.sock.sendall(payload)
            wait_for(
                lambda: server.metrics()["logkeeper_kafka_timed_out_connections_total"] == 1,
                "the producer that reads nothing timed out",
            )
        fill(server.kafka_address, "small", 2)  # the worker serves others as before
    finally:
        assert server.terminate() == 0
