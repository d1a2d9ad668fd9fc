"""The peer's shape: Kueue's scheduler performance test (baseline) as a kube-queue scenario.

Kueue's ``test/performance/scheduler/configs/baseline/generator.yaml`` (kubernetes-sigs/kueue) generates 5
cohorts of 6 ClusterQueues each (nominal quota 20 CPU, borrowing limit 100, ``reclaimWithinCohort: Any``,
``withinClusterQueue: LowerPriority``), and in each ClusterQueue three workload sets, created concurrently,
one workload per interval (the first after one interval):

=========  =====  ========  =======  ========  ========
class      count  interval  runtime  priority  request
=========  =====  ========  =======  ========  ========
small      350    100 ms    200 ms   50        1 CPU
medium     100    500 ms    500 ms   100       5 CPU
large      50     1200 ms   1000 ms  200       20 CPU
=========  =====  ========  =======  ========  ========

That is 15,000 workloads in 30 queues. Its runner holds each admitted workload for its runtime (real
milliseconds, no scaling) and then finishes it. Here the same shape is: a root of 600 CPU, 5 departments
(``cohort-<c>``, min = max = 120 CPU: a cohort cannot borrow from another), 30 leaves (``cq-<c>-<q>``, min 20,
max 120 = nominal + borrowing limit, attribute ``preempt-policy: PreemptLowerPriority``), one namespace per leaf,
PriorityClasses ``small``/``medium``/``large``, and batch Jobs of one pod each. Reclaim of borrowed capacity is
kube-queue's own (docs/reclaim.md). Nodes are not modelled (the peer's test has none) and the oversell rate
is 1 (Kueue admits strictly by quota).

``python -m webhook.sim.peer > examples/scenarios/peer-shape.yaml`` writes the scenario file.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import yaml

from webhook.api.kinds import ELASTIC_QUOTA_TREE
from webhook.api.names import PERF_CLASS_LABEL, TREE_NAMESPACE
from webhook.api.objects import Doc
from webhook.sim.model import SCENARIO_API_VERSION

PEER_SOURCE = "kubernetes-sigs/kueue test/performance/scheduler/configs/baseline/generator.yaml"
PEER_RANGESPEC = "kubernetes-sigs/kueue test/performance/scheduler/configs/baseline/rangespec.yaml"


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    name: str
    count: int
    interval_ms: int
    runtime_ms: int
    priority: int
    cpu: int


CLASSES = (
    WorkloadClass("small", 350, 100, 200, 50, 1),
    WorkloadClass("medium", 100, 500, 500, 100, 5),
    WorkloadClass("large", 50, 1200, 1000, 200, 20),
)
COHORTS = 5
QUEUES_PER_COHORT = 6
NOMINAL_CPU = 20
BORROWING_LIMIT_CPU = 100

PEER_WALL_MS_MEAN = 351_116.4
PEER_TIME_TO_ADMISSION_MS_MEAN = {"large": 6_666, "medium": 76_768, "small": 215_468}
PEER_CQ_MIN_USAGE_PERCENT = 58.7
"""The peer's published baseline: averages of 5 trial runs, from the comments of ``PEER_RANGESPEC``."""


def _job(namespace: str, workload: WorkloadClass) -> Doc:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "generateName": f"{workload.name}-",
            "namespace": namespace,
            "labels": {PERF_CLASS_LABEL: workload.name},
        },
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "template": {
                "spec": {
                    "priorityClassName": workload.name,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "work",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": str(workload.cpu)}},
                        }
                    ],
                }
            },
        },
    }


def peer_shape(cohorts: int = COHORTS, queues_per_cohort: int = QUEUES_PER_COHORT,
               scale: float = 1.0) -> list[Doc]:
    """The scenario's documents. ``scale`` multiplies every workload count (``0.1`` for a quick run)."""
    departments: list[Doc] = []
    jobs: list[Doc] = []
    for cohort in range(cohorts):
        children: list[Doc] = []
        for queue in range(queues_per_cohort):
            name = f"cq-{cohort}-{queue}"
            children.append({
                "name": name,
                "min": {"cpu": NOMINAL_CPU},
                "max": {"cpu": NOMINAL_CPU * queues_per_cohort},
                "namespaces": [name],
                "attributes": {"preempt-policy": "PreemptLowerPriority"},
            })
            for workload in CLASSES:
                count = max(1, round(workload.count * scale))
                jobs.append({
                    "manifest": _job(name, workload),
                    "at": f"{workload.interval_ms}ms",
                    "every": f"{workload.interval_ms}ms",
                    "count": count,
                    "runFor": f"{workload.runtime_ms}ms",
                })
        total = NOMINAL_CPU * queues_per_cohort
        departments.append({"name": f"cohort-{cohort}", "min": {"cpu": total}, "max": {"cpu": total},
                            "children": children})
    root_cpu = NOMINAL_CPU * queues_per_cohort * cohorts
    tree: Doc = {
        "apiVersion": ELASTIC_QUOTA_TREE.api_version,
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": TREE_NAMESPACE},
        "spec": {"root": {"name": "root", "min": {"cpu": root_cpu}, "max": {"cpu": root_cpu},
                          "children": departments}},
    }
    priority_classes: list[Doc] = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": workload.name},
         "value": workload.priority}
        for workload in CLASSES
    ]
    scenario: Doc = {
        "apiVersion": SCENARIO_API_VERSION,
        "kind": "Scenario",
        "metadata": {"name": "peer-shape"},
        "spec": {
            "description": f"Kueue's scheduler performance baseline ({PEER_SOURCE}) as a kube-queue scenario",
            "oversellrate": 1,
            "jobs": jobs,
        },
    }
    return [scenario, tree, *priority_classes]


def main() -> int:
    header = (
        "# Generated by `python -m webhook.sim.peer > examples/scenarios/peer-shape.yaml`; edit the generator.\n"
        f"# The peer's shape: {PEER_SOURCE}\n"
        "# 5 departments x 6 queues; per queue 350 small (1 CPU, 200 ms), 100 medium (5 CPU, 500 ms) and 50 large\n"
        "# (20 CPU, 1 s) Jobs, one every 100 / 500 / 1200 ms: 15,000 jobs. Run: kq simulate <this file>\n"
    )
    sys.stdout.write(header + yaml.safe_dump_all(peer_shape(), sort_keys=False, width=120))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
