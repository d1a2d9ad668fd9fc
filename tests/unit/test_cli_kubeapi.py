"""The CLI's synchronous API access: kubeconfig loading and HTTP requests (a local plain-HTTP server)."""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest

from webhook.api.objects import name_of
from webhook.readmodel.kubeapi import JOBS, ApiError, HttpApi
from webhook.readmodel.kubeconfig import ConfigError, Connection, kubeconfig_paths, load_connection


def _config(path: Path, *, namespace: str | None = None, user: dict[str, Any] | None = None,
            contexts: int = 1, current: str = "c0", server: str = "https://127.0.0.1:6443") -> Path:
    ctxs = []
    for index in range(contexts):
        ctx: dict[str, Any] = {"cluster": "k", "user": "u"}
        if namespace and index == 0:
            ctx["namespace"] = namespace
        ctxs.append({"name": f"c{index}", "context": ctx})
    path.write_text(json.dumps({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "k", "cluster": {"server": server,
                                              "certificate-authority-data": base64.b64encode(b"CA").decode()}}],
        "users": [{"name": "u", "user": user or {"token": "t0"}}],
        "contexts": ctxs,
        "current-context": current,
    }))
    return path


def test_the_namespace_comes_from_the_context_else_default(tmp_path: Path) -> None:
    config = _config(tmp_path / "a", namespace="team-a", contexts=2)
    assert load_connection(str(config)).namespace == "team-a"
    assert load_connection(str(config), context="c1").namespace == "default"


def test_credentials_are_read(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file\n")
    config = _config(tmp_path / "a", user={"tokenFile": "token"})
    connection = load_connection(str(config))
    assert connection.credentials.token == "from-file"
    assert connection.ca_pem == b"CA"
    basic = load_connection(str(_config(tmp_path / "b", user={"username": "me", "password": "pw"})))
    assert basic.credentials.basic == ("me", "pw")
    certs = {"client-certificate-data": base64.b64encode(b"CERT").decode(), "client-key": str(tmp_path / "key")}
    (tmp_path / "key").write_bytes(b"KEY")
    client = load_connection(str(_config(tmp_path / "c", user=certs)))
    assert (client.credentials.cert_pem, client.credentials.key_pem) == (b"CERT", b"KEY")


def test_an_exec_plugin_gives_the_token(tmp_path: Path) -> None:
    script = "import json; print(json.dumps({'status': {'token': 'exec-token'}}))"
    plugin = {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable, "args": ["-c", script]}
    user = {"exec": plugin}
    assert load_connection(str(_config(tmp_path / "a", user=user))).credentials.token == "exec-token"
    failing = {"exec": {"command": sys.executable, "args": ["-c", "import sys; sys.exit('no login')"]}}
    with pytest.raises(ConfigError, match=r"exec credential plugin .* failed: no login"):
        load_connection(str(_config(tmp_path / "b", user=failing)))


def test_yaml_kubeconfigs_and_merged_lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = tmp_path / "first.yaml"
    first.write_text("current-context: c0\n")
    second = _config(tmp_path / "second", namespace="merged", current="ignored")
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    assert kubeconfig_paths() == [first, second]
    assert load_connection().namespace == "merged"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"context": "nope"}, "context 'nope' is not in the kubeconfig (contexts: c0)"),
        ({"kubeconfig": "/does/not/exist"}, "kubeconfig /does/not/exist does not exist"),
    ],
)
def test_unusable_kubeconfigs_say_why(tmp_path: Path, kwargs: dict[str, str], message: str) -> None:
    kwargs.setdefault("kubeconfig", str(_config(tmp_path / "a")))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_connection(**kwargs)


def test_auth_providers_are_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="auth-provider 'gcp' is not supported by kq; use an exec plugin"):
        load_connection(str(_config(tmp_path / "a", user={"auth-provider": {"name": "gcp"}})))


# HTTP -----------------------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str, str]]] = []

    def log_message(self, *args: Any) -> None:
        return

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        self.seen.append(("GET", parts.path, self.headers.get("Authorization", "")))
        if parts.path == "/apis/batch/v1/namespaces/ns/jobs":
            if query.get("continue") == ["page2"]:
                self._send(200, {"items": [{"metadata": {"name": "b"}}], "metadata": {}})
            else:
                self._send(200, {"items": [{"metadata": {"name": "a"}}], "metadata": {"continue": "page2"}})
        elif parts.path == "/apis/g/v1/things":  # answers what was accepted
            self._send(200, {"kind": "Table" if "as=Table" in self.headers.get("Accept", "") else "ThingList"})
        elif parts.path.endswith("/log"):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"line one\nline two\r\n")
        else:
            self._send(404, {"kind": "Status", "reason": "NotFound", "message": 'jobs.batch "x" not found'})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length))
        self.seen.append(("POST", self.path, self.headers.get("Authorization", "")))
        self._send(201, body, {"Warning": '299 - "kube-queue: queued"'})


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_requests_lists_errors_warnings_and_streams(server: str) -> None:
    _Handler.seen = []
    api = HttpApi(Connection(server=server, namespace="ns"))
    api.connection.credentials.token = "secret"
    assert [name_of(item) for item in api.list(JOBS, "ns")] == ["a", "b"]
    with pytest.raises(ApiError) as caught:
        api.get(JOBS, "x", "ns")
    assert caught.value.not_found
    assert caught.value.one_line() == 'jobs.batch "x" not found (404 NotFound)'
    created = api.create(JOBS, {"metadata": {"name": "c"}}, "ns")
    assert created == {"metadata": {"name": "c"}}
    assert api.warnings == ['299 - "kube-queue: queued"']
    assert list(api.stream_lines("/api/v1/namespaces/ns/pods/p/log", [("follow", "true")])) == ["line one", "line two"]
    assert {auth for _, _, auth in _Handler.seen} == {"Bearer secret"}
    # A Table is accepted only when asked for, and plain JSON beside it.
    assert api.request("GET", "/apis/g/v1/things")["kind"] == "ThingList"
    assert api.table("/apis/g/v1/things")["kind"] == "Table"
    api.close()


def test_an_unreachable_server_is_one_line() -> None:
    api = HttpApi(Connection(server="http://127.0.0.1:9"), timeout=2)
    with pytest.raises(ApiError) as caught:
        api.list(JOBS, "ns")
    assert caught.value.status == 0
    assert caught.value.one_line().startswith("cannot reach the API server http://127.0.0.1:9: ")
    assert "\n" not in caught.value.one_line()


def test_a_kubeconfig_that_is_not_yaml_is_named_on_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.write_text("apiVersion: v1\nclusters:\n  - name: a\n   server: x\n")
    with pytest.raises(ConfigError) as raised:
        load_connection(kubeconfig=str(broken))
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"kubeconfig {broken} is not valid YAML: line 4, column 4: ")
