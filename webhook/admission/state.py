"""What the admission handlers decide on: settings (fixed at start) and a state snapshot (kept by watches).

:class:`AdmissionState` is an immutable snapshot; tests build one directly::

    AdmissionState(tree=seed_tree(), policies={"user-a": (parse_policy(obj),)})

:class:`StateStore` holds the current snapshot and rebuilds one part of it when a watch cache reports a
change (:meth:`StateStore.set_trees` and friends); a handler reads ``store.current`` once per request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TypeVar

from webhook.api.names import (
    CONTROLLER_COMPONENT,
    MANAGED_NAMESPACE_LABEL,
    QUEUE_NAMESPACE,
    QUOTA_RESOURCE_ANNOTATION,
    TREE_NAMESPACE,
)
from webhook.api.objects import Obj, annotations_of, meta, name_of, priority_values
from webhook.core.dra import quota_classes
from webhook.core.integrity import WORKLOAD_CONTROLLERS, is_workload_controller
from webhook.core.limitrange import NO_DEFAULTS, ContainerDefaults, defaults_by_namespace
from webhook.core.placement import PolicySet, ResourcePolicy, policy_set
from webhook.core.quota import QuotaNode, QuotaTree
from webhook.core.resources import Resources
from webhook.core.tree_status import used_from_status
from webhook.core.treechoice import HonouredTree, honoured_tree
from webhook.workloads.overhead import Overheads, class_overheads

log = logging.getLogger(__name__)

DEFAULT_CONTROLLER_USER = f"system:serviceaccount:{QUEUE_NAMESPACE}:{CONTROLLER_COMPONENT}"
"""The in-cluster controller's service account."""
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
"""An AdmissionReview carries the object and the old object (each at most ~1.5 MiB in etcd) plus envelope."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Fixed at start by ``kq serve`` flags."""

    controller_users: frozenset[str] = frozenset({DEFAULT_CONTROLLER_USER})
    """Identities whose requests are never mutated and may release held jobs (``--controller-user``)."""
    tree_namespace: str = TREE_NAMESPACE
    """The only namespace where an ElasticQuotaTree is honoured."""
    queue_namespace: str = QUEUE_NAMESPACE
    """Where the controller keeps the Queue objects (named in refusal messages)."""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Larger request bodies are refused with HTTP 413 before they are read."""
    warn_on_hold: bool = True
    """Return a warning (``kubectl`` prints it) naming the queue when a job is held at creation."""
    pod_creators: tuple[str, ...] = WORKLOAD_CONTROLLERS
    """Identities (``*`` ends a prefix) whose Pods are trusted to belong to the owner they name (``--pod-creator``
    adds to the default). None of them may set ``spec.nodeName`` but kubelets
    (:data:`webhook.core.integrity.NODE_BINDERS`)."""

    def is_controller(self, username: str) -> bool:
        return username in self.controller_users

    def creates_workload_pods(self, username: str) -> bool:
        """Whether ``username`` is a workload controller (or kube-queue's own controller)."""
        return self.is_controller(username) or is_workload_controller(username, self.pod_creators)


_V = TypeVar("_V")


def _frozen(mapping: Mapping[str, _V]) -> Mapping[str, _V]:
    return mapping if isinstance(mapping, MappingProxyType) else MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class AdmissionState:
    """One consistent view of the cluster for the handlers.

    ``tree`` is the honoured quota tree (``None`` when there is none or it does not parse: then no namespace
    is managed). ``tree_names`` lists every ElasticQuotaTree the cache holds, as ``(namespace, name)``, for
    the one-tree rule. ``policies`` are the valid ResourcePolicies by namespace; ``priority_classes`` the
    PriorityClass values by name; ``namespace_labels`` the labels of every namespace; ``limit_defaults`` the
    LimitRange default requests by namespace.
    """

    tree: QuotaTree | None = None
    tree_names: frozenset[tuple[str, str]] = frozenset()
    tree_problem: str | None = None
    policies: Mapping[str, tuple[ResourcePolicy, ...]] = field(default_factory=lambda: MappingProxyType({}))
    priority_classes: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}))
    limit_defaults: Mapping[str, ContainerDefaults] = field(default_factory=lambda: MappingProxyType({}))
    tree_used: Mapping[str, Resources] | None = None
    """What the tree's status says each node uses (``None``: no status yet), for in-place resizes."""
    quota_classes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """DeviceClass name -> the quota resource its devices count as (:func:`~webhook.core.dra.quota_classes`):
    claims of these classes must be countable (docs/pod-quota.md, "Devices")."""
    runtime_overheads: Overheads = field(default_factory=lambda: MappingProxyType({}))
    """RuntimeClass name -> its pod overhead, for the classes that declare one (:mod:`webhook.workloads.overhead`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "policies", _frozen(self.policies))
        object.__setattr__(self, "limit_defaults", _frozen(self.limit_defaults))
        object.__setattr__(self, "priority_classes", _frozen(self.priority_classes))
        object.__setattr__(self, "namespace_labels", _frozen(self.namespace_labels))
        object.__setattr__(self, "quota_classes", _frozen(self.quota_classes))
        object.__setattr__(self, "runtime_overheads", _frozen(self.runtime_overheads))
        if self.tree is not None and not self.tree_names:
            object.__setattr__(self, "tree_names", frozenset({(TREE_NAMESPACE, "elasticquotatree")}))

    def leaf_for_namespace(self, namespace: str) -> QuotaNode | None:
        """The leaf quota that owns ``namespace``; ``None`` when the namespace is not managed."""
        return None if self.tree is None else self.tree.leaf_for_namespace(namespace)

    def held_untagged(self, namespace: str) -> bool:
        """Whether ``namespace`` is labelled managed while the tree this replica knows does not list it: no
        usable tree exists (it was deleted, or is invalid), or the namespace has just joined a tree this
        replica's watch has not delivered yet (:mod:`webhook.admission.joining`). Its jobs are held, untagged,
        and queue once a tree lists the namespace (docs/accounting.md)."""
        return (self.leaf_for_namespace(namespace) is None
                and self.namespace_labels.get(namespace, {}).get(MANAGED_NAMESPACE_LABEL) == "true")

    def under_quota(self, namespace: str) -> bool:
        """Whether the quota's rules apply in ``namespace``: a leaf of the tree lists it, or it is labelled managed
        while no leaf does (:meth:`held_untagged`)."""
        return self.leaf_for_namespace(namespace) is not None or self.held_untagged(namespace)

    def labelled(self, namespace: str) -> AdmissionState:
        """This view with ``namespace`` labelled managed: the API server sent the request through a hook that
        selects only labelled namespaces, so the label exists even when this replica's namespace watch has not
        delivered it yet (:mod:`webhook.admission.joining`). ``self`` when the view already knows it."""
        labels = self.namespace_labels.get(namespace, {})
        if not namespace or labels.get(MANAGED_NAMESPACE_LABEL) == "true":
            return self
        known = dict(self.namespace_labels)
        known[namespace] = MappingProxyType({**labels, MANAGED_NAMESPACE_LABEL: "true"})
        return replace(self, namespace_labels=known)

    def policies_in(self, namespace: str) -> tuple[ResourcePolicy, ...]:
        return self.policies.get(namespace, ())

    def defaults_in(self, namespace: str) -> ContainerDefaults:
        """The default container requests of the namespace's LimitRanges."""
        return self.limit_defaults.get(namespace, NO_DEFAULTS)

    def unlabelled_namespaces(self) -> tuple[str, ...]:
        """Existing namespaces of the tree without the managed label: their jobs bypass the webhooks."""
        if self.tree is None:
            return ()
        return tuple(
            sorted(
                namespace
                for namespace in self.tree.leaf_by_namespace
                if namespace in self.namespace_labels
                and self.namespace_labels[namespace].get(MANAGED_NAMESPACE_LABEL) != "true"
            )
        )

    def other_trees(self, namespace: str, name: str) -> int:
        """How many trees exist besides ``namespace/name``."""
        return len(self.tree_names - {(namespace, name)})


def tree_from_objects(
    objects: Iterable[Obj], tree_namespace: str = TREE_NAMESPACE, honoured: HonouredTree | None = None
) -> tuple[QuotaTree | None, frozenset[tuple[str, str]], str | None]:
    """The honoured tree among ElasticQuotaTree objects: the oldest one in ``tree_namespace`` (normally the
    only one), or ``honoured`` when the process made it already (:mod:`webhook.kube.shared`). Returns ``(tree or
    None, every (namespace, name), why there is no tree)``."""
    listed = list(objects)
    names = frozenset(
        (str(meta(obj).get("namespace") or ""), str(meta(obj).get("name") or "")) for obj in listed
    )
    if honoured is None:
        honoured = honoured_tree([obj for obj in listed if meta(obj).get("namespace") == tree_namespace],
                                 tree_namespace)
    if honoured.obj is None:
        return None, names, f"no ElasticQuotaTree in {tree_namespace}"
    return honoured.tree, names, honoured.problem


def policies_from_objects(objects: Iterable[Obj], found: PolicySet | None = None
                          ) -> dict[str, tuple[ResourcePolicy, ...]]:
    """Valid ResourcePolicies grouped by namespace (invalid ones are logged and left out); ``found``: what the
    process made of the objects already (:mod:`webhook.kube.shared`)."""
    if found is None:
        found = policy_set(objects)
    for namespace, name, problem in found.refused:
        log.warning("component=admission event=policy_ignored policy=%s/%s reason=%r", namespace, name, problem)
    return dict(found.by_namespace)


def namespace_labels_from_objects(objects: Iterable[Obj]) -> dict[str, Mapping[str, str]]:
    out: dict[str, Mapping[str, str]] = {}
    for obj in objects:
        metadata = meta(obj)
        name = metadata.get("name")
        labels = metadata.get("labels")
        if isinstance(name, str):
            out[name] = MappingProxyType(
                {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
            )
    return out


class StateStore:
    """The current :class:`AdmissionState`, swapped atomically as watch caches report changes."""

    def __init__(self, state: AdmissionState | None = None, *, ready: bool = False, settings: Settings | None = None):
        self.current = state if state is not None else AdmissionState()
        self.ready = ready
        """Whether every cache has listed once (``/readyz``)."""
        self.tree_namespace = (settings or Settings()).tree_namespace
        self._unlabelled: tuple[str, ...] = ()

    def set_trees(self, objects: Iterable[Obj], honoured: HonouredTree | None = None) -> None:
        """The trees as the cache holds them; ``honoured``: the one the process made of them, if it did."""
        listed = list(objects)
        if honoured is None:
            honoured = honoured_tree([obj for obj in listed if meta(obj).get("namespace") == self.tree_namespace],
                                     self.tree_namespace)
        tree, names, problem = tree_from_objects(listed, self.tree_namespace, honoured)
        if problem is not None and problem != self.current.tree_problem:
            log.warning("component=admission event=no_tree reason=%r", problem)
        used = None
        if tree is not None and honoured.obj is not None:
            used = used_from_status(tree, honoured.obj.get("status"))
        self.current = replace(self.current, tree=tree, tree_names=names, tree_problem=problem, tree_used=used)
        self._check_labels()

    def set_policies(self, objects: Iterable[Obj], found: PolicySet | None = None) -> None:
        """The ResourcePolicies; ``found``: what the process made of them, if it did."""
        self.current = replace(self.current, policies=policies_from_objects(objects, found))

    def set_priority_classes(self, objects: Iterable[Obj], values: Mapping[str, int] | None = None) -> None:
        """The PriorityClasses; ``values``: what the process made of them, if it did."""
        self.current = replace(self.current, priority_classes=priority_values(objects) if values is None else values)

    def set_limit_ranges(self, objects: Iterable[Obj]) -> None:
        self.current = replace(self.current, limit_defaults=defaults_by_namespace(objects))

    def set_runtime_classes(self, objects: Iterable[Obj]) -> None:
        self.current = replace(self.current, runtime_overheads=class_overheads(objects))

    def set_device_classes(self, objects: Iterable[Obj]) -> None:
        classes = quota_classes(((name_of(obj), annotations_of(obj)) for obj in objects), QUOTA_RESOURCE_ANNOTATION)
        self.current = replace(self.current, quota_classes=classes)

    def set_namespaces(self, objects: Iterable[Obj]) -> None:
        self.current = replace(self.current, namespace_labels=namespace_labels_from_objects(objects))
        self._check_labels()

    def _check_labels(self) -> None:
        unlabelled = self.current.unlabelled_namespaces()
        if unlabelled and unlabelled != self._unlabelled:
            log.warning(
                "component=admission event=namespaces_not_routed namespaces=%s label=%s=true "
                "hint=the controller labels the tree's namespaces; until then their jobs bypass the webhooks",
                ",".join(unlabelled),
                MANAGED_NAMESPACE_LABEL,
            )
        self._unlabelled = unlabelled
