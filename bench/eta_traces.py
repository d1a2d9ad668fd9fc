"""Traces for the start-estimate benchmark (``bench/eta_bench.py``): scenario documents for the simulator with
several departments, priorities, borrowing and reclaim, and run times drawn with noise around each job stem's
mean (a lognormal factor). Deterministic: a trace is a function of its seed.

Each namespace submits jobs of a few stems (``train``, ``eval``, ``sweep``...), each with its own size, mean run
time and share of high-priority jobs, as a Poisson process whose rate follows a busy day: above the cluster's
capacity for the first hours (queues build up), then below it (they drain).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from webhook.api.kinds import ELASTIC_QUOTA_TREE
from webhook.api.names import EXPECTED_RUNTIME_ANNOTATION, MAX_JOBS, TREE_NAMESPACE
from webhook.sim.model import SCENARIO_API_VERSION


@dataclass(frozen=True, slots=True)
class Stem:
    name: str
    cpu: int
    pods: int
    mean_minutes: float
    high_share: float = 0.1
    """Share of its jobs submitted at high priority."""
    declares: float = 0.0
    """Share of its jobs whose submitter declares the stem's mean run time (annotation)."""


STEMS = (
    Stem("train", 8, 2, 45.0, 0.05),
    Stem("eval", 4, 1, 12.0, 0.2),
    Stem("sweep", 2, 1, 6.0, 0.0),
    Stem("notebook-batch", 1, 1, 25.0, 0.1, declares=0.5),
)


@dataclass(frozen=True, slots=True)
class Trace:
    """One trace: its scenario documents, and when predictions are taken."""

    name: str
    description: str
    objects: list[dict[str, Any]] = field(repr=False)
    warmup: float
    """Seconds of virtual time before the first prediction (the history fills up)."""
    every: float
    """Seconds between two rounds of predictions."""
    jobs: int
    floor: float = 60.0
    """Seconds: the least wait an error is divided by (a minute for jobs of minutes to hours)."""


def _job(namespace: str, stem: Stem, priority: str, declared: bool) -> dict[str, Any]:
    annotations = {EXPECTED_RUNTIME_ANNOTATION: f"{stem.mean_minutes:g}m"} if declared else {}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": f"{stem.name}-", "namespace": namespace, "annotations": annotations},
        "spec": {
            "suspend": True,
            "parallelism": stem.pods,
            "completions": stem.pods,
            "template": {"spec": {
                "priorityClassName": priority,
                "restartPolicy": "Never",
                "containers": [{"name": "work", "image": "busybox",
                                "resources": {"requests": {"cpu": str(stem.cpu), "memory": f"{2 * stem.cpu}Gi"}}}],
            }},
        },
    }


def _tree(departments: list[dict[str, Any]], total: int) -> dict[str, Any]:
    return {
        "apiVersion": ELASTIC_QUOTA_TREE.api_version,
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": TREE_NAMESPACE},
        "spec": {"root": {"name": "root", "min": {"cpu": total, "memory": f"{2 * total}Gi"},
                          "max": {"cpu": total, "memory": f"{2 * total}Gi"}, "children": departments}},
    }


def _limits(min_cpu: int, max_cpu: int, jobs: int | None = None) -> dict[str, Any]:
    maximum: dict[str, Any] = {"cpu": max_cpu, "memory": f"{2 * max_cpu}Gi"}
    if jobs is not None:
        maximum[MAX_JOBS] = jobs
    return {"min": {"cpu": min_cpu, "memory": f"{2 * min_cpu}Gi"}, "max": maximum}


def build(
    name: str,
    description: str,
    *,
    seed: int,
    departments: int,
    leaves: int,
    total_cpu: int,
    hours: float,
    load: float,
    noise: float = 0.2,
    oversell: int = 1,
    strict: bool = False,
    job_caps: bool = False,
    warmup_hours: float = 2.0,
    every_minutes: float = 20.0,
) -> Trace:
    """A trace: ``departments`` × ``leaves`` quotas (one namespace each) sharing ``total_cpu``; departments may
    borrow up to the whole root, leaves up to their department's max; offered ``load`` (a multiple of the root's
    CPU) during the first half of ``hours``, a third of it after."""
    rng = random.Random(seed)
    dept_cpu = total_cpu // departments
    leaf_cpu = dept_cpu // leaves
    tree_departments = []
    namespaces = []
    for d in range(departments):
        children = []
        for leaf in range(leaves):
            namespace = f"team-{d}-{leaf}"
            namespaces.append(namespace)
            cap = rng.choice((4, 8)) if job_caps and leaf == 0 else None
            children.append({"name": f"team-{d}-{leaf}", **_limits(leaf_cpu, dept_cpu, cap), "namespaces": [namespace]})
        tree_departments.append({"name": f"dept-{d}", **_limits(dept_cpu, total_cpu), "children": children})
    mean_cpu_minutes = sum(stem.cpu * stem.pods * stem.mean_minutes for stem in STEMS) / len(STEMS)
    busy = load * total_cpu * 60 / mean_cpu_minutes  # jobs an hour that offer `load` times the capacity
    jobs: list[dict[str, Any]] = []
    for namespace in namespaces:
        clock = 0.0
        share = rng.uniform(0.5, 1.5) / len(namespaces)
        while True:
            rate = busy * share * (1.0 if clock < hours * 1800 else 1 / 3)
            clock += rng.expovariate(rate / 3600)
            if clock >= hours * 3600:
                break
            stem = rng.choice(STEMS)
            high = rng.random() < stem.high_share
            run = stem.mean_minutes * 60 * math.exp(rng.gauss(0.0, noise))
            declared = rng.random() < stem.declares
            jobs.append({"manifest": _job(namespace, stem, "high" if high else "low", declared),
                         "at": f"{clock:.3f}s", "runFor": f"{run:.3f}s"})
    jobs.sort(key=lambda entry: float(entry["at"][:-1]))
    scenario = {
        "apiVersion": SCENARIO_API_VERSION,
        "kind": "Scenario",
        "metadata": {"name": name},
        "spec": {"description": description, "oversellrate": oversell, "strictPriority": strict, "jobs": jobs},
    }
    classes = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": level},
                "value": value} for level, value in (("low", 0), ("high", 100))]
    return Trace(name, description, [scenario, _tree(tree_departments, total_cpu), *classes],
                 warmup=warmup_hours * 3600, every=every_minutes * 60, jobs=len(jobs))


def traces(scale: float = 1.0) -> list[Trace]:
    """The benchmark's traces; ``scale`` multiplies the size of the big one."""
    return [
        build("departments", "3 departments x 2 teams, Round, oversell 1: borrowing and reclaim",
              seed=1, departments=3, leaves=2, total_cpu=192, hours=12, load=1.4),
        build("strict-priority", "the same under StrictPriority (every queue Block)",
              seed=2, departments=3, leaves=2, total_cpu=192, hours=12, load=1.4, strict=True),
        build("oversell-caps", "oversell rate 2 (pods wait for the pods' quota), job caps on some teams",
              seed=3, departments=3, leaves=3, total_cpu=288, hours=12, load=1.4, oversell=2, job_caps=True),
        build("scale", "10 departments x 5 teams, thousands of jobs waiting at the peak",
              seed=4, departments=10, leaves=5, total_cpu=round(1600 * scale), hours=16, load=1.8,
              every_minutes=60, warmup_hours=3),
    ]
