"""The validating handler: quota trees, ResourcePolicies, Queues, and the queue's integrity.

* ``ElasticQuotaTree`` (CREATE/UPDATE): every rule of the core (:func:`validate_tree_object`): only in
  ``kube-system``, only one per cluster, every node rule; the message names each node and rule.
* ``ResourcePolicy`` (CREATE/UPDATE): :func:`validate_policy`.
* ``Queue`` (CREATE/UPDATE): ``spec.queuePolicy`` is ``Round``, ``Priority`` or ``Block`` (absent = Round).
* ``ResourceClaim`` and ``ResourceClaimTemplate`` (CREATE) in a managed namespace: every device request of a
  DeviceClass that counts against the quota must be countable (:func:`~webhook.core.dra.claim_problems`:
  ``allocationMode: All`` is not). Their spec is immutable, so an update cannot change what they ask.
* Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs and CronJobs in a managed namespace, by anyone but a
  workload controller or the controller (CREATE/UPDATE): no ``nodeName`` in their pod template
  (:func:`~webhook.core.pod_templates.template_node_problems`; the webhook-only install's ``templates.validate``
  hook, the templates guard policy's rule where the policies are installed).
* Supported job kinds in a managed namespace, by anyone but the controller:
  CREATE - the pod sets must be readable (the queue must be able to size the job), the kind must be
  able to wait suspended as written (a RayJob needs ``shutdownAfterJobFinishes: true``) and no pod template
  may carry a literal ``priority`` (:func:`webhook.core.integrity.submission_problems`). The mutating hook asks
  this rule (:func:`creation_refusal`), and the job validating hook is registered for updates only, so a
  creation costs one round trip; the handler still answers a creation it is sent;
  UPDATE - a held job may not be released (un-suspended, admission gate removed); its quota labels,
  submission stamp and priority class may not change; an admitted job may not change its size or requests
  (:func:`webhook.core.integrity.update_problems`); the refusal says where the job stands and how to see
  its position. A child queued with its parent is its operator's to suspend and resume
  (:func:`operator_acts_for_parent`).
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.admission.review import AdmissionRequest, AdmissionReview, allow, deny, parse_request
from webhook.admission.state import AdmissionState, Settings
from webhook.api.kinds import ELASTIC_QUOTA_TREE, QUEUE, RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE, RESOURCE_POLICY
from webhook.api.objects import Obj, meta
from webhook.core.dra import claim_problems
from webhook.core.integrity import may_bind_at_creation, pod_creation_problems, resize_problems
from webhook.core.placement import validate_policy
from webhook.core.pod_templates import TemplatedKind, template_node_problems, templated_kind
from webhook.core.quota import QuotaNode, queue_name, validate_tree_object
from webhook.core.workload import WorkloadError, pod_request
from webhook.workloads.base import Adapter, mapping_at, value_at
from webhook.workloads.children import queued_parent, queued_with_parent
from webhook.workloads.facts import submission_problems, update_problems
from webhook.workloads.registry import adapter_for, all_adapters, queued_by_a_job

QUEUE_POLICIES = ("Round", "Priority", "Block")
"""``Priority`` is accepted as an alias of ``Round`` (the seed's wording)."""

_WRITES = ("CREATE", "UPDATE")
_CLAIM_KINDS = {(kind.group, kind.kind) for kind in (RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE)}


def validate(review: Obj, state: AdmissionState, settings: Settings) -> AdmissionReview:
    """The response AdmissionReview for a decoded request review (raises ``ReviewError`` when unusable)."""
    request = parse_request(review)
    return validate_request(request, state, settings)


def validate_request(request: AdmissionRequest, state: AdmissionState, settings: Settings) -> AdmissionReview:
    group, kind = request.kind.group, request.kind.kind
    if request.sub_resource == "resize" and (group, kind) == ("", "Pod") and request.operation == "UPDATE":
        return _pod_resize(request, state)
    if request.sub_resource == "scale" and request.operation == "UPDATE":
        return _job_scale(request, state, settings)
    if request.operation not in _WRITES or request.sub_resource:
        return allow(request.uid)
    if request.obj is None:
        what = f"request.object: the {request.operation} of {request.display_name} carries no object"
        return deny(request.uid, what, 400, "BadRequest")
    if (group, kind) == (ELASTIC_QUOTA_TREE.group, ELASTIC_QUOTA_TREE.kind):
        return _tree(request, state)
    if (group, kind) == (RESOURCE_POLICY.group, RESOURCE_POLICY.kind):
        problems = validate_policy(request.obj)
        if problems:
            return _invalid(request, problems)
        return allow(request.uid)
    if (group, kind) == (QUEUE.group, QUEUE.kind):
        problems = queue_problems(request.obj)
        return _invalid(request, problems) if problems else allow(request.uid)
    if (group, kind) in _CLAIM_KINDS:
        return _claim(request, state, template=kind == RESOURCE_CLAIM_TEMPLATE.kind)
    templated = templated_kind(group, kind)
    if templated is not None and not settings.creates_workload_pods(request.username):
        refusal = _template_node(request, templated, state)
        if refusal is not None:
            return refusal
    adapter = adapter_for(group, kind)
    if adapter is None or settings.is_controller(request.username):
        return allow(request.uid)
    leaf = state.leaf_for_namespace(request.namespace)
    if not state.under_quota(request.namespace):
        return allow(request.uid)
    try:
        if request.operation == "CREATE":
            return creation_refusal(request, adapter, state, settings) or allow(request.uid)
        if operator_acts_for_parent(adapter, request.old_obj, request.obj, request.username, settings):
            return allow(request.uid)
        return _job_update(request, adapter, leaf, state, settings)
    except WorkloadError as error:
        return deny(request.uid, f"kube-queue cannot read {request.display_name}: {error}", 422, "Invalid")


def _job_scale(request: AdmissionRequest, state: AdmissionState, settings: Settings) -> AdmissionReview:
    """A job kind's scale subresource in a namespace under quota: its replicas may not change. The queue counts a
    job at the size it was queued with, and a scale (``kubectl scale``, a HorizontalPodAutoscaler, which a user
    with ``edit`` may create) would resize it behind the queue and the job update rules (docs/security.md)."""
    adapter = next((a for a in all_adapters() if (a.group, a.plural) == (request.resource_group, request.resource)
                    and a.plural != "pods"), None)
    if adapter is None or settings.is_controller(request.username) or not state.under_quota(request.namespace):
        return allow(request.uid)
    before, after = value_at(request.old_obj or {}, "spec", "replicas"), value_at(request.obj or {}, "spec", "replicas")
    if before == after:
        return allow(request.uid)
    return deny(
        request.uid,
        f"{adapter.kind} {request.namespace}/{request.name}: its scale subresource may not change spec.replicas "
        f"({before} -> {after}) in a namespace under quota: kube-queue counts the job at the size it was queued "
        "with, and scaling it (kubectl scale, a HorizontalPodAutoscaler) would resize it behind the queue; change "
        "the replicas on the job itself while it is held, or delete and resubmit it",
        403,
        "Forbidden",
    )


def _template_node(request: AdmissionRequest, kind: TemplatedKind, state: AdmissionState) -> AdmissionReview | None:
    """The refusal of a pod template a user wrote with a ``nodeName`` in a namespace of the tree (the webhook-only
    install's copy of the templates guard policy), ``None`` when there is nothing to refuse."""
    assert request.obj is not None
    if not state.under_quota(request.namespace):
        return None
    problems = template_node_problems(kind, request.obj)
    if not problems:
        return None
    return deny(request.uid, f"kube-queue refuses {request.display_name}: " + "; ".join(problems), 403, "Forbidden")


def _pod_resize(request: AdmissionRequest, state: AdmissionState) -> AdmissionReview:
    """An in-place resize of a pod of the tree's namespaces (:func:`resize_problems`)."""
    new, old = request.obj, request.old_obj
    if state.tree is None or new is None or old is None:
        return allow(request.uid)
    try:
        before, after = pod_request(mapping_at(old, "spec") or {}), pod_request(mapping_at(new, "spec") or {})
    except WorkloadError as error:
        return deny(request.uid, f"kube-queue cannot read {request.display_name}: {error}", 422, "Invalid")
    problems = resize_problems(state.tree, request.namespace, before, after, state.tree_used,
                               job_pod=queued_by_a_job(old))
    if not problems:
        return allow(request.uid)
    return deny(request.uid, f"{request.display_name} may not grow: " + "; ".join(problems), 403, "Forbidden")


def _claim(request: AdmissionRequest, state: AdmissionState, *, template: bool) -> AdmissionReview:
    """A DRA claim (or claim template) created in a namespace of the tree: refused when the quota could not
    count what it asks for (docs/pod-quota.md, "Devices")."""
    assert request.obj is not None
    if request.operation != "CREATE" or not state.quota_classes:
        return allow(request.uid)
    leaf = state.leaf_for_namespace(request.namespace)
    if not state.under_quota(request.namespace):
        return allow(request.uid)
    spec = request.obj.get("spec")
    if template:
        spec = spec.get("spec") if isinstance(spec, Mapping) else None
    problems = [f"spec.{problem}" if template else problem for problem in claim_problems(spec, state.quota_classes)]
    if not problems:
        return allow(request.uid)
    quota = f"quota {leaf.full_name}" if leaf is not None else "the quota tree"
    return deny(request.uid, f"kube-queue refuses {request.display_name}: namespace {request.namespace} is under "
                f"{quota}, which counts these devices: " + "; ".join(problems), 422, "Invalid")


def _invalid(request: AdmissionRequest, problems: list[str]) -> AdmissionReview:
    listing = "; ".join(problems)
    return deny(request.uid, f"{request.display_name} is invalid: {listing}", code=422, reason="Invalid")


def _tree(request: AdmissionRequest, state: AdmissionState) -> AdmissionReview:
    assert request.obj is not None
    metadata = meta(request.obj)
    namespace = request.namespace or str(metadata.get("namespace") or "")
    name = request.name or str(metadata.get("name") or "")
    others = state.other_trees(namespace, name)
    violations = validate_tree_object(request.obj, others)
    if not violations:
        return allow(request.uid)
    return _invalid(request, [str(violation) for violation in violations])


def queue_problems(obj: Obj) -> list[str]:
    """What is wrong with a Queue object (``[]`` when valid)."""
    spec = obj.get("spec")
    if spec is None:
        return []
    if not isinstance(spec, Mapping):
        return ["spec: must be an object"]
    policy = spec.get("queuePolicy")
    if policy is None or policy in QUEUE_POLICIES:
        return []
    return [f"spec.queuePolicy: {policy!r} is not one of {', '.join(QUEUE_POLICIES)}"]


def creation_refusal(
    request: AdmissionRequest, adapter: Adapter, state: AdmissionState, settings: Settings
) -> AdmissionReview | None:
    """The refusal of a new job the queue cannot hold as written (``None`` when it can). The mutating handler
    asks too, so a job it would refuse never gets the "queued" warning first. A Pod bound to a node by its
    creator is refused unless a kubelet creates it (it would skip the scheduler's quota)."""
    assert request.obj is not None
    if adapter.gates_at_creation_only:
        leaf = state.leaf_for_namespace(request.namespace)
        bound = pod_creation_problems(
            value_at(request.obj, "spec", "nodeName"),
            may_bind_at_creation(request.username),
            leaf.full_name if leaf is not None else f"(namespace {request.namespace} is managed)",
        )
        if bound:
            return deny(request.uid, f"kube-queue refuses {request.display_name}: " + "; ".join(bound), 403,
                        "Forbidden")
    if not held_at_creation(adapter, request.obj, request.username, settings):
        return None
    try:
        problems = submission_problems(adapter, request.obj, state.priority_classes)
    except WorkloadError as error:
        return deny(
            request.uid,
            f"kube-queue cannot size {request.display_name} for its quota: {error}",
            code=422,
            reason="Invalid",
        )
    if not problems:
        return None
    return deny(
        request.uid,
        f"kube-queue cannot queue {request.display_name}: " + "; ".join(problems),
        code=422,
        reason="Invalid",
    )


def held_at_creation(adapter: Adapter, obj: Obj, username: str, settings: Settings) -> bool:
    """Whether a new object is queued on its own: every job; a Pod, or the child a queued job's operator creates
    for it (a RayJob's RayCluster: :mod:`webhook.workloads.children`), unless it names its controller owner and
    a workload controller creates it (anyone else's is held like a job of its own, whatever owner it names)."""
    if queued_parent(obj, adapter.kind) is not None:
        return not settings.creates_workload_pods(username)
    if adapter.manages(obj):
        return True
    return adapter.gates_at_creation_only and not settings.creates_workload_pods(username)


def operator_acts_for_parent(
    adapter: Adapter, old: Obj | None, new: Obj, username: str, settings: Settings
) -> bool:
    """Whether an update is a workload controller's change of a child queued with its parent (a JobSet's Jobs, an
    MPIJob v2's launcher): the parent's operator suspends and resumes its children as the queue holds and
    releases the parent, which alone is queued and counted. Anyone else's change of a child meets the job rules."""
    return (
        old is not None
        and settings.creates_workload_pods(username)
        and queued_with_parent(old, adapter.kind)
        and queued_with_parent(new, adapter.kind)
    )


def _job_update(
    request: AdmissionRequest, adapter: Adapter, leaf: QuotaNode | None, state: AdmissionState, settings: Settings
) -> AdmissionReview:
    new, old = request.obj, request.old_obj
    assert new is not None
    if old is None:
        return allow(request.uid)
    broken = update_problems(adapter, old, new, state.priority_classes, state.defaults_in(request.namespace),
                             overheads=state.runtime_overheads)
    if not broken:
        return allow(request.uid)
    try:
        held = adapter.is_suspended(old)
    except WorkloadError:
        held = False
    namespace = request.namespace
    name = request.name or str(value_at(new, "metadata", "name") or "")
    parent = queued_parent(old, adapter.kind) if queued_with_parent(old, adapter.kind) else None
    subject = f"{adapter.kind} {namespace}/{name}"
    if parent is not None:  # the user asks about the job that is queued, not its operator's object
        subject += f" (queued with its {parent.replace('/', ' ')})"
        name = parent.partition("/")[2]
    if leaf is None:  # a managed namespace while no ElasticQuotaTree exists
        status = "is held (no ElasticQuotaTree lists its namespace yet)" if held else "runs"
        see = f". See `kq why {name} -n {namespace}`."
    else:
        queue = queue_name(leaf.name, namespace)
        status = f"is queued for quota {leaf.full_name}" if held else f"runs under quota {leaf.full_name}"
        see = (f". See its queue position with `kubectl get queue -n {settings.queue_namespace} {queue} -o yaml` "
               f"or `kq why {name} -n {namespace}`.")
    message = (
        f"{subject} {status}: "
        + "; ".join(broken)
        + (". It starts when its quota allows" if held else "")
        + see
    )
    return deny(request.uid, message, code=403, reason="Forbidden")
