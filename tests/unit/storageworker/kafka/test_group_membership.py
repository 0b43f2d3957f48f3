"""The group coordinator's membership rules that Kafka's broker showed us (the differential
tests in tests/integration/peer compare them with the broker): MEMBER_ID_REQUIRED (KIP-394),
static members (KIP-345), and commits while the group prepares a rebalance."""

from __future__ import annotations

import asyncio
from typing import Any

from storagecore.config import TopicPartition
from storageworker.kafka import groups


async def _append(tp: TopicPartition, records: bytes) -> None:
    pass


def join_request(member_id: str = "", instance_id: str | None = None) -> dict[str, Any]:
    return {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 5_000,
        "member_id": member_id,
        "group_instance_id": instance_id,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"m"}],
    }


def commit_request(member_id: str, generation: int) -> dict[str, Any]:
    partition = {
        "partition_index": 0,
        "committed_offset": 7,
        "committed_leader_epoch": -1,
        "committed_metadata": None,
    }
    return {
        "group_id": "g",
        "generation_id_or_member_epoch": generation,
        "member_id": member_id,
        "group_instance_id": None,
        "topics": [{"name": "t", "partitions": [partition]}],
    }


def commit_code(answer: dict[str, Any]) -> int:
    code: int = answer["topics"][0]["partitions"][0]["error_code"]
    return code


async def stable_member(coordinator: groups.GroupCoordinator, **join: Any) -> dict[str, Any]:
    answer = await coordinator.join(join_request(**join), "c", 4)
    if answer["error_code"] == groups.MEMBER_ID_REQUIRED:
        answer = await coordinator.join(join_request(answer["member_id"], **join), "c", 4)
    member_id = answer["member_id"]
    await coordinator.sync(
        {
            "group_id": "g",
            "generation_id": answer["generation_id"],
            "member_id": member_id,
            "group_instance_id": join.get("instance_id"),
            "assignments": [{"member_id": member_id, "assignment": b"mine"}],
        }
    )
    return answer


def test_a_new_dynamic_member_is_asked_for_its_id_and_an_unused_id_lapses() -> None:
    async def scenario() -> None:
        clock = [0.0]
        coordinator = groups.GroupCoordinator(_append, 1, clock=lambda: clock[0])
        first = await coordinator.join(join_request(), "c", 4)
        assert first["error_code"] == groups.MEMBER_ID_REQUIRED
        group = coordinator.groups["g"]
        assert group.state == "Empty" and not group.members  # nobody to wait for
        joined = await coordinator.join(join_request(first["member_id"]), "c", 4)
        assert joined["error_code"] == 0 and joined["leader"] == first["member_id"]
        # Before v4 the member joins at once; an id handed out and never used lapses.
        unused = await coordinator.join(join_request(), "d", 4)
        assert unused["member_id"] in group.pending
        clock[0] = 11.0
        coordinator.expire_sessions()
        assert unused["member_id"] not in group.pending
        late = await coordinator.join(join_request(unused["member_id"]), "d", 4)
        assert late["error_code"] == groups.UNKNOWN_MEMBER_ID

    asyncio.run(scenario())


def test_the_first_join_waits_for_members_that_were_handed_an_id() -> None:
    async def scenario() -> None:
        coordinator = groups.GroupCoordinator(_append, 1)
        ids = [(await coordinator.join(join_request(), c, 4))["member_id"] for c in "ab"]
        first = asyncio.ensure_future(coordinator.join(join_request(ids[0]), "a", 4))
        await asyncio.sleep(0)
        assert not first.done()  # b was handed an id: the group waits for it
        second = await coordinator.join(join_request(ids[1]), "b", 4)
        answers = [await first, second]
        assert [a["generation_id"] for a in answers] == [1, 1]
        assert len(answers[0]["members"]) == 2  # the leader assigns to both at once

    asyncio.run(scenario())


def test_a_static_member_rejoins_without_a_rebalance_and_its_old_id_is_fenced() -> None:
    async def scenario() -> None:
        coordinator = groups.GroupCoordinator(_append, 1)
        first = await stable_member(coordinator, instance_id="a")
        assert first["error_code"] == 0  # a static member never gets MEMBER_ID_REQUIRED
        again = await coordinator.join(join_request(instance_id="a"), "c", 4)
        assert again["error_code"] == 0 and again["generation_id"] == first["generation_id"]
        assert again["member_id"] != first["member_id"]
        group = coordinator.groups["g"]
        assert group.state == "Stable" and group.static == {"a": again["member_id"]}
        old = {
            "group_id": "g",
            "generation_id": first["generation_id"],
            "member_id": first["member_id"],
            "group_instance_id": "a",
        }
        assert coordinator.heartbeat(old)["error_code"] == groups.FENCED_INSTANCE_ID
        synced = await coordinator.sync({**old, "member_id": again["member_id"]})
        assert synced["assignment"] == b"mine"
        left = coordinator.leave(
            {"group_id": "g", "members": [{"member_id": "", "group_instance_id": "a"}]}, 5
        )
        assert left["members"][0]["error_code"] == 0
        assert group.state == "Empty" and group.static == {}

    asyncio.run(scenario())


def test_offsets_are_committed_while_preparing_a_rebalance_not_while_completing_it() -> None:
    async def scenario() -> None:
        coordinator = groups.GroupCoordinator(_append, 1)
        first = await stable_member(coordinator)
        a, generation = first["member_id"], first["generation_id"]
        # A second member asks to join: the group prepares a rebalance, waiting for a.
        second = await coordinator.join(join_request(), "d", 4)
        joining = asyncio.ensure_future(coordinator.join(join_request(second["member_id"]), "d", 4))
        await asyncio.sleep(0)
        assert coordinator.groups["g"].state == "PreparingRebalance"
        # a commits what it processed before giving its partitions up (onPartitionsRevoked).
        answer = await coordinator.commit(commit_request(a, generation), {"t": 1}, 1000)
        assert commit_code(answer) == 0
        assert coordinator.offsets["g"][("t", 0)].offset == 7
        rejoined = await coordinator.join(join_request(a), "c", 4)
        await joining
        assert coordinator.groups["g"].state == "CompletingRebalance"
        answer = await coordinator.commit(
            commit_request(a, rejoined["generation_id"]), {"t": 1}, 1000
        )
        assert commit_code(answer) == groups.REBALANCE_IN_PROGRESS

    asyncio.run(scenario())
