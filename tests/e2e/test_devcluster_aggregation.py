"""The dev cluster routes an aggregated API to a process on loopback (docs/architecture.md, "What a read of
every job costs").

Kubernetes refuses Endpoints on loopback, so a Service cannot front a process on 127.0.0.1; but the API server's
aggregator resolves an APIService's ExternalName Service by its name alone. This test serves a tiny aggregated
API on loopback the way an extension API server must: over TLS, trusting the user headers only from a client of
the front-proxy CA that ``kube-system/extension-apiserver-authentication`` names. The API server reaches it,
presents its front-proxy certificate and passes on who asked.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.e2e.conftest import DevCluster
from tests.ports import free_port
from webhook import pki
from webhook.devcluster.pki_setup import FRONT_PROXY_CLIENT

GROUP, VERSION = "probe.kube-queue.x-k8s.io", "v1alpha1"
SERVICE = "kq-aggregation-probe"
ROLE = "kq-aggregation-probe-echoes"


class _Probe(BaseHTTPRequestHandler):
    """Discovery of one resource, ``echoes``, whose list says who the aggregator said asked."""

    asked: ClassVar[list[str]] = []
    """The users of the lists it answered."""

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == f"/apis/{GROUP}/{VERSION}":
            self._json({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}",
                        "resources": [{"name": "echoes", "singularName": "echo", "namespaced": False,
                                       "kind": "Echo", "verbs": ["list"]}]})
        elif path == f"/apis/{GROUP}/{VERSION}/echoes":
            peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
            names: Any = (peer or {}).get("subject", ())
            subject = {str(key): str(value) for rdn in names for key, value in rdn}
            self.asked.append(str(self.headers.get("X-Remote-User")))
            self._json({"kind": "EchoList", "apiVersion": f"{GROUP}/{VERSION}", "metadata": {},
                        "items": [{"user": self.headers.get("X-Remote-User"),
                                   "groups": self.headers.get_all("X-Remote-Group") or [],
                                   "proxy": subject.get("commonName")}]})
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def _json(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def probe(dev_cluster: DevCluster) -> Iterator[tuple[int, bytes]]:
    """The probe on a loopback port, its CA (for the APIService's ``caBundle``)."""
    authentication = dev_cluster.get_json("configmap", "extension-apiserver-authentication", "-n", "kube-system")
    front_proxy_ca = authentication["data"]["requestheader-client-ca-file"]
    assert json.loads(authentication["data"]["requestheader-allowed-names"]) == [FRONT_PROXY_CLIENT]
    ca_cert, ca_key = pki.make_ca("kq-aggregation-probe-ca")
    # The aggregator checks the serving certificate for the Service's name, wherever the Service points.
    cert, key = pki.issue_cert(ca_cert, ca_key, SERVICE, dns_names=(f"{SERVICE}.default.svc",))
    with tempfile.TemporaryDirectory() as directory:
        Path(directory, "tls.crt").write_bytes(cert)
        Path(directory, "tls.key").write_bytes(key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(Path(directory, "tls.crt"), Path(directory, "tls.key"))
    context.verify_mode = ssl.CERT_REQUIRED  # only the aggregator's front-proxy client
    context.load_verify_locations(cadata=front_proxy_ca)
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Probe)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], ca_cert
    finally:
        server.shutdown()
        server.server_close()


def test_an_aggregated_api_on_loopback_is_reached_with_the_user_it_was_asked_by(
    dev_cluster: DevCluster, probe: tuple[int, bytes]
) -> None:
    port, ca = probe
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": "default"},
               "spec": {"type": "ExternalName", "externalName": "localhost"}}
    api_service = {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": f"{VERSION}.{GROUP}"},
        "spec": {"group": GROUP, "version": VERSION, "groupPriorityMinimum": 1000, "versionPriority": 15,
                 "service": {"namespace": "default", "name": SERVICE, "port": port},
                 "caBundle": base64.b64encode(ca).decode()},
    }
    dev_cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                              "items": [service, api_service]}))
    try:
        deadline, available = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            conditions = dev_cluster.get_json("apiservice", f"{VERSION}.{GROUP}").get("status", {}).get(
                "conditions", [])
            available = next((c for c in conditions if c.get("type") == "Available"), None)
            if available is not None and available.get("status") == "True":
                break
            time.sleep(0.5)
        assert available is not None and available.get("status") == "True", available
        raw = f"/apis/{GROUP}/{VERSION}/echoes"
        (admin,) = json.loads(dev_cluster.kubectl("get", "--raw", raw))["items"]
        assert admin["user"] == "kube-admin" and "system:masters" in admin["groups"]
        assert admin["proxy"] == FRONT_PROXY_CLIENT

        # The API server authorizes before it proxies: a user without RBAC for the resource never reaches it.
        as_alice = ("get", "--raw", raw, "--as=alice", "--as-group=developers")
        refused = dev_cluster.kubectl_result(*as_alice)
        assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused
        assert "alice" not in _Probe.asked
        # Applied as an object: `kubectl create clusterrole --resource` checks the resource against kubectl's
        # discovery cache, which may not know the group yet.
        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ROLE},
                "rules": [{"apiGroups": [GROUP], "resources": ["echoes"], "verbs": ["list"]}]}
        dev_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(role))
        dev_cluster.kubectl("create", "clusterrolebinding", ROLE, f"--clusterrole={ROLE}", "--user=alice")
        deadline, result = time.monotonic() + 30, refused
        while time.monotonic() < deadline and result.returncode != 0:
            time.sleep(0.5)
            result = dev_cluster.kubectl_result(*as_alice)
        assert result.returncode == 0, result.stderr
        (alice,) = json.loads(result.stdout)["items"]
        assert alice["user"] == "alice" and "developers" in alice["groups"]
        assert alice["proxy"] == FRONT_PROXY_CLIENT
    finally:
        dev_cluster.kubectl("delete", "clusterrolebinding,clusterrole", ROLE, "--ignore-not-found")
        dev_cluster.kubectl("delete", "apiservice", f"{VERSION}.{GROUP}", "--ignore-not-found", "--wait=false")
        dev_cluster.kubectl("delete", "service", SERVICE, "-n", "default", "--ignore-not-found", "--wait=false")
