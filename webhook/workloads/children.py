"""Objects a queued job's operator creates for it (a RayJob's RayCluster and submitter Job, an MPIJob v2's
launcher Job) are queued with that job, not on their own: its admission already counts their pods.

Such an object is known by its controller owner, a kind whose adapter lists the object's kind among its
``children``. Trust in that owner follows the rule for Pods (docs/security.md): the webhook holds an object
that names an owner unless a workload controller creates it, and a held object carries the submission stamp
for good, so anyone else's object that names a queued owner is queued like any other job.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.api.names import SUBMITTED_ANNOTATION
from webhook.api.objects import Obj
from webhook.workloads.base import value_at


def parent_of(obj: Obj) -> tuple[str, str] | None:
    """``(group, kind)`` of the object's controller owner (``None`` when it has none)."""
    owners = value_at(obj, "metadata", "ownerReferences")
    if not isinstance(owners, list):
        return None
    for owner in owners:
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            api_version, kind = owner.get("apiVersion"), owner.get("kind")
            if isinstance(api_version, str) and isinstance(kind, str):
                group = api_version.rpartition("/")[0]
                return group, kind
    return None


def queued_with_parent(obj: Obj, kind: str) -> bool:
    """Whether ``obj`` (of ``kind``) belongs to a queued job that lists ``kind`` among its children, and the
    webhook did not hold it at creation (it has no submission stamp)."""
    from webhook.workloads.registry import adapter_for  # noqa: PLC0415 - the registry loads this package

    parent = parent_of(obj)
    if parent is None:
        return False
    adapter = adapter_for(*parent)
    if adapter is None or kind not in adapter.children:
        return False
    return value_at(obj, "metadata", "annotations", SUBMITTED_ANNOTATION) is None
