"""The webhook-only install of clusters older than the admission policies (manifests/README.md, "Which to pick")
holds the pod rules the policies hold elsewhere (docs/security.md, "Where each pod rule lives").

For this module the dev cluster runs that install: the admission policies and their bindings are deleted and
the webhook configurations of ``policies=False`` applied, as ``kubectl apply`` of the webhook-only manifests
would. Then, as ``alice`` with ``edit`` in a namespace of the tree:

* a pod template that names its node is refused (Deployment, CronJob, an edit), now by the webhook;
* a Job's pods, made by the Job controller, are marked for the extender and tagged with their quota by the
  webhook;
* a Pod bound to a node by its creator is refused, a workload controller's too, and a pod's quota label cannot
  be stripped.

The policies and the usual configurations come back at the end, and the module waits until the API server
uses them again, so later modules run on the install they expect.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import job_manifest
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import (
    create_namespaces,
    cronjob,
    deployment,
    installed_tree,
    unique,
    wait_managed,
    wait_routed,
)
from webhook.admission.configs import NAME, webhook_configs
from webhook.admission.policies import PODS_GUARD, PODS_MARK, TEMPLATES_GUARD
from webhook.api.names import EXTENDER_RESOURCE, QUOTA_LABEL, SUCCEED_AFTER_ANNOTATION
from webhook.cli import devsystem

pytestmark = pytest.mark.e2e

USER = "alice"
LEAF = "Team-old"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
WEBHOOK_REFUSAL = "kube-queue refuses"
"""How the webhook's refusals start (the policies' start with the policy's name)."""


def _pinned_refusal(dev: DevCluster, namespace: str) -> str:
    """What a server-side dry run of alice's Deployment naming its node gets back ("" when it is allowed)."""
    result = dev.kubectl_result("create", "--dry-run=server", "-f", "-",
                                stdin=json.dumps(deployment(namespace, "probe", "a-node")), user=USER)
    return result.stderr if result.returncode != 0 else ""


def _marked_by_admission(dev: DevCluster, namespace: str) -> bool:
    """Whether a pod the Job controller would create in ``namespace`` comes out of admission marked for the
    extender and tagged with its quota (a server-side dry run)."""
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mark-probe", "namespace": namespace},
             "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    result = dev.kubectl_result("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(probe),
                                user=JOB_CONTROLLER)
    if result.returncode != 0:
        return False
    pod = json.loads(result.stdout)
    requests = pod["spec"]["containers"][0].get("resources", {}).get("requests", {})
    return EXTENDER_RESOURCE in requests and pod["metadata"].get("labels", {}).get(QUOTA_LABEL) == LEAF


def _policies_installed(dev: DevCluster) -> set[str]:
    names = set()
    for resource in ("mutatingadmissionpolicies", "validatingadmissionpolicies", "mutatingadmissionpolicybindings",
                     "validatingadmissionpolicybindings"):
        names |= {item["metadata"]["name"] for item in dev.get_json(resource)["items"]}
    return names & {PODS_MARK, PODS_GUARD, TEMPLATES_GUARD}


def _webhook_only(dev: DevCluster) -> None:
    """Install what a cluster without the admission policies runs."""
    dev.kubectl("delete", "mutatingadmissionpolicybinding", PODS_MARK, "--ignore-not-found")
    dev.kubectl("delete", "validatingadmissionpolicybinding", PODS_GUARD, TEMPLATES_GUARD, "--ignore-not-found")
    dev.kubectl("delete", "mutatingadmissionpolicy", PODS_MARK, "--ignore-not-found")
    dev.kubectl("delete", "validatingadmissionpolicy", PODS_GUARD, TEMPLATES_GUARD, "--ignore-not-found")
    _without_webhooks(dev)
    base = f"https://127.0.0.1:{dev.config.ports.webhook}"
    configs = webhook_configs(lambda path: {"url": base + path}, (dev.config.pki / "ca.crt").read_bytes(),
                              policies=False)
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": configs})
    dev.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=doc)


def _without_webhooks(dev: DevCluster) -> None:
    """Delete both configurations, so the next install's hooks are all there is (no hook of the other one left)."""
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        dev.kubectl("delete", kind, NAME, "--ignore-not-found")


@pytest.fixture(scope="module")
def old_cluster(dev_cluster: DevCluster) -> Iterator[str]:
    """A namespace of the tree where alice has ``edit``, on the webhook-only install; the usual install back
    afterwards."""
    dev = dev_cluster
    space = unique("old")
    spec = {"root": {"name": "root", "min": {"cpu": 4}, "max": {"cpu": 4}, "children": [
        {"name": LEAF, "min": {"cpu": 4}, "max": {"cpu": 4}, "namespaces": [space]}]}}
    try:
        create_namespaces(dev, space)
        dev.kubectl("create", "rolebinding", "alice-edit", "-n", space, "--clusterrole=edit", f"--user={USER}")
        with installed_tree(dev, spec):
            wait_managed(dev, space)
            wait_routed(dev, space)
            try:
                _webhook_only(dev)
                dev.wait_until(lambda: WEBHOOK_REFUSAL in _pinned_refusal(dev, space), 30,
                               "the API server to ask the webhook about pod templates")
                assert _policies_installed(dev) == set()
                yield space
            finally:
                _without_webhooks(dev)
                devsystem.register_webhooks(dev.config, dev.bins)
                dev.wait_until(lambda: TEMPLATES_GUARD in _pinned_refusal(dev, space), 30,
                               "the templates guard policy to be used again")
                dev.wait_until(lambda: _marked_by_admission(dev, space), 30, "the mark policy to be used again")
    finally:
        dev.kubectl("delete", "namespace", space, "--wait=false", "--ignore-not-found")


def test_a_pod_template_cannot_name_its_node(dev_cluster: DevCluster, old_cluster: str) -> None:
    dev, space = dev_cluster, old_cluster
    refusal = _pinned_refusal(dev, space)
    assert WEBHOOK_REFUSAL in refusal and "spec.template.spec.nodeName" in refusal, refusal
    result = dev.create(cronjob(space, "pinned", "a-node"), user=USER)
    assert result.returncode != 0 and "spec.jobTemplate.spec.template.spec.nodeName" in result.stderr, result.stderr
    created = dev.create(deployment(space, "free"), user=USER)
    assert created.returncode == 0, created.stderr
    patch = json.dumps({"spec": {"template": {"spec": {"nodeName": "a-node"}}}})
    edited = dev.kubectl_result("patch", "deployment", "free", "-n", space, "--type=merge", "-p", patch, user=USER)
    assert edited.returncode != 0 and WEBHOOK_REFUSAL in edited.stderr, edited.stderr
    assert "nodeName" not in dev.get_json("deployment", "free", "-n", space)["spec"]["template"]["spec"]


def test_a_jobs_pods_are_marked_and_tagged_and_stay_so(dev_cluster: DevCluster, old_cluster: str) -> None:
    dev, space = dev_cluster, old_cluster
    job = job_manifest("runs", pods=1, cpu=1, template_annotations={SUCCEED_AFTER_ANNOTATION: "600s"})
    created = dev.kubectl_result("create", "-n", space, "-f", "-", stdin=json.dumps(job), user=USER)
    assert created.returncode == 0, created.stderr

    def pods() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = dev.get_json("pods", "-n", space, "-l", "job-name=runs")["items"]
        return items

    dev.wait_until(lambda: any(pod["spec"].get("nodeName") for pod in pods()), 60, "the Job's pod scheduled")
    (pod,) = pods()
    assert pod["metadata"]["labels"][QUOTA_LABEL] == LEAF
    assert pod["spec"]["containers"][0]["resources"]["requests"][EXTENDER_RESOURCE] == "1"

    name = pod["metadata"]["name"]
    unlabel = json.dumps([{"op": "remove", "path": "/metadata/labels/" + QUOTA_LABEL.replace("/", "~1")}])
    result = dev.kubectl_result("patch", "pod", name, "-n", space, "--type=json", "-p", unlabel, user=USER)
    assert result.returncode != 0, result.stdout
    assert dev.get_json("pod", name, "-n", space)["metadata"]["labels"][QUOTA_LABEL] == LEAF


def test_neither_a_user_nor_a_workload_controller_can_bind_a_pod(dev_cluster: DevCluster, old_cluster: str) -> None:
    """A workload controller copies a nodeName from what a user wrote (a template, an Argo podSpecPatch): its pod
    is refused too (a server-side dry run as the Job controller, which may create pods)."""
    dev, space = dev_cluster, old_cluster
    spec: dict[str, Any] = {"nodeName": "ecs-0", "containers": [{"name": "c", "image": "busybox",
                                                                  "resources": {"requests": {"cpu": "1"}}}]}
    bound = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bound", "namespace": space}, "spec": spec}
    result = dev.create(bound, user=USER)
    assert result.returncode != 0 and "spec.nodeName" in result.stderr, result.stderr
    assert "bound" not in dev.kubectl("get", "pods", "-n", space, "-o", "name")
    result = dev.kubectl_result("create", "--dry-run=server", "-f", "-", stdin=json.dumps(bound),
                                user=JOB_CONTROLLER)
    assert result.returncode != 0 and WEBHOOK_REFUSAL in result.stderr and "spec.nodeName" in result.stderr, (
        result.stderr)
    del spec["nodeName"]
    result = dev.kubectl_result("create", "--dry-run=server", "-f", "-", stdin=json.dumps(bound),
                                user=JOB_CONTROLLER)
    assert result.returncode == 0, result.stderr
