"""The worker's HTTP port: health, readiness, metrics, status and the admin verbs.

    GET  /healthz                      200 while the process runs
    GET  /readyz                       200 once every log is loaded, 503 before and at shutdown
    GET  /metrics                      Prometheus text exposition
    GET  /v1/status                    the status document (storageworker.status)
    POST /v1/volume/<verb>             verb: pause-cleaning, resume-cleaning, pause-retention,
    POST /v1/topics/<topic>/<verb>           resume-retention, compact-now, retry-uncleanable
    POST /v1/compaction/begin          a compact job's rounds: {"topics": [...], "partitions":
                                       [...], "lease_ms": N} → plans and pinned paths
    POST /v1/compaction/<job>/finish   {"cleaned": {"<topic>-<p>": [bytes per group]}} →
                                       per partition swapped / changed / failed
    POST /v1/compaction/<job>/abort    drop the job's rounds (storageworker.external_rounds)

Every verb answers with where it left each partition it touched: pauses and resumes with the
cleaner state (``LogCleaningPaused`` once a running clean has stopped), compact-now with each
request's outcome (``nothing-to-clean`` and ``refused`` at once, else ``pending`` until status
shows it ``done``, ``aborted`` or ``failed``), retry-uncleanable with the partitions it retries.

Admin calls (the POSTs) need ``Authorization: Bearer <token>`` when a token file is
configured; without one they are accepted from loopback clients only. Handlers are thin: they
call Worker methods and the pure status and metrics builders.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from storagecore.errors import ConfigError
from storageworker import metrics, status
from storageworker.controls import VERBS
from storageworker.worker import Worker

logger = logging.getLogger(__name__)
ADMIN_VERBS = (*VERBS, "compact-now", "retry-uncleanable")
#: The largest admin request body read (a compact job's finish: a few numbers per partition).
BODY_BYTES_MAX = 1 << 20


def read_token(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"worker.adminTokenFile {path}: cannot read the token: {exc}") from None
    if not token:
        raise ConfigError(f"worker.adminTokenFile {path}: the file is empty")
    return token


class _Handler(BaseHTTPRequestHandler):
    server: AdminServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("http %s: " + format, self.client_address[0], *args)

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, code: int, document: Any) -> None:
        body = json.dumps(document, indent=2, sort_keys=True).encode() + b"\n"
        self._send(code, body, "application/json")

    def do_GET(self) -> None:
        worker = self.server.worker
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
        elif path == "/readyz":
            ready, why = worker.readiness()
            self._send(200 if ready else 503, f"{why}\n".encode(), "text/plain")
        elif path == "/metrics":
            self._send(200, metrics.exposition(self.server.registry), metrics.CONTENT_TYPE)
        elif path == "/v1/status":
            try:
                query = status.parse_query(self.path.partition("?")[2])
            except ValueError as exc:
                self._json(400, {"error": str(exc)})
                return
            self._json(200, status.volume_status(worker, query))
        else:
            self._json(404, {"error": f"no such path {path!r}"})

    def _authorized(self) -> bool:
        token = self.server.token
        if token is not None:
            header = self.headers.get("Authorization", "")
            given = header[len("Bearer ") :] if header.startswith("Bearer ") else ""
            if hmac.compare_digest(given.encode(), token.encode()):
                return True
            self._json(401, {"error": "admin calls need Authorization: Bearer <token>"})
            return False
        if ipaddress.ip_address(self.client_address[0]).is_loopback:
            return True
        self._json(403, {"error": "admin calls are accepted from loopback only (no token set)"})
        return False

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, BODY_BYTES_MAX)) if length else b""
        if not self._authorized():
            return
        parts = [p for p in self.path.split("?", 1)[0].split("/") if p]
        if parts[:2] == ["v1", "compaction"]:
            self._compaction(parts[2:], body, length)
            return
        if len(parts) == 3 and parts[:2] == ["v1", "volume"]:
            topic, verb = None, parts[2]
        elif len(parts) == 4 and parts[:2] == ["v1", "topics"]:
            topic, verb = parts[2], parts[3]
        else:
            self._json(404, {"error": f"no such admin call {self.path!r}"})
            return
        if verb not in ADMIN_VERBS:
            self._json(404, {"error": f"unknown verb {verb!r} (one of {', '.join(ADMIN_VERBS)})"})
            return
        worker = self.server.worker
        if worker.state != "running":
            self._json(503, {"error": f"worker is {worker.state}"})
            return
        try:
            if topic is not None and topic not in worker.topics:
                raise ConfigError(f"unknown topic {topic!r}")
            if verb == "compact-now":
                asked = worker.compact_now(topic)
                self._json(
                    200,
                    {
                        "ok": True,
                        "verb": verb,
                        "topic": topic,
                        "requested": [str(tp) for tp in asked],
                        "partitions": {str(tp): r.as_dict() for tp, r in asked.items()},
                    },
                )
            elif verb == "retry-uncleanable":
                retried = worker.retry_uncleanable(topic)
                self._json(
                    200,
                    {
                        "ok": True,
                        "verb": verb,
                        "topic": topic,
                        "retried": [str(tp) for tp in retried],
                    },
                )
            else:
                worker.control(verb, topic)
                self._json(
                    200,
                    {
                        "ok": True,
                        "verb": verb,
                        "topic": topic,
                        "partitions": worker.control_states(topic),
                    },
                )
        except ConfigError as exc:
            self._json(404, {"error": str(exc)})
        logger.info("Admin call %s on %s", verb, topic or "the volume")

    def _compaction(self, parts: list[str], body: bytes, length: int) -> None:
        """The compact job's calls (storageworker.external_rounds)."""
        worker = self.server.worker
        rounds = worker.external_rounds
        if worker.state != "running" or rounds is None:
            self._json(503, {"error": f"worker is {worker.state}"})
            return
        try:
            if length > BODY_BYTES_MAX:
                raise ConfigError(f"request body of {length} bytes (at most {BODY_BYTES_MAX})")
            try:
                document = json.loads(body or b"{}")
            except json.JSONDecodeError as exc:
                raise ConfigError(f"request body is not JSON: {exc}") from None
            if not isinstance(document, dict):
                raise ConfigError("request body must be a JSON object")
            if parts == ["begin"]:
                chosen = rounds.chosen(
                    [str(t) for t in document.get("topics", [])],
                    [str(p) for p in document.get("partitions", [])],
                )
                self._json(200, rounds.begin(chosen, int(document.get("lease_ms", 3_600_000))))
            elif len(parts) == 2 and parts[1] == "finish":
                cleaned = document.get("cleaned", {})
                if not isinstance(cleaned, dict):
                    raise ConfigError("'cleaned' must map <topic>-<partition> to sizes")
                sizes = {str(k): [int(n) for n in v] for k, v in cleaned.items()}
                self._json(200, {"partitions": rounds.finish(parts[0], sizes)})
            elif len(parts) == 2 and parts[1] == "abort":
                rounds.abort(parts[0])
                self._json(200, {"ok": True})
            else:
                self._json(404, {"error": f"no such compaction call {self.path!r}"})
        except (ConfigError, ValueError, TypeError) as exc:
            self._json(400, {"error": str(exc)})


class AdminServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, worker: Worker, host: str, port: int, token: str | None) -> None:
        super().__init__((host, port), _Handler)
        self.worker = worker
        self.token = token
        self.registry = metrics.registry_for(worker)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.serve_forever, name="logkeeper-http", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
