"""The extender's watches: events reach the state one by one, a missing CRD reads as empty and is retried,
and the state is ready once every cache has listed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from tests.service.extender_support import eci, ecs, node, pod, policy, virtual_node
from webhook.api.objects import meta, name_of, pod_spec, resource_version_of, spec_of
from webhook.core.placement import pod_view
from webhook.core.workload import pod_request
from webhook.extender.pods import pod_essentials
from webhook.extender.sources import OptionalListWatch, _incremental, _whole, running
from webhook.extender.state import ExtenderState
from webhook.kube.cache import WatchCache
from webhook.kube.client import JSON, KubeApiError
from webhook.kube.slim import SlimListWatch


class Source:
    """A ListWatch: each list answers ``pages.pop(0)`` (an exception is raised); each watch plays
    ``watches.pop(0)`` and then blocks."""

    def __init__(self, pages: list[list[JSON] | Exception], watches: list[list[JSON]] | None = None) -> None:
        self.pages = pages
        self.watches = watches or []
        self.lists = 0

    async def list_page(self, limit: int, continue_token: str | None) -> JSON:
        self.lists += 1
        if not self.pages:
            await asyncio.Event().wait()
        page = self.pages.pop(0)
        if isinstance(page, Exception):
            raise page
        return {"items": page, "metadata": {"resourceVersion": "5"}}

    @contextlib.asynccontextmanager
    async def watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[AsyncIterator[JSON]]:
        events = self.watches.pop(0) if self.watches else []

        async def play() -> AsyncIterator[JSON]:
            for event in events:
                yield event
            await asyncio.Event().wait()

        yield play()


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def run_until_synced(cache: WatchCache) -> None:
    """Run the cache until it has listed and applied what its source gives, then stop it."""
    task = asyncio.create_task(cache.run())
    try:
        await asyncio.wait_for(cache.synced.wait(), timeout=5)
        await settle()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_node_and_pod_events_are_applied_one_by_one() -> None:
    state = ExtenderState()
    state.set_policies([policy(units=[ecs(), eci(max=1)])])
    nodes = WatchCache("nodes", Source([[node("ecs-0")]], [[{"type": "ADDED", "object": virtual_node()}]]))
    nodes.add_listener(_incremental(state.upsert_node, state.delete_node, state.replace_nodes))
    running_pod = pod("p", node_name="virtual-kubelet")
    pods = WatchCache("pods", Source([[]], [[{"type": "ADDED", "object": running_pod}]]))
    pods.add_listener(_incremental(state.upsert_pod, state.delete_pod, state.replace_pods))
    tasks = [asyncio.create_task(cache.run()) for cache in (nodes, pods)]
    try:
        await settle()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert set(state.nodes) == {"ecs-0", "virtual-kubelet"}
    assert state.filter(pod("q"), ["ecs-0", "virtual-kubelet"], 0.0).passing == ("ecs-0",)
    assert state.filter(pod("r"), ["virtual-kubelet"], 0.0).passing == ()


async def test_a_missing_crd_reads_as_empty_and_is_listed_again() -> None:
    naps: list[float] = []

    async def nap(seconds: float) -> None:
        naps.append(seconds)
        await asyncio.sleep(0)

    missing = KubeApiError(404, "NotFound", "the server could not find the requested resource")
    inner = Source([missing, [policy(units=[eci()])]])
    source = OptionalListWatch(inner, retry_seconds=7.0, sleep=nap)
    state = ExtenderState()
    cache = WatchCache("resourcepolicies", source)
    cache.add_listener(_whole(state.set_policies))
    await run_until_synced(cache)
    assert inner.lists == 2
    assert naps == [7.0]
    assert state.policy_count == 1
    assert not source.absent


async def test_the_state_is_not_ready_while_a_cache_has_not_listed() -> None:
    state = ExtenderState()
    listed = WatchCache("listed", Source([[]]))
    stuck = WatchCache("stuck", Source([]))  # its list never answers
    async with running([listed, stuck], state):
        await settle()
        assert listed.synced.is_set()
        assert not state.ready


async def test_ready_turns_true_when_all_have_listed() -> None:
    state = ExtenderState()
    caches = [WatchCache(name, Source([[]])) for name in ("a", "b", "c", "d")]
    async with running(caches, state):
        for _ in range(100):
            if state.ready:
                break
            await asyncio.sleep(0)
        assert state.ready



def rich_pod() -> JSON:
    """A pod as the API server sends it: managedFields, volumes, status conditions, an init sidecar."""
    obj = pod("rich", "500m", labels={"app": "web"}, annotations={"a": "1"}, node_name="ecs-0", memory="1Gi")
    obj["metadata"].update(
        resourceVersion="42",
        deletionTimestamp="2024-05-01T13:00:00Z",
        managedFields=[{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:containers": {}}}}],
        ownerReferences=[{"kind": "ReplicaSet", "name": "web-1"}],
    )
    obj["spec"]["containers"][0].update(env=[{"name": "X", "value": "1"}], resources={"limits": {"cpu": "2"}})
    obj["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}, "image": "x"}
    ]
    obj["spec"].update(volumes=[{"name": "v", "emptyDir": {}}], overhead={"cpu": "10m"}, resources=None)
    obj["status"].update(conditions=[{"type": "Ready", "status": "True"}], podIP="10.0.0.1")
    return obj


def test_a_slim_pod_reads_exactly_as_the_whole_pod() -> None:
    whole = rich_pod()
    slim = pod_essentials(whole)
    assert pod_view(slim) == pod_view(whole)
    assert pod_request(spec_of(slim)) == pod_request(spec_of(whole))
    assert resource_version_of(slim) == "42"
    assert "managedFields" not in meta(slim)
    assert "env" not in pod_spec(slim)["containers"][0]
    assert slim["status"] == {"phase": "Running"}
    assert pod_essentials({"metadata": "odd", "spec": ["odd"]}) == {"metadata": "odd", "spec": ["odd"]}


async def test_the_pod_cache_keeps_slim_pods_from_lists_and_watches() -> None:
    listed, watched = rich_pod(), {**rich_pod(), "metadata": {**meta(rich_pod()), "name": "watched"}}
    bookmark: JSON = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "50"}}}
    source = SlimListWatch(Source([[listed]], [[{"type": "ADDED", "object": watched}, bookmark]]), pod_essentials)
    cache = WatchCache("pods", source)
    await run_until_synced(cache)
    assert sorted(name_of(item) for item in cache.items()) == ["rich", "watched"]
    assert all("managedFields" not in meta(item) for item in cache.items())
    assert cache.resource_version == "50"
