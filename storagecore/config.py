"""Topic configuration with Kafka's own keys, defaults and ranges; topic names; Topic manifests.

This is the one module of storagecore that the operator imports (DESIGN.md): it does no I/O
except reading the text it is given, and it imports nothing from the rest of storagecore but
:mod:`storagecore.errors`.

``LogConfig`` fields are a mechanical copy of Kafka's topic keys (``max.compaction.lag.ms`` ↔
``max_compaction_lag_ms``), mapped in one table, :data:`TOPIC_CONFIG_KEYS`. Unknown keys and
out-of-range values raise :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NamedTuple

from storagecore.errors import ConfigError

LONG_MAX: Final = 2**63 - 1
INT_MAX: Final = 2**31 - 1

MAX_TOPIC_NAME_LENGTH: Final = 249
_TOPIC_NAME_RE: Final = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> str:
    """Kafka's rule: ``[a-zA-Z0-9._-]``, 1..249 characters, not ``.`` or ``..``.

    This is what keeps every path inside the data directory (DESIGN invariant 5): a valid name
    has no ``/`` and cannot be a parent reference.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"topic name {name!r} is empty or not a string")
    if name in (".", ".."):
        raise ConfigError(f"topic name {name!r} is not allowed")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise ConfigError(
            f"topic name {name[:40]!r}... is {len(name)} characters, the limit is "
            f"{MAX_TOPIC_NAME_LENGTH}"
        )
    if not _TOPIC_NAME_RE.match(name):
        raise ConfigError(f"topic name {name!r} contains characters outside [a-zA-Z0-9._-]")
    return name


class TopicPartition(NamedTuple):
    """A topic name and a partition number; ``str()`` is ``topic-partition``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


CLEANUP_POLICY_DELETE: Final = "delete"
CLEANUP_POLICY_COMPACT: Final = "compact"
COMPRESSION_TYPES: Final = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")
TIMESTAMP_TYPES: Final = ("CreateTime", "LogAppendTime")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LogConfig:
    """One log's configuration. Units are in the names; values are Kafka's defaults."""

    cleanup_policy: tuple[str, ...] = (CLEANUP_POLICY_DELETE,)
    """``cleanup.policy``: ``delete``, ``compact``, both, or empty (only log-start retention)."""
    compression_type: str = "producer"
    """``compression.type``: ``producer`` keeps the producer's codec; otherwise batches are
    rewritten with this codec on append."""
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    delete_retention_ms: int = 86_400_000
    """How long tombstones and transaction markers survive after their first clean."""
    file_delete_delay_ms: int = 60_000
    """Delay between renaming a segment to ``.deleted`` and unlinking it."""
    flush_messages: int = LONG_MAX
    """fsync after this many unflushed messages (off by default: recovery covers the tail)."""
    flush_ms: int = LONG_MAX
    """fsync when this long has passed since the last flush (off by default)."""
    index_interval_bytes: int = 4096
    """Bytes appended between two offset-index entries."""
    max_compaction_lag_ms: int = LONG_MAX
    """A record is made eligible for compaction at the latest after this long."""
    max_message_bytes: int = 1_048_588
    """Largest batch accepted, including its 12-byte log overhead."""
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3_600_000
    """Newest CreateTime accepted, after the broker's clock: Kafka 4's default is one hour
    (it was unbounded before 4.0)."""
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    preallocate: bool = False
    """Accepted for compatibility; segment files are never preallocated (indexes always are)."""
    retention_bytes: int = -1
    """Per partition; -1 disables. Kafka's rule: the log never goes below this size."""
    retention_ms: int = 604_800_000
    """-1 disables time retention."""
    segment_bytes: int = 1_073_741_824
    segment_index_bytes: int = 10_485_760
    segment_jitter_ms: int = 0
    segment_ms: int = 604_800_000

    def __post_init__(self) -> None:
        for key, spec in TOPIC_CONFIG_KEYS.items():
            value = getattr(self, spec.field)
            spec.check(key, value)

    @property
    def compact(self) -> bool:
        return CLEANUP_POLICY_COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return CLEANUP_POLICY_DELETE in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """Roll deadline: for compacted topics ``max.compaction.lag.ms`` caps ``segment.ms``."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def max_index_size_bytes(self) -> int:
        return self.segment_index_bytes

    @classmethod
    def from_topic_config(
        cls, config: Mapping[str, Any], *, base: LogConfig | None = None
    ) -> LogConfig:
        """Build from Kafka keys (strings from the CLI, or YAML scalars); unknown keys fail."""
        values: dict[str, Any] = {}
        for key, raw in config.items():
            if not isinstance(key, str):
                raise ConfigError(f"topic config key {key!r} is not a string")
            if key in IGNORED_TOPIC_CONFIG_KEYS:
                continue
            spec = TOPIC_CONFIG_KEYS.get(key)
            if spec is None:
                raise ConfigError(
                    f"unknown topic config key {key!r}; known keys: "
                    f"{', '.join(sorted(TOPIC_CONFIG_KEYS))}"
                )
            values[spec.field] = spec.parse(key, raw)
        start = base if base is not None else cls()
        return dataclasses.replace(start, **values)

    def to_topic_config(self) -> dict[str, str]:
        """Kafka keys and their values as Kafka prints them (``kafka-configs --describe``)."""
        return {
            key: spec.render(getattr(self, spec.field)) for key, spec in TOPIC_CONFIG_KEYS.items()
        }


@dataclasses.dataclass(frozen=True)
class _KeySpec:
    field: str
    parse: Callable[[str, Any], Any]
    check: Callable[[str, Any], None]
    render: Callable[[Any], str] = str


def _parse_long(key: str, raw: Any) -> int:
    if isinstance(raw, bool):
        raise ConfigError(f"{key}: expected an integer, got {raw!r}")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and re.fullmatch(r"-?\d+", raw.strip()):
        return int(raw.strip())
    raise ConfigError(f"{key}: expected an integer, got {raw!r}")


def _parse_ratio(key: str, raw: Any) -> float:
    if isinstance(raw, bool):
        raise ConfigError(f"{key}: expected a number, got {raw!r}")
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: expected a number, got {raw!r}") from None


def _parse_bool(key: str, raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise ConfigError(f"{key}: expected true or false, got {raw!r}")


def _parse_policy(key: str, raw: Any) -> tuple[str, ...]:
    items: Iterable[Any]
    if isinstance(raw, str):
        items = [part.strip() for part in raw.split(",") if part.strip()]
    elif isinstance(raw, list | tuple):
        items = raw
    else:
        raise ConfigError(f"{key}: expected a list such as 'compact,delete', got {raw!r}")
    policy: list[str] = []
    for item in items:
        if item not in (CLEANUP_POLICY_DELETE, CLEANUP_POLICY_COMPACT):
            raise ConfigError(f"{key}: unknown policy {item!r} (expected delete and/or compact)")
        if item not in policy:
            policy.append(item)
    return tuple(policy)


def _parse_choice(choices: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(key: str, raw: Any) -> str:
        if not isinstance(raw, str) or raw not in choices:
            raise ConfigError(f"{key}: {raw!r} is not one of {', '.join(choices)}")
        return raw

    return parse


def _at_least(minimum: int | float, maximum: int | float = LONG_MAX) -> Callable[[str, Any], None]:
    def check(key: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        if not minimum <= value <= maximum:
            raise ConfigError(f"{key}: {value} is outside [{minimum}, {maximum}]")

    return check


def _check_choice(choices: tuple[str, ...]) -> Callable[[str, Any], None]:
    def check(key: str, value: Any) -> None:
        _parse_choice(choices)(key, value)

    return check


def _check_policy(key: str, value: Any) -> None:
    if not isinstance(value, tuple):
        raise ConfigError(f"{key}: expected a tuple of policies, got {value!r}")
    _parse_policy(key, list(value))


def _check_bool(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{key}: expected a boolean, got {value!r}")


def _long(field: str, minimum: int, maximum: int = LONG_MAX) -> _KeySpec:
    return _KeySpec(field, _parse_long, _at_least(minimum, maximum))


def _gzip_level(key: str, value: Any) -> None:
    if value != -1:
        _at_least(1, 9)(key, value)


#: Kafka topic config key → field, parser, validator (ranges as Kafka's ConfigDef, 3.x).
TOPIC_CONFIG_KEYS: Final[dict[str, _KeySpec]] = {
    "cleanup.policy": _KeySpec("cleanup_policy", _parse_policy, _check_policy, ",".join),
    "compression.type": _KeySpec(
        "compression_type", _parse_choice(COMPRESSION_TYPES), _check_choice(COMPRESSION_TYPES)
    ),
    "compression.gzip.level": _KeySpec("compression_gzip_level", _parse_long, _gzip_level),
    "compression.lz4.level": _long("compression_lz4_level", 1, 17),
    "compression.zstd.level": _long("compression_zstd_level", -131072, 22),
    "delete.retention.ms": _long("delete_retention_ms", 0),
    "file.delete.delay.ms": _long("file_delete_delay_ms", 0),
    "flush.messages": _long("flush_messages", 1),
    "flush.ms": _long("flush_ms", 0),
    "index.interval.bytes": _long("index_interval_bytes", 0, INT_MAX),
    "max.compaction.lag.ms": _long("max_compaction_lag_ms", 1),
    "max.message.bytes": _long("max_message_bytes", 0, INT_MAX),
    "message.timestamp.type": _KeySpec(
        "message_timestamp_type", _parse_choice(TIMESTAMP_TYPES), _check_choice(TIMESTAMP_TYPES)
    ),
    "message.timestamp.before.max.ms": _long("message_timestamp_before_max_ms", 0),
    "message.timestamp.after.max.ms": _long("message_timestamp_after_max_ms", 0),
    "min.cleanable.dirty.ratio": _KeySpec(
        "min_cleanable_dirty_ratio", _parse_ratio, _at_least(0.0, 1.0)
    ),
    "min.compaction.lag.ms": _long("min_compaction_lag_ms", 0),
    "preallocate": _KeySpec("preallocate", _parse_bool, _check_bool, lambda v: str(v).lower()),
    "retention.bytes": _long("retention_bytes", -1),
    "retention.ms": _long("retention_ms", -1),
    "segment.bytes": _long("segment_bytes", 14, INT_MAX),
    "segment.index.bytes": _long("segment_index_bytes", 4, INT_MAX),
    "segment.jitter.ms": _long("segment_jitter_ms", 0),
    "segment.ms": _long("segment_ms", 1),
}

#: Kafka topic keys that concern replication or the broker, not the log layer: accepted so that
#: a config copied from a Kafka cluster loads, and otherwise without effect here.
IGNORED_TOPIC_CONFIG_KEYS: Final = frozenset(
    {
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
        "message.downconversion.enable",
    }
)

assert {spec.field for spec in TOPIC_CONFIG_KEYS.values()} == {
    f.name for f in dataclasses.fields(LogConfig)
}, "every LogConfig field has exactly one Kafka key"


def parse_config_assignments(assignments: Iterable[str]) -> dict[str, str]:
    """``["retention.ms=1000", ...]`` (the CLI's ``--config``) → a mapping, naming bad items."""
    result: dict[str, str] = {}
    for item in assignments:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--config {item!r}: expected KEY=VALUE")
        result[key.strip()] = value.strip()
    return result


# -- Topic manifests ---------------------------------------------------------------------------

TOPIC_API_GROUP: Final = "logkeeper.io"
TOPIC_KIND: Final = "Topic"
DELETION_POLICIES: Final = ("Retain", "Delete")


@dataclasses.dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic as declared by a ``Topic`` resource (the CRD shape of DESIGN.md)."""

    name: str
    partitions: int
    config: LogConfig
    volume: str | None = None
    topic_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """The ``spec.config`` mapping as written (Kafka keys), kept for display and round trips."""
    deletion_policy: str = "Retain"
    """``spec.deletionPolicy``: ``Retain`` (deleting the resource keeps the data) or
    ``Delete`` (the data goes too)."""
    annotations: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """``metadata.annotations`` (the worker reads the ``logkeeper.io/`` ones)."""
    resource_name: str = ""
    """``metadata.name`` (the topic name may differ: ``spec.topicName``)."""


def topic_spec_from_manifest(
    manifest: Mapping[str, Any], *, source: str = "<manifest>"
) -> TopicSpec:
    """Parse one ``Topic`` object; errors name the source and the resource."""
    metadata = manifest.get("metadata") or {}
    resource = f"{source}: Topic {metadata.get('name', '<no name>')!r}"
    api_version = str(manifest.get("apiVersion", ""))
    if manifest.get("kind") != TOPIC_KIND or not api_version.startswith(TOPIC_API_GROUP + "/"):
        raise ConfigError(
            f"{source}: expected kind Topic of {TOPIC_API_GROUP}, got kind "
            f"{manifest.get('kind')!r} apiVersion {api_version!r}"
        )
    spec = manifest.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{resource}: spec must be a mapping")
    try:
        name = validate_topic_name(str(spec.get("topicName") or metadata.get("name") or ""))
    except ConfigError as exc:
        raise ConfigError(f"{resource}: {exc}") from None
    partitions = spec.get("partitions", 1)
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise ConfigError(
            f"{resource}: spec.partitions must be an integer >= 1, got {partitions!r}"
        )
    raw_config = spec.get("config") or {}
    if not isinstance(raw_config, Mapping):
        raise ConfigError(f"{resource}: spec.config must be a mapping of Kafka topic keys")
    try:
        config = LogConfig.from_topic_config(raw_config)
    except ConfigError as exc:
        raise ConfigError(f"{resource}: spec.config: {exc}") from None
    volume = spec.get("volume")
    deletion_policy = spec.get("deletionPolicy", "Retain")
    if deletion_policy not in DELETION_POLICIES:
        raise ConfigError(
            f"{resource}: spec.deletionPolicy must be one of {', '.join(DELETION_POLICIES)}, "
            f"got {deletion_policy!r}"
        )
    annotations = metadata.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise ConfigError(f"{resource}: metadata.annotations must be a mapping")
    return TopicSpec(
        name=name,
        partitions=partitions,
        config=config,
        volume=str(volume) if volume is not None else None,
        topic_config=dict(raw_config),
        deletion_policy=str(deletion_policy),
        annotations={str(k): str(v) for k, v in annotations.items()},
        resource_name=str(metadata.get("name") or name),
    )


def parse_topic_manifests(text: str, *, source: str = "<topics>") -> dict[str, TopicSpec]:
    """All ``Topic`` objects in a YAML stream (``---`` documents or ``kind: List``).

    Objects of other kinds (a StorageVolume in the same file) are skipped; two Topics with the
    same topic name are an error.
    """
    import yaml  # noqa: PLC0415 -- only the manifest readers (`clean --topics`, say) need it

    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    objects: list[Mapping[str, Any]] = []
    for document in documents:
        if document is None:
            continue
        if not isinstance(document, Mapping):
            raise ConfigError(f"{source}: every YAML document must be a mapping")
        if document.get("kind") == "List":
            objects.extend(
                item for item in document.get("items") or [] if isinstance(item, Mapping)
            )
        else:
            objects.append(document)
    topics: dict[str, TopicSpec] = {}
    for obj in objects:
        if obj.get("kind") != TOPIC_KIND:
            continue
        topic = topic_spec_from_manifest(obj, source=source)
        if topic.name in topics:
            raise ConfigError(f"{source}: topic {topic.name!r} is declared twice")
        topics[topic.name] = topic
    return topics


# -- the cleaner's broker-level settings ---------------------------------------------------------
MIB: Final = 1 << 20

#: ``log.cleaner.dedupe.buffer.size``: the offset maps of all cleaner threads together
#: (Kafka's default). The one default of the setting: the CRD schema (``dedupeBufferBytes``),
#: the worker's settings and ``logkeeper clean --dedupe-buffer-bytes`` take it from here, and
#: a test checks the CRD files and the chart's copy against it.
DEDUPE_BUFFER_SIZE_DEFAULT: Final = 128 * MIB
#: Kafka's floor: "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread".
#: The one minimum of the setting wherever a user sets it (the CRD schema and its CEL rule,
#: the worker's settings, ``logkeeper clean``, :meth:`CleanerConfig.from_properties`). The
#: dataclass itself takes smaller maps, down to one key per thread, for the engine's tests,
#: which force many rounds with maps of a few slots.
DEDUPE_BUFFER_SIZE_MIN_PER_THREAD: Final = MIB


def check_dedupe_buffer_size(
    size_bytes: int, threads: int, *, key: str = "log.cleaner.dedupe.buffer.size"
) -> None:
    """Reject a dedupe buffer below :data:`DEDUPE_BUFFER_SIZE_MIN_PER_THREAD` per thread;
    the error names ``key`` (the caller's name for the setting) and what to do."""
    least = DEDUPE_BUFFER_SIZE_MIN_PER_THREAD * threads
    if size_bytes < least:
        raise ConfigError(
            f"{key}: {size_bytes} bytes for {threads} cleaner thread(s) is below the minimum "
            f"of {DEDUPE_BUFFER_SIZE_MIN_PER_THREAD} bytes per thread ({least}); raise it or "
            "use fewer threads"
        )


#: Kafka broker keys of the cleaner settings → (field, type).
CLEANER_SETTINGS: Final[dict[str, tuple[str, type]]] = {
    "log.cleaner.threads": ("threads", int),
    "log.cleaner.dedupe.buffer.size": ("dedupe_buffer_size", int),
    "log.cleaner.io.buffer.load.factor": ("io_buffer_load_factor", float),
    "log.cleaner.io.buffer.size": ("io_buffer_size", int),
    "log.cleaner.backoff.ms": ("backoff_ms", int),
    "log.cleaner.io.max.bytes.per.second": ("io_max_bytes_per_second", float),
    "producer.id.expiration.ms": ("producer_id_expiration_ms", int),
}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CleanerConfig:
    """The broker-level cleaner settings (Kafka's names and defaults, ``log.cleaner.*``)."""

    threads: int = 1
    dedupe_buffer_size: int = DEDUPE_BUFFER_SIZE_DEFAULT
    """Offset map memory of all threads together, split evenly over them (see
    :attr:`map_memory_per_thread`). The CRD's ``dedupeBufferBytes``, the worker's
    ``WorkerSettings.dedupe_buffer_bytes`` and ``logkeeper clean --dedupe-buffer-bytes`` are
    this setting."""
    io_buffer_load_factor: float = 0.9
    """Fill fraction of the offset map at which a round stops mapping."""
    io_buffer_size: int = 512 * 1024
    backoff_ms: int = 15_000
    io_max_bytes_per_second: float = math.inf
    """Read and write budget shared by all cleaner threads."""
    producer_id_expiration_ms: int = 86_400_000
    """A producer silent this long no longer has its last batch kept."""

    def __post_init__(self) -> None:
        checks: list[tuple[str, bool]] = [
            ("log.cleaner.threads", self.threads >= 1),
            # The engine's floor, not the setting's minimum: each thread's map (24-byte
            # slots, Kafka's SkimpyOffsetMap) must hold a key at the load factor.
            ("log.cleaner.dedupe.buffer.size", self.dedupe_buffer_size >= 24 * self.threads * 2),
            ("log.cleaner.io.buffer.load.factor", 0 < self.io_buffer_load_factor <= 1),
            ("log.cleaner.io.buffer.size", self.io_buffer_size >= 0),
            ("log.cleaner.backoff.ms", self.backoff_ms >= 0),
            ("log.cleaner.io.max.bytes.per.second", self.io_max_bytes_per_second > 0),
            ("producer.id.expiration.ms", self.producer_id_expiration_ms >= 1),
        ]
        for key, ok in checks:
            if not ok:
                raise ConfigError(f"{key}: invalid value in {self}")

    @property
    def map_memory_per_thread(self) -> int:
        """The memory each thread's offset map is built with (Kafka: ``min(dedupe.buffer.size
        / threads, Int.MaxValue)``); the map rounds it down to whole slots."""
        return min(self.dedupe_buffer_size // self.threads, INT_MAX)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> CleanerConfig:
        """Build from Kafka's broker keys; an unknown key or a bad value names the key."""
        values: dict[str, Any] = {}
        for key, raw in properties.items():
            if key not in CLEANER_SETTINGS:
                raise ConfigError(
                    f"unknown cleaner setting {key!r}; known: {', '.join(sorted(CLEANER_SETTINGS))}"
                )
            field, kind = CLEANER_SETTINGS[key]
            try:
                values[field] = kind(raw)
            except (TypeError, ValueError):
                raise ConfigError(f"{key}: expected a number, got {raw!r}") from None
        try:
            config = cls(**values)
        except ConfigError:
            raise
        except (TypeError, ValueError) as exc:
            raise ConfigError(str(exc)) from exc
        check_dedupe_buffer_size(config.dedupe_buffer_size, config.threads)
        return config
