"""batch/v1 Job: held by ``spec.suspend``; one pod set of ``parallelism`` pods (at most ``completions``)."""

from __future__ import annotations

from webhook.api.objects import Obj
from webhook.workloads.base import PodTemplate, SpecSuspendAdapter, condition_true, int_at, mapping_at
from webhook.workloads.children import queued_with_parent


def pods_at_once(obj: Obj, *spec: str | int) -> int:
    """How many pods the Job spec at ``spec`` runs at once: ``parallelism`` (default 1), ``completions`` when
    that is smaller (a Job never runs more pods than it has completions left)."""
    parallelism = int_at(obj, 1, *spec, "parallelism")
    completions = int_at(obj, None, *spec, "completions")
    count = parallelism if parallelism is not None else 1
    return completions if completions is not None and completions < count else count


class JobAdapter(SpecSuspendAdapter):
    """``batch/v1`` ``Job``.

    Pod count: ``parallelism`` (default 1); when ``completions`` is set and smaller, ``completions``
    (a Job never runs more pods at once than it has completions left).
    """

    group = "batch"
    versions = ("v1",)
    kind = "Job"
    plural = "jobs"

    def pod_templates(self, obj: Obj) -> tuple[PodTemplate, ...]:
        template = mapping_at(obj, "spec", "template") or {}
        return (PodTemplate(name="main", count=pods_at_once(obj, "spec"), path=("spec", "template"),
                            template=template),)

    def is_finished(self, obj: Obj) -> bool:
        return condition_true(obj, "Complete", "Failed")

    def manages(self, obj: Obj) -> bool:
        """Every Job but one a queued job's operator created for it (a RayJob's submitter, an MPIJob v2's
        launcher: :mod:`webhook.workloads.children`), queued with that job."""
        return not queued_with_parent(obj, self.kind)

    def needs_all_pods(self, obj: Obj) -> bool:
        """A Job with ``parallelism == completions`` runs all its pods at once; any other makes progress pod by
        pod."""
        parallelism = int_at(obj, 1, "spec", "parallelism")
        completions = int_at(obj, None, "spec", "completions")
        return completions is not None and completions == (1 if parallelism is None else parallelism)


ADAPTERS = (JobAdapter(),)
