"""``kq why`` for work the queue does not hold: a Deployment, StatefulSet, ReplicaSet or DaemonSet, or one pod
that no queued job accounts for (docs/pod-quota.md; such pods are "loose", docs/reclaim.md, "Pods").

Their pods are not queued. Each runs once its quota has room for it under ``max`` (counting the room admitted
jobs hold) and a node has room; reclaim may evict one while its quota uses more than its ``min``. So the
answer is not a place in line: it names the quota and how much of it is used, which pods wait and what the
scheduler and the extender last said of each, and which of its pods reclaim took back lately.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, NotRequired, Required, TypedDict

from webhook.api import kinds
from webhook.api.names import MAX_JOBS, QUOTA_LABEL, REASON_EVICTED
from webhook.api.objects import (
    Obj,
    deleting,
    event_time,
    involved_object,
    labels_of,
    mapping,
    name_of,
    owner_references_of,
    pod_phase,
    rfc3339_seconds,
    spec_of,
    status_of,
    uid_of,
)
from webhook.core.quota import QuotaNode, QuotaTree
from webhook.core.resources import Resources
from webhook.readmodel import pod_waits
from webhook.readmodel.kubeapi import ApiError, KubeApi, Ref

WORKLOAD_KINDS: Final[Mapping[str, kinds.Kind]] = {
    **dict.fromkeys(("deployment", "deployments", "deploy"), kinds.DEPLOYMENT),
    **dict.fromkeys(("statefulset", "statefulsets", "sts"), kinds.STATEFUL_SET),
    **dict.fromkeys(("replicaset", "replicasets", "rs"), kinds.REPLICA_SET),
    **dict.fromkeys(("daemonset", "daemonsets", "ds"), kinds.DAEMON_SET),
}
"""The workload kinds ``kq why`` explains by name (``kq why deployment/web``), as kubectl spells them."""
POD_NAMES: Final = ("pod", "pods", "po")
"""How ``kq why pod/NAME`` may spell the pod kind, as kubectl does."""
BY_NAME: Final = (kinds.DEPLOYMENT, kinds.STATEFUL_SET)
"""The kinds a bare name (``kq why web``) is looked for in when no job has that name."""
RECLAIM_SHOWN: Final = 3
"""How many recent reclaims of its pods the text lists (the JSON has them all)."""
NAMES_SHOWN: Final = 3
"""How many pod names a line of waiting pods lists."""
GENERATED_SUFFIX: Final = 5
"""The length of the random suffix the API server gives a ``generateName`` (a ReplicaSet's or DaemonSet's pods)."""
PODS: Final = Ref.of(kinds.POD)


@dataclass(frozen=True, slots=True)
class LooseWork:
    """A workload (or one pod) of a namespace, its pods now, and the reclaim Events of its pods."""

    kind: str
    namespace: str
    name: str
    pods: tuple[Obj, ...]
    expected: int | None
    """How many pods it asks for (``None`` for one pod, or a DaemonSet not yet counted)."""
    reclaimed: tuple[Obj, ...]
    """The controller's ``Evicted`` Events of its pods, newest first."""
    owner: tuple[str, str] | None = None
    """For one pod: its controller's kind and name, ``("ReplicaSet", "web-7d4f9")``."""
    preemption: Mapping[str, Obj] = field(default_factory=dict)
    """Pod name -> the extender's latest ``PreemptionRefused`` Event on it (docs/pod-quota.md, "Preemption")."""


def find_loose(api: KubeApi, namespace: str, kind_text: str | None, name: str) -> LooseWork | None:
    """The workload or pod ``[KIND/]NAME`` names in ``namespace``, or ``None`` when there is none to explain
    (no such object; ``kind_text`` names a kind this module does not explain)."""
    work = _find(api, namespace, kind_text, name)
    if work is None or not work.pods:
        return work
    from webhook.readmodel.fetch import extender_events  # noqa: PLC0415

    return replace(work, preemption=pod_waits.newest_refusals(extender_events(api, namespace)))


def _find(api: KubeApi, namespace: str, kind_text: str | None, name: str) -> LooseWork | None:
    if kind_text is None:
        for kind in BY_NAME:
            try:
                found = _workload(api, namespace, kind, name)
            except ApiError:  # not allowed to read that kind: the job's "not found" says more than a 403
                continue
            if found is not None:
                return found
        return None
    if kind_text.lower() in POD_NAMES:
        return _one_pod(api, namespace, name)
    named = WORKLOAD_KINDS.get(kind_text.lower())
    return _workload(api, namespace, named, name) if named is not None else None


def _get(api: KubeApi, kind: kinds.Kind, namespace: str, name: str) -> Obj | None:
    try:
        return api.get(Ref.of(kind), name, namespace)
    except ApiError as error:
        if error.not_found:
            return None
        raise


def _owned_by(objects: Sequence[Obj], uids: set[str]) -> list[Obj]:
    return [obj for obj in objects if any(ref.get("uid") in uids for ref in owner_references_of(obj))]


def _workload(api: KubeApi, namespace: str, kind: kinds.Kind, name: str) -> LooseWork | None:
    obj = _get(api, kind, namespace, name)
    if obj is None:
        return None
    owners = {uid_of(obj)}
    bases = [name]
    if kind == kinds.DEPLOYMENT:
        sets = _owned_by(api.list(Ref.of(kinds.REPLICA_SET), namespace), owners)
        owners = {uid_of(replica_set) for replica_set in sets}
        bases = [name_of(replica_set) for replica_set in sets]
    pods = _owned_by(api.list(PODS, namespace), owners)
    ordinal = kind == kinds.STATEFUL_SET

    def ours(pod: str) -> bool:
        return any(_named_after(pod, base, ordinal=ordinal) for base in bases)

    return LooseWork(kind.kind, namespace, name, tuple(pods), _expected(kind, obj), _reclaimed(api, namespace, ours))


def _expected(kind: kinds.Kind, obj: Obj) -> int | None:
    """How many pods a workload asks for: a DaemonSet's ``desiredNumberScheduled`` (``None`` before it is
    counted), else its ``replicas`` (1 when unset)."""
    if kind == kinds.DAEMON_SET:
        desired = status_of(obj).get("desiredNumberScheduled")
        return desired if isinstance(desired, int) else None
    replicas = spec_of(obj).get("replicas", 1)
    return replicas if isinstance(replicas, int) else 1


def _named_after(pod: str, base: str, *, ordinal: bool) -> bool:
    """A pod name its workload made: ``<StatefulSet>-<ordinal>``, else ``<owner>-<random suffix of 5>``."""
    if not pod.startswith(f"{base}-"):
        return False
    suffix = pod[len(base) + 1:]
    return suffix.isdigit() if ordinal else len(suffix) == GENERATED_SUFFIX and suffix.isalnum()


def _one_pod(api: KubeApi, namespace: str, name: str) -> LooseWork | None:
    pod = _get(api, kinds.POD, namespace, name)
    reclaimed = _reclaimed(api, namespace, lambda pod_name: pod_name == name)
    if pod is None and not reclaimed:
        return None
    owner = None
    for ref in owner_references_of(pod) if pod is not None else ():
        if ref.get("controller"):
            owner = (str(ref.get("kind") or ""), str(ref.get("name") or ""))
    return LooseWork(kinds.POD.kind, namespace, name, (pod,) if pod is not None else (), None, reclaimed, owner)


def _reclaimed(api: KubeApi, namespace: str, ours: Callable[[str], bool]) -> tuple[Obj, ...]:
    """The controller's eviction Events of the pods ``ours`` (a name test) accepts, newest first."""
    from webhook.readmodel.fetch import controller_events  # noqa: PLC0415

    found = [event for event in controller_events(api, namespace)
             if event.get("reason") == REASON_EVICTED and involved_object(event).get("kind") == kinds.POD.kind
             and ours(str(involved_object(event).get("name") or ""))]
    return tuple(sorted(found, key=event_time, reverse=True))


# The answer ---------------------------------------------------------------------------------------------------


def _running(pod: Obj) -> bool:
    return pod_phase(pod) == "Running" and not deleting(pod)


def _usage_line(node: QuotaNode, used: Resources | None) -> str:
    """``cpu used 10 of min 8, max 12; memory ...`` for the resources the quota caps or guarantees."""
    from webhook.readmodel.output import quantity  # noqa: PLC0415

    parts = []
    for resource in sorted(set(node.max) | set(node.min)):
        bounds = [f"min {quantity(resource, node.min.get_or_zero(resource))}"]
        if resource in node.max:
            bounds.append(f"max {quantity(resource, node.max[resource])}")
        head = f"{resource} used {quantity(resource, used.get_or_zero(resource))} of" if used is not None else resource
        parts.append(f"{head} {', '.join(bounds)}")
    return "; ".join(parts)


def _borrows(node: QuotaNode, used: Resources | None) -> bool:
    """The quota uses more than its ``min`` of a resource (``kube-queue/max-jobs`` counts jobs: not borrowed)."""
    return used is not None and any(amount > node.min.get_or_zero(name) for name, amount in used.items()
                                    if name != MAX_JOBS)


class LooseJson(TypedDict, total=False):
    """``kq why -o json``'s answer for work the queue does not hold."""

    kind: Required[str]
    namespace: Required[str]
    name: Required[str]
    queued: Required[bool]
    """Always false: its pods are not queued."""
    quota: str
    running: Required[int]
    expected: NotRequired[int]
    podsWaiting: list[pod_waits.PodsWaiting]
    reclaimed: list[dict[str, object]]
    explanation: Required[str]


def answer_loose(work: LooseWork, tree: QuotaTree | None, used: Mapping[str, Resources] | None, *, now: float,
                 width: int, tree_problem: str | None = None) -> tuple[str, LooseJson]:
    """The text and the JSON of ``kq why`` for ``work``; ``used`` is the tree's status per node key (``None``
    when it has none)."""
    from webhook.readmodel.output import wrap  # noqa: PLC0415

    running = sum(1 for pod in work.pods if _running(pod))
    out: LooseJson = {"kind": work.kind, "namespace": work.namespace, "name": work.name, "queued": False,
                      "running": running, "explanation": ""}
    if work.kind == kinds.POD.kind:
        state = "is gone" if not work.pods else ("runs" if running else f"is {pod_phase(work.pods[0]) or 'Pending'}")
        owner = f" (made by {work.owner[0]} {work.owner[1]})" if work.owner else ""
        head = f"Pod {work.namespace}/{work.name}{owner} {state}."
    else:
        if work.expected is not None:
            out["expected"] = work.expected
        of = f" of {work.expected}" if work.expected is not None else ""
        plural = "s" if (work.expected or running) != 1 else ""
        head = f"{work.kind} {work.namespace}/{work.name}: {running}{of} pod{plural} run."
    leaf = tree.leaf_for_namespace(work.namespace) if tree is not None else None
    if leaf is not None:
        out["quota"] = leaf.full_name
    lines = [wrap(head, 2, width)]
    lines += _quota_lines(work, leaf, used, tree_problem, width)
    lines += _wait_lines(work, out, now, width)
    lines += _reclaim_lines(work, out, now, width)
    out["explanation"] = "\n".join(lines)
    return out["explanation"], out


def _quota_lines(work: LooseWork, leaf: QuotaNode | None, used: Mapping[str, Resources] | None,
                 tree_problem: str | None, width: int) -> list[str]:
    """Which quota keeps its pods, how much of it is used, and whether reclaim may take them."""
    from webhook.readmodel.output import wrap  # noqa: PLC0415

    one_pod = work.kind == kinds.POD.kind
    subject, each, pods_it = ("It is", "it", "it") if one_pod else ("Its pods are", "each one", "its pods")
    if one_pod and not work.pods:  # a pod reclaim took: gone, nothing of it counts
        return []
    if leaf is None and tree_problem:
        labels = sorted({labels_of(pod).get(QUOTA_LABEL, "") for pod in work.pods} - {""})
        carry = "It carries" if one_pod else "Its pods carry"
        said = f" {carry} the label of quota {', '.join(labels)}." if labels else ""
        why = ("they need read access to ElasticQuotaTrees, which the role kube-queue-quota-viewer grants "
               "(manifests/console/rbac.yaml)" if "forbidden" in tree_problem.lower() else tree_problem)
        return [wrap(f"{subject} not queued (only jobs are).{said} Its quota's figures are not shown: {why}.",
                     2, width)]
    if leaf is None:
        return [wrap(f"{subject} not queued: namespace {work.namespace} is not under quota (no leaf of the "
                     "ElasticQuotaTree lists it), so kube-queue does not hold or count its pods; only "
                     "kube-scheduler places them.", 2, width)]
    lines = [wrap(
            f"{subject} not queued (only jobs are): {each} runs once quota {leaf.full_name} has room for it "
            "under its max, counting the room admitted jobs hold, and a node has room for it (docs/pod-quota.md).",
            2, width)]
    leaf_used = used.get(leaf.key) if used is not None else None
    usage = _usage_line(leaf, leaf_used)
    if usage:
        source = "the ElasticQuotaTree's status" if leaf_used is not None else "the tree; no status yet"
        lines.append(wrap(f"Quota {leaf.full_name}: {usage} ({source}).", 2, width))
    if _borrows(leaf, leaf_used) and work.kind != kinds.DAEMON_SET.kind:
        lines.append(wrap(
            f"The quota uses more than its min, so reclaim may evict {pods_it} (lowest priority first, then the "
            "newest) when another quota needs its min back; a replacement waits for room (docs/reclaim.md, "
            "\"Pods\").", 2, width))
    return lines


def _wait_lines(work: LooseWork, out: LooseJson, now: float, width: int) -> list[str]:
    """The pods that wait, grouped by what the scheduler last said of them, with why their preemption was
    refused when the extender said so."""
    from webhook.readmodel.output import wrap  # noqa: PLC0415

    waiting = [pod for pod in work.pods if pod_phase(pod) != "Failed" and not deleting(pod)]
    waits = pod_waits.pending_reasons(waiting, work.preemption)
    if not waits:
        return []
    out["podsWaiting"] = pod_waits.pods_waiting_json(waits, names=True)
    count = sum(reason.count for reason in waits)
    them, they_start = ("them", "they start") if count != 1 else ("it", "it starts")
    lines = [f"{count} pod{'s' if count != 1 else ''} wait{'s' if count == 1 else ''}:"]
    for reason in waits:
        more = f" and {len(reason.names) - NAMES_SHOWN} more" if len(reason.names) > NAMES_SHOWN else ""
        lines.append(wrap(f"{', '.join(reason.names[:NAMES_SHOWN])}{more}: {reason.text}", 4, width, lead="  "))
        lines += filter(None, [pod_waits.refusal_line(reason, now, width)])
    if any(reason.kind == pod_waits.PodWait.POD_QUOTA for reason in waits):
        lines.append(wrap(
            f"The quota's max is full for {them}: {they_start} as the quota's other pods end or its jobs finish (the "
            f"scheduler tries {them} again as room frees). A higher PriorityClass lets the scheduler preempt "
            f"lower-priority pods for {them} only where the quota's rules allow it (docs/pod-quota.md, "
            "\"Preemption\").", 2, width))
    return lines


def _reclaim_lines(work: LooseWork, out: LooseJson, now: float, width: int) -> list[str]:
    """The pods reclaim evicted, newest first (as long as the API server keeps their Events)."""
    from webhook.readmodel.output import age, wrap  # noqa: PLC0415

    if not work.reclaimed:
        return []
    out["reclaimed"] = [{"pod": str(involved_object(event).get("name") or ""), "at": rfc3339_seconds(event_time(event)),
                         "message": str(event.get("message") or "")} for event in work.reclaimed]
    lines = ["Reclaim evicted it:" if work.kind == kinds.POD.kind else
             f"Reclaim evicted {len(work.reclaimed)} of its pods:"]
    said: dict[str, list[Obj]] = {}  # one plan evicts several pods with the same words
    for event in work.reclaimed:
        said.setdefault(str(event.get("message") or ""), []).append(event)
    for message, events in list(said.items())[:RECLAIM_SHOWN]:
        pods = " and ".join(str(involved_object(event).get("name")) for event in events)
        lines.append(wrap(f"{pods}, {age(event_time(events[0]), now)} ago: {message}", 4, width, lead="  "))
    return lines


@dataclass(frozen=True, slots=True)
class LooseAnswer:
    """``kq why`` of work the queue does not hold (``text``, ``body``), or the job a named pod belongs to."""

    text: str = ""
    body: LooseJson | None = None
    job: tuple[str, str] | None = None
    """For a job's pod: the job's kind (``Job``) and name: that job is what to explain."""


def explain_loose(api: KubeApi, namespace: str, kind_text: str | None, name: str, *, now: float,
                  width: int) -> LooseAnswer | None:
    """What both faces show for ``[KIND/]NAME`` that is no job: the answer over the tree's status, the job a
    pod belongs to, or ``None`` when there is nothing of that name."""
    from webhook.readmodel.fetch import read_tree  # noqa: PLC0415
    from webhook.readmodel.view import Snapshot, find_adapter  # noqa: PLC0415

    work = find_loose(api, namespace, kind_text, name)
    if work is None:
        return None
    job_kind = find_adapter(work.owner[0]) if work.owner is not None else None
    if work.owner is not None and job_kind is not None:
        return LooseAnswer(job=(job_kind.kind, work.owner[1]))
    tree_obj, problem = read_tree(api)
    snapshot = Snapshot(now=now, tree_obj=tree_obj, tree_problem=problem)
    text, body = answer_loose(work, snapshot.tree, read_used(snapshot.tree, tree_obj), now=now, width=width,
                              tree_problem=snapshot.problem)
    return LooseAnswer(text, body)


@dataclass(frozen=True, slots=True)
class LooseRow:
    """One workload of a namespace whose pods the queue does not hold, as a list shows it."""

    kind: str
    name: str
    ready: int
    expected: int | None
    """How many pods it asks for (``None``: a DaemonSet not yet counted)."""


LISTED: Final = (kinds.DEPLOYMENT, kinds.STATEFUL_SET, kinds.DAEMON_SET)
"""The workload kinds a namespace's list shows (a Deployment's ReplicaSets are its own)."""
LISTED_AT_MOST: Final = 200
"""How many of each kind a list shows, by name."""


def list_loose(api: KubeApi, namespace: str) -> tuple[list[LooseRow], list[str]]:
    """The Deployments, StatefulSets and DaemonSets of ``namespace`` with their ready pods, by kind and name;
    and, for each kind the user may not list, why."""
    rows: list[LooseRow] = []
    problems: list[str] = []
    for kind in LISTED:
        try:
            objects = sorted(api.list(Ref.of(kind), namespace), key=name_of)[:LISTED_AT_MOST]
        except ApiError as error:
            problems.append(f"cannot list {kind.plural} in {namespace}: {error.one_line()}")
            continue
        for obj in objects:
            ready = status_of(obj).get("numberReady" if kind == kinds.DAEMON_SET else "readyReplicas", 0)
            rows.append(LooseRow(kind.kind, name_of(obj), ready if isinstance(ready, int) else 0,
                                 _expected(kind, obj)))
    return rows, problems


def read_used(tree: QuotaTree | None, tree_obj: Obj | None) -> dict[str, Resources] | None:
    """The tree's status as ``used`` per node key, ``None`` when it has none."""
    from webhook.core.tree_status import used_from_status  # noqa: PLC0415

    if tree is None or tree_obj is None:
        return None
    return used_from_status(tree, mapping(tree_obj).get("status"))
