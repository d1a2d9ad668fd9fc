"""The peer benchmark's Kueue side, without Kueue: its configuration, its webhooks pointed at loopback, our quota
tree mapped to ClusterQueues in a cohort, and the Jobs both systems get (bench/peer_kueue_objects.py)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench import peer_kueue_objects as objects
from bench.peer_kueue import HELD, HELD_CAP_PATH, OPEN, our_tree, seed_root
from bench.queue_scale_run import tree
from webhook.api.names import MAX_JOBS
from webhook.core.resources import Resources

PORTS = objects.ManagerPorts(webhook=27010, metrics=27011, health=27012)


@pytest.mark.parametrize("unlimited", [False, True])
def test_the_manager_runs_alone_on_loopback_with_only_the_job_integration(unlimited: bool) -> None:
    config = objects.manager_config(PORTS, "/state/kueue/certs", unlimited=unlimited)
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["kind"] == "Configuration"
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"] == {"port": 27010, "host": "127.0.0.1", "certDir": "/state/kueue/certs"}
    assert config["metrics"]["bindAddress"] == "127.0.0.1:27011"
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:27012"
    assert config["integrations"] == {"frameworks": ["batch/job"]}
    assert config["featureGates"] == {"VisibilityOnDemand": False}
    # the workers per kind Kueue ships: five for Jobs and Workloads (without them, one a kind)
    workers = config["controller"]["groupKindConcurrency"]
    assert workers["Job.batch"] == 5 and workers["Workload.kueue.x-k8s.io"] == 5
    assert workers["ClusterQueue.kueue.x-k8s.io"] == 1


def test_as_shipped_keeps_kueues_client_limits_and_unlimited_turns_the_limiter_off() -> None:
    shipped = objects.manager_config(PORTS, "/c", unlimited=False)["clientConnection"]
    unlimited = objects.manager_config(PORTS, "/c", unlimited=True)["clientConnection"]
    assert shipped == {"qps": 50.0, "burst": 100}
    assert unlimited["qps"] < 0  # Kueue's main installs no rate limiter for a negative qps
    rest = {key: value for key, value in objects.manager_config(PORTS, "/c", unlimited=True).items()
            if key != "clientConnection"}
    assert rest == {key: value for key, value in objects.manager_config(PORTS, "/c", unlimited=False).items()
                    if key != "clientConnection"}


def _hook(name: str, group: str, path: str) -> dict[str, Any]:
    return {"name": name, "admissionReviewVersions": ["v1"], "failurePolicy": "Fail", "sideEffects": "None",
            "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
            "rules": [{"apiGroups": [group], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["x"]}]}


MANIFESTS = [
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
     "metadata": {"name": "mutating-webhook-configuration"},
     "webhooks": [_hook("mjob.kb.io", "batch", "/mutate-batch-v1-job"),
                  _hook("mpod.kb.io", "", "/mutate--v1-pod"),
                  _hook("mworkload.kb.io", "kueue.x-k8s.io", "/mutate-kueue-x-k8s-io-v1beta2-workload")]},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
     "metadata": {"name": "validating-webhook-configuration"},
     "webhooks": [_hook("vdeployment.kb.io", "apps", "/validate-apps-v1-deployment")]},
    None,  # the empty document before the first "---"
]


def test_webhooks_point_at_loopback_with_the_ca_and_keep_only_what_the_job_integration_serves() -> None:
    configs = objects.webhook_configs(MANIFESTS, "https://127.0.0.1:27010/", b"CA PEM")
    assert [config["metadata"]["name"] for config in configs] == ["kueue-mutating-webhook-configuration"]
    hooks = configs[0]["webhooks"]
    assert [hook["name"] for hook in hooks] == ["mjob.kb.io", "mworkload.kb.io"]
    assert hooks[0]["clientConfig"] == {"url": "https://127.0.0.1:27010/mutate-batch-v1-job",
                                        "caBundle": base64.b64encode(b"CA PEM").decode()}
    assert hooks[1]["clientConfig"]["url"] == "https://127.0.0.1:27010/mutate-kueue-x-k8s-io-v1beta2-workload"
    assert hooks[0]["rules"] == MANIFESTS[0]["webhooks"][0]["rules"]  # type: ignore[index]
    assert hooks[0]["failurePolicy"] == "Fail"


def test_a_webhook_without_a_service_path_is_an_error_that_says_which() -> None:
    broken = [{"kind": "MutatingWebhookConfiguration", "metadata": {"name": "m"},
               "webhooks": [{**_hook("mjob.kb.io", "batch", "/x"), "clientConfig": {"url": "https://elsewhere"}}]}]
    with pytest.raises(ValueError, match=r"mjob\.kb\.io"):
        objects.webhook_configs(broken, "https://127.0.0.1:1", b"")


def _quota(queue: dict[str, Any]) -> dict[str, dict[str, str]]:
    flavors = queue["spec"]["resourceGroups"][0]["flavors"]
    assert [flavor["name"] for flavor in flavors] == [objects.FLAVOR]
    return {item["name"]: {key: value for key, value in item.items() if key != "name"}
            for item in flavors[0]["resources"]}


def test_the_seed_departments_become_cluster_queues_in_one_cohort_nominal_min_borrowing_max_minus_min() -> None:
    queues = objects.cluster_queues(seed_root())
    assert [queue["metadata"]["name"] for queue in queues] == ["department-a", "department-b"]
    assert {queue["spec"]["cohortName"] for queue in queues} == {"root"}
    a, b = (_quota(queue) for queue in queues)
    assert a == {"cpu": {"nominalQuota": "60", "borrowingLimit": "40"},
                 "memory": {"nominalQuota": "60Gi", "borrowingLimit": "40Gi"},
                 "nvidia.com/gpu": {"nominalQuota": "3", "borrowingLimit": "1"}}
    assert b == {"cpu": {"nominalQuota": "40", "borrowingLimit": "60"},
                 "memory": {"nominalQuota": "40Gi", "borrowingLimit": "60Gi"},
                 "nvidia.com/gpu": {"nominalQuota": "1", "borrowingLimit": "3"}}
    for queue in queues:
        group = queue["spec"]["resourceGroups"][0]
        assert group["coveredResources"] == [item["name"] for item in group["flavors"][0]["resources"]]
        assert queue["spec"]["preemption"] == {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"}
    selectors = [queue["spec"]["namespaceSelector"]["matchExpressions"] for queue in queues]
    assert selectors == [[{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["user-a", "user-b"]}],
                         [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["user-c"]}]]


def test_the_cohort_holds_exactly_what_the_parent_guarantees_and_each_queue_reaches_its_max() -> None:
    seed = seed_root()
    queues = objects.cluster_queues(seed)
    for resource in ("cpu", "memory", "nvidia.com/gpu"):
        nominal = sum(Resources.parse({resource: _quota(q)[resource]["nominalQuota"]}).get_or_zero(resource)
                      for q in queues)
        assert nominal == Resources.parse(seed["min"]).get_or_zero(resource)
        for queue, child in zip(queues, seed["children"], strict=True):
            quota = _quota(queue)[resource]
            reach = Resources.parse({resource: quota["nominalQuota"]}) + Resources.parse(
                {resource: quota["borrowingLimit"]})
            assert reach.get_or_zero(resource) == Resources.parse(child["max"]).get_or_zero(resource)


def test_a_job_cap_is_not_a_kueue_quota_and_a_missing_min_or_max_maps_to_zero_or_no_limit() -> None:
    parent = {"name": "Team Root", "children": [
        {"name": "Capped", "max": {"cpu": "8", MAX_JOBS: 3}, "namespaces": ["n1"]},
        {"name": "Free", "min": {"cpu": "2", "memory": "1Gi"}, "namespaces": ["n2"]},
    ]}
    capped, free = objects.cluster_queues(parent)
    assert capped["spec"]["cohortName"] == "team-root"
    assert capped["spec"]["resourceGroups"][0]["coveredResources"] == ["cpu", "memory"]
    assert _quota(capped) == {"cpu": {"nominalQuota": "0", "borrowingLimit": "8"}, "memory": {"nominalQuota": "0"}}
    assert _quota(free) == {"cpu": {"nominalQuota": "2"}, "memory": {"nominalQuota": "1Gi"}}


def test_only_one_level_of_leaves_is_mapped() -> None:
    with pytest.raises(ValueError, match="not a leaf"):
        objects.cluster_queues({"name": "r", "children": [{"name": "d", "children": [{"name": "t"}]}]})
    with pytest.raises(ValueError, match="no children"):
        objects.cluster_queues({"name": "r"})


def test_every_namespace_a_cluster_queue_selects_gets_a_local_queue_pointing_at_it() -> None:
    queues = [*objects.cluster_queues(seed_root()), objects.held_queue("held", ["h"], {"cpu": "1"}, hold=True)]
    assert [(q["metadata"]["namespace"], q["spec"]["clusterQueue"]) for q in objects.local_queues(queues)] == [
        ("user-a", "department-a"), ("user-b", "department-a"), ("user-c", "department-b"), ("h", "held")]


def test_the_held_queue_is_stopped_until_lifted() -> None:
    held = objects.held_queue("held", ["peer-held"], {"memory": "5Gi", "cpu": "5"}, hold=True)
    assert held["spec"]["stopPolicy"] == "Hold"
    assert "cohortName" not in held["spec"]
    assert held["spec"]["resourceGroups"][0]["coveredResources"] == ["cpu", "memory"]
    assert objects.held_queue("o", ["o"], {"cpu": "1"}, hold=False)["spec"]["stopPolicy"] == "None"


def test_kueues_jobs_are_labelled_and_suspended_ours_are_written_as_users_write_them() -> None:
    theirs = objects.job("j", "ns", "2", "2Gi", kueue=True)
    ours = objects.job("j", "ns", "2", "2Gi", kueue=False)
    assert theirs["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": objects.LOCAL_QUEUE}
    assert theirs["spec"]["suspend"] is True
    assert "labels" not in ours["metadata"]
    assert "suspend" not in ours["spec"]
    assert ours["spec"]["template"] == theirs["spec"]["template"]


def _pointer(document: Any, path: str) -> Any:
    for raw in path.strip("/").split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        document = document[int(part)] if isinstance(document, list) else document[part]
    return document


def test_our_tree_holds_the_held_leaf_at_zero_jobs_where_the_lift_patches_and_the_seed_as_a_subtree() -> None:
    seed = seed_root()
    tree = our_tree(seed)
    root = tree["spec"]["root"]
    held = root["children"][0]
    assert held["namespaces"] == [HELD]
    assert _pointer(tree["spec"], HELD_CAP_PATH.removeprefix("/spec")) == 0
    assert root["children"][1]["namespaces"] == [OPEN]
    enterprise = root["children"][2]
    assert enterprise["children"] == seed["children"]
    assert (enterprise["min"], enterprise["max"]) == (seed["min"], seed["max"])
    total = sum((Resources.parse(child["min"]) for child in root["children"]), Resources())
    assert total.fits_within(Resources.parse(root["min"]))


def test_the_seed_the_bench_maps_is_the_one_kq_dev_up_seed_installs() -> None:
    from webhook.cli import devsystem  # noqa: PLC0415

    seed = yaml.safe_load((Path(devsystem.SEED) / "01-elasticquotatree.yaml").read_text())["spec"]["root"]
    assert seed_root() == seed


def test_leader_election_shares_one_lease_in_kueues_namespace_when_asked() -> None:
    config = objects.manager_config(PORTS, "/certs", unlimited=True, leader_elect=True)
    assert config["leaderElection"] == {"leaderElect": True, "resourceNamespace": objects.NAMESPACE}


def test_a_two_level_tree_becomes_department_cohorts_under_a_root_with_a_queue_per_team() -> None:
    items = objects.cohort_tree(tree()["spec"]["root"])
    cohorts = {item["metadata"]["name"]: item["spec"] for item in items if item["kind"] == "Cohort"}
    queues = [item for item in items if item["kind"] == "ClusterQueue"]
    assert len(cohorts) == 11 and cohorts["root"] == {}
    department = cohorts["qs-d03"]
    assert department["parentName"] == "root"
    # no quota of its own; it may borrow its max (20 CPU) less its ten teams' min (10 x 1 CPU) from the root
    cpu = next(r for r in department["resourceGroups"][0]["flavors"][0]["resources"] if r["name"] == "cpu")
    assert cpu == {"name": "cpu", "nominalQuota": "0", "borrowingLimit": "10"}
    assert len(queues) == 100
    team = next(q for q in queues if q["metadata"]["name"] == "qs-d03-t07")
    assert team["spec"]["cohortName"] == "qs-d03"
    assert team["spec"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["qs-03-07"]
    cpu = next(r for r in team["spec"]["resourceGroups"][0]["flavors"][0]["resources"] if r["name"] == "cpu")
    assert cpu == {"name": "cpu", "nominalQuota": "1", "borrowingLimit": "1"}


def test_a_tree_without_leaves_under_its_departments_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'root' has no departments with leaves"):
        objects.cohort_tree({"name": "root", "children": [{"name": "d"}]})
