"""JobSet (``jobset.x-k8s.io/v1alpha2``): held by ``spec.suspend``; one pod set per replicated Job.

Each ``spec.replicatedJobs[i]`` makes ``replicas`` Jobs (default 1) from its ``template``, a Job's spec, each
running as many pods at once as a Job does (:func:`~webhook.workloads.job.pods_at_once`). JobSet's controller
creates the Jobs, named ``<jobset>-<replicatedJob>-<index>`` and owned by the JobSet: they are its children,
queued with it (:mod:`webhook.workloads.children`), and their pods are its pods. While a JobSet is suspended
its controller creates its Jobs suspended and keeps them so; resuming the JobSet resumes them
(docs/job-kinds.md).
"""

from __future__ import annotations

from webhook.api.objects import Obj
from webhook.core.workload import WorkloadError
from webhook.workloads.base import (
    PodTemplate,
    SpecSuspendAdapter,
    condition_true,
    int_at,
    mapping_at,
    str_at,
    value_at,
)
from webhook.workloads.job import pods_at_once

JOBS = ("spec", "replicatedJobs")


def _replicated(obj: Obj) -> list[tuple[int, str, int]]:
    """``(index, name, replicas)`` of each replicated Job; a :class:`WorkloadError` for one without a name."""
    jobs = value_at(obj, *JOBS)
    if jobs is None:
        return []
    if not isinstance(jobs, list):
        raise WorkloadError(f"/spec/replicatedJobs: expected a list, got {type(jobs).__name__}")
    out: list[tuple[int, str, int]] = []
    for index in range(len(jobs)):
        name = str_at(obj, *JOBS, index, "name")
        if name is None:
            raise WorkloadError(f"/spec/replicatedJobs/{index}/name: a replicated Job needs a name")
        replicas = int_at(obj, 1, *JOBS, index, "replicas")
        out.append((index, name, 1 if replicas is None else replicas))
    return out


class JobSetAdapter(SpecSuspendAdapter):
    """``jobset.x-k8s.io/v1alpha2`` ``JobSet``."""

    group = "jobset.x-k8s.io"
    versions = ("v1alpha2",)
    kind = "JobSet"
    plural = "jobsets"
    children = frozenset({"Job"})

    def pod_templates(self, obj: Obj) -> tuple[PodTemplate, ...]:
        out: list[PodTemplate] = []
        for index, name, replicas in _replicated(obj):
            job = (*JOBS, index, "template", "spec")
            template = mapping_at(obj, *job, "template") or {}
            count = replicas * pods_at_once(obj, *job)
            out.append(PodTemplate(name=name, count=count, path=(*job, "template"), template=template))
        return tuple(out)

    def pod_owners(self, obj: Obj) -> tuple[tuple[str, str], ...]:
        """The Jobs JobSet makes: ``<jobset>-<replicatedJob>-<index>`` for each replica."""
        name = value_at(obj, "metadata", "name")
        if not isinstance(name, str) or not name:
            return ()
        return tuple(
            ("Job", f"{name}-{job}-{replica}") for _, job, replicas in _replicated(obj) for replica in range(replicas)
        )

    def is_finished(self, obj: Obj) -> bool:
        return condition_true(obj, "Completed", "Failed")


ADAPTERS = (JobSetAdapter(),)
