"""Consumer groups on the kafka port: commits that survive a restart, two members that split
the partitions and read everything once, kafka-python's group consumer."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as Partition

from tests.integration.storageworker.kafka_clients.clients import (
    fill,
    group_consumer,
    poll_values,
    start,
)
from tests.integration.storageworker.test_serve import Served

pytestmark = pytest.mark.integration


# -- consumer groups ---------------------------------------------------------------------------


def test_group_commits_survive_a_restart_and_the_consumer_resumes(root: Path) -> None:
    server = start(root)
    fill(server.kafka_address, "events", 100)
    first = group_consumer(server.kafka_address, "billing")
    first.subscribe(["events"])
    got = poll_values(first, 100)
    assert sorted(m.value() for m in got) == sorted(b"v%d" % i for i in range(100))
    # Commit only part of each partition: 30 of partition 0's 50 and 20 of partition 1's.
    first.commit(
        offsets=[Partition("events", 0, 30), Partition("events", 1, 20)], asynchronous=False
    )
    committed = first.committed([Partition("events", 0), Partition("events", 1)], timeout=10)
    assert [(p.partition, p.offset) for p in committed] == [(0, 30), (1, 20)]
    first.close()
    assert server.terminate() == 0
    offsets_dirs = sorted(p.name for p in (root / "data").glob("__consumer_offsets-*"))
    assert len(offsets_dirs) == 10

    server = start(root)
    try:
        second = group_consumer(server.kafka_address, "billing")
        second.subscribe(["events"])
        resumed = poll_values(second, 50)
        assert sorted((m.partition(), m.offset()) for m in resumed) == sorted(
            [(0, o) for o in range(30, 50)] + [(1, o) for o in range(20, 50)]
        )
        assert poll_values(second, 1, timeout_s=2) == []
        second.close()
        status = {p["topic"]: p for p in server.status()["partitions"]}
        assert status["__consumer_offsets"]["cleanupPolicy"] == "compact"
    finally:
        assert server.terminate() == 0


def test_two_members_split_the_partitions_and_consume_everything_once(served: Served) -> None:
    fill(served.kafka_address, "events", 200)
    members = [group_consumer(served.kafka_address, "pair") for _ in range(2)]
    # Each member's current assignment: the eager protocol hands the whole assignment to on_assign
    # and takes it all back in on_revoke.
    assigned: list[set[int]] = [set(), set()]

    def on_assign(index: int, parts: list[Partition]) -> None:
        assigned[index] = {p.partition for p in parts}

    def on_revoke(index: int) -> None:
        assigned[index] = set()

    for index, member in enumerate(members):
        member.subscribe(
            ["events"],
            on_assign=lambda _c, parts, i=index: on_assign(i, parts),
            on_revoke=lambda _c, _parts, i=index: on_revoke(i),
        )
    seen: dict[tuple[int, int], int] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        len(seen) < 200 or not all(len(a) == 1 for a in assigned)
    ):
        for index, member in enumerate(members):
            message = member.poll(0.1)
            if message is not None and not message.error():
                seen[(message.partition(), message.offset())] = index
                # A commit during a rebalance fails: the partition's next owner reads on.
                with contextlib.suppress(KafkaException):
                    member.commit(message=message, asynchronous=False)
    for member in members:
        member.close()
    assert len(seen) == 200
    # Once the group settled, each member owned one partition.
    final = {seen[(p, 49)] for p in (0, 1)}
    assert final == {0, 1}


def test_kafka_python_group_consumer_commits_and_resumes(served: Served) -> None:
    from kafka import KafkaConsumer

    fill(served.kafka_address, "events", 40)

    def consumer() -> KafkaConsumer:
        return KafkaConsumer(
            "events",
            bootstrap_servers=served.kafka_address,
            group_id="py",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            consumer_timeout_ms=4000,
        )

    first = consumer()
    got = []
    for message in first:
        got.append(message)
        if len(got) == 40:
            break
    assert len(got) == 40
    first.commit()
    first.close()
    fill(served.kafka_address, "events", 10)
    second = consumer()
    rest = list(second)
    second.close()
    assert len(rest) == 10
