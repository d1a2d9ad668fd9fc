"""A simple node-capacity model: where an admitted job's pods would go, and whether they all fit now.

Admission (the queue) and running (pods on nodes) differ in two ways, and the simulator models both:

* **Pod-level quota** (:mod:`webhook.core.podquota`): a pod whose quota would run over ``max`` at any level
  is kept pending by the scheduler extender, whatever the oversell rate. With ``--oversellrate`` above 1 the queue
  admits up to ``max × rate``; the jobs admitted beyond ``max`` wait here as pending pods.
* **Node capacity**: when the scenario lists nodes, each pod goes to the first node (in the order listed)
  with enough free allocatable for every resource it requests that the nodes declare (``pods`` counts one
  per pod). A resource no node shape declares is not modelled.

A job starts when *all* its pods are placed at once (gang start), and only then does its run time begin;
partial starts are not modelled. Pending jobs are started in order of priority (descending), then
admission time, then name; one that does not fit does not hold back the others (as kube-scheduler retries
every pending pod). With ``--oversellrate=1`` and enough nodes for the root's total, admission == running.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from webhook.core.podquota import POD_QUOTA_REFUSAL, charge, pod_quota_blockers
from webhook.core.quantity import NANO, format_quantity
from webhook.core.quota import QuotaTree
from webhook.core.resources import Resources, is_binary_resource
from webhook.core.workload import Workload
from webhook.sim.model import NodeShape

PODS = "pods"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a job's pods went: ``(node index, per-pod request)`` for every pod."""

    pods: tuple[tuple[int, Resources], ...]


class NodePool:
    """Free allocatable per node; :meth:`place` and :meth:`release` keep it current."""

    __slots__ = ("_declared", "free", "names")

    def __init__(self, shapes: Sequence[NodeShape]) -> None:
        self.names: list[str] = []
        self.free: list[dict[str, int]] = []
        for shape in shapes:
            for index in range(shape.count):
                self.names.append(f"{shape.name}-{index}")
                self.free.append(dict(shape.allocatable.items()))
        self._declared = frozenset(name for free in self.free for name in free)

    @property
    def modelled(self) -> bool:
        """Whether there are nodes at all (without nodes, capacity is not modelled)."""
        return bool(self.free)

    def place(self, workload: Workload) -> Placement | str:
        """Put every pod of ``workload`` on a node (first fit), or say why not; nothing changes on failure."""
        taken: list[tuple[int, Resources]] = []
        for pod_set in workload.pod_sets:
            wanted = {name: amount for name, amount in pod_set.per_pod.items()
                      if amount > 0 and name in self._declared}
            if PODS in self._declared:
                wanted[PODS] = wanted.get(PODS, 0) + NANO
            per_pod = Resources(wanted)
            for _ in range(pod_set.count):
                index = self._first_fit(wanted)
                if index is None:
                    self.release(Placement(tuple(taken)))
                    return (f"no node has {per_pod.without_zeros().describe()} free for a pod of pod set "
                            f"{pod_set.name!r} ({len(taken)} of the job's pods placed)")
                free = self.free[index]
                for name, amount in wanted.items():
                    free[name] -= amount
                taken.append((index, per_pod))
        return Placement(tuple(taken))

    def _first_fit(self, wanted: Mapping[str, int]) -> int | None:
        for index, free in enumerate(self.free):
            if all(free.get(name, 0) >= amount for name, amount in wanted.items()):
                return index
        return None

    def release(self, placement: Placement) -> None:
        """Give the pods' allocatable back."""
        for index, per_pod in placement.pods:
            free = self.free[index]
            for name, amount in per_pod.items():
                free[name] += amount


def pod_quota_blocker(
    tree: QuotaTree, running: Mapping[str, Mapping[str, int]], workload: Workload
) -> str | None:
    """Why the extender's pod-level quota keeps the job's pods pending (``running + request > max`` at some
    level, unscaled: :func:`webhook.core.podquota.pod_quota_blockers`), or ``None`` when they may run."""
    blockers = pod_quota_blockers(tree, workload.quota, workload.request, running, by_name=False, first=True)
    if not blockers:
        return None
    (blocker,) = blockers
    binary = is_binary_resource(blocker.resource)
    return (f"{POD_QUOTA_REFUSAL} {blocker.quota}: {blocker.resource} running "
            f"{format_quantity(blocker.used, binary)} + request {format_quantity(blocker.request, binary)} "
            f"> max {format_quantity(blocker.max, binary)}")


def shift(into: dict[str, dict[str, int]], tree: QuotaTree, workload: Workload, sign: int,
          extra: Iterable[tuple[str, int]] = ()) -> None:
    """Add (``sign=1``) or remove (``-1``) the workload's request at its leaf and every ancestor
    (:func:`webhook.core.podquota.charge`)."""
    charge(into, tree, workload.quota, [*workload.request.items(), *extra], sign)
