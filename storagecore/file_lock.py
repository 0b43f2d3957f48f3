"""The ``.lock`` of a log directory (Kafka's FileLock): one process at a time per directory.

An exclusive, non-blocking ``flock`` on ``<dir>/.lock``, held for the life of the
:class:`~storagecore.log_manager.LogManager` that loads the directory; a second holder fails
with :class:`LogDirLockedError` naming the file. A writer that will lock the directory later
(the Spark pipeline's) checks first with :func:`check_unlocked`, which takes and creates
nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from storagecore import files
from storagecore.errors import LogDirLockedError


def locked_error(path: Path) -> LogDirLockedError:
    return LogDirLockedError(
        f"log directory {path} is locked by another process ({path / files.LOCK_FILE}); "
        "stop the other worker or use another directory"
    )


def lock_dir(path: Path) -> int:
    """Create ``path`` if needed and take its ``.lock``; the descriptor that holds it."""
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / files.LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise locked_error(path) from None
    return fd


def release(fd: int) -> None:
    """Give up a lock taken by :func:`lock_dir` and close its descriptor."""
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def check_unlocked(path: Path) -> None:
    """Raise :class:`LogDirLockedError` when another holder has ``path``'s ``.lock``; takes
    nothing and creates nothing (a pre-flight check for tools that will lock it later)."""
    try:
        fd = os.open(path / files.LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise locked_error(path) from None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
