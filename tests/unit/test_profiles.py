"""The full-scan scheduler profile: which pods the webhook sends to it (docs/placement.md)."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.api.names import DEFAULT_SCHEDULER, FULL_SCAN_SCHEDULER
from webhook.controller.cache import _needs_placement_hook
from webhook.core.placement import ResourcePolicy, parse_policy
from webhook.core.profiles import asks_for_default, needs_full_scan, scheduler_name_for

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
    ("units", "routed"),
    [
        ((POOL, {"resource": "ecs", "nodeSelector": {"pool": "b"}}), True),  # no eci unit: routed for the profile
        ((POOL,), True),
        ((EVERY_NODE, VIRTUAL), True),
        ((EVERY_NODE,), False),  # nothing to add: no toleration, no profile
    ],
)
def test_namespaces_outside_the_tree_reach_the_placement_webhook_for_the_profile_too(
    units: tuple[dict[str, Any], ...], routed: bool
) -> None:
    assert _needs_placement_hook(_policy_object(*units)) is routed
    assert _needs_placement_hook({**_policy_object(POOL, VIRTUAL), "spec": {"units": "nonsense"}}) is False
