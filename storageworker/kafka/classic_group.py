"""The state of one group of the classic protocol and of its members (Kafka's ``ClassicGroup``
and ``ClassicGroupMember``). Plain data: :mod:`.groups` moves it between states and answers the
requests; nothing here blocks or does I/O.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any


@dataclasses.dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    last_heartbeat: float = 0.0
    assignment: bytes = b""
    join: asyncio.Future[dict[str, Any]] | None = None
    sync: asyncio.Future[dict[str, Any]] | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next(meta for name, meta in self.protocols if name == protocol)


@dataclasses.dataclass
class Group:
    group_id: str
    state: str = "Empty"
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = dataclasses.field(default_factory=dict)
    join_deadline: asyncio.TimerHandle | None = None
    #: Member ids handed out with MEMBER_ID_REQUIRED → when they lapse (clock seconds).
    pending: dict[str, float] = dataclasses.field(default_factory=dict)
    #: group.instance.id → the member id of that static member now.
    # Invariant: every value is a key of ``members`` whose ``instance_id`` is the key.
    static: dict[str, str] = dataclasses.field(default_factory=dict)
