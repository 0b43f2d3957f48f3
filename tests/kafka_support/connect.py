"""Kafka Connect's distributed worker (connect-runtime 4.3.1) as a test process.

It keeps its connector configs, source offsets and statuses in three compacted topics of the
Kafka cluster it is given (creating them through the Admin API, then checking with
DescribeConfigs that each has ``cleanup.policy=compact``), and serves its REST API on a free
loopback port. The FileStream connectors (connect-file) are on its classpath.
"""

from __future__ import annotations

import json
import signal
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.kafka_support.broker import free_port
from tests.kafka_support.java_client import JAVA_OPTIONS
from tests.kafka_support.kafka_apps import AppProcess, apps_classpath


class ConnectWorker:
    def __init__(self, root: Path, bootstrap: str, group: str, **extra: str) -> None:
        self.root = root
        self.bootstrap = bootstrap
        self.group = group
        self.port = free_port()
        self.extra = extra
        self.process: AppProcess | None = None
        self.starts = 0

    def properties(self) -> str:
        values = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group,
            "config.storage.topic": f"{self.group}-configs",
            "offset.storage.topic": f"{self.group}-offsets",
            "status.storage.topic": f"{self.group}-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "listeners": f"http://127.0.0.1:{self.port}",
            "rest.advertised.host.name": "127.0.0.1",
            "offset.flush.interval.ms": "500",
            "plugin.discovery": "only_scan",
            **self.extra,
        }
        return "".join(f"{key}={value}\n" for key, value in values.items())

    def start(self) -> None:
        self.starts += 1
        config = self.root / f"{self.group}.properties"
        config.write_text(self.properties(), encoding="utf-8")
        command = [
            "java", *JAVA_OPTIONS, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp", apps_classpath(), "org.apache.kafka.connect.cli.ConnectDistributed",
            str(config),
        ]  # fmt: skip
        self.process = AppProcess(command, self.root / f"{self.group}-{self.starts}.log")
        self.wait(lambda: self._get("/connectors") is not None, "the REST API", 180)

    def stop(self) -> int:
        """SIGTERM (Connect stops its tasks, commits offsets) and the exit status."""
        process = self.process
        assert process is not None
        process.process.send_signal(signal.SIGTERM)
        code = process.process.wait(90)
        process.stop()
        self.process = None
        return code

    def kill(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    # -- REST ------------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
        return json.loads(text) if text else None

    def _get(self, path: str) -> Any:
        try:
            return self._call("GET", path)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def put_connector(self, name: str, config: dict[str, str]) -> None:
        self._call("PUT", f"/connectors/{name}/config", config)

    def running(self, name: str) -> bool:
        status = self._get(f"/connectors/{name}/status")
        if not status or status["connector"]["state"] != "RUNNING":
            return False
        tasks = status.get("tasks") or []
        return bool(tasks) and all(task["state"] == "RUNNING" for task in tasks)

    def wait(self, check: Any, what: str, timeout_s: float = 120) -> None:
        """Until ``check()`` holds (polled every 200 ms); fails naming ``what`` and the log."""
        pause = threading.Event()
        for _ in range(int(timeout_s * 5)):
            if check():
                return
            process = self.process
            if process is not None and process.process.poll() is not None:
                break
            pause.wait(0.2)
        tail = self.process.stderr_tail() if self.process is not None else ""
        raise AssertionError(f"Kafka Connect: no {what}; its log ends:\n{tail}")
