"""The controller's job index (webhook/controller/jobindex.py) against a full walk of the cache.

The index re-reads only the jobs a watch event or a write touched; these tests drive a real watch cache through
random sequences of events, re-lists, the controller's own writes (assumed objects, older and newer than the
watch), changes of the tree and of the PriorityClasses, and check after every step that the index gives what
walking every cached object gives (the rule in docs/accounting.md: every job of a tree namespace, sized, the
controller's newer write in place of a lagging watch).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import batch_job_object, node, res, seed_root, tree
from webhook.api.objects import meta
from webhook.controller import jobindex
from webhook.controller.jobindex import JobIndex, ObjKey, rv
from webhook.controller.model import TrackedJob, track
from webhook.core.quota import QuotaTree
from webhook.core.workload import WorkloadError
from webhook.kube.cache import WatchCache, object_key
from webhook.kube.client import JSON
from webhook.workloads.base import Adapter
from webhook.workloads.registry import adapter_for


def _jobs() -> Adapter:
    adapter = adapter_for("batch", "Job")
    assert adapter is not None
    return adapter


JOBS = _jobs()
NAMES = ("a", "b", "c", "d")
NAMESPACES = ("user-a", "user-b", "user-c", "elsewhere")
SEED = tree(seed_root())
WITHOUT_USER_B = tree(node("root", min=res(cpu=100), max=res(cpu=100), children=(
    node("Department-a", min=res(cpu=60), max=res(cpu=100), namespaces=("user-a",)),
    node("Department-b", min=res(cpu=40), max=res(cpu=100), namespaces=("user-c", "elsewhere")),
)))


class Server:
    """A list + watch source whose watch plays the events the test puts, and whose list is the current state;
    a 410 event makes the cache list again."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], JSON] = {}
        self.version = 10
        self.events: asyncio.Queue[JSON] = asyncio.Queue()

    async def list_page(self, limit: int, continue_token: str | None) -> JSON:
        return {"items": list(self.objects.values()), "metadata": {"resourceVersion": str(self.version)}}

    @contextlib.asynccontextmanager
    async def watch(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[AsyncIterator[JSON]]:
        async def events() -> AsyncIterator[JSON]:
            while True:
                yield await self.events.get()

        yield events()


def full_walk(cache: WatchCache, assumed: Mapping[ObjKey, Mapping[str, Any]], quota_tree: QuotaTree,
              priorities: Mapping[str, int]) -> tuple[list[TrackedJob], list[str]]:
    """What a pass reads, by walking every cached object (the index must give the same)."""
    jobs: list[TrackedJob] = []
    unsized: list[str] = []
    for cached in cache.items():
        key = object_key(cached)
        assert key is not None
        written = assumed.get((cache.name, *key))
        obj = written if written is not None and rv(cached) < rv(written) else cached
        leaf = quota_tree.leaf_for_namespace(key[0])
        if leaf is None or not JOBS.manages(obj):
            continue
        try:
            jobs.append(track(JOBS, obj, leaf, priorities))
        except WorkloadError as error:
            unsized.append(f"{key[0]}/{key[1]}: {error}")
    return jobs, unsized


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(NAMES), st.sampled_from(NAMESPACES), st.integers(0, 3),
                  st.booleans()),
        st.tuples(st.just("delete"), st.sampled_from(NAMES), st.sampled_from(NAMESPACES)),
        st.tuples(st.just("write"), st.sampled_from(NAMES), st.sampled_from(NAMESPACES), st.integers(-2, 2)),
        st.tuples(st.just("relist")),
        st.tuples(st.just("tree")),
        st.tuples(st.just("priorities")),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_the_index_gives_what_a_full_walk_of_the_cache_gives(steps: list[tuple[Any, ...]]) -> None:
    asyncio.run(_play(steps))


async def _play(steps: list[tuple[Any, ...]]) -> None:
    server = Server()
    cache = WatchCache("jobs.batch", server)
    assumed: dict[ObjKey, Mapping[str, Any]] = {}
    index = JobIndex(assumed)
    index.add(JOBS, cache)
    task = asyncio.create_task(cache.run())
    quota_tree, tree_version = SEED, 1
    priorities: dict[str, int] = {}
    priority_epoch = 0
    try:
        await asyncio.wait_for(cache.synced.wait(), 5)
        for step in steps:
            await _step(step, server, cache, index, assumed)
            if step[0] == "tree":
                quota_tree = WITHOUT_USER_B if quota_tree is SEED else SEED
                tree_version += 1
            elif step[0] == "priorities":
                priorities = {"high": 1000} if not priorities else {}
                priority_epoch += 1
            told: list[str] = []

            def unsized(obj: Mapping[str, Any], adapter: Adapter, problem: str, told: list[str] = told) -> None:
                key = object_key(obj)
                assert key is not None and adapter is JOBS
                told.append(f"{key[0]}/{key[1]}: {problem}")

            got = index.tracked(quota_tree, (tree_version, priority_epoch), priorities, unsized)
            want, want_unsized = full_walk(cache, assumed, quota_tree, priorities)
            assert got == want, step
            assert told == want_unsized, step
            for job in want:
                key = job.workload.key
                assert index.get(cache.name, key.namespace, key.name) == job
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _step(step: tuple[Any, ...], server: Server, cache: WatchCache, index: JobIndex,
                assumed: dict[ObjKey, Mapping[str, Any]]) -> None:
    """Play one step on the server (and the cache, through its watch) or as the controller's own write."""
    verb = step[0]
    if verb == "put":
        _, name, namespace, cpu, suspend = step
        server.version += 1
        obj = batch_job_object(name, namespace, cpu=cpu, suspend=suspend, priority=None)
        if cpu == 3:  # a request the queue cannot size
            obj["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
        obj["metadata"]["resourceVersion"] = str(server.version)
        existed = (namespace, name) in server.objects
        server.objects[(namespace, name)] = obj
        await _deliver(server, cache, {"type": "MODIFIED" if existed else "ADDED", "object": obj})
    elif verb == "delete":
        _, name, namespace = step
        if (namespace, name) in server.objects:
            obj = server.objects.pop((namespace, name))
            server.version += 1  # the API sends the object at the version of its deletion
            gone = {**obj, "metadata": {**meta(obj), "resourceVersion": str(server.version)}}
            await _deliver(server, cache, {"type": "DELETED", "object": gone})
    elif verb == "write":  # the controller's write, ``ahead`` versions from what the watch delivered
        _, name, namespace, ahead = step
        cached = cache.get(name, namespace)
        if cached is not None:
            written = {**cached, "metadata": {**meta(cached), "resourceVersion": str(rv(cached) + ahead),
                                              "annotations": {"written": str(ahead)}}}
            assumed[(cache.name, namespace, name)] = written
            index.touch(cache.name, (namespace, name))  # as ClusterCache.assume does
            # The write happened on the server: no later object there has the version it returned.
            server.version = max(server.version, rv(written))
    elif verb == "relist":
        lists = cache.lists
        await server.events.put({"type": "ERROR", "object": {"code": 410, "reason": "Expired"}})
        for _ in range(100):
            if cache.lists > lists:
                break
            await asyncio.sleep(0)
        assert cache.lists > lists


async def _deliver(server: Server, cache: WatchCache, event: JSON) -> None:
    version = cache.resource_version
    await server.events.put(event)
    for _ in range(100):
        if cache.resource_version != version:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"the cache never applied {event['type']}")


MOVED_USER_A = tree(node("root", min=res(cpu=100), max=res(cpu=100), children=(
    node("Department-a", min=res(cpu=60), max=res(cpu=100), namespaces=("user-b",)),
    node("Department-b", min=res(cpu=40), max=res(cpu=100), namespaces=("user-a", "user-c")),
)))


def test_a_tree_edit_re_sizes_only_the_jobs_whose_leaf_changed_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree edit re-reads every job, but sizes again only those whose namespace moved to another leaf; the
    others keep their size and take the new leaf (the same result as the full walk, which sizes them all)."""
    sized: list[str] = []

    def counting(adapter: Adapter, obj: Mapping[str, Any], leaf: Any, priorities: Mapping[str, int],
                 devices: Any = None, **keywords: Any) -> TrackedJob:
        sized.append(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")
        return track(adapter, obj, leaf, priorities, devices, **keywords)

    monkeypatch.setattr(jobindex, "track", counting)

    async def play() -> None:
        server = Server()
        for number, namespace in enumerate(("user-a", "user-b", "user-c")):
            obj = batch_job_object("job", namespace, cpu=1, suspend=True, priority=None)
            obj["metadata"]["resourceVersion"] = str(11 + number)
            server.objects[(namespace, "job")] = obj
        cache = WatchCache("jobs.batch", server)
        assumed: dict[ObjKey, Mapping[str, Any]] = {}
        index = JobIndex(assumed)
        index.add(JOBS, cache)
        task = asyncio.create_task(cache.run())
        try:
            await asyncio.wait_for(cache.synced.wait(), 5)
            for version, quota_tree, want_sized in (
                (1, SEED, ["user-a/job", "user-b/job", "user-c/job"]),
                (2, WITHOUT_USER_B, []),  # user-b leaves the tree; user-a and user-c keep their leaves' names
                # user-a moves from Department-a to Department-b; user-b comes back (it left the index)
                (3, MOVED_USER_A, ["user-a/job", "user-b/job"]),
            ):
                sized.clear()
                got = index.tracked(quota_tree, (version, 0), {}, lambda *_: None)
                assert sorted(sized) == want_sized, version
                assert got == full_walk(cache, assumed, quota_tree, {})[0], version
                for job in got:
                    assert job.leaf is quota_tree.leaf_for_namespace(job.workload.key.namespace)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    asyncio.run(play())
