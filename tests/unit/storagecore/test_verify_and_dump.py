from __future__ import annotations

from pathlib import Path

from storagecore import (
    AppendOrigin,
    ControlType,
    LogConfig,
    LogManager,
    ManualClock,
    TopicPartition,
    build_batch,
    build_control_batch,
)
from storagecore.index.transaction_index import ENTRY
from storagecore.tools.dump import dump_file
from storagecore.tools.verify import verify_log_dir
from tests.conftest import START_MS, batch, records


def make_dir(root: Path, clock: ManualClock) -> Path:
    with LogManager(
        [root], default_config=LogConfig(segment_bytes=600, index_interval_bytes=1), clock=clock
    ) as manager:
        log = manager.get_or_create_log(TopicPartition("t", 0))
        for _ in range(20):
            log.append(batch(3, value_size=20))
    return root / "t-0"


def test_clean_dir_verifies(tmp_path: Path, clock: ManualClock) -> None:
    make_dir(tmp_path, clock)
    report = verify_log_dir(tmp_path)
    assert report.ok and report.findings == []
    (summary,) = report.partitions
    assert (summary.records, summary.next_offset) == (60, 60) and summary.segments > 2


def test_verify_finds_each_problem(tmp_path: Path, clock: ManualClock) -> None:
    partition = make_dir(tmp_path, clock)
    segments = sorted(partition.glob("*.log"))
    with segments[-1].open("ab") as handle:
        handle.write(b"\x00" * 10)
    index = sorted(partition.glob("*.index"))[0]
    index.write_bytes(index.read_bytes()[:-8] + (0).to_bytes(4, "big") + (3).to_bytes(4, "big"))
    (tmp_path / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 999\n")
    (partition / "00000000000000000000.log.cleaned").write_bytes(b"")
    report = verify_log_dir(tmp_path)
    messages = [str(f) for f in report.errors]
    assert any("10 bytes after the last complete batch" in m for m in messages)
    assert any(str(index) in m for m in messages)
    assert any("t-0 offset 999 is outside [0, log end 60]" in m for m in messages)
    assert any("temporary file" in str(f) for f in report.findings if f.severity == "warning")


def test_verify_never_writes(tmp_path: Path, clock: ManualClock) -> None:
    partition = make_dir(tmp_path, clock)
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    verify_log_dir(tmp_path)
    verify_log_dir(partition)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


def test_dump_reports_trailing_garbage(tmp_path: Path, clock: ManualClock) -> None:
    partition = make_dir(tmp_path, clock)
    segment = sorted(partition.glob("*.log"))[0]
    with segment.open("ab") as handle:
        handle.write(b"\x00\x01\x02")
    lines = list(dump_file(segment))
    assert lines[-1].startswith("Found 3 invalid bytes at the end")


def test_a_live_directory_reports_the_active_segment_as_warnings(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A running worker holds the lock and has its active index preallocated: not an error."""
    make_dir(tmp_path, clock)
    with LogManager([tmp_path], clock=clock) as manager:
        manager.get_log(TopicPartition("t", 0)).append(batch(2))
        report = verify_log_dir(tmp_path)
        assert report.ok, [str(f) for f in report.errors]
        assert any("in use by another process" in str(f) for f in report.findings)
        assert any("expected while the segment is being written" in str(f) for f in report.findings)
    assert verify_log_dir(tmp_path).findings == []  # after the clean shutdown: nothing at all


def idempotent_dir(root: Path, clock: ManualClock) -> Path:
    """Two producers' batches, a roll (a snapshot at its base) and a clean shutdown (one at
    the log end)."""
    with LogManager([root], clock=clock) as manager:
        log = manager.get_or_create_log(TopicPartition("p", 0))
        for sequence, pid in ((0, 5), (0, 6), (3, 5)):
            log.append(
                build_batch(
                    records(3, start_ms=START_MS + sequence),
                    producer_id=pid,
                    producer_epoch=2,
                    base_sequence=sequence,
                )
            )
            if pid == 6:
                log.roll()
    return root / "p-0"


def test_dump_prints_snapshots_like_kafka_dump_log(tmp_path: Path, clock: ManualClock) -> None:
    partition = idempotent_dir(tmp_path, clock)
    assert sorted(p.name for p in partition.glob("*.snapshot")) == [
        "00000000000000000006.snapshot",
        "00000000000000000009.snapshot",
    ]
    lines = list(dump_file(partition / "00000000000000000009.snapshot"))
    assert lines[1:] == [
        "producerId: 5 producerEpoch: 2 coordinatorEpoch: -1 "
        "currentTxnFirstOffset: OptionalLong.empty "
        f"lastTimestamp: {START_MS + 5} firstSequence: 3 lastSequence: 5 lastOffset: 8 "
        f"offsetDelta: 2 timestamp: {START_MS + 5}",
        "producerId: 6 producerEpoch: 2 coordinatorEpoch: -1 "
        "currentTxnFirstOffset: OptionalLong.empty "
        f"lastTimestamp: {START_MS + 2} firstSequence: 0 lastSequence: 2 lastOffset: 5 "
        f"offsetDelta: 2 timestamp: {START_MS + 2}",
    ]


def test_verify_checks_snapshots(tmp_path: Path, clock: ManualClock) -> None:
    partition = idempotent_dir(tmp_path, clock)
    assert verify_log_dir(tmp_path).findings == []
    newest = partition / "00000000000000000009.snapshot"
    data = newest.read_bytes()
    newest.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    (partition / "00000000000000000099.snapshot").write_bytes(
        (partition / "00000000000000000006.snapshot").read_bytes()
    )
    (partition / "00000000000000000012.snapshot.tmp").write_bytes(b"\x00\x01")
    report = verify_log_dir(tmp_path)
    (error,) = report.errors
    assert str(error).startswith(f"ERROR {newest}: CRC at offset 2 is 0x")
    warnings = [str(f) for f in report.findings if f.severity == "warning"]
    assert any("12.snapshot.tmp: temporary file" in w for w in warnings)
    assert any("producer snapshot at 99, beyond the log end 9" in w for w in warnings)


def test_verify_checks_txn_indexes(tmp_path: Path, clock: ManualClock) -> None:
    with LogManager([tmp_path], clock=clock) as manager:
        log = manager.get_or_create_log(TopicPartition("t", 0))
        log.append(
            build_batch(
                records(2), producer_id=3, producer_epoch=0, base_sequence=0, is_transactional=True
            )
        )
        log.append(
            build_control_batch(
                ControlType.ABORT, producer_id=3, producer_epoch=0, coordinator_epoch=0,
                timestamp=START_MS,
            ),
            origin=AppendOrigin.COORDINATOR,
        )  # fmt: skip
    index = tmp_path / "t-0" / "00000000000000000000.txnindex"
    assert index.is_file()
    assert verify_log_dir(tmp_path).findings == []
    index.write_bytes(index.read_bytes() + ENTRY.pack(0, 3, 3, 50, 51))
    (error,) = verify_log_dir(tmp_path).errors
    assert str(error) == f"ERROR {index}: entry 1: marker offset 50 is beyond the segment's end 3"
    index.write_bytes(index.read_bytes()[:-3])
    (error,) = verify_log_dir(tmp_path).errors
    assert "is not a multiple of the entry size 34" in str(error) and str(index) in str(error)
