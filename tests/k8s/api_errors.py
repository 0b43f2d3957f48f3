"""The fake API server's error answers: ApiError, raised anywhere in request handling and
answered as a Kubernetes Status body with its code, reason and causes."""

from __future__ import annotations

from typing import Any

import aiohttp.web


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
