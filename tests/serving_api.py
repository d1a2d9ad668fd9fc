"""The seed's cluster as ``kq`` reads it, with the API server proxying some paths to the controller's read API
(docs/queueing.md, "Reading every job")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tests.clirun import NOW, seed_api
from tests.fakeapi import FakeApi
from webhook.readmodel.kubeapi import ApiError


class ServingApi(FakeApi):
    """The seed's cluster, whose API server answers the paths ``proxied`` accepts with ``answer`` (a body or an
    error); each such request is kept in ``asked``, as ``(path, query)``."""

    def __init__(self, answer: dict[str, Any] | ApiError, proxied: Callable[[str], bool]) -> None:
        base = seed_api()
        super().__init__(namespace="user-a", now=NOW, served={"kubeflow.org": ["v1"]})
        self.store, self.objects, self.groups = base.store, base.objects, base.groups
        self.answer = answer
        self.proxied = proxied
        self.asked: list[tuple[str, tuple[tuple[str, str], ...]]] = []

    def request(self, method: str, path: str, query: Sequence[tuple[str, str]] = (), body: Any = None,
                content_type: str = "application/json") -> Any:
        if self.proxied(path):
            self.requests.append((method, path, tuple(query)))
            self.asked.append((path, tuple(query)))
            if isinstance(self.answer, ApiError):
                raise self.answer
            return self.answer
        return super().request(method, path, query, body, content_type)
