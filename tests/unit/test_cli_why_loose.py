"""``kq why`` for work the queue does not hold: a Deployment's pods, one such pod, a pod reclaim took
(``webhook/readmodel/loose_why.py``; docs/pod-quota.md), over the seed's fake cluster (``tests/clirun.py``)."""

from __future__ import annotations

import json

from tests.builders import cluster_pod
from tests.clirun import T0, check_golden, fits, run
from tests.fakeapi import event
from tests.kubefake import stamp
from tests.loose_world import LABELS, PREEMPTION_REFUSED, QUOTA_REFUSAL, RECLAIMED, apps, gone, loose_api
from webhook.api.names import EXTENDER_COMPONENT, REASON_EVICTED, REASON_PREEMPTION_REFUSED


def test_a_deployment_says_its_quota_which_pods_wait_and_what_reclaim_took() -> None:
    result = run(["why", "deployment/web"], loose_api())
    assert result.code == 0, result.err
    check_golden("why_deployment", result.out)
    fits(result.out)
    text = " ".join(result.out.split())
    assert text.startswith("Deployment user-a/web: 2 of 3 pods run.")
    assert "quota root/Department-a has room for it under its max" in text
    assert "web-5c7d9-ccccc: 0/5 nodes are available: 5 pod-level quota (room held by admitted jobs" in text
    assert "Its preemption, 10s ago: kube-queue refused kube-scheduler's preemption on every candidate node" in text
    assert "The quota's max is full for it: it starts as the quota's other pods end" in text
    assert "Reclaim evicted 2 of its pods: web-5c7d9-yyyyy and web-5c7d9-zzzzz, 2m ago: Evicted by reclaim" in text
    assert "webby" not in text  # another Deployment's pods and reclaims, though their names begin alike
    assert "reclaim may evict its pods" not in text  # the quota uses no more than its min


def test_a_bare_name_that_no_job_has_finds_the_deployment() -> None:
    assert run(["why", "web"], loose_api()).out == run(["why", "deploy/web"], loose_api()).out


def test_a_quota_that_borrows_warns_that_its_pods_may_be_reclaimed() -> None:
    text = " ".join(run(["why", "deployment/web"], loose_api(status_cpu="70")).out.split())
    assert "Quota root/Department-a: cpu used 70 of min 60, max 100;" in text
    assert "The quota uses more than its min, so reclaim may evict its pods" in text


def test_one_pod_names_its_owner_and_a_reclaimed_one_says_it_isgone() -> None:
    waiting = " ".join(run(["why", "pod/web-5c7d9-ccccc"], loose_api()).out.split())
    assert waiting.startswith("Pod user-a/web-5c7d9-ccccc (made by ReplicaSet web-5c7d9) is Pending.")
    assert "1 pod waits: web-5c7d9-ccccc: 0/5 nodes are available: 5 pod-level quota" in waiting
    gone = " ".join(run(["why", "pod/web-5c7d9-zzzzz"], loose_api()).out.split())
    assert gone.startswith("Pod user-a/web-5c7d9-zzzzz is gone.")
    assert "Reclaim evicted it: web-5c7d9-zzzzz, 2m ago: Evicted by reclaim" in gone


def test_json_carries_the_quota_the_waiting_pods_and_the_reclaims() -> None:
    result = run(["why", "deployment/web", "-o", "json"], loose_api())
    assert result.code == 0, result.err
    body = json.loads(result.out)
    assert {key: body[key] for key in ("kind", "namespace", "name", "queued", "quota", "running", "expected")} == {
        "kind": "Deployment", "namespace": "user-a", "name": "web", "queued": False, "quota": "root/Department-a",
        "running": 2, "expected": 3}
    assert body["podsWaiting"] == [{"reason": "pod-quota", "pods": 1, "message": QUOTA_REFUSAL,
                                    "names": ["web-5c7d9-ccccc"], "preemptionRefused": PREEMPTION_REFUSED}]
    assert body["reclaimed"] == [{"pod": pod, "at": stamp(T0 + 880), "message": RECLAIMED}
                                 for pod in ("web-5c7d9-yyyyy", "web-5c7d9-zzzzz")]
    assert body["explanation"] == run(["why", "deployment/web"], loose_api()).out.rstrip("\n")


def test_a_namespace_outside_the_tree_says_nothing_of_kube_queue_holds_its_pods() -> None:
    text = " ".join(run(["why", "deployment/free", "-n", "default"], loose_api()).out.split())
    assert "namespace default is not under quota" in text
    assert "Quota " not in text


def test_without_read_access_to_the_tree_it_names_the_pods_quota_label_and_the_role_to_ask_for() -> None:
    api = loose_api()
    api.forbidden.add(("elasticquotatrees", "kube-system"))
    result = run(["why", "deployment/web", "-o", "json"], api)
    assert result.code == 0, result.err
    body = json.loads(result.out)
    assert "quota" not in body
    assert body["podsWaiting"][0]["names"] == ["web-5c7d9-ccccc"] and len(body["reclaimed"]) == 2
    text = " ".join(body["explanation"].split())
    assert "Its pods carry the label of quota Department-a." in text
    assert ("Its quota's figures are not shown: they need read access to ElasticQuotaTrees, which the role "
            "kube-queue-quota-viewer grants") in text


def test_what_is_neither_a_job_nor_a_workload_keeps_the_jobs_error() -> None:
    missing = run(["why", "nope"], loose_api())
    assert missing.code == 1
    assert missing.err.startswith("error: job 'nope' not found in namespace user-a")
    workload = run(["why", "statefulset/nope"], loose_api())
    assert workload.code == 1
    assert workload.err == "error: statefulset 'nope' not found in namespace user-a\n"
    pod = run(["why", "pod/nope"], loose_api())
    assert pod.err.startswith("error: job 'nope' not found in namespace user-a")


def test_a_statefulsets_reclaims_are_its_ordinal_pods_only() -> None:
    api = loose_api()
    db = api.add(apps("StatefulSet", "db", "user-a", "uid-db", replicas=2))
    api.add(cluster_pod("db-0", namespace="user-a", owner=db, created=stamp(T0 + 600), labels=LABELS))
    for pod, at in (("db-1", T0 + 950), ("db-cache-7bx2k", T0 + 940), ("db-x", T0 + 930)):
        api.add(event(gone(pod, "user-a"), REASON_EVICTED, RECLAIMED, at, kind="Warning"))
    body = json.loads(run(["why", "sts/db", "-o", "json"], api).out)
    assert (body["kind"], body["running"], body["expected"]) == ("StatefulSet", 1, 2)
    assert [entry["pod"] for entry in body["reclaimed"]] == ["db-1"]


def test_a_jobs_pod_is_answered_by_its_job() -> None:
    result = run(["why", "pod/pi1-0"], loose_api())
    assert result.code == 0, result.err
    assert result.out == run(["why", "pi1"], loose_api()).out
    assert result.err == "pod pi1-0 belongs to Job pi1; explaining that job\n"


def test_a_pending_jobs_pods_carry_the_refusal_of_their_preemption_too() -> None:
    api = loose_api()
    pend = api.objects[("", "pods", "user-c", "pend-1")]
    api.add(event(pend, REASON_PREEMPTION_REFUSED, PREEMPTION_REFUSED, T0 + 995, kind="Warning",
                  component=EXTENDER_COMPONENT))
    body = json.loads(run(["why", "pend", "-n", "user-c", "-o", "json"], api).out)
    (waiting,) = body["podsWaiting"]
    assert (waiting["reason"], waiting["pods"], waiting["preemptionRefused"]) == ("pod-quota", 1, PREEMPTION_REFUSED)
    text = " ".join(run(["why", "pend", "-n", "user-c"], api).out.split())
    assert "1 pod: 0/5 nodes are available" in text
    assert "Its preemption, 5s ago: kube-queue refused kube-scheduler's preemption" in text
    # Without the Event the answer is as it was.
    assert "preemption," not in " ".join(run(["why", "pend", "-n", "user-c"], loose_api()).out.split())


def test_a_deployment_scaled_to_zero_still_names_its_quota() -> None:
    api = loose_api()
    api.add(apps("Deployment", "idle", "user-a", "uid-idle", replicas=0))
    text = " ".join(run(["why", "deployment/idle"], api).out.split())
    assert text.startswith("Deployment user-a/idle: 0 of 0 pods run. Its pods are not queued (only jobs are)")
    assert "Quota root/Department-a: cpu used 60 of min 60, max 100" in text


def test_a_bare_name_the_user_may_not_look_up_as_a_workload_keeps_the_jobs_error() -> None:
    api = loose_api()
    api.forbidden.add(("replicasets", "user-a"))
    result = run(["why", "web"], api)
    assert result.code == 1 and result.err.startswith("error: job 'web' not found in namespace user-a"), result.err
    refused = run(["why", "deployment/web"], api)  # asked for by kind: the API's refusal, in one line
    assert refused.code == 1 and "forbidden" in refused.err and refused.err.count("\n") == 1, refused.err
