"""Admission of custom objects by their CRD's ``openAPIV3Schema``, as the real server does it:
pruning of unknown fields, defaults, JSON-schema validation (the OpenAPI schema as draft 7) and
the CEL rules (``tests.k8s.cel``), refused with 422 Invalid and the causes as the real server
words them."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema

from tests.k8s.api_errors import ApiError
from tests.k8s.api_types import ResourceType
from tests.k8s.cel import violations


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


def validate(
    rtype: ResourceType,
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    strict: bool,
    validators: dict[int, tuple[Any, Any]],
) -> dict[str, Any]:
    """The object as stored after admission by its CRD's schema: unknown fields pruned (422
    under strict field validation), defaults applied, then JSON-schema validation and the CEL
    rules (422 Invalid with the causes). ``validators`` caches a validator per schema."""
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
    cached = validators.get(id(schema))
    if cached is None or cached[0] is not schema:
        cached = validators[id(schema)] = (
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
