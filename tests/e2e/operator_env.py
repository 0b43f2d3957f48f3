"""The e2e tests' environment (test_operator_*.py): the fake API server with the CRDs applied,
the fake kubelet starting the real worker (``logkeeper serve``) from the rendered StatefulSet
and ConfigMap, and the real operator (``logkeeper operator``, a process) against them, with the
official kubernetes client's APIs; the example StorageVolume and Topics, a Ready check, and
kubectl and helm run against the fake cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from storageoperator import topic_set
from tests.k8s.fake_apiserver import FakeCluster
from tests.k8s.kubelet import FakeKubelet

ROOT = Path(__file__).parents[2]
GROUP, VERSION, NS = "logkeeper.io", "v1alpha1", "default"
STATUS_INTERVAL_S = 1.0


class Env:
    def __init__(self, root: Path, operator_env: dict[str, str] | None = None) -> None:
        self.root = root
        self.cluster = FakeCluster(root)
        configuration = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            str(self.cluster.kubeconfig), client_configuration=configuration
        )
        self.api = kubernetes.client.ApiClient(configuration)
        self.custom = kubernetes.client.CustomObjectsApi(self.api)
        self.core = kubernetes.client.CoreV1Api(self.api)
        self.apps = kubernetes.client.AppsV1Api(self.api)
        extensions = kubernetes.client.ApiextensionsV1Api(self.api)
        for path in sorted((ROOT / "crds").glob("*.yaml")):
            extensions.create_custom_resource_definition(yaml.safe_load(path.read_text()))
        self.kubelet = FakeKubelet(self.api, root / "nodes")
        self.kubelet.start()
        self.operator_log = open(root / "operator.log", "ab")  # noqa: SIM115
        self.start_operator(operator_env or {})

    def start_operator(self, operator_env: dict[str, str], *args: str) -> None:
        self.operator = subprocess.Popen(
            [sys.executable, "-m", "logkeeper.cli", "--log-level", "INFO", "operator", *args],
            stdout=self.operator_log,
            stderr=subprocess.STDOUT,
            env={
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "KUBECONFIG": str(self.cluster.kubeconfig),
                "LOGKEEPER_STATUS_INTERVAL_S": str(STATUS_INTERVAL_S),
                "LOGKEEPER_DELETE_WAIT_S": "30",
                "LOGKEEPER_WORKER_IMAGE": "logkeeper:test",
                **operator_env,
            },
        )

    def stop_operator(self) -> None:
        self.operator.terminate()
        try:
            self.operator.wait(30)
        except subprocess.TimeoutExpired:
            self.operator.kill()
            self.operator.wait(30)

    def stop(self) -> None:
        self.stop_operator()
        self.operator_log.close()
        self.kubelet.stop()
        self.cluster.stop()

    def logs(self) -> str:
        return (self.root / "operator.log").read_text(errors="replace")

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, NS, plural, name))

    def condition(self, plural: str, name: str, kind: str) -> dict[str, Any] | None:
        status = self.get(plural, name).get("status") or {}
        return next((c for c in status.get("conditions") or () if c["type"] == kind), None)

    def wait(self, check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except (kubernetes.client.ApiException, KeyError, TypeError) as exc:
                last = exc
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what} ({last})\n{self.logs()[-6000:]}")

    def topic_entry(self, name: str, volume: str = "demo-volume") -> str:
        """The Topic's entry in its volume's topic set ("" when it has none)."""
        shard = topic_set.shard_name(volume, topic_set.shard_of(name))
        data = self.core.read_namespaced_config_map(shard, NS).data or {}
        return str(data.get(topic_set.entry_key(name), ""))

    def worker_status(self) -> dict[str, Any]:
        import json

        pod = self.kubelet.wait_ready(NS, "lk-demo-volume-0")
        with urllib.request.urlopen(f"http://{pod.ip}:8080/v1/status", timeout=5) as response:
            return dict(json.load(response))


def examples() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    volume = yaml.safe_load((ROOT / "examples" / "storagevolume.yaml").read_text())
    volume["spec"]["worker"] = {"configReloadIntervalMs": 100, "shutdownGracePeriodMs": 5000}
    volume["spec"]["cleaner"]["backoffMs"] = 100
    topics = list(yaml.safe_load_all((ROOT / "examples" / "topics.yaml").read_text()))
    return volume, topics


def ready(env: Env, plural: str, name: str) -> bool:
    condition = env.condition(plural, name, "Ready")
    return condition is not None and condition["status"] == "True"


def tool(
    env: Env, *args: str, check: bool = True, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """kubectl (the machine's) or helm (.venv/bin) against the fake cluster."""
    binary = str(Path(sys.executable).parent / "helm") if args[0] == "helm" else "kubectl"
    command = [binary, *args[1:]]
    if args[0] == "kubectl":
        command[1:1] = ["--cache-dir", str(env.root / "kube-cache")]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "KUBECONFIG": str(env.cluster.kubeconfig), "HOME": str(env.root)},
        check=False,
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result
