"""``kq``'s client when the API server closes a connection without an answer (docs/queueing.md, "Reading every
job"): the API server may drop a request to a hung ``kq serve`` that way, and ``kq list -A`` must still read the
jobs from the API server after it, not take the API server for down. A kept-alive connection the server closed
while idle is still retried once on a new one."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from webhook.readmodel.kubeapi import ApiError, HttpApi
from webhook.readmodel.kubeconfig import Connection, Credentials

ANSWER = b'{"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}'


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the API server
    seen: list[str]

    def do_GET(self) -> None:
        self.seen.append(self.path)
        if self.path.startswith("/drop"):
            self.close_connection = True  # no status line, no headers: the client sees the connection end
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)
        if self.path.startswith("/last"):
            self.close_connection = True  # answered, then the idle connection is closed under the client

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def _server() -> Iterator[tuple[HttpApi, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_Handler,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    api = HttpApi(Connection(server=f"http://127.0.0.1:{server.server_port}", namespace="ns",
                             credentials=Credentials(token="t")))
    try:
        yield api, seen
    finally:
        api.close()
        server.shutdown()
        server.server_close()


def test_a_request_dropped_on_a_new_connection_is_not_sent_again_and_the_next_one_is_tried() -> None:
    with _server() as (api, seen):
        with pytest.raises(ApiError) as dropped:
            api.request("GET", "/drop/summaries")
        assert dropped.value.status == 0
        assert "closed the connection without answering GET /drop/summaries" in str(dropped.value)
        assert api.request("GET", "/apis/batch/v1/jobs")["status"] == "Success"
    assert seen == ["/drop/summaries", "/apis/batch/v1/jobs"]


def test_a_kept_alive_connection_closed_while_idle_is_retried_once_on_a_new_one() -> None:
    with _server() as (api, seen):
        assert api.request("GET", "/last")["status"] == "Success"
        assert api.request("GET", "/again")["status"] == "Success"
    assert seen == ["/last", "/again"]
