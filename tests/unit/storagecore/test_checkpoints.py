from __future__ import annotations

from pathlib import Path

import pytest

from storagecore import TopicPartition
from storagecore.checkpoints import OffsetCheckpointFile
from storagecore.errors import CorruptCheckpointError


def test_exact_kafka_text_format(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write(
        {TopicPartition("orders", 0): 1523, TopicPartition("orders", 1): 877}
    )
    assert path.read_bytes() == b"0\n2\norders 0 1523\norders 1 877\n"
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_reads_kafka_written_files_with_any_whitespace(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text("0\n2\norders\t1  877\nusers 0 5\n")
    assert OffsetCheckpointFile(path).read() == {
        TopicPartition("orders", 1): 877,
        TopicPartition("users", 0): 5,
    }


def test_missing_and_empty_files_are_empty(tmp_path: Path) -> None:
    assert OffsetCheckpointFile(tmp_path / "absent").read() == {}
    (tmp_path / "empty").write_text("")
    assert OffsetCheckpointFile(tmp_path / "empty").read() == {}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1\n0\n", "unsupported checkpoint version 1"),
        ("0\n2\norders 0 1\n", "declares 2 entries but holds 1"),
        ("0\n1\norders 0\n", "malformed line 3"),
        ("0\n1\norders x 1\n", "malformed line 3"),
        ("zero\n", "line 1"),
        ("0\n", "missing entry count"),
    ],
)
def test_corrupt_files_name_the_problem(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "cp"
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError, match=message):
        OffsetCheckpointFile(path).read()


def test_rewrite_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    checkpoint = OffsetCheckpointFile(path)
    checkpoint.write({TopicPartition("a", 0): 1})
    (tmp_path / "cp.tmp").write_text("garbage from a crash mid-write")
    checkpoint.write({TopicPartition("a", 0): 2})
    assert checkpoint.read() == {TopicPartition("a", 0): 2}
