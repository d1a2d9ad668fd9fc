"""Queue order and the admission pass: who is released next, who waits, where, and why.

Order inside a quota (docs/queueing.md): priority descending, then creation time, then namespace and name
(:attr:`Workload.order_key`). Each leaf quota is one queue, whatever the namespaces of its jobs, so a
job's *position* is its 1-based place among the still-waiting jobs of its quota.

One :func:`admission_pass` walks a snapshot of waiting jobs once:

* inside a quota, jobs are tried in queue order; under ``Round`` a job that does not fit is skipped and
  the next one is tried; under ``Block`` the first job that does not fit holds back every later job of
  that quota for the rest of the pass (even ones that would fit);
* across quotas the next candidates are merged fairly, as a k-way merge of the quotas' queues: the
  candidate whose turn is earliest goes first, a turn being ``(created, -priority, namespace, name)`` but
  never earlier than the turn of the job ahead of it in its own queue. So the oldest work anywhere is
  served first, one quota's long queue cannot starve a sibling of shared parent capacity, and every
  admission updates usage before the next check;
* usage only grows during a pass, so a job that does not fit at some moment of the pass cannot fit later in
  the same pass. The pass uses that without changing the outcome: after a quota's check fails, its next
  jobs are checked at once and the ones that do not fit are settled without heap traffic; a job goes on
  the heap for its turn and is checked then; each quota remembers its last blocking level and resource
  and checks it first, and a quota whose job count is at a cap is settled without checks, as is the rest
  of a ``Round`` queue once a level's headroom is below the least any of those jobs asks for. Chains and
  limits are computed once per pass, and usage is kept as plain per-node headroom dicts shared by the
  queues under a node. A pass over 100,000 waiting jobs in 1,000 quotas takes a few tenths of a second in
  CPython; the ``checks`` count of :class:`PassResult` shows the work done.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction
from itertools import compress
from operator import attrgetter
from types import MappingProxyType
from typing import TypeVar

from webhook.api.names import MAX_JOBS
from webhook.core.fit import FitResult, limits_of
from webhook.core.quantity import NANO
from webhook.core.queue_views import LazyReasons, QueuePositions
from webhook.core.quota import QuotaTree
from webhook.core.rate import validate_rate
from webhook.core.resources import EMPTY, Resources, least_amounts
from webhook.core.workload import Workload, WorkloadKey, request_amounts

__all__ = [
    "LazyReasons",
    "PassResult",
    "Policy",
    "PolicyLookup",
    "QueuePolicyError",
    "QueuePositions",
    "admission_pass",
    "admit_groups",
    "order",
    "pass_result",
    "policy_function",
    "positions_only",
    "resolve_policy",
    "sort_in_order",
    "still_waiting",
    "turn_of",
]

_T = TypeVar("_T")


class QueuePolicyError(ValueError):
    """A ``spec.queuePolicy`` that is not one of the accepted values."""


class Policy(Enum):
    """How a quota's queue treats a job that does not fit."""

    ROUND = "Round"
    """Skip it and try the next job (no head-of-line blocking). The default."""
    BLOCK = "Block"
    """It blocks every later job of the same quota until it fits (strict priority order)."""

    @classmethod
    def parse(cls, value: str | None) -> Policy:
        """Read ``spec.queuePolicy``: ``Round`` (also the default when unset or empty), ``Priority`` (an
        alias of ``Round``, as in kube-queue) or ``Block``; case is ignored. Anything else raises
        :class:`QueuePolicyError` naming the value and the accepted ones."""
        if value is None or not value.strip():
            return cls.ROUND
        policy = _POLICY_NAMES.get(value.strip().lower())
        if policy is None:
            raise QueuePolicyError(
                f"unknown queuePolicy {value!r}: use Round (the default), Priority (an alias of Round) "
                "or Block"
            )
        return policy


_POLICY_NAMES = {"round": Policy.ROUND, "priority": Policy.ROUND, "block": Policy.BLOCK}


def resolve_policy(value: str | None, strict_priority: bool = False) -> Policy:
    """The policy a queue runs with: ``Block`` for every queue when the controller's ``StrictPriority=true``
    is set, else ``spec.queuePolicy`` as :meth:`Policy.parse` reads it."""
    return Policy.BLOCK if strict_priority else Policy.parse(value)


PolicyLookup = Policy | Mapping[str, Policy] | Callable[[str], Policy]
"""One policy for every quota, a mapping of quota name (any case) to policy (absent = ``Round``), or a
function called with the quota key (the lower-cased leaf name)."""


def policy_function(policy_for: PolicyLookup) -> Callable[[str], Policy]:
    """Each quota key's policy, from any :data:`PolicyLookup`."""
    return _policy_function(policy_for)


def _policy_function(policy_for: PolicyLookup) -> Callable[[str], Policy]:
    if isinstance(policy_for, Policy):
        return lambda _key: policy_for
    if isinstance(policy_for, Mapping):
        by_key = {name.lower(): policy for name, policy in policy_for.items()}
        return lambda key: by_key.get(key, Policy.ROUND)
    return policy_for


_order_key = attrgetter("order_key")


def order(workloads: Iterable[Workload]) -> list[Workload]:
    """Dequeue order inside one quota: priority descending, then creation time, then namespace/name."""
    return sorted(workloads, key=_order_key)


def _group(waiting: Iterable[Workload]) -> dict[str, list[Workload]]:
    """Waiting jobs by quota key (lower-cased), each list in dequeue order."""
    groups: dict[str, list[Workload]] = {}
    by_name: dict[str, list[Workload]] = {}
    """The same lists by quota name as the jobs spell it (one lookup a job instead of lower-casing each)."""
    for workload in waiting:
        bucket = by_name.get(workload.quota)
        if bucket is None:
            bucket = by_name[workload.quota] = groups.setdefault(workload.quota.lower(), [])
        bucket.append(workload)
    for bucket in groups.values():
        sort_in_order(bucket)
    return groups


def _fields(path: str) -> tuple[attrgetter[float | str], ...]:
    return tuple(attrgetter(f"{path}{name}") for name in ("created", "key.name", "key.namespace", "priority"))


_FIELDS = {"": _fields(""), "workload.": _fields("workload.")}


def sort_in_order(items: list[_T], path: str = "") -> None:
    """Sort workloads (or jobs, with ``path="workload."``) in dequeue order, :attr:`Workload.order_key`, in
    place and stably, as that key's stable sort would.

    A sort on the key tuple compares tuples element by element (most of a pass's time over a million
    waiting jobs); one stable sort per field compares plain numbers and strings at C speed. By creation time
    and then priority (descending) is the whole order when no two creation times are equal; else namespace
    and name are sorted on first."""
    created, name, namespace, priority = _FIELDS[path]
    items.sort(key=created)
    if len(set(map(created, items))) < len(items):
        items.sort(key=name)
        items.sort(key=namespace)
        items.sort(key=created)
    items.sort(key=priority, reverse=True)




def positions_only(waiting: Iterable[Workload]) -> dict[WorkloadKey, int]:
    """1-based position of every job in its quota's dequeue order, without admitting anything (for status
    writers that only need the order)."""
    positions: dict[WorkloadKey, int] = {}
    for jobs in _group(waiting).values():
        for index, workload in enumerate(jobs, start=1):
            positions[workload.key] = index
    return positions


@dataclass(frozen=True, slots=True)
class PassResult:
    """The outcome of one :func:`admission_pass`."""

    admitted: tuple[Workload, ...]
    """Jobs to release, in admission order (the objects passed in; the caller records the admission)."""
    positions: Mapping[WorkloadKey, int]
    """1-based place of every still-waiting job among the still-waiting jobs of its quota."""
    reasons: Mapping[WorkloadKey, FitResult]
    """Why every still-waiting job waits (computed lazily, against :attr:`used`)."""
    used: Mapping[str, Resources]
    """Usage per node key after the admissions (a new mapping; the input is untouched)."""
    queues: Mapping[str, tuple[Workload, ...]] = field(default_factory=lambda: MappingProxyType({}))
    """Still-waiting jobs per quota key, in dequeue order (position ``i`` is ``queues[q][i - 1]``)."""
    checks: int = 0
    """How many fit checks the pass made (for benchmarks and metrics)."""


@dataclass(slots=True)
class _Queue:
    """Pass-local state of one quota's queue."""

    jobs: Sequence[Workload]
    block: bool
    known: bool
    """The quota is in the tree (jobs of an unknown quota all wait)."""
    limits: list[tuple[dict[str, int], str]]
    """``(headroom, resource)`` for every limited resource at every level, leaf first. A headroom dict
    (``limit - used`` per resource of one node) is shared by every queue under that node."""
    counts: list[dict[str, int]]
    """Headroom dicts of the levels that cap ``kube-queue/max-jobs``."""
    admitted: bytearray
    next: int = 0
    blocker: int = -1
    hot: int = -1
    """Index in ``limits`` of the last blocking level and resource: checked first next time."""
    full: bool = False
    """A level's job count is at its cap: no job of this quota can fit for the rest of the pass."""
    failing: bool = False
    """The last check failed: look ahead (settle non-fitting jobs at once) instead of queueing lazily."""
    floor: _Turn | None = None
    """The turn of the last job of this queue that was checked: the next candidate's turn is not earlier."""
    least: dict[str, int] | None = None
    """Per limited resource, the least any job from the queue's first miss on asks for (made at that miss)."""
    bound: Mapping[str, int] | None = None
    """Per resource, the least any job of the queue asks for (given, or ``None``): at most ``least``."""


_Turn = tuple[float, int, str, str]
"""When a candidate's turn comes across quotas: ``(created, -priority, namespace, name)``, smallest first."""


def turn_of(workload: Workload) -> _Turn:
    """When a job's turn comes across quotas (before the turn of the job ahead of it is taken into account)."""
    return _turn(workload)


def _turn(workload: Workload) -> _Turn:
    key = workload.key
    return (workload.created, -workload.priority, key.namespace, key.name)


def _blocking(queue: _Queue, request: Mapping[str, int]) -> bool:
    """Whether ``request`` (plus one job) is over the headroom somewhere on the quota's chain.

    Remembers the blocking pair so that the next check of the queue tries it first. Non-positive amounts
    never block (a level already over its limit does not stop a job that does not ask for that resource).
    """
    if queue.full:
        return True
    if queue.counts:
        jobs = request.get(MAX_JOBS, 0) + NANO
        for head in queue.counts:
            room = head[MAX_JOBS]
            if jobs > room:
                queue.full = room < NANO
                return True
    limits = queue.limits
    hot = queue.hot
    if hot >= 0:
        head, resource = limits[hot]
        amount = request.get(resource)
        if amount is not None and amount > head[resource] and amount > 0:
            return True
    for index, (head, resource) in enumerate(limits):
        amount = request.get(resource)
        if amount is not None and amount > head[resource] and amount > 0:
            queue.hot = index
            return True
    return False


def _none_fits(queue: _Queue, position: int) -> bool:
    """Whether no job of the queue from ``position`` on can fit for the rest of the pass: a level's job count
    is at its cap, or some level's headroom of a resource is below the least that any of those jobs asks for
    (every one of them asks for it: the least is positive). Headroom only shrinks during a pass, and the
    least is taken over the jobs from the queue's first miss on, a superset of the ones still to come."""
    if queue.full:
        return True
    least = queue.least
    if least is None:
        bound = queue.bound
        if bound is not None and any(
            head[resource] < bound.get(resource, 0) and bound.get(resource, 0) > 0 for head, resource in queue.limits
        ):
            return True  # below the least of every job, so below the least of the rest
        rest = list(map(request_amounts, queue.jobs[position:]))
        least = queue.least = least_amounts(rest, {resource for _, resource in queue.limits})
    return any(head[resource] < least[resource] and least[resource] > 0 for head, resource in queue.limits)




def _raw(resources: Resources) -> Mapping[str, int]:
    """The amounts as a plain dict, read-only by convention (the core's own type; skips the Mapping
    protocol's per-item overhead on the hot path)."""
    return resources._items


def admission_pass(
    tree: QuotaTree,
    used: Mapping[str, Resources],
    waiting: Iterable[Workload],
    policy_for: PolicyLookup,
    oversell_rate: Fraction | int,
) -> PassResult:
    """Admit, from a snapshot of waiting jobs, every job that fits under its quota's policy.

    ``used`` is the usage per node key of the jobs already admitted (see :mod:`webhook.core.fit`);
    ``policy_for`` gives each quota's :class:`Policy` by quota key. Every job in ``waiting`` is treated as
    waiting; keys must be unique (pass a snapshot keyed by :class:`WorkloadKey`). A job whose quota is not
    in the tree waits, with a reason saying so. Nothing passed in is modified.
    """
    return admit_groups(tree, used, _group(waiting), policy_for, oversell_rate)[0]


def admit_groups(
    tree: QuotaTree,
    used: Mapping[str, Resources],
    groups: Mapping[str, Sequence[Workload]],
    policy_for: PolicyLookup,
    oversell_rate: Fraction | int,
    *,
    least: Mapping[str, Mapping[str, int]] | None = None,
) -> tuple[PassResult, dict[str, bytearray]]:
    """:func:`admission_pass` over waiting jobs already grouped by quota key (lower-cased), each group in
    dequeue order (:attr:`Workload.order_key`; the groups are not modified), and which jobs of each group it
    admitted (``1`` at a job's index in its group). ``least`` (optional, per quota key and resource) is the
    least any job of the group asks for: a bound that settles a queue without a walk over its rest."""
    rate = validate_rate(oversell_rate)
    lookup = _policy_function(policy_for)

    heads_by_node: dict[str, dict[str, int]] = {}
    for key, node in tree.nodes.items():
        usage = used.get(key, EMPTY)
        heads_by_node[key] = {
            resource: limit - usage.get_or_zero(resource)
            for resource, limit in limits_of(node, rate).items()
        }

    queues: list[_Queue] = []
    for quota, jobs in groups.items():
        known = quota in tree.nodes
        heads = [heads_by_node[node.key] for node in tree.chain(quota)] if known else []
        queues.append(
            _Queue(
                jobs=jobs,
                block=lookup(quota) is Policy.BLOCK,
                known=known,
                limits=[(head, resource) for head in heads for resource in head if resource != MAX_JOBS],
                counts=[head for head in heads if MAX_JOBS in head],
                admitted=bytearray(len(jobs)),
                bound=least.get(quota) if least is not None else None,
            )
        )

    heap: list[tuple[_Turn, int, int]] = []
    checks = 0

    def advance(index: int) -> None:
        """Put the queue's next candidate on the heap, at its turn.

        A candidate's turn is its own ``(created, -priority, namespace, name)``, but never before the turn of
        the job ahead of it in the same queue (a queue's candidates take turns in queue order). While the
        queue's last check failed, candidates are checked now and the ones that do not fit are settled at
        once: usage only grows, so they would not fit at their turn either, and the next candidate's turn
        is still counted from theirs, so the outcome is the same as checking each one at its turn.
        Otherwise the next job goes on the heap unchecked and is checked when its turn comes.
        """
        nonlocal checks
        queue = queues[index]
        jobs = queue.jobs
        position = queue.next
        if not queue.known or queue.blocker >= 0:
            queue.next = len(jobs)
            return
        floor = queue.floor
        if queue.failing and position < len(jobs) and _none_fits(queue, position):
            # None of the rest can fit at its turn either: they are settled at once (no candidate follows
            # them, so their turns do not matter).
            queue.next = len(jobs)
            return
        if queue.failing:  # only under Round: under Block the first failure ends the queue's pass
            while position < len(jobs):
                workload = jobs[position]
                checks += 1
                if not _blocking(queue, _raw(workload.request)):
                    queue.failing = False
                    break
                own = _turn(workload)
                if floor is None or own > floor:
                    floor = own
                position += 1
        if position < len(jobs):
            own = _turn(jobs[position])
            heapq.heappush(heap, (own if floor is None or own > floor else floor, index, position))
        queue.next = position + 1

    for index in range(len(queues)):
        advance(index)

    admitted: list[Workload] = []
    while heap:
        turn, index, position = heapq.heappop(heap)
        queue = queues[index]
        queue.floor = turn
        workload = queue.jobs[position]
        request = _raw(workload.request)
        checks += 1
        if _blocking(queue, request):
            queue.failing = True
            if queue.block:
                queue.blocker = position
        else:
            for head, resource in queue.limits:
                amount = request.get(resource)
                if amount is not None:
                    head[resource] -= amount
            if queue.counts:
                count = request.get(MAX_JOBS, 0) + NANO
                for head in queue.counts:
                    head[MAX_JOBS] -= count
            queue.admitted[position] = 1
            admitted.append(workload)
        advance(index)

    added: dict[str, Resources] = {}
    by_quota: dict[str, list[Workload]] = {}
    for workload in admitted:
        by_quota.setdefault(workload.quota.lower(), []).append(workload)
    for quota, released in by_quota.items():
        sums: dict[str, int] = {MAX_JOBS: NANO * len(released)}
        for workload in released:
            for resource, amount in _raw(workload.request).items():
                sums[resource] = sums.get(resource, 0) + amount
        delta = Resources(sums)
        for node in tree.chain(quota):
            added[node.key] = added.get(node.key, EMPTY) + delta
    used_after = dict(used)
    for key, delta in added.items():
        used_after[key] = used.get(key, EMPTY) + delta

    ended = ((quota, queue.jobs, queue.admitted, queue.blocker) for quota, queue in zip(groups, queues, strict=True))
    return pass_result(tree, rate, admitted, used_after, checks, ended)


def pass_result(  # noqa: PLR0917 - the parts of one pass's end, shared by the plain and the fair pass
    tree: QuotaTree,
    rate: Fraction,
    admitted: Sequence[Workload],
    used_after: dict[str, Resources],
    checks: int,
    queues: Iterable[tuple[str, Sequence[Workload], bytearray, int]],
) -> tuple[PassResult, dict[str, bytearray]]:
    """A pass's :class:`PassResult` and admitted flags from each quota's queue at its end: its key, its jobs in
    dequeue order, which of them the pass admitted (``1`` at a job's index) and the index of the job that
    blocked it (``-1``: none)."""
    waiting_lists: list[tuple[Sequence[Workload], Workload | None]] = []
    still: dict[str, tuple[Workload, ...]] = {}
    flags: dict[str, bytearray] = {}
    for quota, jobs, flagged, blocker in queues:
        if any(flagged):
            rest: Sequence[Workload] = still_waiting(jobs, flagged)
            flags[quota] = flagged
        else:
            rest = jobs
        if not rest:
            continue
        kept = still[quota] = tuple(rest)
        waiting_lists.append((kept, jobs[blocker] if blocker >= 0 else None))
    return PassResult(
        admitted=tuple(admitted),
        positions=QueuePositions(still.values()),
        reasons=LazyReasons(tree, used_after, rate, waiting_lists),
        used=MappingProxyType(used_after),
        queues=MappingProxyType(still),
        checks=checks,
    ), flags


_FLIP = bytes.maketrans(b"\x00\x01", b"\x01\x00")
"""Turns an ``admitted`` bytearray into a ``still waiting`` one."""


def still_waiting(group: Iterable[_T], admitted: bytearray) -> list[_T]:
    """The members of a group (or of a list parallel to it) whose job :func:`admit_groups` did not admit."""
    return list(compress(group, admitted.translate(_FLIP)))
