"""Transactions on a real ``logkeeper serve``, request by request (exact fields and codes):
a transactional Produce outside its transaction is refused (KIP-890 part 1), read_committed
Fetch stops at the last stable offset and lists the aborted transactions, ListOffsets
read_committed answers the last stable offset, and a restart keeps it all."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storagecore.records.batch import NewRecord
from storagecore.records.memory_records_builder import build_batch
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic
from tests.kafka_support.raw_client import RawClient

pytestmark = pytest.mark.integration
TXN = "raw-txn"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(tmp_path, topic("orders", 1, {}))
    return tmp_path


@pytest.fixture
def served(root: Path) -> Iterator[Served]:
    server = Served(root, "--kafka-port", "0")
    yield server
    if server.process.poll() is None:
        assert server.terminate() == 0


def batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    now = int(time.time() * 1000)
    return build_batch(
        [NewRecord(b"k", v, now) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def send(client: RawClient, records: bytes) -> dict[str, Any]:
    answer = client.call(0, 9, {
        "transactional_id": TXN, "acks": -1, "timeout_ms": 10_000,
        "topic_data": [{"name": "orders", "partition_data": [{"index": 0, "records": records}]}],
    })  # fmt: skip
    result: dict[str, Any] = answer["responses"][0]["partition_responses"][0]
    return result


def fetch(client: RawClient, isolation: int) -> dict[str, Any]:
    answer = client.call(1, 12, {
        "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "orders", "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": "",
    })  # fmt: skip
    result: dict[str, Any] = answer["responses"][0]["partitions"][0]
    return result


def latest(client: RawClient, isolation: int) -> int:
    answer = client.call(2, 7, {
        "replica_id": -1, "isolation_level": isolation,
        "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "timestamp": -1}]}],
    })  # fmt: skip
    offset: int = answer["topics"][0]["partitions"][0]["offset"]
    return offset


def add(client: RawClient, pid: int, epoch: int) -> int:
    answer = client.call(24, 3, {
        "v3_and_below_transactional_id": TXN, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": "orders", "partitions": [0]}],
    })  # fmt: skip
    code: int = answer["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
        "partition_error_code"
    ]
    return code


def end(client: RawClient, pid: int, epoch: int, commit: bool) -> int:
    answer = client.call(26, 4, {"transactional_id": TXN, "producer_id": pid,
                                 "producer_epoch": epoch, "committed": commit})  # fmt: skip
    code: int = answer["error_code"]
    return code


def test_produce_fetch_and_list_offsets_in_transactions(served: Served, root: Path) -> None:
    with RawClient(served.kafka_address) as client:
        found = client.call(10, 4, {"key_type": 1, "coordinator_keys": [TXN]})
        assert found["coordinators"][0]["error_code"] == 0
        init = client.call(22, 5, {"transactional_id": TXN, "transaction_timeout_ms": 60_000,
                                   "producer_id": -1, "producer_epoch": -1})  # fmt: skip
        assert init["error_code"] == 0
        pid, epoch = init["producer_id"], init["producer_epoch"]
        refused = send(client, batch(pid, epoch, 0, b"early"))
        assert refused["error_code"] == 48  # INVALID_TXN_STATE: not added to the transaction
        assert "orders-0 is not in an ongoing transaction" in refused["error_message"]
        assert add(client, pid, epoch) == 0
        assert send(client, batch(pid, epoch, 0, b"a0", b"a1"))["base_offset"] == 0
        assert end(client, pid, epoch, commit=False) == 0  # ABORT marker at 2
        assert add(client, pid, epoch) == 0
        assert send(client, batch(pid, epoch, 2, b"c0"))["base_offset"] == 3
        assert end(client, pid, epoch, commit=True) == 0  # COMMIT marker at 4
        assert add(client, pid, epoch) == 0
        assert send(client, batch(pid, epoch, 3, b"open"))["base_offset"] == 5
        committed = fetch(client, 1)
        assert (committed["high_watermark"], committed["last_stable_offset"]) == (6, 5)
        assert committed["aborted_transactions"] == [{"producer_id": pid, "first_offset": 0}]
        uncommitted = fetch(client, 0)
        assert uncommitted["last_stable_offset"] == 5
        assert uncommitted["aborted_transactions"] is None
        assert len(uncommitted["records"]) > len(committed["records"])
        assert (latest(client, 0), latest(client, 1)) == (6, 5)
    # A clean stop and a start: the coordinator and the partition agree on the open one.
    assert served.terminate() == 0
    again = Served(root, "--kafka-port", "0")
    try:
        with RawClient(again.kafka_address) as client:
            assert latest(client, 1) == 5
            assert end(client, pid, epoch, commit=True) == 0
            assert latest(client, 1) == 7
            assert fetch(client, 1)["aborted_transactions"] == [
                {"producer_id": pid, "first_offset": 0}
            ]
    finally:
        assert again.terminate() == 0
