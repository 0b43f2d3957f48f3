"""Topics that Kafka clients create (CreateTopics), and the file that keeps them.

Kafka Streams creates its changelog and repartition topics, Kafka Connect its config, offset and
status topics, through the Admin API. A StorageVolume allows it with
``spec.clientTopicPrefixes`` (``WorkerSettings.client_topic_prefixes``): a topic whose name
starts with one of the prefixes may be created, grown, reconfigured and deleted by clients;
without the field (or with an empty list) every such call is refused.

Ownership (DESIGN "Topic ownership"): a topic a ``Topic`` resource declares is owned by the
resource, whatever the Admin API asks; a client topic is owned by this store until a ``Topic``
resource of the same name appears, which *adopts* it: the store forgets it, the logs stay, and
the resource's spec is in force from then on (:meth:`ClientTopicStore.adopt`).

The store is one JSON file in the first data directory (:data:`CLIENT_TOPICS_FILE`), replaced
atomically (``storagecore.durability.write_atomically``) before a change is acknowledged, so
that a restart, clean or not, serves the same client topics. A file that cannot be read or
parsed is never overwritten: the store reports the error (status) and refuses changes, and the
logs of its topics stay on disk, reported as orphaned, until the file is repaired.

Used by :class:`storageworker.worker.Worker`; no Kafka protocol here (the Kafka port's
handlers are :mod:`storageworker.kafka.admin_topics`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from storagecore import durability
from storagecore.config import LogConfig, TopicSpec, validate_topic_name
from storagecore.errors import ConfigError

logger = logging.getLogger(__name__)

#: The store's file name inside the first data directory (beside Kafka's checkpoints; the log
#: loader only looks at directories).
CLIENT_TOPICS_FILE: Final = "logkeeper-client-topics.json"
FORMAT_VERSION: Final = 1
#: A limit on everything: more client topics than this on one volume is refused.
CLIENT_TOPICS_MAX: Final = 10_000
#: The most partitions one client topic may have (Kafka has no hard limit; a volume is one
#: worker, and every partition is a directory with open files).
PARTITIONS_MAX: Final = 10_000


class TopicAdminError(Exception):
    """A refused Admin API call; ``kind`` says which Kafka error it becomes."""

    kind = "invalid_request"


class TopicExistsError(TopicAdminError):
    kind = "topic_exists"


class InvalidTopicError(TopicAdminError):
    kind = "invalid_topic"


class PolicyViolationError(TopicAdminError):
    kind = "policy_violation"


class InvalidPartitionsError(TopicAdminError):
    kind = "invalid_partitions"


class InvalidConfigError(TopicAdminError):
    kind = "invalid_config"


class UnknownTopicError(TopicAdminError):
    kind = "unknown_topic"


class StoreUnavailableError(TopicAdminError):
    """The store's file could not be read: no change until it is repaired."""

    kind = "store_unavailable"


@dataclasses.dataclass(frozen=True, slots=True)
class ClientTopic:
    """One client topic: its partitions and the Kafka config keys the client set."""

    name: str
    partitions: int
    config: Mapping[str, str]
    created_ms: int

    def spec(self) -> TopicSpec:
        # The keys were checked when they were set; a store edited by hand with a bad key is
        # refused when loaded (ConfigError naming the file and the topic).
        return TopicSpec(
            name=self.name,
            partitions=self.partitions,
            config=LogConfig.from_topic_config(self.config),
            topic_config=dict(self.config),
            deletion_policy="Retain",  # a client topic's logs go only with DeleteTopics
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "partitions": self.partitions,
            "config": dict(sorted(self.config.items())),
            "createdMs": self.created_ms,
        }


def allowed(name: str, prefixes: Sequence[str]) -> bool:
    """Whether a client may create or change topic ``name`` under ``prefixes``."""
    return any(name.startswith(prefix) for prefix in prefixes)


def policy_refusal(name: str, prefixes: Sequence[str]) -> str:
    if not prefixes:
        return (
            f"topic {name!r}: this volume does not allow clients to create or change topics "
            "(StorageVolume spec.clientTopicPrefixes is not set); declare it with a Topic "
            "resource or add a prefix of the name"
        )
    return (
        f"topic {name!r}: the StorageVolume allows client topics only with the prefixes "
        f"{', '.join(repr(p) for p in prefixes)} (spec.clientTopicPrefixes)"
    )


def check_config(topic: str, config: Mapping[str, str]) -> LogConfig:
    """Kafka's validation of a topic config: InvalidConfigError naming the key."""
    try:
        return LogConfig.from_topic_config(config)
    except ConfigError as exc:
        raise InvalidConfigError(f"topic {topic!r}: {exc}") from None


def check_name(name: str) -> None:
    try:
        validate_topic_name(name)
    except ConfigError as exc:
        raise InvalidTopicError(str(exc)) from None


class ClientTopicStore:
    """The client topics of one volume, kept in :data:`CLIENT_TOPICS_FILE`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._topics: dict[str, ClientTopic] = {}
        #: Why the file could not be loaded (None: loaded, or absent).
        self.error: str | None = None
        self.loaded = False

    # -- reading -------------------------------------------------------------------------------
    def load(self) -> None:
        """Read the file (absent: no client topics). A bad file sets :attr:`error`."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            self._topics, self.error, self.loaded = {}, None, True
            return
        except (OSError, UnicodeDecodeError) as exc:
            self._fail(f"{self.path}: cannot read the client topics: {exc}")
            return
        try:
            self._topics = _parse(text, str(self.path))
        except ConfigError as exc:
            self._fail(str(exc))
            return
        self.error, self.loaded = None, True
        logger.info("Loaded %d client topics from %s", len(self._topics), self.path)

    def _fail(self, message: str) -> None:
        self._topics, self.error, self.loaded = {}, message, False
        logger.error(
            "Client topics not loaded, the file is kept as it is and no client topic can be "
            "created, changed or deleted until it is repaired: %s",
            message,
        )

    def topics(self) -> dict[str, ClientTopic]:
        with self._lock:
            return dict(self._topics)

    def get(self, name: str) -> ClientTopic | None:
        with self._lock:
            return self._topics.get(name)

    # -- changing ------------------------------------------------------------------------------
    def put(self, topic: ClientTopic) -> None:
        """Add or replace ``topic`` and persist the store before returning."""
        with self._lock:
            self._writable()
            if topic.name not in self._topics and len(self._topics) >= CLIENT_TOPICS_MAX:
                raise PolicyViolationError(
                    f"topic {topic.name!r}: this volume holds {CLIENT_TOPICS_MAX} client "
                    "topics already"
                )
            topics = {**self._topics, topic.name: topic}
            self._write(topics)
            self._topics = topics

    def remove(self, name: str) -> ClientTopic | None:
        """Forget ``name`` (persisted); the topic it was, or None."""
        with self._lock:
            self._writable()
            if name not in self._topics:
                return None
            topics = dict(self._topics)
            gone = topics.pop(name)
            self._write(topics)
            self._topics = topics
            return gone

    def adopt(self, declared: Mapping[str, TopicSpec]) -> list[tuple[ClientTopic, TopicSpec]]:
        """Forget the client topics that ``declared`` (the Topic resources) now holds: each is
        the resource's from now on. Returns what was adopted."""
        with self._lock:
            taken = [
                (topic, declared[name])
                for name, topic in self._topics.items()
                if name in declared and self.loaded
            ]
            if not taken:
                return []
            topics = {n: t for n, t in self._topics.items() if n not in declared}
            self._write(topics)
            self._topics = topics
        for topic, spec in taken:
            logger.info(
                "Client topic %s adopted by Topic resource %s: its spec is in force now",
                topic.name,
                spec.resource_name or spec.name,
            )
        return taken

    def _writable(self) -> None:
        if not self.loaded:
            raise StoreUnavailableError(
                self.error or f"{self.path}: the client topics are not loaded"
            )

    def _write(self, topics: Mapping[str, ClientTopic]) -> None:
        document = {
            "version": FORMAT_VERSION,
            "topics": [topics[name].as_json() for name in sorted(topics)],
        }
        durability.write_atomically(
            self.path, (json.dumps(document, indent=1) + "\n").encode("utf-8")
        )


def _parse(text: str, source: str) -> dict[str, ClientTopic]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{source}: not valid JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("version") != FORMAT_VERSION:
        raise ConfigError(f"{source}: expected an object with version {FORMAT_VERSION}")
    entries = document.get("topics")
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: 'topics' must be a list")
    topics: dict[str, ClientTopic] = {}
    for index, entry in enumerate(entries):
        where = f"{source}: topics[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected an object")
        name, partitions = entry.get("name"), entry.get("partitions")
        config, created = entry.get("config", {}), entry.get("createdMs", 0)
        if not isinstance(name, str):
            raise ConfigError(f"{where}: 'name' must be a string")
        try:
            validate_topic_name(name)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if name in topics:
            raise ConfigError(f"{where}: topic {name!r} appears twice")
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ConfigError(f"{where} ({name}): 'partitions' must be an integer >= 1")
        if not isinstance(config, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in config.items()
        ):
            raise ConfigError(f"{where} ({name}): 'config' must map strings to strings")
        if isinstance(created, bool) or not isinstance(created, int):
            raise ConfigError(f"{where} ({name}): 'createdMs' must be an integer")
        try:
            LogConfig.from_topic_config(config)
        except ConfigError as exc:
            raise ConfigError(f"{where} ({name}): {exc}") from None
        topics[name] = ClientTopic(name, partitions, dict(config), created)
    return topics
