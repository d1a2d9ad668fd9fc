"""Objects a queued job's operator creates for it (a RayJob's RayCluster and submitter Job, an MPIJob v2's
launcher Job) are queued with that job, not on their own: its admission already counts their pods.

Such a child names its parent as its controller owner, a kind whose adapter lists the child's kind among its
``children``. Trust in that owner follows the rule for Pods (docs/security.md): only when a workload controller
creates the child does the webhook mark it as its parent's (:data:`~webhook.api.names.PARENT_ANNOTATION`,
which users can neither write nor change); anyone else's object that names a queued owner is held and queued
like any other job. Operators copy a parent's annotations into its children (KubeRay does), so the mark names
the parent: a copied one names the wrong object.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.api.names import PARENT_ANNOTATION
from webhook.api.objects import Obj
from webhook.workloads.base import value_at


def parent_of(obj: Obj) -> tuple[str, str, str] | None:
    """``(group, kind, name)`` of the object's controller owner (``None`` when it has none)."""
    owners = value_at(obj, "metadata", "ownerReferences")
    if not isinstance(owners, list):
        return None
    for owner in owners:
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            api_version, kind, name = owner.get("apiVersion"), owner.get("kind"), owner.get("name")
            if isinstance(api_version, str) and isinstance(kind, str) and isinstance(name, str):
                return api_version.rpartition("/")[0], kind, name
    return None


def queued_parent(obj: Obj, kind: str) -> str | None:
    """``Kind/name`` of the queued job whose child ``obj`` (of ``kind``) says it is (its controller owner's
    adapter lists ``kind`` among its children); ``None`` otherwise."""
    from webhook.workloads.registry import adapter_for  # noqa: PLC0415 - the registry loads this package

    parent = parent_of(obj)
    if parent is None:
        return None
    group, parent_kind, name = parent
    adapter = adapter_for(group, parent_kind)
    if adapter is None or kind not in adapter.children:
        return None
    return f"{parent_kind}/{name}"


def queued_with_parent(obj: Obj, kind: str) -> bool:
    """Whether ``obj`` (of ``kind``) is queued with its parent: the webhook marked it so when the parent's
    operator created it."""
    parent = queued_parent(obj, kind)
    return parent is not None and value_at(obj, "metadata", "annotations", PARENT_ANNOTATION) == parent
