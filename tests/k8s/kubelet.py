"""A fake kubelet (and StatefulSet controller) for the operator's end-to-end tests.

The fake API server runs no controllers. This helper plays their part for the worker: for
each StatefulSet it creates the Pod ``<name>-0`` (owned by the StatefulSet, the template's
labels, a pod IP of its own on loopback: ``127.0.0.N``), writes the ConfigMaps each pod volume
mounts (a ``configMap`` volume or a ``projected`` one of ConfigMap sources) into a directory of
its own (updated in place, as the kubelet refreshes a ConfigMap volume: changed keys replaced,
keys gone removed; a ConfigMap is read again only when its resourceVersion moved), and starts
the container's command as a real local process: ``logkeeper serve`` with the container's
args, the mount paths mapped to temporary directories and ``--http-host`` set to the pod IP.
It marks the Pod Ready when ``/readyz`` answers 200, and stops the process (SIGTERM) and
deletes the Pod when the StatefulSet goes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes

ROOT = Path(__file__).parents[2]
#: How often a pod's ConfigMap volumes are refreshed (the real kubelet: about a minute).
CONFIG_REFRESH_S = 0.5


@dataclasses.dataclass
class RunningPod:
    namespace: str
    name: str
    ip: str
    process: subprocess.Popen[bytes]
    config_dir: Path
    data_dir: Path
    mounts: dict[str, list[str]]
    """Directory (under config_dir) → the ConfigMaps projected into it."""
    ready: bool = False
    log: Path | None = None
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    """ConfigMap → the resourceVersion written, or "" when absent."""
    keys: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    """ConfigMap → the keys it wrote."""
    refreshed: float = float("-inf")


class FakeKubelet:
    def __init__(self, api: kubernetes.client.ApiClient, root: Path) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.apps = kubernetes.client.AppsV1Api(api)
        self.root = root
        self.pods: dict[tuple[str, str], RunningPod] = {}
        self._next_ip = 2
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)
        self.errors: list[str] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        for pod in list(self.pods.values()):
            self._terminate(pod)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(0.2)

    # -- one pass ---------------------------------------------------------------------------------
    def sync(self) -> None:
        sets = self.apps.list_stateful_set_for_all_namespaces().items
        wanted = set()
        for sts in sets:
            namespace, name = sts.metadata.namespace, sts.metadata.name
            key = (namespace, f"{name}-0")
            wanted.add(key)
            pod = self.pods.get(key)
            if pod is None:
                self.pods[key] = self._start(sts)
            else:
                self._write_config(pod)
                self._check_ready(pod)
        for key in [k for k in self.pods if k not in wanted]:
            pod = self.pods.pop(key)
            self._terminate(pod)
            with contextlib.suppress(kubernetes.client.ApiException):
                self.core.delete_namespaced_pod(pod.name, pod.namespace)

    def _start(self, sts: Any) -> RunningPod:
        namespace, name = sts.metadata.namespace, sts.metadata.name
        pod_name = f"{name}-0"
        ip = f"127.0.0.{self._next_ip}"
        self._next_ip += 1
        base = self.root / namespace / pod_name
        config_dir, data_dir = base / "config", base / "data"
        config_dir.mkdir(parents=True, exist_ok=True)
        data_dir.mkdir(parents=True, exist_ok=True)
        template = sts.spec.template
        container = template.spec.containers[0]
        mounts = {m.name: m.mount_path for m in container.volume_mounts or ()}
        sources: dict[str, list[str]] = {}
        for volume in template.spec.volumes or ():
            if volume.config_map is not None:
                sources[volume.name] = [volume.config_map.name]
            elif volume.projected is not None:
                sources[volume.name] = [
                    s.config_map.name for s in volume.projected.sources or () if s.config_map
                ]
        paths = {mounts.get("data", "/data"): str(data_dir)}
        for volume_name in sources:
            if volume_name in mounts:
                paths[mounts[volume_name]] = str(config_dir / volume_name)
        # Kubernetes expands $(VAR) in args from the container's env (fieldRef: namespace).
        env = {
            e.name: namespace
            for e in container.env or ()
            if e.value_from is not None
            and e.value_from.field_ref is not None
            and e.value_from.field_ref.field_path == "metadata.namespace"
        }
        args = list(container.args or [])
        for var, value in env.items():
            args = [a.replace(f"$({var})", value) for a in args]
        for index, arg in enumerate(args):
            for mount, local in paths.items():
                if arg == mount or arg.startswith(mount + "/"):
                    args[index] = local + arg[len(mount) :]
            # The pod's addresses are its loopback IP here (no cluster DNS).
            if index > 0 and args[index - 1] in (
                "--http-host",
                "--kafka-host",
                "--kafka-advertised-host",
            ):
                args[index] = ip
        pod = RunningPod(namespace, pod_name, ip, None, config_dir, data_dir, sources)  # type: ignore[arg-type]
        self._write_config(pod)
        pod.log = base / "worker.log"
        with open(pod.log, "ab") as log:
            pod.process = subprocess.Popen(
                [sys.executable, "-m", "logkeeper.cli", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": namespace,
                "labels": dict(template.metadata.labels or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "StatefulSet",
                        "name": name,
                        "uid": sts.metadata.uid,
                        "controller": True,
                    }
                ],
            },
            "spec": kubernetes.client.ApiClient().sanitize_for_serialization(template.spec),
        }
        try:
            self.core.create_namespaced_pod(namespace, body)
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:
                raise
        self.core.patch_namespaced_pod_status(
            pod_name,
            namespace,
            {
                "status": {
                    "phase": "Running",
                    "podIP": ip,
                    "conditions": [{"type": "Ready", "status": "False"}],
                }
            },
        )
        return pod

    def _write_config(self, pod: RunningPod) -> None:
        """Refresh the pod's ConfigMap volumes (at most every CONFIG_REFRESH_S, from one list
        of the namespace's ConfigMaps)."""
        now = time.monotonic()
        if now - pod.refreshed < CONFIG_REFRESH_S:
            return
        pod.refreshed = now
        response = self.core.list_namespaced_config_map(pod.namespace, _preload_content=False)
        found = {
            item["metadata"]["name"]: item for item in json.loads(response.data).get("items", [])
        }
        for directory, names in pod.mounts.items():
            target_dir = pod.config_dir / directory
            target_dir.mkdir(parents=True, exist_ok=True)
            for name in names:
                item = found.get(name) or {"metadata": {"resourceVersion": ""}}
                self._write_config_map(pod, target_dir, name, item)

    @staticmethod
    def _write_config_map(
        pod: RunningPod, target_dir: Path, name: str, item: dict[str, Any]
    ) -> None:
        version, data = item["metadata"]["resourceVersion"], item.get("data") or {}
        if pod.versions.get(name) == version:
            return
        for key, value in data.items():
            target = target_dir / key
            if not target.exists() or target.read_text(encoding="utf-8") != value:
                temporary = target_dir / f".{key}.tmp"
                temporary.write_text(value, encoding="utf-8")
                temporary.replace(target)
        for key in pod.keys.get(name, set()) - set(data):
            (target_dir / key).unlink(missing_ok=True)
        pod.keys[name] = set(data)
        pod.versions[name] = version

    def _check_ready(self, pod: RunningPod) -> None:
        if pod.ready or pod.process.poll() is not None:
            return
        try:
            with urllib.request.urlopen(f"http://{pod.ip}:8080/readyz", timeout=1) as response:
                ready = response.status == 200
        except (urllib.error.URLError, OSError):
            ready = False
        if ready:
            pod.ready = True
            self.core.patch_namespaced_pod_status(
                pod.name,
                pod.namespace,
                {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            )

    @staticmethod
    def _terminate(pod: RunningPod) -> None:
        if pod.process.poll() is None:
            pod.process.send_signal(signal.SIGTERM)
            try:
                pod.process.wait(30)
            except subprocess.TimeoutExpired:
                pod.process.kill()
                pod.process.wait(10)

    def wait_ready(self, namespace: str, pod_name: str, timeout_s: float = 60) -> RunningPod:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            pod = self.pods.get((namespace, pod_name))
            if pod is not None and pod.ready:
                return pod
            time.sleep(0.1)
        logs = "".join(
            p.log.read_text(errors="replace")
            for p in self.pods.values()
            if p.log and p.log.exists()
        )
        raise AssertionError(f"pod {namespace}/{pod_name} not ready; errors {self.errors}\n{logs}")
