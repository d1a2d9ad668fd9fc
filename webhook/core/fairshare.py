"""Fair sharing of the spare: siblings under a fair-sharing parent borrow by weight (docs/fair-sharing.md).

Without it, what lies above the quotas' ``min`` (the spare) goes to the oldest waiting job anywhere: a
department that submits a burst first takes all of it. A parent quota with the attribute
:data:`~webhook.api.names.FAIR_SHARING_ATTRIBUTE` ``"true"`` shares it among its children instead:

* a child's **share** is the weighted dominant share of what it borrows beyond its ``min``: per resource the
  parent caps (``kube-queue/max-jobs`` aside), ``max(0, used - min) / (weight × parent's max)``, the largest of
  them (:func:`share`);
* a child's **weight** is :data:`~webhook.api.names.WEIGHT_ATTRIBUTE` when set; else its ``min``'s share of the
  parent's ``min`` in the resource where that share is largest (Koordinator's default: the spare is shared as
  the guarantees are); a child without a ``min`` has weight 0 and borrows only when no weighted sibling wants
  the room; all children weigh 1 when the parent has no ``min`` (:func:`weights`);
* the admission pass (:func:`fair_admit_groups`) picks the next job top-down: at a fair-sharing node, the child
  whose best job would leave it with the **lowest share after that job's admission** goes first (ties: the
  earlier turn); at any other node, the child whose best job's turn comes first, as in the plain pass
  (:mod:`webhook.core.queueing`). Inside a leaf the order is unchanged (priority, then time); ``Round`` skips a
  job that does not fit, ``Block`` stops its queue.

``min`` guarantees and reclaim are unchanged: fair sharing only decides who gets room nobody is owed. A tree
without a fair-sharing parent takes the plain pass, so switching it off gives today's decisions exactly.
The fair pass looks at every node of the tree for each job it tries (no look-ahead of the plain pass): it is
meant for trees of tens to hundreds of quotas.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from itertools import pairwise
from types import MappingProxyType

from webhook.api.names import FAIR_SHARING_ATTRIBUTE, MAX_JOBS, WEIGHT_ATTRIBUTE
from webhook.core.fit import limits_of
from webhook.core.quantity import NANO
from webhook.core.queueing import (
    PassResult,
    Policy,
    PolicyLookup,
    pass_result,
    policy_function,
    turn_of,
)
from webhook.core.quota import QuotaNode, QuotaTree, build_tree
from webhook.core.quota_attributes import parse_weight
from webhook.core.rate import validate_rate
from webhook.core.resources import EMPTY, Resources
from webhook.core.workload import Workload

__all__ = [
    "INFINITE", "fair_admit_groups", "fair_note", "fair_parents", "share", "shares", "weights", "with_fair_sharing",
]

INFINITE = Fraction(10**18)
"""The share of a child of weight 0 that borrows: above any real share."""


def fair_parents(tree: QuotaTree) -> frozenset[str]:
    """The keys of the nodes whose children share the spare by weight."""
    return frozenset(
        key for key, node in tree.nodes.items()
        if node.children and node.attributes.get(FAIR_SHARING_ATTRIBUTE, "").lower() == "true"
    )


def _default_weight(child: QuotaNode, parent: QuotaNode) -> Fraction:
    shares = [
        Fraction(child.min.get_or_zero(resource), amount)
        for resource, amount in parent.min.items()
        if amount > 0 and resource != MAX_JOBS
    ]
    if not shares:
        return Fraction(1)
    return max(shares)


def weights(tree: QuotaTree) -> dict[str, Fraction]:
    """Every child of a fair-sharing parent, by key: its weight (see the module)."""
    out: dict[str, Fraction] = {}
    for key in fair_parents(tree):
        parent = tree.nodes[key]
        for child in parent.children:
            declared = child.attributes.get(WEIGHT_ATTRIBUTE)
            weight = parse_weight(declared) if declared is not None else None
            out[child.key] = weight if weight is not None else _default_weight(child, parent)
    return out


def share(parent: QuotaNode, child: QuotaNode, weight: Fraction, used: Mapping[str, int],
          extra: Mapping[str, int] = MappingProxyType({})) -> Fraction:
    """The child's weighted dominant share of what it borrows beyond its ``min``, with ``extra`` admitted
    (``used`` and ``extra`` in nano-units per resource)."""
    best = Fraction(0)
    for resource, cap in parent.max.items():
        if resource == MAX_JOBS or cap <= 0:
            continue
        borrowed = used.get(resource, 0) + extra.get(resource, 0) - child.min.get_or_zero(resource)
        if borrowed <= 0:
            continue
        if weight <= 0:
            return INFINITE
        value = Fraction(borrowed) / (weight * cap)
        best = max(best, value)
    return best


def shares(tree: QuotaTree, used: Mapping[str, Resources]) -> dict[str, Fraction]:
    """The share of every child of a fair-sharing parent under ``used`` (for ``kq why``, ``kq top``, metrics)."""
    weight = weights(tree)
    out: dict[str, Fraction] = {}
    for key in fair_parents(tree):
        parent = tree.nodes[key]
        for child in parent.children:
            out[child.key] = share(parent, child, weight[child.key], dict(used.get(child.key, EMPTY).items()))
    return out


def fair_note(tree: QuotaTree, used: Mapping[str, Resources], leaf_key: str) -> str:
    """What fair sharing means for a job of ``leaf_key`` now, one sentence per fair-sharing ancestor, for
    ``kq why``; ``""`` when none of its ancestors shares by weight."""
    chain = tree.chain(leaf_key)
    fair = fair_parents(tree)
    if not fair:
        return ""
    current = shares(tree, used)
    notes = []
    for child, parent in pairwise(chain):
        if parent.key not in fair:
            continue
        mine = current[child.key]
        lower = sorted((current[other.key], other.full_name) for other in parent.children
                       if other.key != child.key and current[other.key] < mine)
        said = f"{float(mine):.2f}" if mine < INFINITE else "unbounded (weight 0)"
        if lower:
            others = ", ".join(f"{name} ({float(value):.2f})" for value, name in lower)
            notes.append(f"fair sharing under {parent.full_name}: {child.full_name} borrows at share {said}, above "
                         f"{others}, whose jobs go first for what is above the mins")
        else:
            notes.append(f"fair sharing under {parent.full_name}: {child.full_name} borrows at share {said}, at or "
                         "below its siblings': its jobs go first for what is above the mins")
    return "; ".join(notes)


def with_fair_sharing(tree: QuotaTree, on: bool) -> QuotaTree:
    """The same tree with fair sharing on at every node with children (``on``) or off everywhere (what
    ``kq simulate --fair-sharing`` compares)."""

    def rebuilt(node: QuotaNode) -> QuotaNode:
        attributes = {name: value for name, value in node.attributes.items() if name != FAIR_SHARING_ATTRIBUTE}
        if on and node.children:
            attributes[FAIR_SHARING_ATTRIBUTE] = "true"
        return replace(node, attributes=MappingProxyType(attributes),
                       children=tuple(rebuilt(child) for child in node.children))

    return build_tree(rebuilt(tree.root))


class _Queue:
    __slots__ = ("admitted", "block", "blocked", "floor", "jobs", "known", "next")

    def __init__(self, jobs: Sequence[Workload], block: bool, known: bool) -> None:
        self.jobs = jobs
        self.block = block
        self.known = known
        self.next = 0
        self.blocked: int = -1
        self.admitted = bytearray(len(jobs))
        self.floor: tuple[float, int, str, str] | None = None

    def head(self) -> tuple[int, tuple[float, int, str, str]] | None:
        """The next job to try and its turn (never before the turn of the job tried before it)."""
        if not self.known or self.blocked >= 0 or self.next >= len(self.jobs):
            return None
        own = turn_of(self.jobs[self.next])
        floor = self.floor
        return self.next, own if floor is None or own > floor else floor


def fair_admit_groups(
    tree: QuotaTree,
    used: Mapping[str, Resources],
    groups: Mapping[str, Sequence[Workload]],
    policy_for: PolicyLookup,
    oversell_rate: Fraction | int,
) -> tuple[PassResult, dict[str, bytearray]]:
    """:func:`webhook.core.queueing.admit_groups` with the spare shared by weight under fair-sharing parents
    (see the module). Same arguments and results."""
    rate = validate_rate(oversell_rate)
    lookup = policy_function(policy_for)
    fair = fair_parents(tree)
    weight = weights(tree)
    usage: dict[str, dict[str, int]] = {key: dict(used.get(key, EMPTY).items()) for key in tree.nodes}
    limits = {key: limits_of(node, rate) for key, node in tree.nodes.items()}
    queues = {quota: _Queue(jobs, lookup(quota) is Policy.BLOCK, quota in tree.nodes) for quota, jobs in groups.items()}
    Candidate = tuple[str, int, tuple[float, int, str, str]]

    def best(node: QuotaNode) -> Candidate | None:
        """The job the subtree of ``node`` offers next: ``(quota, position, turn)``."""
        options: list[tuple[tuple[Fraction, tuple[float, int, str, str]], Candidate]] = []
        queue = queues.get(node.key)
        if queue is not None:
            head = queue.head()
            if head is not None:
                options.append(((Fraction(0), head[1]), (node.key, head[0], head[1])))
        fair_here = node.key in fair
        for child in node.children:
            found = best(child)
            if found is None:
                continue
            rank = Fraction(0)
            if fair_here:
                job = queues[found[0]].jobs[found[1]]
                rank = share(node, child, weight[child.key], usage[child.key], job.request._items)
            options.append(((rank, found[2]), found))
        if not options:
            return None
        return min(options, key=lambda option: (option[0], option[1][0]))[1]

    def fits(quota: str, request: Mapping[str, int]) -> bool:
        for node in tree.chain(quota):
            limit, have = limits[node.key], usage[node.key]
            for resource, amount in request.items():
                if amount > 0 and resource in limit and have.get(resource, 0) + amount > limit[resource]:
                    return False
        return True

    admitted: list[Workload] = []
    checks = 0
    for queue in queues.values():
        if not queue.known:
            queue.next = len(queue.jobs)
    while True:
        found = best(tree.root)
        if found is None:
            break
        quota, position, turn = found
        queue = queues[quota]
        queue.floor = turn
        workload = queue.jobs[position]
        request = dict(workload.request._items)
        request[MAX_JOBS] = request.get(MAX_JOBS, 0) + NANO
        checks += 1
        if fits(quota, request):
            for node in tree.chain(quota):
                have = usage[node.key]
                for resource, amount in request.items():
                    have[resource] = have.get(resource, 0) + amount
            queue.admitted[position] = 1
            admitted.append(workload)
        elif queue.block:
            queue.blocked = position
        queue.next = position + 1

    used_after = {key: Resources({name: amount for name, amount in sums.items() if amount})
                  for key, sums in usage.items()}
    for key, resources in used.items():
        if key not in used_after:
            used_after[key] = resources
    ended = ((quota, queue.jobs, queue.admitted, queue.blocked) for quota, queue in queues.items())
    return pass_result(tree, rate, admitted, used_after, checks, ended)
