"""One state per ``kq serve`` process (docs/architecture.md): the webhook's snapshot and the controller's pass
read the same honoured tree, made once per change of the one trees cache they share, the same PriorityClass values
and the same parsed ResourcePolicies. A write of the tree's status, the controller's own every pass, leaves both
with the tree they had."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import pytest

from tests.builders import SEED_TREE_SPEC
from tests.service.controller_support import PRIORITY_CLASSES, TREES, catch_up, seed_api, settings
from tests.service.kubeclient_fake import CORE, FakeApi
from webhook.admission.sources import build_caches
from webhook.admission.state import StateStore
from webhook.api.objects import meta
from webhook.controller.controller import Controller
from webhook.core import placement_policy
from webhook.core.placement import ResourcePolicy, parse_policy
from webhook.kube.cache import wait_synced
from webhook.kube.shared import SharedWatches

LIMIT_RANGES = ("", "v1", "limitranges")
POLICIES = ("scheduling.alibabacloud.com", "v1alpha1", "resourcepolicies")


@asynccontextmanager
async def serving(api: FakeApi) -> AsyncIterator[tuple[StateStore, Controller]]:
    """The webhook's caches and a controller wired as ``kq serve`` wires them: the controller borrows."""
    store, watches = StateStore(), SharedWatches()
    caches = build_caches(api, store, watches=watches)
    controller = Controller(api, settings(), watches=watches)
    tasks = [asyncio.ensure_future(cache.run()) for cache in caches]
    try:
        await asyncio.wait_for(wait_synced(caches), timeout=5)
        yield store, controller
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def settled(api: FakeApi, controller: Controller) -> None:
    await asyncio.sleep(0)
    await catch_up(api, controller)


async def test_the_webhook_and_the_controller_read_one_honoured_tree_and_one_set_of_priorities() -> None:
    api = seed_api()
    api.kinds |= {LIMIT_RANGES} - set(CORE)
    async with serving(api) as (store, controller):
        assert controller.cache.trees in controller.cache._borrowed, "the controller watches the trees again"
        _, tree, problem = controller.cache.tree()
        assert tree is not None and problem is None
        assert store.current.tree is tree
        assert dict(controller.cache.priorities()) == dict(store.current.priority_classes) == {
            "priority-2": 2, "priority-3": 3}

        stored = api.obj(TREES, "elasticquotatree", "kube-system")
        api.put(TREES, {**stored, "status": {"root": {"name": "root"}}})  # as the controller's pass writes it
        await settled(api, controller)
        obj, again, _ = controller.cache.tree()
        assert obj is not None and "status" in obj
        assert again is tree and store.current.tree is tree, "a status write made a second tree"

        spec = json.loads(json.dumps(SEED_TREE_SPEC))
        spec["root"]["children"][0]["max"]["cpu"] = 90
        api.put(TREES, {**stored, "spec": spec})
        await settled(api, controller)
        _, resized, _ = controller.cache.tree()
        assert resized is not None and resized is not tree and resized != tree
        assert store.current.tree is resized

        api.put(PRIORITY_CLASSES, {"metadata": {"name": "priority-5"}, "value": 5})
        await settled(api, controller)
        assert controller.cache.priorities()["priority-5"] == store.current.priority_classes["priority-5"] == 5


async def test_the_resource_policies_are_parsed_once_for_the_webhook_and_the_controller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    parsed: list[str] = []

    def counting(obj: object) -> ResourcePolicy:
        parsed.append(str(meta(obj).get("name")) if isinstance(obj, Mapping) else "?")
        return parse_policy(obj)

    monkeypatch.setattr(placement_policy, "parse_policy", counting)
    api = seed_api()
    api.kinds |= {LIMIT_RANGES} - set(CORE)
    async with serving(api) as (store, controller):
        api.put(POLICIES, {"apiVersion": "scheduling.alibabacloud.com/v1alpha1", "kind": "ResourcePolicy",
                           "metadata": {"name": "rp", "namespace": "outside"},
                           "spec": {"selector": {}, "units": [{"resource": "ecs", "max": 3}]}})
        await settled(api, controller)
        parsed.clear()
        api.put(POLICIES, {"apiVersion": "scheduling.alibabacloud.com/v1alpha1", "kind": "ResourcePolicy",
                           "metadata": {"name": "broken", "namespace": "elsewhere"}, "spec": {"units": "x"}})
        await settled(api, controller)
        assert controller.cache.placement_namespaces() == frozenset({"outside"})
        assert set(store.current.policies) == {"outside"}
        assert sorted(parsed) == ["broken", "rp"], "each policy is parsed once per change, for both parts"
