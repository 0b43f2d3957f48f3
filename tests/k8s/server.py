"""FakeApiServer: the object semantics of a Kubernetes API server, on kmock's scaffold.

It stores objects (one global, monotonic ``resourceVersion``, ``uid``, ``generation``,
``generateName``), answers CREATE, GET, LIST, WATCH, PATCH, PUT and DELETE on them (finalizers,
the status subresource), registers CRDs for discovery, and keeps the fault list and the write
log. Admission by a CRD's schema is ``admission.py``, the patch formats ``patches.py``, the
OpenAPI documents ``openapi.py``; the HTTP server on a thread is FakeCluster in
``fake_apiserver.py``, which describes the whole fake.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
import uuid
import warnings
from typing import Any

import aiohttp.web
import attrs
import kmock

from tests.k8s import admission, openapi, protobuf
from tests.k8s.api_errors import REASONS, STALE, ApiError
from tests.k8s.api_types import Fault, Key, ResourceType, Write, now
from tests.k8s.patches import json_patch, merge_patch


@attrs.define(kw_only=True)
class FakeApiServer(kmock.KubernetesScaffold):
    _store: dict[Key, dict[str, Any]] = attrs.field(factory=dict, init=False)
    _types: dict[tuple[str, str], ResourceType] = attrs.field(factory=dict, init=False)
    _rv: int = attrs.field(default=1, init=False)
    _events: list[tuple[int, tuple[str, str], dict[str, Any]]] = attrs.field(
        factory=list, init=False
    )
    _watchers: set[asyncio.Event] = attrs.field(factory=set, init=False)
    faults: list[Fault] = attrs.field(factory=list, init=False)
    writes: list[Write] = attrs.field(factory=list, init=False)
    _strict: bool = attrs.field(default=False, init=False)
    #: id(schema) → (the schema, its validator): built once per CRD registration.
    _validators: dict[int, tuple[Any, Any]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        # kmock reads its bundled discovery data with a deprecated importlib call.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            self.resources.load_bundled()

    # -- public helpers for tests ---------------------------------------------------------------
    def inject(self, method: str, path_contains: str, status: int, times: int = 1) -> None:
        self.faults.append(Fault(method.upper(), path_contains, status, times))

    def objects(self, plural: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(o) for (_, p, _, _), o in self._store.items() if p == plural]

    # -- resource types -------------------------------------------------------------------------
    def _type(self, group: str, version: str, plural: str) -> ResourceType:
        known = self._types.get((f"{group}/{version}" if group else version, plural))
        if known is not None:
            return known
        for resource, info in self.resources.items():
            if (resource.group or "", resource.version, resource.plural) == (
                group,
                version,
                plural,
            ):
                rtype = ResourceType(
                    group,
                    version,
                    plural,
                    info.kind or plural.capitalize(),
                    bool(info.namespaced),
                    "status" in (info.subresources or ()),
                )
                self._types[(rtype.api_version, plural)] = rtype
                return rtype
        raise ApiError(
            404, "NotFound", f"the server could not find the requested resource ({plural})"
        )

    def _register_crd(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        names = spec["names"]
        for version in spec["versions"]:
            subresources = set((version.get("subresources") or {}).keys())
            self.resources[f"{spec['group']}/{version['name']}/{names['plural']}"] = (
                kmock.ResourceInfo(
                    kind=names["kind"],
                    singular=names.get("singular"),
                    shortnames=set(names.get("shortNames") or ()),
                    categories=set(names.get("categories") or ()),
                    namespaced=spec["scope"] == "Namespaced",
                    subresources=subresources,
                    verbs={"create", "delete", "get", "list", "patch", "update", "watch"},
                )
            )
            rtype = ResourceType(
                spec["group"],
                version["name"],
                names["plural"],
                names["kind"],
                spec["scope"] == "Namespaced",
                "status" in subresources,
                (version.get("schema") or {}).get("openAPIV3Schema"),
            )
            self._types[(rtype.api_version, names["plural"])] = rtype
        crd["status"] = {
            "acceptedNames": names,
            "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")],
            "conditions": [
                {
                    "type": t,
                    "status": "True",
                    "reason": r,
                    "message": "",
                    "lastTransitionTime": now(),
                }
                for t, r in (
                    ("NamesAccepted", "NoConflicts"),
                    ("Established", "InitialNamesAccepted"),
                )
            ],
        }

    # -- request handling -----------------------------------------------------------------------
    async def serve(self, raw: aiohttp.web.Request) -> aiohttp.web.StreamResponse:
        """The entry point: objects and OpenAPI here, discovery by kmock. (kmock's own request
        parsing is not used for object paths: it cannot parse ``/api/v1/namespaces``.)"""
        path = raw.path
        if path.startswith("/openapi/"):
            return openapi.response(path, self.resources, self._types, self._rv)
        parts = [p for p in path.split("/") if p]
        if (
            not parts
            or parts[0] not in ("api", "apis")
            or len(parts) < (3 if parts[0] == "api" else 4)
        ):
            return await self(raw)
        body = await raw.read()
        try:
            for fault in self.faults:
                if fault.method == raw.method and fault.path_contains in path and fault.times > 0:
                    fault.times -= 1
                    raise ApiError(fault.status, REASONS.get(fault.status, "Unknown"), "injected")
            return await self._resource_request(raw, parts, body)
        except ApiError as error:
            if raw.method != "GET":
                self.writes.append(
                    Write(
                        raw.method,
                        path,
                        error.code,
                        asyncio.get_running_loop().time(),
                        len(body),
                        raw.headers.get("User-Agent", ""),
                    )
                )
            return error.response()

    # -- discovery fixes (kmock's answers as the real server gives them) ------------------------
    async def _serve_version(self, request: kmock.Request) -> Any:
        document = dict(await super()._serve_version(request))
        assert request.resource is not None
        if request.resource.group == "":  # the core group is "v1", not "/v1"
            document["groupVersion"] = request.resource.version
        return document

    async def _serve_server_version(self, request: kmock.Request) -> Any:
        return {
            **(await super()._serve_server_version(request)),
            "minor": "32",
            "gitVersion": "v1.32.0",
        }

    def _parse(self, parts: list[str]) -> tuple[ResourceType, str | None, str | None, str | None]:
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        else:
            group, version, rest = parts[1], parts[2], parts[3:]
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
            namespace, rest = rest[1], rest[2:]
        plural, name, sub = (
            rest[0],
            (rest[1] if len(rest) > 1 else None),
            (rest[2] if len(rest) > 2 else None),
        )
        return self._type(group, version, plural), namespace, name, sub

    async def _resource_request(
        self, raw: aiohttp.web.BaseRequest, parts: list[str], body: bytes
    ) -> aiohttp.web.StreamResponse:
        rtype, namespace, name, sub = self._parse(parts)
        query = raw.query
        method = raw.method
        if method == "GET" and query.get("watch") in ("true", "1"):
            return await self._watch(raw, rtype, namespace, name)
        if method == "GET":
            if name is None:
                return aiohttp.web.json_response(
                    self._list(rtype, namespace, query.get("labelSelector"))
                )
            return aiohttp.web.json_response(self._get(rtype, namespace, name))
        content_type = raw.headers.get("Content-Type", "").split(";")[0]
        if method == "DELETE":
            data = None  # DeleteOptions: propagation and preconditions are not emulated
        elif content_type == "application/vnd.kubernetes.protobuf":
            try:
                data: Any = protobuf.decode(body)
            except (ValueError, IndexError) as exc:
                raise ApiError(415, "UnsupportedMediaType", str(exc)) from None
        else:
            data = json.loads(body) if body else None
        dry_run = query.get("dryRun") == "All"
        self._strict = query.get("fieldValidation") == "Strict"
        if method == "POST":
            result, status = self._create(rtype, namespace, data, dry_run), 201
        elif method == "PATCH":
            content_type = raw.headers.get("Content-Type", "").split(";")[0]
            result, status = (
                self._patch(rtype, namespace, name, sub, data, content_type, dry_run),
                200,
            )
        elif method == "PUT":
            result, status = self._replace(rtype, namespace, name, sub, data, dry_run), 200
        elif method == "DELETE":
            result, status = self._delete(rtype, namespace, name, dry_run), 200
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")
        self.writes.append(
            Write(
                method,
                raw.path,
                status,
                asyncio.get_running_loop().time(),
                len(body),
                raw.headers.get("User-Agent", ""),
            )
        )
        return aiohttp.web.json_response(result, status=status)

    # -- reads ----------------------------------------------------------------------------------
    def _key(self, rtype: ResourceType, namespace: str | None, name: str) -> Key:
        return (rtype.api_version, rtype.plural, namespace if rtype.namespaced else None, name)

    def _get(self, rtype: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self._store.get(self._key(rtype, namespace, name))
        if obj is None:
            raise self._not_found(rtype, name)
        return copy.deepcopy(obj)

    @staticmethod
    def _matches(obj: dict[str, Any], selector: str | None) -> bool:
        if not selector:
            return True
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for raw_term in selector.split(","):
            term = raw_term.strip()
            if "!=" in term:
                key, value = term.split("!=", 1)
                if labels.get(key.strip()) == value.strip():
                    return False
            elif "=" in term:
                key, value = term.split("=", 1)
                if labels.get(key.strip().rstrip("=")) != value.strip().lstrip("="):
                    return False
            elif term.startswith("!"):
                if term[1:] in labels:
                    return False
            elif term not in labels:
                return False
        return True

    def _list(
        self, rtype: ResourceType, namespace: str | None, selector: str | None
    ) -> dict[str, Any]:
        items = [
            copy.deepcopy(obj)
            for (api_version, plural, ns, _), obj in sorted(
                self._store.items(), key=lambda kv: str(kv[0])
            )
            if (api_version, plural) == (rtype.api_version, rtype.plural)
            and (namespace is None or ns == namespace)
            and self._matches(obj, selector)
        ]
        return {
            "apiVersion": rtype.api_version,
            "kind": f"{rtype.kind}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    async def _watch(
        self,
        raw: aiohttp.web.BaseRequest,
        rtype: ResourceType,
        namespace: str | None,
        name: str | None,
    ) -> aiohttp.web.StreamResponse:
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        since = int(raw.query.get("resourceVersion") or 0)
        selector = raw.query.get("labelSelector")
        timeout = float(raw.query.get("timeoutSeconds") or 3600)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        wake = asyncio.Event()
        self._watchers.add(wake)
        position = 0
        try:
            if since == 0:  # no version: the current objects first, as ADDED
                for obj in self._list(rtype, namespace, selector)["items"]:
                    if name is None or obj["metadata"]["name"] == name:
                        event = {"type": "ADDED", "object": obj}
                        await response.write(json.dumps(event).encode() + b"\n")
                position = len(self._events)
            while loop.time() < deadline:
                wake.clear()
                for rv, (api_version, plural), event in self._events[position:]:
                    position += 1
                    if (api_version, plural) != (rtype.api_version, rtype.plural) or rv <= since:
                        continue
                    meta = event["object"]["metadata"]
                    if namespace is not None and meta.get("namespace") != namespace:
                        continue
                    if name is not None and meta.get("name") != name:
                        continue
                    if not self._matches(event["object"], selector):
                        continue
                    await response.write(json.dumps(event).encode() + b"\n")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), max(deadline - loop.time(), 0.01))
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError, RuntimeError):
            pass  # the client went away, or the server is stopping
        finally:
            self._watchers.discard(wake)
        return response

    def _emit(self, rtype: ResourceType, kind: str, obj: dict[str, Any]) -> None:
        """Record the event (with the object's own version) and wake the watchers."""
        version = int((obj.get("metadata") or {}).get("resourceVersion") or self._rv)
        event = {"type": kind, "object": copy.deepcopy(obj)}
        self._events.append((version, (rtype.api_version, rtype.plural), event))
        for wake in list(self._watchers):
            wake.set()

    # -- writes ---------------------------------------------------------------------------------
    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _create(
        self, rtype: ResourceType, namespace: str | None, data: dict[str, Any], dry_run: bool
    ) -> dict[str, Any]:
        obj = copy.deepcopy(data)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)
        if not meta.get("name"):
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        if rtype.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        key = self._key(rtype, meta.get("namespace"), meta["name"])
        if key in self._store:
            raise ApiError(409, "AlreadyExists", f'{rtype.plural} "{meta["name"]}" already exists')
        obj["apiVersion"], obj["kind"] = rtype.api_version, rtype.kind
        if rtype.status_subresource:
            obj.pop("status", None)
        obj = admission.validate(rtype, obj, None, self._strict, self._validators)
        meta = obj["metadata"]
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1)
        if rtype.plural == "customresourcedefinitions":
            self._register_crd(obj)
        if dry_run:
            return obj
        meta["resourceVersion"] = self._bump()
        self._store[key] = obj
        self._emit(rtype, "ADDED", obj)
        return copy.deepcopy(obj)

    def _commit(
        self,
        rtype: ResourceType,
        key: Key,
        old: dict[str, Any],
        new: dict[str, Any],
        sub: str | None,
        dry_run: bool,
    ) -> dict[str, Any]:
        # Identity is not the client's to change.
        for field in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "resourceVersion",
            "generation",
        ):
            if field in old["metadata"]:
                new.setdefault("metadata", {})[field] = old["metadata"][field]
        new["apiVersion"], new["kind"] = rtype.api_version, rtype.kind
        if old["metadata"].get("deletionTimestamp"):
            new["metadata"]["deletionTimestamp"] = old["metadata"]["deletionTimestamp"]
        if rtype.status_subresource:
            if sub == "status":
                new = {**copy.deepcopy(old), "status": new.get("status")}
                if new["status"] is None:
                    new.pop("status")
            else:
                new.pop("status", None)
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
        new = admission.validate(rtype, new, old, self._strict, self._validators)
        if new == old:
            return copy.deepcopy(old)  # a no-op write changes nothing, not even the version

        def body(o: dict[str, Any]) -> dict[str, Any]:
            return {k: v for k, v in o.items() if k not in ("metadata", "status")}

        if body(new) != body(old):
            new["metadata"]["generation"] = int(old["metadata"].get("generation") or 0) + 1
        if rtype.plural == "customresourcedefinitions":
            self._register_crd(new)
        if dry_run:
            return new
        new["metadata"]["resourceVersion"] = self._bump()
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            del self._store[key]
            self._emit(rtype, "DELETED", new)
        else:
            self._store[key] = new
            self._emit(rtype, "MODIFIED", new)
        return copy.deepcopy(new)

    def _not_found(self, rtype: ResourceType, name: str) -> ApiError:
        return ApiError(404, "NotFound", f'{rtype.plural}.{rtype.group} "{name}" not found')

    @staticmethod
    def _check_version(data: Any, old: dict[str, Any]) -> None:
        """409 when the request names a resourceVersion that is no longer current."""
        version = ((data or {}).get("metadata") or {}).get("resourceVersion")
        if version and version != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", STALE)

    def _patch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str | None,
        sub: str | None,
        data: Any,
        content_type: str,
        dry_run: bool,
    ) -> dict[str, Any]:
        assert name is not None
        key = self._key(rtype, namespace, name)
        old = self._store.get(key)
        if old is None:
            if content_type == "application/apply-patch+yaml":
                return self._create(rtype, namespace, data, dry_run)
            raise self._not_found(rtype, name)
        if content_type == "application/json-patch+json":
            try:
                new = json_patch(old, data)
            except (ValueError, KeyError, IndexError) as exc:
                raise ApiError(422, "Invalid", f"json patch: {exc}") from None
        else:
            new = merge_patch(old, data)
            if content_type != "application/apply-patch+yaml":
                self._check_version(data, old)
        return self._commit(rtype, key, old, new, sub, dry_run)

    def _replace(
        self,
        rtype: ResourceType,
        namespace: str | None,
        name: str | None,
        sub: str | None,
        data: Any,
        dry_run: bool,
    ) -> dict[str, Any]:
        assert name is not None
        key = self._key(rtype, namespace, name)
        old = self._store.get(key)
        if old is None:
            raise self._not_found(rtype, name)
        self._check_version(data, old)
        return self._commit(rtype, key, old, copy.deepcopy(data), sub, dry_run)

    def _delete(
        self, rtype: ResourceType, namespace: str | None, name: str | None, dry_run: bool
    ) -> dict[str, Any]:
        assert name is not None
        key = self._key(rtype, namespace, name)
        old = self._store.get(key)
        if old is None:
            raise self._not_found(rtype, name)
        if dry_run:
            return copy.deepcopy(old)
        if old["metadata"].get("finalizers"):
            if not old["metadata"].get("deletionTimestamp"):
                new = copy.deepcopy(old)
                new["metadata"]["deletionTimestamp"] = now()
                new["metadata"]["resourceVersion"] = self._bump()
                self._store[key] = new
                self._emit(rtype, "MODIFIED", new)
                return copy.deepcopy(new)
            return copy.deepcopy(old)
        del self._store[key]
        gone = copy.deepcopy(old)
        gone["metadata"]["resourceVersion"] = self._bump()
        self._emit(rtype, "DELETED", gone)
        return gone
