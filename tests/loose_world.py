"""The seed's fake cluster (``tests/clirun.py``) with work the queue does not hold: Deployments whose pods run,
wait for pod-level quota, and were taken by reclaim (``kq why deployment/web``, the console's workload pages)."""

from __future__ import annotations

from typing import Any

from tests.builders import cluster_pod
from tests.clirun import NOW, T0, seed_objects
from tests.fakeapi import FakeApi, event
from tests.kubefake import stamp
from webhook.api.names import EXTENDER_COMPONENT, QUOTA_LABEL, REASON_EVICTED, REASON_PREEMPTION_REFUSED

QUOTA_REFUSAL = (
    "0/5 nodes are available: 5 pod-level quota (room held by admitted jobs, for a pod no queued job accounts "
    "for): quota root/Department-a: cpu request 4 + used 98 > max 100.")
PREEMPTION_REFUSED = (
    "kube-queue refused kube-scheduler's preemption on every candidate node, by the quota rules (docs/pod-quota.md, "
    "\"Preemption\"): a pod of another namespace: taking it would leave root/Department-b with cpu 0 < min 40: a "
    "quota at or under its min in what is contended keeps its pods (node ecs-1)")
LABELS = {QUOTA_LABEL: "Department-a"}
"""The quota label the pod admission policy gives the pods of the tree's namespaces."""
RECLAIMED = ("Evicted by reclaim (its controller, if any, creates a replacement that waits for room): quota "
             "root/Department-a borrows cpu; reclaimed for Job user-c/pend")


def apps(kind: str, name: str, namespace: str, uid: str, owner: dict[str, Any] | None = None,
          **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid, "creationTimestamp": stamp(T0)}
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner["kind"], "controller": True,
                                        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}]
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": metadata, "spec": spec}


def gone(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"}}


def loose_api(status_cpu: str | None = None) -> FakeApi:
    """The seed's cluster with Deployment user-a/web (3 replicas: 2 run, 1 waits for pod-level quota; reclaim
    took two before), Deployment user-a/webby beside it, and Deployment default/free outside the tree."""
    web = apps("Deployment", "web", "user-a", "uid-web", replicas=3)
    web_rs = apps("ReplicaSet", "web-5c7d9", "user-a", "uid-web-rs", web, replicas=3)
    webby = apps("Deployment", "webby", "user-a", "uid-webby", replicas=1)
    webby_rs = apps("ReplicaSet", "webby-66f", "user-a", "uid-webby-rs", webby, replicas=1)
    free = apps("Deployment", "free", "default", "uid-free")
    free_rs = apps("ReplicaSet", "free-1a", "default", "uid-free-rs", free)
    pods = [
        cluster_pod("web-5c7d9-aaaaa", namespace="user-a", owner=web_rs, cpu="4", created=stamp(T0 + 600),
                    labels=LABELS),
        cluster_pod("web-5c7d9-bbbbb", namespace="user-a", owner=web_rs, cpu="4", created=stamp(T0 + 600),
                    labels=LABELS),
        cluster_pod("web-5c7d9-ccccc", namespace="user-a", owner=web_rs, cpu="4", phase="Pending",
                    created=stamp(T0 + 900), unschedulable=QUOTA_REFUSAL, labels=LABELS),
        cluster_pod("webby-66f-xxxxx", namespace="user-a", owner=webby_rs, phase="Pending", created=stamp(T0 + 600),
                    unschedulable="0/5 nodes are available: 5 Insufficient memory."),
        cluster_pod("free-1a-qqqqq", namespace="default", owner=free_rs, phase="Pending", created=stamp(T0 + 600)),
    ]
    events = [
        event(gone("web-5c7d9-yyyyy", "user-a"), REASON_EVICTED, RECLAIMED, T0 + 880, kind="Warning"),
        event(gone("web-5c7d9-zzzzz", "user-a"), REASON_EVICTED, RECLAIMED, T0 + 880, kind="Warning"),
        event(gone("webby-66f-yyyyy", "user-a"), REASON_EVICTED, RECLAIMED, T0 + 870, kind="Warning"),
        event(pods[2], REASON_PREEMPTION_REFUSED, PREEMPTION_REFUSED, T0 + 990, kind="Warning",
              component=EXTENDER_COMPONENT),
    ]
    objects = seed_objects()
    if status_cpu is not None:
        root = objects[0]["status"]["root"]
        department = next(node for node in root["children"] if node["name"] == "Department-a")
        department["used"]["cpu"] = status_cpu
    return FakeApi([*objects, web, web_rs, webby, webby_rs, free, free_rs, *pods, *events], namespace="user-a",
                   now=NOW, served={"kubeflow.org": ["v1"]})
