"""An uncleanable partition: why, since when, and when the cleaner tries it again.

Kafka marks a partition uncleanable when its clean throws and leaves it so until the broker
restarts (KAFKA-19895): its size then grows without bound. Here the mark keeps its reason and
is retried with exponential backoff (RETRY_INITIAL_MS doubling up to RETRY_MAX_MS), or at once
when an operator asks (the ``retry-uncleanable`` admin verb or the
``logkeeper.io/retry-uncleanable`` annotation). The mark, with its reason, stays until a retry
succeeds: a retry that fails again only moves the next attempt further out.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

RETRY_INITIAL_MS: Final = 60_000
RETRY_MAX_MS: Final = 3_600_000


def retry_delay_ms(attempts: int) -> int:
    """The wait after the ``attempts``-th failure (1: the first)."""
    return min(RETRY_INITIAL_MS << min(max(attempts - 1, 0), 16), RETRY_MAX_MS)


@dataclasses.dataclass(frozen=True, slots=True)
class UncleanableMark:
    reason: str
    since_ms: int
    attempts: int
    """Failed cleans since the mark was set (1 when first marked)."""
    retry_at_ms: int

    @classmethod
    def first(cls, reason: str, now_ms: int) -> UncleanableMark:
        return cls(reason, now_ms, 1, now_ms + retry_delay_ms(1))

    def failed_again(self, reason: str, now_ms: int) -> UncleanableMark:
        attempts = self.attempts + 1
        return dataclasses.replace(
            self, reason=reason, attempts=attempts, retry_at_ms=now_ms + retry_delay_ms(attempts)
        )

    def retry_now(self, now_ms: int) -> UncleanableMark:
        return dataclasses.replace(self, retry_at_ms=now_ms)

    def as_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "sinceMs": self.since_ms,
            "attempts": self.attempts,
            "retryAtMs": self.retry_at_ms,
        }
