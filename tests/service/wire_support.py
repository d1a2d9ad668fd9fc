"""Raw-socket helpers for the extender's HTTP/1.1 server tests: build requests, read responses."""

from __future__ import annotations

import asyncio

from webhook.extender.http import HttpServer, Reply, Routes, start_server

ECHO_ROUTES: Routes = {"/echo": {"POST": lambda body: Reply(200, b"echo:" + body, "text/plain")}}


def post(path: str, body: bytes, *extra: str, version: str = "HTTP/1.1") -> bytes:
    head = [f"POST {path} {version}", "Host: x", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-case names), body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


async def connect(server: HttpServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", server.port)


async def closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(1), timeout=5) == b""



async def exchange_twice() -> bytes:
    """Start a server, send two pipelined requests, return both bodies (for the uvloop check)."""
    listener = await start_server(ECHO_ROUTES, "127.0.0.1", 0, max_body=1024)
    try:
        reader, writer = await connect(listener)
        writer.write(post("/echo", b"a") + post("/echo", b"b"))
        bodies = [(await read_response(reader))[2] for _ in range(2)]
        writer.close()
        return b"|".join(bodies)
    finally:
        await listener.close()
