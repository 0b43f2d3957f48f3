"""End to end, the conditions that hold the operator back: a Topic waiting for its missing
volume, pause-reconciliation leaving the children alone until resumed, and DiskPressure (with
its events) from the worker's free-space floor."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.operator_env import GROUP, NS, STATUS_INTERVAL_S, VERSION, Env, examples, ready

pytestmark = pytest.mark.e2e


def test_missing_volume_and_paused_reconciliation(env: Env) -> None:
    volume, _ = examples()
    topic = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Topic",
        "metadata": {"name": "early"},
        "spec": {"volume": "demo-volume", "partitions": 1},
    }
    env.custom.create_namespaced_custom_object(GROUP, VERSION, NS, "topics", topic)
    env.wait(
        lambda: (env.condition("topics", "early", "Ready") or {}).get("reason") == "VolumeNotFound",
        "the Topic to wait for its volume",
    )
    message = (env.condition("topics", "early", "Ready") or {}).get("message", "")
    assert "demo-volume" in message
    env.custom.create_namespaced_custom_object(GROUP, VERSION, NS, "storagevolumes", volume)
    env.kubelet.wait_ready(NS, "lk-demo-volume-0")
    env.wait(lambda: ready(env, "topics", "early"), "the Topic Ready once its volume exists")

    # pause-reconciliation: the operator leaves the children alone and says so.
    env.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        "storagevolumes",
        "demo-volume",
        {
            "metadata": {"annotations": {"logkeeper.io/pause-reconciliation": "true"}},
            "spec": {"resources": {"limits": {"memory": "2Gi"}}},
        },
    )
    env.wait(
        lambda: (
            (env.condition("storagevolumes", "demo-volume", "ReconciliationPaused") or {}).get(
                "status"
            )
            == "True"
        ),
        "ReconciliationPaused",
    )

    def memory_limit() -> str:
        sts = env.apps.read_namespaced_stateful_set("lk-demo-volume", NS)
        return str(sts.spec.template.spec.containers[0].resources.limits["memory"])

    time.sleep(2 * STATUS_INTERVAL_S)
    assert memory_limit() == "1Gi"  # untouched while paused
    env.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        NS,
        "storagevolumes",
        "demo-volume",
        {"metadata": {"annotations": {"logkeeper.io/pause-reconciliation": None}}},
    )
    env.wait(lambda: memory_limit() == "2Gi", "the pending change applied after resuming")
    env.wait(
        lambda: (
            (env.condition("storagevolumes", "demo-volume", "ReconciliationPaused") or {}).get(
                "status"
            )
            == "False"
        ),
        "ReconciliationPaused cleared",
    )

    # A free-space floor above what the disk has: the worker refuses produce, the volume says
    # DiskPressure with a Warning event; a floor of 0 ends it, with a Normal event.
    def pressure() -> dict[str, Any]:
        return env.condition("storagevolumes", "demo-volume", "DiskPressure") or {}

    def events(reason: str) -> list[Any]:
        return [e for e in env.core.list_namespaced_event(NS).items if e.reason == reason]

    for floor, status, reason in (
        (10**15, "True", "DiskPressure"),
        (0, "False", "DiskPressureEnded"),
    ):
        env.custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, "storagevolumes", "demo-volume", {"spec": {"minFreeBytes": floor}}
        )
        env.wait(lambda s=status: pressure().get("status") == s, f"DiskPressure {status}")
        env.wait(lambda r=reason: bool(events(r)), f"a {reason} event")
    (warning,) = events("DiskPressure")
    assert warning.type == "Warning" and "floor 1000000000000000 bytes" in warning.message
    assert events("DiskPressureEnded")[0].type == "Normal"
