"""Topics created by clients, through Kafka's Java admin client, on both peers: every verb
(CreateTopics, CreatePartitions, IncrementalAlterConfigs, DeleteTopics) with Kafka's validation
and error classes; then what only the worker refuses (its policy and the Topic resources'
ownership), with a message naming the prefix list or the resource."""

from __future__ import annotations

import pytest

from tests.integration.peer.conftest import Peers
from tests.integration.peer.test_streams import delete_topics
from tests.kafka_support.java_client import java_client

pytestmark = [pytest.mark.integration, pytest.mark.kafka_peer]


def test_every_topic_verb_answers_as_the_broker(peers: Peers) -> None:
    answers = {
        name: java_client("lifecycle", address, "client_lc_", program="TopicAdminClient")
        for name, address in peers.both()
    }
    kafka, ours = answers["kafka"], answers["logkeeper"]
    differing = {
        step: (kafka.get(step), ours.get(step))
        for step in kafka.keys() | ours.keys()
        if kafka.get(step) != ours.get(step)
    }
    assert differing == {}
    # The scenario reached what it means to check (not only equal failures on both sides).
    assert kafka["01 create"] == {
        "cleanup.policy": "compact",
        "partitions": 3,
        "replicationFactor": 1,
        "retention.ms": "604800000",
    }
    assert kafka["02 create again"] == "TopicExistsException"
    assert kafka["03 bad name"] == "InvalidTopicException"
    assert kafka["05 three replicas"] == "InvalidReplicationFactorException"
    assert kafka["06 zero partitions"] == "InvalidPartitionsException"
    assert kafka["07 max.compaction.lag.ms 0"] == "InvalidConfigurationException"
    assert kafka["17 partitions after growing"] == 5
    assert kafka["20 configs after set and append"]["cleanup.policy"] == (
        "compact,delete DYNAMIC_TOPIC_CONFIG"
    )
    assert kafka["28 delete"] == "ok"
    assert kafka["29 delete again"] == "UnknownTopicOrPartitionException"


def test_topics_outside_the_prefixes_are_refused_by_the_worker_only(peers: Peers) -> None:
    kafka = java_client("try", peers.kafka, "create", "elsewhere-a", program="TopicAdminClient")
    ours = java_client("try", peers.logkeeper, "create", "elsewhere-a", program="TopicAdminClient")
    assert kafka == {"outcome": "ok", "exists": True}
    delete_topics(peers.kafka, "elsewhere-a")
    assert ours["outcome"] == "PolicyViolationException"
    assert "spec.clientTopicPrefixes" in ours["message"] and "'client_'" in ours["message"]
    assert ours["exists"] is False


@pytest.mark.parametrize("verb", ["delete", "grow", "alter"])
def test_a_declared_topic_is_its_resources(peers: Peers, verb: str) -> None:
    """``deletes`` is declared by a Topic resource on the worker: the Admin API may not change
    it, and the refusal names the resource."""
    ours = java_client("try", peers.logkeeper, verb, "deletes", program="TopicAdminClient")
    assert ours["outcome"] == "PolicyViolationException", ours
    assert "owned by Topic resource 'deletes'" in ours["message"]
    assert ours["exists"] is True
