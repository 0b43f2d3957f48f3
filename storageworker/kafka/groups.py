"""Consumer groups: the classic group protocol and committed offsets.

The worker is the coordinator of every group (FindCoordinator names it). Members join, the
coordinator picks a leader and a protocol, the leader computes the assignment and hands it over
in SyncGroup, everyone heartbeats; a join, a leave or a member whose session expired starts a
new generation. States and errors follow Kafka's ``GroupCoordinator``:

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable --join, leave, expiry--> PreparingRebalance

A dynamic member's first JoinGroup (v4+, KIP-394) is answered MEMBER_ID_REQUIRED with a member
id to join with: a client that dies between the two requests leaves only a pending id behind,
dropped after its session timeout, not a member the group waits for. A static member
(``group.instance.id``, KIP-345) is known by its instance id: when it rejoins under a new member
id the old id is fenced (FENCED_INSTANCE_ID) and, if the group is Stable and its protocols are
unchanged, it takes over its assignment without a rebalance. Offsets may be committed by the
current generation in every state but CompletingRebalance (so a consumer commits what it
processed in ``onPartitionsRevoked`` while the group prepares the rebalance, as on Kafka).

Committed offsets are records of the compacted internal topic ``__consumer_offsets`` (Kafka's
key v1 / value v3 layout, partition ``abs(hashCode(group)) % partitions``), appended through
storagecore like any record and cleaned by the worker's own cleaner; the latest value of each
(group, topic, partition) key is the committed offset. At start the coordinator reads the topic
back into memory. Group membership itself is not persisted: after a restart the members rejoin.

Everything here runs on the listener's event loop (one thread): no locks. Appends run in a
worker thread through the ``append`` callable.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final

from storagecore.config import TopicPartition
from storagecore.records.batch import NewRecord, iter_complete_batches
from storagecore.records.memory_records_builder import build_batch
from storageworker.kafka.classic_group import Group, Member
from storageworker.kafka.offset_records import (
    OFFSETS_TOPIC,
    CommittedOffset,
    batch_offset_commits,
    offset_key,
    offset_value,
    offsets_partition,
)
from storageworker.kafka.txn_offsets import PendingTxnOffsets

logger = logging.getLogger(__name__)

# Kafka error codes used here.
NONE: Final = 0
COORDINATOR_NOT_AVAILABLE: Final = 15
ILLEGAL_GENERATION: Final = 22
INCONSISTENT_GROUP_PROTOCOL: Final = 23
UNKNOWN_MEMBER_ID: Final = 25
INVALID_SESSION_TIMEOUT: Final = 26
REBALANCE_IN_PROGRESS: Final = 27
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
INVALID_GROUP_ID: Final = 24
GROUP_ID_NOT_FOUND: Final = 69
UNSTABLE_OFFSET_COMMIT: Final = 88
MEMBER_ID_REQUIRED: Final = 79
GROUP_MAX_SIZE_REACHED: Final = 81
FENCED_INSTANCE_ID: Final = 82

#: A member id handed out with MEMBER_ID_REQUIRED is forgotten if not used in this long
#: (Kafka: the session timeout the join asked for); at most this many wait per group.
PENDING_MEMBERS_MAX: Final = 1000

SESSION_TIMEOUT_MS_MIN: Final = 1_000
SESSION_TIMEOUT_MS_MAX: Final = 1_800_000


def fenced(group: Group, member_id: str, instance_id: str | None) -> int:
    """Kafka's check of a static member's ids: NONE, UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID
    (another member id holds the instance id now)."""
    if instance_id is None:
        return NONE
    current = group.static.get(instance_id)
    if current is None:
        return UNKNOWN_MEMBER_ID
    return NONE if current == member_id else FENCED_INSTANCE_ID


class GroupCoordinator:
    """Groups and committed offsets of one worker."""

    def __init__(
        self,
        append: Callable[[TopicPartition, bytes], Awaitable[Any]],
        offsets_partitions: int,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.append = append
        self.offsets_partitions = offsets_partitions
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        #: Offsets of open transactions (TxnOffsetCommit), applied by their COMMIT marker.
        self.txn_offsets = PendingTxnOffsets()
        self.rebalances = 0

    # -- committed offsets -------------------------------------------------------------------
    def load(self, records: bytes, tp: TopicPartition) -> int:
        """Apply the batches of one read of ``__consumer_offsets`` (in offset order);
        returns the number of records applied. A record that does not parse is skipped and
        logged with its offset."""
        applied = 0
        for _position, batch in iter_complete_batches(records):
            if batch.is_transactional:
                applied += self.txn_offsets.load_batch(batch, tp, self.offsets)
                continue
            for group, topic, partition, committed in batch_offset_commits(batch, tp):
                group_offsets = self.offsets.setdefault(group, {})
                if committed is None:
                    group_offsets.pop((topic, partition), None)
                else:
                    group_offsets[(topic, partition)] = committed
                applied += 1
        return applied

    async def commit(
        self, data: dict[str, Any], served: dict[str, int], now_ms: int
    ) -> dict[str, Any]:
        group_id = data["group_id"]
        generation = data["generation_id_or_member_epoch"]
        member_id = data["member_id"]
        group = self.groups.get(group_id)
        error = NONE
        if not group_id:
            error = INVALID_GROUP_ID
        elif group is not None and group.members and generation >= 0:
            # A member's commit must belong to the current generation; a simple consumer
            # (generation -1, assign()) may commit while the group has no members.
            error = fenced(group, member_id, data.get("group_instance_id"))
            if error != NONE:
                pass
            elif member_id not in group.members:
                error = UNKNOWN_MEMBER_ID
            elif generation != group.generation:
                error = ILLEGAL_GENERATION
            elif group.state == "CompletingRebalance":
                # Kafka's rule: the member knows the new generation from its JoinGroup answer
                # but not yet its assignment. While the group only prepares a rebalance the
                # current generation may commit (the revoked owner's last commit).
                error = REBALANCE_IN_PROGRESS
        elif group is not None and group.members and generation < 0:
            error = UNKNOWN_MEMBER_ID
        accepted: dict[tuple[str, int], CommittedOffset] = {}
        answers: list[dict[str, Any]] = []
        for topic in data["topics"]:
            parts = []
            for partition in topic["partitions"]:
                code, index = error, partition["partition_index"]
                if code == NONE and not 0 <= index < served.get(topic["name"], 0):
                    code = UNKNOWN_TOPIC_OR_PARTITION
                if code == NONE:
                    accepted[(topic["name"], index)] = CommittedOffset(
                        partition["committed_offset"],
                        partition["committed_leader_epoch"],
                        partition["committed_metadata"] or "",
                        now_ms,
                    )
                parts.append({"partition_index": index, "error_code": code})
            answers.append({"name": topic["name"], "partitions": parts})
        if accepted:
            records = [
                NewRecord(
                    offset_key(group_id, topic, index),
                    offset_value(c.offset, c.leader_epoch, c.metadata, c.commit_ms),
                    now_ms,
                )
                for (topic, index), c in accepted.items()
            ]
            tp = TopicPartition(OFFSETS_TOPIC, offsets_partition(group_id, self.offsets_partitions))
            try:
                await self.append(tp, build_batch(records))
            except Exception:
                logger.exception("Cannot store the offsets of group %s in %s", group_id, tp)
                for topic_answer in answers:
                    for part in topic_answer["partitions"]:
                        if part["error_code"] == NONE:
                            part["error_code"] = COORDINATOR_NOT_AVAILABLE
            else:
                self.offsets.setdefault(group_id, {}).update(accepted)
        return {"topics": answers}

    def fetch_offsets(self, data: dict[str, Any]) -> dict[str, Any]:
        group_offsets = self.offsets.get(data["group_id"], {})
        wanted = data["topics"]
        if wanted is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(group_offsets):
                by_topic.setdefault(topic, []).append(partition)
            wanted = [{"name": t, "partition_indexes": p} for t, p in by_topic.items()]
        # KIP-447: a read_committed consumer asks for stable offsets; one a transaction has
        # committed but not yet decided is UNSTABLE_OFFSET_COMMIT (the client retries).
        pending = (
            self.txn_offsets.pending_keys(data["group_id"]) if data.get("require_stable") else ()
        )
        topics = []
        for topic in wanted:
            parts = []
            for index in topic["partition_indexes"]:
                found = group_offsets.get((topic["name"], index))
                parts.append(
                    {
                        "partition_index": index,
                        "committed_offset": found.offset if found else -1,
                        "committed_leader_epoch": found.leader_epoch if found else -1,
                        "metadata": found.metadata if found else "",
                        "error_code": UNSTABLE_OFFSET_COMMIT
                        if (topic["name"], index) in pending
                        else NONE,
                    }
                )
            topics.append({"name": topic["name"], "partitions": parts})
        return {"topics": topics, "error_code": NONE}

    # -- membership --------------------------------------------------------------------------
    async def join(self, data: dict[str, Any], client_id: str, version: int) -> dict[str, Any]:
        """JoinGroup at ``version`` (v4+ asks a new dynamic member to come back with an id)."""
        group_id = data["group_id"]
        session_ms = data["session_timeout_ms"]
        protocols = [(p["name"], p["metadata"]) for p in data["protocols"]]
        if not group_id:
            return {"error_code": INVALID_GROUP_ID}
        if not SESSION_TIMEOUT_MS_MIN <= session_ms <= SESSION_TIMEOUT_MS_MAX:
            return {"error_code": INVALID_SESSION_TIMEOUT}
        group = self.groups.setdefault(group_id, Group(group_id))
        if not protocols or (
            group.members
            and (
                data["protocol_type"] != group.protocol_type
                or not self._common_protocols(group, protocols)
            )
        ):
            return {"error_code": INCONSISTENT_GROUP_PROTOCOL}
        member_id, instance_id = data["member_id"], data["group_instance_id"]
        if not member_id and instance_id is None and version >= 4:
            return self._require_member_id(group, client_id, session_ms)
        known = False
        if member_id and group.pending.pop(member_id, None) is not None:
            pass  # the id handed out with MEMBER_ID_REQUIRED: a new member joins with it
        elif member_id:
            error = fenced(group, member_id, instance_id)
            if error == NONE and member_id not in group.members:
                error = UNKNOWN_MEMBER_ID
            if error != NONE:
                return {"error_code": error, "member_id": member_id}
            known = True
        rebalance_ms = data["rebalance_timeout_ms"]
        if rebalance_ms < 0:
            rebalance_ms = session_ms
        loop = asyncio.get_running_loop()
        if not known:
            member_id = member_id or f"{instance_id or client_id or 'member'}-{uuid.uuid4()}"
            replaced = group.static.get(instance_id) if instance_id is not None else None
            if replaced is not None:
                return await self._replace_static(
                    group,
                    replaced,
                    member_id,
                    client_id=client_id,
                    protocols=protocols,
                    session_ms=session_ms,
                    rebalance_ms=rebalance_ms,
                )
            member = Member(
                member_id,
                instance_id,
                client_id,
                session_ms,
                rebalance_ms,
                data["protocol_type"],
                protocols,
            )
            group.members[member_id] = member
            if instance_id is not None:
                group.static[instance_id] = member_id
            changed = True
        else:
            member = group.members[member_id]
            changed = member.protocols != protocols or member_id == group.leader
            member.protocols = protocols
            member.session_timeout_ms, member.rebalance_timeout_ms = session_ms, rebalance_ms
        member.last_heartbeat = self.clock()
        if member.join is not None and not member.join.done():
            member.join.set_result({"error_code": UNKNOWN_MEMBER_ID, "member_id": member_id})
        member.join = loop.create_future()
        if group.protocol_type is None or not group.members.keys() - {member_id}:
            group.protocol_type = data["protocol_type"]
        if (group.state == "Stable" and not changed) or (
            group.state == "CompletingRebalance" and not changed
        ):
            member.join.set_result(self._join_answer(group, member))
        else:
            self._prepare_rebalance(group, f"member {member_id} joined")
            self._maybe_complete_join(group)
        return await member.join

    def _require_member_id(self, group: Group, client_id: str, session_ms: int) -> dict[str, Any]:
        """KIP-394: hand out a member id and wait for the member to join with it."""
        if len(group.pending) >= PENDING_MEMBERS_MAX:
            logger.warning(
                "Group %s: %d member ids handed out and not used yet; join refused",
                group.group_id,
                len(group.pending),
            )
            return {"error_code": GROUP_MAX_SIZE_REACHED}
        member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
        group.pending[member_id] = self.clock() + session_ms / 1000
        return {"error_code": MEMBER_ID_REQUIRED, "member_id": member_id}

    async def _replace_static(
        self,
        group: Group,
        old_id: str,
        new_id: str,
        *,
        client_id: str,
        protocols: list[tuple[str, bytes]],
        session_ms: int,
        rebalance_ms: int,
    ) -> dict[str, Any]:
        """A static member rejoins under a new member id: the old id is fenced; in a Stable
        group with unchanged protocols the member keeps its assignment (no rebalance)."""
        member = group.members.pop(old_id)
        assert member.instance_id is not None and group.static[member.instance_id] == old_id
        for future in (member.join, member.sync):
            if future is not None and not future.done():
                future.set_result({"error_code": FENCED_INSTANCE_ID, "member_id": old_id})
        unchanged = member.protocols == protocols
        member.member_id, member.client_id, member.protocols = new_id, client_id, protocols
        member.session_timeout_ms, member.rebalance_timeout_ms = session_ms, rebalance_ms
        member.join = member.sync = None
        member.last_heartbeat = self.clock()
        group.members[new_id] = member
        group.static[member.instance_id] = new_id
        if group.leader == old_id:
            group.leader = new_id
        logger.info(
            "Group %s: static member %s rejoined as %s (was %s)",
            group.group_id,
            member.instance_id,
            new_id,
            old_id,
        )
        if group.state == "Stable" and unchanged:
            # The member syncs next and gets its stored assignment; the leader is not asked
            # to assign again (members: none).
            return {**self._join_answer(group, member), "members": []}
        member.join = asyncio.get_running_loop().create_future()
        self._prepare_rebalance(group, f"static member {member.instance_id} rejoined")
        self._maybe_complete_join(group)
        return await member.join

    def _common_protocols(self, group: Group, protocols: list[tuple[str, bytes]]) -> set[str]:
        names = {name for name, _ in protocols}
        for member in group.members.values():
            names &= {name for name, _ in member.protocols}
        return names

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state == "PreparingRebalance":
            return
        logger.info(
            "Group %s rebalancing (generation %d): %s", group.group_id, group.generation, reason
        )
        for member in group.members.values():
            if member.sync is not None and not member.sync.done():
                member.sync.set_result({"error_code": REBALANCE_IN_PROGRESS})
        group.state = "PreparingRebalance"
        loop = asyncio.get_running_loop()
        if group.join_deadline is not None:
            group.join_deadline.cancel()
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.join_deadline = loop.call_later(timeout_ms / 1000, self._complete_join, group)

    def _maybe_complete_join(self, group: Group) -> None:
        """Complete the join once every member has rejoined and no member id handed out
        with MEMBER_ID_REQUIRED is still unused (Kafka waits for those members too: two
        consumers starting together land in one generation); the rebalance timeout completes
        it anyway."""
        if group.state != "PreparingRebalance" or group.pending:
            return
        if all(m.join is not None and not m.join.done() for m in group.members.values()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.state != "PreparingRebalance":
            return
        if group.join_deadline is not None:
            group.join_deadline.cancel()
            group.join_deadline = None
        for member_id in [
            m.member_id for m in group.members.values() if m.join is None or m.join.done()
        ]:
            logger.info("Group %s: member %s did not rejoin in time", group.group_id, member_id)
            self._remove(group, member_id)
        group.generation += 1
        self.rebalances += 1
        if not group.members:
            group.state, group.protocol, group.leader, group.protocol_type = (
                "Empty",
                None,
                None,
                None,
            )
            return
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        leader = group.members[group.leader]
        common = self._common_protocols(group, leader.protocols)
        group.protocol = next(name for name, _ in leader.protocols if name in common)
        group.state = "CompletingRebalance"
        for member in group.members.values():
            member.assignment = b""
            assert member.join is not None
            member.join.set_result(self._join_answer(group, member))
        logger.info(
            "Group %s generation %d: %d members, protocol %s, leader %s",
            group.group_id,
            group.generation,
            len(group.members),
            group.protocol,
            group.leader,
        )

    def _join_answer(self, group: Group, member: Member) -> dict[str, Any]:
        assert group.protocol is not None
        is_leader = member.member_id == group.leader
        return {
            "error_code": NONE,
            "generation_id": group.generation,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol,
            "leader": group.leader,
            "member_id": member.member_id,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.instance_id,
                    "metadata": m.metadata_for(group.protocol),
                }
                for m in group.members.values()
            ]
            if is_leader
            else [],
        }

    def _member(self, data: dict[str, Any]) -> tuple[Group | None, Member | None, int]:
        """The group and member a SyncGroup or Heartbeat names, or why not (Kafka's order:
        the static member's ids, the member id, the generation)."""
        group = self.groups.get(data["group_id"])
        member_id, generation = data["member_id"], data["generation_id"]
        member = group.members.get(member_id) if group is not None else None
        if group is not None:
            code = fenced(group, member_id, data.get("group_instance_id"))
            if code != NONE:
                return group, None, code
        if group is None or member is None:
            return group, None, UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return group, member, ILLEGAL_GENERATION
        return group, member, NONE

    async def sync(self, data: dict[str, Any]) -> dict[str, Any]:
        group, member, error = self._member(data)
        if error != NONE:
            return {"error_code": error}
        assert group is not None and member is not None
        member.last_heartbeat = self.clock()
        answer = {"protocol_type": group.protocol_type, "protocol_name": group.protocol}
        if group.state == "PreparingRebalance":
            return {"error_code": REBALANCE_IN_PROGRESS}
        if group.state == "Stable":
            return {**answer, "error_code": NONE, "assignment": member.assignment}
        member.sync = asyncio.get_running_loop().create_future()
        if member.member_id == group.leader:
            assignments = {a["member_id"]: a["assignment"] for a in data["assignments"]}
            group.state = "Stable"
            for each in group.members.values():
                each.assignment = assignments.get(each.member_id, b"")
                if each.sync is not None and not each.sync.done():
                    each.sync.set_result(
                        {**answer, "error_code": NONE, "assignment": each.assignment}
                    )
        return await member.sync

    def heartbeat(self, data: dict[str, Any]) -> dict[str, Any]:
        group, member, error = self._member(data)
        if member is not None:
            member.last_heartbeat = self.clock()
        if error == NONE and group is not None and group.state == "PreparingRebalance":
            error = REBALANCE_IN_PROGRESS
        return {"error_code": error}

    def leave(self, data: dict[str, Any], version: int) -> dict[str, Any]:
        group = self.groups.get(data["group_id"])
        leaving = (
            [{"member_id": data["member_id"], "group_instance_id": None}]
            if version < 3
            else data["members"]
        )
        answers = []
        for item in leaving:
            member_id, instance_id = item["member_id"], item["group_instance_id"]
            if group is not None and instance_id is not None:
                # A static member may leave by its instance id alone (member id empty).
                current = group.static.get(instance_id)
                code = fenced(group, member_id or (current or ""), instance_id)
                member_id = current or member_id
            else:
                code = NONE
            if code == NONE and (group is None or member_id not in group.members):
                code = UNKNOWN_MEMBER_ID
            if code == NONE:
                assert group is not None
                self._remove(group, member_id)
                logger.info("Group %s: member %s left", group.group_id, member_id)
            answers.append({**item, "error_code": code})
        if group is not None and any(a["error_code"] == NONE for a in answers):
            self._after_removal(group, "a member left")
        top = answers[0]["error_code"] if version < 3 and answers else NONE
        return {"error_code": top, "members": answers}

    @staticmethod
    def _empty(group: Group) -> None:
        group.state, group.leader, group.protocol, group.protocol_type = "Empty", None, None, None

    def _remove(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id)
        if member.instance_id is not None and group.static.get(member.instance_id) == member_id:
            del group.static[member.instance_id]
        for future in (member.join, member.sync):
            if future is not None and not future.done():
                future.set_result({"error_code": UNKNOWN_MEMBER_ID, "member_id": member_id})

    def _after_removal(self, group: Group, reason: str) -> None:
        if not group.members:
            if group.join_deadline is not None:
                group.join_deadline.cancel()
                group.join_deadline = None
            self._empty(group)
            group.generation += 1
            return
        if group.state == "PreparingRebalance":
            self._maybe_complete_join(group)
        else:
            self._prepare_rebalance(group, reason)

    def expire_sessions(self) -> None:
        """Remove members whose session timed out (called periodically)."""
        now = self.clock()
        for group in list(self.groups.values()):
            lapsed = [m for m, lapse in group.pending.items() if lapse < now]
            for member_id in lapsed:
                del group.pending[member_id]
            if lapsed:
                self._maybe_complete_join(group)
            expired = [
                m.member_id
                for m in group.members.values()
                if (m.join is None or m.join.done())
                and (m.sync is None or m.sync.done())
                and now - m.last_heartbeat > m.session_timeout_ms / 1000
            ]
            for member_id in expired:
                logger.info("Group %s: member %s session expired", group.group_id, member_id)
                self._remove(group, member_id)
            if expired:
                self._after_removal(group, "a member's session expired")

    def describe(self) -> dict[str, Any]:
        """Groups for the status page."""
        return {
            group.group_id: {
                "state": group.state,
                "generation": group.generation,
                "protocol": group.protocol,
                "members": len(group.members),
            }
            for group in self.groups.values()
        }
