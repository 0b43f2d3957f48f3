"""A compact-now request and what became of it: every request ends in a terminal outcome.

A request asks for one cleaning pass of a partition whatever its dirty ratio. It is PENDING
until one of these ends it:
- a round covers the dirty range it found: DONE;
- there is nothing to clean (no dirty byte below the first uncleanable offset): NOTHING_TO_CLEAN,
  at once;
- the partition cannot be cleaned now (paused, uncleanable, offline): REFUSED, at once, with the
  reason;
- a pause or a deletion stops the round: ABORTED;
- the round fails (the partition becomes uncleanable): FAILED.

Kafka has no such request; its ``kafka-log-dirs``/``LogCleanerManager`` only clean by ratio and
``max.compaction.lag.ms``. This is the admin verb's and the ``logkeeper.io/compact-now``
annotation's answer, kept per partition for status (the latest request of each).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class Outcome(enum.Enum):
    PENDING = "pending"
    DONE = "done"
    NOTHING_TO_CLEAN = "nothing-to-clean"
    REFUSED = "refused"
    ABORTED = "aborted"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self is not Outcome.PENDING


@dataclasses.dataclass(frozen=True, slots=True)
class CompactionRequest:
    requested_ms: int
    outcome: Outcome = Outcome.PENDING
    finished_ms: int | None = None
    detail: str = ""

    def finish(self, outcome: Outcome, now_ms: int, detail: str) -> CompactionRequest:
        assert outcome.terminal, outcome
        return dataclasses.replace(self, outcome=outcome, finished_ms=now_ms, detail=detail)

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.outcome.value,
            "requestedMs": self.requested_ms,
            "finishedMs": self.finished_ms,
            "detail": self.detail,
        }
