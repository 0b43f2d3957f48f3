"""Producing to the kafka port: idempotent producers (librdkafka's, and duplicates, gaps and
fencing by raw requests, also after a restart), acks 0, 1, all and invalid, oversize and
corrupt batches refused with nothing appended."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from storagecore.records.batch import NewRecord
from storagecore.records.memory_records_builder import build_batch
from tests.integration.storageworker.kafka_clients.clients import fill, start
from tests.integration.storageworker.test_serve import Served
from tests.kafka_support.raw_client import RawClient, produce

pytestmark = pytest.mark.integration
NOW_MS = int(time.time() * 1000)


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
