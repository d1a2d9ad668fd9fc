"""The extender's entry points: the watches feed it, the HTTP handlers ask it to filter and prioritize.

Cache -> view -> decide, as Kueue's ``pkg/cache`` and ``pkg/scheduler``:

* :class:`~webhook.extender.cache.ExtenderCache` holds the cluster as the watches report it (nodes, pods,
  ResourcePolicies, the ElasticQuotaTree), the placements the filter made (assumptions) and the marks placed
  pods still lack;
* :func:`~webhook.extender.decide.decide` reads it through a read-only
  :class:`~webhook.extender.decide.ClusterView` and returns a decision and what to record;
* :class:`ExtenderState` runs one against the other with the time passed in, records the outcome, and keeps
  what is the extender's own rather than the cluster's: the window that samples passing nodes, the last
  filter verdicts prioritize reuses, and the verdicts kept by placement key.

Every read of counts and the record of the placement it leads to happen with no other request decided in
between (one synchronous call, or :meth:`ExtenderState.decide_filter` and its record in one event-loop
callback), so concurrent requests can never both take the last slot of a unit.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from webhook.api.objects import Obj
from webhook.core.placement import NodeView, PodView, ResourcePolicy, node_view, pod_view
from webhook.core.quota import QuotaTree
from webhook.core.sampling import looks_sampled, rotating_window, scheduler_sample_size
from webhook.core.waiting import WaitingPod
from webhook.extender.cache import DEFAULT_ASSUME_TTL, ExtenderCache
from webhook.extender.decide import Outcome, VerdictCache, decide
from webhook.extender.decision import Assumption, Decision, PreemptDecision
from webhook.extender.pods import pod_key, uid_of
from webhook.extender.preempt import decide_preemption
from webhook.extender.protocol import NodeVictims

LAST_FILTERS = 256
"""How many recent filter verdicts are kept for the prioritize call that follows each."""


class ExtenderState:
    """The extender's cache and its decisions. Not thread-safe: use it from one event loop."""

    def __init__(self, *, assume_ttl: float = DEFAULT_ASSUME_TTL, sample: bool = True) -> None:
        self.cache = ExtenderCache(assume_ttl=assume_ttl)
        self.sample = sample
        """Pass the scheduler at most :func:`scheduler_sample_size` of the chosen unit's nodes (see :meth:`filter`)."""
        self._sample_start = 0
        self._sample_seen: frozenset[str] | None = None
        """The names of the last filter request that looked like a default sample (:meth:`_sampled_by_scheduler`)."""
        self.verdicts = VerdictCache()
        self._last_filter: OrderedDict[str, Decision] = OrderedDict()
        """Pod uid -> its latest filter verdict that passed some node (consumed by its prioritize)."""
        self.ready = False
        """Set by the wiring once every watch has listed; until then the filter answers with ``Error``."""
        cache = self.cache
        # What the watches and the other shells call, straight to the cache (see there).
        self.upsert_node = cache.upsert_node
        self.delete_node = cache.delete_node
        self.replace_nodes = cache.replace_nodes
        self.upsert_pod = cache.upsert_pod
        self.delete_pod = cache.delete_pod
        self.replace_pods = cache.replace_pods
        self.pod_views = cache.pod_views
        self.pod = cache.pod
        self.policies = cache.policies
        self.policy_for = cache.policy_for
        self.set_trees = cache.set_trees
        self.set_reservations = cache.set_reservations
        self.set_device_classes = cache.claims.set_classes
        self.upsert_claim = cache.claims.upsert
        self.delete_claim = cache.claims.delete
        self.replace_claims = cache.claims.replace
        self.used = cache.used
        self.expire = cache.expire
        self.marks_patch = cache.marks_patch
        self.assumptions_to_check = cache.assumptions_to_check
        self.forget = cache.forget

    # The cache, as the watches and the other shells use it --------------------------------------------------
    @property
    def assume_ttl(self) -> float:
        return self.cache.assume_ttl

    @property
    def nodes(self) -> Mapping[str, NodeView]:
        return self.cache.nodes

    @property
    def tree(self) -> QuotaTree | None:
        return self.cache.tree

    @property
    def tree_problem(self) -> str:
        return self.cache.tree_problem

    @property
    def policy_problems(self) -> Mapping[str, str]:
        """``namespace/name`` -> why the ResourcePolicy is ignored."""
        return self.cache.policy_problems

    @property
    def policy_count(self) -> int:
        """How many valid ResourcePolicies the state holds."""
        return self.cache.policy_count

    @property
    def assumed(self) -> Mapping[str, Assumption]:
        """Pod key -> the placement the filter made and the watch has not yet confirmed."""
        return self.cache.assumed

    @property
    def on_marks_needed(self) -> Callable[[str], None] | None:
        """Called with a pod key when a bound pod lacks marks (see :meth:`marks_patch`)."""
        return self.cache.on_marks_needed

    @on_marks_needed.setter
    def on_marks_needed(self, callback: Callable[[str], None] | None) -> None:
        self.cache.on_marks_needed = callback

    @property
    def on_room(self) -> Callable[[], None] | None:
        """Called when usage goes down while pods wait for room (see :meth:`pods_to_wake`)."""
        return self.cache.on_room

    @on_room.setter
    def on_room(self, callback: Callable[[], None] | None) -> None:
        self.cache.on_room = callback

    @property
    def waiting(self) -> int:
        """How many pods refused for pod-level quota wait for room."""
        return len(self.cache.waits)

    def set_policies(self, objs: Iterable[Obj]) -> None:
        """Replace every ResourcePolicy; invalid ones are logged and ignored."""
        self.cache.set_policies(objs)
        self.verdicts.keep_policies(self.cache.policy_keys())

    def unit_counts(self, policy: ResourcePolicy, for_pod: PodView, now: float) -> tuple[int, ...]:
        """How many of the policy's pods each unit holds when placing ``for_pod`` (assumptions due by
        ``now`` are dropped first): :meth:`~webhook.extender.units.UnitCounts.counts`."""
        self.cache.expire(now)
        return self.cache.units.counts(policy, for_pod)

    def unit_counts_reference(self, policy: ResourcePolicy, for_pod: PodView, now: float) -> tuple[int, ...]:
        """:meth:`unit_counts` the plain way: the core's ``count_pods_per_unit`` over every pod view."""
        return self.cache.units.reference(policy, for_pod, now)

    # Decisions ---------------------------------------------------------------------------------------------
    def _decide(
        self,
        verb: str,
        pod: Obj,
        view: PodView,
        names: Sequence[str],
        *,
        now: float,
        given: Mapping[str, NodeView] | None,
    ) -> Outcome:
        outcome = decide(
            self.cache, self.verdicts, verb, pod, names, pod_view=view, now=now, given=given,
            sampled_by_scheduler=self._sampled_by_scheduler,
        )
        if outcome.first_seen is not None:
            self.cache.first_seen.setdefault(pod_key(view), outcome.first_seen)
        return outcome

    def _sampled_by_scheduler(self, names: Sequence[str]) -> bool:
        """Whether the scheduler cut this request to its default sample: :func:`looks_sampled`, and other
        nodes than the last request that looked so. A sampling scheduler starts each cycle where the last
        one stopped, so its samples move on; a fully scanning one whose own filters pass exactly that many
        nodes names the same ones each time (and a sample that does not move has missed nothing)."""
        if not looks_sampled(len(names), len(self.cache.nodes)):
            return False
        current = frozenset(names)
        previous, self._sample_seen = self._sample_seen, current
        return previous is not None and previous != current

    def filter(
        self,
        pod: Obj,
        names: Sequence[str],
        now: float,
        given_nodes: Sequence[Obj] | None = None,
    ) -> Decision:
        """Which of ``names`` the pod may use; records the placement when some node passes and a policy or
        a quota governs the pod (``given_nodes``: the request's Node objects, when the scheduler sent them).

        :meth:`decide_filter` and its record in one call.
        """
        decision, record = self.decide_filter(pod, names, now, given_nodes)
        record()
        return decision

    def decide_filter(
        self,
        pod: Obj,
        names: Sequence[str],
        now: float,
        given_nodes: Sequence[Obj] | None = None,
    ) -> tuple[Decision, Callable[[], None]]:
        """:meth:`filter`'s decision, and the record of it - the placement assumed (or a stale one dropped)
        and the verdict kept for prioritize - as a call to make before any other request is decided.

        The HTTP handler answers the scheduler first and records right after, in the same callback
        (:attr:`webhook.extender.http.Reply.then`), so the read of the counts and the placement it leads
        to still happen with no other request in between, and the scheduler's serial cycle does not wait
        for the bookkeeping.

        With :attr:`sample`, more passing nodes than the scheduler would have scored by default are cut to that
        many (:func:`scheduler_sample_size` of the cluster's nodes), a window that moves on with every call:
        the full-scan profile filters every node so that the extender sees each unit
        (``percentageOfNodesToScore: 100``, :mod:`webhook.extender.config`), and this gives it back its own
        default trade-off - to score about
        as many nodes as it would have sampled - but within the unit the pod must use. Without the window
        the scheduler scored (and decoded the names of) 500 nodes instead of 230 on 500 kwok nodes: it
        placed 212 pods/s instead of 239 (``bench/extender_bench.py``, ``filter, every node``; ``kq extender
        --pass-every-node`` turns the window off).
        """
        cache = self.cache
        cache.expire(now)
        given = None if given_nodes is None else {view.name: view for view in map(node_view, given_nodes)}
        view = pod_view(pod)
        outcome = self._decide("filter", pod, view, names, now=now, given=given)
        decision, assumption, waiting = outcome.decision, outcome.assumption, outcome.waiting
        if self.sample:
            # The default sample of the whole cluster: a request from the sampling profile is that already.
            decision = self._sampled(decision, scheduler_sample_size(max(len(names), len(cache.nodes))))

        def record() -> None:
            if view.uid and decision.passing:
                self._remember_filter(view.uid, decision)
            key = pod_key(view)
            if assumption is None:
                cache.drop_assumption(key)
            else:
                cache.assume(key, assumption)
            if waiting is None:
                cache.waits.done(key, cache.tree)
            else:
                cache.waits.wait(waiting, now, cache.tree)

        return decision, record

    def _sampled(self, decision: Decision, size: int) -> Decision:
        """``decision`` with at most ``size`` passing nodes: the window starting where the last one ended."""
        passing = decision.passing
        if len(passing) <= size:
            return decision
        window, self._sample_start = rotating_window(passing, self._sample_start, size)
        return replace(decision, passing=window, sampled_from=len(passing))

    def _remember_filter(self, uid: str, decision: Decision) -> None:
        """Keep the verdict for the prioritize call a scheduler configured with one makes next (the oldest
        of :data:`LAST_FILTERS` goes; without prioritize calls this is a bounded, cheap ring)."""
        self._last_filter[uid] = decision
        if len(self._last_filter) > LAST_FILTERS:
            self._last_filter.popitem(last=False)

    def prioritize(self, pod: Obj, names: Sequence[str], now: float) -> Decision:
        """Scores 0..10 for ``names``: the pod's usable units in order score 10, 9, ...; other nodes 0.

        kube-scheduler asks right after this pod's filter, about nodes that filter passed - which all lie
        in one unit and score alike. That filter's verdict then answers without deciding again.
        """
        self.cache.expire(now)
        uid = uid_of(pod)
        last = self._last_filter.pop(uid, None) if uid else None
        if last is not None and set(last.passing).issuperset(names):
            return Decision(
                "prioritize",
                last.pod,
                score_groups={last.passing_score: list(names)} if last.passing_score and names else {},
                nodes=len(names),
                policy=last.policy,
                unit=last.unit,
                summary=f"as filtered: {last.summary}",
            )
        return self._decide("prioritize", pod, pod_view(pod), names, now=now, given=None).decision

    # Preemption and waiting pods -------------------------------------------------------------------------
    def preempt(self, pod: Obj, victims: Mapping[str, NodeVictims], now: float) -> PreemptDecision:
        """Which nodes' victims may go for ``pod`` (:func:`~webhook.extender.preempt.decide_preemption`)."""
        self.cache.expire(now)
        return decide_preemption(self.cache, pod, victims, now)

    def pods_to_wake(self, now: float, limit: int) -> list[WaitingPod]:
        """Pods refused for pod-level quota that the room left now can take (at most ``limit``): the shell
        touches them so that the scheduler tries them again (:mod:`webhook.extender.wake`)."""
        cache = self.cache
        cache.expire(now)
        return cache.waits.choose(cache.tree, now, (cache.usage, cache.assumed_usage), limit)

    def unwait(self, key: str) -> None:
        """Pod ``key`` waits no more (it is gone): drop it, and the room it was woken for."""
        self.cache.waits.done(key, self.cache.tree)

    @property
    def wake_pending(self) -> bool:
        """Whether pods wait for room or hold room they were woken for."""
        return self.cache.waits.pending
