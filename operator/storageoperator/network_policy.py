"""The worker's NetworkPolicy: who may reach a StorageVolume's worker, as a pure function.

A StorageVolume ``v`` gets a ``networking.k8s.io/v1`` NetworkPolicy ``lk-v`` (owned by the
volume, like its Service) that selects the worker pod by the labels
:func:`storageoperator.render.selector` gives it, and admits (Ingress only; egress is left
open):

* the Kafka port (9092) from the namespaces ``spec.kafka.allowedNamespaces`` lists, by the
  ``kubernetes.io/metadata.name`` label that the API server puts on every namespace; without
  the field, from the volume's own namespace;
* the HTTP port (8080: ``/v1/status``, ``/metrics`` and the admin verbs) from the operator's
  own pod (its namespace and labels, :class:`NetworkPolicySettings`) and from the namespaces of
  the monitoring stack (``metricsNamespaces``).

Nothing else reaches the worker from other pods. Traffic from the worker's own node (the
kubelet's probes) is always allowed by NetworkPolicy semantics, so the probes keep working.
An ingress rule with no peers would admit everyone, so a port with no peer gets no rule at all
(closed), never an empty ``from``.

The settings come from the operator's environment, which the chart fills from its values
(``networkPolicy.enabled``, ``networkPolicy.metricsNamespaces``; the operator's namespace
through the downward API, its pod labels from the chart's selector labels). Each setting has
one name and one default, the chart's: see :data:`ENV`.

Called by :mod:`storageoperator.handlers`; no API calls here.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from storageoperator import render

#: The label the API server sets on every namespace (Kubernetes 1.22+), its name.
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
#: A namespace name: an RFC 1123 label (what the API server accepts for a Namespace).
NAMESPACE_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
NAMESPACE_LENGTH_MAX: Final = 63
#: How many namespaces one StorageVolume may list (a bound for the CRD schema).
ALLOWED_NAMESPACES_MAX: Final = 64

#: Environment variable of each setting (the chart's Deployment sets them all).
ENV: Final = {
    "enabled": "LOGKEEPER_NETWORK_POLICY_ENABLED",
    "metrics_namespaces": "LOGKEEPER_NETWORK_POLICY_METRICS_NAMESPACES",
    "operator_namespace": "LOGKEEPER_OPERATOR_NAMESPACE",
    "operator_pod_labels": "LOGKEEPER_OPERATOR_POD_LABELS",
}
#: The defaults, equal to the chart's values.yaml (a test compares them).
ENABLED_DEFAULT: Final = True
METRICS_NAMESPACES_DEFAULT: Final = ("monitoring",)
#: The chart's selector labels without the release name: any logkeeper operator pod of the
#: operator's namespace. The chart passes its full selector labels.
OPERATOR_POD_LABELS_DEFAULT: Final = (
    ("app.kubernetes.io/name", "logkeeper"),
    ("app.kubernetes.io/component", "operator"),
)
#: Where a pod finds its namespace when the environment does not say (the service account).
SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class SettingError(ValueError):
    """An operator setting from the environment is malformed; the message names it."""


@dataclasses.dataclass(frozen=True)
class NetworkPolicySettings:
    """What the operator needs to render the workers' NetworkPolicies."""

    #: Render a NetworkPolicy per StorageVolume; when false, the operator removes the ones it
    #: created (chart: ``networkPolicy.enabled``).
    enabled: bool = ENABLED_DEFAULT
    #: Namespaces whose pods may reach the workers' HTTP port: the monitoring stack's
    #: (chart: ``networkPolicy.metricsNamespaces``).
    metrics_namespaces: tuple[str, ...] = METRICS_NAMESPACES_DEFAULT
    #: The operator pod's namespace (it reads every worker's ``/v1/status``); None when the
    #: operator runs outside a pod, which no pod selector can then match.
    operator_namespace: str | None = None
    #: Labels that select the operator pod in its namespace.
    operator_pod_labels: tuple[tuple[str, str], ...] = OPERATOR_POD_LABELS_DEFAULT

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        service_account_namespace: Path = SERVICE_ACCOUNT_NAMESPACE,
    ) -> NetworkPolicySettings:
        env = os.environ if environ is None else environ
        enabled_text = env.get(ENV["enabled"], "true" if ENABLED_DEFAULT else "false")
        if enabled_text.strip().lower() not in ("true", "false"):
            raise SettingError(f"{ENV['enabled']}={enabled_text!r}: expected true or false")
        metrics = (
            _names(ENV["metrics_namespaces"], env[ENV["metrics_namespaces"]])
            if ENV["metrics_namespaces"] in env
            else METRICS_NAMESPACES_DEFAULT
        )
        namespace = env.get(ENV["operator_namespace"], "").strip() or None
        if namespace is None and service_account_namespace.is_file():
            namespace = service_account_namespace.read_text(encoding="utf-8").strip() or None
        if namespace is not None:
            _names(ENV["operator_namespace"], namespace)
        labels = (
            _labels(ENV["operator_pod_labels"], env[ENV["operator_pod_labels"]])
            if env.get(ENV["operator_pod_labels"], "").strip()
            else OPERATOR_POD_LABELS_DEFAULT
        )
        return cls(
            enabled=enabled_text.strip().lower() == "true",
            metrics_namespaces=metrics,
            operator_namespace=namespace,
            operator_pod_labels=labels,
        )


def _names(variable: str, text: str) -> tuple[str, ...]:
    """A comma-separated list of namespace names; each checked."""
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    for name in names:
        if len(name) > NAMESPACE_LENGTH_MAX or not re.match(NAMESPACE_PATTERN, name):
            raise SettingError(
                f"{variable}: {name!r} is not a namespace name (lower-case letters, digits "
                f"and '-', at most {NAMESPACE_LENGTH_MAX} characters)"
            )
    return names


def _labels(variable: str, text: str) -> tuple[tuple[str, str], ...]:
    """``key=value,key=value`` → pairs, in the given order."""
    pairs = []
    for part in text.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or not key.strip():
            raise SettingError(f"{variable}: {part.strip()!r} is not key=value")
        pairs.append((key.strip(), value.strip()))
    return tuple(pairs)


def kafka_namespaces(volume: Mapping[str, Any]) -> list[str]:
    """The namespaces whose pods may reach the Kafka port: ``spec.kafka.allowedNamespaces``,
    else the volume's own."""
    listed = ((volume.get("spec") or {}).get("kafka") or {}).get("allowedNamespaces")
    if listed:
        return sorted(set(map(str, listed)))
    return [str(volume["metadata"]["namespace"])]


def _namespaces_peer(names: Sequence[str]) -> dict[str, Any]:
    assert names, "an empty peer list would admit every pod"
    return {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": list(names)}
            ]
        }
    }


def _rule(port: int, peers: list[dict[str, Any]]) -> dict[str, Any]:
    return {"ports": [{"protocol": "TCP", "port": port}], "from": peers}


def network_policy(
    volume: Mapping[str, Any], settings: NetworkPolicySettings
) -> render.Manifest | None:
    """The worker's NetworkPolicy, or None when the operator's settings turn them off."""
    if not settings.enabled:
        return None
    name = volume["metadata"]["name"]
    http_peers: list[dict[str, Any]] = []
    if settings.operator_namespace is not None:
        http_peers.append(
            {
                "namespaceSelector": {
                    "matchLabels": {NAMESPACE_NAME_LABEL: settings.operator_namespace}
                },
                "podSelector": {"matchLabels": dict(settings.operator_pod_labels)},
            }
        )
    if settings.metrics_namespaces:
        http_peers.append(_namespaces_peer(sorted(set(settings.metrics_namespaces))))
    ingress = [_rule(render.KAFKA_PORT, [_namespaces_peer(kafka_namespaces(volume))])]
    if http_peers:
        ingress.append(_rule(render.HTTP_PORT, http_peers))
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": render.child_name(name), "labels": render.labels(name)},
        "spec": {
            "podSelector": {"matchLabels": render.selector(name)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
