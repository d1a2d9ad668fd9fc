"""The mutating handler: hold every new job of a managed namespace and tag it with its quota.

For a supported kind created in a namespace that a leaf of the quota tree lists, by anyone but the
controller:

* the hold is forced (``spec.suspend`` / ``spec.runPolicy.suspend`` set true even when the user wrote
  false; a plain Pod gets the scheduling gate ``kube-queue.x-k8s.io/admission``);
* the job and every pod template get the label ``quota.scheduling.alibabacloud.com/name: <leaf>`` and the
  annotation ``kube-queue/quota-fullname: root/...``;
* a held job gets ``kube-queue.x-k8s.io/submitted-at`` (the webhook's clock, to the microsecond), so jobs
  created in the same second keep their submission order in the queue;
* every container of a held job's pod templates that neither requests nor limits a resource the namespace's
  LimitRanges give a default request for gets that request written in, as the pods will get it, so the
  queue sizes the job as its pods will be sized (issue 17, hole 4; :mod:`webhook.core.limitrange`);
* a held job whose pod templates name a RuntimeClass with a pod overhead gets that overhead recorded
  (``kube-queue.x-k8s.io/pod-overhead``), which the API server adds to each of its pods
  (:mod:`webhook.workloads.overhead`);
* every pod template (or Pod) that a ResourcePolicy with an ``eci`` unit selects gets the toleration of the
  virtual node's taint;
* every pod template (or Pod) that asked for the default scheduler and that a ResourcePolicy a sample of the
  nodes could mislead selects (several units, or one unit that is a node pool or the virtual node) gets
  ``schedulerName: kube-queue-full-scan``, the scheduler profile that filters every node
  (:func:`webhook.core.profiles.scheduler_name_for`, docs/placement.md). A pod of a job's template is
  decided again when it is created (its template may have been written before the policy);
* every Pod of a managed namespace, and every Pod a ResourcePolicy selects, gets the extender's marker
  resource (:func:`webhook.core.profiles.calls_extender`): the scheduler asks the extender only about those.

Pods owned by a controller (a Job's pods, a ReplicaSet's pods) are tagged but not held on their own: their
owner is queued. Everything else passes untouched.

A job the validating handler would refuse at creation (:func:`webhook.admission.validate.creation_refusal`)
is refused here already, so its creator never reads a "queued for quota" warning for a job that was not
created.
"""

from __future__ import annotations

import time

from webhook.admission.joining import namespace_operations
from webhook.admission.review import AdmissionRequest, AdmissionReview, allow, deny, parse_request
from webhook.admission.state import AdmissionState, Settings
from webhook.admission.validate import creation_refusal, held_at_creation
from webhook.api.kinds import NAMESPACE
from webhook.api.names import CONTROLLER_ANNOTATIONS, ECI_OPT_IN_LABEL, PARENT_ANNOTATION
from webhook.api.objects import Obj
from webhook.core.placement import PodView, policy_for_pod
from webhook.core.profiles import calls_extender, scheduler_name_for
from webhook.core.quota import queue_name
from webhook.core.workload import WorkloadError
from webhook.workloads.base import (
    Adapter,
    JSONPatch,
    PatchError,
    annotation_removal,
    apply_patch,
    metadata_patch,
    set_value_patch,
    str_at,
    submitted_patch,
)
from webhook.workloads.children import queued_parent
from webhook.workloads.limits import limit_range_patch, overhead_patch
from webhook.workloads.pod import PodAdapter, extender_marker_patch
from webhook.workloads.registry import adapter_for


def mutate(review: Obj, state: AdmissionState, settings: Settings) -> AdmissionReview:
    """The response AdmissionReview for a decoded request review (raises ``ReviewError`` when unusable)."""
    request = parse_request(review)
    return mutate_request(request, state, settings)


def mutate_request(
    request: AdmissionRequest, state: AdmissionState, settings: Settings, now: float | None = None
) -> AdmissionReview:
    """``now`` (seconds since the epoch; the clock when ``None``) stamps a held job's submission time."""
    if request.operation != "CREATE" or request.sub_resource or settings.is_controller(request.username):
        return allow(request.uid)
    if (request.kind.group, request.kind.kind) == ("", NAMESPACE.kind):
        return allow(request.uid, namespace_operations(request, state, time.time() if now is None else now))
    adapter = adapter_for(request.kind.group, request.kind.kind)
    if adapter is None or request.obj is None:
        return allow(request.uid)
    try:
        namespace = request.namespace or (str_at(request.obj, "metadata", "namespace") or "")
        leaf = state.leaf_for_namespace(namespace)
        if not state.under_quota(namespace):
            # Outside the tree only a ResourcePolicy's toleration and profile are added (docs/placement.md).
            return allow(request.uid, _policy_ops(adapter, request.obj, namespace, state))
        refusal = creation_refusal(request, adapter, state, settings)
        if refusal is not None:
            return refusal
        ops, held = _operations(
            adapter,
            request.obj,
            namespace,
            leaf_name=leaf.name if leaf is not None else None,
            full_name=leaf.full_name if leaf is not None else None,
            state=state,
            now=time.time() if now is None else now,
            held=held_at_creation(adapter, request.obj, request.username, settings),
        )
        name = request.name or str_at(request.obj, "metadata", "name") or ""
    except (WorkloadError, PatchError) as error:
        return deny(
            request.uid,
            f"kube-queue cannot read {request.display_name}: {error}",
            code=422,
            reason="Invalid",
        )
    warnings: list[str] = []
    if held and settings.warn_on_hold and leaf is None:
        warnings.append(
            f"kube-queue: {request.kind.kind} {namespace}/{name or '<generated>'} {_would(request)}held: namespace "
            f"{namespace} is managed but kube-queue knows no ElasticQuotaTree that lists it now (it has just "
            "joined one, or its tree was deleted or is being re-created); it queues when a tree lists it"
        )
    elif held and settings.warn_on_hold and leaf is not None:
        queue = queue_name(leaf.name, namespace)
        warnings.append(
            f"kube-queue: {request.kind.kind} {namespace}/{name or '<generated>'} {_would(request)}queued for quota "
            f"{leaf.full_name} (queue {queue}); it starts when the quota allows. "
            f"Position: kubectl get queue -n {settings.queue_namespace} {queue} -o yaml"
        )
    return allow(request.uid, ops, warnings)


def _would(request: AdmissionRequest) -> str:
    """``would be `` for a dry run (nothing is created), else ``is ``."""
    return "would be " if request.dry_run else "is "


def _operations(
    adapter: Adapter,
    obj: Obj,
    namespace: str,
    *,
    leaf_name: str | None,
    full_name: str | None,
    state: AdmissionState,
    now: float,
    held: bool,
) -> tuple[list[JSONPatch], bool]:
    """The patch, computed step by step on a working copy so later steps see earlier ones (a template's
    labels include the quota label when the policies are matched)."""
    ops: list[JSONPatch] = []
    current: Obj = obj
    if held:
        forged = annotation_removal(current, CONTROLLER_ANNOTATIONS)  # the controller's records are its own
        if forged:
            current = apply_patch(current, forged)
            ops += forged
        suspend = adapter.suspend_patch(current)
        if suspend:
            current = apply_patch(current, suspend)
            ops += suspend
        stamp = submitted_patch(current, now)
        if stamp:
            current = apply_patch(current, stamp)
            ops += stamp
        defaults = limit_range_patch(adapter, current, state.defaults_in(namespace))
        if defaults:
            current = apply_patch(current, defaults)
            ops += defaults
        overhead = overhead_patch(adapter, current, state.runtime_overheads)
        if overhead:
            current = apply_patch(current, overhead)
            ops += overhead
    else:
        parent = queued_parent(current, adapter.kind)
        if parent is not None:  # a queued job's operator made it for that job: queued with it (children.py)
            mark = metadata_patch(current, (), {}, {PARENT_ANNOTATION: parent})
            current = apply_patch(current, mark)
            ops += mark
    tag = adapter.tag_patch(current, leaf_name, full_name) if leaf_name and full_name else []
    policies = state.policies_in(namespace)
    if tag:
        if policies:  # only the policy match below reads the tagged labels
            current = apply_patch(current, tag)
        ops += tag
    ops += _policy_ops(adapter, current, namespace, state, in_tree=True)
    return ops, held


def _policy_ops(
    adapter: Adapter, obj: Obj, namespace: str, state: AdmissionState, *, in_tree: bool = False
) -> list[JSONPatch]:
    """What the ResourcePolicy selecting each pod template (or Pod) asks of it (a policy works in every
    namespace it is created in), and what the scheduler must know of the pod: the virtual node's toleration
    for a policy with an ``eci`` unit; the full-scan scheduler profile for a pod that asked for the default
    scheduler under a policy a sample of the nodes could mislead, or opted into ECI; on a Pod of the tree's
    namespaces (``in_tree``) or of a policy, the extender's marker (:func:`webhook.core.profiles.calls_extender`)."""
    policies = state.policies_in(namespace)
    ops: list[JSONPatch] = []
    name = str_at(obj, "metadata", "name") or ""
    for template in adapter.pod_templates(obj):
        policy = (
            policy_for_pod(policies, PodView(namespace=namespace, name=name, labels=template.labels))
            if policies
            else None
        )
        # Each template's fields live under its own path: no need to re-apply between them.
        if policy is not None and policy.has_eci_unit:
            ops += adapter.toleration_patch(obj, template)
        opted_in = template.labels.get(ECI_OPT_IN_LABEL) == "true"
        scheduler = scheduler_name_for(str_at(template.template, "spec", "schedulerName"), policy, opted_in)
        if scheduler is not None:
            ops += set_value_patch(obj, (*template.path, "spec", "schedulerName"), scheduler)
        if isinstance(adapter, PodAdapter) and calls_extender(in_tree, policy):
            ops += extender_marker_patch(obj)
    return ops
