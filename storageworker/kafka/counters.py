"""What the ``kafka`` port counts: connections, requests by API and version, errors by code,
latency histograms, bytes. Written by :mod:`.server` on its event loop, read by
:mod:`.metrics` (Prometheus) from the scrape thread; plain integers, no locks (a scrape may
see one request's counters half-updated, never a torn integer).
"""

from __future__ import annotations

import dataclasses
from typing import Final

LATENCY_BUCKETS_S: Final = (
    *(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1.0, 2.5, 5.0, 10.0, 30.0),  # Fetch waits, group joins
)


@dataclasses.dataclass
class Histogram:
    buckets: list[int] = dataclasses.field(default_factory=lambda: [0] * len(LATENCY_BUCKETS_S))
    count: int = 0
    total_s: float = 0.0

    def observe(self, seconds: float) -> None:
        self.count += 1
        self.total_s += seconds
        for i, bound in enumerate(LATENCY_BUCKETS_S):
            if seconds <= bound:
                self.buckets[i] += 1
                break


@dataclasses.dataclass
class KafkaCounters:
    """Monotonic counters for the worker's metrics."""

    connections: int = 0
    open_connections: int = 0
    requests: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)
    errors: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)
    """(API, error code) → partitions/items answered with that code (0 excluded)."""
    latency: dict[str, Histogram] = dataclasses.field(default_factory=dict)
    bytes_in: int = 0
    bytes_out: int = 0
    #: Of ``bytes_out``: record bytes sent by sendfile straight from segment files.
    bytes_out_zero_copy: int = 0
    refused_connections: int = 0
    malformed_requests: int = 0
    timed_out_connections: int = 0
    failed_authentications: int = 0
    duplicate_batches: int = 0
