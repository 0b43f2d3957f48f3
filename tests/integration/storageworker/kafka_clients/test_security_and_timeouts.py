"""Security and timeouts of the kafka port: SASL over TLS with every mechanism, SASL without
TLS and requests before authentication, plaintext off loopback only by explicit choice, a
stalled request timed out while others are served."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as Partition

from tests.integration.storageworker.kafka_clients.clients import (
    fill,
    poll_values,
    self_signed,
    start,
)
from tests.integration.storageworker.test_serve import wait_for
from tests.kafka_support.raw_client import RawClient

pytestmark = pytest.mark.integration


# -- security and timeouts ---------------------------------------------------------------------


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


def test_a_client_that_takes_no_responses_is_timed_out(root: Path) -> None:
    """Answers pile up in the worker's send buffer, then in the transport's: the write that
    the kernel does not take all of is drained under ``request_timeout_ms`` (the small
    answers' path skips the drain only when the kernel took everything)."""
    server = start(root, "--kafka-request-timeout-ms", "500")
    try:
        host, port = server.kafka_address.rsplit(":", 1)
        with socket.socket() as silent:
            silent.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            silent.settimeout(10)
            silent.connect((host, int(port)))
            request = struct.pack(">hhih", 18, 0, 1, 0)  # ApiVersions v0, client id ""
            silent.sendall((struct.pack(">i", len(request)) + request) * 20_000)
            wait_for(
                lambda: server.metrics()["logkeeper_kafka_timed_out_connections_total"] == 1,
                "the silent client timed out",
            )
            while silent.recv(1 << 16):  # what the worker had sent, then its close
                pass
        fill(server.kafka_address, "small", 2)  # the worker serves others as before
    finally:
        assert server.terminate() == 0
