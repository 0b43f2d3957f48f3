"""A fake Kubernetes API server for the operator's tests, built on kmock.

kmock (``KubernetesScaffold``) provides the HTTP plumbing, the Kubernetes error bodies and API
discovery from a registry of resources (the bundled built-ins plus every CRD created here).
This module owns the object semantics a real API server has and kopf, the kubernetes client
and the tests rely on:

* one global, monotonic ``resourceVersion`` (not bumped by no-op writes), ``uid``,
  ``creationTimestamp``, ``generation`` (+1 when anything outside metadata and status changes),
  ``generateName``;
* CREATE (409 when it exists), GET, LIST (``kind: XList``, ``labelSelector``), WATCH (events
  after the given ``resourceVersion``, ``timeoutSeconds``), PATCH (merge, strategic merge as
  merge, JSON patch, server-side apply as merge; 404 on a missing object except for apply),
  PUT (409 on a stale ``resourceVersion``), DELETE (finalizers: ``deletionTimestamp`` first,
  removal when the last finalizer goes);
* the status subresource: ``.status`` is ignored on the main endpoint, only ``.status`` changes
  through ``/status``;
* CRDs: creating one registers its resource for discovery, marks it Established, and its
  ``openAPIV3Schema`` is enforced on every write of its objects: defaults, pruning of unknown
  fields, JSON-schema validation and the CEL rules (``tests.k8s.cel``), answered with 422
  Invalid and the causes as the real server words them;
* fault injection (:meth:`FakeApiServer.inject`): the next matching request gets a given HTTP
  status (409 Conflict, 500 ...), to test retries;
* a log of every write (:attr:`FakeApiServer.writes`: method, path, status, body size, user
  agent) to assert that nothing is written after convergence, and to count what is.

Not emulated: admission webhooks, garbage collection of owned objects (the tests assert owner
references instead), controllers (no Pods from StatefulSets: the tests' fake kubelet does that),
CEL cost limits, protobuf bodies and table output (kubectl's needs are a later step).

Where each part lives: the object semantics, FakeApiServer, in ``server.py``; admission by a
CRD's schema in ``admission.py``; patch formats in ``patches.py``; OpenAPI documents in
``openapi.py``; records (resource types, faults, writes) in ``api_types.py``; error answers in
``api_errors.py``. This module runs the server over HTTP (FakeCluster) and is where tests import
the fake from.
"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import aiohttp.web

from tests.k8s.api_errors import ApiError
from tests.k8s.api_types import Fault, ResourceType, Write
from tests.k8s.patches import json_patch, merge_patch
from tests.k8s.server import FakeApiServer

__all__ = [
    "ApiError",
    "FakeApiServer",
    "FakeCluster",
    "Fault",
    "ResourceType",
    "Write",
    "json_patch",
    "merge_patch",
]


class FakeCluster:
    """The fake API server on 127.0.0.1 in a thread of its own, with a kubeconfig for clients."""

    def __init__(self, directory: Path) -> None:
        self.server = FakeApiServer()
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-apiserver", daemon=True)
        self._runner: aiohttp.web.AppRunner | None = None
        self.port = 0
        self._thread.start()
        if not self._started.wait(30):
            raise RuntimeError("the fake API server did not start")
        self.url = f"http://127.0.0.1:{self.port}"
        self.kubeconfig = directory / "kubeconfig"
        self.kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
                    "users": [{"name": "fake", "user": {"token": "fake"}}],
                    "contexts": [
                        {
                            "name": "fake",
                            "context": {"cluster": "fake", "user": "fake", "namespace": "default"},
                        }
                    ],
                    "current-context": "fake",
                }
            ),
            encoding="utf-8",
        )

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            app = aiohttp.web.Application(client_max_size=64 << 20)

            async def handle(request: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
                return await self.server.serve(request)

            app.router.add_route("*", "/{tail:.*}", handle)
            self._runner = aiohttp.web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
            await self._runner.setup()
            site = aiohttp.web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            sockets = site._server.sockets if site._server else []  # type: ignore[union-attr]
            self.port = sockets[0].getsockname()[1]
            self._started.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def call(self, function: Any) -> Any:
        """Run ``function()`` on the server's loop (to read or change its state safely)."""

        async def wrapper() -> Any:
            return function()

        return asyncio.run_coroutine_threadsafe(wrapper(), self.loop).result(30)

    def stop(self) -> None:
        async def shutdown() -> None:
            if self._runner is not None:
                await self._runner.cleanup()
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
