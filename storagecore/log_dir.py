"""One log directory of a LogManager: its lock, its clean-shutdown marker, its checkpoints.

:class:`storagecore.log_manager.LogManager` holds one :class:`LogDir` per directory it was given.
Opening one takes the directory's ``.lock`` (flock; a second process fails with
:class:`~storagecore.errors.LogDirLockedError`) and consumes Kafka's ``.kafka_cleanshutdown``
marker: deleted (and the deletion fsynced) as soon as loading starts, so a crash while loading
counts as unclean (KAFKA-10471). The dir's two checkpoint files (``recovery-point-offset-
checkpoint``, ``log-start-offset-checkpoint``) are read and written here, and a write that would
put the same offsets on stable storage again is skipped.

What must not happen here: anything about the logs inside the directory (the manager's), or
taking the dir offline (the manager's ``handle_io_error``; an ``OSError`` here propagates).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from storagecore import durability, file_lock, files
from storagecore.checkpoints import OffsetCheckpointFile
from storagecore.config import TopicPartition
from storagecore.errors import CorruptCheckpointError

logger = logging.getLogger(__name__)


@dataclasses.dataclass(slots=True)
class LogDir:
    path: Path
    #: The ``.lock`` file's descriptor while held; -1 once released.
    lock_fd: int
    had_clean_shutdown: bool
    online: bool = True
    error: str | None = None
    #: Checkpoint file name -> the offsets it holds on stable storage: what this manager wrote
    #: (write_atomically returns once the rename is durable) or read after the open's directory
    #: fsync (a clean shutdown). A checkpoint whose offsets have not changed is not rewritten:
    #: the same offsets would cost two fsyncs for nothing (at every shutdown of a `logkeeper
    #: clean`, and every checkpoint interval of an idle worker).
    durable_checkpoints: dict[str, dict[TopicPartition, int]] = dataclasses.field(
        default_factory=dict
    )

    @classmethod
    def lock(cls, path: Path) -> LogDir:
        """Take ``path``'s lock and its clean-shutdown marker (see the module docstring)."""
        fd = file_lock.lock_dir(path)
        marker = path / files.CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        if clean:
            marker.unlink()
            durability.fsync_dir(path)
        return cls(path, fd, clean)

    def release(self) -> None:
        """Release the lock (once; a second call does nothing)."""
        if self.lock_fd >= 0:
            file_lock.release(self.lock_fd)
            self.lock_fd = -1

    def read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        """The offsets of the checkpoint file ``name``; none (with a warning naming the file)
        when it is unreadable: every log then starts from offset 0, as Kafka's."""
        path = self.path / name
        try:
            offsets = OffsetCheckpointFile(path).read()
        except CorruptCheckpointError as exc:
            logger.warning("Ignoring unreadable checkpoint (offsets default to 0): %s", exc)
            return {}
        if self.had_clean_shutdown and path.exists():
            # The open fsynced the directory (after its previous owner's last write, itself
            # fsynced): this content is on stable storage.
            self.durable_checkpoints[name] = dict(offsets)
        return offsets

    def write_checkpoint(self, name: str, offsets: dict[TopicPartition, int]) -> None:
        """Write the checkpoint file ``name``, unless stable storage already holds these
        offsets in it (see :attr:`durable_checkpoints`)."""
        durable = self.durable_checkpoints
        target = self.path / name
        if durable.get(name) == offsets and target.exists():
            return
        durable.pop(name, None)  # until the new content is durable
        OffsetCheckpointFile(target).write(offsets)
        durable[name] = offsets
