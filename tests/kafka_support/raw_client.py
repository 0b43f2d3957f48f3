"""A minimal Kafka client for tests that need to send exactly the bytes they mean.

It frames requests with the worker's own codec (checked field by field against Kafka's
specifications and byte for byte against kafka-python in the unit tests), so a test can
resend a batch, send acks=0, craft a corrupt CRC or an oversize batch, and read the answer.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from storageworker.kafka.messages import MESSAGES
from storageworker.kafka.schema import decode, encode
from storageworker.kafka.wire import Reader, Writer


class RawClient:
    def __init__(self, address: str, timeout_s: float = 10) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def send(self, api_key: int, version: int, data: dict[str, Any]) -> int:
        correlation_id, framed = self.frame(api_key, version, data)
        self.sock.sendall(framed)
        return correlation_id

    def frame(self, api_key: int, version: int, data: dict[str, Any]) -> tuple[int, bytes]:
        """The next request, framed but not sent (several can then go in one write):
        (correlation id, bytes)."""
        message = MESSAGES[api_key]
        flexible = message.is_flexible(version)
        self.correlation_id += 1
        out = Writer().int16(api_key).int16(version).int32(self.correlation_id)
        out.nullable_string("raw-test")
        if flexible:
            out.tagged_fields()
        payload = encode(message.request, out, version, flexible, data).bytes()
        return self.correlation_id, struct.pack(">i", len(payload)) + payload

    def receive(self, api_key: int, version: int) -> tuple[int, dict[str, Any]]:
        size = struct.unpack(">i", self._exactly(4))[0]
        reader = Reader(self._exactly(size))
        correlation_id = reader.int32()
        message = MESSAGES[api_key]
        if message.response_header_version(version) == 1:
            decode((), reader, version, True)
        return correlation_id, decode(
            message.response, reader, version, message.is_flexible(version)
        )

    def call(self, api_key: int, version: int, data: dict[str, Any]) -> dict[str, Any]:
        sent = self.send(api_key, version, data)
        correlation_id, answer = self.receive(api_key, version)
        assert correlation_id == sent
        return answer

    def _exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            chunk = self.sock.recv(size - len(chunks))
            if not chunk:
                raise ConnectionError("closed by the worker")
            chunks += chunk
        return bytes(chunks)


def produce_data(topic: str, partition: int, records: bytes, acks: int = -1) -> dict[str, Any]:
    """A Produce request's fields: ``records`` to one partition."""
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 10_000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }


def produce(
    client: RawClient,
    topic: str,
    partition: int,
    records: bytes,
    *,
    acks: int = -1,
    version: int = 9,
) -> dict[str, Any] | None:
    data = produce_data(topic, partition, records, acks)
    if acks == 0:
        client.send(0, version, data)
        return None
    answer = client.call(0, version, data)
    result: dict[str, Any] = answer["responses"][0]["partition_responses"][0]
    return result
