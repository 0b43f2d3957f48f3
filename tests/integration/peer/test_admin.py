"""Kafka's Java admin client against both peers: topics (with the internal ones), the cluster,
topic configs; and what a transactional producer is told."""

from __future__ import annotations

import pytest

from tests.integration.peer.conftest import Peers
from tests.kafka_support.java_client import java_client

pytestmark = [pytest.mark.integration, pytest.mark.kafka_peer]


def test_admin_client_sees_the_same_cluster_and_topic_configs(peers: Peers) -> None:
    answers = {name: java_client("admin", address, "configured") for name, address in peers.both()}
    for name, answer in answers.items():
        print(name, answer)
    assert False
