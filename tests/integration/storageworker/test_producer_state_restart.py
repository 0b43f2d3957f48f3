"""Idempotent producers across worker restarts: a real ``logkeeper serve`` process, stopped
with SIGTERM (clean: the snapshot at the log end holds each producer's last batch) and killed
with SIGKILL (unclean: the recovery of the unflushed segment snapshots its end, and the load
reads that snapshot; so here too each producer's last batch only, as Kafka's broker).

The answers are Kafka's broker's (``ProducerStateEntry.findDuplicateBatch``, then
``ProducerAppendInfo.checkSequence``): a retry of a batch the producer state still holds is
acknowledged with the original offset and not appended; any other retry of an earlier
sequence is OUT_OF_ORDER_SEQUENCE_NUMBER (45).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from storagecore.records.batch import NewRecord
from storagecore.records.memory_records_builder import build_batch
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic
from tests.kafka_support.raw_client import RawClient, produce

pytestmark = pytest.mark.integration

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
RECORDS = 3  # per batch: batch n holds sequences and offsets [3n, 3n + 3)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(tmp_path, topic("orders", 1, {"cleanup.policy": "delete"}))
    return tmp_path


def start(root: Path) -> Served:
    return Served(root, "--kafka-port", "0")


def batch(pid: int, epoch: int, number: int) -> bytes:
    now_ms = int(time.time() * 1000)  # recent: a producer idle for a day would expire
    return build_batch(
        [NewRecord(b"k%d" % number, b"v%d-%d" % (number, i), now_ms) for i in range(RECORDS)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=RECORDS * number,
    )


def send(server: Served, pid: int, epoch: int, number: int) -> tuple[int, int]:
    """(error code, base offset) of producing batch ``number``."""
    with RawClient(server.kafka_address) as client:
        answer = produce(client, "orders", 0, batch(pid, epoch, number))
    assert answer is not None
    return answer["error_code"], answer["base_offset"]


def init_producer(server: Served) -> tuple[int, int]:
    with RawClient(server.kafka_address) as client:
        init = client.call(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert init["error_code"] == 0
    return init["producer_id"], init["producer_epoch"]


def log_end(server: Served) -> int:
    end: int = server.partition("orders-0")["logEndOffset"]
    return end


def snapshots(root: Path) -> list[int]:
    return sorted(
        int(p.name.split(".")[0]) for p in (root / "data" / "orders-0").glob("*.snapshot")
    )


def test_retries_after_a_clean_stop_then_a_kill(root: Path) -> None:
    server = start(root)
    pid, epoch = init_producer(server)
    for number in range(7):
        assert send(server, pid, epoch, number) == (0, RECORDS * number)
    assert server.terminate() == 0
    assert snapshots(root) == [21], "the clean stop's snapshot at the log end"

    # Clean restart: the snapshot knows batch 6 only, as the broker's would.
    server = start(root)
    assert send(server, pid, epoch, 6) == (0, 18), "the last batch: a duplicate"
    assert send(server, pid, epoch, 4)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(server, pid, epoch, 1)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log_end(server) == 21
    for number in range(7, 10):
        assert send(server, pid, epoch, number) == (0, RECORDS * number)
    server.kill()

    # Kill: the recovery replays batches 7-9 after the snapshot at 21 and snapshots 30, which
    # holds batch 9 only (tests/integration/peer/test_restart.py: the broker answers the same).
    server = start(root)
    assert send(server, pid, epoch, 9) == (0, 27), "the last batch: a duplicate"
    for number in (8, 7, 6, 5):
        assert send(server, pid, epoch, number)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER, number
    assert log_end(server) == 30
    assert send(server, pid, epoch, 10) == (0, 30), "in sequence after the retries"
    assert server.terminate() == 0


def test_retries_after_a_kill_without_any_snapshot(root: Path) -> None:
    server = start(root)
    pid, epoch = init_producer(server)
    for number in range(7):
        assert send(server, pid, epoch, number) == (0, RECORDS * number)
    server.kill()
    assert snapshots(root) == [], "no roll, no clean stop: no snapshot"

    # The whole log is replayed by the recovery, which snapshots its end: batch 6 only.
    server = start(root)
    assert snapshots(root) == [21], "the recovery's snapshot at the end of the segment"
    assert send(server, pid, epoch, 6) == (0, 18), "the last batch: a duplicate"
    for number in (5, 4, 2, 1, 0):
        assert send(server, pid, epoch, number)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER, number
    assert log_end(server) == 21
    assert server.terminate() == 0
    assert snapshots(root) == [21]
