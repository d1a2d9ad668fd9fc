"""The ``min`` rules of taking something back from a quota, written once (docs/reclaim.md).

Two things take running work away from a quota: the queue's reclaim of admitted jobs
(:mod:`webhook.core.reclaim`) and kube-scheduler's preemption of pods, which the extender vets
(:mod:`webhook.core.preemption`). Both apply the same three rules, from here:

* **What a quota is owed** (:func:`guaranteed`): its ``min``, and zero of a resource it names only in ``max``
  (a request of that is beyond its guarantee); ``kube-queue/max-jobs`` is a cap, never a guarantee. A
  preemptor may take from another quota only while its own quota stays within this after it is admitted,
  at every level below the common ancestor (``ChainTally.within`` counts the levels).
* **What may not be taken** (:func:`keeps_min`): taking a victim's amounts of the contended resources away
  must leave each level of its quota below the common ancestor at or above ``min`` in each of them
  (:func:`guarded_min`: a resource a level names no ``min`` of is not guarded there). Resources nobody
  contends do not protect it.
* **Inside one quota** (:func:`borrows`): without a preemptor within ``min``, a quota gives up its own
  lower-priority work only while it uses more than its ``min`` of a contended resource that work holds.

Amounts are nano-units, keyed by node key (``use[key][resource]``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from webhook.api.names import MAX_JOBS
from webhook.core.quota import QuotaNode

__all__ = ["borrows", "guaranteed", "guarded_min", "keeps_min"]


def guarded_min(node: QuotaNode) -> dict[str, int]:
    """The node's ``min`` without ``kube-queue/max-jobs``: what taking work from the node must leave it."""
    return {name: amount for name, amount in node.min.items() if name != MAX_JOBS}


def guaranteed(node: QuotaNode) -> dict[str, int]:
    """What the node's quota may use and stay within its guarantee: ``min``, and zero of each resource named
    only in ``max``; never ``kube-queue/max-jobs``."""
    return {name: node.min.get_or_zero(name) for name in (*node.min, *node.max) if name != MAX_JOBS}


def keeps_min(
    mins: Mapping[str, Mapping[str, int]],
    use: Mapping[str, Mapping[str, int]],
    guarded: Iterable[str],
    held: Sequence[tuple[str, int]],
) -> bool:
    """Whether taking ``held`` (resource, amount) away at every node of ``guarded`` leaves each node at or above
    its ``min`` (``mins``, by node key: :func:`guarded_min`) in each of those resources, ``use`` being what the
    nodes use before. ``held`` lists only the contended resources the victim holds."""
    for key in guarded:
        node_min = mins[key]
        if not node_min:
            continue
        usage = use[key]
        for resource, amount in held:
            floor = node_min.get(resource)
            if floor is not None and usage.get(resource, 0) - amount < floor:
                return False
    return True


def borrows(
    node_min: Mapping[str, int], usage: Mapping[str, int], held: Mapping[str, int], contended: Iterable[str]
) -> bool:
    """Whether a quota that uses ``usage`` uses more than its ``min`` (``node_min``; zero when absent) of one of
    the ``contended`` resources that a victim holding ``held`` holds."""
    return any(
        held.get(resource, 0) > 0 and usage.get(resource, 0) > node_min.get(resource, 0) for resource in contended
    )
