"""The Kafka listener's requests never wait for the LogManager's lock, which the scheduler's
thread holds across the fsyncs of the recovery-point checkpoints (slow behind dirty-page
writeback): a Produce's append and its partition lookup go on while a checkpoint write hangs."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from storagecore import NewRecord, TopicPartition, build_batch, durability
from storageworker.kafka.broker import WorkerBroker
from storageworker.worker import Worker

WAIT_S = 30  # a bound on waits for another thread, never reached when the code is right
TOPIC = """\
apiVersion: logkeeper.io/v1alpha1
kind: Topic
metadata: {name: events}
spec: {partitions: 2}
"""


@pytest.fixture
def topics_yaml() -> str:
    return TOPIC


def test_produce_goes_on_while_a_checkpoint_write_hangs(
    worker: Worker, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = worker.log_manager
    assert manager is not None
    in_write, release = threading.Event(), threading.Event()
    real = durability.write_atomically

    def slow_disk(path: Path, data: bytes, *, sync: bool = True) -> None:
        if threading.current_thread() is checkpointer:
            in_write.set()
            assert release.wait(WAIT_S), "the test never released the checkpoint"
        real(path, data, sync=sync)

    monkeypatch.setattr(durability, "write_atomically", slow_disk)
    checkpointer = threading.Thread(target=manager.checkpoint_recovery_points_and_log_start_offsets)
    checkpointer.start()
    assert in_write.wait(WAIT_S)
    broker = WorkerBroker(worker, "127.0.0.1", 9092)
    done = threading.Event()

    def produce() -> None:
        assert broker.partitions() == {"events": 2}
        broker.append(TopicPartition("events", 1), build_batch([NewRecord(b"k", b"v", 1)]))
        done.set()

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        assert done.wait(WAIT_S), "the request waited for the checkpoint's fsync"
    finally:
        release.set()
        checkpointer.join(WAIT_S)
        producer.join(WAIT_S)
