"""What a LogManager has still to unlink (Kafka's ``logsToBeDeleted`` and its
``kafka-delete-logs`` task): deleted partitions' ``<topic>-<p>.<uuid>-delete`` directories,
each after its ``file.delete.delay.ms``, and the stray ``*.deleted`` segment files a load found
(storagecore.loader, pass 1: left for later, so that a restart soon after retention or a clean
is not bound by thousands of unlinks; nothing reads a ``.deleted`` file).

Only children of the given log dirs with those names are ever removed (DESIGN invariant 5);
an ``OSError`` goes to ``on_io_error`` with the log dir it happened in.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import threading
from collections.abc import Callable, Collection
from pathlib import Path

from storagecore import files

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class _PendingDirDelete:
    due_ms: int
    path: Path


class LogsToDelete:
    def __init__(self, log_dirs: Collection[Path], on_io_error: Callable[[Path, OSError], None]):
        self._log_dirs = log_dirs
        self._on_io_error = on_io_error
        self._lock = threading.Lock()
        self._dirs: list[_PendingDirDelete] = []
        self._stray_files: list[Path] = []

    def schedule_dir(self, path: Path, due_ms: int) -> None:
        with self._lock:
            self._dirs.append(_PendingDirDelete(due_ms, path))

    def add_stray_file(self, path: Path) -> None:
        """A ``.deleted`` file found by a load (called from the loading threads)."""
        with self._lock:
            self._stray_files.append(path)

    @property
    def pending_dirs(self) -> list[Path]:
        with self._lock:
            return [p.path for p in self._dirs]

    def delete_stray_files(self) -> int:
        """Unlink the stray ``.deleted`` files; how many were pending."""
        with self._lock:
            stray, self._stray_files = self._stray_files, []
        for path in stray:
            # Invariant 5: only a .deleted file of a partition dir of one of our log dirs.
            assert path.parent.parent in self._log_dirs, path
            assert path.name.endswith(files.DELETED_SUFFIX), path
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                # The dir goes offline; what is left is found again by the next load.
                self._on_io_error(path.parent.parent, exc)
                break
        return len(stray)

    def delete_due_dirs(self, now_ms: int) -> int:
        """Remove the ``-delete`` dirs whose delay passed at ``now_ms``; how many."""
        with self._lock:
            due = [p for p in self._dirs if p.due_ms <= now_ms]
            self._dirs = [p for p in self._dirs if p.due_ms > now_ms]
        for pending in due:
            path = pending.path
            # Invariant 5: only a -delete child of one of our log dirs is ever removed.
            assert path.parent in self._log_dirs and files.is_delete_dir_name(path.name), path
            try:
                shutil.rmtree(path)
                logger.info("Deleted log directory %s", path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                self._on_io_error(path.parent, exc)
        return len(due)
