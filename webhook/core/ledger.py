"""Per-node usage of the quota tree: what admitted jobs use and what admitted plus queued jobs request.

A job counts at its leaf and at every ancestor up to the root, with ``kube-queue/max-jobs`` = 1 for the job
itself (:attr:`Workload.request_with_count`). The :class:`Ledger` is an immutable value: every change returns a
new ledger that shares everything but the changed chain (leaf to root) with the old one, so the decision loops
can try "what if this job ran / this one were evicted" cheaply and throw the result away.

How a workload is counted follows its :class:`Phase`: ``ADMITTED`` in ``used`` and ``request``, ``QUEUED`` in
``request`` only, ``FINISHED`` in neither. The operations read ``workload.phase`` as *how the workload is
counted in this ledger now*, which is how :func:`build_ledger` counted it.

With :mod:`webhook.core.chain_usage` (the same sums over plain ``node key -> Resources`` maps and the mutable
:class:`~webhook.core.chain_usage.ChainTally`), the one place that adds usage up a quota chain.
:mod:`webhook.core.fit` words the checks, with full :class:`~webhook.core.fit.Blocker` reasons, over any
``node key -> Resources`` map (a ledger's :meth:`Ledger.used_view` included).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from webhook.core.quota import QuotaNode, QuotaTree
from webhook.core.resources import EMPTY, Resources
from webhook.core.workload import Phase, Workload

__all__ = ["Ledger", "NodeUsage", "build_ledger"]


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """Usage of one node: ``used`` by admitted jobs, ``request`` of admitted plus queued jobs."""

    used: Resources = EMPTY
    request: Resources = EMPTY


_ZERO = NodeUsage()


@dataclass(frozen=True, slots=True)
class _Cell:
    """A node's usage and its children's cells, in the tree's child order (a persistent tree)."""

    usage: NodeUsage
    children: tuple[_Cell, ...]


def _shifted(resources: Resources, delta: Mapping[str, int]) -> Resources:
    """``resources + delta`` with zero amounts dropped (so a job added then removed leaves nothing)."""
    if not delta:
        return resources
    items = dict(resources.items())
    for name, amount in delta.items():
        now = items.get(name, 0) + amount
        if now:
            items[name] = now
        else:
            items.pop(name, None)
    return Resources.adopt(items)  # a fresh dict nobody else holds: no need to copy it again


def _times(amount: Resources, times: int) -> Resources:
    if times == 1:
        return amount
    return amount * times if times else EMPTY


def _weights(phase: Phase) -> tuple[int, int]:
    """How many times a workload in ``phase`` counts in (used, request)."""
    if phase is Phase.ADMITTED:
        return 1, 1
    if phase is Phase.QUEUED:
        return 0, 1
    return 0, 0


class _UsedView(Mapping[str, Resources]):
    """``node key -> used`` over a ledger, the shape :mod:`webhook.core.fit` reads."""

    __slots__ = ("_ledger",)

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def __getitem__(self, key: str) -> Resources:
        return self._ledger.usage(key).used

    def __iter__(self) -> Iterator[str]:
        return iter(self._ledger.tree.nodes)

    def __len__(self) -> int:
        return len(self._ledger.tree.nodes)


def _routes(tree: QuotaTree) -> dict[str, tuple[int, ...]]:
    """Node key -> child indices from the root down to the node."""
    routes: dict[str, tuple[int, ...]] = {}
    stack: list[tuple[QuotaNode, tuple[int, ...]]] = [(tree.root, ())]
    while stack:
        node, route = stack.pop()
        routes[node.key] = route
        stack.extend((child, (*route, index)) for index, child in enumerate(node.children))
    return routes


def _cells(node: QuotaNode, usages: Mapping[str, NodeUsage]) -> _Cell:
    return _Cell(usages.get(node.key, _ZERO), tuple(_cells(child, usages) for child in node.children))


class Ledger:
    """Immutable per-node usage over one :class:`QuotaTree`.

    Read with :meth:`used`, :meth:`request` or :meth:`usage` (node names in any case); derive new ledgers with
    :meth:`add`, :meth:`without`, :meth:`with_admitted` and :meth:`with_queued`. Workloads whose quota is not a
    node of the tree change nothing (:func:`build_ledger` lists them in :attr:`unknown`).
    """

    __slots__ = ("_root", "_routes", "_tree", "_unknown")

    _tree: QuotaTree
    _unknown: tuple[Workload, ...]
    _routes: Mapping[str, tuple[int, ...]]
    _root: _Cell

    def __init__(self, tree: QuotaTree) -> None:
        """An empty ledger: nothing used or requested anywhere."""
        self._tree = tree
        self._unknown = ()
        self._routes = _routes(tree)
        self._root = _cells(tree.root, {})

    def _derive(self, root: _Cell, unknown: tuple[Workload, ...] | None = None) -> Ledger:
        new = object.__new__(Ledger)
        new._tree = self._tree
        new._unknown = self._unknown if unknown is None else unknown
        new._routes = self._routes
        new._root = root
        return new

    @property
    def tree(self) -> QuotaTree:
        """The tree this ledger counts over."""
        return self._tree

    @property
    def unknown(self) -> tuple[Workload, ...]:
        """Unfinished workloads whose quota is not in the tree (ignored in the usage), as given to
        :func:`build_ledger`."""
        return self._unknown

    # Reading ----------------------------------------------------------------------------------------------
    def usage(self, node_key: str) -> NodeUsage:
        """The usage of the node named ``node_key`` (any case); ``KeyError`` naming it when absent."""
        route = self._routes.get(node_key.lower())
        if route is None:
            raise KeyError(f"no quota node named {node_key!r}")
        cell = self._root
        for index in route:
            cell = cell.children[index]
        return cell.usage

    def used(self, node_key: str) -> Resources:
        """What the admitted jobs of the node's subtree use (with ``kube-queue/max-jobs`` = their count)."""
        return self.usage(node_key).used

    def request(self, node_key: str) -> Resources:
        """What the admitted and queued jobs of the node's subtree request."""
        return self.usage(node_key).request

    def used_view(self) -> Mapping[str, Resources]:
        """A read-only ``node key -> used`` mapping over every node (what :mod:`webhook.core.fit` takes)."""
        return _UsedView(self)

    def snapshot(self) -> dict[str, NodeUsage]:
        """Every node's usage by node key, in tree order."""
        out: dict[str, NodeUsage] = {}
        stack: list[tuple[QuotaNode, _Cell]] = [(self.tree.root, self._root)]
        while stack:
            node, cell = stack.pop()
            out[node.key] = cell.usage
            stack.extend(zip(reversed(node.children), reversed(cell.children), strict=True))
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ledger):
            return NotImplemented
        return (
            self._root == other._root
            and self.unknown == other.unknown
            and (self.tree is other.tree or self.tree == other.tree)
        )

    def __hash__(self) -> int:
        return hash(self._root)

    def __repr__(self) -> str:
        busy = {key: usage for key, usage in self.snapshot().items() if usage != _ZERO}
        return f"Ledger({busy!r}, unknown={len(self.unknown)})"

    # Deriving ---------------------------------------------------------------------------------------------
    def _shift(self, workload: Workload, used_times: int, request_times: int) -> Ledger:
        """A ledger with ``request_with_count`` added ``used_times`` to used and ``request_times`` to request
        along the workload's chain; only that chain is copied."""
        route = self._routes.get(workload.quota.lower())
        if route is None or (used_times == 0 and request_times == 0):
            return self
        amount = workload.request_with_count
        d_used = _times(amount, used_times)
        d_request = _times(amount, request_times)
        # Walk down, remembering the cells, then rebuild upwards.
        path = [self._root]
        for index in route:
            path.append(path[-1].children[index])
        cell = path[-1]
        rebuilt = _Cell(
            NodeUsage(_shifted(cell.usage.used, d_used), _shifted(cell.usage.request, d_request)), cell.children
        )
        for depth in range(len(route) - 1, -1, -1):
            parent, index = path[depth], route[depth]
            rebuilt = _Cell(
                NodeUsage(_shifted(parent.usage.used, d_used), _shifted(parent.usage.request, d_request)),
                (*parent.children[:index], rebuilt, *parent.children[index + 1 :]),
            )
        return self._derive(rebuilt)

    def add(self, workload: Workload) -> Ledger:
        """Count a workload not yet in this ledger, as its phase says (admitted, queued or not at all)."""
        used_times, request_times = _weights(workload.phase)
        return self._shift(workload, used_times, request_times)

    def without(self, workload: Workload) -> Ledger:
        """Stop counting a workload counted as its phase says (an admitted job leaves used and request)."""
        used_times, request_times = _weights(workload.phase)
        return self._shift(workload, -used_times, -request_times)

    def with_admitted(self, workload: Workload) -> Ledger:
        """Count ``workload`` as admitted instead of as its phase says: a queued job moves into used, a
        finished (uncounted) one enters used and request, an admitted one changes nothing."""
        used_times, request_times = _weights(workload.phase)
        return self._shift(workload, 1 - used_times, 1 - request_times)

    def with_queued(self, workload: Workload) -> Ledger:
        """Count ``workload`` as queued instead of as its phase says (an evicted job leaves used only)."""
        used_times, request_times = _weights(workload.phase)
        return self._shift(workload, -used_times, 1 - request_times)

    def moved(
        self,
        admitted: Iterable[Workload] = (),
        queued: Iterable[Workload] = (),
        removed: Iterable[Workload] = (),
    ) -> Ledger:
        """:meth:`with_admitted` of every ``admitted``, :meth:`with_queued` of every ``queued`` and
        :meth:`without` of every ``removed``, at once: the changes are summed per node first and each changed
        chain is rebuilt once (a pass that admits hundreds of jobs copies the tree's top once, not hundreds of
        times)."""
        parents = self._tree.parents
        used: dict[str, dict[str, int]] = {}
        request: dict[str, dict[str, int]] = {}
        for workloads, used_to, request_to in ((admitted, 1, 1), (queued, 0, 1), (removed, 0, 0)):
            for workload in workloads:
                used_times, request_times = _weights(workload.phase)
                times = (used_to - used_times, request_to - request_times)
                if times == (0, 0):
                    continue
                key: str | None = workload.quota.lower()
                if key not in self._routes:
                    continue
                amount = workload.request_with_count.items()
                while key is not None:
                    for target, count in ((used, times[0]), (request, times[1])):
                        if count:
                            sums = target.setdefault(key, {})
                            for name, nanos in amount:
                                sums[name] = sums.get(name, 0) + nanos * count
                    key = parents[key]
        if not used and not request:
            return self
        return self._derive(_rebuilt(self._tree.root, self._root, used, request))


def _rebuilt(
    node: QuotaNode, cell: _Cell, used: Mapping[str, Mapping[str, int]], request: Mapping[str, Mapping[str, int]]
) -> _Cell:
    """``cell`` with ``used`` and ``request`` (changes by node key) added to its subtree; cells without a change
    are shared."""
    d_used, d_request = used.get(node.key), request.get(node.key)
    if d_used is None and d_request is None:
        return cell
    children = tuple(_rebuilt(child, inner, used, request)
                     for child, inner in zip(node.children, cell.children, strict=True))
    usage = cell.usage
    return _Cell(NodeUsage(_shifted(usage.used, d_used or {}), _shifted(usage.request, d_request or {})), children)


def build_ledger(tree: QuotaTree, workloads: Iterable[Workload]) -> Ledger:
    """The usage of ``tree`` given every workload: ``ADMITTED`` counts in used and request, ``QUEUED`` in
    request only, ``FINISHED`` in neither. Unfinished workloads of unknown quotas are listed in
    :attr:`Ledger.unknown`."""
    used: dict[str, dict[str, int]] = {}
    request: dict[str, dict[str, int]] = {}
    unknown: list[Workload] = []
    for workload in workloads:
        used_times, request_times = _weights(workload.phase)
        if not request_times:
            continue
        key = workload.quota.lower()
        if key not in tree.nodes:
            unknown.append(workload)
            continue
        amount = workload.request_with_count
        chain_key: str | None = key
        while chain_key is not None:
            for target, times in ((used, used_times), (request, request_times)):
                if times:
                    sums = target.setdefault(chain_key, {})
                    for name, nanos in amount.items():
                        sums[name] = sums.get(name, 0) + nanos
            chain_key = tree.parents[chain_key]
    usages = {
        key: NodeUsage(
            Resources({n: v for n, v in used.get(key, {}).items() if v}),
            Resources({n: v for n, v in request.get(key, {}).items() if v}),
        )
        for key in request
    }
    return Ledger(tree)._derive(_cells(tree.root, usages), tuple(unknown))
