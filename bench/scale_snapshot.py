"""The scale benchmark's input (issue 21 part 4): a cluster of 50,000 nodes under a department -> team -> queue
quota tree, about 20 running jobs a queue, and a million waiting jobs; and the changes a second pass sees.

Everything is built from the package's public types (``bench/`` imports no test module). Jobs of the same
shape share their pod sets and request objects, as the controller's parsed objects do not, so the snapshot's
memory is the jobs' identity and order fields, not copies of the same resource list.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from webhook.api.names import MAX_JOBS
from webhook.core.decisions import Decisions, PlainJob
from webhook.core.queueing import Policy
from webhook.core.quota import QuotaTree, parse_tree
from webhook.core.resources import Resources
from webhook.core.workload import Phase, PodSet, Workload, WorkloadKey

NODE_CPU = 64
NODE_MEMORY_GIB = 256
DEPARTMENTS = 20
PODS = (1, 1, 2, 4, 8)
CPUS = (1, 2, 4, 8)
"""A job is ``PODS`` pods of ``CPUS`` CPUs each (4 GiB per CPU), both drawn uniformly: 17 CPUs a job on average."""


@dataclass(frozen=True, slots=True)
class Shape:
    """How big the snapshot is."""

    waiting: int
    queues: int
    nodes: int
    running_per_queue: int = 20

    @property
    def teams_per_department(self) -> int:
        return max(1, self.queues // DEPARTMENTS // 20)

    @property
    def queues_per_team(self) -> int:
        return max(1, self.queues // DEPARTMENTS // self.teams_per_department)


def _limits(min_cpu: int, max_cpu: int, jobs: int | None = None) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": max_cpu, "memory": f"{4 * max_cpu}Gi"}
    if jobs is not None:
        limits[MAX_JOBS] = jobs
    return {"min": {"cpu": min_cpu, "memory": f"{4 * min_cpu}Gi"}, "max": limits}


def build_tree(shape: Shape, rng: random.Random) -> QuotaTree:
    """Root = the nodes' total; departments, teams and queues share 95 % of it as ``min`` and may borrow
    (``max`` = 1.5 x ``min`` for teams and departments, 2 x for queues); one queue in ten caps its jobs."""
    total = shape.nodes * NODE_CPU
    leaf_min = total * 95 // 100 // (DEPARTMENTS * shape.teams_per_department * shape.queues_per_team)
    team_min = leaf_min * shape.queues_per_team
    department_min = team_min * shape.teams_per_department
    departments = []
    for d in range(DEPARTMENTS):
        teams = []
        for t in range(shape.teams_per_department):
            leaves = []
            for q in range(shape.queues_per_team):
                name = f"q-{d}-{t}-{q}"
                cap = rng.choice((10, 20, 40)) if rng.random() < 0.1 else None
                leaves.append({"name": name, **_limits(leaf_min, 2 * leaf_min, cap), "namespaces": [f"ns-{d}-{t}-{q}"]})
            teams.append({"name": f"team-{d}-{t}", **_limits(team_min, team_min * 3 // 2), "children": leaves})
        departments.append({"name": f"dept-{d}", **_limits(department_min, department_min * 3 // 2),
                            "children": teams})
    root = {"name": "root", "min": {"cpu": total, "memory": f"{4 * total}Gi"},
            "max": {"cpu": total, "memory": f"{4 * total}Gi"}, "children": departments}
    return parse_tree({"root": root})


def policies(tree: QuotaTree, rng: random.Random, strict: bool = False) -> dict[str, Policy]:
    """``Block`` for every queue under ``strict`` (``StrictPriority=true``), else for one queue in five."""
    return {leaf.key: Policy.BLOCK if strict or rng.random() < 0.2 else Policy.ROUND for leaf in tree.leaves()}


class _Shapes:
    """One pod set and request per job size, shared by every job of that size."""

    def __init__(self) -> None:
        self._by_shape: dict[tuple[int, int], tuple[tuple[PodSet, ...], Resources]] = {}

    def draw(self, rng: random.Random) -> tuple[int, tuple[PodSet, ...], Resources]:
        """A job's CPUs in all, its pod sets and its request."""
        pods, cpu = rng.choice(PODS), rng.choice(CPUS)
        found = self._by_shape.get((pods, cpu))
        if found is None:
            pod_set = PodSet("main", pods, Resources.parse({"cpu": cpu, "memory": f"{4 * cpu}Gi"}))
            found = self._by_shape[pods, cpu] = ((pod_set,), pod_set.total)
        return (pods * cpu, *found)


def build_jobs(tree: QuotaTree, shape: Shape, rng: random.Random) -> list[PlainJob]:
    """Running jobs first (each queue filled to between 50 % and 150 % of its ``min``, so some borrow and some
    are owed), then ``shape.waiting`` waiting jobs over the queues (a few queues get many more than others)."""
    shapes = _Shapes()
    leaves = tree.leaves()
    jobs: list[PlainJob] = []
    created = 0.0
    for leaf in leaves:
        target = leaf.min["cpu"] // 10**9 * rng.uniform(0.5, 1.5)
        namespace = leaf.namespaces[0]
        held = 0
        index = 0
        while held < target:
            cpu, pod_sets, request = shapes.draw(rng)
            held += cpu
            created += 1
            workload = Workload(WorkloadKey("Job", namespace, f"run-{index}"), leaf.name, pod_sets,
                                priority=rng.randrange(4), created=created, phase=Phase.ADMITTED,
                                admitted_at=created, request=request)
            jobs.append(PlainJob(workload))
            index += 1
    weights = [rng.paretovariate(1.5) for _ in leaves]
    picks = rng.choices(range(len(leaves)), weights=weights, k=shape.waiting)
    for index, pick in enumerate(picks):
        leaf = leaves[pick]
        _, pod_sets, request = shapes.draw(rng)
        created += 1
        workload = Workload(WorkloadKey("Job", leaf.namespaces[0], f"wait-{index}"), leaf.name, pod_sets,
                            priority=rng.randrange(4), created=created, request=request)
        jobs.append(PlainJob(workload))
    return jobs


def carry_out(jobs: Sequence[PlainJob], decisions: Decisions[PlainJob], rng: random.Random,
              finished: int = 200, submitted: int = 200) -> list[PlainJob]:
    """The jobs the next pass sees, as the controller's watch delivers them after this pass's writes:
    admissions and preemptors admitted, victims held again, ``finished`` running jobs gone and ``submitted``
    new jobs waiting."""
    evicted = {victim.workload.key for step in decisions.reclaims for victim in step.victims}
    admitted = {job.workload.key for job in (*decisions.admissions, *decisions.late_admissions)}
    admitted.update(step.preemptor.workload.key for step in decisions.reclaims)
    out: list[PlainJob] = []
    created = 0.0
    for job in jobs:
        workload = job.workload
        created = max(created, workload.created)
        if workload.key in admitted:
            out.append(PlainJob(dataclasses.replace(workload, phase=Phase.ADMITTED, admitted_at=1e9)))
        elif workload.key in evicted:
            out.append(PlainJob(dataclasses.replace(workload, phase=Phase.QUEUED, admitted_at=None)))
        else:
            out.append(job)
    running = [index for index, job in enumerate(out) if job.workload.phase is Phase.ADMITTED]
    for index in sorted(rng.sample(running, min(finished, len(running))), reverse=True):
        del out[index]
    shapes = _Shapes()
    leaves = [job.workload for job in out[-submitted:]]
    for index in range(submitted):
        template = leaves[index % len(leaves)] if leaves else None
        if template is None:
            break
        created += 1
        _, pod_sets, request = shapes.draw(rng)
        out.append(PlainJob(Workload(WorkloadKey("Job", template.key.namespace, f"new-{index}"), template.quota,
                                     pod_sets, priority=rng.randrange(4), created=created, request=request)))
    return out
