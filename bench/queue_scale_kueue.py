"""Kueue's side of the queue-scale bench: the same queue, the same steps, on a cluster with Kueue only.

Kueue v0.17.0, built from its Go module (:mod:`bench.peer_kueue_install`), runs out of cluster on loopback with
its webhooks registered and its client rate limiter off (the faster of the two ways the peer bench runs it), on
a fresh dev cluster with nothing of ours installed. Leader election is on from the start, so that a second
replica can take over later. The quota tree is the same as ours, in Kueue's terms
(:func:`bench.peer_kueue_objects.cohort_tree`): a Cohort per department under a root Cohort, a ClusterQueue
per team, a LocalQueue in each team's namespace. The Jobs are the same, created suspended with Kueue's
queue-name label, as Kueue's documentation submits them.

The steps are :class:`bench.queue_scale_run.Run`'s, with Kueue's counterparts where ours do not apply:

* memory and CPU are the ``kueue`` manager's (also its webhook);
* one pass: Kueue has none over the whole queue (no pass in its samples); its CPU in the same 4 s after one
  create is reported;
* a Queue's status is right when the team's ClusterQueue's ``pendingWorkloads`` counts the Jobs that wait
  there;
* the read side: ``kubectl get workloads -A``, ``kubectl get workloads -n NS`` and ``kubectl describe
  workload`` (Kueue's own answer to why a job waits); Kueue has no console page. Its visibility API (an
  aggregated API) is not in the bench: with its internal certificate management off, as here, Kueue v0.17.0's
  visibility server reads its certificate from ``/visibility/tls.crt``, a path fixed in its code
  (``pkg/visibility/server.go``) at the root of the file system, which the bench does not create on the
  machine (the private mount namespace only overlays ``/etc``);
* the leader change: the second replica is started, the webhooks are pointed at it (a Service would route to
  the replica that lives), the first is killed with SIGKILL and its Lease left to expire.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

from bench import burst_stats, e2e_shapes, peer_kueue_install
from bench import peer_kueue_objects as objects
from bench.burst_bench import api_samples
from bench.e2e_bench import NAMESPACES
from bench.queue_scale_run import API_PREFIXES, STEP_S, Run, all_namespaces, job, namespace, tree
from webhook.devcluster import cluster, processes
from webhook.devcluster.config import ClusterConfig
from webhook.kube.client import ResourceRef

LEASES = ResourceRef("coordination.k8s.io", "v1", "leases", objects.NAMESPACE)
LEASE = "c1f6bfd2.kueue.x-k8s.io"
"""Kueue's default leader election Lease (``DefaultLeaderElectionID`` in its configuration API)."""
KINDS = {"ResourceFlavor": "resourceflavors", "Cohort": "cohorts", "ClusterQueue": "clusterqueues",
         "LocalQueue": "localqueues"}
CLUSTER_QUEUES = ResourceRef(objects.GROUP, "v1beta2", "clusterqueues")
UNLIMITED = True
"""Kueue's client rate limiter off: as shipped (50 requests a second) it writes 50,000 Workloads in 17 minutes."""


def bring_up(config: ClusterConfig) -> None:
    """The dev cluster's control plane and nodes, then Kueue (its CRDs, the manager, its webhooks)."""
    echo = lambda line: print(line, file=sys.stderr)  # noqa: E731
    bins = cluster.up(config, echo=echo)
    peer_kueue_install.install(config, bins, peer_kueue_install.binary(), unlimited=UNLIMITED, leader_elect=True)


class KueueRun(Run):
    """:class:`Run` against Kueue."""

    lease = (LEASES, LEASE)

    replica = 0
    """The replica that leads (the second one after the leader change)."""

    def controller_pid(self) -> int:
        pid = peer_kueue_install.pid(self.config, self.replica)
        if pid is None:
            raise RuntimeError(f"the kueue manager is not running; see {self.config.logs}/")
        return pid

    def body(self, name: str, ns: str) -> dict[str, Any]:
        out = job(name, ns)
        out["spec"]["suspend"] = True
        out["metadata"]["labels"] = {objects.QUEUE_NAME_LABEL: objects.LOCAL_QUEUE}
        return out

    def scrape(self) -> tuple[burst_stats.Samples, burst_stats.Samples]:
        """The API server's samples (Kueue's own metrics are served over authenticated TLS; not read here)."""
        return api_samples(self.config, API_PREFIXES), {}

    @staticmethod
    def released(item: dict[str, Any]) -> bool:
        return (item.get("spec") or {}).get("suspend") is False

    async def prepare(self) -> None:
        for ns in all_namespaces():
            await self.client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        queues = objects.cohort_tree(tree()["spec"]["root"])
        local = objects.local_queues([item for item in queues if item["kind"] == "ClusterQueue"])
        for item in [objects.flavor(), *queues, *local]:
            ref = ResourceRef(objects.GROUP, "v1beta2", KINDS[item["kind"]], item["metadata"].get("namespace"))
            await self.client.create(ref, item)
        await e2e_shapes.namespaces_ready(self.client, (), all_namespaces())

        async def active() -> bool:
            items = (await self.client.list_page(CLUSTER_QUEUES, limit=500)).get("items") or []
            return len(items) == len(all_namespaces()) and all(
                any(c.get("type") == "Active" and c.get("status") == "True"
                    for c in (item.get("status") or {}).get("conditions") or ()) for item in items)

        await e2e_shapes.wait_for(active, STEP_S, "every ClusterQueue to be active")

    async def queue_waiting(self, ns: str) -> int:
        """The Jobs Kueue counts as waiting in the team's ClusterQueue (its LocalQueue's count lagged by one on
        some queues for minutes after the last change, so it is not the one read)."""
        queue = await self.client.get(CLUSTER_QUEUES, self.leaf_of(ns))
        return int((queue.get("status") or {}).get("pendingWorkloads") or 0)

    async def reads(self) -> None:
        await e2e_shapes.settled(60.0)
        ns = namespace(3, 3)
        middle = f"q-{self.created[ns] // 2:05d}"
        workload = await self.workload_of(ns, middle)
        kubectl = [str(cluster.binaries_dir() / "kubectl")]
        commands = {
            "list-all": [*kubectl, "get", "workloads", "-A"],
            "list-ns": [*kubectl, "get", "workloads", "-n", ns],
            "why": [*kubectl, "describe", "workload", "-n", ns, workload],
        }
        for role, argv in commands.items():
            await asyncio.to_thread(self.timed, role, argv)

    async def workload_of(self, ns: str, job_name: str) -> str:
        """The name of the Workload Kueue made for Job ``job_name`` (its owner)."""
        items = (await self.client.list_page(ResourceRef(objects.GROUP, "v1beta2", "workloads", ns),
                                             limit=5000)).get("items") or []
        for item in items:
            owners = (item.get("metadata") or {}).get("ownerReferences") or ()
            if any(owner.get("kind") == "Job" and owner.get("name") == job_name for owner in owners):
                return str(item["metadata"]["name"])
        raise RuntimeError(f"no Workload of Job {ns}/{job_name}")

    async def stop_controller(self) -> None:
        processes.stop(self.config.run, peer_kueue_install.name(self.replica), str(self.config.state_dir))

    async def start_controller(self) -> None:
        binary = await asyncio.to_thread(peer_kueue_install.binary)
        await asyncio.to_thread(peer_kueue_install.start, self.config, binary, UNLIMITED, replica=self.replica,
                                leader_elect=True)

    async def start_follower(self) -> None:
        """A second manager, ready, with the webhooks pointed at it (as Kueue's Service would route once the
        first is gone)."""
        binary = await asyncio.to_thread(peer_kueue_install.binary)
        await asyncio.to_thread(peer_kueue_install.start, self.config, binary, UNLIMITED, replica=1,
                                leader_elect=True)
        await asyncio.to_thread(peer_kueue_install.register_webhooks, self.config, cluster.binaries_dir(), 1)

    def kill_leader(self) -> None:
        super().kill_leader()
        self.replica = 1


def build_problem() -> str:
    """Why Kueue cannot run here ("" when it can): its build failed."""
    try:
        peer_kueue_install.binary()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        return str(error)
    return ""
