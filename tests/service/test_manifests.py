"""Webhook configurations (generated from the registry), CRDs, kustomization, and the cert tools."""

from __future__ import annotations

import argparse
import base64
import datetime
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from webhook.admission.configs import (
    CLAIMS_FROM_TEMPLATES,
    CLAIMS_VALIDATE,
    JOBS_VALIDATE,
    NAMESPACES_MUTATE,
    PODS_MUTATE,
    PODS_MUTATE_WORKLOADS,
    PODS_MUTATE_WORKLOADS_OPT_IN,
    TEMPLATES_VALIDATE,
    cluster_webhook_configs,
    dev_webhook_configs,
)
from webhook.admission.manifests import generated_files
from webhook.admission.policies import PODS_GUARD, admission_policies
from webhook.admission.registration import Webhook, WebhookConfiguration
from webhook.admission.state import DEFAULT_CONTROLLER_USER
from webhook.api.names import ECI_OPT_IN_LABEL, MANAGED_NAMESPACE_LABEL, MANAGED_ROUTE, PLACEMENT_NAMESPACE_LABEL
from webhook.cli import certs as certs_cli
from webhook.cli import serve as serve_cli
from webhook.kube.selfcert import issue, needs_renewal, service_dns_names
from webhook.workloads.registry import all_adapters

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"


FAIL_OPEN = ("pods.placement.kube-queue.x-k8s.io", "pods.eci-opt-in.kube-queue.x-k8s.io", NAMESPACES_MUTATE,
             PODS_MUTATE_WORKLOADS, PODS_MUTATE_WORKLOADS_OPT_IN, CLAIMS_FROM_TEMPLATES)
"""The pod hooks of namespaces outside the tree, and the namespace hook: no namespace outside the tree depends on
the webhook; beside the admission policies, the hooks of workload controllers' pods and of the claims made from
templates (tests/service/test_admission_policies.py says why those are safe)."""
SIDE_EFFECTS = {"elasticquotatrees.validate.kube-queue.x-k8s.io": "NoneOnDryRun",
                "resourcepolicies.validate.kube-queue.x-k8s.io": "NoneOnDryRun"}
"""The hooks with a side effect: a tree that makes existing namespaces join labels them first, a ResourcePolicy
its namespace for the placement webhook."""


def docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_dev_configs_point_at_the_url_and_trust_the_ca() -> None:
    mutating, validating = dev_webhook_configs("https://127.0.0.1:9443/", b"PEM")
    assert mutating["kind"] == "MutatingWebhookConfiguration"
    assert validating["kind"] == "ValidatingWebhookConfiguration"
    for hook in mutating["webhooks"]:
        assert hook["clientConfig"] == {
            "url": "https://127.0.0.1:9443/mutate" + _route(hook),
            "caBundle": base64.b64encode(b"PEM").decode(),
        }
    for hook in validating["webhooks"]:
        assert hook["clientConfig"]["url"] == "https://127.0.0.1:9443/validate" + _route(hook)
    for hook in mutating["webhooks"] + validating["webhooks"]:
        fails_open = hook["name"] in FAIL_OPEN
        assert hook["failurePolicy"] == ("Ignore" if fails_open else "Fail")
        assert hook["sideEffects"] == SIDE_EFFECTS.get(hook["name"], "None")
        assert hook["timeoutSeconds"] == 10
        assert hook["admissionReviewVersions"] == ["v1"]


def _route(hook: Webhook) -> str:
    """The path suffix a hook must have: ``/managed`` exactly when its namespaces carry the managed label."""
    labels = (hook.get("namespaceSelector") or {}).get("matchLabels") or {}
    return f"/{MANAGED_ROUTE}" if labels.get(MANAGED_NAMESPACE_LABEL) == "true" else ""


@pytest.mark.parametrize("policies", [True, False])
def test_a_hook_says_by_its_path_whether_its_namespaces_are_labelled(policies: bool) -> None:
    # The handlers hold a job of a namespace this path calls labelled even before their own watch shows the
    # label (webhook/admission/app.py): a /managed path on a hook that selects any namespace would hold jobs
    # of every namespace, and a plain path on a labelled one would let a just-joined job run.
    hooks = [hook for config in cluster_webhook_configs(policies=policies) for hook in config["webhooks"]]
    routed = [hook["name"] for hook in hooks if hook["clientConfig"]["service"]["path"].endswith(f"/{MANAGED_ROUTE}")]
    assert routed and JOBS_VALIDATE in routed and PODS_MUTATE in routed
    for hook in hooks:
        assert hook["clientConfig"]["service"]["path"] in (f"/mutate{_route(hook)}", f"/validate{_route(hook)}")
    loose = dev_webhook_configs("https://127.0.0.1:9443", b"PEM", require_managed_label=False)
    assert not [hook for config in loose for hook in config["webhooks"] if MANAGED_ROUTE in hook["clientConfig"]["url"]]


def test_job_hooks_match_managed_namespaces_only_and_never_kube_system() -> None:
    mutating, validating = dev_webhook_configs("https://127.0.0.1:9443", b"PEM")
    job_hooks = [
        h for h in mutating["webhooks"] + validating["webhooks"]
        if h["name"].split(".")[0] in ("jobs", "pods") and h["name"] not in FAIL_OPEN
    ]
    assert len(job_hooks) == 5  # jobs: mutate, validate, scale; pods: mutate, resize (updates: the guard policy)
    only, _ = cluster_webhook_configs(policies=False)
    for hook in job_hooks + [h for h in only["webhooks"] if h["name"] == PODS_MUTATE]:
        selector = hook["namespaceSelector"]
        assert selector["matchLabels"] == {MANAGED_NAMESPACE_LABEL: "true"}
        assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]} in selector[
            "matchExpressions"
        ]
    loose, _ = dev_webhook_configs("https://127.0.0.1:9443", b"PEM", require_managed_label=False)
    assert "matchLabels" not in loose["webhooks"][0]["namespaceSelector"]


@pytest.mark.parametrize("policies", [True, False])
def test_every_registered_kind_is_mutated_at_creation_and_validated_on_update(policies: bool) -> None:
    mutating, validating = cluster_webhook_configs(policies=policies)

    def covered(config: WebhookConfiguration, operation: str) -> set[tuple[str, str]]:
        out = set()
        for hook in config["webhooks"]:
            for rule in hook["rules"]:
                if operation in rule["operations"]:
                    out |= {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
        return out

    kinds = {(a.group, a.plural) for a in all_adapters()}
    assert kinds <= covered(mutating, "CREATE")
    guarded = set()
    if policies:  # pod updates are checked by the guard policy in the API server
        (guard,) = [obj for obj in admission_policies() if obj["metadata"]["name"] == PODS_GUARD
                    and obj["kind"] == "ValidatingAdmissionPolicy"]
        spec: Mapping[str, Any] = guard["spec"]
        guarded = {(g, r) for rule in spec["matchConstraints"]["resourceRules"]
                   if "UPDATE" in rule["operations"] for g in rule["apiGroups"] for r in rule["resources"]}
        assert guarded == {("", "pods")}
    assert kinds <= covered(validating, "UPDATE") | guarded
    assert {
        ("scheduling.sigs.k8s.io", "elasticquotatrees"),
        ("scheduling.alibabacloud.com", "resourcepolicies"),
        ("scheduling.x-k8s.io", "queues"),
    } <= covered(validating, "CREATE")


@pytest.mark.parametrize("policies", [True, False])
def test_a_jobs_creation_is_decided_by_the_mutating_hook_alone(policies: bool) -> None:
    """A new job is refused by ``jobs.mutate`` (``validate.creation_refusal``), so ``jobs.validate`` is not called
    on creations (one round trip per create, issue 40). That holds only if the mutating hook sees every creation
    the validating hook saw: the same job kinds, namespaces and path, failing closed, and no condition that lets
    a user's request by."""
    mutating, validating = cluster_webhook_configs(policies=policies)
    (validate,) = [hook for hook in validating["webhooks"] if hook["name"] == JOBS_VALIDATE]
    (mutate,) = [hook for hook in mutating["webhooks"] if hook["name"] == "jobs.mutate.kube-queue.x-k8s.io"]
    assert {op for rule in validate["rules"] for op in rule["operations"]} == {"UPDATE"}
    assert {op for rule in mutate["rules"] for op in rule["operations"]} == {"CREATE"}
    resources = [(rule["apiGroups"], rule["apiVersions"], rule["resources"]) for rule in validate["rules"]]
    assert resources == [(rule["apiGroups"], rule["apiVersions"], rule["resources"]) for rule in mutate["rules"]]
    assert mutate["namespaceSelector"] == validate["namespaceSelector"]
    assert mutate["clientConfig"]["service"]["path"] == "/mutate/" + MANAGED_ROUTE
    assert mutate["failurePolicy"] == "Fail" and "matchConditions" not in mutate


def test_dra_claims_are_validated_at_creation_in_managed_namespaces_only() -> None:
    """A claim the quota cannot count is refused (tests/service/test_admission_claims.py); updates never reach
    the webhook (the spec is immutable, and the scheduler writes claims while it allocates)."""
    _, validating = cluster_webhook_configs()
    (hook,) = [hook for hook in validating["webhooks"] if hook["name"] == CLAIMS_VALIDATE]
    assert hook["rules"] == [{"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"],
                              "resources": ["resourceclaims", "resourceclaimtemplates"], "operations": ["CREATE"],
                              "scope": "Namespaced"}]
    assert hook["namespaceSelector"]["matchLabels"] == {MANAGED_NAMESPACE_LABEL: "true"}
    assert hook["failurePolicy"] == "Fail"
    assert hook["matchPolicy"] == "Equivalent"  # v1beta1 and v1beta2 requests arrive as v1


def test_only_the_controllers_own_job_writes_skip_the_validating_webhook() -> None:
    """Issue 23: the controller's releases are not sent to the job validating webhook, which lets that identity
    through anyway (tests/service/test_validate.py::test_the_controller_may_release_a_held_job); everyone else's
    job writes still are. Beside the admission policies the pod creation hooks are split by creator (issue 40);
    the webhook-only install's templates hook leaves out the workload controllers, as the policy it stands in for
    does; no other webhook has a condition."""
    configs = (cluster_webhook_configs(), dev_webhook_configs("https://127.0.0.1:9443", b"PEM"),
               cluster_webhook_configs(policies=False))
    for index, (mutating, validating) in enumerate(configs):
        conditions = {hook["name"]: hook.get("matchConditions") for hook in [*mutating["webhooks"],
                                                                             *validating["webhooks"]]}
        assert conditions.pop("jobs.validate.kube-queue.x-k8s.io") == [{
            "name": "not-the-queue-controller",
            "expression": f"request.userInfo.username != '{DEFAULT_CONTROLLER_USER}'",
        }]
        if index < 2:
            assert [c["name"] for c in conditions.pop(PODS_MUTATE) or []] == ["not-a-workload-controller"]
            assert [c["name"] for c in conditions.pop(PODS_MUTATE_WORKLOADS) or []] == ["a-workload-controller"]
            assert [c["name"] for c in conditions.pop(PODS_MUTATE_WORKLOADS_OPT_IN) or []] == ["a-workload-controller"]
            assert [c["name"] for c in conditions.pop(CLAIMS_VALIDATE) or []] == ["not-the-claim-controller"]
            assert [c["name"] for c in conditions.pop(CLAIMS_FROM_TEMPLATES) or []] == ["the-claim-controller"]
        else:  # webhook-only: the templates guard policy's rule, for users' writes only
            assert [c["name"] for c in conditions.pop(TEMPLATES_VALIDATE) or []] == ["not-a-workload-controller"]
        assert set(map(str, conditions.values())) == {"None"}


def test_generated_manifests_are_up_to_date() -> None:
    for relative, text in generated_files().items():
        path = MANIFESTS / relative
        assert path.exists() and path.read_text() == text, (
            f"manifests/{relative} is stale: run python -m webhook.admission.configs"
        )
    assert docs(MANIFESTS / "webhook" / "webhook-configurations.yaml") == cluster_webhook_configs()
    assert docs(MANIFESTS / "webhook" / "admission-policies.yaml") == admission_policies()
    assert docs(MANIFESTS / "webhook" / "webhook-configurations-webhook-only.yaml") == cluster_webhook_configs(
        policies=False)


def test_crds_have_the_names_users_rely_on() -> None:
    crds = {
        doc["spec"]["names"]["kind"]: doc
        for path in sorted((MANIFESTS / "crds").glob("*.yaml"))
        for doc in docs(path)
        if doc.get("kind") == "CustomResourceDefinition"
    }
    tree = crds["ElasticQuotaTree"]["spec"]
    assert tree["group"] == "scheduling.sigs.k8s.io" and tree["scope"] == "Namespaced"
    assert set(tree["names"]["shortNames"]) == {"eqtree", "eqtrees"}
    assert tree["versions"][0]["name"] == "v1beta1" and tree["versions"][0]["subresources"] == {"status": {}}
    queue = crds["Queue"]["spec"]
    assert queue["group"] == "scheduling.x-k8s.io" and queue["versions"][0]["name"] == "v1alpha1"
    assert any(c["jsonPath"] == ".spec.queuePolicy" for c in queue["versions"][0]["additionalPrinterColumns"])
    policy = crds["ResourcePolicy"]["spec"]
    assert policy["group"] == "scheduling.alibabacloud.com" and policy["versions"][0]["name"] == "v1alpha1"


def test_kustomization_lists_existing_files_and_every_crd() -> None:
    (doc,) = docs(MANIFESTS / "kustomization.yaml")
    for resource in doc["resources"]:
        assert (MANIFESTS / resource).exists(), resource
    crds = sorted(f"crds/{path.name}" for path in (MANIFESTS / "crds").iterdir())
    assert set(crds) <= set(doc["resources"])


def test_crds_directory_holds_only_crds() -> None:
    # The dev cluster runs `kubectl apply -f manifests/crds/`: anything else there would break it.
    for path in (MANIFESTS / "crds").iterdir():
        assert path.suffix == ".yaml"
        assert all(d["kind"] == "CustomResourceDefinition" for d in docs(path))


def test_deployment_is_highly_available() -> None:
    by_kind = {doc["kind"]: doc for doc in docs(MANIFESTS / "webhook" / "deployment.yaml")}
    deployment = by_kind["Deployment"]["spec"]
    assert deployment["replicas"] == 2
    container = deployment["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert by_kind["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    assert by_kind["Service"]["spec"]["ports"][0]["port"] == 443
    # The flags the Deployment passes are ones kq serve accepts.
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    args = parser.parse_args(container["args"])
    options = serve_cli.options_from_args(args)
    assert options.self_signed_secret == ("kube-queue", "kube-queue-webhook-tls")


def test_kq_certs_writes_a_ca_and_a_serving_certificate(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    certs_cli.register(parser.add_subparsers())
    args = parser.parse_args(["certs", "--out", str(tmp_path), "--dns", "webhook.example", "--ip", "127.0.0.1"])
    assert certs_cli.run(args) == 0
    for name in ("ca.crt", "ca.key", "tls.crt", "tls.key"):
        assert (tmp_path / name).is_file()
    assert (tmp_path / "tls.key").stat().st_mode & 0o077 == 0
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "webhook.example" in sans.get_values_for_type(x509.DNSName)
    assert "kube-queue-webhook.kube-queue.svc" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    ca_before = (tmp_path / "ca.crt").read_bytes()
    certs_cli.run(args)
    assert (tmp_path / "ca.crt").read_bytes() == ca_before  # the CA is reused


def test_kq_serve_refuses_missing_certificates(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    serve_cli.register(parser.add_subparsers())
    with pytest.raises(SystemExit, match="kq certs"):
        serve_cli.options_from_args(parser.parse_args(["serve"]))
    with pytest.raises(SystemExit, match="does not exist"):
        serve_cli.options_from_args(
            parser.parse_args(["serve", "--cert", str(tmp_path / "x"), "--key", str(tmp_path / "y")])
        )
    args = parser.parse_args(["serve", "--self-signed-secret", "ns/name", "--controller-user", "dev"])
    options = serve_cli.options_from_args(args)
    assert options.settings.controller_users == {"dev", "system:serviceaccount:kube-queue:kube-queue-controller"}


def test_self_issued_certificates_renew_before_expiry_or_on_new_names() -> None:
    names = service_dns_names("kube-queue-webhook", "kube-queue")
    certs = issue(names)
    now = datetime.datetime.now(datetime.UTC)
    assert needs_renewal(certs, names, (), now) is None
    assert needs_renewal(certs, names, (), now + datetime.timedelta(days=340)) is not None
    assert "lacks the names" in str(needs_renewal(certs, [*names, "extra.example"], (), now))


def test_kq_help_lists_serve_and_certs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "webhook.cli.main", "--help"], capture_output=True, text=True, check=True
    )
    assert "serve" in out.stdout and "certs" in out.stdout


def test_pods_of_namespaces_outside_the_tree_reach_only_the_placement_hook_and_never_depend_on_it() -> None:
    # A ResourcePolicy works in any namespace (docs/placement.md): the controller labels such namespaces, and
    # their pods get the virtual node's toleration from a hook that fails open.
    mutating, _ = cluster_webhook_configs()
    (hook,) = [h for h in mutating["webhooks"] if h["name"] == "pods.placement.kube-queue.x-k8s.io"]
    assert hook["failurePolicy"] == "Ignore"
    selector = hook["namespaceSelector"]
    assert selector["matchLabels"] == {"kube-queue.x-k8s.io/placement": "true"}
    assert {"key": MANAGED_NAMESPACE_LABEL, "operator": "DoesNotExist"} in selector["matchExpressions"]
    assert [rule["resources"] for rule in hook["rules"]] == [["pods"]]


def test_pods_opted_into_eci_outside_every_hooked_namespace_reach_the_opt_in_hook_only() -> None:
    # The default profile never uses the virtual node; the hook gives such pods the full-scan profile. Only
    # pods with the label reach it, never in kube-system, and it fails open (they stay on regular nodes).
    mutating, _ = cluster_webhook_configs()
    (hook,) = [h for h in mutating["webhooks"] if h["name"] == "pods.eci-opt-in.kube-queue.x-k8s.io"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["objectSelector"] == {"matchLabels": {ECI_OPT_IN_LABEL: "true"}}
    expressions = hook["namespaceSelector"]["matchExpressions"]
    assert {"key": MANAGED_NAMESPACE_LABEL, "operator": "DoesNotExist"} in expressions
    assert {"key": PLACEMENT_NAMESPACE_LABEL, "operator": "DoesNotExist"} in expressions
    assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]} in expressions
    assert [rule["resources"] for rule in hook["rules"]] == [["pods"]]
    assert [rule["operations"] for rule in hook["rules"]] == [["CREATE"]]
