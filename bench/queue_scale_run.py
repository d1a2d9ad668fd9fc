"""The steps of the queue-scale bench on one system's cluster (:mod:`bench.queue_scale` runs them).

:class:`Run` measures ours; :class:`bench.queue_scale_kueue.KueueRun` overrides what differs for Kueue (its
process, its Jobs, its queue statuses, its read side, its restarts). Nothing here asserts on time.
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes_asyncio import client as k8s_client

from bench import burst_stats, e2e_metrics, e2e_shapes
from bench.burst_bench import rss_mib, service_pid
from bench.burst_bench import scrape as burst_scrape
from bench.e2e_bench import NAMESPACES, QUEUES, TREES
from bench.first_admission import Admissions
from bench.peer_kueue_report import cpu_seconds
from bench.queue_scale_report import Figures
from webhook.api.kinds import ELASTIC_QUOTA_TREE
from webhook.api.names import ADMISSION_ANNOTATION, TREE_NAMESPACE
from webhook.api.objects import Obj, annotations_of, labels_of, mapping, mappings, meta, spec_of, status_of, text
from webhook.cli import devsystem
from webhook.core.quota import queue_name
from webhook.devcluster import cluster, processes
from webhook.devcluster.config import ClusterConfig, Ports
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef, load_configuration
from webhook.readmodel.served import summaries_path

DEPARTMENTS = 10
TEAMS = 10
IN_FLIGHT = 64
FILL_DEADLINE_S = 2400.0
"""No create is sent after this many seconds of the fill (the rest count as not sent)."""
SETTLE_S = 600.0
"""How long the controller gets to list every queued Job in its Queue's status."""
MORE_JOBS = 1000
MORE_IN_FLIGHT = 16
PASSES = 5
TIMED_RUNS = 3
STEP_S = 300.0
"""Each timed step (a command, a restart, a takeover) is given up after this long."""
SECOND_REPLICA = "kq-serve-b"
LEASES = ResourceRef("coordination.k8s.io", "v1", "leases", "kube-queue")
LEASE = "kube-queue-controller"
API_PREFIXES = ("apiserver_admission_webhook_admission_duration_seconds",)
SERVICE_PREFIXES = ("kube_queue_webhook_request_duration_seconds", "kube_queue_controller_pass_seconds",
                    "kube_queue_eta_refresh_cpu_seconds")


def namespace(department: int, team: int) -> str:
    return f"qs-{department:02d}-{team:02d}"


def team_leaf(department: int, team: int) -> str:
    return f"qs-d{department:02d}-t{team:02d}"


def all_namespaces() -> list[str]:
    return [namespace(d, t) for d in range(DEPARTMENTS) for t in range(TEAMS)]


def tree() -> dict[str, Any]:
    cpu = DEPARTMENTS * TEAMS
    departments = [{
        "name": f"qs-d{d:02d}", "min": {"cpu": str(TEAMS), "memory": "1Ti"},
        "max": {"cpu": str(2 * TEAMS), "memory": "1Ti"},
        "children": [{"name": team_leaf(d, t), "min": {"cpu": "1", "memory": "64Gi"},
                      "max": {"cpu": "2", "memory": "64Gi"}, "namespaces": [namespace(d, t)]}
                     for t in range(TEAMS)],
    } for d in range(DEPARTMENTS)]
    return {
        "apiVersion": ELASTIC_QUOTA_TREE.api_version, "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": TREE_NAMESPACE},
        "spec": {"root": {"name": "root", "min": {"cpu": str(cpu), "memory": "100Ti"},
                          "max": {"cpu": str(cpu), "memory": "100Ti"}, "children": departments}},
    }


def job(name: str, ns: str) -> dict[str, Any]:
    """A one-pod Job of 1 CPU, written as a user writes it (our webhook holds it)."""
    container = {"name": "work", "image": "busybox", "command": ["sh", "-c", "sleep 3600"],
                 "resources": {"requests": {"cpu": "1", "memory": "64Mi"}}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}}}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 when it is gone)."""
    try:
        return cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))
    except OSError:
        return 0.0


def scrape(config: ClusterConfig) -> tuple[burst_stats.Samples, burst_stats.Samples]:
    return burst_scrape(config, API_PREFIXES, SERVICE_PREFIXES)


class Run:
    """One run's cluster, client and bookkeeping."""

    lease: tuple[ResourceRef, str] = (LEASES, LEASE)
    """The Lease the controller's replicas share."""

    def __init__(self, config: ClusterConfig, client: KubeClient, figures: Figures) -> None:
        self.config = config
        self.client = client
        self.figures = figures
        self.created: Counter[str] = Counter()
        """Jobs created per namespace."""
        self.deleted: Counter[str] = Counter()

    def waiting_expected(self, ns: str) -> int:
        return self.created[ns] - self.deleted[ns] - 1

    def controller_pid(self) -> int:
        """The process whose memory and CPU are measured: ``kq serve`` (also our webhook)."""
        return service_pid(self.config)

    def body(self, name: str, ns: str) -> dict[str, Any]:
        return job(name, ns)

    def scrape(self) -> tuple[burst_stats.Samples, burst_stats.Samples]:
        """The API server's samples and the controller's own."""
        return scrape(self.config)

    @staticmethod
    def released(item: Obj) -> bool:
        """Whether a listed Job was admitted by us (released, with our admission annotation)."""
        return spec_of(item).get("suspend") is False and ADMISSION_ANNOTATION in annotations_of(item)

    async def prepare(self) -> None:
        await self.client.create(TREES, tree())
        for ns in all_namespaces():
            await self.client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        await e2e_shapes.namespaces_ready(self.client, all_namespaces())

    async def create_all(self, bodies: list[dict[str, Any]], in_flight: int, deadline_s: float) -> list[float]:
        """Create ``bodies`` with ``in_flight`` requests at once; every request's seconds. Failures are counted."""
        configuration = await load_configuration(str(self.config.kubeconfig))
        configuration.connection_pool_maxsize = in_flight
        pending = iter(bodies)
        seconds: list[float] = []
        started = time.monotonic()
        async with KubeClient(k8s_client.ApiClient(configuration=configuration)) as client:
            async def worker() -> None:
                for body in pending:  # one iterator shared by the workers: each body is sent once
                    if time.monotonic() - started > deadline_s:
                        self.figures.not_sent += 1
                        continue
                    ns = str(body["metadata"]["namespace"])
                    sent = time.perf_counter()
                    try:
                        await client.create(e2e_shapes.jobs_ref(ns), body)
                    except KubeApiError as error:
                        kind = burst_stats.classify(error.status, error.reason, error.message)
                        self.figures.failures[kind] += 1
                        self.figures.examples.setdefault(kind, error.one_line()[:300])
                    else:
                        self.created[ns] += 1
                    finally:
                        seconds.append(time.perf_counter() - sent)

            await asyncio.gather(*(worker() for _ in range(in_flight)))
        return seconds

    async def fill(self, jobs: int) -> None:
        namespaces = all_namespaces()
        bodies = [self.body(f"q-{index // len(namespaces):05d}", namespaces[index % len(namespaces)])
                  for index in range(jobs)]
        pid = self.controller_pid()
        done = asyncio.Event()

        async def sample() -> None:
            while not done.is_set():
                self.figures.fill_rss_peak_mib = max(self.figures.fill_rss_peak_mib, rss_mib(pid))
                if len(self.figures.fill_progress) < 200 and sum(self.created.values()) >= (
                        len(self.figures.fill_progress) + 1) * 5000:
                    self.figures.fill_progress.append((sum(self.created.values()), rss_mib(pid)))
                    print(f"queue-scale bench: {sum(self.created.values())} created, controller "
                          f"{rss_mib(pid):.0f} MiB", file=sys.stderr)
                await asyncio.sleep(1.0)

        sampler = asyncio.ensure_future(sample())
        started = time.monotonic()
        try:
            self.figures.fill_latency = burst_stats.latency(await self.create_all(bodies, IN_FLIGHT, FILL_DEADLINE_S))
        finally:
            done.set()
            await sampler
        self.figures.fill_s = time.monotonic() - started
        self.figures.created = sum(self.created.values())

    async def queue_waiting(self, ns: str) -> int:
        queue = await self.client.get(QUEUES, queue_name(self.leaf_of(ns), ns))
        details = mapping(status_of(queue).get("queueItemDetails"))
        omitted = details.get("activeOmitted")
        return len(mappings(details.get("active"))) + (omitted if isinstance(omitted, int) else 0)

    @staticmethod
    def leaf_of(ns: str) -> str:
        _, department, team = ns.split("-")
        return team_leaf(int(department), int(team))

    async def statuses_right(self) -> int:
        """How many Queues' statuses list exactly the Jobs expected to wait in their namespace."""
        right = 0
        for ns in all_namespaces():
            try:
                if await self.queue_waiting(ns) == self.waiting_expected(ns):
                    right += 1
            except KubeApiError:
                continue
        return right

    async def until_statuses_right(self, timeout: float) -> float:
        """Seconds until every Queue's status is right (``nan`` past ``timeout``)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if await self.statuses_right() == len(all_namespaces()):
                return time.monotonic() - started
            await asyncio.sleep(1.0)
        return float("nan")

    async def one_pass(self) -> None:
        """A Job created in a quiet cluster: the pass it sets off and ``kq serve``'s CPU around it, less the start
        estimates' refreshes and the job summaries' warm-ups in that time (worker threads of their own, each
        measured by its own metric). A system whose samples have neither (Kueue) gets its CPU in the same seconds
        and no pass."""
        pid = self.controller_pid()
        for index in range(PASSES):
            await e2e_shapes.settled(60.0)
            ns = namespace(index % DEPARTMENTS, 0)
            _, before = await asyncio.to_thread(self.scrape)
            cpu_before = cpu_s(pid)
            await self.client.create(e2e_shapes.jobs_ref(ns), self.body(f"pass-{index}", ns))
            self.created[ns] += 1
            await asyncio.sleep(4.0)
            _, after = await asyncio.to_thread(self.scrape)
            gained = burst_stats.delta(before, after)
            passes = burst_stats.total(gained, "kube_queue_controller_pass_seconds_count")
            seconds = burst_stats.total(gained, "kube_queue_controller_pass_seconds_sum")
            estimates = burst_stats.total(gained, "kube_queue_eta_cpu_seconds_total")
            warm = burst_stats.total(gained, "kube_queue_read_api_warm_cpu_seconds_total")
            self.figures.passes.append((passes, seconds, cpu_s(pid) - cpu_before - estimates - warm))
            self.figures.estimates_cpu_s.append(estimates)
            self.figures.warm_cpu_s.append(warm)

    async def more_creates(self) -> None:
        """MORE_JOBS creates with the queue full: the API server's wait on each webhook and our handler's time."""
        await e2e_shapes.settled(60.0)
        namespaces = all_namespaces()
        bodies = [self.body(f"more-{index // len(namespaces):04d}", namespaces[index % len(namespaces)])
                  for index in range(MORE_JOBS)]
        api_before, service_before = await asyncio.to_thread(self.scrape)
        self.figures.more_latency = burst_stats.latency(await self.create_all(bodies, MORE_IN_FLIGHT, STEP_S))
        api_after, service_after = await asyncio.to_thread(self.scrape)
        self.figures.more_api = burst_stats.delta(api_before, api_after)
        self.figures.more_service = burst_stats.delta(service_before, service_after)

    def timed(self, name: str, argv: list[str]) -> None:
        """``argv`` run TIMED_RUNS times (a fresh process each, as a user runs it): the wall seconds of each,
        under ``name`` (a key of :data:`bench.queue_scale_report.READS`)."""
        env = {**os.environ, "KUBECONFIG": str(self.config.kubeconfig)}
        for _ in range(TIMED_RUNS):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.monotonic()
            done = subprocess.run(argv, env=env, capture_output=True, timeout=STEP_S, check=False)
            took = time.monotonic() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the command's own CPU, its wait for others apart
            self.figures.read_cpu.setdefault(name, []).append(
                after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            said = done.stderr.decode("utf-8", "replace").strip()
            if done.returncode != 0:
                self.figures.read_errors[name] = said[-300:]
            elif said:
                self.figures.read_notes.setdefault(name, []).append(said.splitlines()[-1][:300])
            self.figures.reads.setdefault(name, []).append(took)

    def page(self, name: str, url: str) -> None:
        for _ in range(TIMED_RUNS):
            started = time.monotonic()
            with urllib.request.urlopen(url, timeout=STEP_S) as response:
                response.read()
            self.figures.reads.setdefault(name, []).append(time.monotonic() - started)

    async def reads(self) -> None:
        await e2e_shapes.settled(60.0)
        ns = namespace(3, 3)
        queue = await self.client.get(QUEUES, queue_name(self.leaf_of(ns), ns))
        active = mappings(mapping(status_of(queue).get("queueItemDetails")).get("active"))
        middle = str(active[len(active) // 2].get("name")) if active else "q-00000"
        kq = [sys.executable, "-m", "webhook.cli.main"]
        await asyncio.to_thread(self.timed, "list-all", [*kq, "list", "-A"])
        # The same answer without kq's decoding and layout: what the API server's proxy and kq serve take.
        kubectl = str(cluster.binaries_dir() / "kubectl")
        await asyncio.to_thread(self.timed, "list-all-raw", [kubectl, "get", "--raw", summaries_path(None)])
        await asyncio.to_thread(self.timed, "list-ns", [*kq, "list", "-n", ns])
        await asyncio.to_thread(self.timed, "why", [*kq, "why", "-n", ns, middle])
        url = f"{devsystem.console_url(self.config)}jobs?namespace={ns}"
        await asyncio.to_thread(self.page, "console", url)
        log = self.config.logs / "kq-serve.log"
        if log.exists():
            lines = log.read_text(errors="replace").splitlines()
            # Each line's time (the logging's "2026-12-06 09:05:01,123 INFO ..."), then its fields.
            self.figures.read_log = [f"{line[11:23]} {line.split(' component=', 1)[-1]}" for line in lines
                                     if "component=read-api" in line or "event=heap_collected" in line][-12:]

    async def running_job(self, ns: str) -> str:
        pods = mappings((await self.client.list_page(ResourceRef("", "v1", "pods", ns), limit=50)).get("items"))
        for pod in pods:
            name = labels_of(pod).get("job-name")
            if name and status_of(pod).get("phase") == "Running":
                return str(name)
        raise RuntimeError(f"no running Job in {ns}")

    async def free_department(self, department: int) -> Admissions:
        """Delete the running Job of each team of ``department``, with a watch from just before: the next Job
        released in one of those namespaces is an admission."""
        namespaces = [namespace(department, team) for team in range(TEAMS)]
        watch = Admissions(self.client, set(namespaces))
        await watch.start()
        for ns in namespaces:
            running = await self.running_job(ns)
            watch.gone.add((ns, running))
            await self.client.request("DELETE", e2e_shapes.jobs_ref(ns).path(running),
                                      [("propagationPolicy", "Background")])
            self.deleted[ns] += 1
        return watch

    async def stop_controller(self) -> None:
        processes.stop(self.config.run, "kq-serve", str(self.config.state_dir))

    async def start_controller(self) -> None:
        """Start ``kq serve`` again and wait until it is ready."""
        for component in devsystem.service_components(self.config, cluster.binaries_dir()):
            processes.start(component, self.config.run, self.config.logs)
        await e2e_shapes.wait_for(lambda: asyncio.to_thread(devsystem.service_ready, self.config), STEP_S,
                                  "kq serve to be ready again")

    async def cold_start(self) -> None:
        await e2e_shapes.settled(60.0)
        await self.stop_controller()
        admissions = await self.free_department(1)
        started = time.monotonic()
        await self.start_controller()
        self.figures.cold_ready_s = time.monotonic() - started
        self.figures.cold_first_admission_s = await admissions.first(STEP_S) - started
        waited = await self.until_statuses_right(STEP_S)
        self.figures.cold_statuses_s = time.monotonic() - started if not math.isnan(waited) else float("nan")
        await e2e_shapes.settled(60.0)
        self.figures.restart_rss_mib = rss_mib(self.controller_pid())

    async def start_follower(self) -> None:
        """A second ``kq serve`` on ports of its own, until it follows."""
        ports = Ports(self.config.ports.base + 30)
        follower = devsystem.service_components(self.config, cluster.binaries_dir())[0]
        argv = [arg.replace(f"--port={self.config.ports.webhook}", f"--port={ports.webhook}")
                .replace(f"--metrics-port={self.config.ports.metrics}", f"--metrics-port={ports.metrics}")
                for arg in follower.argv]
        processes.start(processes.Component(SECOND_REPLICA, tuple(argv), ports.webhook), self.config.run,
                        self.config.logs)

        async def follower_ready() -> bool:
            try:
                text = await asyncio.to_thread(e2e_metrics._get, f"http://127.0.0.1:{ports.metrics}/metrics")
            except OSError:
                return False
            return "kube_queue_controller_leader 0.0" in text

        await e2e_shapes.wait_for(follower_ready, STEP_S, "the second replica to follow")

    async def holder(self) -> str:
        """Who holds the controller's Lease ("" when nobody or unreadable)."""
        try:
            return text(spec_of(await self.client.get(self.lease[0], self.lease[1])).get("holderIdentity"))
        except KubeApiError:
            return ""

    def kill_leader(self) -> None:
        os.kill(self.controller_pid(), signal.SIGKILL)

    async def leader_change(self) -> None:
        await self.start_follower()
        await asyncio.sleep(5.0)  # its caches listed: the follower keeps them warm
        await e2e_shapes.settled(60.0)
        before = await self.holder()
        killed = time.monotonic()
        self.kill_leader()
        admissions = await self.free_department(2)

        async def taken() -> bool:
            holder = await self.holder()
            return bool(holder) and holder != before

        await e2e_shapes.wait_for(taken, STEP_S, "the second replica to take the Lease")
        took = time.monotonic()
        self.figures.takeover_lease_s = took - killed
        self.figures.takeover_first_admission_s = await admissions.first(STEP_S) - took
        waited = await self.until_statuses_right(STEP_S)
        self.figures.takeover_statuses_s = time.monotonic() - took if not math.isnan(waited) else float("nan")

    async def verify(self) -> None:
        """One paginated list of every Job: none lost, each team runs exactly one."""
        ref = ResourceRef("batch", "v1", "jobs")
        admitted: Counter[str] = Counter()
        exist: Counter[str] = Counter()
        token: str | None = None
        for _ in range(1000):  # bounded: 1000 pages of 2000
            page = await self.client.list_page(ref, limit=2000, continue_token=token)
            for item in mappings(page.get("items")):
                metadata = meta(item)
                ns = str(metadata.get("namespace"))
                if not ns.startswith("qs-"):
                    continue
                exist[ns] += 1
                if self.released(item):
                    admitted[ns] += 1
            token = text(mapping(page.get("metadata")).get("continue")) or None
            if not token:
                break
        expected = {ns: self.created[ns] - self.deleted[ns] for ns in all_namespaces()}
        self.figures.lost = sum(max(0, expected[ns] - exist[ns]) for ns in expected)
        self.figures.teams_running_one = sum(1 for ns in expected if admitted[ns] == 1)
