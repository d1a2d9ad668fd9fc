"""The held pods a job's own pod created (a SparkApplication's executors), taken out of the queue and released
within the job's admission (the rule: :mod:`webhook.core.spawned`; which pods: :mod:`webhook.workloads.spawned`).

Each pass :func:`split_spawned` takes such Pods out of the tracked jobs, so that they are neither queued nor
counted on their own (their job's admission counts them), and after the pass's own writes the leader releases
the ones the rule allows (:class:`SpawnedPods`). A pod that stays held gets one Event per reason.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from webhook.api.names import REASON_HELD, REASON_RELEASED
from webhook.controller.events import EventGate
from webhook.controller.model import TrackedJob
from webhook.controller.records import kv
from webhook.controller.starts import PodIndex
from webhook.controller.writer import Writer
from webhook.core.spawned import SpawnedRelease, release_spawned
from webhook.core.workload import Phase
from webhook.workloads.spawned import DriverKey, spawner_of, spawning_pods

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Spawned:
    """A job, the pod that creates pods for it, and the Pods (held or not) that pod created."""

    job: TrackedJob
    driver: DriverKey
    pods: tuple[TrackedJob, ...]


def split_spawned(jobs: list[TrackedJob], pods: PodIndex) -> tuple[list[TrackedJob], list[Spawned]]:
    """``jobs`` without the Pods a job's pod spawned, and those Pods by job. The candidates come from the pod
    index (the pods each driver owns), so a pass without such jobs, or with few, walks no pod's owners."""
    apps = [job for job in jobs if job.adapter.spawned_pod_set is not None]
    if not apps:
        return jobs, []
    spawners = spawning_pods((job, job.adapter, job.obj) for job in apps)
    candidates = {(namespace, pod.name) for namespace, driver in spawners
                  for pod in pods.pods_of_owners([(namespace, "Pod", driver)])}
    if not candidates:
        return jobs, []
    kept: list[TrackedJob] = []
    found: dict[DriverKey, list[TrackedJob]] = {}
    for job in jobs:
        key = job.workload.key
        spawner = None
        if (key.namespace, key.name) in candidates and job.adapter.kind == "Pod":
            spawner = spawner_of(job.obj, spawners)
        if spawner is None:
            kept.append(job)
        else:
            found.setdefault(spawner[0], []).append(job)
    return kept, [Spawned(spawners[driver], driver, tuple(owned)) for driver, owned in found.items()]


def plan(spawned: Spawned, pods: PodIndex) -> SpawnedRelease:
    """What :func:`release_spawned` says of ``spawned``'s held pods."""
    job = spawned.job
    pod_set_name = job.adapter.spawned_pod_set or ""
    pod_set = next((item for item in job.workload.pod_sets if item.name == pod_set_name), None)
    held = [pod for pod in spawned.pods if pod.adapter.is_suspended(pod.obj)]
    held_names = {pod.workload.key.name for pod in held}
    namespace, driver = spawned.driver
    present = sum(1 for pod in pods.pods_of_owners([(namespace, "Pod", driver)]) if pod.name not in held_names)
    return release_spawned(
        f"{job.adapter.kind} {job.workload.key.name}", pod_set_name,
        admitted=job.workload.phase is Phase.ADMITTED and pod_set is not None,
        allowed=pod_set.count if pod_set is not None else 0,
        present=present,
        per_pod=pod_set.per_pod if pod_set is not None else job.workload.request,
        held=[pod.workload for pod in held],
    )


class SpawnedPods:
    """Releases the spawned pods the rule allows; tells a pod kept held why, once per reason."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self._told = EventGate(0.0)
        """Each held pod's last reason told (a new reason is told at once)."""

    async def release(self, spawned: Sequence[Spawned], pods: PodIndex) -> int:
        """Release what each job allows; how many pods were released."""
        released = 0
        live: set[str] = set()
        for item in spawned:
            verdict = plan(item, pods)
            by_name = {pod.workload.key.name: pod for pod in item.pods}
            for name in verdict.release:
                pod = by_name[name]
                if await self.writer.patch_job(pod, pod.adapter.resume_patch(pod.obj), "release-spawned") is None:
                    continue
                released += 1
                log.info(kv(component="controller", decision="release-spawned", pod=str(pod.workload.key),
                            job=str(item.job.workload.key), request=pod.workload.request.describe()))
                self.writer.events.emit(pod.obj, "Normal", REASON_RELEASED, "Release",
                                        f"Released as a pod of {item.job.adapter.kind} {item.job.workload.key.name}, "
                                        "within its admission")
            for name, why in verdict.kept:
                pod = by_name[name]
                uid = pod.workload.uid
                live.add(uid)
                if not self._told.due(uid, why):
                    continue
                self._told.mark(uid, why)
                log.info(kv(component="controller", decision="hold-spawned", pod=str(pod.workload.key),
                            job=str(item.job.workload.key), reason=why))
                self.writer.events.emit(pod.obj, "Warning", REASON_HELD, "Hold", f"kube-queue holds this pod: {why}")
        self._told.keep_only(live)
        return released
