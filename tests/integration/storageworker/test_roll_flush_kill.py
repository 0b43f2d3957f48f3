"""SIGKILL of a real worker while the flushes of rolled segments are pending
(storagecore.roll_flush: the append that rolls returns before the old segment's fsync).

The worker of the first part runs with roll flushes that never finish
(helpers/stuck_roll_flush_serve.py): the recovery point it checkpoints must stay below every
rolled segment, the kill must lose no acknowledged record, and the restarted (real) worker
recovers the segments from there, knows the idempotent producer's last batch, and then moves
its checkpointed recovery point past the segments it rolls once their flush is done.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from storagecore import LogManager, TopicPartition
from storagecore.checkpoints import OffsetCheckpointFile
from storagecore.files import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from storagecore.records.batch import NewRecord
from storagecore.records.memory_records_builder import build_batch
from storagecore.tools.verify import verify_log_dir
from tests.integration.storageworker.test_producer_state_restart import (
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    RECORDS,
    init_producer,
    log_end,
    send,
)
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic, wait_for
from tests.kafka_support.raw_client import RawClient, produce

pytestmark = pytest.mark.integration

HELPER = Path(__file__).parent / "helpers" / "stuck_roll_flush_serve.py"
TP = TopicPartition("orders", 0)
MARKER = TopicPartition("marker", 0)  # its log start moves to observe a checkpoint pass
MARKER_RECORDS = 100  # so up to 99 passes are observed (each 200 ms apart at least)
BATCHES = 30  # of about 130 bytes: 1 KiB segments roll every 7 or so


class StuckFlushServed(Served):
    command = (sys.executable, str(HELPER))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(
        tmp_path,
        topic("orders", 1, {"cleanup.policy": "delete", "segment.bytes": 1024}),
        topic("marker", 1, {"cleanup.policy": "delete"}),
    )
    return tmp_path


def segment_bases(root: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (root / "data" / "orders-0").glob("*.log"))


def checkpointed_now(server: Served, root: Path, marker_start: int) -> int:
    """The recovery point of orders-0 that a checkpoint pass run after this call recorded.

    A pass rewrites a checkpoint file only when its offsets changed (LogManager), so a
    recovery point that stays put leaves no trace. The pass is observed through the other
    file it writes, after the recovery points: DeleteRecords moves marker-0's log start to
    ``marker_start``, which the log-start-offset checkpoint records."""
    partition = {"partition_index": 0, "offset": marker_start}
    request = {"topics": [{"name": "marker", "partitions": [partition]}], "timeout_ms": 10_000}
    with RawClient(server.kafka_address) as client:
        answer = client.call(21, 2, request)
    assert answer["topics"][0]["partitions"][0]["error_code"] == 0, answer
    starts = root / "data" / LOG_START_OFFSET_CHECKPOINT

    def passed() -> bool:
        found = OffsetCheckpointFile(starts).read() if starts.is_file() else {}
        return found.get(MARKER) == marker_start

    wait_for(passed, f"a checkpoint pass with marker-0's log start at {marker_start}")
    return OffsetCheckpointFile(root / "data" / RECOVERY_POINT_CHECKPOINT).read()[TP]


def fill_marker(server: Served) -> None:
    with RawClient(server.kafka_address) as client:
        for number in range(MARKER_RECORDS):
            record = NewRecord(b"m", b"%d" % number, int(time.time() * 1000))
            assert produce(client, "marker", 0, build_batch([record]))["error_code"] == 0  # type: ignore[index]


def test_a_kill_while_roll_flushes_are_pending(root: Path) -> None:
    server = StuckFlushServed(root, "--kafka-port", "0")
    try:
        fill_marker(server)
        pid, epoch = init_producer(server)
        for number in range(BATCHES):
            assert send(server, pid, epoch, number) == (0, RECORDS * number)
        rolled = segment_bases(root)
        assert len(rolled) >= 3, rolled
        # The appends that rolled returned; their flushes wait, so no checkpoint may claim them.
        assert checkpointed_now(server, root, 1) < rolled[1]
    finally:
        server.kill()  # also when an assertion failed: its flushes never end, nor would it

    server = Served(root, "--kafka-port", "0")
    assert log_end(server) == RECORDS * BATCHES
    last = BATCHES - 1
    assert send(server, pid, epoch, last) == (0, RECORDS * last), "the last batch: a duplicate"
    assert send(server, pid, epoch, last - 1)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    for number in range(BATCHES, 2 * BATCHES):
        assert send(server, pid, epoch, number) == (0, RECORDS * number)
    # The real worker's roll flushes finish, and the checkpoint follows them.
    bases = segment_bases(root)
    marker_start = iter(range(2, MARKER_RECORDS + 1))
    wait_for(
        lambda: checkpointed_now(server, root, next(marker_start)) == bases[-1],
        f"the recovery point at the last roll ({bases[-1]})",
    )
    assert server.terminate() == 0

    with LogManager([root / "data"]) as manager:
        values = [r.value for r in manager.get_log(TP).records()]
    assert values == [b"v%d-%d" % (n, i) for n in range(2 * BATCHES) for i in range(RECORDS)]
    report = verify_log_dir(root / "data")
    assert report.ok, [str(f) for f in report.errors]
