"""The one fake API server over real HTTP: :class:`tests.kubefake.ObjectStore` behind an aiohttp front, for
the tests that run a shell against a kubeconfig URL (``kq serve``, the console).

It authenticates bearer tokens (``users``; 401 for any other), honours ``Impersonate-User``, refuses paths
under the prefixes of ``refuse`` (as RBAC does), answers ``selfsubjectreviews``, discovery, lists (namespace,
label and field selectors; held while ``lists_open`` is clear), watches (the store's change log as JSON
lines), get, create, replace, merge and JSON patch, and delete. It records every request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, NamedTuple

import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.kubefake import JSON, Kind, ObjectStore, fields_match, labels_match, parse_path


class Refused(Exception):
    """An API error, answered as a ``Status``."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


class Seen(NamedTuple):
    method: str
    path: str
    query: str
    authorization: str
    impersonate: str


def status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message,
            "code": code}
    return web.json_response(body, status=code)


VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def forbidden(method: str, path: str, user: str) -> str:
    """What RBAC answers, e.g. ``jobs.batch is forbidden: User "alice" cannot list resource "jobs" in API group
    "batch" in the namespace "user-c"``."""
    (group, _, plural), namespace, name, _ = parse_path(path)
    verb = VERBS.get(method, "get" if name else "list")
    where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    return (f'{plural}{"." + group if group else ""} is forbidden: User "{user}" cannot {verb} resource "{plural}" '
            f'in API group "{group}"{where}')


def list_page(items: list[JSON], query: Any, version: int) -> dict[str, Any]:
    """A list answer as the API server writes it (``kind``, ``apiVersion``, ``metadata``, then ``items``),
    ``limit`` objects from the ``continue`` token on (a plain offset here)."""
    start = int(query.get("continue") or 0)
    limit = int(query.get("limit") or 0)
    end = start + limit if limit > 0 else len(items)
    metadata: dict[str, Any] = {"resourceVersion": str(version)}
    if end < len(items):
        metadata["continue"] = str(end)
        metadata["remainingItemCount"] = len(items) - end
    return {"kind": "List", "apiVersion": "v1", "metadata": metadata, "items": items[start:end]}


class HttpApiserver(ObjectStore):
    """See the module notes; the store's helpers (``put``, ``remove``, ``obj``, ...) act as another client."""

    def __init__(self, users: dict[str, str] | None = None) -> None:
        super().__init__(Refused)
        self.users: dict[str, str] = dict(users or {})
        """Bearer token -> user name."""
        self.refuse: dict[str, int] = {}
        """Path prefix -> the status that refuses it (403: RBAC)."""
        self.seen: list[Seen] = []
        self.lists_open = asyncio.Event()
        """Lists are answered once this is set (tests clear it to hold the caches unlisted)."""
        self.lists_open.set()
        self.app = web.Application()
        self.app.router.add_route("*", "/{path:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        impersonate = request.headers.get("Impersonate-User", "")
        self.seen.append(Seen(request.method, request.path, request.query_string, auth, impersonate))
        token = auth.removeprefix("Bearer ")
        if token not in self.users:
            return status(401, "Unauthorized", "Unauthorized")
        user = impersonate or self.users[token]
        for prefix, code in self.refuse.items():
            if request.path.startswith(prefix):
                return status(code, "Forbidden", forbidden(request.method, request.path, user))
        try:
            return await self._answer(request, user)
        except Refused as refused:
            return status(refused.status, refused.reason, refused.message)

    async def _answer(self, request: web.Request, user: str) -> web.StreamResponse:
        path = request.path
        if path.endswith("/selfsubjectreviews") and request.method == "POST":
            return web.json_response({"status": {"userInfo": {"username": user}}})
        if path == "/apis":
            groups = sorted({kind[0] for kind in self.items if kind[0]})
            return web.json_response({"kind": "APIGroupList", "groups": [{"name": group} for group in groups]})
        parts = path.strip("/").split("/")
        if (parts[0] == "api" and len(parts) == 2) or (parts[0] == "apis" and len(parts) == 3):
            group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
            served = sorted(plural for g, v, plural in self.items if (g, v) == (group, version))
            return web.json_response({"kind": "APIResourceList", "resources": [{"name": p} for p in served]})
        kind, namespace, name, subresource = parse_path(path)
        query = request.query
        if name is None and request.method == "GET":
            if query.get("watch") == "true":
                return await self._watch(request, kind, namespace)
            await self.lists_open.wait()
            items = self.select(kind, namespace, query.get("labelSelector"), query.get("fieldSelector"))
            listed = list_page(items, request.query, self.version)
            return web.Response(body=orjson.dumps(listed), content_type="application/json")
        body: Any = await request.json() if request.can_read_body else None
        if request.method == "POST" and name is None:
            if namespace:
                body.setdefault("metadata", {})["namespace"] = namespace
            return web.json_response(self.create(kind, body), status=201)
        if name is None:
            raise Refused(405, "MethodNotAllowed", f"{request.method} {path} is not faked")
        if request.method == "GET":
            return web.json_response(self.get(kind, name, namespace))
        if request.method == "PUT":
            return web.json_response(self.replace(kind, name, namespace, body))
        if request.method == "PATCH" and request.content_type == "application/json-patch+json":
            return web.json_response(self.json_patch(kind, name, namespace, body, subresource))
        if request.method == "PATCH":
            return web.json_response(self.merge_patch(kind, name, namespace, body, subresource))
        if request.method == "DELETE":
            return web.json_response(self.delete(kind, name, namespace))
        raise Refused(405, "MethodNotAllowed", f"{request.method} {path} is not faked")

    async def _watch(self, request: web.Request, kind: Kind, namespace: str | None) -> web.StreamResponse:
        query = request.query

        def selected(obj: JSON) -> bool:
            if namespace and obj.get("metadata", {}).get("namespace") != namespace:
                return False
            return labels_match(obj, query.get("labelSelector")) and fields_match(obj, query.get("fieldSelector"))

        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        async for event in self.events(kind, int(query.get("resourceVersion") or 0), selected):
            await response.write(orjson.dumps(event) + b"\n")
        return response


@asynccontextmanager
async def serving(fake: HttpApiserver) -> AsyncIterator[str]:
    """``fake`` listening on a loopback port for the block; its URL."""
    server = TestServer(fake.app, host="127.0.0.1")
    await server.start_server()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.close()
