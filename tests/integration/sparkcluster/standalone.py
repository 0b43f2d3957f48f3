"""A Spark standalone cluster on loopback, started from pyspark's own distribution.

pyspark's package is a Spark distribution (``jars/``, ``bin/spark-class``): ``spark-class``
runs ``org.apache.spark.deploy.master.Master`` and ``org.apache.spark.deploy.worker.Worker``
exactly as ``sbin/start-master.sh`` / ``start-worker.sh`` of a full distribution would (pyspark
ships no ``start-master.sh``). :class:`StandaloneCluster` starts one master and ``workers``
workers of ``cores`` cores each, waits until the master's JSON status page lists every worker
ALIVE, and stops them (SIGTERM, then SIGKILL) at the end. Each process logs to a file under
``root``; a failure to start raises :class:`ClusterError` with those logs' tails.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0


class ClusterError(RuntimeError):
    """The master or a worker did not start; the message carries their logs' tails."""


def free_port() -> int:
    """A loopback port nobody listens on now (the kernel's pick for port 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spark_env() -> dict[str, str]:
    """The environment of the cluster's JVMs and the driver: loopback only, this interpreter for
    the Python workers (it has the project installed), pyspark's distribution as SPARK_HOME."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        # Small daemons: the master and the workers only schedule; executors get their own heap.
        SPARK_DAEMON_MEMORY="256m",
    )
    return env


class StandaloneCluster:
    """One master and ``workers`` workers, each worker offering ``cores`` cores and
    ``memory`` to executors."""

    def __init__(self, root: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.root = root
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.webui_port = free_port()
        self.processes: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, args: list[str]) -> None:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(SPARK_CLASS), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=spark_env(),
                cwd=self.root,
                start_new_session=True,  # its own group: stop() ends the JVM and its children
            )
        self.processes.append((name, process, log))

    def start(self) -> StandaloneCluster:
        if not SPARK_CLASS.is_file():
            raise ClusterError(f"{SPARK_CLASS} not found: pyspark's distribution lacks bin/")
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn(
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host", "127.0.0.1",
                    "--port", str(self.port),
                    "--webui-port", str(self.webui_port),
                ],
            )  # fmt: skip
            for n in range(self.workers):
                work_dir = self.root / f"worker-{n}"
                work_dir.mkdir(exist_ok=True)
                self._spawn(
                    f"worker-{n}",
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        "--host", "127.0.0.1",
                        "--cores", str(self.cores),
                        "--memory", self.memory,
                        "--work-dir", str(work_dir),
                        "--webui-port", str(free_port()),
                        self.master_url,
                    ],
                )  # fmt: skip
            self._wait_for_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def status(self) -> dict[str, Any]:
        """The master's JSON status page (workers, applications)."""
        url = f"http://127.0.0.1:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            status: dict[str, Any] = json.load(response)
        return status

    def alive_workers(self) -> int:
        try:
            status = self.status()
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
            return 0
        return sum(1 for worker in status.get("workers", []) if worker.get("state") == "ALIVE")

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.alive_workers() < self.workers:
            for name, process, _log in self.processes:
                if process.poll() is not None:
                    raise ClusterError(f"{name} exited with {process.returncode}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{self.workers} worker(s) not ALIVE at {self.master_url} within "
                    f"{START_TIMEOUT_S:.0f} s\n{self.logs()}"
                )
            time.sleep(0.2)  # polling the master's page: the condition is the wait

    def logs(self, tail_bytes: int = 3000) -> str:
        parts = []
        for name, _process, log in self.processes:
            text = log.read_bytes()[-tail_bytes:].decode(errors="replace") if log.exists() else ""
            parts.append(f"--- {name} ({log})\n{text}")
        return "\n".join(parts)

    def stop(self) -> None:
        for _name, process, _log in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for _name, process, _log in reversed(self.processes):
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.processes.clear()
