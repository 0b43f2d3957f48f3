"""The only module that fsyncs, renames atomically, or syncs a directory.

Kafka's ``CheckpointFile.write`` + ``Utils.atomicMoveWithFallback`` + ``Utils.flushDir``, in one
place so that crash safety can be reviewed by reading one file. A test forbids ``os.fsync``,
``os.replace`` and ``os.rename`` anywhere else in the project.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Protocol


class Syncable(Protocol):
    """A memory mapping of a file: ``flush`` is its msync (mmap.mmap, or the index mappings of
    storagecore.index._mapping, which hold no descriptor)."""

    def flush(self) -> None: ...


def fsync_fd(fd: int) -> None:
    """Force a file's data and metadata to stable storage."""
    os.fsync(fd)


def fsync_dir(path: Path) -> None:
    """Make renames, creations and deletions inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def flush_mmap(mapping: Syncable) -> None:
    """msync a memory-mapped index (``MS_SYNC``: its written pages reach the disk)."""
    mapping.flush()


def rename(source: Path, target: Path, *, sync_parent: bool = False) -> None:
    """Atomic rename (replacing ``target``); optionally fsync the parent directory after."""
    os.replace(source, target)
    if sync_parent:
        fsync_dir(target.parent)


def write_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content.

    1. write ``<path>.tmp``; 2. fsync it; 3. rename over ``path``; 4. fsync the directory.
    A crash before 3 leaves a ``.tmp`` that readers ignore and the next write replaces.

    With ``sync=False`` steps 2 and 4 are left to a later :func:`sync_path` of the file and of
    its directory on another thread (a roll's producer snapshot: Kafka's ``takeSnapshot(false)``
    then its "flush-log" task). Until then a crash of the process loses nothing, but one of the
    machine may leave ``path`` empty or cut short, so only files that readers check (a CRC)
    and can do without (an older one, or a rebuild from the log) are written so.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def sync_path(path: Path) -> bool:
    """fsync the file or directory at ``path`` through a descriptor of its own (opened
    read-only: Linux syncs the file whatever the descriptor's mode), so that no descriptor
    another thread may close is used; False, syncing nothing, when ``path`` is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


class WriteBehind:
    """Writes a file's data to the disk while the file is still being written, on a thread of
    its own (the cleaner's ``.cleaned`` segment): once ``every_bytes`` more were written, and
    no sync is running, :meth:`written` starts an ``fdatasync`` of the file on that thread, so
    the fsync that the swap protocol needs at the end finds little left to write (about 10 ms
    of a 13 MB cleaned segment's fsync). It never replaces that fsync and promises nothing
    itself: a crash before the protocol's fsync leaves a ``.cleaned`` file, which the loader
    removes whatever it holds.

    :meth:`close` waits for the thread and returns what its last sync failed with (Linux
    reports a write-back error to every descriptor open when it happened, so the protocol's
    own fsync sees it too); the writer calls it before its own fsync, and on every way out.
    """

    def __init__(self, path: Path, every_bytes: int) -> None:
        assert every_bytes > 0, every_bytes
        self._path = path
        self._every_bytes = every_bytes
        self._next_bytes = every_bytes
        self._thread: threading.Thread | None = None
        self._error: OSError | None = None

    def written(self, total_bytes: int) -> None:
        """``total_bytes`` of the file are written (and not yet synced by this)."""
        if total_bytes < self._next_bytes or self._running():
            return
        self._next_bytes = total_bytes + self._every_bytes
        self._thread = threading.Thread(target=self._sync, name="write-behind", daemon=True)
        self._thread.start()

    def _running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _sync(self) -> None:
        try:
            fd = os.open(self._path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self._error = exc

    def close(self) -> OSError | None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        error, self._error = self._error, None
        return error
