"""The admission policies of the tree's pods: rules the API server checks itself, in CEL, without kq serve.

A rule that needs only the request, the pod, the user and the pod's namespace lives here, so it holds while
kq serve is down (a rollout, a crash, a hang: issue 40, docs/security.md "Where each pod rule lives"); the
webhook keeps what needs the controller's state (the tree, PriorityClasses, LimitRanges, ResourcePolicies).
Both are generated from the same names (:mod:`webhook.api.names`) and the same trusted identities
(:data:`~webhook.core.integrity.WORKLOAD_CONTROLLERS`, the controller's identity), and
:func:`webhook.admission.configs.webhook_configs` lets a workload controller's pods skip the pod webhook
while it is down only when these policies are installed (``policies=True``).

* ``kube-queue-pods-mark`` (MutatingAdmissionPolicy, pods created in a managed namespace): the extender's
  marker (:data:`~webhook.api.names.EXTENDER_RESOURCE`, one, as request and limit of the first container) and
  the quota label copied from the namespace's :data:`~webhook.api.names.NAMESPACE_QUOTA_LABEL`, which the
  controller keeps there.
* ``kube-queue-pods-guard`` (ValidatingAdmissionPolicy, pods created or updated in a managed namespace by
  anyone but the controller and the workload controllers, and the pods a workload controller creates bound to a
  node): no ``spec.nodeName`` at creation, whoever creates the pod, kubelets' mirror pods aside (a workload
  controller copies it from what a user wrote: a template, an Argo ``podSpecPatch``); the admission gate stays
  until the controller removes it; the quota label, the submission stamp and the controller's records stay as
  they are.
* ``kube-queue-templates-guard`` (ValidatingAdmissionPolicy, Deployments, ReplicaSets, StatefulSets, DaemonSets,
  Jobs and CronJobs of a managed namespace, by anyone but the controller and the workload controllers): no
  ``nodeName`` in their pod template. Their pods would be refused one by one, where only the workload
  controller's Events say why; the template is refused where its author sees it.
  The rule is :mod:`webhook.core.pod_templates`'s, which the webhook-only install's ``templates.validate`` asks.

Both need ``admissionregistration.k8s.io/v1`` policies (MutatingAdmissionPolicy is GA in Kubernetes 1.36);
older clusters install the webhook-only configuration (manifests/README.md).
"""

from __future__ import annotations

import json

from webhook.admission.registration import LabelSelector, MatchCondition, PolicyObject, Rule
from webhook.admission.state import DEFAULT_CONTROLLER_USER
from webhook.api.names import (
    ADMISSION_GATE,
    CONTROLLER_ANNOTATIONS,
    EXTENDER_RESOURCE,
    MANAGED_NAMESPACE_LABEL,
    NAMESPACE_QUOTA_LABEL,
    QUOTA_LABEL,
    SUBMITTED_ANNOTATION,
)
from webhook.core.integrity import NODE_BINDERS, WORKLOAD_CONTROLLERS
from webhook.core.pod_templates import DEFAULT_TEMPLATE, TEMPLATED_KINDS, node_message, node_path

__all__ = [
    "EXCLUDED_NAMESPACES",
    "PODS_GUARD",
    "PODS_MARK",
    "TEMPLATES_GUARD",
    "admission_policies",
    "creator_is_trusted",
    "managed_namespaces",
]

PODS_MARK = "kube-queue-pods-mark"
"""The mutating policy that marks every pod of the tree's namespaces for the extender and tags its quota."""
PODS_GUARD = "kube-queue-pods-guard"
"""The validating policy that keeps users' pods on the queue's terms."""
TEMPLATES_GUARD = "kube-queue-templates-guard"
"""The validating policy that keeps ``nodeName`` out of the pod templates users write (a Deployment's pods are made
by a trusted controller, which may set ``nodeName``: the template is where a user would put it)."""
API_VERSION = "admissionregistration.k8s.io/v1"
LABELS = {"app.kubernetes.io/name": "kube-queue"}
EXCLUDED_NAMESPACES = ("kube-system",)
"""Namespaces no pod rule and no job hook applies to (the webhook configurations' selectors too)."""


def managed_namespaces() -> LabelSelector:
    """The namespaces every pod rule applies to: labelled managed by the controller, never ``kube-system``
    (the pod webhooks' selector too)."""
    return {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(EXCLUDED_NAMESPACES)}
        ],
        "matchLabels": {MANAGED_NAMESPACE_LABEL: "true"},
    }


def _cel(value: str) -> str:
    """A CEL string literal (JSON's double-quoted form is one for these ASCII names)."""
    return json.dumps(value)


def _cel_list(values: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(_cel(value) for value in values) + "]"


def creator_is_trusted(patterns: tuple[str, ...] = (*WORKLOAD_CONTROLLERS, DEFAULT_CONTROLLER_USER)) -> str:
    """CEL: the request's user matches one of ``patterns`` (exact, or a prefix when it ends in ``*``), as
    :func:`webhook.core.integrity.is_workload_controller` decides for the webhook."""
    prefixes = [pattern[:-1] for pattern in patterns if pattern.endswith("*")]
    exact = [pattern for pattern in patterns if not pattern.endswith("*")]
    parts = []
    if prefixes:
        parts.append(f"{_cel_list(prefixes)}.exists(p, request.userInfo.username.startsWith(p))")
    if exact:
        parts.append(f"request.userInfo.username in {_cel_list(exact)}")
    return " || ".join(parts) if parts else "false"


def _pod_rule(*operations: str) -> Rule:
    """The rule matching ``operations`` on Pods."""
    return {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Namespaced",
            "operations": list(operations)}


_NOT_TRUSTED: MatchCondition = {"name": "not-a-trusted-creator", "expression": f"!({creator_is_trusted()})"}
"""Neither the controller nor a workload controller: the guards never evaluate their rules for the pods a
burst of admissions makes (the Job controller's) nor for the controller's own writes, which may do what they
forbid."""
_BOUND_AT_CREATION = "request.operation == 'CREATE' && has(object.spec.nodeName) && object.spec.nodeName != ''"
_NOT_TRUSTED_OR_BOUND: MatchCondition = {
    "name": "not-a-trusted-creator-or-bound-at-creation",
    "expression": f"!({creator_is_trusted()}) || (({_BOUND_AT_CREATION}) && !({creator_is_trusted(NODE_BINDERS)}))",
}
""":data:`_NOT_TRUSTED`, or a pod a workload controller creates bound to a node (a kubelet's mirror pod aside): the
pod guard reads that one too, and its ``nodeName`` rule refuses it (:data:`~webhook.core.integrity.NODE_BINDERS`).
The burst of an admission's pods still costs no rule: their ``nodeName`` is empty."""


def _pointer(*keys: str) -> str:
    """A JSON pointer (RFC 6901) to ``keys``, each escaped."""
    return "".join("/" + key.replace("~", "~0").replace("/", "~1") for key in keys)


def _set_in(obj: str, path: tuple[str, ...], key: str, value: str) -> str:
    """CEL: the JSON patch that sets ``key`` of the map at ``path`` of ``obj`` to ``value`` (the CEL expression
    ``value``), creating the map when it is absent."""
    parent = ".".join((obj, *path))
    return (f"has({parent}) ? [JSONPatch{{op: \"add\", path: {_cel(_pointer(*path, key))}, value: {value}}}] : "
            f"[JSONPatch{{op: \"add\", path: {_cel(_pointer(*path))}, value: {{{_cel(key)}: {value}}}}}]")


def _mark_policy() -> PolicyObject:
    # JSON patches, not apply configurations: a pod is created at every admission's burst, and a structured
    # merge of the whole pod cost the API server a quarter of its release rate (BENCHMARKS.md, issue 40).
    leaf = _cel(NAMESPACE_QUOTA_LABEL)
    first = ("spec", "containers", "0", "resources")
    one = _cel("1")
    marker = " + ".join(f"({_set_in('object', (*first, part), EXTENDER_RESOURCE, one)})"
                        for part in ("requests", "limits"))
    only = f"{{{_cel(EXTENDER_RESOURCE)}: {one}}}"
    whole = f"{{{_cel('requests')}: {only}, {_cel('limits')}: {only}}}"
    marker = (f"!has(object.spec.containers[0].resources) ? "
              f"[JSONPatch{{op: \"add\", path: {_cel(_pointer(*first))}, value: {whole}}}] : {marker}")
    marker = marker.replace("object.spec.containers.0.", "object.spec.containers[0].")
    label = _set_in("object", ("metadata", "labels"), QUOTA_LABEL, f"namespaceObject.metadata.labels[{leaf}]")
    return {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": PODS_MARK, "labels": dict(LABELS)},
        "spec": {
            "matchConstraints": {
                "resourceRules": [_pod_rule("CREATE")],
                "namespaceSelector": managed_namespaces(),
            },
            # The API server refuses a pod without containers anyway; nothing to mark on it.
            "matchConditions": [{"name": "has-containers",
                                 "expression": "has(object.spec.containers) && size(object.spec.containers) > 0"}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression": marker}},
                {"patchType": "JSONPatch", "jsonPatch": {"expression": (
                    f"has(namespaceObject.metadata.labels) && {leaf} in namespaceObject.metadata.labels ? "
                    f"({label}) : []"
                )}},
            ],
        },
    }


def _kept(key: str, field: str) -> str:
    """CEL: ``metadata.<field>[key]`` is the same (or as absent) before and after the update."""

    def value(obj: str) -> str:
        return f"(has({obj}.metadata.{field}) && {_cel(key)} in {obj}.metadata.{field} ? " \
               f"[{obj}.metadata.{field}[{_cel(key)}]] : [])"

    return f"{value('oldObject')} == {value('object')}"


def _guard_policy() -> PolicyObject:
    gate = _cel(ADMISSION_GATE)

    def gated(obj: str) -> str:
        return f"(has({obj}.spec.schedulingGates) && {obj}.spec.schedulingGates.exists(g, g.name == {gate}))"

    leaf = _cel(NAMESPACE_QUOTA_LABEL)
    quota = (f"(has(namespaceObject.metadata.labels) && {leaf} in namespaceObject.metadata.labels ? "
             f"namespaceObject.metadata.labels[{leaf}] : namespaceObject.metadata.name)")
    annotations = (SUBMITTED_ANNOTATION, *CONTROLLER_ANNOTATIONS)
    updating = "request.operation != 'UPDATE' || "
    return _validating_policy(
        PODS_GUARD,
        [_pod_rule("CREATE", "UPDATE")],
        _NOT_TRUSTED_OR_BOUND,
        [
            {
                "expression": ("request.operation != 'CREATE' || !has(object.spec.nodeName) || "
                               "object.spec.nodeName == ''"),
                "messageExpression": (
                    f"'spec.nodeName: a Pod in a namespace under quota ' + {quota} + ' must go through the "
                    "scheduler, which keeps its quota within max; remove spec.nodeName (' + "
                    "object.spec.nodeName + ') and ask for the node with a nodeSelector "
                    "(kubernetes.io/hostname: ' + object.spec.nodeName + ') or node affinity instead'"
                ),
                "reason": "Forbidden",
            },
            {
                "expression": f"{updating}!{gated('oldObject')} || {gated('object')}",
                "message": (f"spec.schedulingGates: only kube-queue may remove its scheduling gate "
                            f"({ADMISSION_GATE}); the Pod starts when its quota allows"),
                "reason": "Forbidden",
            },
            {
                "expression": updating + _kept(QUOTA_LABEL, "labels"),
                "message": (f"metadata.labels[{QUOTA_LABEL}]: the quota label is set by kube-queue only; it "
                            "may not be added, changed or removed"),
                "reason": "Forbidden",
            },
            {
                "expression": updating + " && ".join(_kept(key, "annotations") for key in annotations),
                "message": (f"metadata.annotations: {', '.join(annotations)} are written by kube-queue only "
                            "(the submission stamp, the admission, eviction and backoff records, what a job "
                            "was sized with); leave them as they are"),
                "reason": "Forbidden",
            },
        ],
    )


def _resource_is(resources: list[str]) -> str:
    """CEL: the request is about one of ``resources``."""
    if len(resources) == 1:
        return f"request.resource.resource == '{resources[0]}'"  # a resource name is a DNS label: nothing to escape
    return f"request.resource.resource in {_cel_list(resources)}"


def _templates_policy() -> PolicyObject:
    """No ``nodeName`` in the pod templates users write (:mod:`webhook.core.pod_templates`): a rule per group and
    template path, a validation per template path, read only for the kinds that keep their template there."""
    paths = list(dict.fromkeys(kind.template for kind in TEMPLATED_KINDS))
    rules: list[Rule] = []
    for path in paths:
        for group in dict.fromkeys(kind.group for kind in TEMPLATED_KINDS if kind.template == path):
            rules.append({"apiGroups": [group], "apiVersions": ["v1"],
                          "resources": [kind.resource for kind in TEMPLATED_KINDS
                                        if (kind.group, kind.template) == (group, path)],
                          "scope": "Namespaced", "operations": ["CREATE", "UPDATE"]})
    validations = []
    for path in paths:
        kinds = [kind for kind in TEMPLATED_KINDS if kind.template == path]
        # CEL's || is true when either side is: a kind without the path never reads it (no error, no refusal).
        skip = (_resource_is([kind.resource for kind in TEMPLATED_KINDS if kind.template != path])
                if path == DEFAULT_TEMPLATE else f"!({_resource_is([kind.resource for kind in kinds])})")
        node = "object." + ".".join(node_path(kinds[0]))
        validations.append({"expression": f"{skip} || !has({node}) || {node} == ''",
                            "message": node_message(kinds[0]), "reason": "Forbidden"})
    return _validating_policy(TEMPLATES_GUARD, rules, _NOT_TRUSTED, validations)


def _validating_policy(
    name: str, rules: list[Rule], condition: MatchCondition, validations: list[dict[str, str]]
) -> PolicyObject:
    """A guard: ``validations`` of the requests ``rules`` match in a managed namespace when ``condition`` holds
    (:data:`_NOT_TRUSTED`: by anyone but a trusted creator); refused when it cannot be evaluated."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(LABELS)},
        "spec": {
            "matchConstraints": {"resourceRules": rules, "namespaceSelector": managed_namespaces()},
            "matchConditions": [dict(condition)],
            "failurePolicy": "Fail",
            "validations": validations,
        },
    }


def _binding(kind: str, policy: str, **spec: object) -> PolicyObject:
    return {"apiVersion": API_VERSION, "kind": f"{kind}Binding",
            "metadata": {"name": policy, "labels": dict(LABELS)}, "spec": {"policyName": policy, **spec}}


def admission_policies() -> list[PolicyObject]:
    """The policies and their bindings, in the order they are applied (a binding after its policy; grouped by kind,
    as Helm orders them)."""
    return [
        _mark_policy(),
        _binding("MutatingAdmissionPolicy", PODS_MARK),
        _guard_policy(),
        _templates_policy(),
        _binding("ValidatingAdmissionPolicy", PODS_GUARD, validationActions=["Deny"]),
        _binding("ValidatingAdmissionPolicy", TEMPLATES_GUARD, validationActions=["Deny"]),
    ]
