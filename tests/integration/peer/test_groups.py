"""Consumer groups against both peers: the classic protocol's answers request by request
(MEMBER_ID_REQUIRED, static members, fencing, leave), and Kafka's Java consumer through a
rebalance in which the revoked owner commits in ``onPartitionsRevoked``."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from tests.integration.peer.conftest import Peers
from tests.kafka_support.java_client import java_client
from tests.kafka_support.raw_client import RawClient

pytestmark = [pytest.mark.integration, pytest.mark.kafka_peer]

JOIN_V = 9
#: A ConsumerProtocolSubscription v0 for topic "membership" (Kafka's coordinator reads it).
SUBSCRIPTION = struct.pack(">hih", 0, 1, 10) + b"membership" + struct.pack(">i", -1)
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82


def join(
    client: RawClient, group: str, member_id: str = "", instance_id: str | None = None
) -> dict[str, Any]:
    return client.call(
        11,
        JOIN_V,
        {
            "group_id": group,
            "session_timeout_ms": 10_000,
            "rebalance_timeout_ms": 10_000,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": SUBSCRIPTION}],
            "reason": None,
        },
    )


def sync(
    client: RawClient,
    group: str,
    generation: int,
    member_id: str,
    instance_id: str | None = None,
    assignments: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return client.call(
        14,
        5,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance_id,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": assignments or [],
        },
    )


def heartbeat(
    client: RawClient, group: str, generation: int, member_id: str, instance_id: str | None = None
) -> int:
    answer = client.call(
        12,
        4,
        {
            "group_id": group,
            "generation_id": generation,
            "member_id": member_id,
            "group_instance_id": instance_id,
        },
    )
    code: int = answer["error_code"]
    return code


def leave(client: RawClient, group: str, member_id: str, instance_id: str | None = None) -> Any:
    answer = client.call(
        13,
        5,
        {
            "group_id": group,
            "members": [{"member_id": member_id, "group_instance_id": instance_id, "reason": None}],
        },
    )
    return answer["error_code"], [m["error_code"] for m in answer["members"]]


def dynamic_member_scenario(address: str) -> dict[str, Any]:
    group = "dynamic-member"
    with RawClient(address) as client:
        first = join(client, group)
        member_id = first["member_id"]
        joined = join(client, group, member_id)
        generation = joined["generation_id"]
        synced = sync(
            client,
            group,
            generation,
            member_id,
            assignments=[{"member_id": member_id, "assignment": b"everything"}],
        )
        return {
            "first join": (first["error_code"], bool(member_id)),
            "join with the id": (
                joined["error_code"],
                joined["leader"] == member_id,
                len(joined["members"]),
            ),
            "sync": (synced["error_code"], synced["assignment"]),
            "heartbeat": heartbeat(client, group, generation, member_id),
            "old generation": heartbeat(client, group, generation - 1, member_id),
            "unknown member": heartbeat(client, group, generation, "someone-else"),
            "unknown id on join": join(client, group, "made-up")["error_code"],
            "leave": leave(client, group, member_id),
            "heartbeat after leave": heartbeat(client, group, generation, member_id),
            "leave again": leave(client, group, member_id),
        }


def test_dynamic_member_join_sync_heartbeat_leave(peers: Peers) -> None:
    answers = {name: dynamic_member_scenario(address) for name, address in peers.both()}
    assert answers["logkeeper"] == answers["kafka"]
    assert answers["kafka"]["first join"] == (MEMBER_ID_REQUIRED, True)


def static_member_scenario(address: str) -> dict[str, Any]:
    group = "static-member"
    with RawClient(address) as client:
        first = join(client, group, instance_id="instance-a")
        old_id, generation = first["member_id"], first["generation_id"]
        assignment = [{"member_id": old_id, "assignment": b"p0+p1"}]
        synced = sync(client, group, generation, old_id, "instance-a", assignment)
        # The same instance restarts: a new member id, no rebalance, its assignment kept.
        again = join(client, group, instance_id="instance-a")
        new_id = again["member_id"]
        resynced = sync(client, group, again["generation_id"], new_id, "instance-a")
        return {
            "first join": (first["error_code"], first["leader"] == old_id),
            "sync": (synced["error_code"], synced["assignment"]),
            "rejoin": (again["error_code"], again["generation_id"] - generation, new_id != old_id),
            "resync": (resynced["error_code"], resynced["assignment"]),
            "old id": heartbeat(client, group, generation, old_id, "instance-a"),
            "new id": heartbeat(client, group, generation, new_id, "instance-a"),
            "old id joins": join(client, group, old_id, "instance-a")["error_code"],
            "leave by old id": leave(client, group, old_id, "instance-a"),
            "leave by instance": leave(client, group, "", "instance-a"),
            "heartbeat after leave": heartbeat(client, group, generation, new_id, "instance-a"),
        }


def test_static_member_restarts_without_a_rebalance_and_fences_its_old_id(peers: Peers) -> None:
    answers = {name: static_member_scenario(address) for name, address in peers.both()}
    assert answers["logkeeper"] == answers["kafka"]
    assert answers["kafka"]["rejoin"] == (0, 0, True)
    assert answers["kafka"]["old id"] == FENCED_INSTANCE_ID


def test_revoked_owner_commits_and_the_next_owner_reads_on_with_nothing_redelivered(
    peers: Peers,
) -> None:
    from confluent_kafka import Producer

    answers = {}
    for name, address in peers.both():
        producer = Producer({"bootstrap.servers": address, "linger.ms": 5})
        for i in range(400):
            producer.produce("rebalance", value=b"before-%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        answers[name] = java_client("rebalance", address, "rebalance", "revoking", 400)
    assert answers["logkeeper"] == answers["kafka"]
    assert answers["kafka"] == {
        "seenBeforeJoin": 400,
        "settled": True,
        "distinct": 420,
        "redelivered": 0,
        "commitErrors": [],
    }
