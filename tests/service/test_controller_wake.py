"""Which changes ask the controller for a pass (issue 23): its own writes coming back through the watch, jobs
outside the tree and a Job's pods ask for none, a change of status only asks within ``status_debounce``, anything
else at once; and the loop still converges when the only change is one of status. Also what the plain Pods'
cache keeps of a Job's pod (its identity only)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tests.service.controller_support import admitted, driven, pi, seed_api, settings, step
from tests.service.kubeclient_fake import JOBS, FakeApi
from webhook.api.names import LAST_APPLIED_ANNOTATION
from webhook.api.objects import annotations_of, meta, name_of, pod_spec, spec_of
from webhook.controller.cache import Wake
from webhook.controller.controller import Controller
from webhook.kube.cache import RELIST, CacheEvent, WatchCache
from webhook.kube.client import JSON, ResourceRef
from webhook.kube.packed import Packed


def job_cache(controller: Controller) -> WatchCache:
    return next(cache for _, _, cache in controller.cache.job_caches.values() if cache.name == "jobs.batch")


def versioned(obj: dict[str, Any], generation: int = 1, **metadata: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].update({"generation": generation, "resourceVersion": "900", **metadata})
    return out


async def test_a_job_outside_every_namespace_of_the_tree_asks_for_no_pass() -> None:
    api = seed_api()
    async with driven(api) as controller:
        await step(api, controller)  # the pass reads the tree
        cache = job_cache(controller)
        outside = versioned(pi("elsewhere", namespace="not-in-the-tree"))
        inside = versioned(pi("pi-1"))
        assert controller.cache.wake_for(cache, CacheEvent("ADDED", outside)) is Wake.NO
        assert controller.cache.wake_for(cache, CacheEvent("DELETED", outside)) is Wake.NO
        assert controller.cache.wake_for(cache, CacheEvent("ADDED", inside)) is Wake.NOW
        assert controller.cache.wake_for(cache, CacheEvent("DELETED", inside)) is Wake.NOW
        assert controller.cache.wake_for(cache, CacheEvent(RELIST)) is Wake.NOW


async def test_a_change_of_status_only_asks_later_and_a_change_of_spec_or_record_at_once() -> None:
    api = seed_api()
    async with driven(api) as controller:
        await step(api, controller)
        cache = job_cache(controller)
        old = versioned(pi("pi-1"))
        progressed = versioned(pi("pi-1"), status={"active": 1})
        progressed["status"] = {"active": 1}
        assert controller.cache.wake_for(cache, CacheEvent("MODIFIED", progressed, old)) is Wake.STATUS
        respecified = versioned(pi("pi-1"), generation=2)
        assert controller.cache.wake_for(cache, CacheEvent("MODIFIED", respecified, old)) is Wake.NOW
        annotated = versioned(pi("pi-1"), annotations={"someone": "else"})
        assert controller.cache.wake_for(cache, CacheEvent("MODIFIED", annotated, old)) is Wake.NOW
        deleting = versioned(pi("pi-1"), deletionTimestamp="2026-01-01T00:00:00Z")
        assert controller.cache.wake_for(cache, CacheEvent("MODIFIED", deleting, old)) is Wake.NOW
        unversioned = copy.deepcopy(progressed)
        del unversioned["metadata"]["generation"]
        old_unversioned = copy.deepcopy(old)
        del old_unversioned["metadata"]["generation"]
        assert controller.cache.wake_for(cache, CacheEvent("MODIFIED", unversioned, old_unversioned)) is Wake.NOW


async def test_its_own_write_coming_back_asks_for_no_pass_and_anyone_elses_does() -> None:
    api = seed_api()
    api.put(JOBS, pi("pi-1"))
    async with driven(api, debounce=0.001) as controller:
        cache = job_cache(controller)
        before = copy.deepcopy(api.obj(JOBS, "pi-1", "user-a"))
        await controller.reconcile()  # admits pi-1; the watch may not have delivered it yet
        assert admitted(api, "pi-1")
        written = copy.deepcopy(api.obj(JOBS, "pi-1", "user-a"))
        assert controller.cache.wake_for(cache, CacheEvent("MODIFIED", written, before)) is Wake.NO
        later = copy.deepcopy(written)
        later["metadata"]["resourceVersion"] = str(int(written["metadata"]["resourceVersion"]) + 1)
        assert controller.cache.wake_for(cache, CacheEvent("MODIFIED", later, written)) is Wake.NOW


async def passes_made(controller: Controller, count: int) -> None:
    """Ask for passes until the controller has made ``count`` more (a count, not a sleep: a slow machine
    waits longer instead of checking before any pass ran)."""
    target = controller.stats.passes + count
    while controller.stats.passes < target:
        controller.poke()
        await asyncio.sleep(0.01)


async def test_a_job_that_finishes_frees_its_quota_for_the_next_within_the_status_debounce() -> None:
    """A finished job is a change of status only: the loop still makes the pass that admits the next job."""
    api = seed_api()
    for name in ("pi-1", "pi-2"):  # user-a's leaf holds one of these at a time
        body = pi(name, pods=8)
        body["metadata"]["generation"] = 1  # kept as is by the fake API: the finish below is status only
        api.put(JOBS, body)
    stop = asyncio.Event()
    controller = Controller(api, settings(resync_period=30.0, status_debounce=0.05))
    task = asyncio.ensure_future(controller.run(stop))
    try:
        async with asyncio.timeout(10):
            while not admitted(api, "pi-1"):
                await asyncio.sleep(0.01)
            await passes_made(controller, 2)  # passes that saw pi-1 admitted: pi-2 stays held
            assert not admitted(api, "pi-2")
            finished = copy.deepcopy(api.obj(JOBS, "pi-1", "user-a"))
            finished["status"] = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 8}
            event = CacheEvent("MODIFIED", finished, api.obj(JOBS, "pi-1", "user-a"))
            assert controller.cache.wake_for(job_cache(controller), event) is Wake.STATUS
            api.put(JOBS, finished)
            while not admitted(api, "pi-2"):
                await asyncio.sleep(0.01)
    finally:
        stop.set()
        await task


def pod_cache(controller: Controller) -> WatchCache:
    return next(cache for _, _, cache in controller.cache.job_caches.values() if cache.name == "pods.core")


def tagged_pod(name: str, owner: str | None = None, gated: bool = False) -> dict[str, Any]:
    """A pod of user-a as the webhook tags it: with a Job owner (a Job's pod), or bare (held while ``gated``)."""
    metadata: dict[str, Any] = {"name": name, "namespace": "user-a", "resourceVersion": "900",
                                "labels": {"quota.scheduling.alibabacloud.com/name": "Department-a"}}
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner, "uid": "u",
                                        "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}
    if gated:
        spec["schedulingGates"] = [{"name": "kube-queue.x-k8s.io/admission"}]
    return {"metadata": metadata, "spec": spec, "status": {"phase": "Pending"}}


async def test_a_jobs_pod_asks_for_no_pass_through_the_cache_of_plain_pods_and_a_bare_pod_does() -> None:
    """The Job controller's pods are tagged like plain Pods, so they come through that job kind's cache too; they
    are no job, and each one of a burst of releases used to ask for a pass at once."""
    api = seed_api()
    async with driven(api) as controller:
        await step(api, controller)
        cache = pod_cache(controller)
        of_job = tagged_pod("pi-1-abcde", owner="pi-1")
        assert controller.cache.wake_for(cache, CacheEvent("ADDED", of_job)) is Wake.NO
        bound = copy.deepcopy(of_job)
        bound["spec"]["nodeName"] = "ecs-0"
        bound["metadata"]["resourceVersion"] = "901"
        assert controller.cache.wake_for(cache, CacheEvent("MODIFIED", bound, of_job)) is Wake.NO
        assert controller.cache.wake_for(cache, CacheEvent("DELETED", bound)) is Wake.NO
        # A bare Pod is a job: new, it asks at once.
        bare = tagged_pod("alone", gated=True)
        assert controller.cache.wake_for(cache, CacheEvent("ADDED", bare)) is Wake.NOW
        # A held Pod that now names a controller owner and lost its gate was a job: its entry must go at once.
        owned = tagged_pod("alone", owner="pi-1")
        owned["metadata"]["resourceVersion"] = "901"
        assert controller.cache.wake_for(cache, CacheEvent("MODIFIED", owned, bare)) is Wake.NOW


async def test_a_jobs_new_pod_still_lets_the_start_check_see_it_within_the_status_debounce() -> None:
    """With the new pod asking for no pass through the plain Pods' cache, the pods' own listener still asks
    for the pass that sees a released job start."""
    api = seed_api()
    api.put(JOBS, pi("pi-1"))
    async with driven(api, debounce=0.001) as controller:
        await step(api, controller, passes=2)  # the second pass sees pi-1 released, waiting to start
        assert admitted(api, "pi-1")
        waiting_before = set(controller.lifecycle.awaiting)
        assert waiting_before, "a released job waits to start"
        pod = tagged_pod("pi-1-abcde", owner="pi-1")
        pod["metadata"]["ownerReferences"][0]["uid"] = api.obj(JOBS, "pi-1", "user-a")["metadata"].get("uid", "u")
        asked: list[str] = []
        controller.lifecycle._on_status = lambda: asked.append("status")
        api.put(("", "v1", "pods"), pod)
        async with asyncio.timeout(5):
            while not asked:
                await asyncio.sleep(0.01)


async def test_the_plain_pods_cache_keeps_only_the_identity_of_a_jobs_pod() -> None:
    """A Job's pod comes to the plain Pods' cache (the webhook tags it too) but is no job: the cache keeps its
    identity, not its 20-odd KB; a bare Pod, and a Job's pod held at creation (its creator was no workload
    controller), stay whole, and the index still queues both of them."""
    api = seed_api()
    pods = ("", "v1", "pods")
    of_job = tagged_pod("pi-1-abcde", owner="pi-1")
    of_job["metadata"]["managedFields"] = [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}]
    api.put(pods, of_job)
    api.put(pods, tagged_pod("alone", gated=True))
    api.put(pods, tagged_pod("claims-a-job", owner="pi-9", gated=True))
    async with driven(api) as controller:
        await step(api, controller)
        cache = pod_cache(controller)
        stub = cache.get("pi-1-abcde", "user-a")
        assert stub is not None
        assert set(meta(stub)) <= {"name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences"}
        assert "spec" not in stub and "status" not in stub
        for name in ("alone", "claims-a-job"):
            whole = cache.get(name, "user-a")
            assert whole is not None and pod_spec(whole)["containers"], name  # whole (the pass may have released it)
        tree = controller.cache.tree_parsed[0]
        assert tree is not None
        queued = {job.workload.key.name for job in controller.tracked_jobs(tree)}
        assert {"alone", "claims-a-job"} <= queued and "pi-1-abcde" not in queued


def _fresh_note() -> str:
    """A text equal to every other call's, but a new object each time (as each decoded object's is)."""
    return " ".join(["a note", "every job", "repeats"])


async def test_the_job_caches_keep_no_managed_fields() -> None:
    """A Job and a bare Pod are kept whole but for their managed fields, which no pass reads and which are often
    the largest part of a small object (issue 38): a Job's own, and a bare Pod's, are gone from the caches."""
    api = seed_api()
    fields = [{"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsV1": {"f:spec": {"f:x": {}}}}]
    job = pi("pi-1")
    job["metadata"]["managedFields"] = copy.deepcopy(fields)
    api.put(JOBS, job)
    pod = tagged_pod("alone", gated=True)
    pod["metadata"]["managedFields"] = copy.deepcopy(fields)
    api.put(("", "v1", "pods"), pod)
    job["metadata"]["annotations"] = {LAST_APPLIED_ANNOTATION: json.dumps(pi("pi-1")), "note": _fresh_note()}
    api.put(JOBS, job)
    second = pi("pi-2")
    second["metadata"]["annotations"] = {"note": _fresh_note()}
    api.put(JOBS, second)
    async with driven(api) as controller:
        await step(api, controller)
        jobs = next(cache for _, _, cache in controller.cache.job_caches.values() if cache.name == "jobs.batch")
        cached_job, other = jobs.get("pi-1", "user-a"), jobs.get("pi-2", "user-a")
        cached_pod = pod_cache(controller).get("alone", "user-a")
        assert cached_job is not None and cached_pod is not None and other is not None
        for cached in (cached_job, cached_pod):
            assert "managedFields" not in meta(cached)
            assert name_of(cached) and spec_of(cached), "the rest is kept"
        assert api.obj(JOBS, "pi-1", "user-a")["metadata"].get("managedFields") == fields, "the API keeps them"
        # Neither kubectl apply's copy of the object, while the API keeps it; and the texts each job repeats
        # are held once (issue 38).
        assert LAST_APPLIED_ANNOTATION not in annotations_of(cached_job)
        assert LAST_APPLIED_ANNOTATION in api.obj(JOBS, "pi-1", "user-a")["metadata"]["annotations"]
        notes = [annotations_of(cached)["note"] for cached in (cached_job, other)]
        assert notes[0] == notes[1] and notes[0] is notes[1]
        assert job["metadata"]["annotations"]["note"] is not second["metadata"]["annotations"]["note"]
        # Kept packed: the spec and status compressed, read back as they were (issue 38).
        assert isinstance(cached_job, Packed) and isinstance(cached_pod, Packed)
        stored = api.obj(JOBS, "pi-2", "user-a")
        assert other["spec"] == stored["spec"] and other.get("status") == stored.get("status")


async def test_a_job_created_while_a_pass_writes_waits_only_what_is_left_of_the_debounce() -> None:
    """The debounce counts from the first change a pass serves: a job created while the last pass was still
    writing, longer ago than the debounce on the controller's clock, is decided as soon as that pass ends. With
    the debounce counted from the end of the pass, the 30 s debounce set below would hold pi-2 past the
    test's 10 s."""
    skew = [0.0]
    controller: Controller | None = None

    class SlowRelease(FakeApi):
        """pi-1's release lets the loop see pi-2 arrive, then takes 31 s on the controller's clock."""

        async def json_patch(  # type: ignore[override]  # as FakeApi's own
            self, ref: ResourceRef, name: str, ops: Sequence[Mapping[str, Any]], namespace: str | None = None,
            subresource: str | None = None,
        ) -> JSON:
            if name == "pi-1" and ref.plural == "jobs" and not skew[0]:
                assert controller is not None
                controller.settings = dataclasses.replace(controller.settings, debounce=30.0)
                self.put(JOBS, pi("pi-2", pods=1))
                while controller._dirty.since is None:  # the job cache hands pi-2's arrival to the loop
                    await asyncio.sleep(0.001)
                skew[0] += 31.0
            return await super().json_patch(ref, name, ops, namespace, subresource)

    api = seed_api(SlowRelease)
    api.put(JOBS, pi("pi-1", pods=1))
    stop = asyncio.Event()
    controller = Controller(api, settings(resync_period=60.0), clock=lambda: time.monotonic() + skew[0])
    task = asyncio.ensure_future(controller.run(stop))
    try:
        async with asyncio.timeout(10):
            while not (admitted(api, "pi-1") and admitted(api, "pi-2")):
                await asyncio.sleep(0.01)
        assert skew[0] == 31.0
    finally:
        stop.set()
        await task
