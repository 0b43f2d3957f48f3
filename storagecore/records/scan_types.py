"""Result type shared by the two implementations of the record scan."""

from __future__ import annotations

from typing import NamedTuple

from storagecore.records.layout import NO_TIMESTAMP


class ScanResult(NamedTuple):
    """What the append path needs from a batch's records, without building Record objects."""

    problem: str | None
    max_timestamp: int
    min_timestamp: int
    null_key_count: int
    offsets_sequential: bool

    @classmethod
    def failed(cls, problem: str) -> ScanResult:
        return cls(problem, NO_TIMESTAMP, NO_TIMESTAMP, 0, False)
