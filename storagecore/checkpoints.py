"""Checkpoint files in Kafka's exact text format (``CheckpointFile``).

Layout: line 1 the version (0), line 2 the entry count, then ``topic partition offset`` per line,
``\\n`` line ends. Written through :func:`storagecore.durability.write_atomically` (tmp, fsync,
rename, fsync the directory). Reading rejects a wrong version, a malformed line or a count that
does not match, with :class:`CorruptCheckpointError` naming the file and the line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from storagecore import durability
from storagecore.config import TopicPartition
from storagecore.errors import CorruptCheckpointError

CHECKPOINT_VERSION: Final = 0
_WHITESPACE: Final = re.compile(r"\s+")


def format_offsets(offsets: Mapping[TopicPartition, int]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    lines += [f"{tp.topic} {tp.partition} {offset}" for tp, offset in offsets.items()]
    return ("\n".join(lines) + "\n").encode("utf-8")


def parse_offsets(text: str, *, source: str) -> dict[TopicPartition, int]:
    lines = text.splitlines()
    if not lines:
        return {}
    try:
        version = int(lines[0].strip())
    except ValueError:
        raise CorruptCheckpointError(f"{source}: line 1 {lines[0]!r} is not a version") from None
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(
            f"{source}: unsupported checkpoint version {version} (expected {CHECKPOINT_VERSION})"
        )
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{source}: missing entry count")
    try:
        expected = int(lines[1].strip())
    except ValueError:
        raise CorruptCheckpointError(f"{source}: line 2 {lines[1]!r} is not a count") from None
    offsets: dict[TopicPartition, int] = {}
    entries = [line for line in lines[2:] if line.strip()]
    for number, line in enumerate(entries, start=3):
        fields = _WHITESPACE.split(line.strip())
        if len(fields) != 3 or not fields[1].isdigit() or not re.fullmatch(r"-?\d+", fields[2]):
            raise CorruptCheckpointError(f"{source}: malformed line {number}: {line!r}")
        offsets[TopicPartition(fields[0], int(fields[1]))] = int(fields[2])
    if len(entries) != expected:
        raise CorruptCheckpointError(
            f"{source}: declares {expected} entries but holds {len(entries)}"
        )
    return offsets


class OffsetCheckpointFile:
    """``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
    ``cleaner-offset-checkpoint``: one file in a log dir's root."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        durability.write_atomically(self.path, format_offsets(offsets))

    def read(self) -> dict[TopicPartition, int]:
        """The entries; an absent file is empty; a bad one raises CorruptCheckpointError."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except UnicodeDecodeError:
            raise CorruptCheckpointError(f"{self.path}: not UTF-8 text") from None
        return parse_offsets(text, source=str(self.path))
