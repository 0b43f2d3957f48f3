"""The common append in one native call: Kafka's ``LogValidator``, ``FileRecords.append`` and
``LogSegment.append`` with its index entries fused (:data:`append_to_segment`, in
``storagecore/records/_segment_append.c``), for a request of uncompressed batches (and lz4
ones, when the topic keeps the producer's compression and the extension's LZ4 decoder is the
Python path's) without producer ids that fits the active segment without a roll.

:func:`native_append_settings` reads once per config what the native call needs of the topic's
settings; :class:`storagecore.local_log.LocalLog` keeps it, and :meth:`storagecore.log.Log.append`
makes the call against the active segment, whose state (size, next offset, max timestamp, index
entries, bytes since the last entry) the call reads from and writes back to the segment's own
Python objects. Batches with producer ids it validates and hands back unwritten: once the
producer state accepted them (Python, :meth:`storagecore.producer_state.ProducerStateManager.
prepare_append`), :data:`write_to_segment` writes them the same way. What it does not take (a
roll, another compressed or an invalid batch, an index entry whose blocks are not reserved,
transaction markers that complete a transaction) goes to the general path, Kafka's steps one by one
(:func:`storagecore.log_validator.validate_and_assign_offsets`,
:meth:`storagecore.segment.LogSegment.append`), which is the specification: the two must leave
byte-identical files (``tests/unit/storagecore/test_log_append_native.py``).

The hot path of the write: no Python frame besides :meth:`storagecore.log.Log.append`, which
makes one call, :data:`append_active` (storagecore/records/_log_append.c), for a client's
request of uncompressed (or lz4) batches without producer ids to a segment whose files are held:
its lock, checks, clock, this module's :data:`append_to_segment`, the producer state's map end
offset and the LogAppendInfo, in C.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Final

from storagecore.clock import SystemClock
from storagecore.config import LogConfig
from storagecore.log_info import LogAppendInfo
from storagecore.log_validator import native_append_applies
from storagecore.records.scan import AppendToSegment, NativeSettings, WriteToSegment
from storagecore.records.scan import append_active as _native_active
from storagecore.records.scan import append_active_setup as _native_active_setup
from storagecore.records.scan import append_to_segment as _native
from storagecore.records.scan import write_to_segment as _native_write

NativeAppendSettings = NativeSettings
"""segment.bytes, segment.ms, whether the topic is compacted, max.message.bytes,
message.timestamp.before.max.ms, message.timestamp.after.max.ms, and whether lz4 batches may be
validated natively too: what the native call reads of the config, in its order. They may when
the topic keeps the producer's compression (no recompression), and then are once
storagecore.records.codecs has found the extension's LZ4 decoder to be the one the Python path
uses (it tells the extension on the first lz4 batch it decodes: no lz4 import before one)."""

#: The native calls, None without the extension (read per append: tests turn them off).
append_to_segment: AppendToSegment | None = _native
write_to_segment: WriteToSegment | None = _native_write
#: Log.append's common case in one call (storagecore/records/_log_append.c): it appends through
#: :data:`append_to_segment` as read at the time, so turning that off turns this off too.
append_active: Callable[[object, bytes | bytearray | memoryview], LogAppendInfo | None] | None = (
    _native_active
)

if _native_active_setup is not None:
    _native_active_setup(sys.modules[__name__], LogAppendInfo, SystemClock)

__all__: Final = [
    "NativeAppendSettings",
    "append_active",
    "append_to_segment",
    "native_append_settings",
    "write_to_segment",
]


def native_append_settings(config: LogConfig) -> NativeAppendSettings | None:
    """The native call's settings under ``config``; None when the config rules it out
    (LogAppendTime, recompression)."""
    if not native_append_applies(config):
        return None
    return (
        config.segment_bytes,
        config.max_segment_ms,
        config.compact,
        config.max_message_bytes,
        config.message_timestamp_before_max_ms,
        config.message_timestamp_after_max_ms,
        config.compression_type == "producer",
    )
