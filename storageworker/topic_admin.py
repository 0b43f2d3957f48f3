"""The Admin API's topic verbs on a worker: create, grow, reconfigure and delete client topics.

Kafka's controller checks, in its order: the name (InvalidTopicError), that the topic does not
exist (TopicExistsError), the partition count (InvalidPartitionsError), the config
(InvalidConfigError, naming the key), then the policy (PolicyViolationError): here the
StorageVolume's ``clientTopicPrefixes`` and ownership. A topic that a Topic resource declares is
the resource's: the Admin API may not change or delete it, and the refusal names the resource.
The worker's internal topics (``__consumer_offsets``) are the worker's.

A change is persisted in the client topic store (:mod:`storageworker.client_topics`) before
the logs follow it, so a crash in between is finished by the next start (the store is the
truth; the topic set applies it). Deleting a topic renames its partition directories to
``-delete`` through the cleaner (Kafka's asynchronous delete) after the store forgot it; a crash
in between leaves those logs orphaned (reported, nothing deleted), and a create of the same
name is then refused until a Topic resource adopts them or they are removed. A topic is never
created, or grown, over logs already on the volume: old data would reappear under a new topic.

Blocking calls: the Kafka port runs them in a worker thread. Kafka's wire details
(replication factors, replica assignments) are checked by
:mod:`storageworker.kafka.admin_topics`, which calls this module.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from storagecore.config import LogConfig, TopicPartition, TopicSpec
from storagecore.errors import StorageError
from storageworker.client_topics import (
    PARTITIONS_MAX,
    ClientTopic,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    PolicyViolationError,
    TopicExistsError,
    UnknownTopicError,
    allowed,
    check_config,
    check_name,
    policy_refusal,
)
from storageworker.worker import Worker

logger = logging.getLogger(__name__)

#: IncrementalAlterConfigs operations (Kafka's ``AlterConfigOp.OpType`` ids).
OP_SET: Final = 0
OP_DELETE: Final = 1
OP_APPEND: Final = 2
OP_SUBTRACT: Final = 3
#: Keys whose value is a list, the only ones APPEND and SUBTRACT apply to (Kafka's LIST type).
LIST_KEYS: Final = frozenset(
    {
        "cleanup.policy",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    }
)


class TopicAdmin:
    """The worker's topic verbs; one change at a time."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._lock = threading.Lock()

    # -- who owns what -------------------------------------------------------------------------
    def owner(self, name: str) -> str | None:
        """Who owns ``name`` when it is not a client topic: a sentence naming the resource."""
        worker = self.worker
        if name in worker.internal_topics:
            return f"topic {name!r} is internal to the worker (Kafka port)"
        spec = worker.declared.get(name)
        if spec is not None:
            return f"topic {name!r} is owned by Topic resource {spec.resource_name or name!r}"
        return None

    def _client_topic(self, name: str, verb: str) -> ClientTopic:
        """The client topic ``name`` that the policy lets a client ``verb``."""
        owner = self.owner(name)
        if owner is not None:
            raise PolicyViolationError(
                f"{owner}: it cannot be {verb} through the Admin API; change the resource"
            )
        topic = self.worker.client_topics.get(name)
        if topic is None:
            raise UnknownTopicError(f"topic {name!r} is not on this worker")
        prefixes = self.worker.settings.client_topic_prefixes
        if not allowed(name, prefixes):
            raise PolicyViolationError(policy_refusal(name, prefixes))
        return topic

    # -- CreateTopics --------------------------------------------------------------------------
    def create(
        self,
        name: str,
        partitions: int,
        config: Mapping[str, str],
        *,
        validate_only: bool = False,
        placement: Callable[[], None] = lambda: None,
    ) -> tuple[ClientTopic, LogConfig]:
        """Create client topic ``name`` (or only check that it could be). ``placement`` checks
        the replicas asked for (the Kafka port's part), after the partition count."""
        worker = self.worker
        with self._lock:
            check_name(name)
            if name in worker.topics:
                owner = self.owner(name)
                raise TopicExistsError(
                    f"Topic '{name}' already exists." + (f" ({owner})" if owner else "")
                )
            leftover = self._existing_logs(name, 0)
            if leftover:
                raise TopicExistsError(
                    f"Topic '{name}' already exists on this volume as orphaned logs "
                    f"({', '.join(leftover)}): a Topic resource of that name adopts them; or "
                    "delete them before creating the topic anew"
                )
            collision = _collision(name, worker.topics)
            if collision is not None:
                raise InvalidTopicError(
                    f"Topic '{name}' collides with existing topic: {collision} (a period and "
                    "an underscore are the same character in Kafka's metric names)"
                )
            if partitions < 1:
                raise InvalidPartitionsError(
                    "Number of partitions was set to an invalid non-positive value."
                )
            if partitions > PARTITIONS_MAX:
                raise InvalidPartitionsError(
                    f"topic {name!r}: {partitions} partitions, at most {PARTITIONS_MAX} here"
                )
            placement()
            log_config = check_config(name, config)
            prefixes = worker.settings.client_topic_prefixes
            if not allowed(name, prefixes):
                raise PolicyViolationError(policy_refusal(name, prefixes))
            topic = ClientTopic(name, partitions, dict(config), worker.clock.milliseconds())
            if validate_only:
                return topic, log_config
            worker.client_topics.put(topic)
            logger.info(
                "Client topic %s created: %d partitions, config %s", name, partitions, config
            )
            worker.refresh_client_topics()
            self._check_logs(name, partitions)
            return topic, log_config

    def _existing_logs(self, name: str, first_partition: int) -> list[str]:
        """The logs of ``name`` from ``first_partition`` on that are already on the volume."""
        manager = self.worker.log_manager
        assert manager is not None, "worker not started"
        return sorted(
            str(tp) for tp in manager.logs if tp.topic == name and tp.partition >= first_partition
        )

    def _check_logs(self, name: str, partitions: int) -> None:
        manager = self.worker.log_manager
        assert manager is not None, "worker not started"
        missing = [p for p in range(partitions) if TopicPartition(name, p) not in manager.logs]
        if missing:
            # The store holds the topic: the reload task retries the logs (see the log for why
            # they failed, e.g. an offline data directory).
            raise StorageError(
                f"topic {name!r} is recorded but partitions {missing} could not be created yet"
            )

    # -- CreatePartitions ----------------------------------------------------------------------
    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        with self._lock:
            topic = self._client_topic(name, "given partitions")
            if count < topic.partitions:
                raise InvalidPartitionsError(
                    f"Topic currently has {topic.partitions} partitions, which is higher than "
                    f"the requested {count}."
                )
            if count == topic.partitions:
                raise InvalidPartitionsError(f"Topic already has {topic.partitions} partitions.")
            if count > PARTITIONS_MAX:
                raise InvalidPartitionsError(
                    f"topic {name!r}: {count} partitions, at most {PARTITIONS_MAX} here"
                )
            leftover = self._existing_logs(name, topic.partitions)
            if leftover:
                raise InvalidPartitionsError(
                    f"topic {name!r}: partitions {', '.join(leftover)} are on the volume already "
                    "(undeclared logs): remove them before growing the topic over them"
                )
            if validate_only:
                return
            grown = ClientTopic(name, count, topic.config, topic.created_ms)
            self.worker.client_topics.put(grown)
            logger.info("Client topic %s grown: %d -> %d partitions", name, topic.partitions, count)
            self.worker.refresh_client_topics()
            self._check_logs(name, count)

    # -- IncrementalAlterConfigs ---------------------------------------------------------------
    def alter_config(
        self,
        name: str,
        operations: Sequence[tuple[str, int, str | None]],
        *,
        validate_only: bool = False,
    ) -> None:
        """Apply (key, operation, value) triples, Kafka's rules, all or none."""
        with self._lock:
            if name not in self.worker.topics:
                raise UnknownTopicError(f"topic {name!r} is not on this worker")
            topic = self._client_topic(name, "reconfigured")
            config = dict(topic.config)
            seen: set[str] = set()
            for key, operation, value in operations:
                if key in seen:
                    raise InvalidConfigError(f"Duplicate config key {key!r} in the request")
                seen.add(key)
                _apply(config, key, operation, value, name)
            check_config(name, config)
            if validate_only:
                return
            self.worker.client_topics.put(
                ClientTopic(name, topic.partitions, config, topic.created_ms)
            )
            logger.info("Client topic %s reconfigured: %s", name, config)
            self.worker.refresh_client_topics()

    # -- DeleteTopics --------------------------------------------------------------------------
    def delete(self, name: str) -> None:
        worker = self.worker
        with self._lock:
            self._client_topic(name, "deleted")
            worker.client_topics.remove(name)
            worker.refresh_client_topics()
            manager, cleaner = worker.started_parts()
            for tp in sorted(tp for tp in manager.logs if tp.topic == name):
                cleaner.delete_log(tp)
            logger.info("Client topic %s deleted", name)


def _collision(name: str, topics: Mapping[str, TopicSpec]) -> str | None:
    folded = name.replace(".", "_")
    for other in topics:
        if other != name and other.replace(".", "_") == folded:
            return other
    return None


def _apply(config: dict[str, str], key: str, operation: int, value: str | None, topic: str) -> None:
    if operation == OP_DELETE:
        config.pop(key, None)
        return
    if operation not in (OP_SET, OP_APPEND, OP_SUBTRACT):
        raise InvalidConfigError(f"topic {topic!r}: unknown config operation {operation} on {key}")
    if value is None:
        raise InvalidConfigError(f"topic {topic!r}: Null value not supported for : {key}")
    if operation == OP_SET:
        config[key] = value
        return
    if key not in LIST_KEYS:
        verb = "append" if operation == OP_APPEND else "subtract"
        raise InvalidConfigError(f"Config value {verb} is not allowed for config key: {key}")
    current = [item for item in config.get(key, _default_text(key)).split(",") if item.strip()]
    items = [item.strip() for item in value.split(",") if item.strip()]
    if operation == OP_APPEND:
        current += [item for item in items if item not in current]
    else:
        current = [item for item in current if item not in items]
    config[key] = ",".join(current)


def _default_text(key: str) -> str:
    return LogConfig().to_topic_config().get(key, "")
