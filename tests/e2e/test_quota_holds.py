"""A quota holds against everything that makes pods (issue 34), on the dev cluster, as namespace users would try
it: alice (user-a), bob (user-b) and carol (user-c), each with the built-in ``edit`` role in their namespace.

The seed's tree at ``--oversellrate=1``: Department-a (user-a, user-b; min 60 CPU) and Department-b (user-c; min
40 CPU) share a root of 100 CPU. Department-a borrows 40 CPU through pods no queued job accounts for; carol's job
of 10 CPU, within Department-b's min, must get its room back (docs/reclaim.md, "Pods"). Also: a namespace that
joins the tree holds its jobs at once (docs/security.md), and an in-place resize stays within the quota.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import refused_again, unique
from tests.e2e.setups import Seed
from tests.e2e.setups import seed as seeded  # noqa: F401 - the seed scenarios' setup, reused

pytestmark = pytest.mark.e2e

USERS = {"alice": "user-a", "bob": "user-b", "carol": "user-c"}


@pytest.fixture(scope="module")
def users(seeded: Seed) -> Iterator[Seed]:  # noqa: F811
    dev = seeded.dev
    for user, namespace in USERS.items():
        dev.kubectl("create", "rolebinding", f"{user}-edit", "--clusterrole=edit", f"--user={user}", "-n", namespace)
    try:
        yield seeded
    finally:
        for user, namespace in USERS.items():
            dev.kubectl("delete", "rolebinding", f"{user}-edit", "-n", namespace, "--ignore-not-found")


def _container(cpu: str) -> dict[str, Any]:
    amounts = {"cpu": cpu, "memory": "1Gi"}
    return {"name": "c", "image": "busybox", "command": ["sleep", "1d"],
            "resources": {"requests": dict(amounts), "limits": dict(amounts)}}


def _deployment(name: str, namespace: str, replicas: int, kind: str = "Deployment") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [_container("10")]}},
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
        spec["podManagementPolicy"] = "Parallel"
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _job(name: str, namespace: str, pods: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"parallelism": pods, "completions": pods,
                 "template": {"spec": {"containers": [_container("10")], "restartPolicy": "Never"}}},
    }


def _pods(dev: DevCluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = dev.get_json("pods", "-n", namespace, "-l", selector)["items"]
    return items


def _phases(dev: DevCluster, namespace: str, selector: str) -> list[str]:
    return sorted(pod.get("status", {}).get("phase", "") for pod in _pods(dev, namespace, selector)
                  if not pod["metadata"].get("deletionTimestamp"))


def _running(dev: DevCluster, namespace: str, selector: str) -> int:
    return _phases(dev, namespace, selector).count("Running")


def _create(dev: DevCluster, obj: dict[str, Any], user: str) -> None:
    result = dev.create(obj, user=user)
    assert result.returncode == 0, result.stderr


def _department_used(dev: DevCluster) -> dict[str, str]:
    status = dev.get_json("eqtree", "elasticquotatree", "-n", "kube-system").get("status", {})
    children = status.get("root", {}).get("children", [])
    return {child["name"]: child.get("used", {}).get("cpu", "0") for child in children}


def _clean(dev: DevCluster, *kinds_in: tuple[str, str]) -> None:
    for kind, namespace in kinds_in:
        dev.kubectl("delete", kind, "--all", "-n", namespace, "--wait=false", check=False)
    for _, namespace in kinds_in:

        def gone(where: str = namespace) -> bool:
            return not _pods(dev, where, "app!=none-such")

        dev.wait_until(gone, 120, f"the pods of {namespace} gone")


def test_a_deployment_that_borrows_gives_back_a_quota_its_min(users: Seed) -> None:
    dev = users.dev
    _create(dev, _deployment("web", "user-a", 10), "alice")
    dev.wait_until(lambda: _running(dev, "user-a", "app=web") == 10, 120, "10 web pods running")
    started = time.monotonic()
    _create(dev, _job("carol-1", "user-c"), "carol")
    dev.wait_until(lambda: _running(dev, "user-c", "job-name=carol-1") == 1, 90, "carol's job running")
    took = time.monotonic() - started
    # One Deployment pod was evicted; its replacement waits Pending: the room belongs to carol's job.
    dev.wait_until(lambda: _phases(dev, "user-a", "app=web") == ["Pending", *["Running"] * 9], 60,
                   "9 web pods running and the replacement pending")
    # The replacement must stay out when asked again on the settled state, not win the room a moment later.
    (waiting,) = [pod for pod in _pods(dev, "user-a", "app=web") if pod["status"].get("phase") == "Pending"]
    refused_again(dev, "user-a", [waiting["metadata"]["name"]])
    assert _phases(dev, "user-a", "app=web") == ["Pending", *["Running"] * 9]
    assert _running(dev, "user-c", "job-name=carol-1") == 1
    waiting = dev.get_json("pod", waiting["metadata"]["name"], "-n", "user-a")
    said = " ".join(c.get("message", "") for c in waiting["status"].get("conditions", []))
    assert "pod-level quota" in said, said
    dev.wait_until(lambda: _department_used(dev) == {"Department-a": "90", "Department-b": "10"}, 60,
                   "the tree's status: Department-a 90, Department-b 10")
    events = dev.kubectl("get", "events", "-n", "user-a", "--field-selector", "reason=Evicted", "-o", "json")
    assert any("reclaims cpu=10 from root/Department-a" in e.get("message", "") for e in json.loads(events)["items"])
    print(f"deployment reclaim: carol's job running {took:.1f}s after it was created")
    _clean(dev, ("deployment", "user-a"), ("job", "user-c"))


def test_a_disruption_budget_moves_reclaim_to_a_statefulset(users: Seed) -> None:
    dev = users.dev
    _create(dev, _deployment("web", "user-a", 6), "alice")
    budget = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
              "metadata": {"name": "web", "namespace": "user-a"},
              "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}}
    _create(dev, budget, "alice")
    _create(dev, _deployment("db", "user-b", 4, kind="StatefulSet"), "bob")
    dev.wait_until(lambda: _running(dev, "user-a", "app=web") == 6 and _running(dev, "user-b", "app=db") == 4,
                   120, "6 web and 4 db pods running")
    _create(dev, _job("carol-2", "user-c"), "carol")
    dev.wait_until(lambda: _running(dev, "user-c", "job-name=carol-2") == 1, 90, "carol's job running")
    assert _running(dev, "user-a", "app=web") == 6, "the budget forbids evicting web pods"
    dev.wait_until(lambda: _running(dev, "user-b", "app=db") == 3, 30, "one db pod evicted")
    _clean(dev, ("deployment", "user-a"), ("statefulset", "user-b"), ("poddisruptionbudget", "user-a"),
           ("job", "user-c"))


def test_the_orphans_of_a_deleted_job_are_a_pod_like_any_other(users: Seed) -> None:
    dev = users.dev
    _create(dev, _job("big", "user-a", 10), "alice")
    dev.wait_until(lambda: _running(dev, "user-a", "job-name=big") == 10, 120, "big's 10 pods running")
    dev.kubectl("delete", "job", "big", "-n", "user-a", "--cascade=orphan", user="alice")
    dev.wait_until(lambda: all(not pod["metadata"].get("ownerReferences")
                               for pod in _pods(dev, "user-a", "job-name=big")), 60, "big's pods orphaned")
    _create(dev, _job("carol-3", "user-c"), "carol")
    dev.wait_until(lambda: _running(dev, "user-c", "job-name=carol-3") == 1, 90, "carol's job running")
    dev.wait_until(lambda: _running(dev, "user-a", "job-name=big") == 9, 30, "one orphan evicted")
    events = json.loads(dev.kubectl("get", "events", "-n", "user-a", "-o", "json"))["items"]
    outside = [e["message"] for e in events if e.get("reason") == "RunsOutsideQueue"]
    assert outside and all("without an owner" in message for message in outside), outside
    _clean(dev, ("pods", "user-a"), ("job", "user-c"))


def test_a_namespace_that_joins_the_tree_holds_its_jobs_at_once(users: Seed) -> None:
    dev = users.dev
    tree = dev.get_json("eqtree", "elasticquotatree", "-n", "kube-system")
    original = tree["spec"]
    joined: list[str] = []
    try:
        for attempt in range(6):
            namespace = unique("late")
            dev.kubectl("create", "namespace", namespace)
            # Every other try joins the namespace the moment it exists, before the webhook's namespace watch
            # may have delivered it, and submits as an administrator at once after.
            user = "dave" if attempt % 2 == 0 else None
            if user is not None:
                dev.kubectl("create", "rolebinding", "dave-edit", "--clusterrole=edit", "--user=dave", "-n",
                            namespace)
            spec = json.loads(json.dumps(original))
            spec["root"]["children"][1]["namespaces"] = [*spec["root"]["children"][1]["namespaces"], *joined,
                                                         namespace]
            patch = json.dumps([{"op": "replace", "path": "/spec", "value": spec}])
            dev.kubectl("patch", "eqtree", "elasticquotatree", "-n", "kube-system", "--type=json", "-p", patch)
            joined.append(namespace)
            job = _job(f"early-{attempt}", namespace)
            job["spec"]["suspend"] = False
            result = dev.create(job, user=user)
            assert result.returncode == 0, result.stderr
            assert json.loads(result.stdout)["spec"]["suspend"] is True, f"try {attempt}: the job ran unheld"
        # A namespace created after the tree already lists it is held from its first job too.
        later = unique("later")
        spec = json.loads(json.dumps(original))
        spec["root"]["children"][1]["namespaces"] = [*spec["root"]["children"][1]["namespaces"], *joined, later]
        patch = json.dumps([{"op": "replace", "path": "/spec", "value": spec}])
        dev.kubectl("patch", "eqtree", "elasticquotatree", "-n", "kube-system", "--type=json", "-p", patch)
        dev.kubectl("create", "namespace", later)
        job = _job("first", later)
        job["spec"]["suspend"] = False
        result = dev.create(job)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["spec"]["suspend"] is True, "a job of a namespace created in the tree ran"
        joined.append(later)
    finally:
        patch = json.dumps([{"op": "replace", "path": "/spec", "value": original}])
        dev.kubectl("patch", "eqtree", "elasticquotatree", "-n", "kube-system", "--type=json", "-p", patch)
        for namespace in joined:
            dev.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_an_in_place_resize_stays_within_the_quota(users: Seed) -> None:
    dev = users.dev
    dev.kubectl("create", "role", "resize", "--verb=get,patch", "--resource=pods/resize", "-n", "user-a")
    dev.kubectl("create", "rolebinding", "alice-resize", "--role=resize", "--user=alice", "-n", "user-a")
    try:
        _create(dev, _deployment("web", "user-a", 9), "alice")
        dev.wait_until(lambda: _running(dev, "user-a", "app=web") == 9, 120, "9 web pods running")
        dev.wait_until(lambda: _department_used(dev).get("Department-a") == "90", 60, "Department-a using 90")
        # A pod on the node with the fewest of them: the node has room to grow it, the quota decides.
        pods = _pods(dev, "user-a", "app=web")
        per_node: dict[str, int] = {}
        for item in pods:
            per_node[item["spec"]["nodeName"]] = per_node.get(item["spec"]["nodeName"], 0) + 1
        name = min(pods, key=lambda item: per_node[item["spec"]["nodeName"]])["metadata"]["name"]

        def resize(cpu: str) -> Any:
            body = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu},
                                                                         "limits": {"cpu": cpu}}}]}}
            return dev.kubectl_result("patch", "pod", name, "-n", "user-a", "--subresource=resize", "--type=strategic",
                                      "-p", json.dumps(body), user="alice")

        refused = resize("22")
        assert refused.returncode != 0, "a pod grew beyond its quota"
        assert "takes quota root/Department-a to 102 of its max 100" in refused.stderr, refused.stderr
        allowed = resize("20")
        assert allowed.returncode == 0, allowed.stderr
    finally:
        _clean(dev, ("deployment", "user-a"))
        dev.kubectl("delete", "rolebinding", "alice-resize", "-n", "user-a", "--ignore-not-found")
        dev.kubectl("delete", "role", "resize", "-n", "user-a", "--ignore-not-found")
