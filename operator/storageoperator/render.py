"""Resources → child manifests: pure functions, no API calls.

A StorageVolume ``v`` gets:

* ConfigMap ``lk-v``: ``settings.yaml`` (the StorageVolume itself: spec and the
  ``logkeeper.io/`` annotations, which the worker takes as volume-wide controls).
* ConfigMaps ``lk-v-topics-00`` .. ``lk-v-topics-31``: the topic set, one key per live Topic
  on the volume (spec and ``logkeeper.io/`` annotations), sharded by a stable hash of the
  Topic's name (:mod:`storageoperator.topic_set`, which renders and explains them).
  The worker re-reads both while running; the pod is never restarted for a config change.
* StatefulSet ``lk-v`` of one worker pod with a volumeClaimTemplate ``data`` (size, storage
  class), the settings ConfigMap and the topic shards (one projected volume) mounted
  read-only, probes on ``/healthz`` and ``/readyz``, non-root,
  read-only root filesystem, no capabilities, the resources of the spec.
* Service ``lk-v`` with ports ``kafka`` 9092 and ``http`` 8080.
* ServiceMonitor ``lk-v`` when ``spec.monitoring.serviceMonitor`` is true.
* NetworkPolicy ``lk-v``: :mod:`storageoperator.network_policy` (it uses the names here).

Owner references are added by the handlers (kopf.adopt); labels are the recommended
``app.kubernetes.io/*`` set plus ``logkeeper.io/volume``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import yaml

from storagecore.config import TOPIC_API_GROUP

API_VERSION: Final = f"{TOPIC_API_GROUP}/v1alpha1"
ANNOTATION_PREFIX: Final = f"{TOPIC_API_GROUP}/"
VOLUME_LABEL: Final = f"{TOPIC_API_GROUP}/volume"
MANAGED_BY: Final = "logkeeper-operator"
KAFKA_PORT: Final = 9092
HTTP_PORT: Final = 8080
DATA_MOUNT: Final = "/data"
CONFIG_MOUNT: Final = "/etc/logkeeper"
SETTINGS_MOUNT: Final = f"{CONFIG_MOUNT}/settings"
TOPICS_MOUNT: Final = f"{CONFIG_MOUNT}/topics"
#: ConfigMaps holding a volume's topic set (see :mod:`storageoperator.topic_set`); fixed, as
#: the pod spec mounts each of them.
TOPIC_SHARDS: Final = 32
#: The label that marks a ConfigMap as a shard of a volume's topic set.
SHARD_LABEL: Final = f"{TOPIC_API_GROUP}/topic-shard"
RUN_AS_USER: Final = 10001
#: Added to the worker's shutdownGracePeriodMs for the pod's terminationGracePeriodSeconds.
GRACE_MARGIN_S: Final = 5
DEFAULT_SHUTDOWN_GRACE_MS: Final = 25_000

Manifest = dict[str, Any]


def child_name(volume_name: str) -> str:
    return f"lk-{volume_name}"


def labels(volume_name: str, *, version: str | None = None) -> dict[str, str]:
    result = {
        "app.kubernetes.io/name": "logkeeper",
        "app.kubernetes.io/instance": volume_name,
        "app.kubernetes.io/component": "worker",
        "app.kubernetes.io/part-of": "logkeeper",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        VOLUME_LABEL: volume_name,
    }
    if version:
        result["app.kubernetes.io/version"] = version
    return result


def topic_shard_name(volume_name: str, shard: int) -> str:
    assert 0 <= shard < TOPIC_SHARDS, shard
    return f"{child_name(volume_name)}-topics-{shard:02d}"


def topic_shard_names(volume_name: str) -> list[str]:
    return [topic_shard_name(volume_name, shard) for shard in range(TOPIC_SHARDS)]


def selector(volume_name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "logkeeper", VOLUME_LABEL: volume_name}


#: The annotations the worker acts on; no other (kubectl's last-applied configuration, kopf's
#: own state) goes into the ConfigMap, which would change it on every pass.
WORKER_ANNOTATIONS: Final = frozenset(
    f"{ANNOTATION_PREFIX}{name}"
    for name in ("pause-cleaning", "pause-retention", "compact-now", "retry-uncleanable")
)


def logkeeper_annotations(metadata: Mapping[str, Any]) -> dict[str, str]:
    annotations = metadata.get("annotations") or {}
    return {str(k): str(v) for k, v in sorted(annotations.items()) if k in WORKER_ANNOTATIONS}


def clean_manifest(kind: str, body: Mapping[str, Any]) -> Manifest:
    metadata = body.get("metadata") or {}
    clean_metadata: dict[str, Any] = {"name": metadata.get("name")}
    annotations = logkeeper_annotations(metadata)
    if annotations:
        clean_metadata["annotations"] = annotations
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": clean_metadata,
        "spec": dict(body.get("spec") or {}),
    }


def settings(volume: Mapping[str, Any]) -> str:
    return yaml.safe_dump(clean_manifest("StorageVolume", volume), sort_keys=True)


def config_map(volume: Mapping[str, Any]) -> Manifest:
    """The settings ConfigMap. ``topics.yaml: None`` removes the single topic set of earlier
    versions (now in the shards) when the operator patches a ConfigMap that still has it."""
    name = volume["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": child_name(name), "labels": labels(name)},
        "data": {"settings.yaml": settings(volume), "topics.yaml": None},
    }


def topics_volume(volume_name: str) -> dict[str, Any]:
    """The pod volume ``topics``: every shard (optional: one not yet created is empty)."""
    return {
        "name": "topics",
        "projected": {
            "sources": [
                {"configMap": {"name": name, "optional": True}}
                for name in topic_shard_names(volume_name)
            ]
        },
    }


def _resources(spec: Mapping[str, Any]) -> dict[str, Any]:
    resources = spec.get("resources") or {}
    return {
        part: {str(k): str(v) for k, v in (resources.get(part) or {}).items()}
        for part in ("requests", "limits")
        if resources.get(part)
    }


def stateful_set(volume: Mapping[str, Any], image: str) -> Manifest:
    name = volume["metadata"]["name"]
    spec = volume.get("spec") or {}
    grace_ms = int(
        (spec.get("worker") or {}).get("shutdownGracePeriodMs", DEFAULT_SHUTDOWN_GRACE_MS)
    )
    claim: dict[str, Any] = {
        "metadata": {"name": "data", "labels": labels(name)},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": str(spec["size"])}},
        },
    }
    if spec.get("storageClassName"):
        claim["spec"]["storageClassName"] = spec["storageClassName"]
    probe = {"periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3}
    container = {
        "name": "worker",
        "image": spec.get("image") or image,
        "imagePullPolicy": "IfNotPresent",
        "args": [
            "serve",
            "--data-dir",
            f"{DATA_MOUNT}/logs",
            "--topics",
            TOPICS_MOUNT,
            "--settings",
            f"{SETTINGS_MOUNT}/settings.yaml",
            "--http-host",
            "0.0.0.0",
            "--http-port",
            str(HTTP_PORT),
            "--kafka-host",
            "0.0.0.0",
            "--kafka-port",
            str(KAFKA_PORT),
            # Clients reach the worker through its Service (one pod per volume).
            "--kafka-advertised-host",
            f"{child_name(name)}.$(POD_NAMESPACE).svc",
            # In-cluster plaintext, as Kafka's default listener; TLS and SASL are flags of
            # ``logkeeper serve`` not yet exposed in the StorageVolume spec.
            "--kafka-allow-plaintext",
        ],
        "env": [
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            }
        ],
        "ports": [
            {"name": "kafka", "containerPort": KAFKA_PORT, "protocol": "TCP"},
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}, **probe},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, **probe},
        # Recovery of a large volume can take long: liveness starts after the first success.
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 5,
            "failureThreshold": 120,
        },
        "resources": _resources(spec),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_MOUNT},
            {"name": "config", "mountPath": SETTINGS_MOUNT, "readOnly": True},
            {"name": "topics", "mountPath": TOPICS_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": child_name(name), "labels": labels(name)},
        "spec": {
            "replicas": 1,
            "serviceName": child_name(name),
            "podManagementPolicy": "OrderedReady",
            "selector": {"matchLabels": selector(name)},
            "template": {
                "metadata": {"labels": labels(name)},
                "spec": {
                    "terminationGracePeriodSeconds": grace_ms // 1000 + GRACE_MARGIN_S,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": RUN_AS_USER,
                        "runAsGroup": RUN_AS_USER,
                        "fsGroup": RUN_AS_USER,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": [
                        {"name": "config", "configMap": {"name": child_name(name)}},
                        topics_volume(name),
                        {"name": "tmp", "emptyDir": {}},
                    ],
                },
            },
            "volumeClaimTemplates": [claim],
        },
    }


def service(volume: Mapping[str, Any]) -> Manifest:
    name = volume["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": child_name(name), "labels": labels(name)},
        "spec": {
            "selector": selector(name),
            "ports": [
                {"name": "kafka", "port": KAFKA_PORT, "targetPort": "kafka", "protocol": "TCP"},
                {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
            ],
        },
    }


def service_monitor(volume: Mapping[str, Any]) -> Manifest | None:
    spec = volume.get("spec") or {}
    if not (spec.get("monitoring") or {}).get("serviceMonitor"):
        return None
    name = volume["metadata"]["name"]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": child_name(name), "labels": labels(name)},
        "spec": {
            "selector": {"matchLabels": selector(name)},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": "30s"}],
        },
    }


def topics_of_volume(
    volume_name: str, topics: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The Topics a volume's worker should have: on that volume and not being deleted."""
    return [
        t
        for t in topics
        if (t.get("spec") or {}).get("volume") == volume_name
        and not (t.get("metadata") or {}).get("deletionTimestamp")
    ]
