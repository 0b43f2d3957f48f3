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
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import datetime
import json
import secrets
import threading
import uuid
import warnings
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import jsonschema
import kmock

from tests.k8s import protobuf
from tests.k8s.cel import violations

Key = tuple[str, str, str | None, str]  # (group/version, plural, namespace, name)


@dataclasses.dataclass
class Fault:
    method: str
    path_contains: str
    status: int
    times: int = 1


@dataclasses.dataclass
class Write:
    method: str
    path: str
    status: int
    at: float
    body_bytes: int = 0
    """The request body's size: what the writer sent."""
    user_agent: str = ""


@dataclasses.dataclass
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool
    schema: dict[str, Any] | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: null removes a key, objects merge, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: Any, operations: list[dict[str, Any]]) -> Any:
    """RFC 6902 (add, remove, replace, test) on a copy."""
    document = copy.deepcopy(target)
    for operation in operations:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in operation["path"].split("/")[1:]]
        parent = document
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1] if parts else ""
        op = operation["op"]
        if op == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != operation["value"]:
                raise ValueError(f"test failed at {operation['path']}")
        elif op == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                del parent[last]
        elif op in ("add", "replace"):
            if isinstance(parent, list):
                if last == "-":
                    parent.append(operation["value"])
                elif op == "add":
                    parent.insert(int(last), operation["value"])
                else:
                    parent[int(last)] = operation["value"]
            else:
                parent[last] = operation["value"]
        else:
            raise ValueError(f"unsupported JSON patch op {op}")
    return document


def _apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    if isinstance(value, dict):
        for name, sub in (schema.get("properties") or {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = _apply_defaults(sub, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_apply_defaults(schema["items"], item) for item in value]
    return value


def _prune(schema: dict[str, Any], value: Any, path: str = "") -> Any:
    """Drop fields the schema does not know (the real server's pruning)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if properties is None and isinstance(additional, dict):
            return {k: _prune(additional, v) for k, v in value.items()}
        if properties is None:
            return value if path in ("", ".metadata") or schema.get("type") != "object" else {}
        return {
            k: _prune(properties[k], v, f"{path}.{k}") for k, v in value.items() if k in properties
        }
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_prune(schema["items"], item, path) for item in value]
    return value


def _removed(before: Any, after: Any, path: str = "") -> list[str]:
    """Paths present in ``before`` and pruned from ``after``."""
    if not isinstance(before, dict):
        return []
    result = []
    for key, value in before.items():
        if not isinstance(after, dict) or key not in after:
            result.append(f"{path}.{key}")
        else:
            result += _removed(value, after[key], f"{path}.{key}")
    return result


def _json_schema(schema: Any) -> Any:
    """The OpenAPI schema as draft-7 JSON schema (int-or-string, nullable)."""
    if isinstance(schema, list):
        return [_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    result = {k: _json_schema(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if schema.get("x-kubernetes-int-or-string"):
        result.pop("type", None)
        result.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if result.pop("nullable", False) and "type" in result:
        result["type"] = [result["type"], "null"]
    result.pop("format", None)
    return result


class ApiError(Exception):
    def __init__(
        self, code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None
    ):
        super().__init__(message)
        self.code, self.reason, self.message, self.causes = code, reason, message, causes or []

    def response(self) -> aiohttp.web.Response:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.causes:
            body["details"] = {"causes": self.causes}
        return aiohttp.web.json_response(body, status=self.code)


STALE = "the object has been modified; please apply your changes to the latest version"
REASONS = {
    404: "NotFound",
    409: "Conflict",
    422: "Invalid",
    500: "InternalError",
    503: "ServiceUnavailable",
}


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
                    "lastTransitionTime": _now(),
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
            return self._openapi(path)
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

    # -- OpenAPI v3 (for kubectl's and helm's validation) ---------------------------------------
    def _group_versions(self) -> dict[str, list[tuple[str, Any]]]:
        result: dict[str, list[tuple[str, Any]]] = {}
        for resource, info in self.resources.items():
            if resource.version is None or resource.plural is None or "/" in resource.plural:
                continue
            gv = (
                f"apis/{resource.group}/{resource.version}"
                if resource.group
                else f"api/{resource.version}"
            )
            result.setdefault(gv, []).append((resource.plural, info))
        return result

    def _openapi(self, path: str) -> aiohttp.web.Response:
        """A minimal OpenAPI v3: every group-version with a PATCH operation per resource that
        accepts ``fieldValidation`` (so clients validate server-side, here), and the CRD
        schemas. No v2 (404): clients then rely on v3."""
        groups = self._group_versions()
        if path.rstrip("/") == "/openapi/v3":
            return aiohttp.web.json_response(
                {
                    "paths": {
                        gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={self._rv}"}
                        for gv in groups
                    }
                }
            )
        gv = path[len("/openapi/v3/") :].strip("/")
        if gv not in groups:
            return ApiError(404, "NotFound", f"no OpenAPI document for {path}").response()
        group, _, version = gv.removeprefix("apis/").removeprefix("api/").rpartition("/")
        if gv.startswith("api/"):
            group, version = "", gv.split("/")[1]
        paths: dict[str, Any] = {}
        schemas: dict[str, Any] = {}
        for plural, info in groups[gv]:
            kind = info.kind or plural
            scoped = (
                f"/{gv}/namespaces/{{namespace}}/{plural}/{{name}}"
                if info.namespaced
                else f"/{gv}/{plural}/{{name}}"
            )
            gvk = {"group": group, "version": version, "kind": kind}
            operation = {
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                    {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                ],
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "responses": {"200": {"description": "OK"}},
            }
            paths[scoped] = {"patch": operation, "put": {**operation, "x-kubernetes-action": "put"}}
            rtype = self._types.get((f"{group}/{version}" if group else version, plural))
            schema = (rtype.schema if rtype else None) or {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
            }
            prefix = ".".join(reversed(group.split("."))) if group else "io.k8s.api.core"
            name = f"{prefix}.{version}.{kind}"
            schemas[name] = {**schema, "x-kubernetes-group-version-kind": [gvk]}
        return aiohttp.web.json_response(
            {
                "openapi": "3.0.0",
                "info": {"title": "fake", "version": "v1"},
                "paths": paths,
                "components": {"schemas": schemas},
            }
        )

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

    def _validate(
        self,
        rtype: ResourceType,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        strict: bool = False,
    ) -> dict[str, Any]:
        schema = rtype.schema
        if schema is None:
            return obj
        pruned = _prune(schema, obj)
        if strict and pruned != obj:
            unknown = sorted(_removed(obj, pruned))
            raise ApiError(
                422,
                "Invalid",
                f'{rtype.kind}.{rtype.group} "{(obj.get("metadata") or {}).get("name")}": strict '
                f"decoding error: unknown field(s) {', '.join(repr(u) for u in unknown)}",
                [
                    {"reason": "FieldValueInvalid", "message": f"unknown field {u}", "field": u}
                    for u in unknown
                ],
            )
        obj = pruned
        obj = _apply_defaults(schema, obj)
        cached = self._validators.get(id(schema))
        if cached is None or cached[0] is not schema:
            cached = self._validators[id(schema)] = (
                schema,
                jsonschema.Draft7Validator(_json_schema(schema)),
            )
        validator = cached[1]
        causes = [
            {
                "reason": "FieldValueInvalid",
                "message": f"{'.'.join(str(p) for p in error.absolute_path)}: {error.message}",
                "field": ".".join(str(p) for p in error.absolute_path),
            }
            for error in validator.iter_errors(obj)
        ]
        causes += [
            {"reason": "FieldValueInvalid", "message": v, "field": v.split(":")[0]}
            for v in violations(schema, obj, old)
        ]
        if causes:
            name = (obj.get("metadata") or {}).get("name")
            raise ApiError(
                422,
                "Invalid",
                f'{rtype.kind}.{rtype.group} "{name}" is invalid: '
                + "; ".join(c["message"] for c in causes),
                causes,
            )
        return obj

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
        obj = self._validate(rtype, obj, None, self._strict)
        meta = obj["metadata"]
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
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
        new = self._validate(rtype, new, old, self._strict)
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
                new["metadata"]["deletionTimestamp"] = _now()
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
