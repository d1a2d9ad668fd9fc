"""The pods as the extender keeps them: slimmed on arrival, their requests parsed once per shape.

:func:`pod_essentials` is what the pod watch stores of each pod; :class:`RequestCache` parses requests;
:class:`PodRecord` is one cached pod with its request and the quota node it is charged to.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from webhook.api.objects import Doc, Obj
from webhook.core.dra import ClaimKey
from webhook.core.placement import PodView
from webhook.core.resources import EMPTY, Resources
from webhook.core.selectors import FrozenLabels
from webhook.core.workload import WorkloadError, pod_request

log = logging.getLogger(__name__)

Marks = tuple[FrozenLabels, FrozenLabels]
"""A unit's ``podLabels`` and ``podAnnotations``."""


def uid_of(pod: Obj) -> str:
    """The uid of a raw pod object (``""`` when it has none)."""
    metadata = pod.get("metadata")
    uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
    return uid if isinstance(uid, str) else ""


def priority_of(pod: Obj) -> int:
    """The pod's ``spec.priority`` (the API server resolves its PriorityClass into it), 0 when absent."""
    spec = pod.get("spec")
    priority = spec.get("priority") if isinstance(spec, Mapping) else None
    return priority if type(priority) is int else 0


def pod_key(view: PodView) -> str:
    """The cache key of a pod: its uid, else ``namespace/name``."""
    return view.uid or view.key


_POD_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "creationTimestamp",
    "deletionTimestamp",
    "ownerReferences",
)
_POD_SPEC = ("nodeName", "resources", "overhead", "priority", "resourceClaims")
_CONTAINER = ("name", "resources", "restartPolicy")


def _pick(obj: object, keys: Sequence[str]) -> object:
    """``obj`` with only ``keys`` when it is a mapping (anything else as it is: malformed stays malformed)."""
    if not isinstance(obj, Mapping):
        return obj
    return {key: obj[key] for key in keys if key in obj}


def pod_essentials(obj: Obj) -> Doc:
    """The parts of a Pod the extender reads (:func:`~webhook.core.placement.pod_view`,
    :func:`~webhook.core.workload.pod_request`, :func:`priority_of`, the claims
    :func:`~webhook.core.dra.pod_claim_refs` reads, the cache's key and resource version), nothing else.

    The pod watch keeps every pod; without ``managedFields``, volumes, env, probes and status conditions a
    pod is a few small dictionaries instead of a few hundred, so the cache takes a fraction of the memory
    and the garbage collector, which walks every dictionary it has not been told to skip, a fraction of the
    time - its full passes over tens of thousands of pods stall the event loop, requests included.
    """
    out: Doc = {"metadata": _pick(obj.get("metadata"), _POD_METADATA)}
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        kept: Doc = {key: spec[key] for key in _POD_SPEC if key in spec}
        for field_name in ("containers", "initContainers"):
            containers = spec.get(field_name)
            if isinstance(containers, list):
                kept[field_name] = [_pick(container, _CONTAINER) for container in containers]
            elif containers is not None:
                kept[field_name] = containers
        out["spec"] = kept
    elif spec is not None:
        out["spec"] = spec
    status = obj.get("status")
    if status is not None:
        out["status"] = _pick(status, ("phase", "resourceClaimStatuses"))
    return out


def _request_key(spec: Obj) -> bytes | None:
    """What :func:`~webhook.core.workload.pod_request` reads of a pod spec - every container's
    ``resources`` (and an init container's ``restartPolicy``), pod-level ``resources``, ``overhead`` -
    serialized (orjson, in C); ``None`` for a spec too odd to key (then the request is parsed as it is)."""
    containers, inits = spec.get("containers") or (), spec.get("initContainers") or ()
    if not isinstance(containers, (list, tuple)) or not isinstance(inits, (list, tuple)):
        return None
    try:
        return orjson.dumps(
            (
                [container.get("resources") for container in containers],
                [(c.get("resources"), c.get("restartPolicy")) for c in inits],
                spec.get("resources"),
                spec.get("overhead"),
            )
        )
    except (AttributeError, TypeError, orjson.JSONEncodeError):
        return None


class RequestCache:
    """Pod requests by :func:`_request_key`. Parsing quantities is the dearest part of reading a pod (exact
    fractions), and the pods of one Deployment or Job all ask the same: the filter and the pod's binding
    event parse each shape once. Bounded: emptied when it reaches ``size`` shapes."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._known: dict[bytes, Resources] = {}

    def request(self, pod: Obj, where: str) -> Resources:
        """The pod's effective request (``EMPTY``, logged, when its spec is malformed)."""
        spec = pod.get("spec")
        if not isinstance(spec, Mapping):
            return EMPTY
        key = _request_key(spec)
        known = None if key is None else self._known.get(key)
        if known is not None:
            return known
        try:
            request = pod_request(spec)
        except WorkloadError as error:
            log.warning("component=extender event=bad_pod_request pod=%s error=%r", where, str(error))
            return EMPTY
        if key is not None:
            if len(self._known) >= self.size:
                self._known.clear()
            self._known[key] = request
        return request


@dataclass(slots=True)
class PodRecord:
    """One cached pod: its view, its request (parsed once bound), where the request is charged, its priority."""

    view: PodView
    request: Resources
    charged: str | None
    """Quota node key the pod's request is charged to (bound, unfinished pods), else ``None``."""
    priority: int = 0
    """``spec.priority``: what preemption compares (:mod:`webhook.core.preemption`)."""
    loose: bool = False
    """No queued job accounts for it (:func:`~webhook.workloads.registry.queued_by_a_job`)."""
    claims: tuple[ClaimKey, ...] = ()
    """The DRA claims it holds (:func:`~webhook.core.dra.pod_claim_refs`), counted by
    :class:`~webhook.extender.claims.ClaimBook`."""
    own_job: bool = False
    """A bare Pod the queue released (:func:`~webhook.workloads.registry.is_its_own_job`)."""


def with_marks(view: PodView, marks: Marks) -> PodView:
    """``view`` as if it carried ``marks`` already (a placed pod counts so until the watch shows them)."""
    labels, annotations = marks
    return PodView(
        namespace=view.namespace,
        name=view.name,
        uid=view.uid,
        labels={**view.labels, **labels},
        annotations={**view.annotations, **annotations},
        node_name=view.node_name,
        terminating=view.terminating,
        finished=view.finished,
        created=view.created,
    )


def carries(view: PodView, marks: Marks) -> bool:
    """Whether the pod carries every label and annotation of ``marks``."""
    labels, annotations = marks
    return all(view.labels.get(k) == v for k, v in labels.items()) and all(
        view.annotations.get(k) == v for k, v in annotations.items()
    )
