"""The fake API server's records: a stored object's key, a resource type (built-in or from a
CRD), an injected fault, and an entry of the write log; and the timestamp format it stamps."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

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


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
