"""The Admin API's topic calls on the ``kafka`` port: decoded requests in, responses out.

=======================  ===  ========  ====================================================
API                      key  versions  notes
=======================  ===  ========  ====================================================
CreateTopics             19   2-7       client topics where the StorageVolume allows them
DeleteTopics             20   1-6       by name (topic ids: UNKNOWN_TOPIC_ID)
CreatePartitions         37   0-3       grows a client topic
IncrementalAlterConfigs  44   0-1       topic resources; SET, DELETE, APPEND, SUBTRACT
=======================  ===  ========  ====================================================

The verbs and their rules are :class:`storageworker.topic_admin.TopicAdmin`'s; this module
checks what only Kafka's wire knows (replication factors and replica assignments on a
one-broker cluster, duplicate names in a request, null config values) and turns each refusal
into Kafka's error code with a message naming the topic, the key or the resource. The codes
and messages follow Kafka 4's controller (``ReplicationControlManager``,
``ConfigurationControlManager``), so the Java admin client raises the same exception classes
against the worker as against a broker.

Blocking: the caller runs these in a worker thread.
"""

from __future__ import annotations

import enum
import functools
import logging
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from storagecore.errors import StorageError
from storageworker.client_topics import TopicAdminError
from storageworker.kafka import apis, topic_configs
from storageworker.topic_admin import TopicAdmin

logger = logging.getLogger(__name__)


#: CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs.
API_KEYS: Final = frozenset({19, 20, 37, 44})


def handle(request: apis.Request, admin: TopicAdmin, node_id: int) -> dict[str, Any]:
    """The response to one of :data:`API_KEYS`'s requests."""
    data = request.data
    if request.api_key == 19:
        return create_topics(data, admin, node_id)
    if request.api_key == 20:
        return delete_topics(data, request.version, admin)
    if request.api_key == 37:
        return create_partitions(data, admin, node_id)
    assert request.api_key == 44, request.api_key
    return incremental_alter_configs(data, admin)


class AdminErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_TOPIC_EXCEPTION = 17
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_TOPIC_ID = 100


_BY_KIND: Final = {
    "topic_exists": AdminErrorCode.TOPIC_ALREADY_EXISTS,
    "invalid_topic": AdminErrorCode.INVALID_TOPIC_EXCEPTION,
    "policy_violation": AdminErrorCode.POLICY_VIOLATION,
    "invalid_partitions": AdminErrorCode.INVALID_PARTITIONS,
    "invalid_config": AdminErrorCode.INVALID_CONFIG,
    "unknown_topic": AdminErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    "store_unavailable": AdminErrorCode.KAFKA_STORAGE_ERROR,
    "invalid_request": AdminErrorCode.INVALID_REQUEST,
}
RESOURCE_TOPIC: Final = 2
CONFIG_SOURCE_DYNAMIC_TOPIC: Final = 1
CONFIG_SOURCE_DEFAULT: Final = 5
ZERO_UUID: Final = uuid.UUID(int=0)


class _RefusedError(Exception):
    def __init__(self, code: AdminErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _outcome(call: Callable[[], Any]) -> tuple[AdminErrorCode, str | None, Any]:
    """Run ``call``; (code, message, result) with every refusal as its Kafka code."""
    try:
        return AdminErrorCode.NONE, None, call()
    except _RefusedError as exc:
        return exc.code, str(exc), None
    except TopicAdminError as exc:
        return _BY_KIND[exc.kind], str(exc), None
    except StorageError as exc:
        logger.error("Admin call failed on storage: %s", exc)
        return AdminErrorCode.KAFKA_STORAGE_ERROR, str(exc), None
    except OSError as exc:  # the store's file could not be written: nothing changed
        logger.error("Admin call failed writing the client topics: %s", exc)
        return AdminErrorCode.KAFKA_STORAGE_ERROR, f"cannot persist the change: {exc}", None


# -- CreateTopics ----------------------------------------------------------------------------


def _placement(topic: dict[str, Any], node_id: int) -> tuple[int, Callable[[], None]]:
    """The partition count asked for, and the check of its replication (Kafka's order: after
    the existence and partition-count checks)."""
    assignments = topic["assignments"]
    partitions, factor = topic["num_partitions"], topic["replication_factor"]
    if assignments:
        if partitions != -1 or factor != -1:
            what = "numPartitions" if partitions != -1 else "replicationFactor"
            raise _RefusedError(
                AdminErrorCode.INVALID_REQUEST,
                f"A manual partition assignment was specified, but {what} was not set to -1.",
            )
        indexes = sorted(a["partition_index"] for a in assignments)
        if indexes != list(range(len(indexes))):
            raise _RefusedError(
                AdminErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Partitions should be a consecutive 0-based integer sequence, got {indexes}",
            )

        def check_assignment() -> None:
            for assignment in assignments:
                brokers = assignment["broker_ids"]
                if not brokers:
                    raise _RefusedError(
                        AdminErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Partition {assignment['partition_index']} has no replicas.",
                    )
                for broker in brokers:
                    if broker != node_id:
                        raise _RefusedError(
                            AdminErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            f"The manual partition assignment includes broker {broker}, but "
                            "no such broker is registered.",
                        )
                if len(brokers) != len(set(brokers)):
                    raise _RefusedError(
                        AdminErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes the broker {node_id} more "
                        "than once.",
                    )

        return len(indexes), check_assignment
    count = 1 if partitions == -1 else partitions

    def check_factor() -> None:
        if factor in (-1, 1):
            return
        if factor <= 0:
            raise _RefusedError(
                AdminErrorCode.INVALID_REPLICATION_FACTOR,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        raise _RefusedError(
            AdminErrorCode.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {factor} time(s): The target replication "
            f"factor of {factor} cannot be reached because only 1 broker(s) are registered.",
        )

    return count, check_factor


def create_topics(request_data: dict[str, Any], admin: TopicAdmin, node_id: int) -> dict[str, Any]:
    validate_only = request_data["validate_only"]
    counts = Counter(t["name"] for t in request_data["topics"])
    results = []
    for topic in request_data["topics"]:
        name = topic["name"]
        answer: dict[str, Any] = {
            "name": name,
            "topic_id": ZERO_UUID,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": [],
        }
        results.append(answer)

        def create(topic: dict[str, Any] = topic, name: str = name) -> Any:
            if counts[name] > 1:
                raise _RefusedError(AdminErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            config: dict[str, str] = {}
            for item in topic["configs"]:
                if item["value"] is None:
                    raise _RefusedError(
                        AdminErrorCode.INVALID_CONFIG,
                        f"Null value not supported for topic configs: {item['name']}",
                    )
                config[item["name"]] = item["value"]
            partitions, placement = _placement(topic, node_id)
            return admin.create(
                name, partitions, config, validate_only=validate_only, placement=placement
            )

        code, message, created = _outcome(create)
        answer["error_code"], answer["error_message"] = code, message
        if created is not None:
            client_topic, log_config = created
            values = topic_configs.reported(log_config.to_topic_config(), client_topic.config)
            answer["num_partitions"] = client_topic.partitions
            answer["replication_factor"] = 1
            answer["configs"] = [
                {
                    "name": key,
                    "value": values[key],
                    "read_only": False,
                    "config_source": CONFIG_SOURCE_DYNAMIC_TOPIC
                    if key in client_topic.config
                    else CONFIG_SOURCE_DEFAULT,
                    "is_sensitive": False,
                }
                for key in sorted(values)
            ]
    return {"topics": results}


# -- DeleteTopics ----------------------------------------------------------------------------


def delete_topics(request_data: dict[str, Any], version: int, admin: TopicAdmin) -> dict[str, Any]:
    if version >= 6:
        wanted = [(t["name"], t["topic_id"]) for t in request_data["topics"]]
    else:
        wanted = [(name, ZERO_UUID) for name in request_data["topic_names"]]
    responses = []
    for name, topic_id in wanted:
        answer: dict[str, Any] = {"name": name, "topic_id": topic_id}
        responses.append(answer)
        if name is None:
            # Topic ids are not kept by the worker: no id names a topic here.
            answer["error_code"] = AdminErrorCode.UNKNOWN_TOPIC_ID
            answer["error_message"] = f"topic id {topic_id} is not known (this worker names "
            answer["error_message"] += "topics by name only)"
            continue
        code, message, _ = _outcome(functools.partial(admin.delete, name))
        answer["error_code"], answer["error_message"] = code, message
    return {"responses": responses}


# -- CreatePartitions ------------------------------------------------------------------------


def create_partitions(
    request_data: dict[str, Any], admin: TopicAdmin, node_id: int
) -> dict[str, Any]:
    validate_only = request_data["validate_only"]
    counts = Counter(t["name"] for t in request_data["topics"])
    results = []
    for topic in request_data["topics"]:
        name = topic["name"]

        def grow(topic: dict[str, Any] = topic, name: str = name) -> None:
            if counts[name] > 1:
                raise _RefusedError(AdminErrorCode.INVALID_REQUEST, "Duplicate topic name.")
            for assignment in topic["assignments"] or ():
                for broker in assignment["broker_ids"]:
                    if broker != node_id:
                        raise _RefusedError(
                            AdminErrorCode.INVALID_REPLICA_ASSIGNMENT,
                            f"The manual partition assignment includes broker {broker}, but "
                            "no such broker is registered.",
                        )
            admin.create_partitions(name, topic["count"], validate_only=validate_only)

        code, message, _ = _outcome(grow)
        results.append({"name": name, "error_code": code, "error_message": message})
    return {"results": results}


# -- IncrementalAlterConfigs -----------------------------------------------------------------


def incremental_alter_configs(request_data: dict[str, Any], admin: TopicAdmin) -> dict[str, Any]:
    validate_only = request_data["validate_only"]
    responses = []
    for resource in request_data["resources"]:
        kind, name = resource["resource_type"], resource["resource_name"]

        def alter(resource: dict[str, Any] = resource, kind: int = kind, name: str = name) -> None:
            if kind != RESOURCE_TOPIC:
                raise _RefusedError(
                    AdminErrorCode.INVALID_REQUEST,
                    f"resource type {kind} ({name!r}): only topic configs can be changed on "
                    "this worker (its own settings come from the StorageVolume)",
                )
            operations = [
                (item["name"], item["config_operation"], item["value"])
                for item in resource["configs"]
            ]
            admin.alter_config(name, operations, validate_only=validate_only)

        code, message, _ = _outcome(alter)
        responses.append(
            {
                "error_code": code,
                "error_message": message,
                "resource_type": kind,
                "resource_name": name,
            }
        )
    return {"responses": responses}
