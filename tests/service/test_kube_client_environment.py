"""The API client reads the environment once: a proxy from ``HTTP(S)_PROXY``/``NO_PROXY`` at start, never
``~/.netrc`` (Kubernetes credentials come from the kubeconfig), and no per-request environment lookups (they
cost the controller about a tenth of its CPU in a burst of admissions, issue 23)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from webhook.kube.client import KubeClient

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "http://127.0.0.1:%d"}}]
users: [{name: test, user: {%s}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
"""


@dataclass
class Seen:
    """What a server received: (path as requested, Authorization header)."""

    requests: list[tuple[str, str]] = field(default_factory=list)


async def serve(seen: Seen) -> tuple[web.AppRunner, int]:
    """An HTTP server answering every GET with a Namespace, recording each request (it serves as the API server
    and as a forward proxy alike: a proxied request carries the absolute URL)."""

    async def handle(request: web.Request) -> web.Response:
        seen.requests.append((str(request.url) if request.path_qs != request.raw_path else request.raw_path,
                              request.headers.get("Authorization", "")))
        return web.json_response({"kind": "Namespace", "metadata": {"name": "default"}})

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


@pytest.fixture
async def servers() -> AsyncIterator[tuple[Seen, int, Seen, int]]:
    api, proxy = Seen(), Seen()
    api_runner, api_port = await serve(api)
    proxy_runner, proxy_port = await serve(proxy)
    yield api, api_port, proxy, proxy_port
    await api_runner.cleanup()
    await proxy_runner.cleanup()


def _clean_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)


async def test_netrc_credentials_never_reach_the_api_server(
    servers: tuple[Seen, int, Seen, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, api_port, _, _ = servers
    _clean_proxy_env(monkeypatch)
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login someone password leaked\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    (tmp_path / "kubeconfig").write_text(KUBECONFIG % (api_port, ""))
    client = await KubeClient.connect(str(tmp_path / "kubeconfig"))
    try:
        assert client.api.rest_client.pool_manager.trust_env is False
        await client.request("GET", "/api/v1/namespaces/default")
        await client.request("GET", "/api/v1/namespaces/default")
    finally:
        await client.close()
    assert [auth for _, auth in api.requests] == ["", ""]


async def test_the_proxy_from_the_environment_is_used_unless_no_proxy_names_the_host(
    servers: tuple[Seen, int, Seen, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, api_port, proxy, proxy_port = servers
    _clean_proxy_env(monkeypatch)
    (tmp_path / "kubeconfig").write_text(KUBECONFIG % (api_port, "token: secret"))
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy_port}")
    client = await KubeClient.connect(str(tmp_path / "kubeconfig"))
    try:
        await client.request("GET", "/api/v1/namespaces/default")
    finally:
        await client.close()
    assert proxy.requests == [(f"http://127.0.0.1:{api_port}/api/v1/namespaces/default", "Bearer secret")]
    assert api.requests == []

    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    client = await KubeClient.connect(str(tmp_path / "kubeconfig"))
    try:
        await client.request("GET", "/api/v1/namespaces/default")
    finally:
        await client.close()
    assert api.requests == [("/api/v1/namespaces/default", "Bearer secret")]
    assert len(proxy.requests) == 1
