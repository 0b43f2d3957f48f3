"""Human-readable dumps of log files, in kafka-dump-log's format (``logkeeper dump-log``).

``.log``: one line per batch with every header field; with ``records=True`` one ``|`` line per
record (control records show the marker). ``.index`` / ``.timeindex``: one line per entry.
``.snapshot``: one line per producer, as kafka-dump-log prints it. Checkpoint files: version,
count and entries. Reads, never writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from storagecore import files, log_dir_view
from storagecore.errors import StorageError
from storagecore.producer_state.snapshot import read_snapshot
from storagecore.records import layout
from storagecore.records.batch import ControlType, Record, RecordBatch
from storagecore.records.file_records import FileRecords
from storagecore.records.legacy import LegacyRecordBatch


def dump_file(path: Path, *, records: bool = False, max_bytes: int = 1 << 62) -> Iterator[str]:
    name = path.name
    yield f"Dumping {path}"
    if name.endswith(files.LOG_SUFFIX) or name.endswith(files.LOG_SUFFIX + files.SWAP_SUFFIX):
        yield from _dump_log(path, records=records, max_bytes=max_bytes)
    elif name.endswith(files.INDEX_SUFFIX):
        base = files.offset_from_file_name(name)
        for offset, position in log_dir_view.offset_index_entries(path, base):
            yield f"offset: {offset} position: {position}"
    elif name.endswith(files.TIME_INDEX_SUFFIX):
        base = files.offset_from_file_name(name)
        for timestamp, offset in log_dir_view.time_index_entries(path, base):
            yield f"timestamp: {timestamp} offset: {offset}"
    elif name.endswith(files.SNAPSHOT_SUFFIX):
        yield from _dump_snapshot(path)
    elif name in log_dir_view.CHECKPOINT_FILES:
        offsets = log_dir_view.read_checkpoint(path)
        yield "version: 0"
        yield f"entries: {len(offsets)}"
        for tp, offset in sorted(offsets.items()):
            yield f"topic: {tp.topic} partition: {tp.partition} offset: {offset}"
    elif name == files.CLEAN_SHUTDOWN_FILE:
        yield f"clean shutdown marker: {path.read_text(encoding='utf-8', errors='replace').strip()}"
    else:
        raise StorageError(
            f"{path}: don't know how to dump this file (expected .log, .index, .timeindex, "
            ".snapshot or a checkpoint file)"
        )


def _dump_log(path: Path, *, records: bool, max_bytes: int) -> Iterator[str]:
    log = FileRecords(path, create=False)
    try:
        yield f"Log starting offset: {files.offset_from_file_name(path.name)}"
        end = 0
        try:
            for position, batch in log.batches(0, min(log.size_bytes, max_bytes)):
                yield format_batch(batch, position)
                end = position + batch.size_bytes
                if records and batch.is_valid():
                    for record in batch.records():
                        yield format_record(batch, record)
        except StorageError as exc:
            yield f"Found invalid data at position {end}: {exc}"
            return
        if end < log.size_bytes:
            yield (
                f"Found {log.size_bytes - end} invalid bytes at the end of {path.name} "
                f"(position {end})"
            )
    finally:
        log.close()


def _dump_snapshot(path: Path) -> Iterator[str]:
    """Kafka's line per producer: its state, then its last batch if it has one. A corrupt
    snapshot raises CorruptSnapshotError naming the file and the field's offset."""
    for entry in read_snapshot(path):
        txn = entry.current_txn_first_offset
        line = (
            f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
            f"coordinatorEpoch: {entry.coordinator_epoch} "
            f"currentTxnFirstOffset: {_optional_long(txn)} "
            f"lastTimestamp: {entry.last_timestamp} "
        )
        if entry.batches:
            last = entry.batches[0]
            line += (
                f"firstSequence: {last.first_sequence} lastSequence: {last.last_sequence} "
                f"lastOffset: {last.last_offset} offsetDelta: {last.offset_delta} "
                f"timestamp: {last.timestamp}"
            )
        yield line


def _timestamp_type_name(batch: RecordBatch) -> str:
    if isinstance(batch, LegacyRecordBatch):
        return batch.timestamp_type_name  # v0: NoTimestampType
    return batch.timestamp_type.config_name


def format_batch(batch: RecordBatch, position: int) -> str:
    if isinstance(batch, LegacyRecordBatch):
        # Kafka's DumpLogSegments: a v0/v1 entry shows its (last) offset only.
        return (
            f"offset: {batch.last_offset} position: {position} "
            f"{batch.timestamp_type_name}: {batch.max_timestamp} size: {batch.size_bytes} "
            f"magic: {batch.magic} compresscodec: {batch.compression.config_name} "
            f"crc: {batch.crc} isvalid: {str(batch.is_valid()).lower()}"
        )
    horizon = batch.delete_horizon_ms
    return (
        f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
        f"count: {batch.records_count} baseSequence: {batch.base_sequence} "
        f"lastSequence: {batch.last_sequence} producerId: {batch.producer_id} "
        f"producerEpoch: {batch.producer_epoch} "
        f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
        f"isTransactional: {str(batch.is_transactional).lower()} "
        f"isControl: {str(batch.is_control).lower()} "
        f"deleteHorizonMs: {_optional_long(horizon)} "
        f"position: {position} {batch.timestamp_type.config_name}: {batch.max_timestamp} "
        f"size: {batch.size_bytes} magic: {batch.magic} "
        f"compresscodec: {batch.compression.config_name} crc: {batch.crc} "
        f"isvalid: {str(batch.is_valid()).lower()}"
    )


def _optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _text(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", errors="backslashreplace")


def format_record(batch: RecordBatch, record: Record) -> str:
    sequence = (
        layout.NO_SEQUENCE
        if batch.base_sequence == layout.NO_SEQUENCE
        else (batch.base_sequence + record.offset - batch.base_offset) % (layout.INT32_MAX + 1)
    )
    sizes = (
        f"| offset: {record.offset} {_timestamp_type_name(batch)}: {record.timestamp} "
        f"keySize: {-1 if record.key is None else len(record.key)} "
        f"valueSize: {-1 if record.value is None else len(record.value)}"
    )
    if isinstance(batch, LegacyRecordBatch):
        # v0/v1 records have no sequence and no headers (Kafka prints neither).
        return f"{sizes} key: {_text(record.key)} payload: {_text(record.value)}"
    head = (
        f"| offset: {record.offset} {batch.timestamp_type.config_name}: {record.timestamp} "
        f"keySize: {-1 if record.key is None else len(record.key)} "
        f"valueSize: {-1 if record.value is None else len(record.value)} sequence: {sequence} "
        f"headerKeys: [{','.join(k for k, _ in record.headers)}]"
    )
    if batch.is_control and record.key is not None and len(record.key) >= 4:
        _, type_id = layout.CONTROL_RECORD_KEY.unpack_from(record.key, 0)
        control = (
            ControlType(type_id)
            if type_id in ControlType._value2member_map_
            else ControlType.UNKNOWN
        )
        if (
            control in (ControlType.COMMIT, ControlType.ABORT)
            and record.value
            and len(record.value) >= 6
        ):
            _, coordinator_epoch = layout.END_TXN_MARKER_VALUE.unpack_from(record.value, 0)
            return f"{head} endTxnMarker: {control.name} coordinatorEpoch: {coordinator_epoch}"
        return f"{head} controlType: {control.name}"
    return f"{head} key: {_text(record.key)} payload: {_text(record.value)}"
