"""Kafka's Java admin client against both peers: topics (with the internal ones), the cluster,
every topic config the broker reports; and what transactional producers are told."""

from __future__ import annotations

import pytest

from tests.integration.peer.conftest import Peers
from tests.kafka_support.java_client import java_client
from tests.kafka_support.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.kafka_peer]


def test_admin_client_sees_the_same_cluster_topics_and_configs(peers: Peers) -> None:
    answers = {name: java_client("admin", address, "configured") for name, address in peers.both()}
    kafka, ours = answers["kafka"], answers["logkeeper"]
    # The broker's internal topics are the ones it has created so far (the session's group
    # use created __consumer_offsets; the first transaction creates __transaction_state); the
    # worker holds both from its start (see the README's differences).
    assert ours["topics"].pop("__transaction_state") is True
    kafka["topics"].pop("__transaction_state", None)
    assert kafka["topics"]["__consumer_offsets"] is True
    # Formatting a KRaft cluster with eligible leader replicas (Kafka 4's default) stores a
    # cluster-wide min.insync.replicas=1, so the broker reports that source; the worker reports
    # Kafka's static default, the same value (README: differences from the broker).
    cluster_default = kafka["configs"]["min.insync.replicas"]
    assert cluster_default["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    kafka["configs"]["min.insync.replicas"] = {
        **cluster_default,
        "source": "DEFAULT_CONFIG",
        "isDefault": True,
    }
    differing = {
        key: (kafka["configs"].get(key), ours["configs"].get(key))
        for key in kafka["configs"].keys() | ours["configs"].keys()
        if kafka["configs"].get(key) != ours["configs"].get(key)
    }
    assert differing == {}
    assert ours == kafka
    assert len(kafka["configs"]) >= 30
    assert kafka["configs"]["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert kafka["unknownTopicConfigs"] == "UnknownTopicOrPartitionException"


def test_a_transactional_producer_starts_on_both(peers: Peers) -> None:
    """``initTransactions`` succeeds on both peers and FindCoordinator(TRANSACTION) names the
    peer itself (the transactions themselves: ``test_transactions.py``)."""
    assert java_client("transactional", peers.kafka, "configured") == {"initTransactions": "ok"}
    assert java_client("transactional", peers.logkeeper, "configured") == {"initTransactions": "ok"}
    for _name, address in peers.both():
        with RawClient(address) as client:
            answer = client.call(10, 4, {"key_type": 1, "coordinator_keys": ["txn-a"]})
        [coordinator] = answer["coordinators"]
        assert coordinator["error_code"] == 0, address
        assert coordinator["port"] == int(address.rsplit(":", 1)[1]), address


def test_librdkafka_transactions_commit_and_abort(peers: Peers) -> None:
    """librdkafka's transactional producer: a committed and an aborted transaction, read back
    with ``isolation.level=read_committed``: the same values from both peers."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    values = {}
    for name, address in peers.both():
        producer = Producer({"bootstrap.servers": address, "transactional.id": f"rd-{name}"})
        producer.init_transactions(60)
        for tag, commit in (("rc", True), ("ra", False), ("rd", True)):
            producer.begin_transaction()
            for i in range(3):
                producer.produce("txn-rdkafka", f"{tag}-{i}".encode(), partition=0)
            if commit:
                producer.commit_transaction(60)
            else:
                producer.abort_transaction(60)
        consumer = Consumer(
            {
                "bootstrap.servers": address,
                "group.id": f"rd-reader-{name}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        _low, high = consumer.get_watermark_offsets(TopicPartition("txn-rdkafka", 0), 30)
        consumer.assign([TopicPartition("txn-rdkafka", 0, 0)])
        got: list[str] = []
        position = 0
        while position < high:
            message = consumer.poll(1)
            if message is None:
                position = consumer.position([TopicPartition("txn-rdkafka", 0)])[0].offset
                continue
            assert message.error() is None, message.error()
            got.append(message.value().decode())
            position = message.offset() + 1
        consumer.close()
        values[name] = got
    assert values["logkeeper"] == values["kafka"]
    assert values["kafka"] == ["rc-0", "rc-1", "rc-2", "rd-0", "rd-1", "rd-2"]


def test_kafka_refuses_segments_below_one_mib_the_worker_accepts_them(peers: Peers) -> None:
    """A documented difference (README): storagecore keeps Kafka 3's floor for segment.bytes."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from storagecore.config import LogConfig

    admin = AdminClient({"bootstrap.servers": peers.kafka})
    [future] = admin.create_topics(
        [NewTopic("tiny-segments", 1, 1, config={"segment.bytes": "16384"})]
    ).values()
    with pytest.raises(Exception, match="segment.bytes") as refused:
        future.result(30)
    assert refused.value.args[0].name() == "INVALID_CONFIG"
    assert LogConfig.from_topic_config({"segment.bytes": "16384"}).segment_bytes == 16384
