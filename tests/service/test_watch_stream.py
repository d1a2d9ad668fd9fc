"""A watch response read off a real HTTP connection (aiohttp's server, chunked as the API server sends it):
events split across writes or sharing one, the stream's end, bad lines, an event longer than aiohttp's default line."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from webhook.api.objects import annotations_of, mapping, name_of
from webhook.kube.client import JSON, KubeClient, ResourceRef

PODS = ResourceRef("", "v1", "pods")
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "http://127.0.0.1:%d"}}]
users: [{name: test, user: {token: secret}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
"""


def event(name: str, kind: str = "MODIFIED") -> bytes:
    return orjson.dumps({"type": kind, "object": {"metadata": {"name": name, "resourceVersion": "7"}}}) + b"\n"


class Stream:
    """One watch response whose body the test writes piece by piece (``None`` ends it)."""

    def __init__(self) -> None:
        self.pieces: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.query: dict[str, str] = {}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.query = dict(request.query)
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        while (piece := await self.pieces.get()) is not None:
            await response.write(piece)
        await response.write_eof()
        return response


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Stream, KubeClient]]:
    stream = Stream()
    app = web.Application()
    app.router.add_get("/api/v1/pods", stream.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    (tmp_path / "kubeconfig").write_text(KUBECONFIG % port)
    client = await KubeClient.connect(str(tmp_path / "kubeconfig"))
    try:
        yield stream, client
    finally:
        await client.close()
        await runner.cleanup()


def names(events: list[JSON]) -> list[str]:
    return [name_of(mapping(e["object"])) for e in events]


async def test_events_split_across_writes_or_sharing_one_come_whole_and_in_order(
    served: tuple[Stream, KubeClient],
) -> None:
    stream, client = served
    one, two, three, four = event("a"), event("b"), event("c"), event("d").rstrip(b"\n")
    for piece in (one[:7], one[7:] + two[:3], two[3:] + b"\n\n" + three, b"  \n" + four, None):
        stream.pieces.put_nowait(piece)
    async with client.watch(PODS, resource_version="5", timeout_seconds=30) as events:
        got = [e async for e in events]
    assert names(got) == ["a", "b", "c", "d"]  # the last line had no newline: the stream's end closes it
    assert stream.query["resourceVersion"] == "5" and stream.query["allowWatchBookmarks"] == "true"


async def test_an_undecodable_line_is_logged_and_skipped(
    served: tuple[Stream, KubeClient], caplog: pytest.LogCaptureFixture
) -> None:
    stream, client = served
    for piece in (event("a"), b'{"type": "MODIFIED", "obj\n', b"[1, 2]\n", event("b"), None):
        stream.pieces.put_nowait(piece)
    with caplog.at_level(logging.WARNING, logger="webhook.kube.client"):
        async with client.watch(PODS, resource_version="5", timeout_seconds=30) as events:
            got = [e async for e in events]
    assert names(got) == ["a", "b"]  # a line that is JSON but not an object is skipped too, silently
    (record,) = [r for r in caplog.records if "undecodable" in r.getMessage()]
    assert "watch=pods.core/v1" in record.getMessage() and '{"type": "MODIFIED", "obj' in record.getMessage()


async def test_an_event_of_any_length_comes_whole(served: tuple[Stream, KubeClient]) -> None:
    stream, client = served
    big = {"workflows.argoproj.io/template": "x" * 300_000}  # over aiohttp's default line limit (128 KiB)
    line = orjson.dumps({"type": "ADDED", "object": {"metadata": {"name": "big", "annotations": big}}}) + b"\n"
    pieces = [line[i : i + 7000] for i in range(0, len(line), 7000)]
    for piece in (event("a"), *pieces, line + event("b"), None):
        stream.pieces.put_nowait(piece)
    async with client.watch(PODS, resource_version="5", timeout_seconds=30) as events:
        got = [e async for e in events]
    assert names(got) == ["a", "big", "big", "b"]
    assert got[1] == got[2] and annotations_of(mapping(got[1]["object"])) == big
