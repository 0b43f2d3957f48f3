"""Idempotent producers across restarts of the broker and of the worker, compared.

Both peers are stopped cleanly (SIGTERM) and killed (SIGKILL) at the same points of the same
scenario, and the same producer retries older batches with the same producer id, epoch and
sequences (exact Produce requests, :class:`RawClient`). The broker's rules, which the worker
follows (``ProducerStateManager``, ``UnifiedLog.rebuildProducerState``): a clean stop writes a
``.snapshot`` at the log end holding each producer's *last* batch and the next start reads
only that, so only the last batch is a recognised retry; after a kill the newest snapshot is
read and the log after it replayed, but the recovery of the unflushed segment (LogLoader's
``recoverSegment``) writes a snapshot at that segment's end, which the load then reads: so
after a kill too, only each producer's last batch is a recognised retry. A recognised retry is
acknowledged with its original offset and not appended; any other earlier sequence is
OUT_OF_ORDER_SEQUENCE_NUMBER (45). (Until this test ran against the broker, the worker kept
the last five batches after a kill; the broker keeps one.)

The broker is :func:`restartable_broker` (the shared one must keep serving); the worker is a
``logkeeper serve`` of this test's own.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Protocol

import pytest

from storagecore.records.batch import NewRecord
from storagecore.records.memory_records_builder import build_batch
from tests.integration.peer.conftest import create_on_broker, wait_for_leaders
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic
from tests.kafka_support.broker import KafkaBroker
from tests.kafka_support.raw_client import RawClient, produce

pytestmark = [pytest.mark.integration, pytest.mark.kafka_peer]

RECORDS = 3  # per batch: batch n holds sequences and offsets [3n, 3n + 3)
#: "before": written before the clean stop; "after": first written after it, then killed.
TOPICS: dict[str, tuple[int, dict[str, str]]] = {"retry-before": (1, {}), "retry-after": (1, {})}


class Peer(Protocol):
    address: str

    def stop(self) -> None: ...
    def kill(self) -> None: ...
    def start(self) -> None: ...
    def partition_dir(self, name: str) -> Path: ...


class BrokerPeer:
    def __init__(self, broker: KafkaBroker) -> None:
        self.broker = broker
        self.address = broker.address

    def stop(self) -> None:
        self.broker.stop()

    def kill(self) -> None:
        self.broker.kill()

    def start(self) -> None:
        self.broker.start()
        wait_for_leaders(self.address, TOPICS)

    def partition_dir(self, name: str) -> Path:
        return self.broker.log_dir / f"{name}-0"


class WorkerPeer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.served: Served | None = None
        self.address = ""

    def stop(self) -> None:
        assert self.served is not None
        assert self.served.terminate() == 0, self.served.log_text()

    def kill(self) -> None:
        assert self.served is not None
        self.served.kill()

    def start(self) -> None:
        self.served = Served(self.root, "--kafka-port", "0")
        self.address = self.served.kafka_address

    def partition_dir(self, name: str) -> Path:
        return self.root / "data" / f"{name}-0"


def batch(pid: int, epoch: int, number: int) -> bytes:
    now_ms = int(time.time() * 1000)  # recent: a producer idle for a day would expire
    return build_batch(
        [NewRecord(b"k%d" % number, b"v%d-%d" % (number, i), now_ms) for i in range(RECORDS)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=RECORDS * number,
    )


def send(peer: Peer, name: str, producer: tuple[int, int], number: int) -> tuple[int, int]:
    """(error code, base offset) of producing batch ``number`` of ``producer`` to ``name``."""
    with RawClient(peer.address) as client:
        answer = produce(client, name, 0, batch(*producer, number))
    assert answer is not None
    return answer["error_code"], answer["base_offset"]


def init_producer(peer: Peer) -> tuple[int, int]:
    """A new producer id and epoch. A broker that has just started answers
    COORDINATOR_LOAD_IN_PROGRESS (14) or COORDINATOR_NOT_AVAILABLE (15) until its producer id
    manager has a block of ids, which clients retry: so does this, with a short pause."""
    pause = threading.Event()
    code = -1
    for _ in range(300):
        with RawClient(peer.address) as client:
            init = client.call(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
        code = init["error_code"]
        if code == 0:
            return init["producer_id"], init["producer_epoch"]
        assert code in (14, 15), f"{peer.address}: InitProducerId answered {code}"
        pause.wait(0.1)
    raise AssertionError(f"{peer.address}: no producer id (last error {code})")


def log_end(peer: Peer, name: str) -> int:
    with RawClient(peer.address) as client:
        answer = client.call(
            2,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [{"name": name, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
            },
        )
    offset: int = answer["topics"][0]["partitions"][0]["offset"]
    return offset


def snapshots(peer: Peer, name: str) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in peer.partition_dir(name).glob("*.snapshot"))


def scenario(peer: Peer) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    first = init_producer(peer)
    answers["written"] = [send(peer, "retry-before", first, n) for n in range(7)]
    peer.stop()
    answers["snapshots after the stop"] = snapshots(peer, "retry-before")

    peer.start()  # the snapshot at 21 knows batch 6 only
    answers["after the stop"] = {n: send(peer, "retry-before", first, n) for n in (6, 4, 1)}
    answers["end after the stop"] = log_end(peer, "retry-before")
    answers["written after the stop"] = [send(peer, "retry-before", first, n) for n in (7, 8, 9)]
    second = init_producer(peer)
    answers["written, never stopped"] = [send(peer, "retry-after", second, n) for n in range(7)]
    peer.kill()
    answers["snapshots after the kill"] = {
        name: snapshots(peer, name) for name in ("retry-before", "retry-after")
    }

    peer.start()  # the recovery's snapshots at 30 and 21 hold batch 9 and batch 6 only
    answers["after the kill"] = {n: send(peer, "retry-before", first, n) for n in (6, 7, 9, 5)}
    answers["end after the kill"] = log_end(peer, "retry-before")
    answers["in sequence after the kill"] = send(peer, "retry-before", first, 10)
    answers["without a snapshot"] = {
        n: send(peer, "retry-after", second, n) for n in (2, 4, 6, 1, 0)
    }
    answers["end without a snapshot"] = log_end(peer, "retry-after")
    return answers


def test_older_batches_retried_across_a_clean_stop_and_a_kill(
    restartable_broker: KafkaBroker, tmp_path: Path
) -> None:
    create_on_broker(restartable_broker.address, TOPICS)
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(
        tmp_path, *(topic(name, count, dict(config)) for name, (count, config) in TOPICS.items())
    )
    worker = WorkerPeer(tmp_path)
    worker.start()
    try:
        answers = {
            "kafka": scenario(BrokerPeer(restartable_broker)),
            "logkeeper": scenario(worker),
        }
    finally:
        if worker.served is not None and worker.served.process.poll() is None:
            worker.stop()
    assert answers["logkeeper"] == answers["kafka"]
    kafka = answers["kafka"]
    out_of_order = (45, -1)
    assert kafka["written"] == [(0, RECORDS * n) for n in range(7)]
    assert kafka["snapshots after the stop"] == [21]
    assert kafka["after the stop"] == {6: (0, 18), 4: out_of_order, 1: out_of_order}
    assert kafka["end after the stop"] == 21
    # The kill's recovery snapshots the recovered segment's end: the last batch only.
    assert kafka["after the kill"] == {
        6: out_of_order,
        7: out_of_order,
        9: (0, 27),
        5: out_of_order,
    }
    assert kafka["end after the kill"] == 30
    assert kafka["in sequence after the kill"] == (0, 30)
    assert kafka["without a snapshot"] == {
        2: out_of_order,
        4: out_of_order,
        6: (0, 18),
        1: out_of_order,
        0: out_of_order,
    }
    assert kafka["end without a snapshot"] == 21
