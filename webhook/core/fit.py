"""Does a job fit its quota now, and if not, exactly why not.

Usage is passed in as a plain mapping ``used: Mapping[str, Resources]`` of node key (the lower-cased node
name, as in :attr:`QuotaTree.nodes`) to what the admitted jobs of that node's subtree use. A node missing from
the mapping uses nothing. Usage counts admitted jobs in ``kube-queue/max-jobs`` (one job is ``NANO``
nano-units, i.e. ``1``), exactly as :func:`add_usage` records it, so that job caps can be checked.

The rules (docs/queueing.md):

* A workload *fits* when, at its leaf and at every ancestor up to the root, for every resource it requests
  (a positive amount in :attr:`Workload.request_with_count`), ``used + request <= max × oversell_rate``.
* A resource absent from a node's ``max`` is unlimited at that node.
* ``max × oversell_rate`` is rounded down to whole nano-units (:meth:`Resources.scale`).
* ``kube-queue/max-jobs`` is a count of admitted jobs, not a resource a pod consumes: the oversell rate
  (which lets queues hand the scheduler more work than fits) does not apply to it, so ``max-jobs: 5`` admits
  at most five jobs whatever the rate.
* A resource the workload does not request (zero or absent) never blocks it, even at a node already over
  its limit in that resource.

Every function here is pure: inputs are never modified, results are new values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from webhook.api.names import MAX_JOBS
from webhook.core.chain_usage import shift_usage
from webhook.core.quantity import NANO, format_quantity
from webhook.core.quota import QuotaNode, QuotaTree
from webhook.core.rate import format_rate, validate_rate
from webhook.core.resources import EMPTY, Resources, is_binary_resource
from webhook.core.workload import Workload, WorkloadKey

__all__ = [
    "FIT",
    "Blocker",
    "FitResult",
    "add_usage",
    "check_fit",
    "check_min",
    "competing_chain",
    "limits_of",
    "quota_chain",
    "remove_usage",
    "within_min",
]


def _fmt(resource: str, nanos: int) -> str:
    return format_quantity(nanos, is_binary_resource(resource))


def limits_of(node: QuotaNode, oversell_rate: Fraction) -> dict[str, int]:
    """What admission allows at ``node``: ``max × rate`` per resource (rounded down), ``kube-queue/max-jobs``
    too, in whole jobs (``floor(max-jobs × rate)``), as ACK's kube-queue scales it: only rate 1 dispatches
    strictly by quota (docs/queueing.md).

    Resources absent from ``max`` are absent here (unlimited).
    """
    limits: dict[str, int] = {}
    numerator, denominator = oversell_rate.numerator, oversell_rate.denominator
    for resource, cap in node.max.items():
        scaled = cap * numerator // denominator
        limits[resource] = scaled - scaled % NANO if resource == MAX_JOBS else scaled
    return limits


class BlockerKind(StrEnum):
    """Which limit a :class:`Blocker` names."""

    MAX = "max"
    """The admission limit: ``max × rate`` (``max`` itself for ``kube-queue/max-jobs``)."""
    MIN = "min"
    """The guaranteed share checked by :func:`check_min`."""


@dataclass(frozen=True, slots=True)
class Blocker:
    """One quota level and resource that stops a job: ``used + request > limit``.

    Amounts are nano-units. ``kind`` says which limit: :class:`BlockerKind`.
    """

    quota: str
    """Full name of the node, ``root/Department-a``."""
    resource: str
    request: int
    used: int
    limit: int
    kind: BlockerKind = BlockerKind.MAX
    max: int | None = None
    """The node's unscaled ``max`` of the resource (:attr:`BlockerKind.MAX`)."""
    oversell_rate: Fraction = Fraction(1)

    @property
    def never_fits(self) -> bool:
        """The request alone is above the limit: no amount of waiting admits the job under this tree."""
        return self.request > self.limit

    def explain(self) -> str:
        """``quota root/Department-a: cpu request 60 + used 60 > limit 100 (max 100 × oversell 1)``."""
        resource = self.resource
        head = (
            f"quota {self.quota}: {resource} request {_fmt(resource, self.request)}"
            f" + used {_fmt(resource, self.used)} > limit {_fmt(resource, self.limit)}"
        )
        if self.kind == BlockerKind.MIN:
            tail = " (guaranteed min)"
        elif resource == MAX_JOBS:
            cap = self.limit if self.max is None else self.max
            tail = (f" (a count of admitted jobs: max {_fmt(resource, cap)} × oversell "
                    f"{format_rate(self.oversell_rate)}, whole jobs)")
        else:
            cap = self.limit if self.max is None else self.max
            tail = f" (max {_fmt(resource, cap)} × oversell {format_rate(self.oversell_rate)})"
        if self.never_fits:
            tail += "; the request alone is over the limit, so it can never be admitted under this tree"
        return head + tail


@dataclass(frozen=True, slots=True)
class FitResult:
    """Whether a job fits and, when not, why: every blocking (level, resource) from the leaf up.

    ``blocked_behind`` is set for jobs held back by the ``Block`` queue policy (they may fit themselves);
    ``note`` carries any other reason (an unknown quota, for one).
    """

    fits: bool
    blockers: tuple[Blocker, ...] = ()
    blocked_behind: WorkloadKey | None = None
    note: str = ""

    def explain(self) -> str:
        """A one-line human answer to "why is my job not admitted?" (``"fits"`` when it fits)."""
        if self.fits:
            return "fits"
        parts: list[str] = []
        if self.note:
            parts.append(self.note)
        parts.extend(blocker.explain() for blocker in self.blockers)
        return "; ".join(parts) or "does not fit"


FIT = FitResult(fits=True)
"""The result for a job that fits."""


def _unknown_quota(workload: Workload) -> FitResult:
    return FitResult(
        fits=False,
        note=(
            f"quota {workload.quota!r} of {workload.key} is not in the ElasticQuotaTree; "
            "the job waits until a leaf holds its namespace again"
        ),
    )


def quota_chain(tree: QuotaTree, quota: str) -> tuple[QuotaNode, ...] | None:
    """The quota node named ``quota`` (any case) and its ancestors, leaf first; ``None`` when unknown."""
    if quota.lower() not in tree.nodes:
        return None
    return tree.chain(quota)


def competing_chain(chain: tuple[QuotaNode, ...]) -> tuple[QuotaNode, ...]:
    """The levels of a leaf-first chain where its guaranteed ``min`` matters: every level below the root.

    The root's ``min`` equals its ``max`` (the enterprise total), so at the root a quota does not compete
    for a guarantee, it simply fits or not. A tree that is only a root keeps the root.
    """
    return chain[:-1] if len(chain) > 1 else chain


_Overrun = tuple[QuotaNode, str, int, int, int]
"""``(node, resource, request, used, limit)``: one level and resource where ``used + request > limit``."""


def _overruns(
    nodes: Iterable[QuotaNode],
    used: Mapping[str, Resources],
    wanted: Sequence[tuple[str, int]],
    limit_of: Callable[[QuotaNode, str], int | None],
) -> Iterator[_Overrun]:
    """Every level of ``nodes`` (in order) and requested resource (in ``wanted``'s order) where the usage plus
    the request passes the level's limit. ``limit_of`` gives that limit, ``None`` where the level does not limit
    the resource. The one walk behind :func:`check_fit` (``max``) and :func:`check_min` (``min``)."""
    for node in nodes:
        usage = used.get(node.key, EMPTY)
        for resource, amount in wanted:
            limit = limit_of(node, resource)
            if limit is None:
                continue
            current = usage.get_or_zero(resource)
            if current + amount > limit:
                yield node, resource, amount, current, limit


def _result(blockers: Sequence[Blocker]) -> FitResult:
    """:data:`FIT` without blockers, else a result that does not fit and names them."""
    return FitResult(fits=False, blockers=tuple(blockers)) if blockers else FIT


def check_fit(
    tree: QuotaTree,
    used: Mapping[str, Resources],
    workload: Workload,
    oversell_rate: Fraction | int,
) -> FitResult:
    """Whether ``workload`` fits now: ``used + request <= max × oversell_rate`` at its leaf and every ancestor.

    The result lists every blocking level and resource, leaf first, resources sorted by name. A workload
    whose quota is not in the tree does not fit (with a ``note`` saying so).
    """
    rate = validate_rate(oversell_rate)
    chain = quota_chain(tree, workload.quota)
    if chain is None:
        return _unknown_quota(workload)
    request = workload.request_with_count
    wanted = sorted((name, amount) for name, amount in request.items() if amount > 0)
    limits = {node.key: limits_of(node, rate) for node in chain}
    return _result([
        Blocker(quota=node.full_name, resource=resource, request=amount, used=current, limit=limit,
                max=node.max[resource], oversell_rate=rate)
        for node, resource, amount, current, limit in _overruns(
            chain, used, wanted, lambda node, resource: limits[node.key].get(resource)
        )
    ])


def check_min(tree: QuotaTree, used: Mapping[str, Resources], workload: Workload) -> FitResult:
    """Whether ``workload`` stays within its guaranteed ``min`` after admission; blockers have kind ``"min"``.

    Checked at the leaf and every ancestor below the root (:func:`competing_chain`), for every resource the
    workload requests that the node manages, i.e. names in its ``min`` or its ``max``: a resource named only
    in ``max`` is guaranteed zero, so any request of it is beyond ``min``; a resource the node names in
    neither is not governed by the quota and is ignored. ``kube-queue/max-jobs`` is a cap, never a
    guarantee, and is ignored too. The oversell rate does not apply: ``min`` is what is owed, unscaled.

    This is the whole-chain form. :mod:`webhook.core.reclaim` uses the same per-level check, but against a
    given victim only up to the lowest common ancestor of the two quotas (identical in a two-level tree).
    """
    chain = quota_chain(tree, workload.quota)
    if chain is None:
        return _unknown_quota(workload)
    wanted = sorted(
        (name, amount) for name, amount in workload.request.items() if amount > 0 and name != MAX_JOBS
    )
    return _result([
        Blocker(quota=node.full_name, resource=resource, request=amount, used=current, limit=guaranteed,
                kind=BlockerKind.MIN)
        for node, resource, amount, current, guaranteed in _overruns(
            competing_chain(chain), used, wanted, _guaranteed
        )
    ])


def _guaranteed(node: QuotaNode, resource: str) -> int | None:
    """What ``node`` guarantees of ``resource``: its ``min``, zero when only its ``max`` names it, ``None``
    (not governed) when it names it in neither."""
    guaranteed = node.min.get(resource)
    if guaranteed is None and resource in node.max:
        return 0
    return guaranteed


def within_min(tree: QuotaTree, used: Mapping[str, Resources], workload: Workload) -> bool:
    """Whether ``workload``'s quota stays within ``min`` after admitting it (see :func:`check_min`)."""
    return check_min(tree, used, workload).fits


def add_usage(tree: QuotaTree, used: Mapping[str, Resources], *workloads: Workload) -> dict[str, Resources]:
    """Usage after admitting ``workloads``: each one's request and one ``max-jobs`` added at its leaf and
    every ancestor (:func:`webhook.core.chain_usage.shift_usage`). Returns a new mapping; ``used`` is untouched.
    ``KeyError`` for an unknown quota."""
    return shift_usage(tree, used, workloads, +1)


def remove_usage(
    tree: QuotaTree, used: Mapping[str, Resources], *workloads: Workload
) -> dict[str, Resources]:
    """Usage after ``workloads`` stop being admitted (finished or evicted): the inverse of
    :func:`add_usage`. Amounts are not clamped at zero, so a double removal shows up as a negative usage
    instead of being hidden."""
    return shift_usage(tree, used, workloads, -1)

