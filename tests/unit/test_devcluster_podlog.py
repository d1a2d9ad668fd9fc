"""The dev cluster's pod logs: the generated file kwok serves, and the wiring that sends the API server to kwok."""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
from pathlib import Path

import yaml
from cryptography import x509

from webhook.devcluster import cluster, podlog
from webhook.devcluster.config import KWOK_NODE_IP, ClusterConfig, Ports
from webhook.devcluster.pki_setup import ensure_pki

T0 = datetime.datetime(2026, 12, 1, 22, 0, 0, 123456, tzinfo=datetime.UTC)
CRI = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z stdout F (?P<text>.*)\n$")
"""A line the kubelet's log reader (k8s.io/cri-client/pkg/logs, which kwok uses) parses."""


def _texts(path: Path) -> list[str]:
    lines = path.read_text().splitlines(keepends=True)
    matches = [CRI.match(line) for line in lines]
    assert all(matches), lines
    return [match.group("text") for match in matches if match]


def test_a_line_is_in_the_cri_log_format_in_utc() -> None:
    east = T0.astimezone(datetime.timezone(datetime.timedelta(hours=8)))
    assert podlog.cri_line("hello", east) == "2026-12-01T22:00:00.123456000Z stdout F hello\n"


def test_the_file_starts_with_what_the_logs_are_then_gains_a_line_per_interval(tmp_path: Path) -> None:
    path = tmp_path / "kwok" / "pod.log"
    clock = iter(T0 + datetime.timedelta(seconds=2 * i) for i in range(1, 100))
    slept: list[float] = []
    podlog.run(path, 2.0, 100, now=lambda: next(clock), sleep=slept.append, lines=3)
    texts = _texts(path)
    assert "kwok fake node" in texts[0] and "every pod" in texts[1] and str(path) in texts[1]
    assert texts[2:] == [
        "fake log line 1 at 22:00:02 UTC (the same for every pod)",
        "fake log line 2 at 22:00:04 UTC (the same for every pod)",
        "fake log line 3 at 22:00:06 UTC (the same for every pod)",
    ]
    assert slept == [2.0, 2.0, 2.0]


def test_a_full_file_is_kept_as_dot_1_and_started_afresh(tmp_path: Path) -> None:
    path = tmp_path / "pod.log"
    podlog.run(path, 1.0, 10, now=lambda: T0, sleep=lambda _: None, lines=12)
    old, new = _texts(path.with_name("pod.log.1")), _texts(path)
    assert len(old) == 10 and old[-1].startswith("fake log line 8 ")
    assert new[0] == old[0]  # the header again
    assert [text.split(" at ")[0] for text in new[2:]] == [f"fake log line {n}" for n in range(9, 13)]


def test_a_restarted_generator_appends_and_goes_on_numbering(tmp_path: Path) -> None:
    path = tmp_path / "pod.log"
    podlog.ensure_file(path)
    podlog.ensure_file(path)
    podlog.run(path, 1.0, 100, now=lambda: T0, sleep=lambda _: None, lines=2)
    podlog.run(path, 1.0, 100, now=lambda: T0, sleep=lambda _: None, lines=1)
    texts = _texts(path)
    assert len(texts) == 5
    assert [text.split(" at ")[0] for text in texts[2:]] == [f"fake log line {n}" for n in (1, 2, 3)]
    assert not path.with_name("pod.log.1").exists()


def test_kwok_serves_the_file_for_every_pod_and_container(tmp_path: Path) -> None:
    doc = json.loads(podlog.cluster_logs(tmp_path / "pod.log"))
    assert doc["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and doc["kind"] == "ClusterLogs"
    assert "selector" not in doc["spec"]  # no selector: every pod
    assert doc["spec"]["logs"] == [{"logsFile": str(tmp_path / "pod.log"), "follow": True}]


def test_the_api_server_reaches_kwok_as_the_fake_nodes_kubelet_over_verified_tls(tmp_path: Path) -> None:
    config = ClusterConfig(state_dir=tmp_path, ports=Ports(31400))
    by_name = {component.name: component for component in cluster.components(config, Path("/bins"))}
    apiserver, kwok = by_name["kube-apiserver"].argv, by_name["kwok"].argv
    assert "--kubelet-preferred-address-types=InternalIP" in apiserver
    assert f"--kubelet-certificate-authority={config.pki / 'ca.crt'}" in apiserver
    assert f"--server-address={KWOK_NODE_IP}:31406" in kwok
    assert f"--node-ip={KWOK_NODE_IP}" in kwok and "--node-port=31406" in kwok
    assert f"--tls-cert-file={config.pki / 'kwok-serving.crt'}" in kwok
    assert f"--config={config.kwok_logs_config}" in kwok
    assert f"--file={config.pod_log}" in by_name["kwok-pod-log"].argv
    assert cluster.kubelet_endpoint_status(config) == {
        "addresses": [{"type": "InternalIP", "address": KWOK_NODE_IP}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 31406}},
    }


def test_the_node_stage_writes_kwoks_port_as_the_kubelet_port() -> None:
    stages = {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(cluster.STAGES.read_text())}
    template = stages["kq-node-ready"]["spec"]["next"]["statusTemplate"]
    assert "daemonEndpoints:" in template and "{{ with NodePort }}" in template
    assert "- address: {{ NodeIP | Quote }}\n  type: InternalIP" in template


def test_kwoks_serving_certificate_is_for_the_node_address_and_signed_by_the_dev_ca(tmp_path: Path) -> None:
    ensure_pki(tmp_path)
    cert = x509.load_pem_x509_certificate((tmp_path / "kwok-serving.crt").read_bytes())
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address(KWOK_NODE_IP) in names.get_values_for_type(x509.IPAddress)
