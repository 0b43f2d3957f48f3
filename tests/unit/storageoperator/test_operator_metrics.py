"""The operator's own metrics: the handler decorator counts runs and errors (a failing handler
moves the error counter, a waiting one does not), every kopf handler is counted, and the
endpoint serves the names the chart's alert rules query."""

from __future__ import annotations

import urllib.request
from typing import Any

import kopf
import pytest

from storageoperator import handlers, metrics

NAMES = (
    "logkeeper_operator_handler_runs_total",
    "logkeeper_operator_handler_errors_total",
    "logkeeper_operator_worker_status_errors_total",
)


def sample(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


@metrics.counted
def failing_handler(**_: Any) -> None:
    raise RuntimeError("the API answered 403")


@metrics.counted
def permanent_handler(**_: Any) -> None:
    raise kopf.PermanentError("spec.size is not a quantity")


@metrics.counted
def waiting_handler(**_: Any) -> None:
    raise metrics.Waiting("the worker has not confirmed yet", delay=2)


@metrics.counted
def fine_handler(**kwargs: Any) -> str:
    return str(kwargs["name"])


def test_series_exist_at_zero_from_registration() -> None:
    for handler in ("fine_handler", "failing_handler"):
        assert (
            metrics.REGISTRY.get_sample_value(
                "logkeeper_operator_handler_errors_total", {"handler": handler}
            )
            is not None
        )


@pytest.mark.parametrize(
    ("handler", "error"),
    [(failing_handler, RuntimeError), (permanent_handler, kopf.PermanentError)],
)
def test_a_failing_handler_moves_the_error_counter(handler: Any, error: type) -> None:
    name = handler.__name__
    runs = sample("logkeeper_operator_handler_runs_total", handler=name)
    errors = sample("logkeeper_operator_handler_errors_total", handler=name)
    with pytest.raises(error):
        handler(name="x")
    assert sample("logkeeper_operator_handler_runs_total", handler=name) == runs + 1
    assert sample("logkeeper_operator_handler_errors_total", handler=name) == errors + 1


def test_a_successful_or_waiting_run_is_not_an_error() -> None:
    for handler in ("fine_handler", "waiting_handler"):
        before = sample("logkeeper_operator_handler_errors_total", handler=handler)
        runs = sample("logkeeper_operator_handler_runs_total", handler=handler)
        if handler == "fine_handler":
            assert fine_handler(name="v1") == "v1"
        else:
            with pytest.raises(kopf.TemporaryError):  # kopf still retries it
                waiting_handler()
        assert sample("logkeeper_operator_handler_runs_total", handler=handler) == runs + 1
        assert sample("logkeeper_operator_handler_errors_total", handler=handler) == before


def test_every_kopf_resource_handler_is_counted() -> None:
    registry = kopf.get_default_registry()
    registered = [
        h.fn
        for part in (registry._changing, registry._spawning)
        for h in part.get_all_handlers()
        if getattr(h.fn, "__module__", "") == handlers.__name__
    ]
    names = {fn.__name__ for fn in registered}
    assert names == {"volume_changed", "topic_changed", "topic_deleted", "report_status"}
    for fn in registered:
        assert getattr(fn, "__wrapped__", None) is not None, f"{fn.__name__} is not counted"
        assert (
            metrics.REGISTRY.get_sample_value(
                "logkeeper_operator_handler_runs_total", {"handler": fn.__name__}
            )
            is not None
        )


def test_the_endpoint_serves_the_names() -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        metrics.serve("9090")
    port = metrics.serve("127.0.0.1:0")
    metrics.WORKER_STATUS_ERRORS.inc()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    for name in NAMES:
        assert f"\n{name}" in text, name
    assert 'logkeeper_operator_handler_runs_total{handler="volume_changed"}' in text
    # Parsed by Prometheus's own parser: the exposition is valid text format.
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["logkeeper_operator_worker_status_errors"].samples[0].value >= 1


def test_every_operator_metric_the_alerts_and_dashboards_query_is_exported() -> None:
    """The chart's rules and panels query ``logkeeper_operator_*`` names; the operator's own
    registry exports each (the worker's side is checked in test_alerts)."""
    from tests.unit.storageoperator.test_alerts import (
        dashboard_expressions,
        exported_names,
        queried_metrics,
        rules,
    )

    queried = set().union(
        *(queried_metrics(r["expr"]) for r in rules()),
        *(queried_metrics(e) for e in dashboard_expressions()),
    )
    operator = {n for n in queried if n.startswith("logkeeper_operator_")}
    assert operator, "no rule or panel reads the operator's metrics"
    missing = operator - exported_names(metrics.REGISTRY.exposition())
    assert not missing, f"queried but not exported by the operator: {sorted(missing)}"
    assert set(NAMES) <= exported_names(metrics.REGISTRY.exposition())
