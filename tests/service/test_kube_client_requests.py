"""What :class:`KubeClient` puts on the wire now that it sends on the session itself (issue 23): the body as
JSON with its content type, the query, the bearer token fresh from its refresh hook, and the client
certificate and CA of a TLS kubeconfig."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s_client

from webhook.kube.client import KubeApiError, KubeClient, ResourceRef
from webhook.pki import issue_cert, make_ca

JOBS = ResourceRef("batch", "v1", "jobs")


@dataclass
class Received:
    """One request as the server saw it."""

    method: str
    path_qs: str
    content_type: str
    authorization: str
    user_agent: str
    body: Any
    peer_cn: str = ""


@dataclass
class Server:
    received: list[Received] = field(default_factory=list)
    answer: tuple[int, dict[str, Any]] = (200, {"kind": "Job", "metadata": {"name": "pi"}})


async def _start(server: Server, context: ssl.SSLContext | None = None) -> tuple[web.AppRunner, int]:
    async def handle(request: web.Request) -> web.Response:
        raw = await request.read()
        peer = request.transport.get_extra_info("peercert") if request.transport else None
        cn = ""
        if peer:
            cn = next((value for rdn in peer.get("subject", ()) for key, value in rdn if key == "commonName"), "")
        server.received.append(Received(
            request.method, request.path_qs, request.headers.get("Content-Type", ""),
            request.headers.get("Authorization", ""), request.headers.get("User-Agent", ""),
            json.loads(raw) if raw else None, cn,
        ))
        status, body = server.answer
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


@pytest.fixture
async def plain() -> AsyncIterator[tuple[Server, int]]:
    server = Server()
    runner, port = await _start(server)
    yield server, port
    await runner.cleanup()


def _client(port: int, token: str, hook: Any = None) -> KubeClient:
    configuration = k8s_client.Configuration(host=f"http://127.0.0.1:{port}")
    configuration.api_key = {"BearerToken": token}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    configuration.refresh_api_key_hook = hook
    return KubeClient(k8s_client.ApiClient(configuration=configuration))


async def test_a_json_patch_arrives_as_json_with_its_content_type_and_the_token(plain: tuple[Server, int]) -> None:
    server, port = plain
    client = _client(port, "secret")
    spec = {"suspend": True, "template": {"spec": {"containers": [{"name": "c", "image": "pi", "args": ["é", 1]}]}}}
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/spec", "value": spec},
                                 {"op": "replace", "path": "/spec/suspend", "value": False}]
    try:
        answer = await client.json_patch(JOBS, "pi", ops, "user-a")
        await client.merge_patch(JOBS, "pi", {"metadata": {"labels": {"a": "b"}}}, "user-a", subresource="status")
        await client.list_page(JOBS, limit=7, label_selector="a in (b,c)", continue_token="x/y=")
    finally:
        await client.close()
    assert answer == {"kind": "Job", "metadata": {"name": "pi"}}
    patch, merge, listed = server.received
    assert (patch.method, patch.path_qs) == ("PATCH", "/apis/batch/v1/namespaces/user-a/jobs/pi")
    assert patch.content_type == "application/json-patch+json"
    assert patch.body == ops
    assert patch.authorization == "Bearer secret"
    assert patch.user_agent == "kube-queue"  # the field manager of the write: never the generator's name
    assert (merge.path_qs, merge.content_type) == (
        "/apis/batch/v1/namespaces/user-a/jobs/pi/status", "application/merge-patch+json")
    assert merge.body == {"metadata": {"labels": {"a": "b"}}}
    assert listed.method == "GET" and listed.body is None
    path, _, query = listed.path_qs.partition("?")
    assert path == "/apis/batch/v1/jobs"
    assert parse_qsl(query) == [("limit", "7"), ("continue", "x/y="), ("labelSelector", "a in (b,c)")]


async def test_the_token_comes_fresh_from_its_refresh_hook_on_every_request(plain: tuple[Server, int]) -> None:
    """A rotated service-account token or an exec plugin's new token is used from the next request on."""
    server, port = plain
    tokens = iter(["first", "second"])

    async def refresh(configuration: Any) -> None:
        configuration.api_key["BearerToken"] = next(tokens)

    client = _client(port, "stale", refresh)
    try:
        await client.get(JOBS, "pi", "user-a")
        await client.get(JOBS, "pi", "user-a")
    finally:
        await client.close()
    assert [seen.authorization for seen in server.received] == ["Bearer first", "Bearer second"]


async def test_an_error_answer_is_a_kube_api_error_with_the_servers_message(plain: tuple[Server, int]) -> None:
    server, port = plain
    server.answer = (422, {"kind": "Status", "reason": "Invalid", "message": "the test operation failed"})
    client = _client(port, "secret")
    try:
        with pytest.raises(KubeApiError) as caught:
            await client.json_patch(JOBS, "pi", [{"op": "test", "path": "/spec", "value": {}}], "user-a")
    finally:
        await client.close()
    assert caught.value.status == 422
    assert "the test operation failed" in str(caught.value)


async def test_a_tls_kubeconfig_presents_its_client_certificate_and_checks_the_server(tmp_path: Path) -> None:
    ca_cert, ca_key = make_ca("test-ca")
    server_cert, server_key = issue_cert(ca_cert, ca_key, "apiserver", ip_addresses=["127.0.0.1"])
    client_cert, client_key = issue_cert(ca_cert, ca_key, "kube-queue", server=False, client=True)
    for name, pem in {"ca.crt": ca_cert, "server.crt": server_cert, "server.key": server_key}.items():
        (tmp_path / name).write_bytes(pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tmp_path / "ca.crt"))
    context.load_cert_chain(str(tmp_path / "server.crt"), str(tmp_path / "server.key"))
    context.verify_mode = ssl.CERT_REQUIRED
    server = Server()
    runner, port = await _start(server, context)

    def b64(pem: bytes) -> str:
        return base64.b64encode(pem).decode()

    (tmp_path / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: t, cluster: {{server: 'https://127.0.0.1:{port}', "
        f"certificate-authority-data: {b64(ca_cert)}}}}}]\n"
        f"users: [{{name: t, user: {{client-certificate-data: {b64(client_cert)}, "
        f"client-key-data: {b64(client_key)}}}}}]\n"
        "contexts: [{name: t, context: {cluster: t, user: t}}]\ncurrent-context: t\n"
    )
    client = await KubeClient.connect(str(tmp_path / "kubeconfig"))
    try:
        await client.create(JOBS, {"metadata": {"name": "pi"}}, "user-a")
    finally:
        await client.close()
        await runner.cleanup()
    [created] = server.received
    assert (created.method, created.path_qs, created.peer_cn) == ("POST", "/apis/batch/v1/namespaces/user-a/jobs",
                                                                  "kube-queue")
    assert created.body == {"metadata": {"name": "pi"}}
