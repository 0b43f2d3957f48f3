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
from storagecore.files import RECOVERY_POINT_CHECKPOINT
from storagecore.tools.verify import verify_log_dir
from tests.integration.storageworker.test_producer_state_restart import (
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    RECORDS,
    init_producer,
    log_end,
    send,
)
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic, wait_for

pytestmark = pytest.mark.integration

HELPER = Path(__file__).parent / "helpers" / "stuck_roll_flush_serve.py"
TP = TopicPartition("orders", 0)
BATCHES = 30  # of about 130 bytes: 1 KiB segments roll every 7 or so


class StuckFlushServed(Served):
    command = (sys.executable, str(HELPER))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS, encoding="utf-8")
    declare(tmp_path, topic("orders", 1, {"cleanup.policy": "delete", "segment.bytes": 1024}))
    return tmp_path


def segment_bases(root: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (root / "data" / "orders-0").glob("*.log"))


def checkpointed_after(root: Path, since_ns: int) -> int:
    """The recovery point of orders-0 in the first checkpoint written after ``since_ns``."""
    path = root / "data" / RECOVERY_POINT_CHECKPOINT

    def written() -> bool:
        return path.is_file() and path.stat().st_mtime_ns > since_ns

    wait_for(written, "a recovery-point checkpoint after the produce")
    return OffsetCheckpointFile(path).read()[TP]


def test_a_kill_while_roll_flushes_are_pending(root: Path) -> None:
    server = StuckFlushServed(root, "--kafka-port", "0")
    try:
        pid, epoch = init_producer(server)
        for number in range(BATCHES):
            assert send(server, pid, epoch, number) == (0, RECORDS * number)
        rolled = segment_bases(root)
        assert len(rolled) >= 3, rolled
        # The appends that rolled returned; their flushes wait, so no checkpoint may claim them.
        assert checkpointed_after(root, time.time_ns()) < rolled[1]
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
    wait_for(
        lambda: checkpointed_after(root, time.time_ns()) == bases[-1],
        f"the recovery point at the last roll ({bases[-1]})",
    )
    assert server.terminate() == 0

    with LogManager([root / "data"]) as manager:
        values = [r.value for r in manager.get_log(TP).records()]
    assert values == [b"v%d-%d" % (n, i) for n in range(2 * BATCHES) for i in range(RECORDS)]
    report = verify_log_dir(root / "data")
    assert report.ok, [str(f) for f in report.errors]
