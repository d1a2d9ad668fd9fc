"""The extender's cache: the cluster as its watches last reported it, and the placements it has made.

Synchronous and free of I/O: the watch caches feed it (:meth:`ExtenderCache.upsert_node`, :meth:`upsert_pod`,
:meth:`set_policies`, :meth:`set_trees`...); the decisions (:mod:`webhook.extender.decide`) read it, as a
:class:`~webhook.extender.decide.ClusterView`, within one synchronous call - no event can change it while
they do.

**Assumed placements.** When the filter lets a pod through, the extender records it (pod uid -> one passing
node, the pod's request and quota) until it sees the pod bound or deleted, or ``assume_ttl`` seconds pass.
Assumed pods count towards ResourcePolicy units (their passing nodes all lie in one unit) and towards the
pod-level quota, so pods scheduled back to back - before the first one's binding reaches the watch - never
overrun a unit's ``max`` or a quota's ``max``. A pod re-filtered replaces its own record, and never counts
against itself.

**Marks.** A pod the extender placed under a ResourcePolicy gets its unit's ``podLabels`` and
``podAnnotations`` once it is bound (the extender only filters, so it learns the node from the watch);
until the cluster shows them, the pod counts as if it carried them. Every bound pod a policy governs gets
``controller.kubernetes.io/pod-deletion-cost`` by its unit (earlier units cost more), so a shrinking
ReplicaSet removes the later units' pods - the virtual node's - first (see
:func:`~webhook.core.placement.unit_deletion_cost`). :meth:`marks_patch` says what a pod lacks; the caller
patches it.

**Pod-level quota.** Bound, unfinished pods and assumed placements are charged up their quota chain as
their events arrive (:func:`webhook.core.podquota.charge`), so the filter's check reads sums, not pods. The
devices their DRA claims hold are charged by claim, once however many pods share one
(:mod:`webhook.extender.claims`).

**No phantom charge.** An assumption whose pod was deleted before its binding, or that the scheduler gave up
on, is not brought by the pod watch (bound pods only): :meth:`ExtenderCache.assumptions_to_check` lists the
ones not seen bound for a while, the shell reads each pod (:mod:`webhook.extender.audit`) and
:meth:`ExtenderCache.forget` drops the ones :func:`webhook.core.assumed.assumed_fate` says are over. Pods the
filter refused for quota wait in :attr:`ExtenderCache.waits`; whenever usage goes down (a bound pod leaves, an
assumption ends without a binding, the tree changes) :attr:`ExtenderCache.on_room` is called so that the
shell wakes as many of them as the room can take (:mod:`webhook.extender.wake`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from webhook.api.names import TREE_NAMESPACE
from webhook.api.objects import Obj, meta, namespace_of
from webhook.core.assumed import Fate
from webhook.core.dra import pod_claim_keys
from webhook.core.placement import (
    DELETION_COST_ANNOTATION,
    AssumedPod,
    NodeView,
    PodView,
    PolicyError,
    ResourcePolicy,
    node_view,
    parse_policy,
    pod_view,
    policy_for_pod,
    unit_deletion_cost,
)
from webhook.core.podquota import MutableUsage, Usage, charge, quota_key
from webhook.core.quota import QuotaTree
from webhook.core.resources import EMPTY, Resources
from webhook.core.treechoice import honoured_tree
from webhook.extender.claims import ClaimBook
from webhook.extender.decision import Assumption, MarkPatch
from webhook.extender.metrics import FORGOTTEN
from webhook.extender.pods import Marks, PodRecord, RequestCache, carries, pod_key, priority_of
from webhook.extender.reserved import HeldRoom
from webhook.extender.units import UnitCounts
from webhook.extender.waits import Waits
from webhook.workloads.registry import is_its_own_job, queued_by_a_job

log = logging.getLogger(__name__)

DEFAULT_ASSUME_TTL = 30.0
"""Seconds an assumed placement counts without the extender seeing the pod bound."""
MAX_CHECK_INTERVAL = 4.0
"""An assumption still pending is looked at again later and later, at most this many seconds apart."""


class ExtenderCache:
    """Nodes, pods, ResourcePolicies and the ElasticQuotaTree as the watches last reported them, plus the
    extender's assumed placements and the marks placed pods still lack. Not thread-safe: use it from one
    event loop. The attributes are for reading; only the methods change them."""

    def __init__(self, *, assume_ttl: float = DEFAULT_ASSUME_TTL) -> None:
        self.assume_ttl = assume_ttl
        self.nodes: dict[str, NodeView] = {}
        self.virtual: set[str] = set()
        """Names of the virtual nodes among :attr:`nodes`."""
        self.pods: dict[str, PodRecord] = {}
        self.pods_by_ns: dict[str, dict[str, PodView]] = {}
        self._policies: dict[str, tuple[ResourcePolicy, ...]] = {}
        self.policy_problems: dict[str, str] = {}
        """``namespace/name`` -> why the ResourcePolicy is ignored."""
        self.tree: QuotaTree | None = None
        self.tree_problem = ""
        self.usage: MutableUsage = {}
        """Pod-level quota usage of bound, unfinished pods (:mod:`webhook.core.podquota`)."""
        self.assumed_usage: MutableUsage = {}
        """Like :attr:`usage`, for the requests of assumed placements."""
        self._assumed_charge: dict[str, tuple[str, Resources]] = {}
        """Pod key -> (quota key, request) its assumption is charged with."""
        self.assumed: dict[str, Assumption] = {}
        """Pod key -> the placement the filter made and the watch has not yet confirmed."""
        self.assumed_core: dict[str, AssumedPod] = {}
        self.assumed_by_ns: dict[str, set[str]] = {}
        self._next_expiry = float("inf")
        self.first_seen: dict[str, float] = {}
        """Pod key -> when a filter first asked about the unbound pod (``TimeoutOrExceedMax`` waits from then
        when the pod has no creation time)."""
        self.pending_marks: dict[str, Marks] = {}
        self.requests = RequestCache()
        self.units = UnitCounts(self)
        self.on_marks_needed: Callable[[str], None] | None = None
        """Called with a pod key when a bound pod lacks marks (see :meth:`marks_patch`)."""
        self.waits = Waits()
        """Pods refused for pod-level quota, waiting for room (:mod:`webhook.extender.waits`)."""
        self.on_room: Callable[[], None] | None = None
        """Called when usage goes down while pods wait for room (the shell wakes them)."""
        self.held = HeldRoom()
        """The room admitted jobs hold, and what loose pods use (:mod:`webhook.extender.reserved`)."""
        self._checks: dict[str, tuple[float, float]] = {}
        """Pod key -> (when its assumption is looked at next, the delay after that)."""
        self.claims = ClaimBook(self, self._freed)
        """The DRA claims pods hold and what each is charged with (:mod:`webhook.extender.claims`)."""

    # Nodes -------------------------------------------------------------------------------------------------
    def upsert_node(self, obj: Obj) -> None:
        view = node_view(obj)
        if not view.name:
            return
        old = self.nodes.get(view.name)
        if old == view:
            return
        self.nodes[view.name] = view
        if view.is_virtual:
            self.virtual.add(view.name)
        else:
            self.virtual.discard(view.name)
        self.units.forget_node(view.name)

    def delete_node(self, obj: Obj) -> None:
        name = node_view(obj).name
        if self.nodes.pop(name, None) is not None:
            self.virtual.discard(name)
            self.units.forget_node(name)

    def replace_nodes(self, objs: Iterable[Obj]) -> None:
        views = (node_view(obj) for obj in objs)
        self.nodes = {view.name: view for view in views if view.name}
        self.virtual = {name for name, view in self.nodes.items() if view.is_virtual}
        self.units.forget_all_nodes()

    # Pods --------------------------------------------------------------------------------------------------
    def upsert_pod(self, obj: Obj) -> None:
        view = pod_view(obj)
        key = pod_key(view)
        if not view.name:
            return
        old = self.pods.get(key)
        claims = pod_claim_keys(obj)
        if (old is not None and old.view == view and old.claims == claims and key not in self.assumed
                and key not in self.pending_marks):
            return  # nothing the extender reads changed (a status update: Running, conditions, IPs...)
        was_charged = None
        if old is not None:
            was_charged = old.charged
            self._uncharge(old)
        request = old.request if old is not None and old.view.node_name == view.node_name else None
        if request is None:
            request = self.requests.request(obj, view.key) if view.node_name else EMPTY
        record = PodRecord(view, request, None, priority_of(obj), not queued_by_a_job(obj), claims,
                           own_job=is_its_own_job(obj))
        self.pods[key] = record
        self.pods_by_ns.setdefault(view.namespace, {})[key] = view
        self._charge(record)
        counts = view.node_name is not None and not view.finished
        self.claims.hold(key, claims if counts else (), bound=True, loose=record.loose)
        if was_charged is not None and record.charged is None:
            self._freed()  # it finished
        if view.node_name is not None or view.finished:
            self.first_seen.pop(key, None)
            # Bound: its charge moves from the assumption to the pod, nothing is freed. Recounted once, below.
            assumption = self.drop_assumption(key, retally=False, freed=view.node_name is None)
            if assumption is not None and assumption.policy is not None and view.node_name is not None:
                self._start_marks(key, view)
            self.waits.done(key, self.tree)
        pending = self.pending_marks.get(key)
        if pending is not None and (carries(view, pending) or view.finished):
            del self.pending_marks[key]
        self.units.retally(key, view.namespace)
        self._check_marks(key)

    def delete_pod(self, obj: Obj) -> None:
        view = pod_view(obj)
        self._remove_pod(pod_key(view))

    def _remove_pod(self, key: str) -> None:
        record = self.pods.pop(key, None)
        if record is not None:
            if record.charged is not None:
                self._freed()
            self._uncharge(record)
            self.claims.hold(key, (), bound=True)
            by_ns = self.pods_by_ns.get(record.view.namespace)
            if by_ns is not None:
                by_ns.pop(key, None)
                if not by_ns:
                    del self.pods_by_ns[record.view.namespace]
        self.drop_assumption(key)
        self.first_seen.pop(key, None)
        self.pending_marks.pop(key, None)
        self.waits.done(key, self.tree)
        if record is not None:
            self.units.retally(key, record.view.namespace)

    def replace_pods(self, objs: Iterable[Obj]) -> None:
        """A re-list: the store is replaced; assumptions of pods now bound or gone are dropped."""
        seen: set[str] = set()
        for obj in objs:
            view = pod_view(obj)
            if view.name:
                seen.add(pod_key(view))
                self.upsert_pod(obj)
        for key in [key for key in self.pods if key not in seen]:
            self._remove_pod(key)

    def pod_views(self) -> list[PodView]:
        """Every cached pod."""
        return [record.view for record in self.pods.values()]

    def pod(self, key: str) -> PodView | None:
        """The cached view of a pod (by uid, or ``namespace/name`` for pods without one)."""
        record = self.pods.get(key)
        return None if record is None else record.view

    # Policies and the tree ---------------------------------------------------------------------------------
    def set_policies(self, objs: Iterable[Obj]) -> None:
        """Replace every ResourcePolicy; invalid ones are logged and ignored."""
        by_ns: dict[str, list[ResourcePolicy]] = {}
        problems: dict[str, str] = {}
        for obj in objs:
            try:
                policy = parse_policy(obj)
            except PolicyError as error:
                metadata = meta(obj)
                name = f"{metadata.get('namespace')}/{metadata.get('name')}"
                problems[name] = str(error)
                continue
            by_ns.setdefault(policy.namespace, []).append(policy)
        new = {namespace: tuple(policies) for namespace, policies in by_ns.items()}
        changed = {ns for ns in set(new) | set(self._policies) if new.get(ns) != self._policies.get(ns)}
        for name, problem in problems.items():
            if self.policy_problems.get(name) != problem:
                log.warning("component=extender event=policy_ignored policy=%s error=%r", name, problem)
        self._policies = new
        self.policy_problems = problems
        self.units.keep_policies(self.policy_keys())
        for namespace in changed:
            for key in list(self.pods_by_ns.get(namespace, {})):
                self._check_marks(key)

    def policy_keys(self) -> set[str]:
        """``namespace/name`` of every valid ResourcePolicy."""
        return {policy.key for policies in self._policies.values() for policy in policies}

    @property
    def policy_count(self) -> int:
        """How many valid ResourcePolicies the cache holds."""
        return sum(len(policies) for policies in self._policies.values())

    def policies(self, namespace: str) -> tuple[ResourcePolicy, ...]:
        return self._policies.get(namespace, ())

    def policy_for(self, view: PodView) -> ResourcePolicy | None:
        return policy_for_pod(self._policies.get(view.namespace, ()), view)

    def set_trees(self, objs: Iterable[Obj]) -> None:
        """Use the oldest ElasticQuotaTree given (the webhook allows only one); recharge every pod."""
        listed = list(objs)
        namespace = next((namespace for namespace in map(namespace_of, listed) if namespace), TREE_NAMESPACE)
        honoured = honoured_tree(listed, namespace)
        tree = honoured.tree
        problem = honoured.problem or ""
        if problem and problem != self.tree_problem:
            log.warning("component=extender event=tree_ignored error=%r", problem)
        if tree == self.tree and problem == self.tree_problem:
            return
        self.tree, self.tree_problem = tree, problem
        self.usage = {}
        self.held.reset()
        for record in self.pods.values():
            record.charged = None
            self._charge(record)
        self.assumed_usage = {}
        self._assumed_charge = {}
        for key, assumption in self.assumed.items():
            self._charge_assumption(key, assumption)
        self.claims.recharge()
        self.waits.retree(tree)
        self._freed()  # a max may have grown, a namespace moved

    # Pod-level quota usage ---------------------------------------------------------------------------------
    def _charge(self, record: PodRecord) -> None:
        view = record.view
        tree = self.tree
        if view.node_name is None or view.finished or not record.request or tree is None:
            return
        key = quota_key(tree, view.namespace)
        if key is None:
            return
        record.charged = key
        charge(self.usage, tree, key, record.request.items())
        if record.loose:
            self.held.charge_pod(tree, key, record.request, 1)

    def _uncharge(self, record: PodRecord) -> None:
        if record.charged is not None and self.tree is not None:
            charge(self.usage, self.tree, record.charged, record.request.items(), -1)
            if record.loose:
                self.held.charge_pod(self.tree, record.charged, record.request, -1)
        record.charged = None

    def _freed(self) -> None:
        """Usage went down somewhere: tell the shell, when pods wait for room."""
        self.waits.room = True
        if self.on_room is not None and self.waits.pending:
            self.on_room()

    def used(self, quota: str) -> Resources:
        """What the bound pods of a quota node's subtree request (for tests and ``why``)."""
        return Resources(self.usage.get(quota.lower(), {}))

    def set_reservations(self, objs: Iterable[Obj]) -> None:
        """The controller's reservation ConfigMap changed (:mod:`webhook.extender.reserved`)."""
        if self.held.set_reservations(objs):
            self._freed()

    def loose_usages(self, key: str, now: float) -> tuple[Usage, ...] | None:
        """What loose pod ``key``'s check against the jobs' room adds up (``None``: no trusted reservation)."""
        return None if self.tree is None else self.held.usages(self.tree, key, now)

    def quota_usages(self, key: str) -> tuple[Usage, ...]:
        """What pod ``key``'s quota check adds up: the bound pods, the assumed placements, and - for a pod
        filtered again - its own placement taken out (it must not count against itself)."""
        own = self._assumed_charge.get(key)
        if own is None or self.tree is None:
            return self.usage, self.assumed_usage
        mine: MutableUsage = {}
        charge(mine, self.tree, own[0], own[1].items(), -1)
        return self.usage, self.assumed_usage, mine

    # Units -------------------------------------------------------------------------------------------------
    def unit_indices(
        self, policy: ResourcePolicy, names: Sequence[str], given: Mapping[str, NodeView] | None
    ) -> tuple[list[int | None], set[int | None]]:
        """The unit of ``policy`` each of ``names`` lies in (:meth:`UnitCounts.unit_indices`)."""
        return self.units.unit_indices(policy, names, given)

    def unit_counts(self, policy: ResourcePolicy, for_pod: PodView) -> tuple[int, ...]:
        """How many of the policy's pods each unit holds when placing ``for_pod`` (:meth:`UnitCounts.counts`)."""
        return self.units.counts(policy, for_pod)

    # Assumptions -------------------------------------------------------------------------------------------
    def assume(self, key: str, assumption: Assumption) -> None:
        """Record the filter's placement of pod ``key`` (replacing its earlier one)."""
        self.drop_assumption(key, freed=False)
        self.assumed[key] = assumption
        self.assumed_by_ns.setdefault(assumption.view.namespace, set()).add(key)
        self.units.retally(key, assumption.view.namespace)
        self.assumed_core[key] = AssumedPod(key, assumption.node_name, assumption.expires_at)
        self._next_expiry = min(self._next_expiry, assumption.expires_at)
        self._charge_assumption(key, assumption)
        self.claims.hold(key, assumption.claims, bound=False, loose=assumption.loose, freed=False)

    def _charge_assumption(self, key: str, assumption: Assumption) -> None:
        tree = self.tree
        quota = quota_key(tree, assumption.view.namespace)
        if tree is not None and quota is not None and assumption.request:
            self._assumed_charge[key] = (quota, assumption.request)
            charge(self.assumed_usage, tree, quota, assumption.request.items())
            if assumption.loose:
                self.held.assume(tree, key, quota, assumption.request)

    def drop_assumption(self, key: str, *, retally: bool = True, freed: bool = True) -> Assumption | None:
        """Forget pod ``key``'s assumed placement (and its charge); recount it in its policies' tallies
        unless the caller does so itself (``retally=False``). ``freed``: its room is free again (not when
        the pod is bound, or placed again at once)."""
        self.assumed_core.pop(key, None)
        self._checks.pop(key, None)
        charged = self._assumed_charge.pop(key, None)
        self.held.drop(self.tree, key)
        if charged is not None and self.tree is not None:
            charge(self.assumed_usage, self.tree, charged[0], charged[1].items(), -1)
            if freed:
                self._freed()
        self.claims.hold(key, (), bound=False, freed=freed)
        assumption = self.assumed.pop(key, None)
        if assumption is not None:
            keys = self.assumed_by_ns.get(assumption.view.namespace)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.assumed_by_ns[assumption.view.namespace]
            if retally:
                self.units.retally(key, assumption.view.namespace)
        return assumption

    def expire(self, now: float) -> None:
        """Forget assumed placements whose time is up."""
        if now < self._next_expiry:
            return
        for key in [key for key, assumption in self.assumed.items() if now >= assumption.expires_at]:
            assumption = self.drop_assumption(key)
            if assumption is not None:
                FORGOTTEN.labels("expired").inc()
                log.info(
                    "component=extender event=assumption_expired pod=%s node=%s",
                    assumption.view.key,
                    assumption.node_name,
                )
        self._next_expiry = min((a.expires_at for a in self.assumed.values()), default=float("inf"))

    def assumptions_to_check(self, now: float, *, after: float, limit: int) -> list[tuple[str, Assumption]]:
        """Up to ``limit`` assumptions not seen bound ``after`` seconds after they were made, each due for a
        look (then again after ``after``, twice that... up to :data:`MAX_CHECK_INTERVAL` seconds), oldest
        first. The first look comes ``after`` seconds in: a binding normally reaches the watch well before."""
        due: list[tuple[str, Assumption]] = []
        for key, assumption in self.assumed.items():  # made in this order (a re-placed pod moves to the end)
            if len(due) >= limit or now - (assumption.expires_at - self.assume_ttl) < after:
                break
            next_at, delay = self._checks.get(key, (0.0, after))
            if now < next_at:
                continue
            self._checks[key] = (now + delay, min(delay * 2, MAX_CHECK_INTERVAL))
            due.append((key, assumption))
        return due

    def forget(self, key: str, assumption: Assumption, fate: Fate) -> bool:
        """Drop ``assumption`` of pod ``key`` when ``fate`` says it is over (deleted, unscheduled) and it is
        still the pod's current one (a filter may have replaced it while the pod was read); whether it did."""
        if fate not in (Fate.DELETED, Fate.UNSCHEDULED) or self.assumed.get(key) is not assumption:
            return False
        self.drop_assumption(key)
        FORGOTTEN.labels(fate.value).inc()
        log.info(
            "component=extender event=assumption_forgotten pod=%s node=%s reason=%s",
            assumption.view.key,
            assumption.node_name,
            fate.value,
        )
        return True

    # Marks -------------------------------------------------------------------------------------------------
    def _start_marks(self, key: str, view: PodView) -> None:
        policy = self.policy_for(view)
        if policy is None or view.node_name is None:
            return
        index = self.units.unit_index(policy, view.node_name)
        if index is None:
            return
        unit = policy.units[index]
        marks = (unit.pod_labels, unit.pod_annotations)
        if (marks[0] or marks[1]) and not carries(view, marks):
            self.pending_marks[key] = marks

    def marks_patch(self, key: str) -> MarkPatch | None:
        """What the bound pod ``key`` lacks: its unit's marks (pods the extender placed) and its deletion
        cost (every pod a policy governs; absent reads as 0); ``None`` when nothing is missing."""
        record = self.pods.get(key)
        if record is None:
            return None
        view = record.view
        if view.node_name is None or view.finished or view.terminating:
            return None
        policy = self.policy_for(view)
        if policy is None:
            return None
        index = self.units.unit_index(policy, view.node_name)
        if index is None:
            return None
        labels: dict[str, str] = {}
        annotations: dict[str, str] = {}
        pending = self.pending_marks.get(key)
        if pending is not None:
            labels.update((k, v) for k, v in pending[0].items() if view.labels.get(k) != v)
            annotations.update((k, v) for k, v in pending[1].items() if view.annotations.get(k) != v)
        cost = str(unit_deletion_cost(index, len(policy.units)))
        if view.annotations.get(DELETION_COST_ANNOTATION, "0") != cost:
            annotations[DELETION_COST_ANNOTATION] = cost
        if not labels and not annotations:
            return None
        return MarkPatch(
            view.namespace, view.name, view.uid, labels, annotations, policy.describe_unit(index), view.node_name
        )

    def _check_marks(self, key: str) -> None:
        if self.on_marks_needed is not None and self.marks_patch(key) is not None:
            self.on_marks_needed(key)
