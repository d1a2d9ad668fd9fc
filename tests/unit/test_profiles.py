"""The full-scan scheduler profile: which pods the webhook sends to it (docs/placement.md)."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.api.names import DEFAULT_SCHEDULER, FULL_SCAN_SCHEDULER
from webhook.core.placement import ResourcePolicy, parse_policy, policy_set
from webhook.core.profiles import asks_for_default, calls_extender, needs_full_scan, scheduler_name_for

POOL = {"resource": "ecs", "nodeSelector": {"pool": "a"}}
EVERY_NODE = {"resource": "ecs"}
VIRTUAL = {"resource": "eci", "max": 4}


def policy(*units: dict[str, Any]) -> ResourcePolicy:
    return parse_policy(
        {
            "apiVersion": "scheduling.alibabacloud.com/v1alpha1",
            "kind": "ResourcePolicy",
            "metadata": {"name": "rp", "namespace": "user-a"},
            "spec": {"selector": {}, "strategy": "prefer", "units": list(units)},
        }
    )


@pytest.mark.parametrize(
    ("units", "needed"),
    [
        ((POOL, VIRTUAL), True),  # a sample may miss the pool: the pod would go to the virtual node
        ((EVERY_NODE, VIRTUAL), True),  # a sample may miss the virtual node once the regular nodes are full
        ((POOL, {"resource": "ecs", "nodeSelector": {"pool": "b"}}), True),
        ((POOL,), True),  # one pool: a sample without it would refuse the pod everywhere
        ((VIRTUAL,), True),  # the virtual node alone: the same
        ((EVERY_NODE,), False),  # every regular node is in the unit: any sample shows it
        (({"resource": "ecs", "max": 3},), False),  # a cap is counted, not seen in the sample
    ],
)
def test_a_policy_needs_the_full_scan_when_a_sample_could_mislead_it(
    units: tuple[dict[str, Any], ...], needed: bool
) -> None:
    assert needs_full_scan(policy(*units)) is needed


def test_a_pod_no_policy_selects_keeps_sampling() -> None:
    assert needs_full_scan(None) is False
    assert scheduler_name_for(None, None) is None
    assert scheduler_name_for(DEFAULT_SCHEDULER, None) is None


@pytest.mark.parametrize("asked", [None, "", DEFAULT_SCHEDULER])
def test_a_pod_that_asked_for_the_default_scheduler_gets_the_full_scan(asked: str | None) -> None:
    assert asks_for_default(asked)
    assert scheduler_name_for(asked, policy(POOL, VIRTUAL)) == FULL_SCAN_SCHEDULER
    assert scheduler_name_for(asked, policy(EVERY_NODE)) is None


@pytest.mark.parametrize("asked", ["my-scheduler", FULL_SCAN_SCHEDULER, "volcano"])
def test_a_pod_naming_another_scheduler_keeps_it(asked: str) -> None:
    assert not asks_for_default(asked)
    assert scheduler_name_for(asked, policy(POOL, VIRTUAL)) is None
    assert scheduler_name_for(asked, policy(EVERY_NODE)) is None
    assert scheduler_name_for(asked, None) is None


def _policy_object(*units: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.alibabacloud.com/v1alpha1",
        "kind": "ResourcePolicy",
        "metadata": {"name": "rp", "namespace": "outside"},
        "spec": {"selector": {}, "units": list(units)},
    }


@pytest.mark.parametrize(
    "units",
    [
        (POOL, {"resource": "ecs", "nodeSelector": {"pool": "b"}}),  # no eci unit: the profile, the marker
        (POOL,),
        (EVERY_NODE, VIRTUAL),
        (EVERY_NODE,),  # no toleration, no profile, but the marker: only the extender orders and caps units
        ({"resource": "ecs", "max": 3},),  # a cap the extender counts
    ],
)
def test_namespaces_outside_the_tree_with_a_valid_policy_reach_the_placement_webhook(
    units: tuple[dict[str, Any], ...],
) -> None:
    valid = _policy_object(*units)
    broken = {**_policy_object(POOL, VIRTUAL), "metadata": {"name": "broken", "namespace": "elsewhere"},
              "spec": {"units": "nonsense"}}
    found = policy_set([valid, broken])
    assert [policy.namespace for policies in found.by_namespace.values() for policy in policies] == [
        valid["metadata"]["namespace"]]
    assert [(namespace, name) for namespace, name, _ in found.refused] == [("elsewhere", "broken")]


@pytest.mark.parametrize(
    ("in_tree", "units", "called"),
    [
        (True, None, True),  # the pod-level quota checks every pod of the tree's namespaces
        (True, (EVERY_NODE,), True),
        (False, (EVERY_NODE,), True),  # a policy's units, their order and caps live in the extender
        (False, ({"resource": "ecs", "max": 3},), True),
        (False, (POOL, VIRTUAL), True),
        (False, None, False),  # nothing for the extender to check: kube-scheduler alone places it
    ],
)
def test_the_extender_sees_the_pods_of_the_tree_and_of_policies_only(
    in_tree: bool, units: tuple[dict[str, Any], ...] | None, called: bool
) -> None:
    assert calls_extender(in_tree, policy(*units) if units is not None else None) is called


@pytest.mark.parametrize("asked", [None, "", DEFAULT_SCHEDULER])
def test_a_pod_opted_into_eci_without_a_policy_gets_the_profile_that_may_use_the_virtual_node(
    asked: str | None,
) -> None:
    # The default profile never uses the virtual node (its addedAffinity).
    assert scheduler_name_for(asked, None, opted_in=True) == FULL_SCAN_SCHEDULER
    assert scheduler_name_for(asked, None, opted_in=False) is None
    assert scheduler_name_for(asked, policy(EVERY_NODE), opted_in=True) is None  # its policy decides
    assert scheduler_name_for("my-scheduler", None, opted_in=True) is None
