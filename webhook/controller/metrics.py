"""Prometheus metrics of the queue controller (served by ``kq serve --metrics-port``).

* ``kube_queue_admissions_total{quota}`` / ``kube_queue_evictions_total{quota}`` - jobs released / evicted;
* ``kube_queue_pending_jobs{quota}`` - queue depth (waiting jobs) per leaf quota;
* ``kube_queue_quota_{min,max,used,request,borrowed}{quota, resource}`` - per node of the tree, in whole units
  (CPU cores, bytes, GPUs, jobs); ``borrowed`` is ``max(0, used - min)``;
* ``kube_queue_wait_seconds{quota}`` - creation to admission;
* ``kube_queue_controller_pass_seconds`` - one reconcile pass;
* ``kube_queue_controller_pass_phase_seconds{phase}`` - its phases: ``prepare``, ``decide``, ``release``,
  ``status``;
* ``kube_queue_controller_leader`` - 1 on the replica that holds the Lease;
* ``kube_queue_oldest_pending_seconds{quota}`` - age of the longest-waiting job of a leaf quota (0 when none);
* ``kube_queue_failed_attempts_total{action, reason}`` - admissions/evictions/record writes the API refused
  (``stale``: the object changed under the decision, retried next pass; ``api_error``; ``not_leader``);
* ``kube_queue_oversell_rate`` - the controller's ``--oversellrate``;
* ``kube_queue_backoff_jobs{queue}`` - jobs in a Queue's ``backoff`` list (failed to start, waiting to retry
  or given up);
* ``kube_queue_start_failures_total{reason}`` - released jobs held again because they did not start in time,
  by the category of what their pods said (a bounded set, docs/start-timeout.md);
* ``kube_queue_eta_refresh_cpu_seconds`` - CPU seconds of one refresh of the start estimates (docs/eta.md).

Only the leader sets the per-quota gauges (a follower clears them), so a sum over replicas stays right.
"""

from __future__ import annotations

from fractions import Fraction

from prometheus_client import Counter, Gauge, Histogram

from webhook.controller.decide import JobDecisions
from webhook.core.fairshare import INFINITE, fair_parents, shares, weights
from webhook.core.quantity import to_float
from webhook.core.quota import QuotaTree, queue_name

ADMISSIONS = Counter("kube_queue_admissions", "Jobs released by the queue controller", ["quota"])
EVICTIONS = Counter("kube_queue_evictions", "Jobs evicted back to their queue by reclaim", ["quota"])
PENDING = Gauge("kube_queue_pending_jobs", "Jobs waiting in the queue of a leaf quota", ["quota"])
WAIT = Histogram(
    "kube_queue_wait_seconds",
    "Seconds from a job's creation to its admission",
    ["quota"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
)
PASS = Histogram(
    "kube_queue_controller_pass_seconds",
    "Seconds one reconcile pass of the queue controller takes",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
PASS_PHASE = Histogram(
    "kube_queue_controller_pass_phase_seconds",
    "Seconds a reconcile pass spends per phase: prepare (namespaces, Queues, the job view, start checks), "
    "decide, release (admission, eviction and record writes), status (Queued events, Queue and tree status)",
    ["phase"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
ETA_REFRESH = Histogram(
    "kube_queue_eta_refresh_cpu_seconds",
    "CPU seconds one refresh of the waiting jobs' start estimates takes (off the pass, in a worker thread)",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
ETA_CPU = Counter(
    "kube_queue_eta_cpu_seconds",
    "CPU seconds the refreshes of the start estimates took, counted as they go (between the replay's passes): a "
    "refresh takes seconds at tens of thousands of waiting jobs",
)
LEADER = Gauge("kube_queue_controller_leader", "1 when this replica holds the controller Lease")
OLDEST = Gauge(
    "kube_queue_oldest_pending_seconds", "Age in seconds of the longest-waiting job of a leaf quota", ["quota"]
)
FAILED = Counter(
    "kube_queue_failed_attempts",
    "Controller writes the API refused, by action (admit, evict, clear-record) and reason",
    ["action", "reason"],
)
BACKOFF = Gauge("kube_queue_backoff_jobs", "Jobs in a Queue's backoff list (failed to start in time)", ["queue"])
START_FAILURES = Counter(
    "kube_queue_start_failures",
    "Released jobs held again because their pods did not run within the start timeout, by reason",
    ["reason"],
)
SHARE = Gauge(
    "kube_queue_quota_fair_share_used_ratio",
    "Under a fair-sharing parent: the child's weighted dominant share of what it borrows beyond its min "
    "(docs/fair-sharing.md)",
    ["quota"],
)
FAIR_SHARE = Gauge(
    "kube_queue_quota_fair_share_ratio",
    "Under a fair-sharing parent: the child's weight as a fraction of its siblings' (its fair part of the spare)",
    ["quota"],
)
OVERSELL = Gauge("kube_queue_oversell_rate", "The controller's oversell rate (admission limit = max x rate)")
QUOTA = {
    name: Gauge(f"kube_queue_quota_{name}", help_text, ["quota", "resource"])
    for name, help_text in (
        ("min", "Guaranteed amount of a resource at a quota node (whole units)"),
        ("max", "Cap of a resource at a quota node (whole units)"),
        ("used", "Amount of a resource admitted jobs use at a quota node (whole units)"),
        ("request", "Amount of a resource admitted and queued jobs request at a quota node (whole units)"),
        ("borrowed", "Amount used beyond the guaranteed min at a quota node (whole units)"),
    )
}


def observe_pass(tree: QuotaTree, decisions: JobDecisions, seconds: float, now: float) -> None:
    """Refresh the per-quota gauges after a pass (``now``: wall-clock seconds, for waiting ages)."""
    PASS.observe(seconds)
    depth: dict[str, int] = {leaf.full_name: 0 for leaf in tree.leaves()}
    oldest: dict[str, float] = dict.fromkeys(depth, 0.0)
    for job in decisions.waiting:
        quota = job.leaf.full_name
        depth[quota] = depth.get(quota, 0) + 1
        oldest[quota] = max(oldest.get(quota, 0.0), now - job.workload.created)
    PENDING.clear()
    OLDEST.clear()
    BACKOFF.clear()
    backing: dict[str, int] = {
        queue_name(leaf.name, namespace): 0 for leaf in tree.leaves() for namespace in leaf.namespaces
    }
    for job in decisions.backoff:
        name = queue_name(job.leaf.name, job.workload.key.namespace)
        backing[name] = backing.get(name, 0) + 1
    for name, count in backing.items():
        BACKOFF.labels(name).set(count)
    for quota, count in depth.items():
        PENDING.labels(quota).set(count)
        OLDEST.labels(quota).set(max(0.0, oldest[quota]))
    for gauge in QUOTA.values():
        gauge.clear()
    for key, usage in decisions.ledger.snapshot().items():
        node = tree.nodes[key]
        quota = node.full_name
        names = set(node.min) | set(node.max) | set(usage.used) | set(usage.request)
        for resource in names:
            low = node.min.get_or_zero(resource)
            used = usage.used.get_or_zero(resource)
            QUOTA["min"].labels(quota, resource).set(to_float(low))
            if resource in node.max:
                QUOTA["max"].labels(quota, resource).set(to_float(node.max[resource]))
            QUOTA["used"].labels(quota, resource).set(to_float(used))
            QUOTA["request"].labels(quota, resource).set(to_float(usage.request.get_or_zero(resource)))
            QUOTA["borrowed"].labels(quota, resource).set(to_float(max(0, used - low)))
    SHARE.clear()
    FAIR_SHARE.clear()
    if fair_parents(tree):
        weight = weights(tree)
        for key, value in shares(tree, decisions.ledger.used_view()).items():
            node = tree.nodes[key]
            parent = tree.nodes[tree.parents[key] or key]
            total = sum((weight[child.key] for child in parent.children), start=Fraction(0))
            SHARE.labels(node.full_name).set(float(min(value, INFINITE)))
            FAIR_SHARE.labels(node.full_name).set(float(weight[key] / total) if total else 0.0)


def clear_quota_gauges() -> None:
    """A follower exports no per-quota state."""
    PENDING.clear()
    BACKOFF.clear()
    OLDEST.clear()
    for gauge in QUOTA.values():
        gauge.clear()
    SHARE.clear()
    FAIR_SHARE.clear()
