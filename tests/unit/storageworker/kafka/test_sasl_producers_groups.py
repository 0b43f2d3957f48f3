"""SASL exchanges (RFC 7677's test vector), producer IDs, and the group
coordinator's state machine, without sockets."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest

from storagecore.config import TopicPartition
from storagecore.errors import ConfigError
from storageworker.kafka import groups, offset_records
from storageworker.kafka.producers import ProducerIds
from storageworker.kafka.sasl import (
    AuthenticationError,
    Authenticator,
    User,
    load_users,
    scram_credential,
)

# -- SASL --------------------------------------------------------------------------------------


def test_scram_sha_256_matches_rfc_7677() -> None:
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    user = User(
        "user", "pencil", {"SCRAM-SHA-256": scram_credential("pencil", "sha256", salt, 4096)}
    )
    auth = Authenticator(
        "SCRAM-SHA-256", {"user": user}, server_nonce=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    )
    first = auth.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = auth.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert auth.complete and auth.user == "user"


def test_scram_refuses_a_wrong_proof_and_plain_a_wrong_password() -> None:
    salt = b"0123456789abcdef"
    user = User("u", "pw", {"SCRAM-SHA-256": scram_credential("pw", "sha256", salt, 4096)})
    auth = Authenticator("SCRAM-SHA-256", {"u": user}, server_nonce=lambda: "S")
    auth.step(b"n,,n=u,r=C")
    with pytest.raises(AuthenticationError):
        auth.step(b"c=biws,r=CS,p=" + base64.b64encode(b"\0" * 32))
    with pytest.raises(AuthenticationError, match="nonce"):
        (
            Authenticator("SCRAM-SHA-256", {"u": user}, server_nonce=lambda: "S").step(
                b"n,,n=u,r=C"
            )
            and None
        ) or _final_with_nonce(user, b"c=biws,r=XX,p=AAAA")
    plain = Authenticator("PLAIN", {"u": user})
    with pytest.raises(AuthenticationError):
        plain.step(b"\0u\0nope")
    assert plain.step(b"\0u\0pw") == b"" and plain.complete
    with pytest.raises(AuthenticationError):
        Authenticator("SCRAM-SHA-512", {"u": user}).step(b"n,,n=nobody,r=C")


def _final_with_nonce(user: User, final: bytes) -> bytes:
    auth = Authenticator("SCRAM-SHA-256", {"u": user}, server_nonce=lambda: "S")
    auth.step(b"n,,n=u,r=C")
    return auth.step(final)


def test_users_file_errors_name_the_file_and_the_user(tmp_path: Path) -> None:
    good = tmp_path / "users.yaml"
    good.write_text("alice: secret\n", encoding="utf-8")
    users = load_users(good)
    assert set(users["alice"].scram) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("bob: 3\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.yaml: user 'bob'"):
        load_users(bad)


# -- idempotent producers ------------------------------------------------------------------------


def test_producer_ids_increase() -> None:
    ids = ProducerIds()
    first, second = ids.next(), ids.next()
    assert second > first > 0


# -- groups --------------------------------------------------------------------------------------


def join_request(member_id: str = "", protocols: tuple[str, ...] = ("range",)) -> dict[str, Any]:
    return {
        "group_id": "g",
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 5_000,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": p, "metadata": p.encode()} for p in protocols],
    }


def test_java_string_hash_and_offsets_partition() -> None:
    assert offset_records.java_string_hash("") == 0
    assert offset_records.java_string_hash("hello") == 99162322
    assert offset_records.java_string_hash("polygenelubricants") == -(1 << 31)
    assert offset_records.offsets_partition("polygenelubricants", 50) == 0
    expected = abs(offset_records.java_string_hash("my-group")) % 50
    assert offset_records.offsets_partition("my-group", 50) == expected


def test_offset_records_round_trip() -> None:
    key = offset_records.offset_key("g", "t", 3)
    value = offset_records.offset_value(42, 5, "meta", 1000)
    assert offset_records.parse_offset_record(key, value) == (
        ("g", "t", 3),
        offset_records.CommittedOffset(42, 5, "meta", 1000),
    )
    assert offset_records.parse_offset_record(key, None) == (("g", "t", 3), None)
    assert offset_records.parse_offset_record(b"\x00\x02\x00\x01g", b"") is None  # group metadata


def test_join_sync_heartbeat_rebalance_and_leave() -> None:
    appended: list[tuple[TopicPartition, bytes]] = []

    async def append(tp: TopicPartition, records: bytes) -> None:
        appended.append((tp, records))

    async def scenario() -> None:
        coordinator = groups.GroupCoordinator(append, 4)
        first = await coordinator.join(join_request(), "c1", 3)
        assert first["error_code"] == 0 and first["generation_id"] == 1
        assert first["leader"] == first["member_id"] and len(first["members"]) == 1
        a = first["member_id"]
        sync = await coordinator.sync(
            {
                "group_id": "g",
                "generation_id": 1,
                "member_id": a,
                "assignments": [{"member_id": a, "assignment": b"all"}],
            }
        )
        assert sync["assignment"] == b"all" and coordinator.groups["g"].state == "Stable"
        assert coordinator.heartbeat({"group_id": "g", "generation_id": 1, "member_id": a}) == {
            "error_code": 0
        }
        # A second member joins: the first learns of the rebalance through its heartbeat.
        second = asyncio.ensure_future(coordinator.join(join_request(), "c2", 3))
        await asyncio.sleep(0)
        assert (
            coordinator.heartbeat({"group_id": "g", "generation_id": 1, "member_id": a})[
                "error_code"
            ]
            == groups.REBALANCE_IN_PROGRESS
        )
        rejoin = await coordinator.join(join_request(a), "c1", 3)
        b_answer = await second
        assert rejoin["generation_id"] == b_answer["generation_id"] == 2
        assert rejoin["leader"] == a and len(rejoin["members"]) == 2 and b_answer["members"] == []
        b = b_answer["member_id"]
        follower = asyncio.ensure_future(
            coordinator.sync(
                {"group_id": "g", "generation_id": 2, "member_id": b, "assignments": []}
            )
        )
        await asyncio.sleep(0)
        assert not follower.done()  # waits for the leader's assignment
        await coordinator.sync(
            {
                "group_id": "g",
                "generation_id": 2,
                "member_id": a,
                "assignments": [
                    {"member_id": a, "assignment": b"p0"},
                    {"member_id": b, "assignment": b"p1"},
                ],
            }
        )
        assert (await follower)["assignment"] == b"p1"
        stale = coordinator.heartbeat({"group_id": "g", "generation_id": 1, "member_id": b})
        assert stale["error_code"] == groups.ILLEGAL_GENERATION
        # Commits: from the current generation only.
        served = {"t": 2}
        commit = {
            "group_id": "g",
            "generation_id_or_member_epoch": 2,
            "member_id": b,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 1,
                            "committed_offset": 9,
                            "committed_leader_epoch": -1,
                            "committed_metadata": None,
                        }
                    ],
                }
            ],
        }
        answer = await coordinator.commit(commit, served, 1000)
        assert answer["topics"][0]["partitions"][0]["error_code"] == 0
        assert len(appended) == 1 and appended[0][0].topic == "__consumer_offsets"
        old = {**commit, "generation_id_or_member_epoch": 1}
        answer = await coordinator.commit(old, served, 1000)
        assert answer["topics"][0]["partitions"][0]["error_code"] == groups.ILLEGAL_GENERATION
        fetched = coordinator.fetch_offsets({"group_id": "g", "topics": None})
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 9
        # The stored record reads back into a fresh coordinator.
        fresh = groups.GroupCoordinator(append, 4)
        assert fresh.load(appended[0][1], appended[0][0]) == 1
        assert fresh.offsets["g"][("t", 1)].offset == 9
        # The leader leaves: the other member is now alone after a rebalance.
        left = coordinator.leave(
            {"group_id": "g", "members": [{"member_id": a, "group_instance_id": None}]}, 3
        )
        assert left["members"][0]["error_code"] == 0
        assert coordinator.groups["g"].state == "PreparingRebalance"
        alone = await coordinator.join(join_request(b), "c2", 3)
        assert alone["generation_id"] == 3 and alone["leader"] == b
        # Session expiry empties the group.
        coordinator.clock = lambda: 1e12
        coordinator.expire_sessions()
        assert coordinator.groups["g"].state == "Empty" and not coordinator.groups["g"].members

    asyncio.run(scenario())


def test_join_errors() -> None:
    async def append(tp: TopicPartition, records: bytes) -> None:
        raise AssertionError("nothing to append")

    async def scenario() -> None:
        coordinator = groups.GroupCoordinator(append, 1)
        assert (await coordinator.join({**join_request(), "session_timeout_ms": 10}, "c", 3))[
            "error_code"
        ] == groups.INVALID_SESSION_TIMEOUT
        assert (await coordinator.join(join_request("ghost"), "c", 3))[
            "error_code"
        ] == groups.UNKNOWN_MEMBER_ID
        await coordinator.join(join_request(), "c", 3)
        mismatch = await coordinator.join(join_request(protocols=("other",)), "d", 3)
        assert mismatch["error_code"] == groups.INCONSISTENT_GROUP_PROTOCOL

    asyncio.run(scenario())


# -- fetch waits -----------------------------------------------------------------------------------


def test_an_append_between_the_read_and_the_wait_still_wakes_the_fetch() -> None:
    """The fetch takes the append event before reading: an append that lands after the read
    (here: during it) sets that event, so the fetch re-reads at once instead of waiting out
    max_wait_ms (30 s here; the test gives it 10)."""
    from storagecore.log import FetchResult
    from storageworker.kafka import apis

    state: dict[str, Any] = {"event": asyncio.Event(), "reads": 0}
    loop_box: list[asyncio.AbstractEventLoop] = []

    def next_append() -> asyncio.Event:
        event: asyncio.Event = state["event"]
        return event

    def notify() -> None:
        done, state["event"] = state["event"], asyncio.Event()
        done.set()

    class Broker:
        def partitions(self) -> dict[str, int]:
            return {"t": 1}

        def read(
            self,
            tp: TopicPartition,
            offset: int,
            max_bytes: int,
            *,
            zero_copy: bool = False,
            committed: bool = False,
        ) -> apis.Stable:
            state["reads"] += 1
            if state["reads"] == 1:  # an append lands while the first read runs
                loop_box[0].call_soon_threadsafe(notify)
                return apis.Stable(FetchResult(b"", offset, 0, 0, 0), 0, None)
            return apis.Stable(FetchResult(b"x" * 10, offset, 0, 1, 1), 1, None)

    request = apis.Request(
        1,
        12,
        1,
        None,
        {
            "max_bytes": 1 << 20,
            "max_wait_ms": 30_000,
            "min_bytes": 1,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    ],
                }
            ],
        },
    )

    async def scenario() -> tuple[dict[str, Any], int]:
        loop_box.append(asyncio.get_running_loop())
        return await asyncio.wait_for(
            apis.fetch(request, Broker(), asyncio.to_thread, next_append),  # type: ignore[arg-type]
            10,
        )

    response, sent = asyncio.run(scenario())
    assert sent == 10 and state["reads"] == 2
    assert response["responses"][0]["partitions"][0]["records"] == b"x" * 10
