"""The fake API server's OpenAPI v3 documents, for kubectl's and helm's validation: every
group-version of the registry (kmock's resources, the built-ins and every CRD created), with the
CRD schemas."""

from __future__ import annotations

from typing import Any

import aiohttp.web

from tests.k8s.api_errors import ApiError
from tests.k8s.api_types import ResourceType


def group_versions(resources: Any) -> dict[str, list[tuple[str, Any]]]:
    """The registry's resources by group-version path (``apis/group/version``, ``api/v1``)."""
    result: dict[str, list[tuple[str, Any]]] = {}
    for resource, info in resources.items():
        if resource.version is None or resource.plural is None or "/" in resource.plural:
            continue
        gv = (
            f"apis/{resource.group}/{resource.version}"
            if resource.group
            else f"api/{resource.version}"
        )
        result.setdefault(gv, []).append((resource.plural, info))
    return result


def response(
    path: str,
    resources: Any,
    types: dict[tuple[str, str], ResourceType],
    resource_version: int,
) -> aiohttp.web.Response:
    """A minimal OpenAPI v3: every group-version with a PATCH operation per resource that
    accepts ``fieldValidation`` (so clients validate server-side, here), and the CRD
    schemas. No v2 (404): clients then rely on v3."""
    groups = group_versions(resources)
    if path.rstrip("/") == "/openapi/v3":
        return aiohttp.web.json_response(
            {
                "paths": {
                    gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash={resource_version}"}
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
        rtype = types.get((f"{group}/{version}" if group else version, plural))
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
