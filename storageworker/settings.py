"""Volume settings: the worker's part of a ``StorageVolume`` spec, from one YAML file.

The file holds either a whole ``StorageVolume`` manifest (its ``spec`` is read and its
``metadata.annotations`` are the volume-wide controls) or the spec mapping alone::

    cleaner:
      threads: 1                    # log.cleaner.threads
      dedupeBufferBytes: 134217728  # log.cleaner.dedupe.buffer.size (split over the threads)
      ioMaxBytesPerSecond: 10485760 # log.cleaner.io.max.bytes.per.second (default: no limit)
      backoffMs: 15000              # log.cleaner.backoff.ms
    retentionCheckIntervalMs: 300000  # log.retention.check.interval.ms
    maxOpenFiles: 8192            # segment files open at once (default: half the soft limit)
    compactionWindows:
      timeZone: Europe/Paris
      windows: ["22:00-06:00"]
    clientTopicPrefixes: ["wordcount-", "connect-"]  # topics Kafka clients may create
    worker:
      flushCheckIntervalMs: 1000
      ...

Names: a ``WorkerSettings`` field is the snake_case of its key (``cleaner.dedupeBufferBytes``
→ ``dedupe_buffer_bytes``, the CRD's name, units last); :meth:`WorkerSettings.cleaner_config`
hands the cleaner keys to ``CleanerConfig``, whose fields copy Kafka's keys
(``log.cleaner.dedupe.buffer.size`` → ``dedupe_buffer_size``). Defaults and minimums come
from storagecore.config.

Unknown keys are errors that name the key; keys that only the operator uses (``size``,
``storageClassName``, ``image``, ``resources``, ``monitoring``, ``kafka``: who may connect, a
NetworkPolicy the operator renders) are accepted and ignored.
Parsing is pure.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any, Final

import yaml

from storagecore.config import (
    DEDUPE_BUFFER_SIZE_DEFAULT,
    DEDUPE_BUFFER_SIZE_MIN_PER_THREAD,
    MAX_TOPIC_NAME_LENGTH,
    CleanerConfig,
    check_dedupe_buffer_size,
)
from storagecore.errors import ConfigError
from storagecore.file_cache import MAX_OPEN_FILES_MIN
from storageworker.windows import CompactionWindows

OPERATOR_ONLY_KEYS: Final = frozenset(
    {"size", "storageClassName", "image", "resources", "monitoring", "kafka"}
)


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerSettings:
    """Everything a worker is told about its volume besides the topics."""

    cleaner_threads: int = 1
    """``cleaner.threads``: log.cleaner.threads."""
    dedupe_buffer_bytes: int = DEDUPE_BUFFER_SIZE_DEFAULT
    """``cleaner.dedupeBufferBytes``: log.cleaner.dedupe.buffer.size, the offset map memory of
    all cleaner threads together (``CleanerConfig.dedupe_buffer_size``); at least
    ``DEDUPE_BUFFER_SIZE_MIN_PER_THREAD`` per thread."""
    io_max_bytes_per_second: float = math.inf
    """``cleaner.ioMaxBytesPerSecond``: read + write rate of all cleaner threads together."""
    backoff_ms: int = 15_000
    """``cleaner.backoffMs``: a cleaner thread's sleep when nothing was cleanable."""
    retention_check_interval_ms: int = 300_000
    """``retentionCheckIntervalMs``: how often retention runs (Kafka's default: 5 minutes)."""
    compaction_windows: CompactionWindows = dataclasses.field(default_factory=CompactionWindows)
    """``compactionWindows``: when the cleaner may start new work (default: always)."""
    compaction_lag_lead_ms: int = 300_000
    """``compactionLagLeadMs``: outside the windows, a log is still cleaned when its
    ``max.compaction.lag.ms`` would be breached within this time."""
    flush_check_interval_ms: int = 1_000
    """``worker.flushCheckIntervalMs``: how often logs past their ``flush.ms`` are flushed."""
    checkpoint_interval_ms: int = 60_000
    """``worker.checkpointIntervalMs``: recovery-point and log-start-offset checkpoints."""
    delete_check_interval_ms: int = 1_000
    """``worker.deleteCheckIntervalMs``: physical deletes of ``.deleted`` files and ``-delete``
    directories whose ``file.delete.delay.ms`` passed."""
    config_reload_interval_ms: int = 2_000
    """``worker.configReloadIntervalMs``: how often the topic files and this file are re-read."""
    shutdown_grace_period_ms: int = 25_000
    """``worker.shutdownGracePeriodMs``: SIGTERM to exit, at most (keep below the pod's)."""
    admin_token_file: str | None = None
    """``worker.adminTokenFile``: bearer token for the admin API (without one, admin calls
    are accepted from loopback only)."""
    log_format: str = "plain"
    """``worker.logFormat``: ``plain`` or ``json``."""
    min_free_bytes: int | None = None
    """``minFreeBytes``: below this many free bytes in a data directory, produce requests are
    refused (retriable KAFKA_STORAGE_ERROR) before the disk fills; None: the smaller of 5% of
    the filesystem and 512 MiB (:func:`storagecore.disk_space.default_floor`)."""

    client_topic_prefixes: tuple[str, ...] = ()
    """``clientTopicPrefixes``: Kafka clients may create, grow, reconfigure and delete topics
    whose names start with one of these (CreateTopics, CreatePartitions,
    IncrementalAlterConfigs, DeleteTopics; :mod:`storageworker.client_topics`). Empty (the
    default): off, every such call is refused with POLICY_VIOLATION. ``""`` allows any name."""
    max_open_files: int | None = None
    """``maxOpenFiles``: at most this many segment files open at once (the ``.log``,
    ``.index`` and ``.timeindex`` of the active and recently used segments; the others are
    opened on use: storagecore.file_cache); None: half the process's soft open-files limit,
    at most 16,384. Client connections, checkpoints and the cleaner's mappings come on top."""

    def cleaner_config(self) -> CleanerConfig:
        return CleanerConfig(
            threads=self.cleaner_threads,
            dedupe_buffer_size=self.dedupe_buffer_bytes,
            io_max_bytes_per_second=self.io_max_bytes_per_second,
            backoff_ms=self.backoff_ms,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class VolumeSettings:
    settings: WorkerSettings
    annotations: Mapping[str, str]
    """The StorageVolume's annotations (volume-wide controls); empty for a bare spec."""


# (section, key) -> (field, kind, minimum)
_FIELDS: Final[dict[tuple[str | None, str], tuple[str, type, float]]] = {
    ("cleaner", "threads"): ("cleaner_threads", int, 1),
    ("cleaner", "dedupeBufferBytes"): (
        "dedupe_buffer_bytes",
        int,
        DEDUPE_BUFFER_SIZE_MIN_PER_THREAD,
    ),
    ("cleaner", "ioMaxBytesPerSecond"): ("io_max_bytes_per_second", float, 1),
    ("cleaner", "backoffMs"): ("backoff_ms", int, 0),
    (None, "retentionCheckIntervalMs"): ("retention_check_interval_ms", int, 1),
    (None, "compactionLagLeadMs"): ("compaction_lag_lead_ms", int, 0),
    (None, "minFreeBytes"): ("min_free_bytes", int, 0),
    (None, "maxOpenFiles"): ("max_open_files", int, MAX_OPEN_FILES_MIN),
    ("worker", "flushCheckIntervalMs"): ("flush_check_interval_ms", int, 1),
    ("worker", "checkpointIntervalMs"): ("checkpoint_interval_ms", int, 1),
    ("worker", "deleteCheckIntervalMs"): ("delete_check_interval_ms", int, 1),
    ("worker", "configReloadIntervalMs"): ("config_reload_interval_ms", int, 1),
    ("worker", "shutdownGracePeriodMs"): ("shutdown_grace_period_ms", int, 0),
    ("worker", "adminTokenFile"): ("admin_token_file", str, 0),
    ("worker", "logFormat"): ("log_format", str, 0),
}
_SECTIONS: Final = {"cleaner", "worker"}


def _number(value: Any, kind: type, minimum: float, where: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    if kind is int and (not isinstance(value, int) and not float(value).is_integer()):
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{where}: must be at least {minimum:g}, got {value!r}")
    return kind(value)


def parse_settings(data: Any, *, source: str = "<settings>") -> VolumeSettings:
    """Settings from the loaded YAML document; errors name the source and the key."""
    if data is None:
        return VolumeSettings(WorkerSettings(), {})
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping (a StorageVolume or its spec)")
    annotations: Mapping[str, str] = {}
    spec: Any = data
    if "kind" in data:
        if data.get("kind") != "StorageVolume":
            raise ConfigError(f"{source}: expected kind StorageVolume, got {data.get('kind')!r}")
        metadata = data.get("metadata") or {}
        raw = metadata.get("annotations") or {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{source}: metadata.annotations must be a mapping")
        annotations = {str(k): str(v) for k, v in raw.items()}
        spec = data.get("spec") or {}
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{source}: spec must be a mapping")
    values: dict[str, Any] = {}
    for key, value in spec.items():
        if key in OPERATOR_ONLY_KEYS:
            continue
        if key == "compactionWindows":
            values["compaction_windows"] = _windows(value, f"{source}: compactionWindows")
            continue
        if key == "clientTopicPrefixes":
            values["client_topic_prefixes"] = _prefixes(value, f"{source}: clientTopicPrefixes")
            continue
        if key in _SECTIONS:
            if not isinstance(value, Mapping):
                raise ConfigError(f"{source}: {key} must be a mapping")
            for sub, sub_value in value.items():
                _set(values, (key, str(sub)), sub_value, f"{source}: {key}.{sub}")
            continue
        _set(values, (None, str(key)), value, f"{source}: {key}")
    settings = WorkerSettings(**values)
    if settings.log_format not in ("plain", "json"):
        raise ConfigError(
            f"{source}: worker.logFormat must be plain or json, got {settings.log_format!r}"
        )
    check_dedupe_buffer_size(
        settings.dedupe_buffer_bytes,
        settings.cleaner_threads,
        key=f"{source}: cleaner.dedupeBufferBytes",
    )
    # Settings the cleaner cannot take are refused here, with the rest of the file: what the
    # worker reports as in force is then what its cleaner runs with.
    try:
        settings.cleaner_config()
    except ConfigError as exc:
        raise ConfigError(f"{source}: cleaner: {exc}") from None
    return VolumeSettings(settings, annotations)


def _set(values: dict[str, Any], key: tuple[str | None, str], value: Any, where: str) -> None:
    entry = _FIELDS.get(key)
    if entry is None:
        known = [
            *sorted(f"{s}.{k}" if s else k for s, k in _FIELDS),
            "compactionWindows",
            "clientTopicPrefixes",
        ]
        raise ConfigError(f"{where}: unknown setting (known: {', '.join(known)})")
    field, kind, minimum = entry
    if kind is str:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
        values[field] = value
    else:
        values[field] = _number(value, kind, minimum, where)


def _prefixes(value: Any, where: str) -> tuple[str, ...]:
    """A list of topic-name prefixes: Kafka's topic name characters only, at most 249."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        raise ConfigError(f'{where}: expected a list of name prefixes, e.g. ["wordcount-"]')
    for prefix in value:
        if len(prefix) > MAX_TOPIC_NAME_LENGTH or not _PREFIX_RE.match(prefix):
            raise ConfigError(
                f"{where}: prefix {prefix!r} is not the start of a valid topic name "
                f"([a-zA-Z0-9._-], at most {MAX_TOPIC_NAME_LENGTH} characters)"
            )
    return tuple(dict.fromkeys(value))


_PREFIX_RE: Final = re.compile(r"^[a-zA-Z0-9._-]*$")


def _windows(value: Any, where: str) -> CompactionWindows:
    if value is None:
        return CompactionWindows()
    if not isinstance(value, Mapping):
        raise ConfigError(f'{where}: expected {{timeZone: ..., windows: ["22:00-06:00"]}}')
    unknown = set(value) - {"timeZone", "windows"}
    if unknown:
        raise ConfigError(f"{where}: unknown key {sorted(unknown)[0]!r} (timeZone, windows)")
    windows = value.get("windows") or []
    if not isinstance(windows, list):
        raise ConfigError(f"{where}.windows: expected a list of strings")
    try:
        return CompactionWindows.parse([str(w) for w in windows], str(value.get("timeZone", "UTC")))
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def load_settings(text: str, *, source: str) -> VolumeSettings:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    return parse_settings(data, source=source)
