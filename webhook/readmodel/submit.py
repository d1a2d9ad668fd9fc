"""The jobs ``kq submit`` and the console's submit form create, built from a few options (or read from a file),
checked, and created with messages that say what to do when the cluster refuses them.

Shapes (``workers`` pods in all, each with ``cpu``/``memory``/``gpus`` as requests and limits):

* ``job``: a batch/v1 Job with ``parallelism = completions = N``, ``restartPolicy: Never``;
* ``pytorchjob``: a Kubeflow PyTorchJob, ``Master`` (1) + ``Worker`` (N - 1), container ``pytorch``;
* ``tfjob``: a Kubeflow TFJob, ``Chief`` (1) + ``Worker`` (N - 1), container ``tensorflow``;
* ``mpijob``: a Kubeflow MPIJob (``v2beta1``, or ``v1`` where only the training operator serves it),
  ``Launcher`` (1 pod, 1 CPU / 1Gi, runs the command) + ``Worker`` (N), one slot per worker; its running
  workers deleted when it ends (``cleanPodPolicy: Running``: they serve the launcher and never end on their own);
* ``xgboostjob``, ``paddlejob``: ``Master`` (1) + ``Worker`` (N - 1), containers ``xgboost``, ``paddle``;
* ``rayjob``: a KubeRay RayJob running the command as its entrypoint on a cluster of a head (1) and a worker
  group (N - 1), deleted when it finishes (``shutdownAfterJobFinishes``, which the queue needs);
* ``jobset``: a JobSet of a ``leader`` Job (1 pod) and, for N > 1, ``workers`` Jobs (N - 1, one pod each),
  every pod running the command in container ``main``.

The queue's webhook holds the job in a namespace kube-queue manages; neither face sets the hold itself, so a
job in another namespace simply starts.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from webhook.api.objects import Doc, Obj, mappings, meta
from webhook.core.workload import WorkloadError

if TYPE_CHECKING:
    from webhook.readmodel.context import Ctx

KINDS: dict[str, tuple[str, str, str]] = {
    "job": ("batch/v1", "Job", "jobs"),
    "pytorchjob": ("kubeflow.org/v1", "PyTorchJob", "pytorchjobs"),
    "tfjob": ("kubeflow.org/v1", "TFJob", "tfjobs"),
    "mpijob": ("kubeflow.org/v2beta1", "MPIJob", "mpijobs"),
    "xgboostjob": ("kubeflow.org/v1", "XGBoostJob", "xgboostjobs"),
    "paddlejob": ("kubeflow.org/v1", "PaddleJob", "paddlejobs"),
    "rayjob": ("ray.io/v1", "RayJob", "rayjobs"),
    "jobset": ("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets"),
}
"""``kq submit`` kind -> (apiVersion, kind, plural)."""
DEFAULT_IMAGE = "busybox:1.36"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Everything the flags say about the job to build."""

    kind: str
    namespace: str
    name: str | None = None
    image: str = DEFAULT_IMAGE
    command: tuple[str, ...] = ()
    cpu: str | None = None
    memory: str | None = None
    gpus: int = 0
    workers: int = 1
    priority_class: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    extra: Obj = field(default_factory=dict)


class SubmitError(ValueError):
    """Flags that do not make a job (the message says which and why)."""


def check_options(options: JobOptions) -> None:
    """:class:`SubmitError` for a bad name, quantity or count."""
    from webhook.core.quantity import QuantityError, parse_quantity  # noqa: PLC0415

    if options.name is not None and (len(options.name) > 63 or not _NAME.fullmatch(options.name)):
        raise SubmitError(
            f"--name {options.name!r} is not a valid job name: use lower-case letters, digits and '-', starting "
            "and ending with a letter or digit, at most 63 characters"
        )
    for flag, value in (("--cpu", options.cpu), ("--memory", options.memory)):
        if value is None:
            continue
        try:
            amount = parse_quantity(value)
        except QuantityError as error:
            raise SubmitError(f"{flag} {value!r} is not a quantity: {error.why}") from None
        if amount <= 0:
            raise SubmitError(f"{flag} must be more than 0, got {value!r}")
    if options.gpus < 0:
        raise SubmitError(f"--gpus must be 0 or more, got {options.gpus}")
    if options.workers < 1:
        raise SubmitError(f"--workers must be at least 1, got {options.workers}")
    if options.kind in ("pytorchjob", "tfjob") and options.workers < 1:
        raise SubmitError("--workers counts the master too, so it must be at least 1")


def _command(argv: Sequence[str]) -> list[str]:
    """``sh -c TEXT`` for one argument with spaces (``-- "python train.py --lr 0.1"``), else the argv."""
    if len(argv) == 1 and any(ch.isspace() for ch in argv[0]):
        return ["sh", "-c", argv[0]]
    return list(argv)


def _resources(options: JobOptions) -> dict[str, dict[str, str]]:
    amounts: dict[str, str] = {}
    if options.cpu:
        amounts["cpu"] = options.cpu
    if options.memory:
        amounts["memory"] = options.memory
    if options.gpus:
        amounts["nvidia.com/gpu"] = str(options.gpus)
    return {"requests": dict(amounts), "limits": dict(amounts)} if amounts else {}


def _container(options: JobOptions, name: str, run: bool = True,
               resources: dict[str, dict[str, str]] | None = None) -> Doc:
    container: Doc = {"name": name, "image": options.image}
    if run and options.command:
        container["command"] = _command(options.command)
    if options.env:
        container["env"] = [{"name": key, "value": value} for key, value in options.env]
    chosen = _resources(options) if resources is None else resources
    if chosen:
        container["resources"] = chosen
    return container


def _template(options: JobOptions, container: Doc, restart: str) -> Doc:
    template: Doc = {}
    metadata: Doc = {}
    if options.labels:
        metadata["labels"] = dict(options.labels)
    if options.annotations:
        metadata["annotations"] = dict(options.annotations)
    if metadata:
        template["metadata"] = metadata
    spec: Doc = {"restartPolicy": restart, "containers": [container]}
    if options.priority_class:
        spec["priorityClassName"] = options.priority_class
    template["spec"] = spec
    return template


def _metadata(options: JobOptions) -> Doc:
    metadata: Doc = {"name": options.name} if options.name else {"generateName": f"{options.kind}-"}
    metadata["namespace"] = options.namespace
    if options.labels:
        metadata["labels"] = dict(options.labels)
    return metadata


def _replica(count: int, template: Doc) -> Doc:
    return {"replicas": count, "restartPolicy": "Never", "template": copy.deepcopy(template)}


def build_job(options: JobOptions) -> Doc:
    """The object ``kq submit`` creates (see the module notes for the shapes)."""
    check_options(options)
    api_version, kind, _ = KINDS[options.kind]
    obj: Doc = {"apiVersion": api_version, "kind": kind, "metadata": _metadata(options)}
    workers = options.workers
    if options.kind == "job":
        obj["spec"] = {
            "parallelism": workers,
            "completions": workers,
            "template": _template(options, _container(options, "main"), "Never"),
        }
        return obj
    run_policy: Doc = {"cleanPodPolicy": "None"}
    if options.priority_class:
        run_policy["schedulingPolicy"] = {"priorityClass": options.priority_class}
    if options.kind == "mpijob":  # MPI workers serve the launcher until deleted: delete them when it ends
        run_policy["cleanPodPolicy"] = "Running"
        launcher_resources = {
            "requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        }
        launcher = _template(options, _container(options, "launcher", True, launcher_resources), "Never")
        worker = _template(options, _container(options, "worker", False), "Never")
        obj["spec"] = {
            "slotsPerWorker": 1,
            "runPolicy": run_policy,
            "mpiReplicaSpecs": {"Launcher": _replica(1, launcher), "Worker": _replica(workers, worker)},
        }
        return obj
    if options.kind == "rayjob":
        obj["spec"] = _rayjob_spec(options)
        return obj
    if options.kind == "jobset":
        obj["spec"] = _jobset_spec(options)
        return obj
    container_name, chief, field_name = {
        "pytorchjob": ("pytorch", "Master", "pytorchReplicaSpecs"),
        "xgboostjob": ("xgboost", "Master", "xgbReplicaSpecs"),
        "paddlejob": ("paddle", "Master", "paddleReplicaSpecs"),
    }.get(options.kind, ("tensorflow", "Chief", "tfReplicaSpecs"))
    template = _template(options, _container(options, container_name), "Never")
    specs: Doc = {chief: _replica(1, template)}
    if workers > 1:
        specs["Worker"] = _replica(workers - 1, template)
    obj["spec"] = {"runPolicy": run_policy, field_name: specs}
    return obj


def _jobset_spec(options: JobOptions) -> Doc:
    """A leader Job of one pod and ``workers - 1`` worker Jobs of one pod each, all of the given size."""
    template = _template(options, _container(options, "main"), "Never")

    def replicated(name: str, replicas: int) -> Doc:
        job = {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": copy.deepcopy(template)}
        return {"name": name, "replicas": replicas, "template": {"spec": job}}

    jobs = [replicated("leader", 1)]
    if options.workers > 1:
        jobs.append(replicated("workers", options.workers - 1))
    return {"replicatedJobs": jobs}


def _rayjob_spec(options: JobOptions) -> Doc:
    """A RayJob whose entrypoint is the command, on a head and ``workers - 1`` workers of the given size."""
    head = _template(options, _container(options, "ray-head", run=False), "Always")
    cluster: Doc = {"headGroupSpec": {"rayStartParams": {}, "template": head}}
    spec: Doc = {
        "entrypoint": " ".join(options.command) or "python -c 'import ray; ray.init()'",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": cluster,
    }
    if options.workers > 1:
        worker = _template(options, _container(options, "ray-worker", run=False), "Always")
        cluster["workerGroupSpecs"] = [
            {"groupName": "workers", "replicas": options.workers - 1, "minReplicas": options.workers - 1,
             "maxReplicas": options.workers - 1, "rayStartParams": {}, "template": worker},
        ]
    if options.priority_class:
        spec["submitterPodTemplate"] = {"spec": {"priorityClassName": options.priority_class, "restartPolicy": "Never",
                                                 "containers": [{"name": "ray-job-submitter", "image": options.image}]}}
    return spec


# From a file ---------------------------------------------------------------------------------------------------


def _templates_of(obj: Doc) -> list[Doc]:
    """The object's pod templates, as its kind's adapter finds them (the very dicts, to edit in place)."""
    from webhook.workloads.registry import adapter_for  # noqa: PLC0415

    adapter = adapter_for(str(obj.get("apiVersion") or "").rpartition("/")[0], str(obj.get("kind") or ""))
    if adapter is None:
        return []
    try:
        templates = adapter.pod_templates(obj)
    except WorkloadError:
        return []
    return [t.template for t in templates if t.path and isinstance(t.template, dict)]


def _object_at(parent: Doc, key: str, where: str) -> Doc:
    """``parent[key]`` (set to ``{}`` when absent) to edit in place; :class:`SubmitError` when it is not an
    object."""
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise SubmitError(f"{where}: {key} must be an object")
    return value


def job_from_file(path: str, options: JobOptions, explicit_namespace: bool) -> Doc:
    """The object of a YAML file, with ``--name``, ``-n``, ``-e``, ``--annotation``, ``--label`` and
    ``--priority-class`` applied; :class:`SubmitError` when it is not one object of the chosen kind."""
    import yaml  # noqa: PLC0415

    try:
        text = Path(path).read_text() if path != "-" else __import__("sys").stdin.read()
    except OSError as error:
        raise SubmitError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        docs = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as error:
        raise SubmitError(f"{path} is not valid YAML: {' '.join(str(error).split())}") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise SubmitError(f"{path} must hold exactly one object, found {len(docs)}")
    obj: Doc = docs[0]
    api_version, kind, _ = KINDS[options.kind]
    if obj.get("kind") != kind:
        raise SubmitError(f"{path} holds a {obj.get('kind')!r}, not a {kind}; use `kq submit "
                          f"{str(obj.get('kind') or '').lower()} -f {path}`")
    obj.setdefault("apiVersion", api_version)
    metadata = _object_at(obj, "metadata", path)
    declared = metadata.get("namespace")
    if declared and explicit_namespace and declared != options.namespace:
        raise SubmitError(f"{path} is for namespace {declared!r} but -n says {options.namespace!r}")
    metadata["namespace"] = declared or options.namespace
    if options.name:
        metadata["name"] = options.name
        metadata.pop("generateName", None)
    elif not metadata.get("name") and not metadata.get("generateName"):
        metadata["generateName"] = f"{options.kind}-"
    if options.labels:
        _object_at(metadata, "labels", path).update(dict(options.labels))
    for template in _templates_of(obj):
        template_meta = _object_at(template, "metadata", path)
        if options.labels:
            _object_at(template_meta, "labels", path).update(dict(options.labels))
        if options.annotations:
            _object_at(template_meta, "annotations", path).update(dict(options.annotations))
        spec = _object_at(template, "spec", path)
        if options.priority_class:
            spec["priorityClassName"] = options.priority_class
        containers = spec.get("containers")
        for container in containers if isinstance(containers, list) else ():
            if options.env and isinstance(container, dict):
                env = container.setdefault("env", [])
                if not isinstance(env, list):
                    raise SubmitError(f"{path}: a container's env must be a list")
                env += [{"name": key, "value": value} for key, value in options.env]
    if options.priority_class and obj.get("kind") != "Job":
        run_policy = _object_at(_object_at(obj, "spec", path), "runPolicy", path)
        _object_at(run_policy, "schedulingPolicy", path)["priorityClass"] = options.priority_class
    return obj


# Creating it ---------------------------------------------------------------------------------------------------


def create_object(ctx: Ctx, obj: Doc) -> Obj:
    from webhook.readmodel.fetch import CliError  # noqa: PLC0415
    from webhook.readmodel.kubeapi import ApiError, Ref  # noqa: PLC0415

    api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
    group, _, version = api_version.rpartition("/")
    plural = next((p for v, k, p in KINDS.values() if k == kind), kind.lower() + "s")
    namespace = str(meta(obj)["namespace"])
    try:
        return ctx.api.create(Ref(group, version, plural), obj, namespace)
    except ApiError as error:
        name = meta(obj).get("name", "")
        if error.status == 409:
            raise CliError(
                f"{kind} {name} already exists in namespace {namespace}: pick another --name or "
                f"`kq delete {name} -n {namespace}`"
            ) from None
        if error.not_found and not _served(ctx, group, version, plural):
            other = _other_served_version(ctx, group, kind, version, plural)
            if other is not None:  # MPIJob: kubeflow.org/v1 where only the training operator serves it
                return create_object(ctx, {**obj, "apiVersion": f"{group}/{other}"})
            raise CliError(
                f"the cluster does not serve {kind} ({api_version}): install its operator (docs/job-kinds.md) "
                "or submit a `kq submit job`"
            ) from None
        if error.not_found:
            raise CliError(f"cannot create {kind} in namespace {namespace}: {error.one_line()}") from None
        if error.status == 0:
            raise CliError(f"cannot reach the cluster to create {kind} {name or '(generated name)'}: "
                           f"{error.one_line()}; nothing was created") from None
        raise CliError(f"the cluster refused {kind} {name or '(generated name)'}: {error.one_line()}") from None


def _other_served_version(ctx: Ctx, group: str, kind: str, tried: str, plural: str) -> str | None:
    """Another version of ``kind`` the queue reads (its adapter's) that the API serves."""
    from webhook.workloads.registry import adapter_for  # noqa: PLC0415

    adapter = adapter_for(group, kind)
    versions = adapter.versions if adapter is not None else ()
    return next((v for v in versions if v != tried and _served(ctx, group, v, plural)), None)


def _served(ctx: Ctx, group: str, version: str, plural: str) -> bool:
    """Whether the API serves ``plural`` in ``group/version`` (discovery)."""
    from webhook.readmodel.kubeapi import ApiError  # noqa: PLC0415

    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    try:
        listing = ctx.api.request("GET", path)
    except ApiError:
        return False
    return any(r.get("name") == plural for r in mappings(listing.get("resources")))
