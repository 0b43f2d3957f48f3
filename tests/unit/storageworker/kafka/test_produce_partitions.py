"""Produce looks up only the topics it writes (``WorkerBroker.partition_count``), and must
answer exactly as with the whole ``partitions()`` map: a partition is served when it and every
partition before it, within the declared count, have a log."""

from __future__ import annotations

import pytest

from storagecore import NewRecord, TopicPartition, build_batch
from storagecore.log import Log
from storageworker.kafka import apis
from storageworker.kafka.broker import WorkerBroker
from storageworker.worker import Worker

TOPICS = """\
apiVersion: logkeeper.io/v1alpha1
kind: Topic
metadata: {name: events}
spec: {partitions: 3}
---
apiVersion: logkeeper.io/v1alpha1
kind: Topic
metadata: {name: other}
spec: {partitions: 1}
"""


@pytest.fixture
def topics_yaml() -> str:
    return TOPICS


def produce_codes(broker: WorkerBroker, targets: list[tuple[str, int]]) -> list[int]:
    topics: dict[str, list[dict[str, object]]] = {}
    for name, index in targets:
        batch = build_batch([NewRecord(b"k", b"v", 1)])
        topics.setdefault(name, []).append({"index": index, "records": batch})
    data = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [{"name": n, "partition_data": p} for n, p in topics.items()],
    }
    result, _ = apis.produce(apis.Request(0, 9, 1, "test", data), broker)
    assert result is not None
    return [
        answer.get("error_code", 0)
        for topic in result["responses"]
        for answer in topic["partition_responses"]
    ]


def test_partition_count_is_partitions_for_one_topic(worker: Worker) -> None:
    broker = WorkerBroker(worker, "127.0.0.1", 9092)
    assert broker.partitions() == {"events": 3, "other": 1}
    for name in ("events", "other", "unknown"):
        assert broker.partition_count(name) == broker.partitions().get(name, 0)


def test_produce_serves_what_partitions_serves(
    worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = WorkerBroker(worker, "127.0.0.1", 9092)
    unknown = apis.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    targets = [("events", 0), ("events", 2), ("events", 3), ("events", -1), ("other", 0)]
    targets += [("other", 1), ("unknown", 0)]
    assert produce_codes(broker, targets) == [0, 0, unknown, unknown, 0, unknown, unknown]
    manager = worker.log_manager
    assert manager is not None
    real = manager.find_log

    def without_events_1(tp: TopicPartition) -> Log | None:
        return None if tp == TopicPartition("events", 1) else real(tp)

    # A partition without a log ends the topic's served range (as in partitions()): the
    # partitions after it are not served either.
    monkeypatch.setattr(manager, "find_log", without_events_1)
    assert broker.partitions() == {"events": 1, "other": 1}
    assert broker.partition_count("events") == 1
    assert produce_codes(broker, [("events", 0), ("events", 1), ("events", 2)]) == [
        0,
        unknown,
        unknown,
    ]
