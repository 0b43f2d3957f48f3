"""The only module that fsyncs, renames atomically, or syncs a directory.

Kafka's ``CheckpointFile.write`` + ``Utils.atomicMoveWithFallback`` + ``Utils.flushDir``, in one
place so that crash safety can be reviewed by reading one file. A test forbids ``os.fsync``,
``os.replace`` and ``os.rename`` anywhere else in the project.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path


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


def flush_mmap(mapping: mmap.mmap) -> None:
    """msync a memory-mapped index."""
    mapping.flush()


def rename(source: Path, target: Path, *, sync_parent: bool = False) -> None:
    """Atomic rename (replacing ``target``); optionally fsync the parent directory after."""
    os.replace(source, target)
    if sync_parent:
        fsync_dir(target.parent)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content.

    1. write ``<path>.tmp``; 2. fsync it; 3. rename over ``path``; 4. fsync the directory.
    A crash before 3 leaves a ``.tmp`` that readers ignore and the next write replaces.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
