"""The read-only log-dir view shared by the tools and the pipeline (storagecore.log_dir_view)."""

from __future__ import annotations

from pathlib import Path

from storagecore import LogConfig, LogManager, ManualClock, TopicPartition, files, log_dir_view
from storagecore.index.offset_index import ENTRY as OFFSET_ENTRY
from tests.conftest import START_MS, batch


def make_dir(root: Path, clock: ManualClock) -> Path:
    """Sealed segments of ~600 bytes with an index entry per batch, and a log start of 7."""
    with LogManager(
        [root], default_config=LogConfig(segment_bytes=600, index_interval_bytes=1), clock=clock
    ) as manager:
        log = manager.get_or_create_log(TopicPartition("t", 0))
        for i in range(20):
            log.append(batch(3, value_size=20, start_ms=START_MS + i))
        log.delete_records(7)
    return root / "t-0"


def test_segments_and_index_entries_as_the_log_wrote_them(
    tmp_path: Path, clock: ManualClock
) -> None:
    partition = make_dir(tmp_path, clock)
    names = [p.name for p in partition.iterdir()]
    bases = log_dir_view.segment_bases(names)
    assert len(bases) > 2 and bases[0] == 0
    assert [base for base, _ in log_dir_view.log_files(partition, names)] == bases
    assert log_dir_view.temporary_file_names(names) == []
    assert log_dir_view.orphan_index_names(names) == []
    base = bases[1]
    entries = log_dir_view.offset_index_entries(files.index_file(partition, base), base)
    assert entries and all(e.offset >= base for e in entries)
    assert [e.offset for e in entries] == sorted(e.offset for e in entries)
    times = log_dir_view.time_index_entries(files.time_index_file(partition, base), base)
    assert times and times[-1].timestamp == log_dir_view.max_timestamp_hint(
        files.log_file(partition, base)
    )


def test_index_position_is_a_hint_that_stops_at_nonsense(
    tmp_path: Path, clock: ManualClock
) -> None:
    partition = make_dir(tmp_path, clock)
    base = log_dir_view.segment_bases(p.name for p in partition.iterdir())[1]
    log_path = files.log_file(partition, base)
    size = log_path.stat().st_size
    entries = log_dir_view.offset_index_entries(files.index_file(partition, base), base)
    last = entries[-1]
    assert log_dir_view.index_position(log_path, base, last.offset, size) == last.position
    assert log_dir_view.index_position(log_path, base, base, size) <= entries[0].position
    # Only the bytes planned count: an entry at or past them is not used.
    assert log_dir_view.index_position(log_path, base, last.offset, last.position) < last.position
    # A preallocated tail of zero entries ends the walk.
    with files.index_file(partition, base).open("ab") as index:
        index.write(OFFSET_ENTRY.pack(0, 0) * 4)
    assert log_dir_view.index_position(log_path, base, 2**63 - 1, size) == last.position
    assert log_dir_view.index_position(partition / "missing.log", 0, 5, size) == 0
    assert log_dir_view.max_timestamp_hint(partition / "missing.log") is None


def test_checkpoints_and_the_log_start_offset(tmp_path: Path, clock: ManualClock) -> None:
    partition = make_dir(tmp_path, clock)
    assert log_dir_view.log_start_offset(partition) == 7
    offsets = log_dir_view.read_checkpoint(tmp_path / files.LOG_START_OFFSET_CHECKPOINT)
    assert offsets == {TopicPartition("t", 0): 7}
    assert set(log_dir_view.CHECKPOINT_FILES[:2]) <= {p.name for p in tmp_path.iterdir()}
    assert not log_dir_view.in_use(tmp_path)  # the manager is shut down
    (tmp_path / files.LOG_START_OFFSET_CHECKPOINT).write_text("garbage\n")
    assert log_dir_view.log_start_offset(partition) == 0
