"""The cleaner state the worker reports is the cleaner's work, not retention's locking: an
empty compacted partition reads ``idle`` whenever status is read, also in the middle of the
cleaner thread's retention pass (which holds every compacted log LogCleaningInProgress, as
Kafka's ``deletableLogs`` does) and of the retention task's pass (which holds the other logs
LogCleaningPaused). Before, thousands of empty compacted partitions flipped between idle and
LogCleaningInProgress from one status read to the next, and the operator rewrote their Topics'
status on every pass (issue 22, found by the operator's scale test)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from storagecore import TopicPartition
from storagecore.cleaner.manager import CleaningState
from storagecore.log import Log
from storageworker.status import parse_query, volume_status
from storageworker.worker import Worker
from tests.unit.storageworker.test_worker import Setup, setup, topic_yaml, worker_registry

__all__ = ["setup"]  # the fixture, imported for these tests

COMPACTED = {"cleanup.policy": "compact"}
DELETE = {"cleanup.policy": "delete"}


def reported(worker: Worker) -> dict[str, tuple[str, int]]:
    """Each partition's cleanerState and cleaningPauseCount as /v1/status shows them."""
    return {
        f"{p['topic']}-{p['partition']}": (p["cleanerState"], p["cleaningPauseCount"])
        for p in volume_status(worker)["partitions"]
    }


def paused_gauges(worker: Worker) -> list[str]:
    """The partitions whose ``cleaning_paused`` gauge reads 1."""
    from prometheus_client import generate_latest

    text = generate_latest(worker_registry(worker)).decode()
    return [
        line.split('topic="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("logkeeper_partition_cleaning_paused") and line.endswith(" 1.0")
    ]


def capture_mid_pass(monkeypatch: pytest.MonkeyPatch, worker: Worker) -> list[Any]:
    """Every read taken while retention runs over a log (from inside its pass)."""
    seen: list[Any] = []
    original = Log.delete_old_segments

    def spying(log: Log, *args: Any, **kwargs: Any) -> Any:
        seen.append(
            (
                reported(worker),
                volume_status(worker, parse_query("view=summary"))["partitionSummary"][
                    "byCleanerState"
                ],
                paused_gauges(worker),
            )
        )
        return original(log, *args, **kwargs)

    monkeypatch.setattr(Log, "delete_old_segments", spying)
    return seen


def test_empty_compacted_partitions_read_idle_across_cleaner_rounds(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup.declare(topic_yaml("keys", 4, COMPACTED), topic_yaml("events", 2, DELETE))
    worker = setup.start()
    assert worker.cleaner is not None and worker.log_manager is not None
    before = reported(worker)
    assert before == {tp: ("idle", 0) for tp in before} and len(before) >= 6
    seen = capture_mid_pass(monkeypatch, worker)
    for _ in range(5):
        assert worker.cleaner.do_work() is False  # nothing to clean: retention passes only
        setup.clock.advance(1000)
        worker.log_manager.cleanup_logs(worker.cleaner.manager)  # the retention task's pass
        assert reported(worker) == before
    # Read from inside both passes: 5 x 4 compacted logs, 5 x (2 + internal) others.
    assert len(seen) >= 5 * 6
    for states, summary, gauges in seen:
        assert states == before
        assert set(summary) == {"idle"}
        assert gauges == []


def test_a_pause_during_a_retention_pass_shows_and_outlives_it(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention's hold is left out of the report, never a pause someone else asked for."""
    setup.declare(topic_yaml("keys", 1, COMPACTED), topic_yaml("events", 1, DELETE))
    worker = setup.start()
    assert worker.cleaner is not None and worker.log_manager is not None
    manager = worker.cleaner.manager
    keys, events = TopicPartition("keys", 0), TopicPartition("events", 0)
    during: list[dict[str, tuple[str, int]]] = []
    original = Log.delete_old_segments

    def pausing(log: Log, *args: Any, **kwargs: Any) -> Any:
        if log.tp == events:
            manager.abort_and_pause(events)  # an admin pause lands mid-pass
            during.append(reported(worker))
        return original(log, *args, **kwargs)

    monkeypatch.setattr(Log, "delete_old_segments", pausing)
    worker.log_manager.cleanup_logs(manager)
    assert during == [{**during[0], "events-0": ("LogCleaningPaused", 1), "keys-0": ("idle", 0)}]
    # Retention released its own hold only: the admin's pause stays until resumed.
    assert manager.state(events) == manager.reported_state(events)
    assert reported(worker)["events-0"] == ("LogCleaningPaused", 1)
    manager.resume(events)
    assert reported(worker)["events-0"] == ("idle", 0) and manager.state(events) == (None, 0)

    # A pause of a compacted log that the cleaner's retention pass holds: Aborted until the
    # pass ends, then Paused (the admin's pause), idle once resumed.
    pauser = threading.Thread(target=manager.abort_and_pause, args=(keys, 30.0))

    def aborted_mid_pass(log: Log, *args: Any, **kwargs: Any) -> Any:
        if log.tp == keys:
            pauser.start()
            deadline = time.monotonic() + 30
            while manager.state(keys)[0] is not CleaningState.ABORTED:
                assert time.monotonic() < deadline, "the pause never reached the manager"
                time.sleep(0.001)
            during.append(reported(worker))
        return original(log, *args, **kwargs)

    monkeypatch.setattr(Log, "delete_old_segments", aborted_mid_pass)
    worker.cleaner.delete_old_segments_of_compacted_logs()
    pauser.join(30)
    assert during[-1]["keys-0"] == ("LogCleaningAborted", 0)
    assert reported(worker)["keys-0"] == ("LogCleaningPaused", 1)
    manager.resume(keys)
    assert reported(worker)["keys-0"] == ("idle", 0) and manager.state(keys) == (None, 0)


def test_the_operator_writes_no_status_while_nothing_changes(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The operator's side: the Topic status it would write from each of those reads (also the
    reads from inside the retention passes) is the one it already wrote, so it writes nothing."""
    from storageoperator import conditions, handlers

    setup.declare(topic_yaml("keys", 4, COMPACTED))
    worker = setup.start()
    assert worker.cleaner is not None and worker.log_manager is not None
    body: dict[str, Any] = {
        "apiVersion": "logkeeper.io/v1alpha1",
        "kind": "Topic",
        "metadata": {"name": "keys", "namespace": "ns", "generation": 1},
        "spec": {"volume": "v", "partitions": 4, "config": COMPACTED},
    }
    volume = {"metadata": {"name": "v", "namespace": "ns"}}

    def status_write(document: dict[str, Any]) -> dict[str, Any] | None:
        """What the operator's timer would write for ``body`` from ``document`` (None: no
        write)."""
        view = conditions.worker_views(document)("keys")
        conds = conditions.topic_conditions(body, volume=volume, worker=view)
        return handlers._status_patch(body, conditions.topic_figures("keys", view), conds)

    first = status_write(volume_status(worker))
    assert first is not None and {p["cleanerState"] for p in first["partitionStatus"]} == {"idle"}
    body["status"] = first  # written once
    documents: list[dict[str, Any]] = []
    original = Log.delete_old_segments

    def spying(log: Log, *args: Any, **kwargs: Any) -> Any:
        documents.append(volume_status(worker))
        return original(log, *args, **kwargs)

    monkeypatch.setattr(Log, "delete_old_segments", spying)
    for _ in range(5):
        worker.cleaner.do_work()
        setup.clock.advance(1000)
        worker.log_manager.cleanup_logs(worker.cleaner.manager)
        documents.append(volume_status(worker))
    assert len(documents) >= 5 * 5
    assert [status_write(d) for d in documents] == [None] * len(documents)
