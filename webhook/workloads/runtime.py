"""What a job object says about how long it runs: the run time its submitter declares, its active deadline,
its name stem, and when it finished (docs/eta.md). Kind-agnostic: the fields are read where the job kinds put
them (``spec.activeDeadlineSeconds`` for Jobs, RayJobs, Pods and Argo Workflows, ``spec.runPolicy`` for the
Kubeflow kinds; the finish time in ``status.completionTime``, ``status.endTime``, ``status.finishedAt`` or
``status.terminationTime``, else a finished condition's time, else a Pod's last container's)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from webhook.api.names import EXPECTED_RUNTIME_ANNOTATION
from webhook.api.objects import Obj, parse_time
from webhook.core.runtimes import DeclaredRuntimeError, Runtime, RuntimeHistory, name_stem, parse_runtime, runtime_for
from webhook.core.workload import WorkloadError
from webhook.workloads.base import Adapter, int_at, str_at

__all__ = ["active_deadline", "declared_runtime", "finished_at", "job_runtime", "stem_of", "succeeded"]

_DEADLINES = (("spec", "activeDeadlineSeconds"), ("spec", "runPolicy", "activeDeadlineSeconds"))
_FINISH_FIELDS = ("completionTime", "endTime", "finishedAt", "terminationTime")
_FINISHED_CONDITIONS = ("Complete", "Succeeded", "Failed")


def declared_runtime(obj: Obj, adapter: Adapter | None = None) -> tuple[float | None, str]:
    """The run time the job's annotation declares, in seconds, and why it could not be used (``""``: it
    could, or there is none). Without one on the job, its pod templates' are read (with ``adapter``): ``kq
    submit --annotation`` puts annotations there."""
    text = _field(obj, "metadata", "annotations", EXPECTED_RUNTIME_ANNOTATION)
    if text is None and adapter is not None:
        try:
            templates = adapter.pod_templates(obj)
        except WorkloadError:
            templates = ()
        text = next((found for template in templates
                     if (found := _field(template.template, "metadata", "annotations",
                                         EXPECTED_RUNTIME_ANNOTATION)) is not None), None)
    if text is None:
        return None, ""
    if not isinstance(text, str):
        return None, f"annotation {EXPECTED_RUNTIME_ANNOTATION} must be a string such as 45m, got {text!r}"
    try:
        return parse_runtime(text), ""
    except DeclaredRuntimeError as error:
        return None, f"annotation {EXPECTED_RUNTIME_ANNOTATION}: {error}"


def active_deadline(obj: Obj) -> float | None:
    """``activeDeadlineSeconds`` of the job (where its kind puts it), when positive."""
    for path in _DEADLINES:
        try:
            seconds = int_at(obj, None, *path)
        except WorkloadError:  # malformed: the API server would not have stored it; read as absent
            continue
        if seconds is not None and seconds > 0:
            return float(seconds)
    return None


def stem_of(obj: Obj) -> str:
    """The job's name stem (:func:`webhook.core.runtimes.name_stem`)."""
    try:
        name, generate = str_at(obj, "metadata", "name") or "", str_at(obj, "metadata", "generateName")
    except WorkloadError:
        return ""
    return name_stem(name, generate)


def _field(obj: object, *path: str) -> object:
    """The value at ``path`` of plain mappings, ``None`` where a step is absent or not a mapping."""
    for step in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(step)
    return obj


def _conditions(obj: Obj) -> Iterable[Mapping[str, object]]:
    conditions = _field(obj, "status", "conditions")
    return [item for item in conditions if isinstance(item, Mapping)] if isinstance(conditions, list) else []


def finished_at(obj: Obj) -> float | None:
    """When the job finished (seconds since the epoch), as its status says; ``None`` when it does not say."""
    for name in _FINISH_FIELDS:
        moment = parse_time(_field(obj, "status", name))
        if moment is not None:
            return moment
    times = [parse_time(item.get("lastTransitionTime")) for item in _conditions(obj)
             if item.get("type") in _FINISHED_CONDITIONS and item.get("status") == "True"]
    found = [moment for moment in times if moment is not None]
    if found:
        return max(found)
    containers = _field(obj, "status", "containerStatuses")
    ends = [moment for container in (containers if isinstance(containers, list) else ())
            if (moment := parse_time(_field(container, "state", "terminated", "finishedAt"))) is not None]
    return max(ends) if ends else None


def succeeded(obj: Obj) -> bool:
    """Whether the job finished well (only those teach the history how long such jobs run): a ``Complete`` or
    ``Succeeded`` condition, a ``Succeeded`` phase, or a RayJob's ``SUCCEEDED``; and no ``Failed`` condition."""
    conditions = {str(item.get("type")): item.get("status") == "True" for item in _conditions(obj)}
    if conditions.get("Failed"):
        return False
    return (conditions.get("Complete", False) or conditions.get("Succeeded", False)
            or _field(obj, "status", "phase") == "Succeeded" or _field(obj, "status", "jobStatus") == "SUCCEEDED")


def job_runtime(obj: Obj, kind: str, history: RuntimeHistory, queue_namespaces: Iterable[str],
                adapter: Adapter | None = None) -> Runtime:
    """What is known of the job's run time: declared (on the job, or its pod templates with ``adapter``), else its
    history (namespace, then queue), capped by its deadline; else its deadline alone; else unknown."""
    declared, problem = declared_runtime(obj, adapter)
    namespace = _field(obj, "metadata", "namespace")
    namespace = namespace if isinstance(namespace, str) else ""
    found = history.runtime(namespace, kind, stem_of(obj), queue_namespaces) if declared is None else None
    return runtime_for(declared, active_deadline(obj), found, problem)
