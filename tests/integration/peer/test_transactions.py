"""Transactions of Kafka's Java producer on the broker and on the worker, compared.

The same scenario (``java/TxnClient.java``) runs against both peers, and a read_committed
consumer reads what it left: committed records exactly once, aborted ones never; a zombie
producer fenced by a new instance of its transactional id; a transaction left open past its
``transaction.timeout.ms`` aborted by the coordinator (both peers look for timed-out
transactions every 10 s, Kafka's default, so that test waits up to ~12 s per peer); offsets
committed in a transaction; and a producer that dies mid-transaction while its peer is
stopped cleanly or killed, then restarted, and a new instance of the id resumes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from storagecore.records.batch import iter_complete_batches
from storageworker.kafka.transaction_state import TRANSACTION_STATE_TOPIC, TxnState, parse_record
from tests.integration.peer.conftest import Peers, create_on_broker, wait_for_leaders
from tests.integration.peer.test_restart import BrokerPeer, Peer, WorkerPeer
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic
from tests.kafka_support.broker import KafkaBroker
from tests.kafka_support.java_client import java_client

pytestmark = [pytest.mark.integration, pytest.mark.kafka_peer]


def txn(scenario: str, address: str, *args: object) -> dict[str, Any]:
    return java_client(scenario, address, *args, program="TxnClient")


def test_commit_and_abort_read_committed(peers: Peers) -> None:
    answers = {name: txn("commit-abort", address, "txn-commit", "tx-commit")
               for name, address in peers.both()}  # fmt: skip
    assert answers["logkeeper"] == answers["kafka"]
    committed = answers["kafka"]["committed"]
    assert sorted(committed) == sorted(
        [f"{i % 2}:c-{i}" for i in range(10)] + [f"{i % 2}:d-{i}" for i in range(5)]
    )
    assert answers["kafka"]["uncommitted"] == 25  # the aborted 10 are there, unread


def test_a_zombie_is_fenced_by_a_new_instance(peers: Peers) -> None:
    answers = {name: txn("fence", address, "txn-fence", "tx-fence")
               for name, address in peers.both()}  # fmt: skip
    assert answers["logkeeper"] == answers["kafka"]
    kafka = answers["kafka"]
    assert sorted(kafka["committed"]) == ["0:fresh-0", "0:fresh-2", "1:fresh-1", "1:fresh-3"]
    assert kafka["zombieCommit"] != "ok" and kafka["zombieSend"] != "ok"


def test_a_hanging_transaction_is_aborted_by_its_timeout(
    peers: Peers, logkeeper_worker: Served
) -> None:
    """Both abort it and fence the producer; the client is told differently. A Kafka 4
    cluster runs transaction version 2 (KIP-890 part 2: the client's epoch bumps with every
    transaction) and its commit after the abort fails with InvalidTxnStateException; the
    worker serves transaction version 1, where the stale epoch is PRODUCER_FENCED (what a
    Kafka broker answers such a transaction too: EndTxn after the timeout's fence is 90).
    The README lists the difference."""
    answers = {
        name: txn("timeout", address, "txn-timeout", "tx-timeout", 2000)
        for name, address in peers.both()
    }
    kafka, ours = answers["kafka"], answers["logkeeper"]
    assert kafka.pop("commit") == "InvalidTxnStateException"
    assert ours.pop("commit") == "ProducerFencedException"
    assert ours == kafka
    assert kafka["lsoReachedEnd"] is True
    assert kafka["committed"] == [] and kafka["uncommitted"] == 6
    metrics = logkeeper_worker.metrics()
    assert metrics["logkeeper_kafka_transactions_aborted_by_timeout_total"] >= 1
    assert logkeeper_worker.status()["transactions"]["aborted_by_timeout"] >= 1


def test_status_and_metrics_show_open_transactions(peers: Peers, logkeeper_worker: Served) -> None:
    """A producer dies mid-transaction (timeout 10 min): the worker's status and metrics show
    the open transaction and how far it holds the last stable offset back, until a new
    instance of its transactional id aborts it."""
    answer = txn("open", peers.logkeeper, "txn-open", "tx-open")
    assert answer == {"sent": 4}
    entries = {f"{p['topic']}-{p['partition']}": p for p in logkeeper_worker.status()["partitions"]}
    for index in (0, 1):  # 2 of the 4 records on each partition, the first at offset 0
        entry = entries[f"txn-open-{index}"]
        assert entry["openTransactions"] == 1
        assert (entry["lastStableOffset"], entry["logEndOffset"]) == (0, 2)
        assert entry["lastStableOffsetLag"] == 2
    report = logkeeper_worker.status()["transactions"]
    assert report["open_by_partition"] == {"txn-open-0": 1, "txn-open-1": 1}
    metrics = logkeeper_worker.metrics()
    assert metrics["logkeeper_log_open_transactions{partition=0,topic=txn-open}"] == 1
    assert metrics["logkeeper_log_last_stable_offset_lag{partition=1,topic=txn-open}"] == 2
    assert metrics["logkeeper_kafka_transactional_ids{state=ONGOING}"] >= 1
    resumed = txn("resume", peers.logkeeper, "txn-open", "tx-open")
    assert sorted(resumed["committed"]) == ["0:resumed-0", "0:resumed-2", "1:resumed-1"]
    entries = {f"{p['topic']}-{p['partition']}": p for p in logkeeper_worker.status()["partitions"]}
    assert entries["txn-open-0"]["openTransactions"] == 0
    assert entries["txn-open-0"]["lastStableOffsetLag"] == 0
    assert logkeeper_worker.status()["transactions"]["open_by_partition"] == {}


def test_offsets_sent_to_a_transaction(peers: Peers) -> None:
    answers = {name: txn("offsets", address, "txn-offsets", "tx-offsets", "txn-group")
               for name, address in peers.both()}  # fmt: skip
    assert answers["logkeeper"] == answers["kafka"]
    assert answers["kafka"] == {"afterCommit": "7/seven", "afterAbort": "7/seven"}


RESTART_TOPICS: dict[str, tuple[int, dict[str, str]]] = {
    "txn-stop": (2, {}),
    "txn-kill": (2, {}),
}


def transaction_states(root: Path) -> dict[str, TxnState]:
    """The last state of each transactional id in the ``__transaction_state-*`` directories
    under ``root``, every record parsed (a record that is not Kafka's fails the test)."""
    states: dict[str, TxnState] = {}
    for directory in sorted(root.glob(f"{TRANSACTION_STATE_TOPIC}-*")):
        for segment in sorted(directory.glob("*.log")):
            for _position, batch in iter_complete_batches(segment.read_bytes()):
                for record in batch.records():
                    assert record.key is not None
                    txn_id, meta = parse_record(record.key, record.value, str(segment))
                    if meta is None:
                        states.pop(txn_id, None)
                    else:
                        states[txn_id] = meta.state
    return states


class BrokerTxnPeer(BrokerPeer):
    def __init__(self, broker: KafkaBroker, topics: dict[str, tuple[int, dict[str, str]]]) -> None:
        super().__init__(broker)
        self.topics = topics

    def start(self) -> None:
        self.broker.start()
        wait_for_leaders(self.address, self.topics)


def restart_scenario(peer: Peer, name: str, how: str) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    answers["before"] = txn("commit-abort", peer.address, name, f"{name}-first")
    answers["open"] = txn("open", peer.address, name, f"{name}-open")  # halts mid-transaction
    peer.stop() if how == "stop" else peer.kill()
    peer.start()
    answers["resumed"] = txn("resume", peer.address, name, f"{name}-open")
    return answers


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_producer_dies_mid_transaction_and_its_peer_restarts(
    restartable_broker: KafkaBroker, tmp_path: Path, how: str
) -> None:
    name = f"txn-{how}"
    wanted = {name: RESTART_TOPICS[name]}
    create_on_broker(restartable_broker.address, wanted)
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(tmp_path, topic(name, 2, {}))
    worker = WorkerPeer(tmp_path)
    worker.start()
    broker = BrokerTxnPeer(restartable_broker, wanted)
    try:
        answers = {
            "kafka": restart_scenario(broker, name, how),
            "logkeeper": restart_scenario(worker, name, how),
        }
    finally:
        if worker.served is not None and worker.served.process.poll() is None:
            worker.stop()
    assert answers["logkeeper"] == answers["kafka"]
    # Both peers' __transaction_state, read with the worker's record parser: the broker's
    # records are Kafka's own (value v1 under transaction version 2), the worker's v0.
    for where, root in (
        ("kafka", restartable_broker.log_dir),
        ("logkeeper", tmp_path / "data"),
    ):
        states = transaction_states(root)
        assert states[f"{name}-first"] == TxnState.COMPLETE_COMMIT, where
        assert states[f"{name}-open"] == TxnState.COMPLETE_COMMIT, where
    resumed = answers["kafka"]["resumed"]
    before = answers["kafka"]["before"]["committed"]
    # The open transaction was aborted by the new instance's initTransactions: its 4 records
    # are in the log (uncommitted reads count them) and never read committed.
    assert sorted(resumed["committed"]) == sorted(
        [*before, "0:resumed-0", "1:resumed-1", "0:resumed-2"]
    )
    assert resumed["uncommitted"] == 25 + 4 + 3
