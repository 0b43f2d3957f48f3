"""Kafka's Java admin client against both peers: topics (with the internal ones), the cluster,
every topic config the broker reports; and what transactional producers are told."""

from __future__ import annotations

import pytest

from tests.integration.peer.conftest import Peers
from tests.kafka_support.java_client import java_client
from tests.kafka_support.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.kafka_peer]

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def test_admin_client_sees_the_same_cluster_topics_and_configs(peers: Peers) -> None:
    answers = {name: java_client("admin", address, "configured") for name, address in peers.both()}
    kafka, ours = answers["kafka"], answers["logkeeper"]
    # The broker's internal topics are the ones it has created so far (the session's group
    # use created __consumer_offsets; the transaction test may have created
    # __transaction_state, which the worker does not have: see the README's differences).
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


def test_a_transactional_producer_is_refused_at_once_on_the_worker(peers: Peers) -> None:
    """Kafka serves transactions; the worker does not yet. Its answer must stop a transactional
    producer at ``initTransactions`` with the reason, not leave it retrying to its timeout."""
    kafka = java_client("transactional", peers.kafka, "configured")
    assert kafka == {"initTransactions": "ok"}
    ours = java_client("transactional", peers.logkeeper, "configured")
    assert ours["initTransactions"] == "TransactionalIdAuthorizationException"
    with RawClient(peers.logkeeper) as client:
        answer = client.call(10, 4, {"key_type": 1, "coordinator_keys": ["txn-a"]})
    [coordinator] = answer["coordinators"]
    assert coordinator["error_code"] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert "transactions are not supported" in coordinator["error_message"]


def test_librdkafka_transactional_producer_fails_fast_on_the_worker(peers: Peers) -> None:
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": peers.logkeeper, "transactional.id": "rd-txn"})
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(30)
    error = raised.value.args[0]
    assert error.fatal() and not error.retriable()
    assert "transactions are not supported" in error.str()


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
