"""The operator's own Prometheus metrics, and the decorator that counts handler runs.

Names (the chart's alert rules query them; keep them):

* ``logkeeper_operator_handler_runs_total{handler}``: kopf handler invocations;
* ``logkeeper_operator_handler_errors_total{handler}``: invocations that raised (kopf then
  retries them: a temporary or a permanent error alike), except :class:`Waiting`, which is a
  handler polling for something that is on its way (a Topic deletion waiting for its worker),
  not a failure;
* ``logkeeper_operator_worker_status_errors_total``: failed reads of a worker's ``/v1/status``
  (no pod, no IP yet, no answer, not JSON).

``handler`` is the kopf handler's id (the function's name: ``volume_changed``,
``topic_changed``, ``topic_deleted``, ``report_status``); both counters of a handler exist at 0
from its registration, so ``increase()`` sees its first error. The process and platform
collectors of prometheus_client come along (CPU, memory, file descriptors).

:func:`serve` starts the HTTP endpoint (``logkeeper operator --metrics-address``); kopf's
liveness endpoint is separate and unchanged. Nothing here talks to the Kubernetes API.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import kopf
import prometheus_client
from prometheus_client import CollectorRegistry, Counter

REGISTRY: Final = CollectorRegistry(auto_describe=True)
prometheus_client.ProcessCollector(registry=REGISTRY)
prometheus_client.PlatformCollector(registry=REGISTRY)

HANDLER_RUNS: Final = Counter(
    "logkeeper_operator_handler_runs",
    "kopf handler invocations, by handler.",
    ["handler"],
    registry=REGISTRY,
)
HANDLER_ERRORS: Final = Counter(
    "logkeeper_operator_handler_errors",
    "kopf handler invocations that raised (retried by kopf), by handler.",
    ["handler"],
    registry=REGISTRY,
)
WORKER_STATUS_ERRORS: Final = Counter(
    "logkeeper_operator_worker_status_errors",
    "Failed reads of a worker's /v1/status (no pod, no IP, no answer or not JSON).",
    registry=REGISTRY,
)


class Waiting(kopf.TemporaryError):
    """A handler that waits for something under way: kopf retries it after ``delay``, and it
    does not count as a handler error."""


F = TypeVar("F", bound=Callable[..., Any])


def counted(handler: F) -> F:
    """Count the runs and errors of a kopf handler (a synchronous one); put it under the
    ``@kopf.on...`` decorators, which then register the counted function under its name."""
    name = handler.__name__
    runs = HANDLER_RUNS.labels(handler=name)
    errors = HANDLER_ERRORS.labels(handler=name)

    @functools.wraps(handler)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        runs.inc()
        try:
            return handler(*args, **kwargs)
        except Waiting:
            raise
        except Exception:
            errors.inc()
            raise

    return cast(F, wrapper)


def serve(address: str) -> int:
    """Serve ``/metrics`` on ``host:port`` in a daemon thread; the port bound (0: any free)."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"metrics address {address!r}: expected HOST:PORT, e.g. 0.0.0.0:9090")
    server, _ = prometheus_client.start_http_server(
        int(port_text), addr=host.strip("[]") or "0.0.0.0", registry=REGISTRY
    )
    return int(server.server_port)
