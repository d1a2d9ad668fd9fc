"""The webhook refuses what the quota cannot count (docs/pod-quota.md, "Devices"): a ResourceClaim or
ResourceClaimTemplate created in a namespace of the tree that asks ``allocationMode: All`` of a DeviceClass
counted as a quota resource is refused, naming the field and what to do; exact counts, classes that do not
count and namespaces outside the tree are allowed. The DeviceClass watch is optional: a cluster that does not
serve ``resource.k8s.io/v1`` has no class that counts."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from tests.builders import claim_template, device_class, device_request, resource_claim, seed_tree
from tests.service.helpers import message, response, review
from tests.service.kubeclient_fake import CORE, FakeApi, Kind
from webhook.admission.review import AdmissionReview
from webhook.admission.sources import build_caches
from webhook.admission.state import AdmissionState, Settings, StateStore
from webhook.admission.validate import validate
from webhook.api.names import MANAGED_NAMESPACE_LABEL
from webhook.kube.cache import wait_synced

NIC = "nic.example.com"
EVERY_GPU = device_request(None, mode="All")
HOW = ("spec.devices.requests[0].exactly: allocationMode All of DeviceClass gpu.example.com cannot be counted "
       "against quota resource nvidia.com/gpu before the scheduler allocates it; ask for an exact count")


@pytest.fixture
def counting() -> AdmissionState:
    """The seed's tree, DeviceClass gpu.example.com counted as nvidia.com/gpu, nic.example.com not counted."""
    store = StateStore(AdmissionState(tree=seed_tree()))
    store.set_device_classes([device_class(), device_class(NIC, None)])
    return store.current


def allowed(out: AdmissionReview) -> bool:
    return bool(response(out)["allowed"])


def test_a_claim_asking_for_every_device_of_a_counted_class_is_refused_naming_the_field(
    counting: AdmissionState, settings: Settings
) -> None:
    out = validate(review(resource_claim("all", "user-c", EVERY_GPU)), counting, settings)
    assert not allowed(out)
    assert response(out)["status"]["code"] == 422
    assert message(out) == ("kube-queue refuses ResourceClaim user-c/all: namespace user-c is under quota "
                            f"root/Department-b, which counts these devices: {HOW}")


def test_a_claim_template_asking_for_every_device_is_refused_naming_its_field(
    counting: AdmissionState, settings: Settings
) -> None:
    out = validate(review(claim_template("all", "user-a", device_request(1, name="one"), EVERY_GPU)), counting,
                   settings)
    assert not allowed(out)
    assert message(out).endswith(f"counts these devices: spec.{HOW.replace('[0]', '[1]')}")
    assert "quota root/Department-a" in message(out)


def test_a_first_available_alternative_asking_for_every_device_is_refused(
    counting: AdmissionState, settings: Settings
) -> None:
    claim = resource_claim("any", "user-c", {"name": "gpu", "firstAvailable": [
        {"name": "two", "deviceClassName": "gpu.example.com", "count": 2},
        {"name": "all", "deviceClassName": "gpu.example.com", "allocationMode": "All"}]})
    out = validate(review(claim), counting, settings)
    assert not allowed(out)
    assert "spec.devices.requests[0].firstAvailable[1]: allocationMode All" in message(out)


@pytest.mark.parametrize(
    "obj",
    [
        resource_claim("two", "user-c", device_request(2)),
        claim_template("one", "user-c"),
        resource_claim("nics", "user-c", device_request(None, device_class=NIC, mode="All")),
        resource_claim("outside", "elsewhere", EVERY_GPU),
        claim_template("outside", "elsewhere", EVERY_GPU),
    ],
    ids=["exact-count", "template-exact", "class-not-counted", "outside-the-tree", "template-outside-the-tree"],
)
def test_what_the_quota_can_count_and_namespaces_outside_the_tree_are_allowed(
    obj: dict[str, Any], counting: AdmissionState, settings: Settings
) -> None:
    assert allowed(validate(review(obj), counting, settings))


def test_without_a_class_that_counts_nothing_is_refused(state: AdmissionState, settings: Settings) -> None:
    assert allowed(validate(review(resource_claim("all", "user-c", EVERY_GPU)), state, settings))


def test_an_update_is_allowed_the_spec_cannot_change(counting: AdmissionState, settings: Settings) -> None:
    # A claim made before its class was marked: the control plane's updates of it (finalizers) go through.
    claim = resource_claim("all", "user-c", EVERY_GPU)
    assert allowed(validate(review(claim, operation="UPDATE", old=claim), counting, settings))


def test_a_managed_namespace_the_tree_does_not_list_yet_is_checked(counting: AdmissionState,
                                                                   settings: Settings) -> None:
    joining = dataclasses.replace(counting, namespace_labels={"new-team": {MANAGED_NAMESPACE_LABEL: "true"}})
    out = validate(review(resource_claim("all", "new-team", EVERY_GPU)), joining, settings)
    assert not allowed(out)
    assert "namespace new-team is under the quota tree" in message(out)


LIMIT_RANGES: Kind = ("", "v1", "limitranges")


@pytest.mark.parametrize("served", [True, False])
async def test_the_device_class_watch_is_optional(served: bool) -> None:
    kinds = set(CORE) if served else {kind for kind in CORE if kind[0] != "resource.k8s.io"}
    api = FakeApi(kinds | {LIMIT_RANGES})
    if served:
        api.put(("resource.k8s.io", "v1", "deviceclasses"), device_class())
    store = StateStore()
    caches = build_caches(api, store)
    tasks = [asyncio.create_task(cache.run()) for cache in caches]
    try:
        await asyncio.wait_for(wait_synced(caches), timeout=5)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert store.current.quota_classes == ({"gpu.example.com": "nvidia.com/gpu"} if served else {})
