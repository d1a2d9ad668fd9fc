"""Which ElasticQuotaTree is honoured: one rule for the controller, the webhook, the extender and ``kq``.

The webhook refuses a second tree and any tree outside the tree namespace, but objects created while it was
down, or before it was installed, can still exist. Every part then honours the same one: the oldest object
in the tree namespace (``creationTimestamp``; an object without one counts as newest), then the smallest name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from webhook.api.names import TREE_NAMESPACE
from webhook.api.objects import Obj, meta
from webhook.core.quota import QuotaTree, QuotaTreeError, parse_tree

__all__ = ["HonouredTree", "honoured_again", "honoured_in", "honoured_tree", "oldest_tree_object"]


def _age_key(obj: Obj) -> tuple[bool, str, str]:
    metadata = meta(obj)
    stamp = metadata.get("creationTimestamp")
    # RFC 3339 in UTC (what the API server writes) sorts as text.
    return (not isinstance(stamp, str) or not stamp, stamp if isinstance(stamp, str) else "",
            str(metadata.get("name") or ""))


def oldest_tree_object(
    objects: Iterable[Obj], namespace: str = TREE_NAMESPACE
) -> Obj | None:
    """The honoured object among ElasticQuotaTree objects (see the module notes); ``None`` when there is none."""
    candidates = [obj for obj in objects if str(meta(obj).get("namespace") or namespace) == namespace]
    return min(candidates, key=_age_key) if candidates else None


@dataclass(frozen=True, slots=True)
class HonouredTree:
    """The honoured object, its parsed tree (``None`` when there is no object or it does not parse) and why it
    does not parse."""

    obj: Obj | None
    tree: QuotaTree | None
    problem: str | None


def honoured_tree(objects: Iterable[Obj], namespace: str = TREE_NAMESPACE) -> HonouredTree:
    """The honoured tree (module notes), parsed."""
    chosen = oldest_tree_object(objects, namespace)
    if chosen is None:
        return HonouredTree(None, None, None)
    spec = chosen.get("spec")
    try:
        return HonouredTree(chosen, parse_tree(spec if isinstance(spec, Mapping) else {}), None)
    except QuotaTreeError as error:
        name = str(meta(chosen).get("name") or "")
        return HonouredTree(chosen, None, f"ElasticQuotaTree {namespace}/{name} is invalid: {error}")


def honoured_again(objects: Iterable[Obj], namespace: str, previous: HonouredTree | None) -> HonouredTree:
    """:func:`honoured_tree`, with ``previous``'s parsed tree kept when the honoured object is the same one with
    the same spec (a write of its status): everything that reads the tree keeps reading the same one."""
    chosen = oldest_tree_object(objects, namespace)
    before = previous.obj if previous is not None else None
    if (chosen is not None and before is not None and previous is not None and meta(chosen).get("name") ==
            meta(before).get("name") and chosen.get("spec") == before.get("spec")):
        return HonouredTree(chosen, previous.tree, previous.problem)
    return honoured_tree(objects, namespace)


def honoured_in(namespace: str) -> Callable[[list[Obj], HonouredTree | None], HonouredTree]:
    """:func:`honoured_again` in ``namespace``: how the parts of ``kq serve`` make the tree they share."""

    def make(objects: list[Obj], previous: HonouredTree | None) -> HonouredTree:
        return honoured_again(objects, namespace, previous)

    return make
