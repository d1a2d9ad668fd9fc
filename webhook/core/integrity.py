"""The queue's integrity rules: what a user may write into a job at submission and change afterwards.

Pure decisions over :class:`JobFacts`, the few things of one version of a job that the rules read (an adapter
in ``webhook.workloads`` extracts them from the raw object). Each problem is one sentence that starts with
the field it is about and says what to do instead:

* at submission (:func:`submission_problems`): a PriorityClass that does not exist is refused (the job's pods
  would be refused by the API server); a literal ``priority`` in a job's pod template is refused (the
  API server refuses every pod made from it, "the integer value of priority must not be provided in pod
  spec", so the job would hold quota for ever); queue priority comes only from a PriorityClass. A Pod's
  ``spec.priority`` is the value the API server resolved from its class, so it must match that class;
* on update (:func:`update_problems`): a held job may not be released by a user; what decides a job's place
  (its quota labels, its submission stamp, its priority class) may not change, nor may the controller's own
  records on it (admission, eviction, backoff: docs/start-timeout.md); an admitted job (released,
  not finished) may not change its size or requests unless it is suspended again in the same change; a
  request that the namespace's LimitRange defaults (written in at submission) may not be removed.

The controller's own writes never reach these rules (the admission shell lets its identity through).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, replace

from webhook.core.pod_templates import node_refusal
from webhook.core.quantity import format_quantity
from webhook.core.quota import QuotaTree
from webhook.core.resources import Resources, is_binary_resource
from webhook.core.workload import PodSet

PRIORITY_REFUSED_BY_API = "the integer value of priority must not be provided in pod spec"
"""The API server's own words for a pod that carries a literal priority (quoted in refusals)."""

WORKLOAD_CONTROLLERS = (
    "system:serviceaccount:kube-system:*",
    "system:kube-controller-manager",
    "system:node:*",
    "system:serviceaccount:kubeflow:*",
    "system:serviceaccount:mpi-operator:*",
    "system:serviceaccount:kuberay-system:*",
    "system:serviceaccount:ray-system:*",
    "system:serviceaccount:spark-operator:*",
    "system:serviceaccount:jobset-system:*",
)
"""Who creates pods for workloads (``*`` ends a prefix): Kubernetes' own controllers (kube-controller-manager
with service account credentials), kubelets (mirror pods), and the Kubeflow, MPI, KubeRay, Spark and JobSet
operators in their usual namespaces. Only their pods are trusted to belong to the owner they name
(``--pod-creator`` adds more; docs/security.md)."""


def is_workload_controller(username: str, patterns: tuple[str, ...] = WORKLOAD_CONTROLLERS) -> bool:
    """Whether ``username`` matches one of ``patterns`` (exact, or a prefix when the pattern ends in ``*``)."""
    return any(
        username.startswith(pattern[:-1]) if pattern.endswith("*") else username == pattern for pattern in patterns
    )


NODE_BINDERS = ("system:node:*",)
"""Who may create a Pod already bound to a node in a namespace under quota: kubelets (their mirror pods). A workload
controller may not: it copies a ``nodeName`` from what a user wrote (a PyTorchJob's template, an Argo Workflow's
``podSpecPatch``), and a pod bound at creation skips the scheduler and the extender, which keep the quota's
``max``, a ResourcePolicy's order and the virtual node's pod cap."""


def may_bind_at_creation(username: str) -> bool:
    """Whether ``username`` may create a Pod with ``spec.nodeName`` set (:data:`NODE_BINDERS`)."""
    return is_workload_controller(username, NODE_BINDERS)


def pod_creation_problems(node_name: object, binder: bool, quota: str) -> list[str]:
    """Why a Pod created in a namespace under ``quota`` is refused: a ``spec.nodeName`` set by anyone but a
    kubelet (``binder``) skips the scheduler, and so the scheduler's pod-level quota."""
    if not node_name or binder:
        return []
    return [
        f"spec.nodeName: a Pod in a namespace under quota {quota} must go through the scheduler, which keeps "
        f"its quota within max; remove spec.nodeName ({node_name}) and ask for the node with a nodeSelector "
        f"(kubernetes.io/hostname: {node_name}) or node affinity instead"
    ]


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What the integrity rules read of one version of a job.

    Field names are written as users write them (``spec.template.spec.priorityClassName``), so every
    problem starts with the field it is about.
    """

    kind: str
    hold_field: str
    """Where the hold lives: ``spec.suspend``, ``spec.runPolicy.suspend``, ``spec.schedulingGates``."""
    gated: bool
    """The hold is a scheduling gate (a Pod's): it can be removed, never set again."""
    held: bool
    finished: bool
    quota_labels: Mapping[str, str | None]
    """Field -> value of the quota label on the job and on each pod template."""
    stamp: object
    """The submission stamp annotation (``None`` when absent)."""
    stamp_field: str
    priority_classes: Mapping[str, str | None]
    """Field -> PriorityClass name, for every field that can name the job's class."""
    literal_priorities: Mapping[str, object]
    """Field -> literal ``priority`` of each pod template that carries one."""
    pod_sets: tuple[PodSet, ...] | None
    """``None`` when they cannot be read."""
    pod_set_fields: Mapping[str, str]
    """Pod set name -> the field of its template (``spec.template``)."""
    priority_is_resolved: bool = False
    """A Pod: the API server's Priority admission set ``spec.priority`` from the class before any webhook."""
    controller_notes: Mapping[str, object] | None = None
    """Field -> value of each annotation only the controller writes (its records on the job)."""
    unrequested: frozenset[str] = frozenset()
    """Request fields a container leaves out although the namespace's LimitRange gives its pods a default
    (``spec.template.spec.containers[0].resources.requests.cpu``): the pods would get it, uncounted."""
    unsized: Mapping[str, str] | None = None
    """``runtimeClassName`` field -> the class, for each template naming a RuntimeClass whose pod overhead the job
    does not have recorded (``spec.template.spec.runtimeClassName``): its pods would get it, uncounted."""
    node_names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Field -> node, for each place the job's operator would copy a ``nodeName`` into its pods from (a template's
    ``spec.nodeName``, an Argo ``podSpecPatch``)."""


def submission_problems(facts: JobFacts, priority_classes: Mapping[str, int]) -> list[str]:
    """What refuses the job at submission (``[]`` when nothing): literal priorities (see the module notes)."""
    problems: list[str] = []
    class_name = next((name for name in facts.priority_classes.values() if name), None)
    if class_name is not None and class_name not in priority_classes and not facts.priority_is_resolved:
        field = next(field for field, name in sorted(facts.priority_classes.items()) if name == class_name)
        problems.append(
            f"{field}: PriorityClass {class_name!r} does not exist, so the job's pods would be refused and its "
            "place in the queue is unknown; name an existing class (kubectl get priorityclasses) or ask an "
            "operator to create it"
        )
    for field, value in sorted(facts.literal_priorities.items()):
        if facts.priority_is_resolved:
            expected = priority_classes.get(class_name, None) if class_name else 0
            if expected is None or value == expected:
                continue
            source = f"PriorityClass {class_name!r}" if class_name else "no PriorityClass"
            problems.append(
                f"{field}: {value!r} is not the priority of {source} ({expected}); remove {field} and name a "
                "PriorityClass in spec.priorityClassName: the queue orders jobs by their PriorityClass only"
            )
            continue
        problems.append(
            f"{field}: a literal priority ({value!r}) is not allowed: the API server refuses every pod that "
            f"carries one (\"{PRIORITY_REFUSED_BY_API}\"), so the job could never start. Remove it and name a "
            "PriorityClass in priorityClassName (kubectl get priorityclasses): the queue orders jobs by "
            "their PriorityClass only"
        )
    problems.extend(_node_problems(facts.node_names))
    return problems


def _node_problems(node_names: Mapping[str, str]) -> list[str]:
    """A node named where the job's operator copies it into its pods: they would skip the scheduler, and the
    pod guard refuses them one by one (:data:`NODE_BINDERS`); the job is refused where its author sees why."""
    return [node_refusal(field) for field in sorted(node_names)]


def update_problems(old: JobFacts, new: JobFacts, priority_classes: Mapping[str, int]) -> list[str]:
    """Why a user's change from ``old`` to ``new`` is refused (``[]`` when it is allowed)."""
    problems: list[str] = []
    if old.held and not new.held:
        what = "remove its scheduling gate" if old.gated else "un-suspend it"
        problems.append(f"{new.hold_field}: only kube-queue may {what}")
    problems.extend(_label_problems(old.quota_labels, new.quota_labels))
    if old.stamp != new.stamp:
        problems.append(f"{new.stamp_field}: the submission stamp (its place in the queue) is set by kube-queue only")
    notes_before, notes_after = old.controller_notes or {}, new.controller_notes or {}
    for field in sorted(set(notes_before) | set(notes_after)):
        if notes_before.get(field) != notes_after.get(field):
            problems.append(f"{field}: written by kube-queue only (its admission, eviction and backoff records, "
                            "what it sized the job with); leave it as it is")
    for field in sorted(set(old.priority_classes) | set(new.priority_classes)):
        before, after = old.priority_classes.get(field), new.priority_classes.get(field)
        if before != after:
            problems.append(
                f"{field}: the priority class decides the job's place in its queue and may not change once it "
                f"is queued ({before or 'none'} -> {after or 'none'}); delete and resubmit the job to change it"
            )
    literals = old.literal_priorities
    added = {field: value for field, value in new.literal_priorities.items() if literals.get(field) != value}
    if added:
        problems.extend(submission_problems(replace(new, literal_priorities=added, node_names={}), priority_classes))
    problems.extend(_node_problems({
        field: node for field, node in new.node_names.items() if old.node_names.get(field) != node
    }))
    for field in sorted(new.unrequested - old.unrequested):
        problems.append(
            f"{field}: may not be removed: the namespace's LimitRange would give the job's pods this request "
            "without the queue counting it; keep (or change) the request instead"
        )
    unsized_before = old.unsized or {}
    for field, name in sorted((new.unsized or {}).items()):
        if unsized_before.get(field) != name:
            problems.append(
                f"{field}: RuntimeClass {name!r} adds a pod overhead the queue did not size the job with when it "
                "was created, so its pods would use more than their quota counts; delete and resubmit the job to "
                "run it under this class"
            )
    problems.extend(_size_problems(old, new))
    return problems


def _label_problems(old: Mapping[str, str | None], new: Mapping[str, str | None]) -> list[str]:
    problems: list[str] = []
    for field in sorted(set(old) | set(new)):
        before, after = old.get(field), new.get(field)
        if before == after:
            continue
        if after is None:
            problems.append(f"{field}: the quota label ({before}) may not be removed")
        elif before is None:
            problems.append(f"{field}: the quota label is set by kube-queue only")
        else:
            problems.append(f"{field}: the quota label may not change ({before} -> {after})")
    return problems


def _describe(pod_set: PodSet | None) -> str:
    if pod_set is None:
        return "none"
    return f"{pod_set.count} pod(s) x ({pod_set.per_pod.describe()})"


def _size_problems(old: JobFacts, new: JobFacts) -> list[str]:
    """An admitted job that stays admitted keeps the pod sets the queue counted when it released it."""
    if old.held or old.finished or new.held or old.pod_sets is None:
        return []
    before = {pod_set.name: pod_set for pod_set in old.pod_sets}
    after = {pod_set.name: pod_set for pod_set in new.pod_sets or ()}
    changed = [name for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)]
    if new.pod_sets is None:
        changed = sorted(before)
    problems: list[str] = []
    for name in changed:
        field = new.pod_set_fields.get(name) or old.pod_set_fields.get(name) or "spec"
        fix = (
            "delete and resubmit it"
            if new.gated
            else f"suspend it first ({new.hold_field}: true; it keeps its place in the queue) or delete and "
            "resubmit it"
        )
        problems.append(
            f"{field}: pod set {name!r} would change from {_describe(before.get(name))} to "
            f"{_describe(after.get(name))}, but the job is admitted and its quota was counted for its size: "
            f"an admitted job cannot change its size or requests; {fix}"
        )
    return problems



def resize_problems(
    tree: QuotaTree,
    namespace: str,
    old: Resources,
    new: Resources,
    used: Mapping[str, Resources] | None,
    *,
    job_pod: bool,
) -> list[str]:
    """Why an in-place resize (``pods/resize``) of a pod in a namespace of ``tree`` is refused, from what the pod
    asked before (``old``) and after (``new``). Shrinking is always allowed. A pod of a queued job may not grow:
    its job was admitted at its size (the same rule as for the job itself). Any other pod may grow by what its
    quota leaves at every level: ``used`` (per node key, what the controller last counted, the pod itself
    included) plus the growth must stay within ``max``; without ``used`` the growth cannot be checked and is
    refused."""
    leaf = tree.leaf_for_namespace(namespace)
    if leaf is None:
        return []
    growth = {name: amount - old.get_or_zero(name) for name, amount in new.items() if amount > old.get_or_zero(name)}
    if not growth:
        return []
    grown = ", ".join(sorted(growth))
    if job_pod:
        return [
            f"spec.containers[*].resources: a pod of a queued job may not grow in place ({grown}): its job was "
            f"admitted at its size in quota {leaf.full_name}; suspend the job and change its pod template, or "
            "resubmit it with the new size"
        ]
    if used is None:
        return [
            f"spec.containers[*].resources: kube-queue does not know quota {leaf.full_name}'s usage yet, so it "
            f"cannot tell whether {grown} may grow; retry in a few seconds"
        ]
    problems: list[str] = []
    for node in tree.chain(leaf.key):
        have = used.get(node.key)
        for name, extra in sorted(growth.items()):
            cap = node.max.get(name)
            if cap is None:
                continue
            now = have.get_or_zero(name) if have is not None else 0
            if now + extra > cap:
                binary = is_binary_resource(name)
                problems.append(
                    f"spec.containers[*].resources: growing {name} by {format_quantity(extra, binary)} takes quota "
                    f"{node.full_name} to {format_quantity(now + extra, binary)} of its max "
                    f"{format_quantity(cap, binary)}; free room in the quota first (scale another workload down), "
                    "ask an operator for a larger quota, or grow it less"
                )
    return problems
