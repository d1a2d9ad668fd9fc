"""The extender's HTTP/1.1 server on the wire: keep-alive, pipelining, split reads, 100-continue, and the
refusals - over raw sockets, as a client that is not aiohttp would talk to it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.service.wire_support import closed, connect, post, read_response
from webhook.extender.http import MAX_HEAD_BYTES, HttpServer, Reply, Routes, start_server

MAX_BODY = 1024
REPO = Path(__file__).resolve().parents[2]
CALLS: list[str] = []


def echo(body: bytes) -> Reply:
    return Reply(200, b"echo:" + body, "text/plain", then=lambda: CALLS.append("after echo"))


def broken(body: bytes) -> Reply:
    raise RuntimeError("boom")


def broken_after(body: bytes) -> Reply:
    def fail() -> None:
        raise RuntimeError("after")

    return Reply(200, b"ok", "text/plain", then=fail)


ROUTES: Routes = {"/echo": {"POST": echo}, "/broken": {"POST": broken}, "/broken-after": {"POST": broken_after}}


@pytest.fixture
async def server() -> AsyncIterator[HttpServer]:
    CALLS.clear()
    listener = await start_server(ROUTES, "127.0.0.1", 0, max_body=MAX_BODY)
    try:
        yield listener
    finally:
        await listener.close()


async def test_keep_alive_answers_request_after_request_on_one_connection(server: HttpServer) -> None:
    reader, writer = await connect(server)
    for index in range(3):
        writer.write(post("/echo", f"n{index}".encode()))
        status, headers, body = await read_response(reader)
        assert (status, body) == (200, f"echo:n{index}".encode())
        assert headers["content-type"] == "text/plain"
        assert "connection" not in headers
    assert CALLS == ["after echo"] * 3
    writer.close()


async def test_pipelined_requests_are_answered_in_order(server: HttpServer) -> None:
    reader, writer = await connect(server)
    writer.write(post("/echo", b"a") + post("/echo?x=1", b"b") + post("/echo", b"c"))
    bodies = [(await read_response(reader))[2] for _ in range(3)]
    assert bodies == [b"echo:a", b"echo:b", b"echo:c"]
    writer.close()


async def test_a_request_that_arrives_byte_by_byte_is_answered_once_complete(server: HttpServer) -> None:
    reader, writer = await connect(server)
    for byte in post("/echo", b"slow body"):
        writer.write(bytes([byte]))
        await writer.drain()
    assert (await read_response(reader))[2] == b"echo:slow body"
    writer.close()


@pytest.mark.parametrize(
    ("extra", "version", "stays_open"),
    [
        (("Connection: close",), "HTTP/1.1", False),
        ((), "HTTP/1.0", False),
        (("Connection: keep-alive",), "HTTP/1.0", True),
        (("Connection: Keep-Alive, TE",), "HTTP/1.1", True),
    ],
)
async def test_connection_header_and_version_decide_keep_alive(
    server: HttpServer, extra: tuple[str, ...], version: str, stays_open: bool
) -> None:
    reader, writer = await connect(server)
    writer.write(post("/echo", b"x", *extra, version=version))
    status, headers, _ = await read_response(reader)
    assert status == 200
    if stays_open:
        assert "connection" not in headers
        writer.write(post("/echo", b"again"))
        assert (await read_response(reader))[2] == b"echo:again"
    else:
        assert headers["connection"] == "close"
        assert await closed(reader)
    writer.close()


async def test_expect_100_continue_gets_continue_before_the_body(server: HttpServer) -> None:
    reader, writer = await connect(server)
    request = post("/echo", b"payload", "Expect: 100-continue")
    head, body = request.split(b"\r\n\r\n", 1)
    writer.write(head + b"\r\n\r\n")
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(body)
    assert (await read_response(reader))[2] == b"echo:payload"
    writer.close()


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 501),
        (post("/echo", b"x" * (MAX_BODY + 1)), 413),
        (b"POST /echo HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
        (b"POST /echo HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST /echo HTTP/1.1\r\n folded: header\r\n\r\n", 400),
        (b"GARBAGE\r\n\r\n", 400),
        (b"POST /echo HTTP/2.0\r\n\r\n", 505),
        (b"POST /echo HTTP/1.1\r\nExpect: magic\r\n\r\n", 417),
        (b"POST /echo HTTP/1.1\r\nX: " + b"y" * MAX_HEAD_BYTES, 431),
    ],
)
async def test_malformed_requests_are_refused_and_the_connection_closed(
    server: HttpServer, request_bytes: bytes, status: int
) -> None:
    reader, writer = await connect(server)
    writer.write(request_bytes)
    answer, headers, body = await read_response(reader)
    assert answer == status
    assert headers["connection"] == "close"
    assert body
    assert await closed(reader)
    assert CALLS == []
    writer.close()


async def test_unknown_paths_and_methods_get_404_and_405_and_the_connection_stays(server: HttpServer) -> None:
    reader, writer = await connect(server)
    writer.write(post("/nowhere", b""))
    assert (await read_response(reader))[0] == 404
    writer.write(b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, body = await read_response(reader)
    assert (status, body) == (405, b"/echo takes POST")
    writer.write(post("/echo", b"still here"))
    assert (await read_response(reader))[2] == b"echo:still here"
    writer.close()


async def test_a_failing_handler_answers_500_and_failing_after_work_is_only_logged(
    server: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    reader, writer = await connect(server)
    writer.write(post("/broken", b""))
    assert (await read_response(reader))[0] == 500
    writer.write(post("/broken-after", b""))
    assert (await read_response(reader))[:3:2] == (200, b"ok")
    writer.write(post("/echo", b"fine"))
    assert (await read_response(reader))[2] == b"echo:fine"
    assert "event=handler_failed" in caplog.text
    assert "event=after_reply_failed" in caplog.text
    writer.close()


async def test_close_drops_open_connections(server: HttpServer) -> None:
    reader, writer = await connect(server)
    writer.write(post("/echo", b"x"))
    await read_response(reader)
    await server.close()
    assert await closed(reader)
    writer.close()


def test_it_serves_on_uvloop_too() -> None:
    """uvloop's transports are not ``asyncio.Transport`` subclasses; the protocol must not care. In a child
    process, so that a broken run fails within the timeout instead of hanging in uvloop's shutdown."""
    pytest.importorskip("uvloop")
    script = (
        "import uvloop\n"
        "from tests.service.wire_support import exchange_twice\n"
        "print(uvloop.run(exchange_twice()))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO, check=False
    )
    assert result.stdout.strip() == "b'echo:a|echo:b'", result.stderr
