"""The exceptions storagecore raises, one tree.

Operating errors (bad input, corrupt files, a failing disk) are subclasses of
:class:`StorageError` or :class:`ConfigError` and carry a message that names the thing: the
topic-partition, the file, the byte position, the offset, the config key. Programmer errors (a
broken invariant) are ``AssertionError`` and are never caught::

    * StorageError
      x CorruptRecordError          bad CRC, length, magic, count: recovery truncates,
                                    the append path rejects
        x UnsupportedCompressionError  codec id outside 0..4
      x InvalidRecordError          well-formed but not acceptable (null key on a compacted topic,
                                    timestamp out of range, control batch from a client, ...)
        x RecordTooLargeError       batch above max.message.bytes (Kafka: MESSAGE_TOO_LARGE)
          x RecordBatchTooLargeError  an append above segment.bytes (RECORD_LIST_TOO_LARGE)
      x CorruptIndexError           index file fails its sanity check; rebuilt from the log
      x CorruptCheckpointError      checkpoint file unreadable; treated as empty by the loader
      x CorruptSnapshotError        producer-state snapshot unreadable; deleted, an older one or
                                    the log is used instead
      x ProducerStateError          an idempotent producer's batch that must not be appended
        x OutOfOrderSequenceError   its first sequence does not follow the producer's last
        x InvalidProducerEpochError its epoch is older than the producer's current one
        x InvalidTxnStateError      a plain batch inside the producer's open transaction
      x OffsetOutOfRangeError       read or delete-records outside [log start, log end]
      x SegmentOffsetOverflowError  relative offset does not fit in int32
      x LogDirLockedError           another process holds the log dir's .lock
      x LogDirOfflineError          an OSError took the log dir offline; sticky until restart
      x LogDirFullError             the filesystem is full (ENOSPC, EDQUOT) or below the free-space
                                    floor: the write was refused, nothing half-written stays,
                                    the dir stays online; retriable (KAFKA_STORAGE_ERROR)
      x ResourceExhaustedError      the process or system ran out of descriptors or memory
                                    (EMFILE, ENFILE, ENOMEM): that request failed, the file
                                    cache shed, the dir stays online; retriable
                                    (KAFKA_STORAGE_ERROR)
      x UnknownTopicOrPartitionError
    * ConfigError (ValueError)      bad topic config key or value, bad topic name
"""

from __future__ import annotations


class StorageError(Exception):
    """Base of every operating error raised by storagecore."""


class CorruptRecordError(StorageError):
    """Bytes that are not a valid record batch (CRC, sizes, magic, record framing)."""


class UnsupportedCompressionError(CorruptRecordError):
    """A batch names a compression codec id that Kafka does not define."""


class InvalidRecordError(StorageError):
    """A well-formed batch that the log must not accept."""


class RecordTooLargeError(InvalidRecordError):
    """A batch larger than ``max.message.bytes`` or an append larger than ``segment.bytes``."""


class RecordBatchTooLargeError(RecordTooLargeError):
    """An append larger than ``segment.bytes``: it could never fit in a segment (Kafka's
    ``RecordBatchTooLargeException``, answered as RECORD_LIST_TOO_LARGE, where a batch above
    ``max.message.bytes`` is MESSAGE_TOO_LARGE)."""


class CorruptIndexError(StorageError):
    """An index file that fails its sanity check."""


class CorruptCheckpointError(StorageError):
    """A checkpoint file that cannot be parsed."""


class CorruptSnapshotError(StorageError):
    """A producer-state ``.snapshot`` file that cannot be read (length, version, CRC)."""


class ProducerStateError(StorageError):
    """A batch of an idempotent or transactional producer that its state refuses (Kafka's
    ``ProducerAppendInfo`` checks); nothing of the append is written."""


class OutOfOrderSequenceError(ProducerStateError):
    """Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER."""


class InvalidProducerEpochError(ProducerStateError):
    """Kafka's INVALID_PRODUCER_EPOCH: the producer was fenced by a newer epoch."""


class InvalidTxnStateError(ProducerStateError):
    """Kafka's INVALID_TXN_STATE: a non-transactional batch while a transaction is open."""


class OffsetOutOfRangeError(StorageError):
    """An offset outside the log's ``[log start offset, log end offset]``."""


class SegmentOffsetOverflowError(StorageError):
    """An offset whose distance from the segment base does not fit in an int32."""


class LogDirLockedError(StorageError):
    """The log directory is locked by another process."""


class LogDirOfflineError(StorageError):
    """The log directory failed with an I/O error and is offline until restart."""


class LogDirFullError(StorageError):
    """A write refused for lack of space: the filesystem said ENOSPC or EDQUOT, or its free
    space is below the worker's floor. Unlike an I/O error this takes nothing offline: what is
    stored stays readable and writes resume by themselves once space is free again."""


class ResourceExhaustedError(StorageError):
    """An operation failed because the process or the system ran out of file descriptors or
    memory (EMFILE, ENFILE, ENOMEM), even after the file cache closed idle files and the
    operation was tried again. Not a disk failure: nothing is taken offline, and the same
    request may succeed a moment later (storagecore.file_cache)."""


class UnknownTopicOrPartitionError(StorageError):
    """No log exists for the topic-partition."""


class ConfigError(ValueError):
    """A bad topic configuration key or value, or a bad topic name."""
