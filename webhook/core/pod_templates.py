"""The pod templates users write: no ``nodeName`` in a namespace under quota (docs/security.md).

A Deployment's, ReplicaSet's, StatefulSet's, DaemonSet's, Job's or CronJob's pods are made by a trusted
workload controller, which may set ``spec.nodeName``, so the pod rules let a ``nodeName`` it copies from the
template through. A pod bound that way skips the scheduler and the extender, which keeps the quota's ``max``:
the template a user writes is where that ``nodeName`` is refused. One rule for both installs: the admission
policy ``kube-queue-templates-guard`` is generated from :data:`TEMPLATED_KINDS`, :func:`node_path` and
:func:`node_message` (:mod:`webhook.admission.policies`), and the webhook-only install asks
:func:`template_node_problems`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

DEFAULT_TEMPLATE: Final = ("spec", "template")
"""Where most kinds keep their pod template."""


@dataclass(frozen=True, slots=True)
class TemplatedKind:
    """A workload kind whose pods a workload controller makes from the pod template at ``template``."""

    group: str
    resource: str
    kind: str
    template: tuple[str, ...] = DEFAULT_TEMPLATE


TEMPLATED_KINDS: Final = (
    TemplatedKind("apps", "deployments", "Deployment"),
    TemplatedKind("apps", "replicasets", "ReplicaSet"),
    TemplatedKind("apps", "statefulsets", "StatefulSet"),
    TemplatedKind("apps", "daemonsets", "DaemonSet"),
    TemplatedKind("batch", "jobs", "Job"),
    TemplatedKind("batch", "cronjobs", "CronJob", ("spec", "jobTemplate", "spec", "template")),
)
"""Every such kind (all served as ``v1``), in the order the policy's rules list them."""

NODE_ADVICE: Final = (
    "the scheduler, which keeps the quota's max, places the pods it makes; remove nodeName and ask for the node "
    "with a nodeSelector (kubernetes.io/hostname) or node affinity instead"
)


def templated_kind(group: str, kind: str) -> TemplatedKind | None:
    """The :data:`TEMPLATED_KINDS` entry of ``group``/``kind``, ``None`` for any other kind."""
    for known in TEMPLATED_KINDS:
        if (known.group, known.kind) == (group, kind):
            return known
    return None


def node_path(kind: TemplatedKind) -> tuple[str, ...]:
    """The path of the template's ``nodeName``."""
    return (*kind.template, "spec", "nodeName")


def node_field(kind: TemplatedKind) -> str:
    """``spec.template.spec.nodeName``: the field as users write it."""
    return ".".join(node_path(kind))


def node_refusal(field: str) -> str:
    """The refusal of a ``nodeName`` at ``field``, where a workload controller would copy it into the pods."""
    return f"{field}: in a namespace under quota, {NODE_ADVICE}"


def node_message(kind: TemplatedKind) -> str:
    """The refusal of a ``nodeName`` in ``kind``'s template (the policy's message too)."""
    return node_refusal(node_field(kind))


def template_node_problems(kind: TemplatedKind, obj: Mapping[str, object]) -> list[str]:
    """Why ``obj``, written by a user in a namespace under quota, is refused: a ``nodeName`` in its pod template
    (``[]`` when it has none, or when the path is not an object all the way: the API server's own validation
    speaks to that)."""
    value: object = obj
    for key in node_path(kind):
        if not isinstance(value, Mapping):
            return []
        value = value.get(key)
    return [node_message(kind)] if isinstance(value, str) and value else []
