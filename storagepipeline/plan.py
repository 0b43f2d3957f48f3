"""Reader options (the names and JSON forms of Spark's Kafka source) and the read plan.

Pure planning over :mod:`storagepipeline.logdirs`: no Spark here, so every option rule is unit
tested without a JVM. Called on the driver by the data source; the plan's units are picklable and
travel to the executors.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from storagecore import TopicPartition, files, pins
from storagecore.log_dir_view import max_timestamp_hint, time_index_entries
from storagepipeline import ranges
from storagepipeline.logdirs import (
    DataLossError,
    PartitionSnapshot,
    Pinner,
    PipelineError,
    SegmentRef,
    clip,
    partition_dirs,
    select_partitions,
    snapshot_partition,
)
from storagepipeline.ranges import OffsetRange
from storagepipeline.reading import ReadOptions, first_offset_at_or_after

#: Kafka's ListOffsets sentinels, used in the JSON offset forms.
LATEST: Final = -1
EARLIEST: Final = -2

VIEWS: Final = ("log", "latest")

#: Every option the reader accepts (lower case: Spark's option maps are case-insensitive).
#: ``subscribe`` / ``subscribePattern`` are the Kafka source's names for ``topic`` /
#: ``topicPattern``, accepted so that existing jobs port unchanged.
READ_OPTIONS: Final = frozenset(
    {
        "path",
        "paths",
        "topic",
        "subscribe",
        "topicpattern",
        "subscribepattern",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "endingtimestamp",
        "startingoffsetsbytimestampstrategy",
        "view",
        "failoncorruption",
        "failondataloss",
        "includeheaders",
        "maxrecordsperbatch",
        "pushdown",
        "pinms",
        "pinsets",
        "skipreportpath",
        "minpartitions",
        "maxrecordsperpartition",
        "maxoffsetspertrigger",
    }
)
#: How long a read's pins (storagecore.pins) may outlive it: the data source has no end-of-job
#: hook, so its pin sets are removed when this lease passes (by the next read or the worker).
DEFAULT_PIN_MS: Final = 3_600_000


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in {"true", "false"}:
        raise PipelineError(f"option {name} must be true or false, got {raw!r}")
    return value == "true"


def include_headers(given: Mapping[str, str]) -> bool:
    """The ``includeHeaders`` option (default true): whether the schema has ``headers``."""
    return _flag({key.lower(): value for key, value in given.items()}, "includeHeaders", True)


def _int(options: Mapping[str, str], name: str) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        raise PipelineError(f"option {name} must be an integer, got {raw!r}") from None


def check_known(options: Mapping[str, str], known: frozenset[str], what: str) -> None:
    unknown = sorted(key for key in options if key.lower() not in known)
    if unknown:
        raise PipelineError(
            f"unknown {what} option(s): {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )


def data_dirs_of(given: Mapping[str, str]) -> list[str]:
    options = {key.lower(): value for key, value in given.items()}
    raw = options.get("paths") or options.get("path")
    if not raw:
        raise PipelineError("option path is required: the data dir(s), comma-separated")
    return [part.strip() for part in str(raw).split(",") if part.strip()]


@dataclasses.dataclass(frozen=True, slots=True)
class ReadSpec:
    """The validated reader options."""

    data_dirs: tuple[str, ...]
    topics: tuple[str, ...]
    topic_pattern: str | None
    starting: str | dict[str, dict[int, int]]
    ending: str | dict[str, dict[int, int]]
    starting_timestamp: int | None
    ending_timestamp: int | None
    timestamp_strategy: str
    view: str
    fail_on_corruption: bool
    fail_on_data_loss: bool
    include_headers: bool
    max_records_per_batch: int
    #: Push ``where`` filters on partition/offset/timestamp into the plan (opt-in; see
    #: :class:`storagepipeline.source.PushdownReader` for why).
    pushdown: bool = False
    #: Lease of the read's pin sets; 0 = no pins (exact only within file.delete.delay.ms).
    pin_ms: int = DEFAULT_PIN_MS
    #: Pin sets a job made (its listing is planned from them): see ``logdirs.Pinner``.
    pin_sets: tuple[str, ...] = ()
    #: Spark's Kafka source options: about this many tasks at least (large ranges are cut), and
    #: at most this many offsets per task (see :mod:`storagepipeline.ranges`).
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    #: Streaming: at most about this many offsets per micro-batch, over all partitions.
    max_offsets_per_trigger: int | None = None
    #: A directory where each read task that skipped something (failOnCorruption=false,
    #: failOnDataLoss=false) writes what it skipped: ``reading.read_skip_report`` sums them.
    skip_report_path: str | None = None

    def pinner(self) -> Pinner:
        frozen = []
        for path in self.pin_sets:
            try:
                frozen.append(pins.open_pin_set(Path(path)))
            except (ValueError, FileNotFoundError) as exc:
                raise PipelineError(f"option pinSets: {exc}") from None
        return Pinner(self.pin_ms, frozen)

    @property
    def read_options(self) -> ReadOptions:
        return ReadOptions(
            fail_on_corruption=self.fail_on_corruption, fail_on_data_loss=self.fail_on_data_loss
        )


def _offsets_option(
    options: Mapping[str, str], name: str, *, streaming: bool = False
) -> str | dict[str, dict[int, int]]:
    raw = options.get(name.lower())
    if raw is None:
        return "latest" if streaming or name == "endingOffsets" else "earliest"
    text = str(raw).strip()
    if text in {"earliest", "latest"}:
        refused = {("endingOffsets", "earliest")}
        if not streaming:
            refused.add(("startingOffsets", "latest"))
        if (name, text) in refused:
            raise PipelineError(f"option {name}={text} is not allowed for batch queries")
        return text
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        raise PipelineError(
            f"option {name} must be earliest, latest or JSON like "
            f'{{"topic":{{"0":23,"1":-2}}}}, got {text!r}'
        ) from None
    if not isinstance(parsed, dict):
        raise PipelineError(f"option {name}: JSON must be an object of topics, got {text!r}")
    result: dict[str, dict[int, int]] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise PipelineError(f"option {name}: topic {topic!r} must map partitions to offsets")
        per: dict[int, int] = {}
        for partition, offset in partitions.items():
            try:
                per[int(partition)] = int(offset)
            except (TypeError, ValueError):
                raise PipelineError(
                    f"option {name}: {topic}-{partition}: offset {offset!r} is not an integer"
                ) from None
            forbidden = LATEST if name == "startingOffsets" else EARLIEST
            if per[int(partition)] == forbidden and not streaming:
                word = "latest (-1)" if forbidden == LATEST else "earliest (-2)"
                raise PipelineError(
                    f"option {name}: {topic}-{partition}: {word} is not allowed for batch queries"
                )
        result[str(topic)] = per
    return result


def parse_read_options(given: Mapping[str, str], *, streaming: bool = False) -> ReadSpec:
    """The reader options of a batch read, or with ``streaming`` of a streaming read:
    ``startingOffsets`` then defaults to ``latest`` (as Spark's Kafka source), there is no end
    (``endingOffsets`` / ``endingTimestamp`` are errors), ``maxOffsetsPerTrigger`` applies and
    the view is ``log``."""
    check_known(given, READ_OPTIONS, "logkeeper read")
    # Spark's option maps are case-insensitive (keys arrive lower-cased); so are ours.
    options = {key.lower(): value for key, value in given.items()}
    if streaming:
        for name in ("endingOffsets", "endingTimestamp"):
            if name.lower() in options:
                raise PipelineError(f"option {name} is not allowed for streaming queries")
        if str(options.get("view", "log")).strip().lower() != "log":
            raise PipelineError("option view must be log for streaming queries")
    elif "maxoffsetspertrigger" in options:
        raise PipelineError("option maxOffsetsPerTrigger applies to streaming queries only")
    max_offsets = _int(options, "maxOffsetsPerTrigger")
    if max_offsets is not None and max_offsets < 1:
        raise PipelineError(f"option maxOffsetsPerTrigger must be >= 1, got {max_offsets}")
    topics_raw = options.get("topic") or options.get("subscribe")
    pattern = options.get("topicpattern") or options.get("subscribepattern")
    topics = tuple(t.strip() for t in str(topics_raw).split(",") if t.strip()) if topics_raw else ()
    if not topics and not pattern:
        raise PipelineError(
            "one of the options topic (comma-separated) or topicPattern is required"
        )
    view = str(options.get("view", "log")).strip().lower()
    if view not in VIEWS:
        raise PipelineError(f"option view must be one of {', '.join(VIEWS)}, got {view!r}")
    strategy = str(options.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if strategy not in {"error", "latest"}:
        raise PipelineError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}"
        )
    starting_ts = _int(options, "startingTimestamp")
    ending_ts = _int(options, "endingTimestamp")
    if starting_ts is not None and "startingoffsets" in options:
        raise PipelineError("options startingOffsets and startingTimestamp exclude each other")
    if ending_ts is not None and "endingoffsets" in options:
        raise PipelineError("options endingOffsets and endingTimestamp exclude each other")
    pin_ms = _int(options, "pinMs")
    if pin_ms is not None and pin_ms < 0:
        raise PipelineError(f"option pinMs must be >= 0 (0 = no pins), got {pin_ms}")
    pin_sets = tuple(p.strip() for p in str(options.get("pinsets", "")).split(",") if p.strip())
    batch_rows = _int(options, "maxRecordsPerBatch") or 8192
    if batch_rows < 1:
        raise PipelineError(f"option maxRecordsPerBatch must be >= 1, got {batch_rows}")
    min_partitions = _int(options, "minPartitions")
    if min_partitions is not None and min_partitions < 1:
        raise PipelineError(f"option minPartitions must be >= 1, got {min_partitions}")
    max_records = _int(options, "maxRecordsPerPartition")
    if max_records is not None and max_records < 1:
        raise PipelineError(f"option maxRecordsPerPartition must be >= 1, got {max_records}")
    return ReadSpec(
        data_dirs=tuple(data_dirs_of(options)),
        topics=topics,
        topic_pattern=str(pattern) if pattern else None,
        starting=_offsets_option(options, "startingOffsets", streaming=streaming),
        ending=_offsets_option(options, "endingOffsets"),
        starting_timestamp=starting_ts,
        ending_timestamp=ending_ts,
        timestamp_strategy=strategy,
        view=view,
        fail_on_corruption=_flag(options, "failOnCorruption", True),
        fail_on_data_loss=_flag(options, "failOnDataLoss", True),
        include_headers=_flag(options, "includeHeaders", True),
        max_records_per_batch=batch_rows,
        pushdown=_flag(options, "pushdown", False),
        pin_ms=DEFAULT_PIN_MS if pin_ms is None else pin_ms,
        pin_sets=pin_sets,
        skip_report_path=str(options["skipreportpath"]) if options.get("skipreportpath") else None,
        min_partitions=min_partitions,
        max_records_per_partition=max_records,
        max_offsets_per_trigger=max_offsets,
    )


@dataclasses.dataclass(slots=True)
class Pushdown:
    """Filters on partition, offset and topic applied exactly at planning; a lower bound on
    timestamps used to skip segments and batches (Spark still evaluates timestamp filters)."""

    topics: set[str] | None = None
    partitions: set[int] | None = None
    offset_low: int = 0
    offset_high: int = 2**63 - 1
    timestamp_low_ms: int | None = None
    empty: bool = False

    def allows(self, tp: TopicPartition) -> bool:
        if self.topics is not None and tp.topic not in self.topics:
            return False
        return self.partitions is None or tp.partition in self.partitions


@dataclasses.dataclass(frozen=True, slots=True)
class PlannedPartition:
    """One read task: a topic-partition's segment refs, each clipped to the task's offsets."""

    topic: str
    partition: int
    directory: str
    refs: tuple[SegmentRef, ...]


def explicit_offsets(
    spec_offsets: Mapping[str, Mapping[int, int]],
    selected: Sequence[TopicPartition],
    name: str,
) -> dict[TopicPartition, int]:
    by_tp = {
        TopicPartition(topic, partition): offset
        for topic, partitions in spec_offsets.items()
        for partition, offset in partitions.items()
    }
    unknown = sorted(str(tp) for tp in by_tp if tp not in set(selected))
    if unknown:
        raise PipelineError(f"option {name} names partitions not being read: {', '.join(unknown)}")
    topics = set(spec_offsets)
    missing = sorted(str(tp) for tp in selected if tp.topic in topics and tp not in by_tp)
    if missing:
        raise PipelineError(
            f"option {name} must give an offset for every partition of the topics it names; "
            f"missing: {', '.join(missing)}"
        )
    return by_tp


def _start_of(
    spec: ReadSpec, snap: PartitionSnapshot, explicit: Mapping[TopicPartition, int]
) -> int | None:
    tp = snap.tp
    if spec.starting_timestamp is not None:
        found = offset_for_timestamp(snap, spec.starting_timestamp, spec.read_options)
        if found is None:
            if spec.timestamp_strategy == "error":
                raise PipelineError(
                    f"{tp}: no record has a timestamp >= startingTimestamp "
                    f"{spec.starting_timestamp} (startingOffsetsByTimestampStrategy=latest "
                    f"reads nothing from such partitions instead)"
                )
            return None
        return found
    offset = explicit.get(tp, EARLIEST)
    if offset == EARLIEST:
        return snap.log_start_offset
    if offset < snap.log_start_offset:
        if spec.fail_on_data_loss:
            raise DataLossError(
                f"{tp}: startingOffsets {offset} is below the log start offset "
                f"{snap.log_start_offset} (set failOnDataLoss=false to start there instead)"
            )
        return snap.log_start_offset
    if offset > snap.log_end_offset:
        raise PipelineError(
            f"{tp}: startingOffsets {offset} is beyond the log end offset {snap.log_end_offset}"
        )
    return offset


def _end_of(spec: ReadSpec, snap: PartitionSnapshot, explicit: Mapping[TopicPartition, int]) -> int:
    tp = snap.tp
    if spec.ending_timestamp is not None:
        found = offset_for_timestamp(snap, spec.ending_timestamp, spec.read_options)
        return snap.log_end_offset if found is None else found
    offset = explicit.get(tp, LATEST)
    if offset == LATEST:
        return snap.log_end_offset
    if offset > snap.log_end_offset:
        raise PipelineError(
            f"{tp}: endingOffsets {offset} is beyond the log end offset {snap.log_end_offset}"
        )
    return offset


def offset_for_timestamp(
    snap: PartitionSnapshot, timestamp: int, options: ReadOptions
) -> int | None:
    """First offset at or after the log start whose timestamp is >= ``timestamp``."""
    refs = clip(snap, snap.log_start_offset, snap.log_end_offset)
    # Sealed segments whose time index says every timestamp is below the target are skipped.
    candidates = [
        ref
        for ref in refs
        if ref.active or (hint := max_timestamp_hint(ref.read_path)) is None or hint >= timestamp
    ]
    return first_offset_at_or_after(candidates, Path(snap.directory), timestamp, options)


def skip_older_than(ref: SegmentRef, timestamp_ms: int) -> SegmentRef:
    """``ref`` without its leading records that the time index proves older than
    ``timestamp_ms``.

    A time index entry ``(t, o)`` says that ``t`` was the largest timestamp of the segment's
    records up to the batch holding ``o``; so when ``t < timestamp_ms`` no record at or before
    ``o`` qualifies and the read can start at ``o + 1``. The entries are read as hints: the
    walk stops at the first one that goes back in time or past the ref's range, and at a
    timestamp of 0 or less (the unused, zero-filled tail of a preallocated index looks so).
    """
    index = ref.read_path.with_name(ref.read_path.name[: -len(files.LOG_SUFFIX)])
    try:
        entries = time_index_entries(
            index.with_name(index.name + files.TIME_INDEX_SUFFIX), ref.base_offset
        )
    except OSError:
        return ref
    start = ref.start_offset
    previous = -1
    for entry in entries:
        if entry.timestamp <= 0 or entry.timestamp < previous or entry.timestamp >= timestamp_ms:
            break
        if entry.offset >= ref.end_offset:
            break
        previous = entry.timestamp
        start = max(start, entry.offset + 1)
    return dataclasses.replace(ref, start_offset=min(start, ref.end_offset))


def plan_read(spec: ReadSpec, pushdown: Pushdown | None = None) -> list[PlannedPartition]:
    """Snapshot (and pin) the selected partitions and cut them into work units."""
    pushdown = pushdown or Pushdown()
    pinner = spec.pinner()
    available = partition_dirs(spec.data_dirs)
    selected = select_partitions(available, topics=spec.topics, pattern=spec.topic_pattern)
    tps = list(selected)
    starts = (
        explicit_offsets(spec.starting, tps, "startingOffsets")
        if isinstance(spec.starting, dict)
        else {}
    )
    ends = (
        explicit_offsets(spec.ending, tps, "endingOffsets") if isinstance(spec.ending, dict) else {}
    )
    units: list[PlannedPartition] = []
    if pushdown.empty:
        return units
    spans: list[tuple[PartitionSnapshot, int, int]] = []
    for tp, directory in selected.items():
        if not pushdown.allows(tp):
            continue
        snap = snapshot_partition(tp, directory, pinner)
        start = _start_of(spec, snap, starts)
        if start is None:
            continue
        end = _end_of(spec, snap, ends)
        spans.append((snap, max(start, pushdown.offset_low), min(end, pushdown.offset_high)))
    return cut(spec, spans, pushdown.timestamp_low_ms)


def cut(
    spec: ReadSpec,
    spans: Sequence[tuple[PartitionSnapshot, int, int]],
    timestamp_low_ms: int | None = None,
) -> list[PlannedPartition]:
    """Read tasks for offsets ``[start, end)`` of each snapshot: one per partition, cut by
    ``minPartitions`` / ``maxRecordsPerPartition`` (:func:`storagepipeline.ranges.split`; the
    ``latest`` view is never cut: a key's latest record needs the whole partition), each task
    holding its segments clipped to its range. With ``timestamp_low_ms`` (a pushed-down
    ``timestamp >=``) segments and leading records that the time index proves older are left
    out."""
    snaps = {snap.tp: snap for snap, _start, _end in spans}
    wanted = [OffsetRange(snap.tp, start, end) for snap, start, end in spans if start < end]
    if spec.view == "log":
        wanted = ranges.split(
            wanted,
            min_partitions=spec.min_partitions,
            max_records_per_partition=spec.max_records_per_partition,
        )
    units: list[PlannedPartition] = []
    for item in wanted:
        snap = snaps[item.tp]
        refs = clip(snap, item.start, item.end)
        if timestamp_low_ms is not None:
            low = timestamp_low_ms
            refs = [
                skip_older_than(ref, low)
                for ref in refs
                if ref.active or (hint := max_timestamp_hint(ref.read_path)) is None or hint >= low
            ]
            refs = [ref for ref in refs if ref.start_offset < ref.end_offset]
        if refs:
            units.append(PlannedPartition(snap.topic, snap.partition, snap.directory, tuple(refs)))
    return units


def describe(units: Sequence[PlannedPartition]) -> dict[str, Any]:
    """A summary for logs and tests: units, partitions, segments."""
    return {
        "units": len(units),
        "partitions": len({(u.topic, u.partition) for u in units}),
        "segments": sum(len(u.refs) for u in units),
    }
