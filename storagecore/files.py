"""File and directory names of a log dir, exactly as Kafka names them.

Segment files are named by their base offset padded to 20 digits so that ``ls`` sorts them
numerically. Temporary suffixes are appended to the whole name (``...0.log.cleaned``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

from storagecore.config import TopicPartition, validate_topic_name
from storagecore.errors import ConfigError

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
TXN_INDEX_SUFFIX: Final = ".txnindex"
SNAPSHOT_SUFFIX: Final = ".snapshot"
#: A producer-state snapshot being written (``durability.write_atomically``'s ``.tmp``).
SNAPSHOT_TMP_SUFFIX: Final = SNAPSHOT_SUFFIX + ".tmp"
INDEX_SUFFIXES: Final = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
SEGMENT_SUFFIXES: Final = (LOG_SUFFIX, *INDEX_SUFFIXES)

CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
DELETED_SUFFIX: Final = ".deleted"
DELETE_DIR_SUFFIX: Final = "-delete"
FUTURE_DIR_SUFFIX: Final = "-future"
STRAY_DIR_SUFFIX: Final = "-stray"

RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT: Final = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
LOCK_FILE: Final = ".lock"
TXN_INDEX_MARKER_FILE: Final = ".logkeeper-txnindex"
"""In a log dir: every log in it has its ``.txnindex`` files (Logkeeper wrote none before
them; storagecore.log_manager writes the missing ones once, then this file)."""
#: Directories the Spark pipeline keeps inside a data dir (never partitions; the worker skips
#: them when loading and sweeps expired pins, storagecore.pins).
PINS_DIR: Final = ".logkeeper-pins"
STAGING_DIR: Final = ".logkeeper-staging"
PIPELINE_DIRS: Final = (PINS_DIR, STAGING_DIR)

_OFFSET_DIGITS: Final = 20
_MAX_DIR_NAME: Final = 255
_DELETE_DIR_RE: Final = re.compile(r"^(?P<tp>.+)\.(?P<uuid>[0-9a-f]{32})-delete$")


def filename_prefix(offset: int) -> str:
    """``00000000000000000042`` for 42: zero-padded so that names sort like offsets."""
    assert offset >= 0, f"negative base offset {offset}"
    return f"{offset:0{_OFFSET_DIGITS}d}"


def log_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{LOG_SUFFIX}{suffix}"


def index_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{INDEX_SUFFIX}{suffix}"


def time_index_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{TIME_INDEX_SUFFIX}{suffix}"


def txn_index_file(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix(base_offset)}{TXN_INDEX_SUFFIX}{suffix}"


def offset_from_file_name(name: str) -> int:
    """Base offset encoded in a segment file name (any suffix after the digits)."""
    digits = name.split(".", 1)[0]
    if not digits.isdigit():
        raise ValueError(f"{name!r} is not a segment file name")
    return int(digits)


def is_segment_file_name(name: str) -> bool:
    head, _, rest = name.partition(".")
    return head.isdigit() and len(head) >= _OFFSET_DIGITS and bool(rest)


def partition_dir_name(tp: TopicPartition) -> str:
    """``<topic>-<partition>``; the one place partition paths are named, so the one place the
    topic name is checked (a valid name has no ``/`` and is not ``.``/``..``: invariant 5)."""
    validate_topic_name(tp.topic)
    if isinstance(tp.partition, bool) or not isinstance(tp.partition, int) or tp.partition < 0:
        raise ConfigError(
            f"partition {tp.partition!r} of topic {tp.topic!r} must be an integer >= 0"
        )
    return f"{tp.topic}-{tp.partition}"


def parse_partition_dir_name(name: str) -> TopicPartition:
    """``orders-3`` → TopicPartition("orders", 3); raise ConfigError for anything else."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not partition.isdigit() or (len(partition) > 1 and partition[0] == "0"):
        raise ConfigError(f"directory name {name!r} is not <topic>-<partition>")
    validate_topic_name(topic)
    return TopicPartition(topic, int(partition))


def delete_dir_name(tp: TopicPartition) -> str:
    """``<topic>-<p>.<uuid>-delete``, the topic cut so that the name stays within 255 bytes."""
    # What uuid4().hex is, without importing uuid (and platform with it) at every start.
    suffix = f"-{tp.partition}.{os.urandom(16).hex()}{DELETE_DIR_SUFFIX}"
    return tp.topic[: _MAX_DIR_NAME - len(suffix)] + suffix


def is_delete_dir_name(name: str) -> bool:
    return _DELETE_DIR_RE.match(name) is not None
