"""The transaction coordinator over real partition logs (storagecore ``Log`` in a temporary
directory): epochs and fencing, markers on every partition, ``__transaction_state`` read back
by a new coordinator (a restart), a crash between the decision and its markers, timeouts,
the KIP-890 produce check, and the record format."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from storagecore import Log, LogConfig
from storagecore.config import TopicPartition
from storagecore.errors import LogDirFullError
from storagecore.log_validator import AppendOrigin
from storagecore.records.batch import ControlType, NewRecord, iter_complete_batches
from storagecore.records.memory_records_builder import build_batch
from storagecore.transactions import control_type_of
from storageworker.kafka import transaction_coordinator as tc
from storageworker.kafka.groups import GroupCoordinator
from storageworker.kafka.offset_records import OFFSETS_TOPIC
from storageworker.kafka.transaction_coordinator import TransactionCoordinator
from storageworker.kafka.transaction_state import (
    TRANSACTION_STATE_TOPIC,
    TransactionMetadata,
    TxnState,
    key_bytes,
    parse_record,
    value_bytes,
)

TOPIC = "t"


class Partitions:
    """Real logs, one per partition, and the coordinator's ``write`` over them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs: dict[TopicPartition, Log] = {}
        self.failing: set[TopicPartition] = set()
        self.now_ms = 1_700_000_000_000
        self.next_pid = 1000

    def served(self) -> dict[str, int]:
        return {TOPIC: 2, TRANSACTION_STATE_TOPIC: 3, OFFSETS_TOPIC: 2}

    def log(self, tp: TopicPartition) -> Log:
        if tp not in self.logs:
            self.logs[tp] = Log.open(self.root / str(tp), LogConfig(), _Clock(self))
        return self.logs[tp]

    async def write(self, tp: TopicPartition, records: bytes, coordinator: bool) -> int:
        if tp in self.failing:
            raise LogDirFullError(f"{tp}: the disk is full")
        origin = AppendOrigin.COORDINATOR if coordinator else AppendOrigin.CLIENT
        return self.log(tp).append(records, origin=origin).first_offset

    def producer_id(self) -> int:
        self.next_pid += 1
        return self.next_pid

    def coordinator(self) -> TransactionCoordinator:
        async def append(tp: TopicPartition, records: bytes) -> Any:
            return await self.write(tp, records, False)

        return TransactionCoordinator(
            self.write,
            self.served,
            self.producer_id,
            GroupCoordinator(append, 2),
            3,
            lambda: self.now_ms,
            max_timeout_ms=60_000,
        )

    def restarted(self) -> TransactionCoordinator:
        """A new coordinator that reads ``__transaction_state`` back, as the server does."""
        fresh = self.coordinator()
        for tp, log in sorted(self.logs.items()):
            if tp.topic == TRANSACTION_STATE_TOPIC:
                fresh.load(log.read(0, 1 << 20).records, tp)
        return fresh

    def markers(self, tp: TopicPartition) -> list[tuple[int, int, ControlType | None]]:
        """(producer id, epoch, type) of each marker of ``tp``."""
        return [
            (b.producer_id, b.producer_epoch, control_type_of(b))
            for _p, b in iter_complete_batches(self.log(tp).read(0, 1 << 20).records)
            if b.is_control
        ]


class _Clock:
    def __init__(self, parts: Partitions) -> None:
        self.parts = parts

    def milliseconds(self) -> int:
        return self.parts.now_ms

    def monotonic_ns(self) -> int:
        return self.parts.now_ms * 1_000_000


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def init(c: TransactionCoordinator, txn: str, version: int = 4, **kw: int) -> dict[str, Any]:
    data = {"transactional_id": txn, "transaction_timeout_ms": kw.pop("timeout", 10_000),
            "producer_id": kw.pop("pid", -1), "producer_epoch": kw.pop("epoch", -1)}  # fmt: skip
    result: dict[str, Any] = run(c.init_producer_id(data, version))
    return result


def add(c: TransactionCoordinator, txn: str, pid: int, epoch: int, *parts: int) -> list[int]:
    answer = run(
        c.add_partitions(
            {
                "v3_and_below_transactional_id": txn,
                "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": epoch,
                "v3_and_below_topics": [{"name": TOPIC, "partitions": list(parts)}],
            },
            3,
        )
    )
    return [p["partition_error_code"] for t in answer["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]]  # fmt: skip


def end(c: TransactionCoordinator, txn: str, pid: int, epoch: int, commit: bool) -> int:
    data = {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
            "committed": commit}  # fmt: skip
    code: int = run(c.end_txn(data, 4))["error_code"]
    return code


def produce(parts: Partitions, pid: int, epoch: int, partition: int, seq: int = 0) -> None:
    parts.log(TopicPartition(TOPIC, partition)).append(
        build_batch([NewRecord(b"k", b"v", parts.now_ms)], producer_id=pid,
                    producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    )  # fmt: skip


@pytest.fixture
def parts(tmp_path: Path) -> Partitions:
    return Partitions(tmp_path)


def test_epochs_bump_and_a_zombie_is_fenced(parts: Partitions) -> None:
    c = parts.coordinator()
    first = init(c, "a")
    assert (first["error_code"], first["producer_epoch"]) == (0, 0)
    second = init(c, "a")
    assert (second["producer_id"], second["producer_epoch"]) == (first["producer_id"], 1)
    pid = first["producer_id"]
    assert add(c, "a", pid, 0, 0) == [tc.PRODUCER_FENCED]
    assert run(c.add_offsets({"transactional_id": "a", "producer_id": pid,
                              "producer_epoch": 0, "group_id": "g"}, 1)) == {
        "error_code": tc.INVALID_PRODUCER_EPOCH
    }  # fmt: skip
    assert add(c, "a", pid + 1, 1, 0) == [tc.INVALID_PRODUCER_ID_MAPPING]
    assert init(c, "a", pid=pid + 7, epoch=0)["error_code"] == tc.PRODUCER_FENCED


def test_commit_writes_a_marker_to_every_partition_and_state_survives(
    parts: Partitions,
) -> None:
    c = parts.coordinator()
    got = init(c, "b")
    pid, epoch = got["producer_id"], got["producer_epoch"]
    assert add(c, "b", pid, epoch, 0, 1) == [0, 0]
    produce(parts, pid, epoch, 0)
    produce(parts, pid, epoch, 1)
    assert parts.log(TopicPartition(TOPIC, 0)).last_stable_offset == 0
    assert end(c, "b", pid, epoch, True) == 0
    for index in (0, 1):
        tp = TopicPartition(TOPIC, index)
        assert parts.markers(tp) == [(pid, epoch, ControlType.COMMIT)]
        assert parts.log(tp).last_stable_offset == parts.log(tp).log_end_offset
    assert end(c, "b", pid, epoch, True) == 0, "a retried EndTxn answers the same"
    assert end(c, "b", pid, epoch, False) == tc.INVALID_TXN_STATE
    after = parts.restarted().transactions["b"]
    assert (after.producer_id, after.producer_epoch, after.state) == (
        pid, epoch, TxnState.COMPLETE_COMMIT,
    )  # fmt: skip
    assert after.partitions == {TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)}


def test_a_new_instance_aborts_the_open_transaction(parts: Partitions) -> None:
    c = parts.coordinator()
    got = init(c, "c")
    pid, epoch = got["producer_id"], got["producer_epoch"]
    add(c, "c", pid, epoch, 0)
    produce(parts, pid, epoch, 0)
    again = init(c, "c")
    assert again["producer_epoch"] == epoch + 2  # fenced at +1 (the markers), returned +2
    assert parts.markers(TopicPartition(TOPIC, 0)) == [(pid, epoch + 1, ControlType.ABORT)]
    assert c.counters.fenced_producers == 1
    [aborted] = parts.log(TopicPartition(TOPIC, 0)).aborted_transactions(0, 10)
    assert aborted.producer_id == pid


def test_a_crash_between_the_decision_and_its_markers(parts: Partitions) -> None:
    c = parts.coordinator()
    got = init(c, "d")
    pid, epoch = got["producer_id"], got["producer_epoch"]
    add(c, "d", pid, epoch, 0, 1)
    produce(parts, pid, epoch, 0)
    parts.failing.add(TopicPartition(TOPIC, 1))  # the second marker cannot be written
    assert end(c, "d", pid, epoch, True) == 0, "the decision is durable: answered"
    assert c.transactions["d"].state is TxnState.PREPARE_COMMIT
    # the process dies here; a new one reads the log and completes the transaction
    parts.failing.clear()
    fresh = parts.restarted()
    assert fresh.transactions["d"].state is TxnState.PREPARE_COMMIT
    assert run(fresh.complete_pending()) == 1
    assert fresh.transactions["d"].state is TxnState.COMPLETE_COMMIT
    assert parts.markers(TopicPartition(TOPIC, 1)) == [(pid, epoch, ControlType.COMMIT)]
    # partition 0 got its marker twice: harmless, the second decides nothing
    assert [m[2] for m in parts.markers(TopicPartition(TOPIC, 0))] == [ControlType.COMMIT] * 2
    log0 = parts.log(TopicPartition(TOPIC, 0))
    assert log0.last_stable_offset == log0.log_end_offset
    assert log0.aborted_transactions(0, log0.log_end_offset) == []


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(
    parts: Partitions,
) -> None:
    c = parts.coordinator()
    got = init(c, "e", timeout=5_000)
    pid, epoch = got["producer_id"], got["producer_epoch"]
    add(c, "e", pid, epoch, 1)
    produce(parts, pid, epoch, 1)
    parts.now_ms += 5_000
    assert run(c.abort_expired()) == 0, "not past its timeout yet"
    parts.now_ms += 1
    assert run(c.abort_expired()) == 1
    assert c.counters.aborted_by_timeout == 1
    tp = TopicPartition(TOPIC, 1)
    assert parts.markers(tp) == [(pid, epoch + 1, ControlType.ABORT)]
    assert parts.log(tp).last_stable_offset == parts.log(tp).log_end_offset
    assert end(c, "e", pid, epoch, True) == tc.PRODUCER_FENCED
    # the producer, told its epoch is stale, re-initialises naming it: Kafka answers the
    # fencing epoch (a retry of that bump), then bumps from it
    assert init(c, "e", pid=pid, epoch=epoch)["producer_epoch"] == epoch + 1


def test_produce_is_verified_against_the_transaction(parts: Partitions) -> None:
    """KIP-890 part 1: a transactional batch only inside its transaction's partitions."""
    c = parts.coordinator()
    got = init(c, "f")
    pid, epoch = got["producer_id"], got["producer_epoch"]
    tp0, tp1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
    assert c.verify("f", pid, epoch, tp0) == tc.INVALID_TXN_STATE
    add(c, "f", pid, epoch, 0)
    assert c.verify("f", pid, epoch, tp0) == 0
    assert c.verify("f", pid, epoch, tp1) == tc.INVALID_TXN_STATE
    assert c.verify("f", pid, epoch - 1, tp0) == tc.INVALID_PRODUCER_EPOCH
    assert c.verify("nobody", pid, epoch, tp0) == tc.INVALID_PRODUCER_ID_MAPPING


def test_offsets_of_a_transaction_apply_at_commit_only(parts: Partitions) -> None:
    c = parts.coordinator()
    got = init(c, "g")
    pid, epoch = got["producer_id"], got["producer_epoch"]
    base = {"transactional_id": "g", "producer_id": pid, "producer_epoch": epoch}
    assert run(c.add_offsets({**base, "group_id": "grp"}, 3)) == {"error_code": 0}
    commit = {**base, "group_id": "grp", "generation_id": -1, "member_id": "",
              "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
                  {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
                   "committed_metadata": "m"}]}]}  # fmt: skip
    answer = run(c.txn_offset_commit(commit, 3))
    assert answer["topics"][0]["partitions"][0]["error_code"] == 0
    assert "grp" not in c.groups.offsets, "pending until the marker"

    def offset_fetch(stable: bool) -> dict[str, Any]:
        answer = c.groups.fetch_offsets({"group_id": "grp", "require_stable": stable,
            "topics": [{"name": TOPIC, "partition_indexes": [0]}]})  # fmt: skip
        part: dict[str, Any] = answer["topics"][0]["partitions"][0]
        return part

    assert offset_fetch(True)["error_code"] == 88  # UNSTABLE_OFFSET_COMMIT (KIP-447)
    assert (offset_fetch(False)["error_code"], offset_fetch(False)["committed_offset"]) == (0, -1)
    assert end(c, "g", pid, epoch, True) == 0
    assert (offset_fetch(True)["error_code"], offset_fetch(True)["committed_offset"]) == (0, 42)
    assert c.groups.offsets["grp"][(TOPIC, 0)].offset == 42
    # a restart reads __consumer_offsets: the committed transaction's offsets come back
    reloaded = parts.restarted()
    for tp, log in sorted(parts.logs.items()):
        if tp.topic == OFFSETS_TOPIC:
            reloaded.groups.load(log.read(0, 1 << 20).records, tp)
    assert reloaded.groups.offsets["grp"][(TOPIC, 0)].offset == 42


def test_aborted_offsets_never_come_back(parts: Partitions) -> None:
    c = parts.coordinator()
    got = init(c, "h")
    pid, epoch = got["producer_id"], got["producer_epoch"]
    base = {"transactional_id": "h", "producer_id": pid, "producer_epoch": epoch}
    run(c.add_offsets({**base, "group_id": "grp"}, 3))
    commit = {**base, "group_id": "grp", "generation_id": -1, "member_id": "",
              "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
                  {"partition_index": 1, "committed_offset": 9, "committed_leader_epoch": -1,
                   "committed_metadata": None}]}]}  # fmt: skip
    run(c.txn_offset_commit(commit, 3))
    assert end(c, "h", pid, epoch, False) == 0
    assert "grp" not in c.groups.offsets
    reloaded = parts.restarted()
    for tp, log in sorted(parts.logs.items()):
        if tp.topic == OFFSETS_TOPIC:
            reloaded.groups.load(log.read(0, 1 << 20).records, tp)
    assert "grp" not in reloaded.groups.offsets


def test_invalid_timeouts_and_ids(parts: Partitions) -> None:
    c = parts.coordinator()
    assert init(c, "i", timeout=60_001)["error_code"] == tc.INVALID_TRANSACTION_TIMEOUT
    assert init(c, "i", timeout=0)["error_code"] == tc.INVALID_TRANSACTION_TIMEOUT
    assert init(c, "")["error_code"] == tc.INVALID_REQUEST
    assert end(c, "unknown", 1, 0, True) == tc.INVALID_PRODUCER_ID_MAPPING


def test_exhausted_epoch_moves_to_a_new_producer_id(parts: Partitions) -> None:
    c = parts.coordinator()
    first = init(c, "j")
    c.transactions["j"].producer_epoch = 32766
    nxt = init(c, "j")
    assert nxt["producer_id"] != first["producer_id"] and nxt["producer_epoch"] == 0


def test_the_record_is_kafkas_transaction_log_value_v0() -> None:
    meta = TransactionMetadata(
        "tx", 0x0102030405060708, 3, 60_000, TxnState.ONGOING,
        {TopicPartition("b", 1), TopicPartition("a", 0), TopicPartition("a", 2)},
        start_ms=11, last_update_ms=22,
    )  # fmt: skip
    key = key_bytes("tx")
    assert key == b"\x00\x00" + b"\x00\x02tx"
    value = value_bytes(meta)
    expected = (
        b"\x00\x00"  # version 0
        + bytes.fromhex("0102030405060708")  # producer id
        + b"\x00\x03"  # epoch
        + (60_000).to_bytes(4, "big")
        + b"\x01"  # Ongoing
        + (2).to_bytes(4, "big")  # two topics, sorted
        + b"\x00\x01a" + (2).to_bytes(4, "big") + (0).to_bytes(4, "big") + (2).to_bytes(4, "big")
        + b"\x00\x01b" + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")
        + (22).to_bytes(8, "big")  # last update
        + (11).to_bytes(8, "big")  # start
    )  # fmt: skip
    assert value == expected
    assert parse_record(key, value, "test") == ("tx", meta)
    assert parse_record(key, None, "test") == ("tx", None)


def test_an_idle_transactional_id_expires_with_a_tombstone(parts: Partitions) -> None:
    c = parts.coordinator()
    c.id_expiration_ms = 1_000
    init(c, "k")
    got = init(c, "busy")
    add(c, "busy", got["producer_id"], got["producer_epoch"], 0)  # ongoing: never expires
    parts.now_ms += 1_001
    c.transactions["busy"].timeout_ms = 10**9  # and not timed out either
    run(c.abort_expired())
    assert "k" not in c.transactions and "busy" in c.transactions
    assert c.counters.expired_ids == 1
    assert "k" not in parts.restarted().transactions, "the tombstone is read back"
    assert init(c, "k")["producer_epoch"] == 0, "a new life of the id"
