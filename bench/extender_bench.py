"""Benchmark of the scheduler extender (a report, not a test: it asserts nothing).

    .venv/bin/python bench/extender_bench.py [--iterations 300] [--pods 3000] [--rounds 5] [--port-base 24400]
                                          [--latency-only | --throughput-only] [--configurations NAME ...]

1. **Latency.** The extender's handlers (``make_app``, served as ``kq extender`` serves them) in a child
   process, on loopback HTTP, with a state of 500 or 5,000 nodes (pool a, pool b, one virtual node), a
   ResourcePolicy ``[ecs pool=a, ecs pool=b, eci max 50]`` with 200 of its pods bound, and a quota tree.
   A client sends what a ``nodeCacheCapable`` scheduler configured with both verbs sends - every node
   name to the filter, then the nodes it passed to prioritize - one pod at a time, for a pod under the
   policy (it passes pool a: half the nodes) and a pod under none (all but the virtual node). Latency is
   the client's round trip: from sending the request to the last byte of the answer. Then ``preempt``, as
   kube-scheduler's preemption asks it, on a state of its own (:func:`build_preempt_state`): a quota tree of
   two departments, two bound pods of the borrowing one on every node, and a preemptor of the other one
   (within its min) with victims - both pods - on as many candidate nodes as the scheduler hands over
   (``max(100, 10 % of the nodes)``); every node's victims may go, so each one is judged in full.
2. **Scheduler throughput.** A dev cluster of its own (``--port-base``, a temporary state directory) with
   500 kwok nodes; the real kube-scheduler places ``--pods`` pods (100m CPU, under a ResourcePolicy ``[ecs,
   eci max 50]``) in these configurations (:data:`CONFIGURATIONS`; the default four): ``none`` (no extender,
   the scheduler's defaults; the extender process stopped too, so its watches cost nothing either), ``none,
   full scan`` (no extender, ``percentageOfNodesToScore: 100`` - the setting the extender needs), ``null
   filter, window`` (a do-nothing extender behind the shipped entry and settings that passes back as many
   nodes as the kq extender does: the floor under it, what the protocol alone costs), ``filter`` (the kq
   extender as shipped) and, when asked for, ``null filter`` (the do-nothing extender passing every node
   back), ``filter+prioritize`` (the entry
   with ``prioritizeVerb`` and ``weight``), ``filter, every node`` (``kq extender --pass-every-node``) or
   ``filter, sampled`` (that, with the scheduler's default sample instead of the full scan).
   Each round runs every configuration once, in an
   order that rotates by one each round, after one short warm-up run of each; the scheduler's
   configuration is rewritten and the scheduler restarted (at ``-v=2``) before every run. The pods are
   created while the scheduler is stopped; pods/s is measured between the first and the last binding in
   the scheduler's own log (:func:`bound_times`: a watching process lags on the busy machine, and lagged
   more the faster the scheduler went), also over the first :data:`HEAD` bindings and over the rest (a
   freshly started scheduler against its steady state), with the CPU the scheduler, the extender and the
   API server (which also serves the kq extender's pod watch) used, and the machine's idle share, while a
   watch saw the bindings. Before the scheduler starts, the cluster settles (the API server, etcd, kwok
   and the controllers done with the new pods); after the run its namespace is deleted and its pods waited
   out, so every run starts on the same cluster. A round's cost compares its runs with its ``none`` run (a
   minute or two apart, so under about the same load); the headline is the median of the rounds' costs.
   With the default four, each round's cost of ``filter`` is also split into its steps (:func:`cost_steps`):
   what the full scan, the protocol and the kq extender's own decisions each take.

   With the two scheduler profiles (issue 21) the policy's pods carry ``schedulerName: kube-queue-full-scan``,
   as the admission webhook would give them (the webhook's own rule, :func:`webhook.core.profiles.scheduler_name_for`),
   the others none (the sampling default profile); the default configurations add ``null filter, 10% policy``,
   ``filter, 10% policy`` (one pod in ten under the policy) and ``filter, no policy``, and the goals are printed
   as ratios of the same round (:func:`print_goals`). ``KQ_EXTENDER_BENCH_ROUNDS``, ``_PODS`` and
   ``_PORT_BASE`` override the flags (for ``python -m bench``'s fixed command); the output says so.

Goals (issue 6): p99 of filter+prioritize under 10 ms at 5,000 nodes; the extender costs the scheduler less
than 30 % of its throughput. Issue 21: policy-free pods lose less than 15 % of the scheduler's throughput to
the extender (``filter, no policy`` / ``none``), and on the 10 % mix the kq extender's own cost over the
do-nothing extender in the same round is at most 10 points of ``none``. Numbers depend on the machine and its
load (2 shared cores here).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import itertools
import multiprocessing
import os
import re
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import machine_times, settle
from bench.objects import bound, eci, ecs, node, pod, policy, quota_tree, virtual_node
from webhook.api.kinds import RESOURCE_POLICY
from webhook.api.objects import mapping, name_of, resource_version_of, spec_of
from webhook.cli import devsystem
from webhook.core.placement import parse_policy
from webhook.core.profiles import calls_extender, scheduler_name_for
from webhook.core.sampling import rotating_window, scheduler_sample_size
from webhook.devcluster import cluster, processes
from webhook.devcluster.config import ClusterConfig, Ports, default_nodes
from webhook.extender.app import MAX_BODY_BYTES, make_app
from webhook.extender.config import SCHEDULER_SETTINGS, extender_entry
from webhook.extender.http import start_server
from webhook.extender.state import ExtenderState
from webhook.kube import serving
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef
from webhook.workloads.patch import apply_patch
from webhook.workloads.pod import extender_marker_patch

PODS = ResourceRef("", "v1", "pods")
NAMESPACES = ResourceRef("", "v1", "namespaces")
POLICIES = ResourceRef.of(RESOURCE_POLICY)
NULL_EXTENDER = "null-extender"
NULL_WINDOW_EXTENDER = "null-extender-window"
"""The null extender passing back a window of the default sample's size, as the kq extender does."""
NULL_EXTENDERS = (NULL_EXTENDER, NULL_WINDOW_EXTENDER)
EVERY_NODE_EXTENDER = "kq-extender-every-node"
"""``kq extender --pass-every-node``: without the window that cuts the chosen unit to the default sample."""
KQ_EXTENDERS = ("kq-extender", EVERY_NODE_EXTENDER)
BENCH_POLICY = policy("bench", units=[ecs(pool="a"), ecs(pool="b"), eci(max=50)], namespace="bench")
CLUSTER_POLICY = policy("bench", units=[ecs(), eci(max=50)], namespace="bench")
CLUSTER_POLICY["spec"]["selector"] = {"placement": "policy"}
"""The dev cluster's nodes carry no pool label: one ECS unit of every regular node, then the virtual node; it
selects the pods labelled ``placement: policy`` (:func:`_pod_manifest`)."""
POLICY_PROFILE = scheduler_name_for(None, parse_policy(CLUSTER_POLICY))
"""The ``schedulerName`` the admission webhook gives the policy's pods (the full-scan profile), decided by the
webhook's own rule: the bench creates its pods directly, without the webhook."""


# 1. Latency --------------------------------------------------------------------------------------------------


def node_names(count: int) -> list[str]:
    return [f"node-{index:05d}" for index in range(count - 1)] + ["virtual-kubelet"]


def build_state(nodes: int) -> ExtenderState:
    state = ExtenderState(assume_ttl=3600)
    names = node_names(nodes)
    state.replace_nodes(
        [node(name, pool="a" if index % 2 == 0 else "b") for index, name in enumerate(names[:-1])] + [virtual_node()]
    )
    state.set_policies([BENCH_POLICY])
    state.set_trees(
        [
            quota_tree(
                {
                    "name": "root",
                    "min": {"cpu": "100000"},
                    "max": {"cpu": "100000"},
                    "namespaces": ["bench", "free"],
                }
            )
        ]
    )
    state.replace_pods(
        bound(pod(f"running-{index}", "1", namespace="bench"), names[index % (nodes - 1)]) for index in range(200)
    )
    state.ready = True
    return state


PREEMPT_VICTIMS = 2
"""Bound pods of the borrowing department on every node of the preempt latency's state."""


def preempt_candidates(nodes: int) -> int:
    """How many candidate nodes kube-scheduler hands an extender's preempt verb: DefaultPreemption's
    ``minCandidateNodesPercentage`` (10) and ``minCandidateNodesAbsolute`` (100)."""
    return min(nodes, max(100, nodes // 10))


def victim_uid(name: str, index: int) -> str:
    return f"victim-{name}-{index}"


def build_preempt_state(nodes: int) -> ExtenderState:
    """The preempt latency's state: ``nodes`` nodes, Dept-a (min 90 %, namespace ``bench-a``) and Dept-b
    (min 1 CPU, ``bench-b``); :data:`PREEMPT_VICTIMS` pods of 1 CPU of Dept-b on every node."""
    state = ExtenderState(assume_ttl=3600)
    names = node_names(nodes)[:-1]
    state.replace_nodes([node(name) for name in names])
    total = nodes * 10
    state.set_trees([quota_tree({
        "name": "root", "min": {"cpu": str(total)}, "max": {"cpu": str(total)}, "children": [
            {"name": "Dept-a", "min": {"cpu": str(total * 9 // 10)}, "max": {"cpu": str(total)},
             "namespaces": ["bench-a"]},
            {"name": "Dept-b", "min": {"cpu": "1"}, "max": {"cpu": str(total)}, "namespaces": ["bench-b"]},
        ]})])
    pods = []
    for name in names:
        for index in range(PREEMPT_VICTIMS):
            obj = bound(pod(f"b-{name}-{index}", "1", namespace="bench-b"), name)
            obj["metadata"] = {**obj["metadata"], "uid": victim_uid(name, index)}
            pods.append(obj)
    state.replace_pods(pods)
    state.ready = True
    return state


def _serve(nodes: int, port: int, ready: Any, preempt: bool = False) -> None:
    state = build_preempt_state(nodes) if preempt else build_state(nodes)
    gc.collect()
    gc.freeze()  # as `kq extender` does once its watches have listed

    async def main() -> None:
        await start_server(make_app(state).routes(), "127.0.0.1", port, max_body=MAX_BODY_BYTES)
        ready.set()
        await asyncio.Event().wait()

    serving.run(main(), component="extender")  # the loop `kq extender` runs on


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def extender_process(nodes: int, preempt: bool = False) -> Iterator[int]:
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    port = free_port()
    process = context.Process(target=_serve, args=(nodes, port, ready, preempt), daemon=True)
    process.start()
    try:
        if not ready.wait(120):
            raise RuntimeError("the extender process did not start")
        yield port
    finally:
        process.terminate()
        process.join(10)


@dataclass
class Latency:
    nodes: int
    pod: str
    filter_ms: list[float]
    prioritize_ms: list[float]
    preempt_ms: list[float] | None = None
    """The preempt verb's round trips (a row of its own: ``filter_ms`` and ``prioritize_ms`` empty)."""

    @property
    def both_ms(self) -> list[float]:
        return [a + b for a, b in zip(self.filter_ms, self.prioritize_ms, strict=True)]


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(port: int, nodes: int, iterations: int) -> list[Latency]:
    names = node_names(nodes)
    base = f"http://127.0.0.1:{port}/extender"
    results = []
    async with aiohttp.ClientSession() as session:
        for label, namespace in (("policy", "bench"), ("no policy", "free")):
            filter_ms: list[float] = []
            prioritize_ms: list[float] = []
            for index in range(iterations + 20):
                obj = pod(f"p-{index}", "100m", namespace=namespace)
                body = orjson.dumps({"Pod": obj, "Nodes": None, "NodeNames": names})
                started = time.perf_counter()
                async with session.post(f"{base}/filter", data=body) as resp:
                    raw = await resp.read()
                filter_time = (time.perf_counter() - started) * 1000  # until the last byte arrived
                reply = orjson.loads(raw)
                if reply["Error"]:
                    raise RuntimeError(reply["Error"])
                # As the scheduler does: prioritize the nodes the filter let through.
                body = orjson.dumps({"Pod": obj, "Nodes": None, "NodeNames": reply["NodeNames"]})
                started = time.perf_counter()
                async with session.post(f"{base}/prioritize", data=body) as resp:
                    await resp.read()
                prioritize_time = (time.perf_counter() - started) * 1000
                if index >= 20:  # warm-up
                    filter_ms.append(filter_time)
                    prioritize_ms.append(prioritize_time)
            results.append(Latency(nodes, label, filter_ms, prioritize_ms))
    return results


async def measure_preempt(port: int, nodes: int, iterations: int) -> Latency:
    """``preempt`` round trips: a preemptor of Dept-a, both Dept-b pods as victims on each candidate node."""
    candidates = node_names(nodes)[: preempt_candidates(nodes)]
    victims = {
        name: {"Pods": [{"UID": victim_uid(name, index)} for index in range(PREEMPT_VICTIMS)], "NumPDBViolations": 0}
        for name in candidates
    }
    times: list[float] = []
    async with aiohttp.ClientSession() as session:
        for index in range(iterations + 20):
            obj = pod(f"urgent-{index}", "2", namespace="bench-a")
            obj["spec"]["priority"] = 10
            body = orjson.dumps({"Pod": obj, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims})
            started = time.perf_counter()
            async with session.post(f"http://127.0.0.1:{port}/extender/preempt", data=body) as resp:
                raw = await resp.read()
            elapsed = (time.perf_counter() - started) * 1000
            kept = orjson.loads(raw)["NodeNameToMetaVictims"]
            if len(kept) != len(candidates):
                raise RuntimeError(f"expected every candidate kept, got {len(kept)} of {len(candidates)}")
            if index >= 20:  # warm-up
                times.append(elapsed)
    return Latency(nodes, f"preempt {len(candidates)}", [], [], times)


def latency_report(iterations: int) -> list[Latency]:
    out: list[Latency] = []
    for nodes in (500, 5000):
        with extender_process(nodes) as port:
            out.extend(asyncio.run(measure(port, nodes, iterations)))
        with extender_process(nodes, preempt=True) as port:
            out.append(asyncio.run(measure_preempt(port, nodes, iterations)))
    return out


# 2. Scheduler throughput ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Configuration:
    """One way of running the scheduler: which extender process answers (``None``: no extender in the
    scheduler's configuration and no extender process) and whether the scheduler also calls prioritize."""

    extender: str | None
    """``kq-extender``, ``kq-extender-every-node`` or ``null-extender`` (:func:`serve_null_extender`)."""
    prioritize: bool = False
    full_scan: bool | None = None
    """``percentageOfNodesToScore: 100`` for every pod (one profile); ``False``: the default sample for every
    pod; ``None``: as shipped - with an extender the two profiles (:data:`~webhook.extender.config.SCHEDULER_SETTINGS`),
    the policy's pods on the full-scan one; without, the scheduler's defaults."""
    policy_share: float = 1.0
    """The share of the pods the ResourcePolicy selects (the others: no policy, the default profile)."""
    all_marked: bool = False
    """Every pod carries the extender's marker, so the scheduler asks the extender about each: what the pods of
    the quota tree's namespaces pay (the pod-level quota), and every pod paid before the marker. Otherwise
    only the pods the webhook marks in a namespace outside the tree: the policy's
    (:func:`webhook.core.profiles.calls_extender`)."""


CONFIGURATIONS: dict[str, Configuration] = {
    "none": Configuration(None),
    "none, full scan": Configuration(None, full_scan=True),
    "null filter": Configuration(NULL_EXTENDER),
    "null filter, window": Configuration(NULL_WINDOW_EXTENDER),
    "filter": Configuration("kq-extender"),
    "filter+prioritize": Configuration("kq-extender", prioritize=True),
    "filter, every node": Configuration(EVERY_NODE_EXTENDER),
    "filter, sampled": Configuration(EVERY_NODE_EXTENDER, full_scan=False),
    "null filter, 10% policy": Configuration(NULL_WINDOW_EXTENDER, policy_share=0.1),
    "filter, 10% policy": Configuration("kq-extender", policy_share=0.1),
    "filter, no policy": Configuration("kq-extender", policy_share=0.0),
    "filter, no policy, all marked": Configuration("kq-extender", policy_share=0.0, all_marked=True),
}
"""What can be compared: no extender, the scheduler's defaults (every cost is against this one); no extender
but every node filtered (``percentageOfNodesToScore: 100``, which the extender asks for: its share of the
cost); a do-nothing extender behind the shipped entry and settings (what any HTTP extender costs the
scheduler's serial cycle - marshalling, the round trip - whatever it decides), passing every node back or,
``null filter, window``, as many as the kq extender passes back (the floor under it); the kq extender as shipped
(filter only); with ``prioritizeVerb`` and ``weight``; and without the window (``--pass-every-node``: every
passing node of the unit goes back to the scheduler, which scores them all); and the setup before the full
scan (the scheduler's default sample, every node of it passed back: correct only for policies no sample can
miss - what the default profile leaves such pods to pay). ``... 10% policy``: one pod in ten under the
policy (on the full-scan profile), the rest under none (on the default profile, sampling): the mix the two
profiles are for; ``filter, no policy``: no pod under the policy (what policy-free pods pay the extender: with
the marker, nothing but the default profile's affinity), and ``..., all marked``: the same pods, each asked
about (the pods of the tree's namespaces; every pod before the marker)."""
DEFAULT_CONFIGURATIONS = (
    "none", "filter", "null filter, 10% policy", "filter, 10% policy", "filter, no policy",
    "filter, no policy, all marked",
)
"""The two profiles' run (issue 21): the kq extender with every pod under the policy, the 10 % mix with the
do-nothing and the kq extender, and policy-free pods only. ``null filter, window`` and ``none, full scan`` (the
floor under ``filter`` and the scan's own share, :data:`COST_STEPS`) on request."""
MIX = ("null filter, 10% policy", "filter, 10% policy")
"""The do-nothing and the kq extender on the mix: the kq extender's own cost is the difference."""


class _NullExtender(asyncio.Protocol):
    """A filter that passes every node it is asked about: HTTP/1.1 keep-alive with ``Content-Length`` bodies,
    parsed by hand, one orjson round trip - as little work as an extender can do. Bench only. With
    ``window``, it passes back only as many nodes as the scheduler scores by default, the window moving on
    with every call (what the kq extender's ``ExtenderState.filter`` does, without deciding anything)."""

    start = 0
    """Where the next window starts (shared by the connections, as the kq extender's is)."""
    cluster_nodes = 0
    """The cluster's nodes: the window is their default sample (a sampling profile's request is that already)."""

    def __init__(self, window: bool = False) -> None:
        self.buffer = b""
        self.window = window
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is one without subclassing it

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (head_end := self.buffer.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in self.buffer[:head_end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            args, self.buffer = orjson.loads(self.buffer[head_end + 4 : end]), self.buffer[end:]
            names = args.get("NodeNames")
            if self.window and names:
                names = self._window(names)
            reply = orjson.dumps({"NodeNames": names, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""})
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(reply), reply))

    @classmethod
    def _window(cls, names: list[str]) -> list[str]:
        size = scheduler_sample_size(max(len(names), cls.cluster_nodes))
        if len(names) <= size:
            return names
        window, cls.start = rotating_window(names, cls.start, size)
        return window


def serve_null_extender(port: int, window: bool = False, cluster_nodes: int = 0) -> None:
    """Run :class:`_NullExtender` on ``127.0.0.1:port`` until killed."""
    _NullExtender.cluster_nodes = cluster_nodes

    async def main() -> None:
        await asyncio.get_running_loop().create_server(lambda: _NullExtender(window), "127.0.0.1", port)
        await asyncio.Event().wait()

    serving.run(main(), component="null-extender")  # the loop `kq extender` runs on


@dataclass(frozen=True)
class Run:
    """One throughput run: pods/s between the first and the last binding, and the CPU that kube-scheduler
    and the extender (``None`` when not running) used in that window, per pod."""

    configuration: str
    round: int
    pods_per_second: float
    scheduler_ms_per_pod: float
    extender_ms_per_pod: float | None
    apiserver_ms_per_pod: float
    """kube-apiserver's CPU: it also serves the kq extender's pod watch."""
    load: float
    """The 1-minute load average when the run ended."""
    idle: float
    """The machine's idle share (all cores) between the first and the last binding: near 0 when the run was
    bound by CPU, higher when the scheduler's serial cycle (its extender round trip included) was."""
    first_rate: float
    """pods/s over the first :data:`HEAD` bindings (a freshly started scheduler; the whole run when shorter)."""
    later_rate: float | None
    """pods/s over the bindings after the first :data:`HEAD` (``None`` when the run has no more)."""


HEAD = 1000
"""Bindings counted as the start of a run (the scheduler just restarted, its caches and the extender's new
to the run's pods and policy); the rest show the steady state. Runs of this bench were 1,000 pods long until
2026-12-01: its figures until then were of the start only."""


def rates(times: Sequence[float]) -> tuple[float, float, float | None]:
    """pods/s of sorted binding times: over all of them, over the first :data:`HEAD`, over the rest."""

    def rate(part: Sequence[float]) -> float:
        return (len(part) - 1) / (part[-1] - part[0]) if len(part) > 1 and part[-1] > part[0] else 0.0

    later = times[HEAD - 1 :] if len(times) > HEAD else ()
    return rate(times), rate(times[:HEAD]), rate(later) if later else None


_BOUND = re.compile(r'^I(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) .*"Successfully bound pod to node" pod="([^/"]+)/')


def bound_times(log_lines: Iterable[str], namespace: str, year: int) -> list[float]:
    """Epoch seconds, sorted, of the bindings of ``namespace``'s pods that kube-scheduler logged at -v=2
    (``I1201 04:05:01.123456 ... "Successfully bound pod to node" pod="ns/name"``; klog omits the year).

    The scheduler's own clock, taken when each bind call returned: a watch of the pods sees them later, by
    however far the watching process lags on a machine whose cores the run keeps busy - more so the faster
    the scheduler goes."""
    times = []
    for line in log_lines:
        match = _BOUND.match(line)
        if match is None or match[7] != namespace:
            continue
        month, day, hour, minute, second, micro = (int(match[index]) for index in range(1, 7))
        moment = datetime.datetime(year, month, day, hour, minute, second, micro, tzinfo=datetime.UTC)
        times.append(moment.timestamp())
    return sorted(times)


def _logged_bindings(log: Path, namespace: str, count: int, timeout: float = 20.0) -> list[float]:
    """:func:`bound_times` from the scheduler's log once it holds ``count`` of them (it writes a line right
    after the watch may have seen the binding)."""
    deadline = time.monotonic() + timeout
    while True:
        with log.open(errors="replace") as lines:
            times = bound_times(lines, namespace, datetime.datetime.now(datetime.UTC).year)
        if len(times) >= count or time.monotonic() > deadline:
            return times
        time.sleep(0.2)


def under_policy(index: int, share: float) -> bool:
    """Whether pod ``index`` is one of the policy's: ``share`` of the pods, spread evenly (every tenth at 0.1)."""
    return int((index + 1) * share + 1e-9) > int(index * share + 1e-9)


def _pod_manifest(
    name: str, namespace: str, *, policy: bool = True, profiles: bool = False, marked: bool = False
) -> dict[str, Any]:
    """A pod of 100m CPU, labelled for the policy or not; with ``profiles`` (the scheduler runs the two
    profiles) a policy pod names the profile the webhook would give it (:data:`POLICY_PROFILE`); ``marked``:
    it carries the extender's marker, as the webhook writes it (:func:`extender_marker_patch`)."""
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
    }
    if policy and profiles and POLICY_PROFILE is not None:
        spec["schedulerName"] = POLICY_PROFILE
    if marked:
        marked_spec = apply_patch({"spec": spec}, extender_marker_patch({"spec": spec}))["spec"]
        assert isinstance(marked_spec, dict)
        spec = marked_spec
    labels = {"app": "bench", "placement": "policy" if policy else "free"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": spec}


async def _create_all(
    client: KubeClient, namespace: str, count: int, setup: Configuration, profiles: bool
) -> None:
    """The run's namespace, the policy and ``count`` pods (:func:`_pod_manifest`), 16 creates in flight. With an
    extender, the pods it must see carry its marker (every pod with ``all_marked``)."""
    share = setup.policy_share
    selected = parse_policy(CLUSTER_POLICY)
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for _ in range(300):  # the default ServiceAccount (kube-controller-manager) must exist before pods
        try:
            await client.get(ResourceRef("", "v1", "serviceaccounts"), "default", namespace)
            break
        except KubeApiError:
            await asyncio.sleep(0.2)
    await client.create(POLICIES, {**CLUSTER_POLICY, "metadata": {"name": "bench", "namespace": namespace}}, namespace)
    gate = asyncio.Semaphore(16)

    async def one(index: int) -> None:
        async with gate:
            chosen = under_policy(index, share)
            marked = setup.extender is not None and (
                setup.all_marked or calls_extender(False, selected if chosen else None)
            )
            manifest = _pod_manifest(f"p-{index:05d}", namespace, policy=chosen, profiles=profiles, marked=marked)
            await client.create(PODS, manifest, namespace)

    await asyncio.gather(*(one(index) for index in range(count)))


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 when there is none)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class _Window:
    """CPU of the watched processes, and the machine's ``(idle, total)`` jiffies, at the first and at the last
    binding."""

    pids: tuple[int | None, ...]
    first: tuple[float, ...] = ()
    last: tuple[float, ...] = ()
    machine_first: tuple[int, int] = (0, 0)
    machine_last: tuple[int, int] = (0, 0)

    def open(self) -> None:
        self.first, self.machine_first = self._sample(), machine_times()

    def close(self) -> None:
        self.last, self.machine_last = self._sample(), machine_times()

    def _sample(self) -> tuple[float, ...]:
        return tuple(cpu_seconds(pid) for pid in self.pids)

    @property
    def idle(self) -> float:
        """The machine's idle share between the two samples."""
        total = self.machine_last[1] - self.machine_first[1]
        return (self.machine_last[0] - self.machine_first[0]) / total if total > 0 else 0.0


async def _time_bindings(
    client: KubeClient, namespace: str, count: int, start_scheduler: Any, others: tuple[int | None, ...]
) -> _Window:
    """Start the scheduler, watch the namespace's pods until all are bound: the CPU of the scheduler and of
    the ``others`` processes between the first binding seen and the last (the rate comes from the
    scheduler's log, :func:`bound_times`)."""
    ref = ResourceRef("", "v1", "pods", namespace)
    page = await client.list_page(ref, limit=5000)
    version = resource_version_of(page)
    seen: set[str] = set()
    window = _Window((start_scheduler(), *others))
    deadline = time.monotonic() + 300
    while len(seen) < count and time.monotonic() < deadline:
        async with client.watch(ref, resource_version=version, timeout_seconds=120) as events:
            async for event in events:
                obj = mapping(event.get("object"))
                version = resource_version_of(obj) or version
                name = name_of(obj)
                if spec_of(obj).get("nodeName") and name not in seen:
                    seen.add(name)
                    if len(seen) == 1:
                        window.open()
                    if len(seen) >= count:
                        window.close()
                        break
    if len(seen) < count:
        raise RuntimeError(f"only {len(seen)} of {count} pods were bound in 300 s")
    return window


_BACKGROUND = ("kube-apiserver", "etcd", "kwok", "kube-controller-manager")
"""The processes that work off a burst of pod creations (or deletions) after it ends."""
SETTLED_CORES = 0.3
"""A cluster is settled when its processes together use less CPU than this (cores, over half a second)."""


async def _settle(pids: Sequence[int | None], timeout: float = 30.0) -> None:
    """Wait until ``pids`` together use less than :data:`SETTLED_CORES` (the API server, etcd, kwok and the
    controllers still working off the pods just created would otherwise take CPU from the measured run)."""
    if not await settle(lambda: sum(cpu_seconds(pid) for pid in pids), SETTLED_CORES, window=0.5, timeout=timeout):
        print(f"  (the cluster did not settle in {timeout:.0f} s; measuring anyway)", file=sys.stderr)


async def _delete_namespace(client: KubeClient, namespace: str, timeout: float = 180.0) -> None:
    """Delete a run's namespace and wait until its pods are gone, so every run starts on the same cluster
    (pods left from earlier runs would make later runs slower: more to list, watch and keep)."""
    await client.request("DELETE", NAMESPACES.path(namespace))
    ref = ResourceRef("", "v1", "pods", namespace)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not (await client.list_page(ref, limit=1)).get("items"):
            return
        await asyncio.sleep(1.0)
    raise RuntimeError(f"the pods of namespace {namespace} were not deleted in {timeout:.0f} s")


def scheduler_settings(extender: bool, full_scan: bool | None) -> dict[str, Any] | None:
    """The scheduler's top-level settings for a configuration (see :attr:`Configuration.full_scan`)."""
    if full_scan is None:
        return SCHEDULER_SETTINGS if extender else None
    return {"percentageOfNodesToScore": 100} if full_scan else None


def _restart_scheduler(
    config: ClusterConfig, bins: Path, extender: dict[str, object] | None, full_scan: bool | None
) -> Any:
    """Stop the scheduler and write its configuration; returns what starts it (and gives its pid)."""
    text = cluster.scheduler_config(config, extender, scheduler_settings(extender is not None, full_scan))
    (config.state_dir / "scheduler-config.yaml").write_text(text)
    processes.stop(config.run, "kube-scheduler", str(config.state_dir))
    (component,) = [c for c in cluster.components(config, bins) if c.name == "kube-scheduler"]
    # At -v=2 it logs each binding with its time (klog: microseconds): see bound_times.
    component = replace(component, argv=tuple("--v=2" if arg == "--v=1" else arg for arg in component.argv))

    def start() -> int:
        return processes.start(component, config.run, config.logs)

    return start


def _extender_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _extender_component(config: ClusterConfig, bins: Path, name: str) -> processes.Component:
    if name in NULL_EXTENDERS:  # the state directory in its command line marks the process as this cluster's
        window = ("--window",) if name == NULL_WINDOW_EXTENDER else ()
        port, marker = str(config.ports.extender), str(config.state_dir)
        nodes = f"--cluster-nodes={len(config.nodes)}"
        argv = (sys.executable, __file__, "--serve-null-extender", port, *window, nodes, marker)
        return processes.Component(name, argv, config.ports.extender)
    (component,) = devsystem.extender_components(config, bins)
    if name == EVERY_NODE_EXTENDER:
        return processes.Component(name, (*component.argv, "--pass-every-node"), component.port)
    return component


def _set_extender(config: ClusterConfig, bins: Path, wanted: str | None) -> int | None:
    """Make ``wanted`` the one extender process running (``None``: none), waiting until it answers (the
    kq extender: until its watches have listed); its pid."""
    marker = str(config.state_dir)
    for name in (*KQ_EXTENDERS, *NULL_EXTENDERS):
        if name != wanted and processes.running_pid(config.run, name, marker) is not None:
            processes.stop(config.run, name, marker)
    if wanted is None:
        return None
    pid = processes.running_pid(config.run, wanted, marker)
    if pid is None:
        pid = processes.start(_extender_component(config, bins, wanted), config.run, config.logs)
    port = config.ports.extender
    ready = _extender_ready if wanted in KQ_EXTENDERS else processes.port_open
    processes.wait_for(lambda: ready(port), 120, f"{wanted} to answer on {port}")
    return pid


def _one_run(config: ClusterConfig, bins: Path, name: str, round_index: int, pods: int) -> Run:
    """One configuration's run: set up the extender and the scheduler, create the pods while the scheduler
    is stopped, start it and time the bindings (round ``-1``: the warm-up)."""
    setup = CONFIGURATIONS[name]
    url = devsystem.extender_url(config)
    entry = None if setup.extender is None else extender_entry(url, prioritize=setup.prioritize)
    extender_pid = _set_extender(config, bins, setup.extender)
    start = _restart_scheduler(config, bins, entry, setup.full_scan)
    apiserver_pid = processes.running_pid(config.run, "kube-apiserver", str(config.state_dir))
    label = "warm-up" if round_index < 0 else f"round {round_index + 1}"
    namespace = f"bench-{label.replace(' ', '')}-{re.sub('[^a-z]+', '-', name)}"

    busy = [processes.running_pid(config.run, name, str(config.state_dir)) for name in _BACKGROUND]

    async def measure() -> _Window:
        client = await KubeClient.connect(str(config.kubeconfig))
        try:
            profiles = scheduler_settings(setup.extender is not None, setup.full_scan) is SCHEDULER_SETTINGS
            await _create_all(client, namespace, pods, setup, profiles)
            await _settle([extender_pid, *busy])
            window = await _time_bindings(client, namespace, pods, start, (extender_pid, apiserver_pid))
            await _delete_namespace(client, namespace)
            return window
        finally:
            await client.close()

    window = asyncio.run(measure())
    times = _logged_bindings(config.logs / "kube-scheduler.log", namespace, pods)
    if len(times) < pods:
        raise RuntimeError(f"the scheduler's log shows {len(times)} of {pods} bindings of {namespace}")
    rate, first_rate, later_rate = rates(times)
    used = [(last - first) * 1000 / pods for first, last in zip(window.first, window.last, strict=True)]
    extender_ms = None if extender_pid is None else used[1]
    run = Run(
        name, round_index, rate, used[0], extender_ms, used[2], os.getloadavg()[0], window.idle, first_rate, later_rate
    )
    extender_cpu = "" if extender_ms is None else f", extender {extender_ms:.2f}"
    later = "" if later_rate is None else f", after them {later_rate:.1f}"
    print(
        f"{label} {name}: {rate:.1f} pods/s (first {min(HEAD, pods)} bindings {first_rate:.1f}{later}; ms CPU/pod: "
        f"scheduler {run.scheduler_ms_per_pod:.2f}{extender_cpu}, apiserver {run.apiserver_ms_per_pod:.2f}; "
        f"load {run.load:.1f}, idle {run.idle:.0%})",
        file=sys.stderr,
    )
    return run


def round_order(round_index: int, names: Sequence[str]) -> list[str]:
    """The configurations of a round, rotated by one each round: none of them always runs first (after the
    extender's restart) or last."""
    names = list(names)
    shift = round_index % len(names)
    return names[shift:] + names[:shift]


def throughput_report(pods: int, port_base: int, rounds: int, names: Sequence[str]) -> list[Run]:
    """Every configuration once per round, on one cluster, ``rounds`` rounds: the rounds share the machine's
    changing load alike, and each round's costs compare runs minutes apart."""
    state = Path(tempfile.mkdtemp(prefix="kq-extender-bench-"))
    config = ClusterConfig(state_dir=state, ports=Ports(port_base), nodes=default_nodes(regular=500, virtual=1))
    print(f"bringing up a dev cluster with 500 kwok nodes in {state} (ports {port_base}+) ...", file=sys.stderr)
    runs: list[Run] = []
    try:
        bins = cluster.up(
            config,
            service=devsystem.extender_components,
            extender=devsystem.scheduler_extender(config),
            scheduler_settings=devsystem.scheduler_settings(config),
            after_api=devsystem.install_api_objects,
            echo=lambda line: print(line, file=sys.stderr),
        )
        # A fresh cluster schedules its first pods slowly (caches filling, controllers syncing 500 nodes): one
        # short run of each configuration first, not reported.
        for name in names:
            _one_run(config, bins, name, -1, max(100, pods // 4))
        for round_index in range(rounds):
            runs.extend(_one_run(config, bins, name, round_index, pods) for name in round_order(round_index, names))
    except BaseException:
        print(f"failed: the cluster's logs stay in {config.logs}", file=sys.stderr)
        cluster.down(config, echo=lambda line: print(line, file=sys.stderr))
        raise
    cluster.down(config, purge=True, echo=lambda line: print(line, file=sys.stderr))
    return runs


# Report --------------------------------------------------------------------------------------------------------


def _cell(value: float, base: float) -> str:
    """``"250.3 (17%)"``: pods/s and the cost against ``base``, right-aligned in a column."""
    return f"{f'{value:.1f} ({100 * (1 - value / base):.0f}%)':>26}"


def print_latency(latencies: list[Latency], iterations: int) -> None:
    print(f"\nExtender latency: filter then prioritize over loopback HTTP, all node names, {iterations} pods")
    print(
        f"{'nodes':>6} {'pod':<10} {'filter p50':>10} {'p99':>7} {'prioritize p50':>14} {'p99':>7} "
        f"{'both p50':>9} {'both p99':>9}"
    )
    for row in latencies:
        if row.preempt_ms is not None:
            continue
        print(
            f"{row.nodes:>6} {row.pod:<10} {statistics.median(row.filter_ms):>8.2f}ms "
            f"{percentile(row.filter_ms, 0.99):>5.2f}ms {statistics.median(row.prioritize_ms):>12.2f}ms "
            f"{percentile(row.prioritize_ms, 0.99):>5.2f}ms {statistics.median(row.both_ms):>7.2f}ms "
            f"{percentile(row.both_ms, 0.99):>7.2f}ms"
        )
    preempts = [row for row in latencies if row.preempt_ms is not None]
    if preempts:
        print(f"\nExtender latency: preempt over loopback HTTP (2 victims a candidate node), {iterations} requests")
        print(f"{'nodes':>6} {'candidates':>10} {'preempt p50':>11} {'p99':>7}")
        for row in preempts:
            assert row.preempt_ms is not None
            print(
                f"{row.nodes:>6} {row.pod.split()[-1]:>10} {statistics.median(row.preempt_ms):>9.2f}ms "
                f"{percentile(row.preempt_ms, 0.99):>5.2f}ms"
            )


COST_STEPS = ("none", "none, full scan", "null filter, window", "filter")
"""From the scheduler's defaults to the kq extender as shipped, one change at a time: every node filtered,
then a do-nothing extender behind it passing back as many nodes, then the kq extender's decisions."""


def cost_steps(pods_per_second: Sequence[float]) -> list[float]:
    """A round's cost of the last of :data:`COST_STEPS` (``1 - last / first``) as the sum of each step's share:
    step ``i`` takes ``(rate[i-1] - rate[i]) / rate[0]`` (negative when the step ran faster)."""
    base = pods_per_second[0]
    return [(before - after) / base for before, after in itertools.pairwise(pods_per_second)]


def print_cost_steps(by: Mapping[tuple[int, str], Run], rounds: int) -> None:
    """Where the kq extender's cost goes, round by round (:func:`cost_steps`), and its medians."""
    steps = [cost_steps([by[index, name].pods_per_second for name in COST_STEPS]) for index in range(rounds)]
    print("where the cost of filter goes, in points of the round's none (full scan / protocol / kq decisions):")
    for index, shares in enumerate(steps):
        print(f"  round {index + 1}: " + " / ".join(f"{100 * share:.1f}" for share in shares))
    medians = [statistics.median(shares[step] for shares in steps) for step in range(len(COST_STEPS) - 1)]
    print("  median:  " + " / ".join(f"{100 * share:.1f}" for share in medians) + " (medians need not add up)")


def print_throughput(runs: list[Run], pods: int, rounds: int, names: Sequence[str]) -> None:
    """Each round (pods/s, and each other configuration's cost against that round's ``none``), the medians,
    and the CPU per pod; the headline is the median of the per-round costs."""
    by = {(run.round, run.configuration): run for run in runs}
    print(
        f"\nkube-scheduler throughput: 500 kwok nodes, {pods} pods of 100m CPU per run, {rounds} rounds; "
        "configurations interleaved (order rotates each round); cost = 1 - pods/s / the round's none;\n"
        "none = no extender, default percentageOfNodesToScore; full scan = percentageOfNodesToScore 100 for every "
        "pod; with an extender the scheduler runs the shipped two profiles, the policy's pods on kube-queue-full-scan "
        "(percentageOfNodesToScore 100), the others on default-scheduler (sampling); 10% policy = one pod in ten "
        "under the policy; no policy = none;\n"
        "null filter = a do-nothing extender behind the shipped entry and settings "
        "(what any HTTP extender costs); null filter, window = that, passing back a default sample's worth of "
        "nodes as the kq extender does (the floor under it); filter = kq extender as shipped"
    )
    print(f"{'round':<7}" + "".join(f"{name:>26}" for name in names) + f"{'load':>7}")
    costs: dict[str, list[float]] = {name: [] for name in names[1:]}
    for index in range(rounds):
        base = by[index, "none"].pods_per_second
        cells = [f"{base:>26.1f}"]
        for name in names[1:]:
            value = by[index, name].pods_per_second
            costs[name].append(1 - value / base)
            cells.append(_cell(value, base))
        load = max(by[index, name].load for name in names)
        print(f"{index + 1:<7}" + "".join(cells) + f"{load:>7.1f}")
    medians = {name: statistics.median(by[i, name].pods_per_second for i in range(rounds)) for name in names}
    cells = [f"{medians['none']:>26.1f}"]
    cells += [_cell(medians[name], medians["none"]) for name in names[1:]]
    print(f"{'median':<7}" + "".join(cells))
    for name in names[1:]:
        print(f"cost of {name:<18} median of the rounds {100 * statistics.median(costs[name]):.1f}%")
    if pods > HEAD:
        print(f"the same over the first {HEAD} bindings of each run / over the bindings after them:")
        for name in names[1:]:
            first = [1 - by[i, name].first_rate / by[i, "none"].first_rate for i in range(rounds)]
            later = [1 - (by[i, name].later_rate or 0) / (by[i, "none"].later_rate or 1) for i in range(rounds)]
            print(
                f"cost of {name:<18} {100 * statistics.median(first):.1f}% / {100 * statistics.median(later):.1f}%"
            )
    print("CPU per pod, median ms (kube-scheduler / extender process / kube-apiserver):")
    for name in names:
        scheduler = statistics.median(by[i, name].scheduler_ms_per_pod for i in range(rounds))
        own = [by[i, name].extender_ms_per_pod for i in range(rounds)]
        extender = "-" if None in own else f"{statistics.median(v for v in own if v is not None):.2f}"
        apiserver = statistics.median(by[i, name].apiserver_ms_per_pod for i in range(rounds))
        print(f"  {name:<18} {scheduler:.2f} / {extender} / {apiserver:.2f}")
    if set(COST_STEPS) <= set(names):
        print_cost_steps(by, rounds)
    print_goals(by, rounds, names)


POLICY_FREE_GOAL = 0.15
"""Issue 21: policy-free pods lose less than 15 % of the scheduler's throughput to the extender."""
OWN_COST_GOAL = 0.10
"""Issue 21: the kq extender's own cost over a do-nothing extender in the same run, at most 10 points."""


def print_goals(by: Mapping[tuple[int, str], Run], rounds: int, names: Sequence[str]) -> None:
    """The two profiles' goals, as ratios of pods/s within each round (medians of the rounds): what
    policy-free pods keep with the kq extender, and the kq extender's own cost on the 10 % mix over the
    do-nothing extender's."""

    def ratios(name: str, base: str) -> list[float]:
        return [by[i, name].pods_per_second / by[i, base].pods_per_second for i in range(rounds)]

    def show(values: Sequence[float]) -> str:
        return f"{statistics.median(values):.3f} (rounds: {', '.join(f'{v:.3f}' for v in values)})"

    print("two scheduler profiles (issue 21), pods/s ratios within each round, median of the rounds:")
    for name in ("filter", "null filter, window", *MIX, "filter, no policy", "filter, no policy, all marked"):
        if name in names:
            print(f"  {name} / none: {show(ratios(name, 'none'))}")
    if "filter, no policy" in names:
        kept = statistics.median(ratios("filter, no policy", "none"))
        verdict = "met" if 1 - kept < POLICY_FREE_GOAL else "NOT met"
        print(
            f"  goal: policy-free pods lose < {POLICY_FREE_GOAL:.0%} to the extender: they lose {1 - kept:.1%} "
            f"(filter, no policy / none = {kept:.3f}): {verdict}"
        )
    if set(MIX) <= set(names):
        null, kq = MIX
        points = [
            (by[i, null].pods_per_second - by[i, kq].pods_per_second) / by[i, "none"].pods_per_second
            for i in range(rounds)
        ]
        own = statistics.median(points)
        verdict = "met" if own <= OWN_COST_GOAL else "NOT met"
        print(
            f"  goal: the kq extender's own cost on the 10 % mix <= {100 * OWN_COST_GOAL:.0f} points of none: "
            f"{100 * own:.1f} points (rounds: {', '.join(f'{100 * p:.1f}' for p in points)}; "
            f"{kq} / {null} = {show(ratios(kq, null))}): {verdict}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=300, help="requests per latency case (default 300)")
    parser.add_argument(
        "--pods",
        type=int,
        default=3000,
        help=f"pods per throughput run (default 3000: more than {HEAD}, to see the steady state)",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="throughput rounds, each configuration once per round (default 5)"
    )
    parser.add_argument(
        "--port-base", type=int, default=24400, help="ports of the bench's dev cluster (default 24400..24409)"
    )
    parser.add_argument("--latency-only", action="store_true", help="skip the dev cluster part")
    parser.add_argument("--throughput-only", action="store_true", help="skip the latency part")
    parser.add_argument(
        "--configurations",
        nargs="+",
        choices=list(CONFIGURATIONS),
        default=list(DEFAULT_CONFIGURATIONS),
        metavar="NAME",
        help=f"throughput configurations to compare (default: {', '.join(DEFAULT_CONFIGURATIONS)}; "
        f"all: {', '.join(CONFIGURATIONS)})",
    )
    parser.add_argument("--serve-null-extender", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--window", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cluster-nodes", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("marker", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    overrides = {
        key: os.environ[f"KQ_EXTENDER_BENCH_{key.upper()}"]
        for key in ("rounds", "pods", "port_base")
        if os.environ.get(f"KQ_EXTENDER_BENCH_{key.upper()}")
    }
    for key, value in overrides.items():  # a runner's fixed command, moved to another port base or shortened
        setattr(args, key, int(value))
        print(f"--{key.replace('_', '-')} {value} (from KQ_EXTENDER_BENCH_{key.upper()})")
    if args.serve_null_extender:
        serve_null_extender(args.serve_null_extender, args.window, args.cluster_nodes)
        return 0

    latencies = [] if args.throughput_only else latency_report(args.iterations)
    if latencies:
        print_latency(latencies, args.iterations)
    if args.latency_only:
        return 0
    names = ["none", *(name for name in args.configurations if name != "none")]  # costs are against none
    print_throughput(throughput_report(args.pods, args.port_base, args.rounds, names), args.pods, args.rounds, names)
    return 0


if __name__ == "__main__":
    sys.exit(main())
