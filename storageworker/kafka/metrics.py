"""Prometheus metrics of the ``kafka`` port (registered next to the worker's own)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from storageworker.kafka.counters import LATENCY_BUCKETS_S, KafkaCounters
from storageworker.kafka.transaction_coordinator import TransactionCoordinator
from storageworker.metrics import PREFIX


class KafkaCollector(Collector):
    def __init__(
        self,
        counters: KafkaCounters,
        transactions: Callable[[], TransactionCoordinator | None] = lambda: None,
    ) -> None:
        self.counters = counters
        self.transactions = transactions

    def collect(self) -> Iterator[Metric]:
        counters = self.counters
        requests = CounterMetricFamily(
            f"{PREFIX}_kafka_requests", "Kafka requests answered", labels=["api", "version"]
        )
        for (api, version), count in sorted(counters.requests.items()):
            requests.add_metric([api, str(version)], count)
        yield requests
        errors = CounterMetricFamily(
            f"{PREFIX}_kafka_errors",
            "Error codes in Kafka responses (per partition or item answered)",
            labels=["api", "code"],
        )
        for (api, code), count in sorted(counters.errors.items()):
            errors.add_metric([api, str(code)], count)
        yield errors
        latency = HistogramMetricFamily(
            f"{PREFIX}_kafka_request_seconds",
            "Time from a request's arrival to its response (Fetch includes max wait)",
            labels=["api"],
        )
        for api, histogram in sorted(counters.latency.items()):
            cumulative, buckets = 0, []
            for bound, count in zip(LATENCY_BUCKETS_S, histogram.buckets, strict=True):
                cumulative += count
                buckets.append((repr(bound), cumulative))
            buckets.append(("+Inf", histogram.count))
            latency.add_metric([api], buckets, histogram.total_s)
        yield latency
        for name, help_text, value in (
            ("kafka_received_bytes", "Bytes of Kafka requests", counters.bytes_in),
            ("kafka_sent_bytes", "Bytes of Kafka responses", counters.bytes_out),
            (
                "kafka_sent_zero_copy_bytes",
                "Of the sent bytes: records sent with sendfile from segment files",
                counters.bytes_out_zero_copy,
            ),
            ("kafka_connections", "Kafka connections accepted", counters.connections),
            (
                "kafka_refused_connections",
                "Connections over the limit",
                counters.refused_connections,
            ),
            (
                "kafka_malformed_requests",
                "Requests that could not be decoded",
                counters.malformed_requests,
            ),
            (
                "kafka_timed_out_connections",
                "Connections closed by the request or idle timeout",
                counters.timed_out_connections,
            ),
            (
                "kafka_failed_authentications",
                "SASL authentications refused",
                counters.failed_authentications,
            ),
            (
                "kafka_duplicate_batches",
                "Idempotent producer retries acknowledged without appending",
                counters.duplicate_batches,
            ),
        ):
            counter = CounterMetricFamily(f"{PREFIX}_{name}", help_text)
            counter.add_metric([], value)
            yield counter
        open_connections = GaugeMetricFamily(
            f"{PREFIX}_kafka_open_connections", "Kafka connections open now"
        )
        open_connections.add_metric([], counters.open_connections)
        yield open_connections
        coordinator = self.transactions()
        if coordinator is not None:
            yield from _transaction_metrics(coordinator)


def _transaction_metrics(coordinator: TransactionCoordinator) -> Iterator[Metric]:
    counts = coordinator.counters
    for name, help_text, value in (
        ("committed", "Transactions committed", counts.committed),
        ("aborted", "Transactions aborted (by their producer, a new instance or timeout)",
         counts.aborted),
        ("aborted_by_timeout", "Transactions aborted by transaction.timeout.ms",
         counts.aborted_by_timeout),
        ("fenced_producers", "Producers fenced by a new instance of their transactional id",
         counts.fenced_producers),
        ("markers", "Transaction markers written", counts.markers_written),
        ("expired_ids", "Transactional ids expired (transactional.id.expiration.ms)",
         counts.expired_ids),
    ):  # fmt: skip
        counter = CounterMetricFamily(f"{PREFIX}_kafka_transactions_{name}", help_text)
        counter.add_metric([], value)
        yield counter
    states = GaugeMetricFamily(
        f"{PREFIX}_kafka_transactional_ids", "Transactional ids by state", labels=["state"]
    )
    for state, count in sorted(coordinator.status()["states"].items()):
        states.add_metric([state], count)
    yield states
