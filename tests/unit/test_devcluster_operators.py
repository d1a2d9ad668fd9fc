"""The dev cluster's job operators, without a cluster: their identities from their own RBAC manifests, the
training operator's webhook set-up, the certificate its rotator accepts, and the Unix-socket relay that lets
Argo's controller reach the API server from a network namespace of its own."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from webhook.api.objects import mapping, mappings, meta, name_of
from webhook.devcluster import jobset_operator, netns, operators
from webhook.devcluster.config import ClusterConfig, Ports
from webhook.devcluster.operator_certs import serving_pair

ROLE = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: training-operator}
rules: [{apiGroups: [""], resources: [pods], verbs: [create]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: training-operator}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: training-operator}
subjects: [{kind: ServiceAccount, name: training-operator}]
"""
LEASES = """
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: leases}
rules: [{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [get]}]
"""
WEBHOOKS = """
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- name: validator.mxjob.training-operator.kubeflow.org
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-kubeflow-org-v1-mxjob}}
  rules: [{apiGroups: [kubeflow.org], apiVersions: [v1], operations: [CREATE], resources: [mxjobs]}]
  admissionReviewVersions: [v1]
  sideEffects: None
- name: validator.pytorchjob.training-operator.kubeflow.org
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-kubeflow-org-v1-pytorchjob}}
  rules: [{apiGroups: [kubeflow.org], apiVersions: [v1], operations: [CREATE], resources: [pytorchjobs]}]
  admissionReviewVersions: [v1]
  sideEffects: None
"""


def test_an_operator_runs_as_the_service_account_its_own_binding_names(tmp_path: Path) -> None:
    (tmp_path / "role.yaml").write_text(ROLE)
    (tmp_path / "leases.yaml").write_text(LEASES)
    objects = operators.rbac_objects(operators.TRAINING_OPERATOR, tmp_path)
    kinds = sorted((obj["kind"], meta(obj).get("namespace")) for obj in objects)
    assert kinds == [("ClusterRole", None), ("ClusterRoleBinding", None), ("Role", "kubeflow"),
                     ("ServiceAccount", "kubeflow")]
    binding = next(obj for obj in objects if obj["kind"] == "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "training-operator", "namespace": "kubeflow"}]
    assert operators.username(operators.TRAINING_OPERATOR, tmp_path) == (
        "system:serviceaccount:kubeflow:training-operator")


def test_rbac_manifests_without_a_binding_are_an_error(tmp_path: Path) -> None:
    (tmp_path / "leases.yaml").write_text(LEASES)
    with pytest.raises(operators.OperatorError, match="bind no ServiceAccount"):
        operators.service_account(operators.KUBERAY, tmp_path)


def test_operator_names_are_checked() -> None:
    assert operators.parse_names("all") == tuple(operators.OPERATORS)
    assert operators.parse_names("none") == ()
    assert operators.parse_names("kuberay, kuberay,training-operator") == ("kuberay", "training-operator")
    with pytest.raises(operators.OperatorError, match=r"unknown operator\(s\) spark"):
        operators.parse_names("spark")


def test_the_training_operators_webhooks_point_at_loopback_for_the_enabled_kinds(tmp_path: Path) -> None:
    (tmp_path / "manifests.yaml").write_text(WEBHOOKS)
    config = ClusterConfig(state_dir=tmp_path, ports=Ports(30000))
    doc = operators.training_webhook_configuration(config, tmp_path, b"CA")
    assert name_of(doc) == "validator.training-operator.kubeflow.org"
    (hook,) = mappings(doc["webhooks"])  # MXJob is not enabled
    assert hook["clientConfig"] == {"url": "https://127.0.0.1:30022/validate-kubeflow-org-v1-pytorchjob",
                                    "caBundle": "Q0E="}



MPIJOB_HOOK = """
- name: validator.mpijob.training-operator.kubeflow.org
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-kubeflow-org-v1-mpijob}}
  rules: [{apiGroups: [kubeflow.org], apiVersions: [v1], operations: [CREATE], resources: [mpijobs]}]
"""


def test_where_the_mpi_operator_runs_the_training_operator_leaves_mpijob_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One cluster holds one ``mpijobs.kubeflow.org``: with both operators, only the MPI Operator's CRD is
    installed, and the training operator runs neither its ``mpijob`` scheme nor its MPIJob webhook."""
    (tmp_path / "manifests.yaml").write_text(WEBHOOKS + MPIJOB_HOOK)
    monkeypatch.setattr(operators, "built", lambda name: operators.Built(name, tmp_path / name, name))
    alone = ClusterConfig(state_dir=tmp_path, ports=Ports(30000), operators=("training-operator",))
    both = ClusterConfig(state_dir=tmp_path, ports=Ports(30000), operators=("training-operator", "mpi-operator"))

    def mpijob_crds(config: ClusterConfig) -> list[str]:
        return [f"{path.parent.parent.name}/{path.name}" for path in operators.crd_files(config)
                if path.name == "kubeflow.org_mpijobs.yaml"]

    def hooks(config: ClusterConfig) -> list[str]:
        doc = operators.training_webhook_configuration(config, tmp_path, b"CA")
        return sorted(str(hook["name"]).split(".")[1] for hook in mappings(doc["webhooks"]))

    assert "mpijob" in operators.training_schemes(alone)
    assert mpijob_crds(alone) == ["training-operator/kubeflow.org_mpijobs.yaml"]
    assert hooks(alone) == ["mpijob", "pytorchjob"]
    assert "mpijob" not in operators.training_schemes(both)
    assert mpijob_crds(both) == ["mpi-operator/kubeflow.org_mpijobs.yaml"]
    assert hooks(both) == ["pytorchjob"]
    argv = next(c.argv for c in operators.components(both) if c.name == "training-operator")
    assert "--enable-scheme=mpijob" not in argv and "--enable-scheme=tfjob" in argv


JOBSET_WEBHOOKS = """
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mjobset.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-jobset-x-k8s-io-v1alpha2-jobset}}
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- name: vjobset.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-jobset-x-k8s-io-v1alpha2-jobset}}
---
apiVersion: v1
kind: Service
metadata: {name: webhook-service}
"""
JOBSET_POD_PATCH = """
- op: replace
  path: /webhooks/1
  value:
    name: mpod.kb.io
    clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
    objectSelector: {matchExpressions: [{key: jobset.sigs.k8s.io/jobset-name, operator: Exists}]}
"""


def test_jobsets_webhooks_are_its_own_patched_as_its_kustomization_does_and_point_at_loopback(
    tmp_path: Path,
) -> None:
    (tmp_path / "webhooks").mkdir()
    (tmp_path / "webhooks" / "manifests.yaml").write_text(JOBSET_WEBHOOKS)
    (tmp_path / "webhook-patches").mkdir()
    (tmp_path / "webhook-patches" / "mutating-patch.yaml").write_text(JOBSET_POD_PATCH)
    (tmp_path / "webhook-patches" / "validating-patch.yaml").write_text("[]")
    mutating, validating = jobset_operator.webhook_configurations(tmp_path, 30025, b"CA")
    assert (name_of(mutating), name_of(validating)) == (
        "jobset-mutating-webhook-configuration", "jobset-validating-webhook-configuration")
    hooks = mappings(mutating["webhooks"])
    assert [mapping(hook["clientConfig"])["url"] for hook in hooks] == [
        "https://127.0.0.1:30025/mutate-jobset-x-k8s-io-v1alpha2-jobset", "https://127.0.0.1:30025/mutate--v1-pod"]
    assert hooks[1]["objectSelector"] == {
        "matchExpressions": [{"key": "jobset.sigs.k8s.io/jobset-name", "operator": "Exists"}]}, "JobSet's pods only"
    (hook,) = mappings(validating["webhooks"])
    assert mapping(hook["clientConfig"])["caBundle"] == "Q0E="


def test_jobsets_rbac_is_named_with_its_prefix_as_its_kustomization_names_it(tmp_path: Path) -> None:
    (tmp_path / "role.yaml").write_text(ROLE.replace("training-operator", "manager-role"))
    objects = operators.rbac_objects(operators.JOBSET, tmp_path)
    binding = next(obj for obj in objects if obj["kind"] == "ClusterRoleBinding")
    assert name_of(binding) == "jobset-manager-role"
    assert mapping(binding["roleRef"])["name"] == "jobset-manager-role"
    assert operators.username(operators.JOBSET, tmp_path) == (
        "system:serviceaccount:jobset-system:jobset-manager-role")


def test_the_serving_pair_is_what_the_rotator_accepts() -> None:
    pair = serving_pair("training-operator-ca", "training-operator.kubeflow.svc")
    ca = x509.load_pem_x509_certificate(pair.ca_cert)
    cert = x509.load_pem_x509_certificate(pair.cert)
    assert pair.ca_key.startswith(b"-----BEGIN RSA PRIVATE KEY-----"), "PKCS#1, as the rotator parses it"
    key = serialization.load_pem_private_key(pair.ca_key, password=None)
    assert isinstance(key, rsa.RSAPrivateKey)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert ca.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName) == ["training-operator-ca"]
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["training-operator.kubeflow.svc"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    cert.verify_directly_issued_by(ca)
    lookahead = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=90)
    assert cert.not_valid_after_utc > lookahead and ca.not_valid_after_utc > lookahead


async def test_the_host_relay_carries_a_stream_from_its_socket_to_the_port(tmp_path: Path) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(100))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    socket_path = tmp_path / "api.sock"
    relay = asyncio.ensure_future(netns.host(socket_path, port))
    try:
        for _ in range(50):
            if socket_path.exists():
                break
            await asyncio.sleep(0.02)
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(b"through the relay")
        await writer.drain()
        assert await reader.read(100) == b"through the relay"
        writer.close()
        assert oct(socket_path.stat().st_mode & 0o777) == "0o600"
    finally:
        relay.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await relay
        server.close()
        await server.wait_closed()


def test_the_spark_crd_says_it_was_written_here() -> None:
    doc = yaml.safe_load(operators.SPARK_CRD.read_text())
    assert doc["metadata"]["name"] == "sparkapplications.sparkoperator.k8s.io"
    assert "not the operator's CRD" in doc["metadata"]["annotations"]["kube-queue.x-k8s.io/source"]
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["suspend"] == {"type": "boolean"}
    assert spec["executor"]["properties"]["instances"]["type"] == "integer"
