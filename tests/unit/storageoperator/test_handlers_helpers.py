"""The handlers' helpers that decide whether to write and how to retry (no API server)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from storageoperator import handlers, kube_api, render


def test_differs_ignores_what_the_server_adds() -> None:
    volume = {"metadata": {"name": "v", "namespace": "n", "uid": "u1"}, "spec": {"size": "1Gi"}}
    desired = render.stateful_set(volume, "img")
    desired["metadata"]["ownerReferences"] = [{"uid": "u1", "kind": "StorageVolume"}]
    current: dict[str, Any] = {
        **desired,
        "metadata": {
            **desired["metadata"],
            "resourceVersion": "7",
            "ownerReferences": [{"uid": "u1", "kind": "StorageVolume", "controller": True}],
        },
        "status": {"replicas": 1},
    }
    current["spec"] = {**desired["spec"], "revisionHistoryLimit": 10}
    pod = current["spec"]["template"]["spec"]
    current["spec"]["template"] = {
        **current["spec"]["template"],
        "spec": {
            **pod,
            "dnsPolicy": "ClusterFirst",
            "containers": [
                {**pod["containers"][0], "terminationMessagePath": "/dev/termination-log"}
            ],
        },
    }
    assert not handlers._differs(desired, current)
    changed = render.stateful_set({**volume, "spec": {"size": "2Gi"}}, "img")
    assert handlers._differs(changed, current)
    other_owner = {**current, "metadata": {**current["metadata"], "ownerReferences": []}}
    assert handlers._differs(desired, other_owner)


def test_retrying_retries_conflicts_and_server_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kube_api.time, "sleep", lambda _s: None)
    answers = [ApiException(status=409), ApiException(status=500), "done"]

    def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert kube_api.retrying(call, "test") == "done"
    with pytest.raises(ApiException) as info:
        kube_api.retrying(lambda: (_ for _ in ()).throw(ApiException(status=404)), "test")
    assert info.value.status == 404
    calls = []

    def always_busy() -> None:
        calls.append(1)
        raise ApiException(status=503)

    with pytest.raises(ApiException):
        kube_api.retrying(always_busy, "test")
    assert len(calls) == kube_api.RETRIES
