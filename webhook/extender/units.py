"""Which unit of a ResourcePolicy each node lies in, and how many of the policy's pods each unit holds.

Both are kept per policy by the cache (:class:`~webhook.extender.cache.ExtenderCache`) as its pod and node
events arrive, so a filter request neither evaluates node selectors nor walks the namespace's pods: the
node -> unit map is filled on first use and forgotten for a node that changes; each pod is tallied by group
and unit when its events (or its assumed placement) arrive (:class:`UnitCounts`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING

from webhook.core.placement import NodeView, PodView, ResourcePolicy, count_pods_per_unit, counts_towards, unit_of_node
from webhook.core.unitplacement import MISSING
from webhook.extender.pods import with_marks

if TYPE_CHECKING:
    from webhook.extender.cache import ExtenderCache

Group = tuple[str | None, ...]
"""A pod's values of a policy's ``matchLabelKeys`` (pods count only within their group)."""


@dataclass(slots=True)
class _Tally:
    """The bound and assumed pods of one policy that fill its units, kept up to date from pod events."""

    policy: ResourcePolicy
    counts: dict[Group, list[int]]
    """Group -> pods per unit."""
    members: dict[str, tuple[Group, int]]
    """Pod key -> (group, unit index) of each pod counted."""


class UnitCounts:
    """Node -> unit maps and per-unit pod tallies of every policy, over one cache's pods and nodes."""

    def __init__(self, cache: ExtenderCache) -> None:
        self._cache = cache
        self._unit_maps: dict[str, tuple[ResourcePolicy, dict[str, int | None]]] = {}
        self._tallies: dict[str, _Tally] = {}
        """Policy key -> its pods per unit (built on first use, then kept by pod events)."""

    # Node -> unit ------------------------------------------------------------------------------------------
    def unit_map(self, policy: ResourcePolicy) -> dict[str, int | None]:
        """The cached node name -> unit index of ``policy`` (rebuilt when the policy object changes)."""
        entry = self._unit_maps.get(policy.key)
        if entry is None or entry[0] is not policy:
            entry = (policy, {})
            self._unit_maps[policy.key] = entry
        return entry[1]

    def unit_index(self, policy: ResourcePolicy, name: str) -> int | None:
        """The unit of ``policy`` that node ``name`` of the node cache lies in (``None``: none, or no node)."""
        units = self.unit_map(policy)
        index = units.get(name, MISSING)
        if index == MISSING:
            node = self._cache.nodes.get(name)
            if node is None:
                return None
            index = unit_of_node(policy, node)
            units[name] = index
        return index

    def unit_indices(
        self, policy: ResourcePolicy, names: Sequence[str], given: Mapping[str, NodeView] | None
    ) -> tuple[list[int | None], set[int | None]]:
        """The unit of each of ``names`` (:data:`~webhook.core.unitplacement.MISSING` for a node nobody knows),
        and the set of them. One ``dict.get`` per name, in C (``map``): at a few thousand names a Python loop
        here cost more than everything else the filter does. Nodes the map lacks - the first request after a
        node change, or nodes only the request describes (``given``, not kept) - are looked up."""
        units = self.unit_map(policy)
        indices = list(map(units.get, names, repeat(MISSING)))
        present = set(indices)
        if MISSING in present:
            nodes = self._cache.nodes
            for position, index in enumerate(indices):
                if index != MISSING:
                    continue
                name = names[position]
                node = nodes.get(name)
                if node is None and given is not None:
                    node = given.get(name)
                if node is None:
                    continue
                found = unit_of_node(policy, node)
                if name in nodes:
                    units[name] = found
                indices[position] = found
            present = set(indices)
        return indices, present

    def forget_node(self, name: str) -> None:
        """A node changed or left: its units are looked up again, and every policy is recounted lazily (the
        pods on it may have changed unit)."""
        for _, units in self._unit_maps.values():
            units.pop(name, None)
        self._tallies.clear()

    def forget_all_nodes(self) -> None:
        self._unit_maps.clear()
        self._tallies.clear()

    def keep_policies(self, live: set[str]) -> None:
        """Drop what is kept for policies no longer present."""
        for key in [key for key in self._unit_maps if key not in live]:
            del self._unit_maps[key]
        for key in [key for key in self._tallies if key not in live]:
            del self._tallies[key]

    # Pods per unit -----------------------------------------------------------------------------------------
    def _contribution(self, policy: ResourcePolicy, key: str) -> tuple[Group, int] | None:
        """Where pod ``key`` counts for ``policy`` - its group and unit - as ``count_pods_per_unit`` counts it
        for any other pod of its group: a bound pod by its node (carrying the unit's marks, or about to), an
        unbound pod with a uid by its assumed placement; ``None`` when it does not count."""
        cache = self._cache
        record = cache.pods.get(key)
        pod = None if record is None else record.view
        if pod is not None and pod.node_name is not None:
            if not counts_towards(policy, pod):
                return None
            index = self.unit_index(policy, pod.node_name)
            if index is None:
                return None
            marks = cache.pending_marks.get(key)
            if not policy.units[index].carries_marks(pod if marks is None else with_marks(pod, marks)):
                return None
            return tuple(pod.labels.get(label) for label in policy.match_label_keys), index
        assumption = cache.assumed.get(key)
        if assumption is None:
            return None
        pod = assumption.view if pod is None else pod
        if not pod.uid or not counts_towards(policy, pod):
            return None
        index = self.unit_index(policy, assumption.node_name)
        if index is None:
            return None
        return tuple(pod.labels.get(label) for label in policy.match_label_keys), index

    def _tally(self, policy: ResourcePolicy) -> _Tally:
        tally = self._tallies.get(policy.key)
        if tally is None or tally.policy is not policy:
            cache = self._cache
            tally = _Tally(policy, {}, {})
            keys = set(cache.pods_by_ns.get(policy.namespace, {})) | cache.assumed_by_ns.get(policy.namespace, set())
            for key in keys:
                self._count_in(tally, key)
            self._tallies[policy.key] = tally
        return tally

    def _count_in(self, tally: _Tally, key: str) -> None:
        place = self._contribution(tally.policy, key)
        if place is not None:
            tally.members[key] = place
            tally.counts.setdefault(place[0], [0] * len(tally.policy.units))[place[1]] += 1

    def retally(self, key: str, namespace: str) -> None:
        """Recount pod ``key`` (bound, assumed, or gone) in the tallies of its namespace's policies."""
        for policy in self._cache.policies(namespace):
            tally = self._tallies.get(policy.key)
            if tally is None or tally.policy is not policy:
                continue  # rebuilt on next use
            old = tally.members.pop(key, None)
            if old is not None:
                tally.counts[old[0]][old[1]] -= 1
            self._count_in(tally, key)

    def counts(self, policy: ResourcePolicy, for_pod: PodView) -> tuple[int, ...]:
        """How many of the policy's pods each unit holds when placing ``for_pod``.

        Exactly :func:`~webhook.core.placement.count_pods_per_unit` over the namespace's pods (placed pods
        counting as carrying their unit's marks until the watch shows them) and the assumed placements -
        :meth:`reference` is that call, and a property test holds the two equal - without walking the
        namespace's pods on every request: a request reads one row and takes out the pod itself.
        """
        cache = self._cache
        tally = self._tally(policy)
        group = tuple(for_pod.labels.get(label) for label in policy.match_label_keys)
        counts = list(tally.counts.get(group, [0] * len(policy.units)))
        # The pod being placed never counts itself (``PodView.same_pod``: by uid, else by namespace/name).
        if for_pod.uid:
            own_keys = {for_pod.uid, for_pod.key}
        else:
            views = cache.pods_by_ns.get(policy.namespace, {})
            own_keys = {key for key, view in views.items() if view.same_pod(for_pod)}
            own_keys.update(
                key
                for key in cache.assumed_by_ns.get(policy.namespace, ())
                if key not in views and cache.assumed[key].view.same_pod(for_pod)
            )
        for key in own_keys:
            own = tally.members.get(key)
            if own is not None and own[0] == group:
                counts[own[1]] -= 1
        return tuple(counts)

    def reference(self, policy: ResourcePolicy, for_pod: PodView, now: float) -> tuple[int, ...]:
        """:meth:`counts` the plain way: the core's ``count_pods_per_unit`` over every pod view."""
        cache = self._cache

        def views() -> Iterator[PodView]:
            by_key = cache.pods_by_ns.get(policy.namespace, {})
            for key, view in by_key.items():
                marks = cache.pending_marks.get(key)
                yield view if marks is None else with_marks(view, marks)
            for key, assumption in cache.assumed.items():
                if assumption.view.namespace == policy.namespace and key not in by_key:
                    yield assumption.view

        return count_pods_per_unit(
            policy, views(), cache.nodes, now=now, for_pod=for_pod, assumed=cache.assumed_core
        )
