"""What an API server answers when it refuses a request, read the same way by both clients.

The shells' asynchronous client (:class:`webhook.kube.client.KubeApiError`) and ``kq``'s synchronous one
(:class:`webhook.readmodel.kubeapi.ApiError`) raise subclasses of :class:`ApiStatusError`: the HTTP status (0 when
the server was not reached), the ``Status`` object's ``reason`` and ``message``, and the same questions about
them (not found, forbidden, conflict, gone). :func:`status_error` decodes a refusal's body once for both.
"""

from __future__ import annotations

import json
from typing import TypeVar

from webhook.api.objects import Obj

__all__ = ["ApiStatusError", "status_error"]


class ApiStatusError(Exception):
    """A refused or failed request to the API server."""

    def __init__(self, status: int, reason: str, message: str = "", body: Obj | None = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body = dict(body or {})
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """``<message> (403 Forbidden)`` on one line (just the message when the server was not reached)."""
        text = " ".join((self.message or self.reason or "error").split())
        if self.status == 0:
            return text
        return f"{text} ({self.status} {self.reason})" if self.reason and self.reason not in text else text

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def forbidden(self) -> bool:
        """Unauthenticated (401) or refused by RBAC (403)."""
        return self.status in (401, 403)

    @property
    def conflict(self) -> bool:
        """409: the object changed (a stale resourceVersion) or already exists."""
        return self.status == 409

    @property
    def gone(self) -> bool:
        """410 Gone: a watch's resource version is too old; re-list."""
        return self.status == 410


E = TypeVar("E", bound=ApiStatusError)


def status_error(cls: type[E], status: int, reason: str, raw: bytes, limit: int = 300) -> E:
    """The error of a refusal whose body is ``raw``: a Kubernetes ``Status`` object gives the reason and the
    message; any other body is kept as the message (at most ``limit`` characters)."""
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        return cls(status, reason, raw[:limit].decode("utf-8", "replace").strip())
    if not isinstance(body, dict):
        return cls(status, reason, str(body)[:limit])
    return cls(status, str(body.get("reason") or reason), str(body.get("message") or ""), body)
