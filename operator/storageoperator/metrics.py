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
from its registration, so ``increase()`` sees its first error.

Written out in the Prometheus text format here rather than with prometheus_client: DESIGN keeps
that library to the worker, and three counters need no more than this module.

:func:`serve` starts the HTTP endpoint (``logkeeper operator --metrics-address``); kopf's
liveness endpoint is separate and unchanged. Nothing here talks to the Kubernetes API.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, TypeVar, cast

import kopf

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


class Counter:
    """A monotonic counter family with at most one label (thread-safe)."""

    def __init__(self, name: str, help_text: str, label: str | None = None) -> None:
        self.name, self.help_text, self.label = name, help_text, label
        self._lock = threading.Lock()
        self._values: dict[str, float] = {} if label is not None else {"": 0.0}

    def labels(self, **labels: str) -> _Child:
        assert self.label is not None and set(labels) == {self.label}, labels
        value = labels[self.label]
        with self._lock:
            self._values.setdefault(value, 0.0)
        return _Child(self, value)

    def inc(self, amount: float = 1.0, *, _label: str = "") -> None:
        with self._lock:
            self._values[_label] = self._values.get(_label, 0.0) + amount

    def samples(self) -> list[tuple[dict[str, str], float]]:
        with self._lock:
            items = sorted(self._values.items())
        return [({self.label: v} if self.label is not None else {}, n) for v, n in items]


class _Child:
    def __init__(self, family: Counter, label_value: str) -> None:
        self._family, self._label_value = family, label_value

    def inc(self, amount: float = 1.0) -> None:
        self._family.inc(amount, _label=self._label_value)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Registry:
    """The operator's counters and their exposition."""

    def __init__(self, *families: Counter) -> None:
        self.families = families

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        for family in self.families:
            if f"{family.name}_total" == name:
                for sample_labels, value in family.samples():
                    if sample_labels == (labels or {}):
                        return value
        return None

    def exposition(self) -> bytes:
        lines = []
        for family in self.families:
            total = f"{family.name}_total"
            lines += [f"# HELP {total} {family.help_text}", f"# TYPE {total} counter"]
            for labels, value in family.samples():
                text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                lines.append(f"{total}{{{text}}} {value!r}" if text else f"{total} {value!r}")
        return ("\n".join(lines) + "\n").encode()


HANDLER_RUNS: Final = Counter(
    "logkeeper_operator_handler_runs", "kopf handler invocations, by handler.", "handler"
)
HANDLER_ERRORS: Final = Counter(
    "logkeeper_operator_handler_errors",
    "kopf handler invocations that raised (retried by kopf), by handler.",
    "handler",
)
WORKER_STATUS_ERRORS: Final = Counter(
    "logkeeper_operator_worker_status_errors",
    "Failed reads of a worker's /v1/status (no pod, no IP, no answer or not JSON).",
)
REGISTRY: Final = Registry(HANDLER_RUNS, HANDLER_ERRORS, WORKER_STATUS_ERRORS)


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


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] != "/metrics":
            self.send_error(404, "only /metrics is served here")
            return
        body = REGISTRY.exposition()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def serve(address: str) -> int:
    """Serve ``/metrics`` on ``host:port`` in a daemon thread; the port bound (0: any free)."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"metrics address {address!r}: expected HOST:PORT, e.g. 0.0.0.0:9090")
    server = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port_text)), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="operator-metrics", daemon=True).start()
    return int(server.server_port)
