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
    error), or with ``table`` who accepts a Table; each such request is kept in ``asked``, as ``(path, query)``."""

    def __init__(self, answer: dict[str, Any] | ApiError, proxied: Callable[[str], bool],
                 table: dict[str, Any] | None = None) -> None:
        base = seed_api()
        super().__init__(namespace="user-a", now=NOW, served={"kubeflow.org": ["v1"]})
        self.store, self.objects, self.groups = base.store, base.objects, base.groups
        self.answer = answer
        self.proxied = proxied
        self.asked: list[tuple[str, tuple[tuple[str, str], ...]]] = []
        self.table_answer = table
        """What the proxied paths answer who accepts a Table (``None``: the same as anyone, as a service that
        serves no Table)."""
        self.tables_asked = 0

    def table(self, path: str, query: Sequence[tuple[str, str]] = ()) -> Any:
        if self.proxied(path):
            self.tables_asked += 1
            if self.table_answer is not None:
                self.requests.append(("GET", path, tuple(query)))
                self.asked.append((path, tuple(query)))
                return self.table_answer
        return super().table(path, query)

    def request(self, method: str, path: str, query: Sequence[tuple[str, str]] = (), body: Any = None,
                content_type: str = "application/json") -> Any:
        if self.proxied(path):
            self.requests.append((method, path, tuple(query)))
            self.asked.append((path, tuple(query)))
            if isinstance(self.answer, ApiError):
                raise self.answer
            return self.answer
        return super().request(method, path, query, body, content_type)
