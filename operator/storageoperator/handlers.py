"""The kopf handlers: thin. They read what they need, call the pure functions of
:mod:`storageoperator.render` and :mod:`storageoperator.conditions`, and write only what differs
(so that after convergence the operator makes no writes).

* StorageVolume created/changed/resumed → its ConfigMap, StatefulSet, Service, NetworkPolicy
  (and ServiceMonitor) created or patched, owned by the volume; with NetworkPolicies turned
  off in the operator's settings, the volume's own is deleted. With
  ``logkeeper.io/pause-reconciliation`` the children are left alone.
* Topic created/changed/resumed → its entry in its volume's topic set (one key of one shard
  ConfigMap, :mod:`storageoperator.topic_set`; a paused Topic keeps its entry as it was). Topic
  deleted (a finalizer) → its key removed, so the worker applies the deletion policy; the
  finalizer waits for the worker to confirm, and is released with a Warning event saying what
  was left when the worker cannot confirm. The volume's own pass rewrites every shard's delta.
* A timer per StorageVolume reads the worker's ``/v1/status`` (pod IP, port ``http``,
  :mod:`storageoperator.worker_status`) and writes the volume's and its Topics' status and
  conditions.

API calls go through :func:`storageoperator.kube_api.retrying`: 409 and 5xx answers are
retried with backoff. Every handler is wrapped in :func:`storageoperator.metrics.counted`
(runs and errors).
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, cast

import kopf
import kubernetes
from kubernetes.client.exceptions import ApiException

from storageoperator import conditions, metrics, render, topic_set
from storageoperator.kube_api import (
    apps_api,
    core_api,
    custom_api,
    networking_api,
    retrying,
)
from storageoperator.network_policy import NetworkPolicySettings, network_policy
from storageoperator.topic_set_store import TopicSetStore
from storageoperator.worker_status import fetch_worker_status

logger = logging.getLogger(__name__)

GROUP = "logkeeper.io"
VERSION = "v1alpha1"
FINALIZER = "logkeeper.io/finalizer"
KOPF_PREFIX = "kopf.logkeeper.io"
IMAGE = os.environ.get("LOGKEEPER_WORKER_IMAGE", "ghcr.io/logkeeper/logkeeper:0.1.0")
STATUS_INTERVAL_S = float(os.environ.get("LOGKEEPER_STATUS_INTERVAL_S", "15"))
#: How long a Topic deletion waits for the worker to confirm before releasing the finalizer.
DELETE_WAIT_S = float(os.environ.get("LOGKEEPER_DELETE_WAIT_S", "120"))
NETWORK_POLICIES = NetworkPolicySettings.from_env()


def _as_body(obj: Mapping[str, Any]) -> kopf.Body:
    """A resource read through the API client, for kopf.adopt and kopf's event helpers (they
    read only apiVersion, kind and metadata)."""
    return cast(kopf.Body, obj)


def normal_event(obj: Mapping[str, Any], *, reason: str, message: str) -> None:
    """Post a Normal event. ``kopf.info`` would drop it: the operator raises kopf's posting
    level to WARNING so that kopf's own per-handler log lines do not become events, and that
    level filters ``kopf.info`` too; ``kopf.event`` posts what it is given."""
    kopf.event(_as_body(obj), type="Normal", reason=reason, message=message)


# -- configuration -------------------------------------------------------------------------


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # Progress and the diff base in annotations: the CRDs' status schemas would prune kopf's
    # own status fields.
    settings.persistence.finalizer = FINALIZER
    # Not under logkeeper.io/: kopf leaves annotations with its own prefix out of the diff, and
    # the control annotations (logkeeper.io/pause-cleaning ...) must trigger handlers.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=KOPF_PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    if NETWORK_POLICIES.enabled and NETWORK_POLICIES.operator_namespace is None:
        logger.warning(
            "NetworkPolicies are on but the operator's namespace is unknown (not in a pod, "
            "LOGKEEPER_OPERATOR_NAMESPACE unset): the workers' HTTP ports admit no operator "
            "pod, only the metrics namespaces %s",
            list(NETWORK_POLICIES.metrics_namespaces),
        )
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()


TOPIC_SET = TopicSetStore(core_api, retrying)


def list_topics(namespace: str) -> list[dict[str, Any]]:
    result: dict[str, Any] = retrying(
        lambda: cast(
            dict[str, Any],
            custom_api().list_namespaced_custom_object(GROUP, VERSION, namespace, "topics"),
        ),
        f"list Topics in {namespace}",
    )
    return list(result.get("items") or [])


def get_volume(namespace: str, name: str) -> dict[str, Any] | None:
    try:
        volume: dict[str, Any] = retrying(
            lambda: cast(
                dict[str, Any],
                custom_api().get_namespaced_custom_object(
                    GROUP, VERSION, namespace, "storagevolumes", name
                ),
            ),
            f"get StorageVolume {namespace}/{name}",
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return volume


# -- children --------------------------------------------------------------------------------


def _differs(desired: Any, current: Any) -> bool:
    """Whether applying ``desired`` would change ``current``, looking only at the fields we
    set: the API server adds defaults (and kopf.adopt owner references) that must not count,
    or every pass would write again."""
    if isinstance(desired, Mapping):
        if not isinstance(current, Mapping):
            return True
        for key, value in desired.items():
            if key in ("apiVersion", "kind"):
                continue
            if key == "ownerReferences":
                uids = {o.get("uid") for o in current.get(key) or ()}
                if any(o.get("uid") not in uids for o in value):
                    return True
                continue
            if _differs(value, current.get(key)):
                return True
        return False
    if isinstance(desired, list):
        if not isinstance(current, list) or len(desired) != len(current):
            return True
        return any(_differs(d, c) for d, c in zip(desired, current, strict=True))
    return bool(desired != current)


def _without_none(value: Any) -> Any:
    """A manifest to create: None (a key a patch removes) means absent."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    return value


def apply_child(manifest: dict[str, Any], namespace: str) -> bool:
    """Create or merge-patch one child; True when something was written."""
    kind, name = manifest["kind"], manifest["metadata"]["name"]
    readers: dict[str, tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]] = {
        "ConfigMap": (
            core_api().read_namespaced_config_map,
            core_api().create_namespaced_config_map,
            core_api().patch_namespaced_config_map,
        ),
        "Service": (
            core_api().read_namespaced_service,
            core_api().create_namespaced_service,
            core_api().patch_namespaced_service,
        ),
        "StatefulSet": (
            apps_api().read_namespaced_stateful_set,
            apps_api().create_namespaced_stateful_set,
            apps_api().patch_namespaced_stateful_set,
        ),
        "NetworkPolicy": (
            networking_api().read_namespaced_network_policy,
            networking_api().create_namespaced_network_policy,
            networking_api().patch_namespaced_network_policy,
        ),
    }
    what = f"{kind} {namespace}/{name}"
    if kind == "ServiceMonitor":
        return _apply_service_monitor(manifest, namespace)
    read, create, patch = readers[kind]
    try:
        current = retrying(lambda: read(name, namespace), f"read {what}")
    except ApiException as exc:
        if exc.status != 404:
            raise
        try:
            create(namespace, _without_none(manifest))
            logger.info("Created %s", what)
            return True
        except ApiException as create_error:
            # Another handler (a Topic's, the volume's) created it meanwhile: patch it instead.
            if create_error.status != 409:
                raise
        current = retrying(lambda: read(name, namespace), f"read {what}")
    current_dict = kubernetes.client.ApiClient().sanitize_for_serialization(current)
    if not _differs(manifest, current_dict):
        return False
    retrying(lambda: patch(name, namespace, manifest), f"patch {what}")
    logger.info("Updated %s", what)
    return True


def _apply_service_monitor(manifest: dict[str, Any], namespace: str) -> bool:
    name = manifest["metadata"]["name"]
    api = custom_api()
    try:
        current = api.get_namespaced_custom_object(
            "monitoring.coreos.com", "v1", namespace, "servicemonitors", name
        )
    except ApiException as exc:
        if exc.status != 404:
            raise
        try:
            api.create_namespaced_custom_object(
                "monitoring.coreos.com", "v1", namespace, "servicemonitors", manifest
            )
        except ApiException as create_error:
            if create_error.status == 404:  # no Prometheus Operator in this cluster
                logger.warning("ServiceMonitor %s skipped: the CRD is not installed", name)
                return False
            raise
        return True
    if not _differs(manifest, current):
        return False
    api.patch_namespaced_custom_object(
        "monitoring.coreos.com", "v1", namespace, "servicemonitors", name, manifest
    )
    return True


def reconcile_volume(volume: Mapping[str, Any]) -> list[str]:
    """Make the volume's children match; the names of those written."""
    namespace = volume["metadata"]["namespace"]
    name = volume["metadata"]["name"]
    children = [
        render.config_map(volume),
        render.stateful_set(volume, IMAGE),
        render.service(volume),
    ]
    monitor = render.service_monitor(volume)
    if monitor is not None:
        children.append(monitor)
    policy = network_policy(volume, NETWORK_POLICIES)
    if policy is not None:
        children.append(policy)
    written = []
    for child in children:
        kopf.adopt(child, owner=_as_body(volume))
        if apply_child(child, namespace):
            written.append(f"{child['kind']}/{child['metadata']['name']}")
    if policy is None and remove_network_policy(volume):
        written.append(f"NetworkPolicy/{render.child_name(name)} (deleted)")

    def topics() -> tuple[list[Mapping[str, Any]], frozenset[str]]:
        live = render.topics_of_volume(name, list_topics(namespace))
        paused = frozenset(
            str(t["metadata"]["name"])
            for t in live
            if conditions.annotation(t, conditions.PAUSE_RECONCILIATION)
        )
        return live, paused

    written += TOPIC_SET.sync(volume, topics)
    return written


def remove_network_policy(volume: Mapping[str, Any]) -> bool:
    """Delete the volume's NetworkPolicy (NetworkPolicies turned off); only one this volume
    owns, so that a policy someone else wrote under that name stays. True when deleted."""
    namespace = volume["metadata"]["namespace"]
    name = render.child_name(volume["metadata"]["name"])
    what = f"NetworkPolicy {namespace}/{name}"
    try:
        current = retrying(
            lambda: networking_api().read_namespaced_network_policy(name, namespace), f"read {what}"
        )
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    owners = (current.metadata.owner_references if current.metadata else None) or ()
    if not any(o.uid == volume["metadata"].get("uid") for o in owners):
        return False
    try:
        retrying(
            lambda: networking_api().delete_namespaced_network_policy(name, namespace),
            f"delete {what}",
        )
    except ApiException as exc:
        if exc.status != 404:
            raise
        return False
    logger.info("Deleted %s: NetworkPolicies are turned off", what)
    return True


@kopf.on.resume(GROUP, VERSION, "storagevolumes")
@kopf.on.create(GROUP, VERSION, "storagevolumes")
@kopf.on.update(GROUP, VERSION, "storagevolumes")
@metrics.counted
def volume_changed(body: kopf.Body, **_: Any) -> None:
    if conditions.annotation(body, conditions.PAUSE_RECONCILIATION):
        logger.info("StorageVolume %s: reconciliation paused", body["metadata"]["name"])
        return
    written = reconcile_volume(body)
    if written:
        normal_event(body, reason="Reconciled", message=f"applied {', '.join(written)}")


def _put_entry(volume: Mapping[str, Any] | None, body: Mapping[str, Any] | None, name: str) -> None:
    """The Topic ``name``'s entry in its volume's topic set: ``body``'s, or none (None); nothing
    without the volume or while the volume is paused."""
    if volume is None or conditions.annotation(volume, conditions.PAUSE_RECONCILIATION):
        return
    try:
        TOPIC_SET.put(volume, name, None if body is None else topic_set.entry(body))
    except topic_set.ShardFullError as exc:
        raise kopf.PermanentError(str(exc)) from None


@kopf.on.resume(GROUP, VERSION, "topics")
@kopf.on.create(GROUP, VERSION, "topics")
@kopf.on.update(GROUP, VERSION, "topics")
@metrics.counted
def topic_changed(body: kopf.Body, namespace: str | None, **_: Any) -> None:
    assert namespace is not None, "Topics are namespaced"
    volume_name = str(body["spec"]["volume"])
    volume = get_volume(namespace, volume_name)
    if not conditions.annotation(body, conditions.PAUSE_RECONCILIATION):
        _put_entry(volume, body, str(body["metadata"]["name"]))
    shown = body.get("status") or {}
    if volume is not None and shown.get("observedGeneration") == body["metadata"].get("generation"):
        # Resumed (an operator restart) or an annotation change: the status timer, which has
        # the worker's report, keeps the status. One written here without the worker would flip
        # Ready to Unknown and back: two writes and two events per Topic on every restart.
        return
    write_topic_status(body, volume=volume, worker=None, worker_error=None)


@kopf.on.delete(GROUP, VERSION, "topics")
@metrics.counted
def topic_deleted(body: kopf.Body, namespace: str | None, **_: Any) -> None:
    """The worker applies the deletion policy once the Topic leaves its ConfigMap; wait for it
    to confirm (the partitions gone, or reported as orphaned), at most DELETE_WAIT_S."""
    assert namespace is not None, "Topics are namespaced"
    name = conditions.topic_name(body)
    volume_name = str(body["spec"]["volume"])
    policy = body["spec"].get("deletionPolicy", "Retain")
    _put_entry(get_volume(namespace, volume_name), None, str(body["metadata"]["name"]))
    worker, error = fetch_worker_status(namespace, volume_name)
    if worker is not None:
        present = any(p.get("topic") == name for p in worker.get("partitions") or ())
        orphaned = any(o.rsplit("-", 1)[0] == name for o in worker.get("orphanedLogs") or ())
        if (policy == "Delete" and not present) or (
            policy == "Retain" and (orphaned or not present)
        ):
            normal_event(
                body,
                reason="Deleted",
                message=f"topic {name}: data {'deleted' if policy == 'Delete' else 'retained'}",
            )
            return
    started = body["metadata"].get("deletionTimestamp")
    age = _age_s(started)
    if worker is None or age > DELETE_WAIT_S:
        kopf.warn(
            _as_body(body),
            reason="DeletedUnconfirmed",
            message=f"topic {name}: the worker of {volume_name} did not confirm "
            f"({error or 'timed out'}); with deletionPolicy {policy} its data may be left on "
            "the volume",
        )
        return
    raise metrics.Waiting(f"waiting for the worker to apply deletionPolicy {policy}", delay=2)


def _age_s(timestamp: str | None) -> float:
    if not timestamp:
        return 0.0
    moment = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return (datetime.datetime.now(datetime.UTC) - moment).total_seconds()


# -- status ----------------------------------------------------------------------------------


def _now() -> str:
    return conditions.now_rfc3339(datetime.datetime.now(datetime.UTC))


def _status_patch(
    body: Mapping[str, Any], figures: dict[str, Any], conds: list[dict[str, Any]]
) -> dict[str, Any] | None:
    previous = body.get("status") or {}
    merged = conditions.merge(previous.get("conditions"), conds, _now())
    status = {
        **{k: v for k, v in figures.items() if v is not None},
        "observedGeneration": int(body["metadata"].get("generation") or 0),
        "conditions": merged,
    }
    unchanged = all(previous.get(k) == v for k, v in status.items())
    return None if unchanged else status


def write_topic_status(
    body: Mapping[str, Any],
    *,
    volume: Mapping[str, Any] | None,
    worker: Mapping[str, Any] | None,
    worker_error: str | None,
) -> None:
    conds = conditions.topic_conditions(
        body, volume=volume, worker=worker, worker_error=worker_error
    )
    figures = conditions.topic_figures(conditions.topic_name(body), worker)
    status = _status_patch(body, figures, conds)
    if status is None:
        return
    meta = body["metadata"]
    retrying(
        lambda: custom_api().patch_namespaced_custom_object_status(
            GROUP, VERSION, meta["namespace"], "topics", meta["name"], {"status": status}
        ),
        f"status of Topic {meta['name']}",
    )
    before = {c["type"]: c["status"] for c in (body.get("status") or {}).get("conditions") or ()}
    for item in status["conditions"]:
        if before.get(item["type"]) not in (None, item["status"]) and item["type"] in (
            "Ready",
            "Degraded",
        ):
            message = f"{item['type']}={item['status']}"
            if (item["type"] == "Degraded") == (item["status"] == "True"):
                kopf.warn(_as_body(body), reason=item["reason"], message=message)
            else:
                normal_event(body, reason=item["reason"], message=message)


#: How long the Topics of a volume whose worker does not answer keep their status.
WORKER_GRACE_S = float(os.environ.get("LOGKEEPER_WORKER_GRACE_S", "60"))
#: (namespace, volume) → when its worker first failed to answer (monotonic), while it does not.
_WORKER_UNREAD_SINCE: dict[tuple[str, str], float] = {}

#: The DiskPressure status (True/False) each volume's events last announced, by (namespace,
#: name). The timer's body can lag behind the operator's own status patches under load, so the
#: start and end events follow what this process saw, not the body; a new process starts from
#: the status the body shows.
_DISK_PRESSURE_SEEN: dict[tuple[str, str], str] = {}


def _disk_pressure_events(
    body: Mapping[str, Any], namespace: str, name: str, conds: list[dict[str, Any]]
) -> None:
    """A Warning event when DiskPressure starts, a Normal one when it ends (Unknown, a worker
    that did not answer, changes nothing)."""
    now = next(c["status"] for c in conds if c["type"] == "DiskPressure")
    if now not in ("True", "False"):
        return
    shown = {c["type"]: c for c in (body.get("status") or {}).get("conditions") or ()}
    key = (namespace, name)
    before = _DISK_PRESSURE_SEEN.get(key, (shown.get("DiskPressure") or {}).get("status"))
    _DISK_PRESSURE_SEEN[key] = now
    if now == before:
        return
    if now == "True":
        message = next(c["message"] for c in conds if c["type"] == "DiskPressure")
        kopf.warn(_as_body(body), reason="DiskPressure", message=message)
    elif before == "True":
        normal_event(
            body,
            reason="DiskPressureEnded",
            message="free space is above the floor again: produce is accepted",
        )


@kopf.timer(GROUP, VERSION, "storagevolumes", interval=STATUS_INTERVAL_S, initial_delay=1.0)
@metrics.counted
def report_status(body: kopf.Body, namespace: str | None, **_: Any) -> None:
    assert namespace is not None, "StorageVolumes are namespaced"
    name = body["metadata"]["name"]
    worker, error = fetch_worker_status(namespace, name)
    try:
        retrying(
            lambda: apps_api().read_namespaced_stateful_set(render.child_name(name), namespace),
            "read sts",
        )
        children_ready = True
    except ApiException:
        children_ready = False
    conds = conditions.volume_conditions(
        body, children_ready=children_ready, worker=worker, worker_error=error
    )
    status = _status_patch(body, conditions.volume_figures(worker, shown=body.get("status")), conds)
    if status is not None:
        retrying(
            lambda: custom_api().patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, "storagevolumes", name, {"status": status}
            ),
            f"status of StorageVolume {name}",
        )
    _disk_pressure_events(body, namespace, name, conds)
    topics = list_topics(namespace)
    if worker is None:
        since = _WORKER_UNREAD_SINCE.setdefault((namespace, name), time.monotonic())
        if time.monotonic() - since < WORKER_GRACE_S:
            # A worker that did not answer once (busy, restarting) shows in the volume's status;
            # the Topics keep theirs for a while rather than all turning Unknown and back: on a
            # volume of thousands of Topics that is thousands of writes and events per blip.
            return
    else:
        _WORKER_UNREAD_SINCE.pop((namespace, name), None)
    views = conditions.worker_views(worker)
    for topic in topics:
        if (topic.get("spec") or {}).get("volume") == name and not topic["metadata"].get(
            "deletionTimestamp"
        ):
            view = views(conditions.topic_name(topic))
            write_topic_status(topic, volume=body, worker=view, worker_error=error)
