"""Client topics on a real ``logkeeper serve``: created through librdkafka's admin client, they
persist across restarts (clean and SIGKILL), follow retention and the cleaner like declared
ones, show in the status, are adopted by a Topic resource of the same name, and go with
DeleteTopics. (The Java admin client against the broker: tests/integration/peer.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

from storageworker.client_topics import CLIENT_TOPICS_FILE
from tests.integration.storageworker.test_serve import SETTINGS, Served, declare, topic, wait_for

pytestmark = pytest.mark.integration

PREFIXES = 'clientTopicPrefixes: ["app-"]\n'


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "topics").mkdir()
    (tmp_path / "settings.yaml").write_text(SETTINGS + PREFIXES, encoding="utf-8")
    declare(tmp_path, topic("declared", 1, {}))
    return tmp_path


def _admin(served: Served) -> AdminClient:
    return AdminClient({"bootstrap.servers": served.kafka_address})


def _create(served: Served, name: str, partitions: int, config: dict[str, str]) -> None:
    admin = _admin(served)  # held until the answer: a collected client cancels its requests
    [future] = admin.create_topics([NewTopic(name, partitions, 1, config=config)]).values()
    future.result(30)


def _refusal(future: Any) -> tuple[str, str]:
    with pytest.raises(KafkaException) as raised:
        future.result(30)
    error = raised.value.args[0]
    return error.name(), error.str()


def _produce(served: Served, name: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": served.kafka_address, "linger.ms": 0})
    for key, value in records:
        producer.produce(name, value, key, partition=0)
        producer.flush(30)  # one batch per record: segments roll on size
    assert producer.flush(30) == 0


def _client_topics(served: Served) -> dict[str, Any]:
    return {t["name"]: t for t in served.status()["clientTopics"]["topics"]}


def test_created_topics_persist_and_are_cleaned_and_retained(root: Path) -> None:
    served = Served(root, "--kafka-port", "0")
    try:
        _create(
            served,
            "app-table",
            2,
            {
                "cleanup.policy": "compact",
                "segment.bytes": "200",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        _create(served, "app-events", 1, {"retention.ms": "1", "segment.bytes": "200"})
        shown = _client_topics(served)
        assert shown["app-table"]["partitions"] == 2
        assert shown["app-table"]["config"]["cleanup.policy"] == "compact"
        assert served.partition("app-table-1")["clientTopic"] is True
        assert served.partition("declared-0")["clientTopic"] is False
        # The cleaner compacts the client topic like a declared one.
        _produce(served, "app-table", [(b"k%d" % (i % 3), b"v%d" % i) for i in range(30)])
        wait_for(
            lambda: served.partition("app-table-0")["lastClean"] is not None,
            "the cleaner to clean app-table-0",
        )
        # Retention deletes the client topic's closed segments (retention.ms=1).
        _produce(served, "app-events", [(b"k", b"v%d" % i) for i in range(10)])
        wait_for(
            lambda: served.partition("app-events-0")["logStartOffset"] > 0,
            "retention to delete app-events segments",
        )
        store = json.loads((root / "data" / CLIENT_TOPICS_FILE).read_text())
        assert [t["name"] for t in store["topics"]] == ["app-events", "app-table"]
        metrics = served.metrics()
        assert metrics["logkeeper_client_topics"] == 2
        assert metrics["logkeeper_client_topics_store_ok"] == 1
    finally:
        served.kill()  # SIGKILL: the store was written before the creates were answered
    served = Served(root, "--kafka-port", "0")
    try:
        assert set(_client_topics(served)) == {"app-events", "app-table"}
        assert served.partition("app-table-1")["logEndOffset"] >= 0
        assert served.status()["orphanedLogs"] == []
        metadata = _admin(served).list_topics(timeout=30).topics
        assert len(metadata["app-table"].partitions) == 2
    finally:
        assert served.terminate() == 0


def test_refusals_name_the_prefixes_and_the_resource(root: Path) -> None:
    served = Served(root, "--kafka-port", "0")
    try:
        admin = _admin(served)
        [future] = admin.create_topics([NewTopic("other", 1, 1)]).values()
        name, message = _refusal(future)
        assert name == "POLICY_VIOLATION" and "'app-'" in message
        # librdkafka's DeleteTopics (v4) carries no message; the Java client's (v6) test is in
        # tests/integration/peer/test_client_topics.py.
        [future] = admin.delete_topics(["declared"]).values()
        assert _refusal(future)[0] == "POLICY_VIOLATION"
        [future] = admin.create_partitions([NewPartitions("declared", 2)]).values()
        assert _refusal(future)[0] == "POLICY_VIOLATION"
        resource = ConfigResource("TOPIC", "declared")
        resource.add_incremental_config(
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
        )
        [future] = admin.incremental_alter_configs([resource]).values()
        assert _refusal(future)[0] == "POLICY_VIOLATION"
        [future] = admin.create_topics([NewTopic("declared", 1, 1)]).values()
        name, message = _refusal(future)
        assert name == "TOPIC_ALREADY_EXISTS" and "Topic resource 'declared'" in message
        [future] = admin.delete_topics(["__consumer_offsets"]).values()
        assert _refusal(future)[0] == "POLICY_VIOLATION"
        [future] = admin.create_topics(
            [NewTopic("app-x", 1, 1, config={"max.compaction.lag.ms": "0"})]
        ).values()
        name, message = _refusal(future)
        assert name == "INVALID_CONFIG" and "max.compaction.lag.ms" in message
    finally:
        assert served.terminate() == 0


def test_a_topic_resource_adopts_a_client_topic_and_delete_removes_one(root: Path) -> None:
    served = Served(root, "--kafka-port", "0")
    try:
        _create(served, "app-adopted", 1, {"retention.ms": "1000000"})
        _create(served, "app-gone", 2, {})
        _produce(served, "app-adopted", [(b"k", b"kept")])
        admin = _admin(served)
        [future] = admin.describe_configs([ConfigResource("TOPIC", "app-adopted")]).values()
        # A client topic's configs are the client's to change: not read-only (as on Kafka).
        assert not future.result(30)["retention.ms"].is_read_only
        declare(
            root,
            topic("declared", 1, {}),
            topic("app-adopted", 2, {"retention.ms": "2000000"}),
        )
        wait_for(lambda: "app-adopted" not in _client_topics(served), "the adoption")
        wait_for(
            lambda: served.partition("app-adopted-1")["clientTopic"] is False,
            "the resource's second partition",
        )
        assert served.partition("app-adopted-0")["logEndOffset"] == 1  # the data stayed
        [future] = admin.describe_configs([ConfigResource("TOPIC", "app-adopted")]).values()
        adopted = future.result(30)["retention.ms"]
        assert adopted.value == "2000000" and adopted.is_read_only  # the resource's now
        store = json.loads((root / "data" / CLIENT_TOPICS_FILE).read_text())
        assert [t["name"] for t in store["topics"]] == ["app-gone"]
        # Now the resource's: the Admin API may not delete it.
        [future] = admin.delete_topics(["app-adopted"]).values()
        assert _refusal(future)[0] == "POLICY_VIOLATION"
        assert served.partition("app-adopted-0")["logEndOffset"] == 1
        [future] = admin.delete_topics(["app-gone"]).values()
        future.result(30)
        assert "app-gone" not in _client_topics(served)
        assert not any(p["topic"] == "app-gone" for p in served.status()["partitions"])
        assert "app-gone" not in admin.list_topics(timeout=30).topics
        assert not (root / "data" / "app-gone-0").exists()
        # Orphaned logs (a Topic resource removed with deletionPolicy Retain) are not handed to
        # a client's new topic of the same name.
        declare(root, topic("declared", 1, {}))
        wait_for(lambda: "app-adopted-0" in served.status()["orphanedLogs"], "the orphaned logs")
        [future] = admin.create_topics([NewTopic("app-adopted", 1, 1)]).values()
        name, message = _refusal(future)
        assert name == "TOPIC_ALREADY_EXISTS" and "orphaned logs (app-adopted-0" in message
    finally:
        assert served.terminate() == 0


def test_a_broken_store_is_kept_and_refuses_changes(root: Path) -> None:
    (root / "data").mkdir()
    broken = b'{"version": 1, "topics": [{"name": "app-x", "partitions": 0}]}'
    (root / "data" / CLIENT_TOPICS_FILE).write_bytes(broken)
    served = Served(root, "--kafka-port", "0")
    try:
        error = served.status()["clientTopics"]["error"]
        assert CLIENT_TOPICS_FILE in error and "app-x" in error and "partitions" in error
        assert served.metrics()["logkeeper_client_topics_store_ok"] == 0
        admin = _admin(served)
        [future] = admin.create_topics([NewTopic("app-y", 1, 1)]).values()
        name, message = _refusal(future)
        assert name == "KAFKA_STORAGE_ERROR" and CLIENT_TOPICS_FILE in message
        assert (root / "data" / CLIENT_TOPICS_FILE).read_bytes() == broken
    finally:
        assert served.terminate() == 0
