"""A namespace joins the tree labelled managed before any of its jobs can run unheld
(webhook/admission/joining.py, docs/security.md): a tree that lists an existing namespace is allowed only once
the namespace is labelled, a namespace created while the tree lists it is labelled at creation, and a job of a
labelled namespace the webhook's tree does not list yet is held all the same."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import REGISTRY

from tests.builders import SEED_TREE_SPEC, seed_tree, tree_object
from tests.service.extender_support import policy
from tests.service.helpers import batch_job, message, patched, response, review
from webhook.admission.app import Joining, make_app, respond, respond_with_effects
from webhook.admission.app import join_namespaces as join
from webhook.admission.joining import JoinError, Labelling, labeller_on, namespaces_joining
from webhook.admission.joining import joining as joining_at
from webhook.admission.mutate import mutate
from webhook.admission.review import parse_request
from webhook.admission.state import AdmissionState, Settings, StateStore
from webhook.admission.validate import validate
from webhook.api.names import (
    MANAGED_NAMESPACE_LABEL,
    MANAGED_SINCE_ANNOTATION,
    NAMESPACE_QUOTA_LABEL,
    PLACEMENT_NAMESPACE_LABEL,
    PLACEMENT_SINCE_ANNOTATION,
    QUOTA_LABEL,
)
from webhook.core.quota import QuotaTree, parse_tree
from webhook.workloads.base import mapping_at, value_at

MANAGED = {MANAGED_NAMESPACE_LABEL: "true"}


def _with_user_d() -> dict[str, Any]:
    spec = copy.deepcopy(SEED_TREE_SPEC)
    spec["root"]["children"][1]["namespaces"].append("user-d")
    return tree_object(spec)


def _state(**labels: dict[str, str]) -> AdmissionState:
    known = {"user-a": MANAGED, "user-b": MANAGED, "user-c": MANAGED, **labels}
    return AdmissionState(tree=seed_tree(), namespace_labels=known)


def test_a_tree_that_lists_an_unlabelled_namespace_makes_it_join() -> None:
    state, settings = _state(**{"user-d": {}}), Settings()
    update = review(_with_user_d(), operation="UPDATE", old=tree_object(), user="admin")
    assert namespaces_joining(parse_request(update), state, settings) == ("user-d",)
    # A namespace this replica's watch has not delivered yet may exist (created a moment ago): it is labelled
    # too (issue 40's CI run: a job in such a namespace ran unheld); the labeller skips one that does not exist.
    assert namespaces_joining(parse_request(update), _state(), settings) == ("user-d",)
    # Already labelled, a dry run, another namespace than the tree's: nothing to label.
    assert namespaces_joining(parse_request(update), _state(**{"user-d": MANAGED}), settings) == ()
    dry = copy.deepcopy(update)
    dry["request"]["dryRun"] = True
    assert namespaces_joining(parse_request(dry), state, settings) == ()
    elsewhere = review(_with_user_d() | {"metadata": {"name": "t", "namespace": "default"}}, user="admin")
    assert namespaces_joining(parse_request(elsewhere), state, settings) == ()


def test_the_tree_is_answered_only_once_its_namespaces_are_labelled() -> None:
    state, settings = _state(**{"user-d": {}}), Settings()
    body = orjson.dumps(review(_with_user_d(), operation="UPDATE", old=tree_object(), user="admin"))
    status, payload, joining = respond_with_effects("validate", body, state, settings)
    assert status == 200 and isinstance(joining, Joining) and joining.namespaces == ("user-d",)
    assert respond("validate", body, state, settings) == (status, payload)
    assert value_at(joining.labelling.patch, "metadata", "labels") == {MANAGED_NAMESPACE_LABEL: "true"}
    labelled: list[Sequence[str]] = []

    async def labeller(namespaces: Sequence[str], labelling: Labelling) -> None:
        labelled.append(namespaces)

    allowed = orjson.loads(asyncio.run(join(labeller, joining)))
    assert allowed["response"]["allowed"] is True and labelled == [("user-d",)]

    async def failing(namespaces: Sequence[str], labelling: Labelling) -> None:
        raise JoinError("namespace user-d could not be labelled kube-queue.x-k8s.io/managed=true (forbidden); retry")

    refused = orjson.loads(asyncio.run(join(failing, joining)))
    assert refused["response"]["allowed"] is False
    assert "could not be labelled" in refused["response"]["status"]["message"]
    assert "retry" in refused["response"]["status"]["message"]


def test_a_namespace_created_while_the_tree_lists_it_is_labelled_at_creation() -> None:
    state, settings = AdmissionState(tree=seed_tree()), Settings()
    created = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "user-c"}}
    out = mutate(review(created, user="admin"), state, settings)
    namespace = patched(created, out)
    assert namespace["metadata"]["labels"] == {**MANAGED, NAMESPACE_QUOTA_LABEL: "Department-b"}
    assert namespace["metadata"]["annotations"][MANAGED_SINCE_ANNOTATION].endswith("Z")
    other = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other", "labels": {"team": "x"}}}
    assert "patch" not in response(mutate(review(other, user="admin"), state, settings))
    with_labels = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "user-a", "labels": {"team": "x"}}}
    assert patched(with_labels, mutate(review(with_labels, user="admin"), state, settings))["metadata"]["labels"] == {
        "team": "x", **MANAGED, NAMESPACE_QUOTA_LABEL: "Department-a"}


def test_a_job_of_a_namespace_that_joined_a_tree_this_replica_has_not_seen_yet_is_held() -> None:
    # user-d is labelled (the tree that lists it was allowed), but this replica's watch still has the old tree.
    state, settings = _state(**{"user-d": MANAGED}), Settings()
    job = batch_job(namespace="user-d", suspend=False)
    out = mutate(review(job), state, settings)
    held = patched(job, out)
    assert held["spec"]["suspend"] is True
    assert QUOTA_LABEL not in (held["metadata"].get("labels") or {})
    released = copy.deepcopy(held)
    released["spec"]["suspend"] = False
    refused = validate(review(released, operation="UPDATE", old=held), state, settings)
    assert response(refused)["allowed"] is False and "only kube-queue may un-suspend it" in message(refused)


def test_a_job_the_api_server_routes_as_labelled_is_held_before_this_replicas_watch_shows_the_label() -> None:
    # The CI run of issue 40's stop: a job created right after the tree gained its namespace ran unheld, because
    # this replica's namespace watch had delivered neither the label nor the tree. The API server only sends a
    # namespace to a /managed path when it carries the label, so that path is proof enough.
    state, settings = _state(), Settings()
    job = batch_job(namespace="user-d", suspend=False)
    body = orjson.dumps(review(job))
    _, unrouted = respond("mutate", body, state, settings)
    assert "patch" not in orjson.loads(unrouted)["response"], "a namespace no hook selects stays untouched"
    _, routed = respond("mutate", body, state, settings, labelled=True)
    held = patched(job, orjson.loads(routed))
    assert held["spec"]["suspend"] is True
    assert QUOTA_LABEL not in (held["metadata"].get("labels") or {})
    released = copy.deepcopy(held)
    released["spec"]["suspend"] = False
    update = orjson.dumps(review(released, operation="UPDATE", old=held, user="dave"))
    _, refused = respond("validate", update, state, settings, labelled=True)
    assert orjson.loads(refused)["response"]["allowed"] is False
    # A namespace the tree lists keeps its leaf: the route adds the label, never removes the quota.
    _, listed = respond("mutate", orjson.dumps(review(batch_job(namespace="user-a", suspend=False))), state,
                        settings, labelled=True)
    assert patched(batch_job(namespace="user-a"), orjson.loads(listed))["metadata"]["labels"][QUOTA_LABEL]


def test_the_labelled_view_adds_only_the_managed_label() -> None:
    state = _state(**{"user-d": {"team": "x"}})
    assert state.labelled("user-a") is state
    assert state.labelled("") is state
    view = state.labelled("user-d")
    assert view.namespace_labels["user-d"] == {"team": "x", **MANAGED}
    assert state.namespace_labels["user-d"] == {"team": "x"}, "the shared state is not changed"
    assert view.held_untagged("user-d") and not state.held_untagged("user-d")


def test_a_policy_is_stored_only_once_its_namespace_sends_its_pods_to_the_webhook() -> None:
    # Inside the tree a workload controller's pods reach the webhook that applies a ResourcePolicy only in a
    # namespace labelled for it: a Deployment created right after its policy must find the label there.
    settings = Settings()
    burst = policy("burst", namespace="user-a", selector={"app": "burst"}, units=[{"resource": "ecs"}])
    body = orjson.dumps(review(burst, user="alice"))
    _, _, routed = respond_with_effects("validate", body, _state(), settings)
    assert isinstance(routed, Joining) and routed.namespaces == ("user-a",)
    assert value_at(routed.labelling.patch, "metadata", "labels") == {PLACEMENT_NAMESPACE_LABEL: "true"}
    assert PLACEMENT_SINCE_ANNOTATION in (mapping_at(routed.labelling.patch, "metadata", "annotations") or {})
    # Already labelled, a dry run, a refused policy: nothing to label.
    there = _state(**{"user-a": {**MANAGED, PLACEMENT_NAMESPACE_LABEL: "true"}})
    assert respond_with_effects("validate", body, there, settings)[2] is None
    dry = review(burst, user="alice")
    dry["request"]["dryRun"] = True
    assert respond_with_effects("validate", orjson.dumps(dry), _state(), settings)[2] is None
    broken = copy.deepcopy(burst)
    broken["spec"]["units"] = "none"
    assert respond_with_effects("validate", orjson.dumps(review(broken, user="alice")), _state(), settings)[2] is None
    patched_with: list[tuple[str, Any]] = []

    async def patch(namespace: str, body: Any) -> bool:
        if namespace == "user-b":
            raise RuntimeError("namespaces user-b is forbidden")
        patched_with.append((namespace, body))
        return True

    async def answer(joining: Any) -> dict[str, Any]:
        labeller = labeller_on(asyncio.get_running_loop(), patch)
        return dict(orjson.loads(await join(labeller, joining)))

    assert asyncio.run(answer(routed))["response"]["allowed"] is True
    assert patched_with == [("user-a", routed.labelling.patch)]
    other = policy("burst", namespace="user-b", selector={"app": "burst"}, units=[{"resource": "ecs"}])
    _, _, refused_effect = respond_with_effects("validate", orjson.dumps(review(other, user="bob")), _state(), settings)
    refused = asyncio.run(answer(refused_effect))["response"]
    assert refused["allowed"] is False
    assert f"could not be labelled {PLACEMENT_NAMESPACE_LABEL}=true" in refused["status"]["message"]
    assert "retry" in refused["status"]["message"]


async def test_the_tree_is_answered_once_the_label_shows_in_the_namespace_watch() -> None:
    # The API server picks a job's hooks by its own namespace watch: an answer given before the label reached
    # the watches lets a job created right after the tree skip the hooks. The answer waits for this replica's
    # watch, fed from the same cache. A namespace that does not exist is skipped, never waited for.
    events: list[str] = []
    shown: dict[str, bool] = {}

    async def patch(namespace: str, body: Any) -> bool:
        events.append(f"patched {namespace}")
        if namespace == "gone":
            return False

        async def delivered() -> None:
            await asyncio.sleep(0.05)
            events.append(f"seen {namespace}")
            shown[namespace] = True

        asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(delivered()))
        return True

    def seen(namespace: str, label: str) -> bool:
        assert label == MANAGED_NAMESPACE_LABEL
        return shown.get(namespace, False)

    labeller = labeller_on(asyncio.get_running_loop(), patch, seen)
    await labeller(("gone", "user-d"), joining_at(0.0))
    events.append("answered")
    assert events == ["patched gone", "patched user-d", "seen user-d", "answered"]


async def test_a_label_the_watch_never_shows_delays_the_answer_a_bounded_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def patch(namespace: str, body: Any) -> bool:
        return True

    labeller = labeller_on(asyncio.get_running_loop(), patch, lambda namespace, label: False, wait_seconds=0.05)
    await asyncio.wait_for(labeller(("user-d",), joining_at(0.0)), 5)
    assert "event=label_not_seen namespaces=user-d" in caplog.text


def _created(name: str, *, dry_run: bool = False) -> bytes:
    body = review({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, user="admin")
    body["request"]["dryRun"] = dry_run
    return orjson.dumps(body)


async def _namespace_created(body: bytes, reader: Any) -> dict[str, Any]:
    store = StateStore(AdmissionState(tree=seed_tree()), ready=True)
    async with TestClient(TestServer(make_app(store, Settings(), tree_reader=reader))) as client:
        answer = await client.post("/mutate", data=body)
        assert answer.status == 200
        return dict((await answer.json())["response"])


def _namespaces_counted() -> float:
    """Namespace requests the webhook's metrics counted, whatever their decision."""
    return sum(REGISTRY.get_sample_value("kube_queue_webhook_requests_total",
                                         {"endpoint": "mutate", "kind": "Namespace", "decision": decision}) or 0.0
               for decision in ("allowed", "patched", "denied"))


async def test_a_namespace_created_right_after_the_tree_listed_it_is_labelled_from_the_stored_tree() -> None:
    # This replica's tree watch has not delivered the tree that lists user-d: the namespace is created from the
    # tree as stored, so its first job is held (tests/e2e/test_quota_holds.py tries it on a cluster).
    stored = parse_tree(copy.deepcopy(_with_user_d()["spec"]))
    reads: list[str] = []

    async def reader() -> QuotaTree | None:
        reads.append("read")
        return stored

    counted = _namespaces_counted()
    labelled = await _namespace_created(_created("user-d"), reader)
    assert _namespaces_counted() == counted + 1  # answered twice, counted once
    namespace = patched({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "user-d"}}, {
        "response": labelled})
    assert namespace["metadata"]["labels"] == {**MANAGED, NAMESPACE_QUOTA_LABEL: "Department-b"}
    assert reads == ["read"]
    # Without the stored tree the answer is this replica's: the hole the read closes.
    assert "patch" not in await _namespace_created(_created("user-d"), None)
    # A namespace the stored tree does not list either, and a dry run: allowed as they are; the dry run reads
    # nothing. A listed namespace is answered from this replica's tree, without a read.
    assert "patch" not in await _namespace_created(_created("other"), reader)
    assert "patch" not in await _namespace_created(_created("user-d", dry_run=True), reader)
    assert "patch" in await _namespace_created(_created("user-a"), reader)
    assert reads == ["read", "read"]


async def test_a_stored_tree_that_cannot_be_read_leaves_the_namespace_to_the_controller(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def failing() -> QuotaTree | None:
        raise RuntimeError("HTTP 503 ServiceUnavailable")

    answer = await _namespace_created(_created("user-d"), failing)
    assert answer["allowed"] is True and "patch" not in answer
    assert "event=tree_read_failed namespace=user-d" in caplog.text


def test_a_namespace_is_under_quota_when_a_leaf_lists_it_or_it_is_labelled_managed() -> None:
    state = _state(**{"user-d": {"team": "x"}})
    assert state.under_quota("user-a")  # a leaf of the seed's tree lists it
    assert not state.under_quota("user-d") and not state.under_quota("elsewhere")
    assert state.labelled("user-d").under_quota("user-d")  # labelled managed, no leaf yet: held untagged
