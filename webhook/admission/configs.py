"""The Mutating/ValidatingWebhookConfigurations, generated from the adapter registry.

One source for both deployments:

* in a cluster, :func:`cluster_webhook_configs` points at the Service ``kube-queue-webhook`` (the YAML in
  ``manifests/webhook/webhook-configurations.yaml`` is its output: ``python -m webhook.admission.configs``);
* on the dev cluster, :func:`dev_webhook_configs` points at ``https://127.0.0.1:PORT`` by URL.

Job kinds (every adapter in :mod:`webhook.workloads`) are matched only in namespaces labelled
``kube-queue.x-k8s.io/managed: "true"`` (the controller labels the namespaces of the quota tree) and never in
``kube-system``, so system namespaces and unmanaged ones never depend on the webhook. Pods are matched at
creation (all of them: a pod a job controller made is tagged, not held) and, on update, only when they carry
the quota label. Outside the tree, pods reach the webhook only in namespaces with a ResourcePolicy (the
controller labels them) or when they opt into ECI (their label), and fail open there. Quota trees,
ResourcePolicies and Queues are validated everywhere. DRA claims and claim templates are validated at
creation in the managed namespaces (their spec is immutable, so updates - the scheduler's own writes among
them - never wait on the webhook).

With the admission policies (``policies=True``, the default: :mod:`webhook.admission.policies`, Kubernetes 1.36
and later) the pod rules that need no state of the service live in the API server, so the pod hooks change:
a pod a workload controller creates (the next pod of an admitted Job) goes to a hook of its own only when a
ResourcePolicy or the ECI opt-in asks something of it (:data:`PODS_MUTATE_WORKLOADS` in the namespaces with a
policy, :data:`PODS_MUTATE_WORKLOADS_OPT_IN` for the opted-in pods of the others), which fails open (the policy
has marked it for the extender and tagged its quota; what is skipped is the ResourcePolicy's toleration and
scheduler profile); every other such pod skips the service. Everyone else's pods still
fail closed (they are held, sized and checked against PriorityClasses), and pod updates are checked by the
policy alone (no ``pods.validate`` hook). Likewise the DRA claims Kubernetes makes from a pod's claim templates
go to :data:`CLAIMS_FROM_TEMPLATES`, which fails open. ``policies=False`` is the webhook-only configuration of older
clusters: every pod hook fails closed, as before issue 40, and :data:`TEMPLATES_VALIDATE` stands in for the
templates guard policy.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable

import orjson

from webhook.admission import registration as reg
from webhook.admission.hook_names import (
    CLAIMS_FROM_TEMPLATES,
    CLAIMS_VALIDATE,
    JOBS_SCALE,
    JOBS_VALIDATE,
    NAMESPACES_MUTATE,
    PODS_MUTATE,
    PODS_MUTATE_WORKLOADS,
    PODS_MUTATE_WORKLOADS_OPT_IN,
    PODS_RESIZE,
    PODS_VALIDATE,
    TEMPLATES_VALIDATE,
)
from webhook.admission.policies import EXCLUDED_NAMESPACES, creator_is_trusted
from webhook.admission.state import DEFAULT_CONTROLLER_USER
from webhook.api.kinds import (
    ELASTIC_QUOTA_TREE,
    OUR_KINDS,
    RESOURCE_CLAIM,
    RESOURCE_CLAIM_TEMPLATE,
    RESOURCE_POLICY,
)
from webhook.api.names import (
    CLAIM_CONTROLLER_USER,
    ECI_OPT_IN_LABEL,
    MANAGED_NAMESPACE_LABEL,
    MANAGED_ROUTE,
    PLACEMENT_NAMESPACE_LABEL,
    QUEUE_NAMESPACE,
    QUOTA_LABEL,
)
from webhook.core.pod_templates import TEMPLATED_KINDS
from webhook.workloads.registry import all_adapters

__all__ = [  # the hooks' names are re-exported: the tests and the manifests name them from here
    "CLAIMS_FROM_TEMPLATES",
    "CLAIMS_VALIDATE",
    "JOBS_SCALE",
    "JOBS_VALIDATE",
    "NAMESPACES_MUTATE",
    "PODS_MUTATE",
    "PODS_MUTATE_WORKLOADS",
    "PODS_MUTATE_WORKLOADS_OPT_IN",
    "PODS_RESIZE",
    "PODS_VALIDATE",
    "TEMPLATES_VALIDATE",
    "cluster_webhook_configs",
    "dev_webhook_configs",
    "webhook_configs",
]

NAME = "kube-queue"
"""Name of both configuration objects."""
SERVICE_NAME = "kube-queue-webhook"
SERVICE_NAMESPACE = QUEUE_NAMESPACE
SERVICE_PORT = 443
TIMEOUT_SECONDS = 10
"""How long the API server waits for an answer: Kubernetes' own default. Under a burst of creates on a busy
control plane the API server's own queueing takes seconds before our handler (about a millisecond) sees the
request, and a shorter timeout fails creates the webhook would have allowed (BENCHMARKS.md, the 10,000-job
burst). A webhook that is down fails at once (connection refused), so this bounds only a hung one."""
_CLAIM_CONTROLLER = f"request.userInfo.username == '{CLAIM_CONTROLLER_USER}'"

NOT_THE_CONTROLLER: list[reg.MatchCondition] = [{
    "name": "not-the-queue-controller",
    "expression": f"request.userInfo.username != '{DEFAULT_CONTROLLER_USER}'",
}]
"""The job validating webhook is not called for the controller's own writes: it allows every one of them
(``validate_request`` lets the controller's identity through), and each release would otherwise wait on a
webhook round trip (issue 23: ~200 ms a release on the dev cluster, one more request for the service). A
controller running under another identity (``kq serve --controller-user``) is still let through by the
webhook, only called."""

A_WORKLOAD_CONTROLLER: list[reg.MatchCondition] = [
    {"name": "a-workload-controller", "expression": creator_is_trusted()}
]
"""The pods a workload controller (or the controller) creates: their owner was queued
(:data:`~webhook.core.integrity.WORKLOAD_CONTROLLERS`; ``kq serve --pod-creator`` adds identities the webhook
trusts, whose pods still go to the hook that fails closed)."""
NOT_A_WORKLOAD_CONTROLLER: list[reg.MatchCondition] = [
    {"name": "not-a-workload-controller", "expression": f"!({creator_is_trusted()})"}
]
"""Every other creator's pods."""

ClientConfig = Callable[[str], reg.WebhookClientConfig]
"""``path -> clientConfig`` (without ``caBundle``)."""


def _rule(group: str, versions: list[str], resources: list[str], operations: list[str],
          scope: str = "Namespaced") -> reg.Rule:
    """One rule of a hook: these operations on these resources of one API group."""
    return {"apiGroups": [group], "apiVersions": versions, "resources": resources, "operations": operations,
            "scope": scope}


def _job_rules(operations: list[str], *, pods: bool, subresource: str = "") -> list[reg.Rule]:
    by_group: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for adapter in all_adapters():
        if (adapter.plural == "pods") != pods:
            continue
        plural = f"{adapter.plural}/{subresource}" if subresource else adapter.plural
        by_group.setdefault((adapter.group, adapter.versions), []).append(plural)
    return [
        _rule(group, list(versions), sorted(plurals), operations)
        for (group, versions), plurals in sorted(by_group.items())
    ]


def _not_excluded() -> reg.SelectorRequirement:
    """The expression every namespace selector starts with: never a namespace of :data:`EXCLUDED_NAMESPACES`."""
    return {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": list(EXCLUDED_NAMESPACES)}


def _namespace_selector(require_managed_label: bool) -> reg.LabelSelector:
    selector: reg.LabelSelector = {"matchExpressions": [_not_excluded()]}
    if require_managed_label:
        selector["matchLabels"] = {MANAGED_NAMESPACE_LABEL: "true"}
    return selector


_LABELLING = frozenset({ELASTIC_QUOTA_TREE.plural, RESOURCE_POLICY.plural})
"""The kinds whose validation labels namespaces before it allows them."""


def _also(selector: reg.LabelSelector, *, labels: dict[str, str] | None = None,
          expressions: list[reg.SelectorRequirement] | None = None) -> reg.LabelSelector:
    """``selector`` narrowed by more ``labels`` and ``expressions`` (a new object)."""
    out: reg.LabelSelector = {"matchExpressions": [*selector.get("matchExpressions", []), *(expressions or [])]}
    if selector.get("matchLabels") or labels:
        out["matchLabels"] = {**selector.get("matchLabels", {}), **(labels or {})}
    return out


def _placement_selector() -> reg.LabelSelector:
    return {
        "matchExpressions": [
            _not_excluded(),
            {"key": MANAGED_NAMESPACE_LABEL, "operator": "DoesNotExist"},
        ],
        "matchLabels": {PLACEMENT_NAMESPACE_LABEL: "true"},
    }


def _opt_in_selector() -> reg.LabelSelector:
    """Namespaces whose pods reach neither ``pods.mutate`` nor ``pods.placement`` (those do the same)."""
    return {
        "matchExpressions": [
            _not_excluded(),
            {"key": MANAGED_NAMESPACE_LABEL, "operator": "DoesNotExist"},
            {"key": PLACEMENT_NAMESPACE_LABEL, "operator": "DoesNotExist"},
        ],
    }


def _webhook(
    name: str,
    client_config: reg.WebhookClientConfig,
    rules: list[reg.Rule],
    *,
    namespace_selector: reg.LabelSelector | None = None,
    object_selector: reg.LabelSelector | None = None,
    match_conditions: list[reg.MatchCondition] | None = None,
    mutating: bool = False,
    failure_policy: str = "Fail",
    side_effects: str = "None",
) -> reg.Webhook:
    hook: reg.Webhook = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": client_config,
        "rules": rules,
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "sideEffects": side_effects,
        "timeoutSeconds": TIMEOUT_SECONDS,
    }
    if namespace_selector is not None:
        hook["namespaceSelector"] = namespace_selector
    if object_selector is not None:
        hook["objectSelector"] = object_selector
    if match_conditions:
        hook["matchConditions"] = match_conditions
    if mutating:
        hook["reinvocationPolicy"] = "IfNeeded"
    return hook


def _pod_creation_open(
    name: str,
    client_config: reg.WebhookClientConfig,
    namespace_selector: reg.LabelSelector,
    *,
    object_selector: reg.LabelSelector | None = None,
    match_conditions: list[reg.MatchCondition] | None = None,
) -> reg.Webhook:
    """A mutating hook on pod creation that fails open: what it adds to a pod is not needed for the pod to
    run, so no pod waits on the service being up."""
    return _webhook(
        name,
        client_config,
        _job_rules(["CREATE"], pods=True),
        namespace_selector=namespace_selector,
        object_selector=object_selector,
        match_conditions=match_conditions,
        mutating=True,
        failure_policy="Ignore",
    )


def webhook_configs(
    client_config: ClientConfig,
    ca_bundle_pem: bytes | None = None,
    *,
    require_managed_label: bool = True,
    policies: bool = True,
) -> list[reg.WebhookConfiguration]:
    """``[MutatingWebhookConfiguration, ValidatingWebhookConfiguration]`` named ``kube-queue``; ``policies``:
    installed beside :func:`webhook.admission.policies.admission_policies` (else webhook-only)."""
    ca = base64.b64encode(ca_bundle_pem).decode("ascii") if ca_bundle_pem else None

    def config(path: str) -> reg.WebhookClientConfig:
        out = client_config(path).copy()
        if ca is not None:
            out["caBundle"] = ca
        return out

    managed = _namespace_selector(require_managed_label)

    def managed_config(path: str) -> reg.WebhookClientConfig:
        """A hook that sees labelled namespaces only: its path says so to the handlers (``MANAGED_ROUTE``)."""
        return config(f"{path}/{MANAGED_ROUTE}" if require_managed_label else path)

    quota_pods: reg.LabelSelector = {"matchExpressions": [{"key": QUOTA_LABEL, "operator": "Exists"}]}
    metadata: reg.Metadata = {"name": NAME, "labels": {"app.kubernetes.io/name": "kube-queue"}}
    mutating: reg.WebhookConfiguration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [
            _webhook(
                "jobs.mutate.kube-queue.x-k8s.io",
                managed_config("/mutate"),
                _job_rules(["CREATE"], pods=False),
                namespace_selector=managed,
                mutating=True,
            ),
            _webhook(
                PODS_MUTATE,
                managed_config("/mutate"),
                _job_rules(["CREATE"], pods=True),
                namespace_selector=managed,
                match_conditions=NOT_A_WORKLOAD_CONTROLLER if policies else None,
                mutating=True,
            ),
            *(
                [
                    # A workload controller's pods (their owner was queued): the policy marked them and tagged
                    # their quota, so while the service is down they are created without it (issue 40). Only
                    # what a ResourcePolicy or the ECI opt-in asks of a pod needs the service: the pods of the
                    # namespaces labelled for it (webhook.admission.joining), and the opted-in pods of the
                    # others. Every other such pod skips the round trip, the largest part of its creation.
                    _pod_creation_open(
                        PODS_MUTATE_WORKLOADS,
                        managed_config("/mutate"),
                        _also(managed, labels={PLACEMENT_NAMESPACE_LABEL: "true"}),
                        match_conditions=A_WORKLOAD_CONTROLLER,
                    ),
                    _pod_creation_open(
                        PODS_MUTATE_WORKLOADS_OPT_IN,
                        managed_config("/mutate"),
                        _also(managed, expressions=[{"key": PLACEMENT_NAMESPACE_LABEL, "operator": "DoesNotExist"}]),
                        object_selector={"matchLabels": {ECI_OPT_IN_LABEL: "true"}},
                        match_conditions=A_WORKLOAD_CONTROLLER,
                    ),
                ]
                if policies
                else []
            ),
            # A namespace created while the tree lists it is labelled managed at creation, so its first job is
            # held (webhook.admission.joining). Ignore on failure: no namespace creation of the cluster depends
            # on the webhook; while it is down the controller labels such a namespace once it sees it.
            _webhook(
                NAMESPACES_MUTATE,
                config("/mutate"),
                [_rule("", ["v1"], ["namespaces"], ["CREATE"], scope="Cluster")],
                namespace_selector={"matchExpressions": [_not_excluded()]},
                mutating=True,
                failure_policy="Ignore",
            ),
            *(
                [
                    # Namespaces outside the tree with a ResourcePolicy that has an eci unit: their Pods only
                    # get the virtual node's toleration. Ignore on failure: no unrelated namespace, and no
                    # such namespace, depends on the webhook to create pods (they just do not use the
                    # virtual node while it is down).
                    _pod_creation_open("pods.placement.kube-queue.x-k8s.io", config("/mutate"), _placement_selector())
                ]
                if require_managed_label
                else []
            ),
            *(
                [
                    # Pods opted into ECI in namespaces no other pod hook sees: only the full-scan profile may
                    # use the virtual node. Ignore on failure: while the webhook is down they stay on regular
                    # nodes.
                    _pod_creation_open(
                        "pods.eci-opt-in.kube-queue.x-k8s.io",
                        config("/mutate"),
                        _opt_in_selector(),
                        object_selector={"matchLabels": {ECI_OPT_IN_LABEL: "true"}},
                    )
                ]
                if require_managed_label
                else []
            ),
        ],
    }
    everywhere = [
        (kind.plural, kind.group, kind.version, kind.plural) for kind in OUR_KINDS
    ]
    validating: reg.WebhookConfiguration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [
            # Updates only: jobs.mutate refuses a new job by the same rule (one round trip a create, issue 40).
            _webhook(
                JOBS_VALIDATE,
                managed_config("/validate"),
                _job_rules(["UPDATE"], pods=False),
                namespace_selector=managed,
                match_conditions=NOT_THE_CONTROLLER,
            ),
            *(
                []
                if policies  # the pod guard policy checks users' pod updates in the API server
                else [
                    _webhook(
                        PODS_VALIDATE,
                        managed_config("/validate"),
                        _job_rules(["UPDATE"], pods=True),
                        namespace_selector=managed,
                        object_selector=quota_pods,
                    ),
                    _webhook(
                        TEMPLATES_VALIDATE,
                        managed_config("/validate"),
                        [_rule(group, ["v1"], sorted(kind.resource for kind in TEMPLATED_KINDS if kind.group == group),
                               ["CREATE", "UPDATE"]) for group in dict.fromkeys(k.group for k in TEMPLATED_KINDS)],
                        namespace_selector=managed,
                        match_conditions=NOT_A_WORKLOAD_CONTROLLER,
                    ),
                ]
            ),
            # DRA claims and their templates in the tree's namespaces: only what the quota can count.
            _webhook(
                CLAIMS_VALIDATE,
                managed_config("/validate"),
                [_rule(RESOURCE_CLAIM.group, [RESOURCE_CLAIM.version],
                       sorted((RESOURCE_CLAIM.plural, RESOURCE_CLAIM_TEMPLATE.plural)), ["CREATE"])],
                namespace_selector=managed,
                match_conditions=[{"name": "not-the-claim-controller", "expression": f"!({_CLAIM_CONTROLLER})"}]
                if policies else None,
            ),
            *(
                [
                    _webhook(
                        CLAIMS_FROM_TEMPLATES,
                        managed_config("/validate"),
                        [_rule(RESOURCE_CLAIM.group, [RESOURCE_CLAIM.version], [RESOURCE_CLAIM.plural], ["CREATE"])],
                        namespace_selector=managed,
                        match_conditions=[{"name": "the-claim-controller", "expression": _CLAIM_CONTROLLER}],
                        failure_policy="Ignore",
                    )
                ]
                if policies
                else []
            ),
            # In-place resizes of any pod of the tree's namespaces: growth within the quota only.
            _webhook(
                PODS_RESIZE,
                managed_config("/validate"),
                [_rule("", ["v1"], ["pods/resize"], ["UPDATE"])],
                namespace_selector=managed,
            ),
            # A job kind's scale subresource (a PyTorchJob's workers): it would resize the job behind the queue.
            _webhook(
                JOBS_SCALE,
                managed_config("/validate"),
                _job_rules(["UPDATE"], pods=False, subresource="scale"),
                namespace_selector=managed,
            ),
            *(
                _webhook(
                    f"{short}.validate.kube-queue.x-k8s.io",
                    config("/validate"),
                    [_rule(group, [version], [plural], ["CREATE", "UPDATE"])],
                    # A tree that makes existing namespaces join labels them managed before it is allowed (its
                    # jobs are held from then on), a ResourcePolicy labels its namespace for the placement
                    # webhook: side effects, never on a dry run (webhook.admission.joining).
                    side_effects="NoneOnDryRun" if plural in _LABELLING else "None",
                )
                for short, group, version, plural in everywhere
            ),
        ],
    }
    # Independent copies: no shared sub-objects (callers may edit one; YAML output has no anchors).
    copied: list[reg.WebhookConfiguration] = orjson.loads(orjson.dumps([mutating, validating]))  # the same shapes
    return copied


def dev_webhook_configs(
    url_base: str, ca_bundle_pem: bytes, *, require_managed_label: bool = True
) -> list[reg.WebhookConfiguration]:
    """The two configurations for a service reached by URL (``https://127.0.0.1:9443``), trusting
    ``ca_bundle_pem``, beside the admission policies (the dev cluster runs Kubernetes 1.36). With
    ``require_managed_label=False`` every namespace but ``kube-system`` is sent to the webhook (the handlers
    still leave namespaces outside the tree untouched), webhook-only: the policies apply to managed namespaces
    only."""
    base = url_base.rstrip("/")
    return webhook_configs(
        lambda path: {"url": base + path}, ca_bundle_pem, require_managed_label=require_managed_label,
        policies=require_managed_label,
    )


def cluster_webhook_configs(
    ca_bundle_pem: bytes | None = None,
    *,
    service_name: str = SERVICE_NAME,
    service_namespace: str = SERVICE_NAMESPACE,
    port: int = SERVICE_PORT,
    policies: bool = True,
) -> list[reg.WebhookConfiguration]:
    """The two configurations for the in-cluster Service (``caBundle`` injected at run time when omitted);
    ``policies=False``: the webhook-only variant for clusters without the admission policies."""
    return webhook_configs(
        lambda path: {"service": {"name": service_name, "namespace": service_namespace, "path": path, "port": port}},
        ca_bundle_pem,
        policies=policies,
    )


def main() -> None:
    """Write the generated admission manifests (:mod:`webhook.admission.manifests`)."""
    from webhook.admission.manifests import main as write  # noqa: PLC0415 - it imports this module

    write(sys.argv[1:])


if __name__ == "__main__":
    main()
