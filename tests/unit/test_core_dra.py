"""The rules for devices claimed through Dynamic Resource Allocation (docs/accounting.md, "Devices"): what a claim
asks of the quota, which claims cannot be counted, what a job's pods and a running pod's claims add, and a
claim shared by several pods counted once."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import claim_template, device_class, device_request, pod, resource_claim, with_claims
from webhook.api.names import QUOTA_RESOURCE_ANNOTATION
from webhook.core.dra import (
    ClaimAsk,
    ClaimHold,
    ClaimHolders,
    DeviceQuota,
    PodClaims,
    claim_ask,
    claim_problems,
    device_quota_of,
    devices_to_add,
    held_devices,
    pod_claim_keys,
    pod_claim_refs,
    pod_claims,
    pod_devices,
    quota_classes,
    unmade_claims,
)
from webhook.core.resources import EMPTY, Resources

GPU = "nvidia.com/gpu"
CLASSES = {"gpu.example.com": GPU, "mig.example.com": "nvidia.com/mig"}


def gpus(count: int) -> Resources:
    return Resources.of(**{GPU: count})


def spec(*requests: object) -> dict[str, Any]:
    return {"devices": {"requests": list(requests)}}


@pytest.mark.parametrize(
    ("request_", "asked"),
    [
        (device_request(2), gpus(2)),
        (device_request(None), gpus(1)),
        (device_request(0), EMPTY),
        ({"name": "old", "deviceClassName": "gpu.example.com", "count": 3}, gpus(3)),
        (device_request(4, device_class="nic.example.com"), EMPTY),
        ({"name": "mon", "exactly": {"deviceClassName": "gpu.example.com", "adminAccess": True, "count": 8}}, EMPTY),
        ({"name": "any", "firstAvailable": [{"name": "big", "deviceClassName": "gpu.example.com", "count": 2},
                                            {"name": "small", "deviceClassName": "gpu.example.com", "count": 1}]},
         gpus(2)),
        ({"name": "mix", "firstAvailable": [{"name": "gpu", "deviceClassName": "gpu.example.com", "count": 1},
                                            {"name": "mig", "deviceClassName": "mig.example.com", "count": 3},
                                            "not an object"]},
         gpus(1) + Resources.of(**{"nvidia.com/mig": 3})),
        ({"name": "gone"}, EMPTY),
    ],
    ids=["exactly", "count-default", "zero", "top-level", "other-class", "admin-access", "first-available-largest",
         "first-available-per-resource", "no-class"],
)
def test_what_a_device_request_asks(request_: dict[str, Any], asked: Resources) -> None:
    assert claim_ask(spec(request_), CLASSES) == ClaimAsk(asked)


def test_a_claims_requests_add_up() -> None:
    ask = claim_ask(spec(device_request(1, name="a"), "junk", device_request(2, name="b")), CLASSES)
    assert ask == ClaimAsk(gpus(3))


@pytest.mark.parametrize(
    ("request_", "where"),
    [
        (device_request(None, mode="All"), "spec.devices.requests[0].exactly: allocationMode All of DeviceClass "
                                           "gpu.example.com cannot be counted against quota resource nvidia.com/gpu"),
        ({"name": "any", "firstAvailable": [{"name": "x", "deviceClassName": "gpu.example.com",
                                             "allocationMode": "All"}]},
         "spec.devices.requests[0].firstAvailable[0]: allocationMode All"),
        (device_request(-1), "spec.devices.requests[0].exactly.count: expected a non-negative integer, got -1"),
        ({"name": "x", "deviceClassName": "gpu.example.com", "count": True}, "spec.devices.requests[0].count"),
        ({"name": "any", "firstAvailable": [{"name": "x", "deviceClassName": "gpu.example.com", "count": "2"}]},
         "spec.devices.requests[0].firstAvailable[0].count: expected a non-negative integer, got '2'"),
    ],
    ids=["all", "all-alternative", "negative", "bool", "string"],
)
def test_what_cannot_be_counted_names_the_field_and_what_to_do(request_: dict[str, Any], where: str) -> None:
    problems = claim_problems(spec(request_), CLASSES)
    assert len(problems) == 1
    assert problems[0].startswith(where)
    if "All" in where:
        assert problems[0].endswith("ask for an exact count")


def test_all_of_a_class_that_does_not_count_is_fine() -> None:
    assert claim_problems(spec(device_request(None, device_class="nic.example.com", mode="All")), CLASSES) == []
    assert claim_problems(spec(device_request(None, mode="All")), {}) == []


@pytest.mark.parametrize("bad", [None, "x", {"devices": "x"}, {"devices": {"requests": "x"}}])
def test_a_malformed_claim_asks_nothing(bad: object) -> None:
    assert claim_ask(bad, CLASSES) == ClaimAsk()


def test_quota_classes_are_the_annotated_ones() -> None:
    objs = [device_class(), device_class("nic.example.com", None), device_class("empty.example.com", "")]
    pairs = [(obj["metadata"]["name"], obj["metadata"].get("annotations", {})) for obj in objs]
    assert quota_classes(pairs, QUOTA_RESOURCE_ANNOTATION) == {"gpu.example.com": GPU}


def test_device_quota_of_reads_raw_objects() -> None:
    quota = device_quota_of([device_class()], [claim_template("one", "user-c", device_request(2))],
                            [resource_claim("pair", "user-c", device_request(2)), {"metadata": "junk", "spec": None}],
                            QUOTA_RESOURCE_ANNOTATION)
    assert quota.classes == {"gpu.example.com": GPU}
    assert quota.templates == {("user-c", "one"): ClaimAsk(gpus(2))}
    assert quota.claims[("user-c", "pair")] == ClaimAsk(gpus(2))
    assert quota.claims[("", "")] == ClaimAsk()


def _pod_spec(**claims: str) -> dict[str, Any]:
    """``template_x="t"`` names template ``t`` in entry ``x``; ``shared_x="c"`` claim ``c``."""
    entries: list[Any] = []
    for key, value in claims.items():
        kind, entry = key.split("_", 1)
        field = "resourceClaimTemplateName" if kind == "template" else "resourceClaimName"
        entries.append({"name": entry, field: value})
    return {"containers": [], "resourceClaims": [*entries, "junk", {"name": "empty"}]}


def test_pod_claims_are_read_from_the_spec() -> None:
    assert pod_claims(_pod_spec(template_a="t1", shared_b="c1", template_c="t2")) == PodClaims(("t1", "t2"), ("c1",))
    assert pod_claims({"resourceClaims": "junk"}) == PodClaims()
    assert pod_claims(None) == PodClaims()


def test_a_jobs_devices_per_pod_and_its_shared_claims_once() -> None:
    quota = DeviceQuota(CLASSES, {("user-c", "t1"): ClaimAsk(gpus(1)), ("user-c", "t2"): ClaimAsk(gpus(2))},
                        {("user-c", "pair"): ClaimAsk(gpus(2))})
    sets = [(3, _pod_spec(template_a="t1", template_b="t2", shared_c="pair")), (2, _pod_spec(shared_c="pair"))]
    assert pod_devices("user-c", sets, quota) == ([gpus(3), EMPTY], gpus(2), "")
    assert pod_devices("user-c", sets, DeviceQuota()) == ([EMPTY, EMPTY], EMPTY, "")


@pytest.mark.parametrize(
    ("pod_spec", "why"),
    [
        (_pod_spec(template_a="missing"), "ResourceClaimTemplate user-c/missing does not exist (yet)"),
        (_pod_spec(shared_a="missing"), "ResourceClaim user-c/missing does not exist (yet)"),
        (_pod_spec(template_a="all"), "ResourceClaimTemplate user-c/all: no"),
        (_pod_spec(shared_a="all"), "ResourceClaim user-c/all: no"),
    ],
)
def test_a_job_that_cannot_be_sized_says_why(pod_spec: dict[str, Any], why: str) -> None:
    cannot = {("user-c", "all"): ClaimAsk(problem="no")}
    quota = DeviceQuota(CLASSES, cannot, cannot)
    assert pod_devices("user-c", [(1, pod_spec)], quota) == ([], EMPTY, why)


def _claiming_pod(**kwargs: Any) -> dict[str, Any]:
    return with_claims(pod("p", "1", namespace="user-c"), **kwargs)


def test_a_pods_claims_are_its_own_made_from_templates_and_the_shared_ones() -> None:
    obj = _claiming_pod(made={"gpu": "p-gpu-x"}, templates={"late": "t"}, shared={"nic": "pair"})
    assert pod_claim_refs(obj) == (("p-gpu-x",), ("pair",))
    assert pod_claim_keys(obj) == (("user-c", "p-gpu-x"), ("user-c", "pair"))
    assert unmade_claims(obj) == ("late",)
    assert pod_claim_keys(pod("plain", "1", namespace="user-c")) == ()
    assert pod_claim_refs({"spec": "junk", "status": "junk"}) == ((), ())
    assert pod_claim_refs({"spec": {"resourceClaims": ["junk", {"name": 3, "resourceClaimName": "x"}]}}) == ((), ())


def test_a_template_entry_the_control_plane_said_needs_no_claim_is_made() -> None:
    obj = _claiming_pod(templates={"gpu": "t"})
    obj["status"] = {"resourceClaimStatuses": [{"name": "gpu"}]}
    assert unmade_claims(obj) == ()
    assert pod_claim_refs(obj) == ((), ())


def test_held_devices_count_a_shared_claim_once() -> None:
    quota = DeviceQuota(CLASSES, claims={("user-c", "own"): ClaimAsk(gpus(1)), ("user-c", "pair"): ClaimAsk(gpus(2))})
    counted: set[tuple[str, str]] = set()
    assert held_devices("user-c", ["own"], ["pair"], quota, counted) == gpus(3)
    assert held_devices("user-c", [], ["pair", "unknown"], quota, counted) == EMPTY
    assert held_devices("user-c", ["own"], ["pair"], quota) == gpus(3)


def test_devices_to_add_skips_claims_held_and_stops_at_what_is_not_known() -> None:
    quota = DeviceQuota(CLASSES, claims={("user-c", "own"): ClaimAsk(gpus(1)), ("user-c", "pair"): ClaimAsk(gpus(2)),
                                         ("user-c", "all"): ClaimAsk(problem="cannot")})
    obj = _claiming_pod(made={"gpu": "own"}, shared={"x": "pair"})
    claims = (("user-c", "own"), ("user-c", "pair"))
    assert devices_to_add(obj, quota).resources == gpus(3)
    assert devices_to_add(obj, quota, {("user-c", "pair")}).resources == gpus(1)
    assert devices_to_add(obj, quota, {("user-c", "pair")}).claims == claims
    unknown = devices_to_add(_claiming_pod(made={"gpu": "who"}), quota)
    assert unknown.unknown == "ResourceClaim user-c/who is not known yet"
    assert devices_to_add(_claiming_pod(made={"gpu": "who"}), quota, {("user-c", "who")}).unknown == ""
    assert devices_to_add(_claiming_pod(made={"gpu": "all"}), quota).problem == "ResourceClaim user-c/all: cannot"
    assert devices_to_add(_claiming_pod(templates={"gpu": "t"}), quota).unknown == (
        "the claim for spec.resourceClaims 'gpu' is not made yet")
    # Without a class that counts, nothing is counted and nothing waits.
    assert devices_to_add(_claiming_pod(made={"gpu": "who"}), DeviceQuota()).unknown == ""


def test_a_claim_counts_once_from_its_first_holder_to_its_last() -> None:
    holders = ClaimHolders()
    pair, own = ("user-c", "pair"), ("user-c", "own")
    assert holders.put("a", [pair, own, pair], bound=True, loose=True) == {pair, own}
    assert holders.put("a", [pair, own], bound=True, loose=True) == set()
    assert holders.put("b", [pair], bound=True, loose=False) == {pair}
    assert holders.hold(pair) == ClaimHold(bound=True, loose=False)  # a job's pod holds it too
    assert holders.hold(own) == ClaimHold(bound=True, loose=True)
    assert pair in holders and set(holders.claims()) == {pair, own}
    assert holders.release("a") == {pair, own}
    assert holders.hold(own) is None
    assert holders.release("a") == set()
    assert holders.put("c", [pair], bound=False, loose=True) == {pair}
    assert holders.hold(pair) == ClaimHold(bound=True, loose=False)  # a bound holder decides
    assert holders.release("b") == {pair}
    assert holders.hold(pair) == ClaimHold(bound=False, loose=True)
    assert holders.put("c", [], bound=False, loose=True) == {pair}
    assert holders.hold(pair) is None and pair not in holders
