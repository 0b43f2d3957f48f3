"""The patch formats the fake API server applies: JSON merge patch (RFC 7386, also serving for
strategic merge and server-side apply) and JSON patch (RFC 6902)."""

from __future__ import annotations

import copy
from typing import Any


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
