"""The common append in one native call: Kafka's ``LogValidator``, ``FileRecords.append`` and
``LogSegment.append``'s index entries fused (:data:`storagecore.records.scan.
append_uncompressed`), for a request of uncompressed batches without producer ids that fits
the active segment without a roll.

:class:`NativeAppend` holds the settings the native call passes on, read once per config, and
runs the call against the active segment; :class:`storagecore.local_log.LocalLog` keeps one per
config and :class:`storagecore.log.Log` takes what it wrote. What it does not take (a producer
id, a roll, a compressed or invalid batch) goes to the general path, Kafka's steps one by one
(:func:`storagecore.log_validator.validate_and_assign_offsets`), which is the specification.

The hot path of the write: one frame of Python per append besides the native call (the
segment's bookkeeping is :meth:`storagecore.segment.LogSegment.native_appended`).
"""

from __future__ import annotations

from storagecore.config import LogConfig
from storagecore.log_validator import AppendOrigin, ValidatedRecords, native_append_applies
from storagecore.records import layout
from storagecore.records.scan import append_uncompressed
from storagecore.roll_params import roll_free_append_limits
from storagecore.segment import LogSegment

#: The attributes' low byte, which holds the codec.
_CODEC_BYTE = layout.ATTRIBUTES_OFFSET + 1
_CODEC_MASK = layout.COMPRESSION_CODEC_MASK
# Module constants: an Enum member looked up on its class costs ~40 ns a time.
_CLIENT = AppendOrigin.CLIENT
_REPLICATION = AppendOrigin.REPLICATION

NativeWritten = tuple[int, int, int, int, int, int]
"""What a written native append returns: first offset, last offset, max timestamp, the shallow
offset of the max timestamp, record count, bytes written."""


class NativeAppend:
    """The native append under one config (:meth:`for_config`: None when it never applies)."""

    __slots__ = (
        "after_max_ms",
        "before_max_ms",
        "compact",
        "max_message_bytes",
        "max_segment_ms",
        "segment_bytes",
    )

    def __init__(self, config: LogConfig) -> None:
        self.segment_bytes = config.segment_bytes
        self.max_segment_ms = config.max_segment_ms
        self.compact = config.compact
        self.max_message_bytes = config.max_message_bytes
        self.before_max_ms = config.message_timestamp_before_max_ms
        self.after_max_ms = config.message_timestamp_after_max_ms

    @classmethod
    def for_config(cls, config: LogConfig) -> NativeAppend | None:
        """The native append for ``config``; None when its settings rule it out (LogAppendTime,
        recompression)."""
        return cls(config) if native_append_applies(config) else None

    def append(  # noqa: PLR0917 - the hot path, positional
        self,
        segment: LogSegment,
        fd: int,
        data: bytes | bytearray | memoryview,
        origin: AppendOrigin,
        now_ms: int,
        leader_epoch: int,
    ) -> NativeWritten | ValidatedRecords | None:
        """Validate ``data`` as :func:`validate_and_assign_offsets` does, assign offsets from
        ``segment``'s next offset and, when no batch has a producer id and no roll is due,
        write it to ``segment`` (the active one, whose files the caller pinned: ``fd`` is its
        ``.log``'s descriptor) with its index
        entries: returns :data:`NativeWritten`. Returns the validated batches unwritten when a
        producer or a roll needs the general path, and None (nothing written, nothing decided)
        when the native validation does not take the request: compressed or invalid batches,
        no native module, or a request that does not fit the segment; the caller then
        validates with the Python reference."""
        native = append_uncompressed  # read per call: tests turn it off
        if native is None:
            return None
        file, offset_index, time_index, next_offset, max_so_far, offset_of_max_so_far = (
            segment.native_append_state()
        )
        position = file.size_bytes
        if isinstance(data, memoryview):
            data = data.cast("B")  # len() in bytes, as the written size
        size = len(data)
        if size > _CODEC_BYTE and data[_CODEC_BYTE] & _CODEC_MASK:
            return None  # a compressed first batch: spare the calls below
        if size > self.segment_bytes - position:
            return None  # a roll, or RecordBatchTooLargeError: the general path decides
        max_timestamp_no_roll = roll_free_append_limits(
            segment, offset_index, time_index, position, self.max_segment_ms, now_ms
        )
        if max_timestamp_no_roll is None:
            return None
        # The mapped indexes and the entry each is written at, or (unmapped) one-entry buffers
        # that native_appended writes out (storagecore.index.base). An entry due now whose
        # blocks are not reserved: the general path, which reserves them after validating.
        due = segment.bytes_since_last_index_entry > segment.index_interval_bytes
        offset_target = offset_index.native_target(reserve=not due)
        time_target = time_index.native_target(reserve=not due)
        if offset_target is None or time_target is None:
            return None
        base_offset = segment.base_offset
        result = native(
            data,
            fd,
            position,
            next_offset,
            now_ms,
            origin is _CLIENT,
            origin is _REPLICATION,
            self.compact,
            self.max_message_bytes,
            leader_epoch,
            self.before_max_ms,
            self.after_max_ms,
            base_offset,
            max_timestamp_no_roll,
            offset_target[0],
            offset_target[1],
            time_target[0],
            time_target[1],
            time_index.last_timestamp,
            segment.bytes_since_last_index_entry,
            segment.index_interval_bytes,
            max_so_far,
            offset_of_max_so_far,
        )
        if result is None:
            return None
        first, last, max_timestamp, offset_of_max, records, batches, unwritten, indexed = result
        if unwritten is not None:
            return ValidatedRecords(
                unwritten, first, last, max_timestamp, offset_of_max, records, batches, -1
            )
        file.size_bytes = position + size  # FileRecords.append's step, done by the native write
        segment.native_appended(
            position, size, last, max_timestamp, offset_of_max, index_entries=indexed
        )
        return first, last, max_timestamp, offset_of_max, records, size
