"""A kind-agnostic view of a job: pod sets, request, priority, identity and quota.

Adapters in ``webhook.workloads`` turn each job kind into a :class:`Workload`; everything in the core
decides over this view only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from operator import attrgetter

from webhook.api.names import EXTENDER_RESOURCE, MAX_JOBS
from webhook.api.objects import Obj
from webhook.core.quantity import NANO, QuantityError, parse_quantity
from webhook.core.resources import EMPTY, Resources, shared


class WorkloadError(ValueError):
    """A job whose pod sets cannot be read (bad quantity, negative count...): names where and why."""


@dataclass(frozen=True, slots=True)
class WorkloadKey:
    """Identity of a job: ``kind/namespace/name``.

    Its hash is computed once (a decision pass keys dicts and sets of a million jobs by it); it is never
    pickled or copied (the hash of a string differs between processes), only the three names are."""

    kind: str
    namespace: str
    name: str
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.kind, self.namespace, self.name)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[WorkloadKey], tuple[str, str, str]]:
        return WorkloadKey, (self.kind, self.namespace, self.name)

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` pods, each requesting ``per_pod``."""

    name: str
    count: int
    per_pod: Resources

    @property
    def total(self) -> Resources:
        """What the pod set requests in all."""
        return self.per_pod * self.count


class Phase(Enum):
    """Where a job stands from the queue's point of view."""

    QUEUED = "Queued"
    ADMITTED = "Admitted"
    FINISHED = "Finished"


@dataclass(frozen=True, slots=True)
class Workload:
    """One job as the decision core sees it.

    ``created`` and ``admitted_at`` are seconds since the epoch (from the object, never a clock read in the
    core). ``quota`` is the leaf quota's name. ``request`` is precomputed from the pod sets.
    """

    key: WorkloadKey
    quota: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    created: float = 0.0
    uid: str = ""
    phase: Phase = Phase.QUEUED
    admitted_at: float | None = None
    request: Resources = field(default=EMPTY, compare=False)
    order_key: tuple[int, float, str, str] = field(init=False, repr=False, compare=False)
    """Dequeue order inside a quota: priority descending, then creation time, then namespace and name (made
    once, with the job: a pass sorts a million jobs by it)."""

    def __post_init__(self) -> None:
        if self.request is EMPTY and self.pod_sets:
            req = EMPTY
            for pod_set in self.pod_sets:
                req = req + pod_set.total
            object.__setattr__(self, "request", shared(req))
        key = self.key
        object.__setattr__(self, "order_key", (-self.priority, self.created, key.namespace, key.name))

    @property
    def request_with_count(self) -> Resources:
        """The request plus one ``kube-queue/max-jobs`` (the job itself counts against job caps)."""
        return self.request + {MAX_JOBS: NANO}


# Effective pod request ---------------------------------------------------------------------------------------

_POD_LEVEL = ("cpu", "memory")
"""Resources that pod-level ``spec.resources`` may set (besides ``hugepages-*``)."""


def _is_pod_level_resource(name: str) -> bool:
    return name in _POD_LEVEL or name.startswith("hugepages-")


def _quantities(raw: object, where: str) -> dict[str, int]:
    """A resource list as nano-units; ``WorkloadError`` naming ``where`` and the resource otherwise."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise WorkloadError(f"{where}: expected a mapping of resource name to quantity, got {raw!r}")
    out: dict[str, int] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise WorkloadError(f"{where}: resource names must be non-empty strings, got {name!r}")
        try:
            amount = parse_quantity(value)
        except QuantityError as error:
            raise WorkloadError(f"{where}, resource {name!r}: invalid quantity {value!r}: {error.why}") from None
        if amount < 0:
            raise WorkloadError(f"{where}, resource {name!r}: quantity {value!r} must not be negative")
        out[name] = amount
    return out


def _container_request(container: object, kind: str, index: int) -> dict[str, int]:
    """One container's requests, a limit standing in for a missing request of the same resource (the
    defaulting Kubernetes applies when it creates the pod)."""
    if not isinstance(container, Mapping):
        raise WorkloadError(f"{kind} #{index}: expected a container object, got {container!r}")
    name = container.get("name")
    where = f"{kind} {name!r}" if isinstance(name, str) and name else f"{kind} #{index}"
    resources = container.get("resources")
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise WorkloadError(f"{where}: resources must be an object with requests and limits")
    requests = _quantities(resources.get("requests"), f"{where} requests")
    for resource, amount in _quantities(resources.get("limits"), f"{where} limits").items():
        requests.setdefault(resource, amount)
    return requests


def _containers(pod_spec: Obj, field_name: str) -> Sequence[object]:
    value = pod_spec.get(field_name)
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str | bytes):
        raise WorkloadError(f"pod spec {field_name}: expected a list of containers, got {value!r}")
    return value


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = max(into.get(name, amount), amount)


def _aggregate_container_requests(pod_spec: Obj) -> dict[str, int]:
    """``AggregateContainerRequests`` of ``k8s.io/component-helpers/resource``: the app containers and the
    restartable (sidecar) init containers add up; each init container needs its own request plus the
    sidecars started before it; the pod needs the larger of the two, per resource."""
    result: dict[str, int] = {}
    for index, container in enumerate(_containers(pod_spec, "containers")):
        _add(result, _container_request(container, "container", index))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for index, container in enumerate(_containers(pod_spec, "initContainers")):
        request = _container_request(container, "init container", index)
        restartable = isinstance(container, Mapping) and container.get("restartPolicy") == "Always"
        if restartable:
            _add(result, request)
            _add(sidecars, request)
            _max(init_peak, sidecars)
        else:
            while_running = dict(request)
            _add(while_running, sidecars)
            _max(init_peak, while_running)
    _max(result, init_peak)
    return result


def pod_request(pod_spec: Obj) -> Resources:
    """The effective request of one pod, as kube-scheduler computes it (``resource.PodRequests``).

    Per resource: the larger of (app containers + sidecar init containers) and the peak of the init
    phase (each non-restartable init container plus the sidecars declared before it); pod-level
    ``spec.resources`` (cpu, memory, hugepages-*) override the containers' sum as Kubernetes defaults them;
    ``spec.overhead`` is added. A container's limit stands in for its missing request. Zero amounts are
    dropped, and so is the extender's marker (:data:`~webhook.api.names.EXTENDER_RESOURCE`): it only routes the
    pod, no quota counts it. Raises :class:`WorkloadError` naming the container and resource of a bad quantity.
    """
    if not isinstance(pod_spec, Mapping):
        raise WorkloadError(f"expected a pod spec object, got {pod_spec!r}")
    result = _aggregate_container_requests(pod_spec)

    pod_resources = pod_spec.get("resources")
    if pod_resources is not None:
        if not isinstance(pod_resources, Mapping):
            raise WorkloadError("pod spec resources: must be an object with requests and limits")
        pod_requests = _quantities(pod_resources.get("requests"), "pod-level requests")
        pod_limits = _quantities(pod_resources.get("limits"), "pod-level limits")
        if pod_limits:
            # SetDefaults_Pod (defaultPodRequests): a missing pod-level request of cpu/memory defaults to the
            # containers' aggregate, then to the pod-level limit.
            for name in _POD_LEVEL:
                if name not in pod_requests and name in result:
                    pod_requests[name] = result[name]
            for name, amount in pod_limits.items():
                if name not in pod_requests and _is_pod_level_resource(name):
                    pod_requests[name] = amount
        for name, amount in pod_requests.items():
            if _is_pod_level_resource(name):
                result[name] = amount

    _add(result, _quantities(pod_spec.get("overhead"), "pod overhead"))
    return Resources({name: amount for name, amount in result.items() if amount and name != EXTENDER_RESOURCE})


def running_pod_request(pod: Obj) -> Resources:
    """What a pod holds: :func:`pod_request` of its spec, and per container at least what the kubelet allocated
    it (``status.containerStatuses[].allocatedResources`` and ``.resources.requests``). After an in-place
    resize the spec says the new size before the kubelet runs the pod with it; a pod counts at the larger of
    the two, as kube-scheduler counts it, until both agree."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise WorkloadError(f"expected a pod with a spec object, got {spec!r}")
    status = pod.get("status")
    allocated: dict[str, dict[str, int]] = {}
    statuses = status.get("containerStatuses") if isinstance(status, Mapping) else None
    for entry in statuses if isinstance(statuses, list) else ():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        amounts = _quantities(entry.get("allocatedResources"), f"container {entry['name']} allocatedResources")
        running = entry.get("resources")
        if isinstance(running, Mapping):
            for name, amount in _quantities(running.get("requests"), f"container {entry['name']} resources").items():
                amounts[name] = max(amounts.get(name, 0), amount)
        if amounts:
            allocated[entry["name"]] = amounts
    requested = pod_request(spec)
    if not allocated:
        return requested
    containers = []
    for container in spec.get("containers") or ():
        if not isinstance(container, Mapping) or container.get("name") not in allocated:
            containers.append(container)
            continue
        resources = container.get("resources")
        resources = dict(resources) if isinstance(resources, Mapping) else {}
        requests = resources.get("requests")
        requests = dict(requests) if isinstance(requests, Mapping) else {}
        for name, amount in allocated[container["name"]].items():
            requests[name] = f"{amount}n"
        resources["requests"] = requests
        containers.append({**container, "resources": resources})
    held = pod_request({**spec, "containers": containers})
    names = dict.fromkeys([*requested, *held])
    return Resources({name: max(requested.get_or_zero(name), held.get_or_zero(name)) for name in names})


def pod_set(name: str, count: int, pod_spec: Obj) -> PodSet:
    """A :class:`PodSet` of ``count`` pods shaped by ``pod_spec``; ``WorkloadError`` on a negative or
    non-integer count or a bad quantity (the message names the pod set)."""
    if isinstance(count, bool) or not isinstance(count, int):
        raise WorkloadError(f"pod set {name!r}: the pod count must be an integer, got {count!r}")
    if count < 0:
        raise WorkloadError(f"pod set {name!r}: the pod count must not be negative, got {count}")
    try:
        per_pod = pod_request(pod_spec)
    except WorkloadError as error:
        raise WorkloadError(f"pod set {name!r}: {error}") from None
    return PodSet(name=name, count=count, per_pod=shared(per_pod))


request_amounts = attrgetter("request._items")
"""A workload's request as its plain dict of amounts (read-only by convention), at C speed over many jobs."""
