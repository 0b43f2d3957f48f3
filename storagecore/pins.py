"""Read pins: hard links that keep planned segment files readable for a reader outside the worker.

A reader that is not the worker (the Spark pipeline) plans a read as a list of segment files
pinned by inode. The worker may clean (replace) or delete those segments at any time; their
inodes survive under ``.deleted`` names only for ``file.delete.delay.ms``. A *pin set* keeps them
for longer: hard links to the planned files, in a directory of the same data dir (hard links
cannot cross file systems), removed when the reader is done or when the pin set's lease expires.

Layout, inside a data dir::

    .logkeeper-pins/<expires ms: 20 digits>-<32 hex>/<topic>-<partition>/<base>.log
                                                                          <base>.index
                                                                          <base>.timeindex

The lease is the directory name, so creating a pin set is one ``mkdir``: a reader that dies at
any point leaves a set that :func:`sweep_expired` removes once its time has passed (the worker
calls it from its retention task, every reader before it plans). A pinned file costs no space
while the worker still has it; after the worker deletes it, the pin holds its bytes until
released or expired (reported by :func:`pinned_bytes`).

Linking is by name and is checked by inode, because the worker renames files under us (see
:func:`pin_segment` for why the index files linked beside a ``.log`` are that segment's own).

Nothing here is a protocol the worker depends on: pins are only extra names for inodes, the
worker never opens them, and removing them at any time loses no data of the log.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Final

from storagecore import files
from storagecore.config import TopicPartition

logger = logging.getLogger(__name__)

_PIN_SET_RE: Final = re.compile(r"^(?P<expires>\d{20})-(?P<id>[0-9a-f]{32})$")
#: errno values that mean "this data dir cannot hold pins" (read-only mount, no permission,
#: a file system without hard links): the reader goes on unpinned.
UNPINNABLE_ERRNOS: Final = frozenset(
    {errno.EROFS, errno.EACCES, errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP}
)


@dataclasses.dataclass(frozen=True, slots=True)
class PinSet:
    """One reader's pins in one data dir, valid until ``expires_ms`` (wall clock)."""

    path: Path
    expires_ms: int

    @property
    def data_dir(self) -> Path:
        return self.path.parent.parent


def create_pin_set(data_dir: Path, expires_ms: int) -> PinSet:
    """A new, empty pin set in ``data_dir`` (raises OSError when the dir cannot hold one)."""
    assert expires_ms >= 0, f"negative pin expiry {expires_ms}"
    root = data_dir / files.PINS_DIR
    root.mkdir(exist_ok=True)
    path = root / f"{expires_ms:020d}-{uuid.uuid4().hex}"
    path.mkdir()
    return PinSet(path, expires_ms)


def open_pin_set(path: Path) -> PinSet:
    """An existing pin set named by its path (a reader handed a set by its job)."""
    match = _PIN_SET_RE.match(path.name)
    if match is None or path.parent.name != files.PINS_DIR:
        raise ValueError(f"{path} is not a pin set (<data dir>/{files.PINS_DIR}/<expiry>-<id>)")
    if not path.is_dir():
        raise FileNotFoundError(f"pin set {path} does not exist (released or expired)")
    return PinSet(path, int(match["expires"]))


def pin_segment(pin_set: PinSet, tp: TopicPartition, log_path: Path, inode: int) -> Path | None:
    """Link the segment whose ``.log`` is ``log_path`` (inode ``inode``) into ``pin_set``.

    Returns the pinned ``.log`` path, or None when that inode is no longer under the segment's
    name nor its ``.deleted`` name (the caller lists the partition again). OSError for a data
    dir that cannot hold links (see :data:`UNPINNABLE_ERRNOS`).
    """
    assert log_path.name.endswith(files.LOG_SUFFIX), f"{log_path} is not a .log file"
    target_dir = pin_set.path / files.partition_dir_name(tp)
    target_dir.mkdir(exist_ok=True)
    target = target_dir / log_path.name
    deleted = log_path.with_name(log_path.name + files.DELETED_SUFFIX)
    source = _link_first((log_path, deleted), target, inode)
    if source is None:
        return None
    if source == log_path:
        _link_indexes(log_path, target, inode)
    # From a .deleted name the index files are not linked: while the worker renames a group of
    # files, an index's .deleted name may still hold an older segment's index. Reads of such a
    # pin walk the segment from position 0 instead (the index is only a seek hint).
    return target


def _link_indexes(log_path: Path, target: Path, inode: int) -> None:
    """Link the live segment's index files beside its pinned ``.log`` when they provably
    belong to it: the worker renames all of a segment's files away before a successor's files
    take the names, so an index linked while the ``.log`` name still held ``inode`` (checked
    after the links) is that segment's. Otherwise the links are dropped."""
    stem = log_path.name[: -len(files.LOG_SUFFIX)]
    linked: list[Path] = []
    for suffix in (files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX):
        index_target = target.with_name(stem + suffix)
        if _link_first((log_path.with_name(stem + suffix),), index_target, None) is not None:
            linked.append(index_target)
    try:
        still_there = os.stat(log_path).st_ino == inode
    except FileNotFoundError:
        still_there = False
    if not still_there:
        for index_target in linked:
            index_target.unlink(missing_ok=True)


def _link_first(sources: tuple[Path, ...], target: Path, inode: int | None) -> Path | None:
    """Hard-link the first of ``sources`` that exists (and has ``inode``) to ``target``."""
    for source in sources:
        target.unlink(missing_ok=True)
        try:
            os.link(source, target, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if inode is None or os.stat(target).st_ino == inode:
            return source
        target.unlink()
    return None


def release(pin_set: PinSet) -> None:
    """Remove the pin set (the reader is done); a missing set is fine."""
    shutil.rmtree(pin_set.path, ignore_errors=True)


def pin_sets(data_dir: Path) -> list[PinSet]:
    """The pin sets of a data dir (names that are not pin sets are left alone and logged)."""
    root = data_dir / files.PINS_DIR
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    found: list[PinSet] = []
    for name in names:
        match = _PIN_SET_RE.match(name)
        if match is None:
            logger.warning("%s: not a pin set; left alone", root / name)
            continue
        found.append(PinSet(root / name, int(match["expires"])))
    return found


def sweep_expired(data_dir: Path, now_ms: int) -> int:
    """Remove the pin sets whose lease passed before ``now_ms``; how many went."""
    removed = 0
    for pin_set in pin_sets(data_dir):
        if pin_set.expires_ms < now_ms:
            logger.info("Removing expired read pins %s", pin_set.path)
            release(pin_set)
            removed += 1
    return removed


def pinned_bytes(data_dir: Path) -> int:
    """Bytes held only by pins: pinned files the log itself no longer links (nlink == 1)."""
    total = 0
    for pin_set in pin_sets(data_dir):
        for dirpath, _dirnames, filenames in os.walk(pin_set.path):
            for name in filenames:
                try:
                    stat = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue
                if stat.st_nlink == 1:
                    total += stat.st_size
    return total
