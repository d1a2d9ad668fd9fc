"""A small HTTP/1.1 server on :class:`asyncio.Protocol` for the extender's handful of routes.

Why not aiohttp's server: kube-scheduler calls the extender once per pod inside its serial scheduling cycle
and waits for the answer, so every microsecond between the request's last byte and the answer's first one
is the scheduler's. With aiohttp, parsing into request objects, a task per request and the response
writer cost as much CPU as the decision itself; here the head is parsed by hand and the request answered
synchronously in the callback that received it, so the decision and the write follow the read at once.
A handler may leave work for after the write (:attr:`Reply.then`: a decision's record, logs, metrics) - the
scheduler does not wait for it, and no other request is read in between.

What it speaks: HTTP/1.1 and HTTP/1.0; keep-alive (HTTP/1.1's default, HTTP/1.0 with ``Connection:
keep-alive``), ``Connection: close``; request bodies with ``Content-Length`` (kube-scheduler, curl and
aiohttp send one; a ``Transfer-Encoding`` gets 501); ``Expect: 100-continue``; pipelined requests, answered
in order; TLS through the event loop. Not: chunked request bodies, upgrades, HTTP/2. Malformed requests get
400 (431, 413, 505 where those say more) and the connection is closed.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import cast

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
"""The request line and headers together (kube-scheduler sends half a dozen short headers)."""


@dataclass(frozen=True, slots=True)
class Reply:
    """A handler's answer. ``then`` runs once the answer is written - before the next request is read."""

    status: int
    body: bytes
    content_type: str = "application/json"
    then: Callable[[], None] | None = None


Handler = Callable[[bytes], Reply]
"""Takes the request body, answers synchronously."""
Routes = Mapping[str, Mapping[str, Handler]]
"""Path -> method -> handler (a query string is ignored)."""


def text_reply(status: int, text: str) -> Reply:
    return Reply(status, text.encode(), "text/plain; charset=utf-8")


class BadRequest(Exception):
    """A request this server refuses before any handler sees it."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Head:
    """The parts of a request head the server acts on."""

    method: str
    path: str
    length: int
    keep_alive: bool
    expect_continue: bool


def parse_head(raw: bytes, max_body: int) -> Head:
    """The request line and headers (without the blank line); :class:`BadRequest` when malformed."""
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0] or not parts[1].startswith("/"):
        raise BadRequest(HTTPStatus.BAD_REQUEST, "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequest(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, f"{version} is not supported: use HTTP/1.1")
    length: int | None = None
    keep_alive = version == "HTTP/1.1"
    expect_continue = False
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():  # also refuses obsolete line folding
            raise BadRequest(HTTPStatus.BAD_REQUEST, "malformed header line")
        name, value = name.lower(), value.strip()
        if name == "content-length":
            if not (value.isascii() and value.isdigit()) or (length is not None and length != int(value)):
                raise BadRequest(HTTPStatus.BAD_REQUEST, "invalid Content-Length")
            length = int(value)
        elif name == "transfer-encoding":
            raise BadRequest(HTTPStatus.NOT_IMPLEMENTED, "a Transfer-Encoding is not supported: send Content-Length")
        elif name == "connection":
            tokens = {token.strip().lower() for token in value.split(",")}
            keep_alive = "close" not in tokens and (keep_alive or "keep-alive" in tokens)
        elif name == "expect":
            if value.lower() != "100-continue":
                raise BadRequest(HTTPStatus.EXPECTATION_FAILED, f"unsupported expectation {value!r}")
            expect_continue = True
    if length is not None and length > max_body:
        raise BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"the body is over {max_body} bytes")
    return Head(method, target.split("?", 1)[0], length or 0, keep_alive, expect_continue)


_STATUS_LINES = {status.value: f"HTTP/1.1 {status.value} {status.phrase}\r\n" for status in HTTPStatus}


def encode(reply: Reply, keep_alive: bool) -> bytes:
    """The response as one buffer (one write, one send)."""
    close = "" if keep_alive else "Connection: close\r\n"
    head = (
        f"{_STATUS_LINES[reply.status]}Content-Type: {reply.content_type}\r\n"
        f"Content-Length: {len(reply.body)}\r\n{close}\r\n"
    )
    return head.encode("latin-1") + reply.body


CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class HttpProtocol(asyncio.Protocol):
    """One connection: reads requests, answers each as soon as its body is complete."""

    def __init__(self, routes: Routes, max_body: int, connections: set[HttpProtocol]) -> None:
        self._routes = routes
        self._max_body = max_body
        self._connections = connections
        self._buffer = bytearray()
        self._head: Head | None = None
        self._closing = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is one without subclassing asyncio.Transport, so no isinstance check).
        self.transport = cast(asyncio.Transport, transport)
        self._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        self._closing = True

    def pause_writing(self) -> None:
        if self.transport is not None:  # a client that does not read its answers: stop reading its requests
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self._closing:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while not self._closing and self._next():
            pass

    def _next(self) -> bool:
        """Answer the next complete request in the buffer; whether there may be another one."""
        head = self._head
        if head is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    self._refuse(BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large"))
                return False
            try:
                head = parse_head(bytes(self._buffer[:end]), self._max_body)
            except BadRequest as error:
                self._refuse(error)
                return False
            del self._buffer[: end + 4]
            self._head = head
            if head.expect_continue and len(self._buffer) < head.length:
                self._write(CONTINUE)
        if len(self._buffer) < head.length:
            return False
        body = bytes(self._buffer[: head.length])
        del self._buffer[: head.length]
        self._head = None
        self._answer(head, body)
        return True

    def _answer(self, head: Head, body: bytes) -> None:
        reply = self._dispatch(head, body)
        self._write(encode(reply, head.keep_alive))
        if reply.then is not None:
            try:
                reply.then()
            except Exception:
                log.exception("component=extender event=after_reply_failed path=%s", head.path)
        if not head.keep_alive:
            self._close()

    def _dispatch(self, head: Head, body: bytes) -> Reply:
        methods = self._routes.get(head.path)
        if methods is None:
            return text_reply(HTTPStatus.NOT_FOUND, f"no route {head.path}")
        handler = methods.get(head.method)
        if handler is None:
            return text_reply(HTTPStatus.METHOD_NOT_ALLOWED, f"{head.path} takes {', '.join(sorted(methods))}")
        try:
            return handler(body)
        except Exception:
            log.exception("component=extender event=handler_failed method=%s path=%s", head.method, head.path)
            return text_reply(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error; see the extender's log")

    def _refuse(self, error: BadRequest) -> None:
        self._write(encode(text_reply(error.status, error.message), keep_alive=False))
        self._close()

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _close(self) -> None:
        self._closing = True
        if self.transport is not None:
            self.transport.close()


class HttpServer:
    """A listening :class:`HttpProtocol` server; :meth:`close` stops it and drops its connections."""

    def __init__(self, server: asyncio.Server, connections: set[HttpProtocol]) -> None:
        self._server = server
        self._connections = connections

    @property
    def port(self) -> int:
        """The port it listens on (the one the OS chose for port 0)."""
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        self._server.close()
        for connection in list(self._connections):
            if connection.transport is not None:
                connection.transport.close()
        await self._server.wait_closed()


async def start_server(
    routes: Routes, host: str, port: int, *, ssl_context: ssl.SSLContext | None = None, max_body: int
) -> HttpServer:
    """Listen on ``host:port`` (HTTPS with ``ssl_context``) and serve ``routes``."""
    connections: set[HttpProtocol] = set()
    server = await asyncio.get_running_loop().create_server(
        lambda: HttpProtocol(routes, max_body, connections), host, port, ssl=ssl_context
    )
    return HttpServer(server, connections)
