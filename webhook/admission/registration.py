"""The ``admissionregistration.k8s.io/v1`` objects kube-queue generates, as typed shapes: the webhook
configurations (:mod:`webhook.admission.configs`) and the admission policies (:mod:`webhook.admission.policies`).

Only the fields the generators write; key order is the order they write them in (the manifests are compared as
text).
"""

from __future__ import annotations

from typing import NotRequired, TypedDict

from webhook.api.objects import Doc


class SelectorRequirement(TypedDict):
    """One ``matchExpressions`` entry of a label selector."""

    key: str
    operator: str
    values: NotRequired[list[str]]


class LabelSelector(TypedDict, total=False):
    matchLabels: dict[str, str]
    matchExpressions: list[SelectorRequirement]


class Rule(TypedDict):
    """A webhook's ``rules[*]`` (a policy's ``matchConstraints.resourceRules[*]``)."""

    apiGroups: list[str]
    apiVersions: list[str]
    resources: list[str]
    operations: list[str]
    scope: str


class MatchCondition(TypedDict):
    name: str
    expression: str
    """CEL: the request is sent (the policy applies) only when it is true."""


class ServiceReference(TypedDict):
    name: str
    namespace: str
    path: str
    port: int


class WebhookClientConfig(TypedDict, total=False):
    """How the API server reaches the service: by ``url`` or by ``service``."""

    url: str
    service: ServiceReference
    caBundle: str


class Webhook(TypedDict):
    """One entry of a configuration's ``webhooks``."""

    name: str
    admissionReviewVersions: list[str]
    clientConfig: WebhookClientConfig
    rules: list[Rule]
    failurePolicy: str
    matchPolicy: str
    sideEffects: str
    timeoutSeconds: int
    namespaceSelector: NotRequired[LabelSelector]
    objectSelector: NotRequired[LabelSelector]
    matchConditions: NotRequired[list[MatchCondition]]
    reinvocationPolicy: NotRequired[str]


class Metadata(TypedDict):
    """A generated object's ``metadata``."""

    name: str
    labels: dict[str, str]


class WebhookConfiguration(TypedDict):
    """A Mutating or ValidatingWebhookConfiguration."""

    apiVersion: str
    kind: str
    metadata: Metadata
    webhooks: list[Webhook]


class PolicyObject(TypedDict):
    """A Mutating or ValidatingAdmissionPolicy, or its binding (``spec`` differs by kind)."""

    apiVersion: str
    kind: str
    metadata: Metadata
    spec: Doc
