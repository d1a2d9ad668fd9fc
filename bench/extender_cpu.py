"""The kq extender's own CPU per pod, in process (a report, not a test: it asserts nothing).

    .venv/bin/python bench/extender_cpu.py [--pods 3000] [--repeat 5]

What a pod of ``bench/extender_bench.py``'s ``filter`` configuration costs the extender's process, without
the dev cluster and its noise (there every process shares two busy cores, and every figure comes out about
three times this one): 500 regular nodes and the virtual node, the bench's ResourcePolicy ``[ecs, eci max 50]``
with 2,000 of its pods bound, and for each pod

1. the filter request as kube-scheduler sends it - the pod and the 500 regular nodes' names (the virtual
   node is tainted), in a new order on every call (the scheduler filters nodes in parallel) - through the
   handlers as ``kq extender`` serves them: decode, decide, answer, then the record, the log line (to a
   file, in ``kq``'s format) and the metrics;
2. the two events the pod watch then brings (the pod bound, then running, as the API server encodes them),
   decoded, slimmed and applied as the watch cache does.

Times are this process's CPU time (``time.process_time``), the best of ``--repeat`` passes of ``--pods``
pods each. Compare two versions of the code in one sitting: the machine's speed moves between sittings.
"""

from __future__ import annotations

import argparse
import copy
import gc
import logging
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.extender_bench import CLUSTER_POLICY, _pod_manifest
from bench.objects import bound, node, pod, virtual_node
from webhook.cli.main import configure_logging
from webhook.extender import sources
from webhook.extender.app import ExtenderApp, make_app
from webhook.extender.pods import pod_essentials
from webhook.extender.state import ExtenderState
from webhook.kube.cache import WatchCache

NAMESPACE = "bench"
NODES = 500
BOUND = 2000


def regular_names() -> list[str]:
    return [f"node-{index:05d}" for index in range(NODES)]


def build_state() -> ExtenderState:
    names = regular_names()
    state = ExtenderState()
    state.replace_nodes([node(name) for name in names] + [virtual_node()])
    state.set_policies([{**CLUSTER_POLICY, "metadata": {"name": "bench", "namespace": NAMESPACE}}])
    state.replace_pods(
        bound(pod(f"running-{index}", "100m", namespace=NAMESPACE), names[index % NODES]) for index in range(BOUND)
    )
    state.ready = True
    return state


def _fields(*paths: str) -> dict[str, Any]:
    """A ``fieldsV1`` tree with ``paths`` (``f:spec.f:containers...``) as the API server writes them."""
    tree: dict[str, Any] = {}
    for path in paths:
        level = tree
        for part in path.split("."):
            level = level.setdefault(part, {".": {}} if part.startswith("k:") else {})
    return tree


def api_pod(name: str, node_name: str, phase: str) -> dict[str, Any]:
    """The bench's pod as the API server sends it once bound (``Pending``) or running: server-set metadata,
    two managedFields entries, the defaulted spec with its service-account volume, kwok's status."""
    obj = copy.deepcopy(_pod_manifest(name, NAMESPACE))
    stamp = "2026-12-01T11:49:52Z"
    obj["metadata"].update(
        uid=str(uuid.uuid4()),
        resourceVersion="29612",
        generation=1,
        creationTimestamp=stamp,
        managedFields=[
            {
                "manager": "OpenAPI-Generator",
                "operation": "Update",
                "apiVersion": "v1",
                "time": stamp,
                "fieldsType": "FieldsV1",
                "fieldsV1": _fields(
                    "f:metadata.f:labels.f:app",
                    'f:spec.f:containers.k:{"name":"c"}.f:resources.f:requests.f:cpu',
                    'f:spec.f:containers.k:{"name":"c"}.f:image',
                    "f:spec.f:dnsPolicy",
                    "f:spec.f:restartPolicy",
                    "f:spec.f:schedulerName",
                    "f:spec.f:terminationGracePeriodSeconds",
                ),
            },
            {
                "manager": "kwok",
                "operation": "Update",
                "apiVersion": "v1",
                "time": stamp,
                "fieldsType": "FieldsV1",
                "fieldsV1": _fields(
                    'f:status.f:conditions.k:{"type":"Ready"}.f:status',
                    'f:status.f:conditions.k:{"type":"Initialized"}.f:status',
                    'f:status.f:conditions.k:{"type":"ContainersReady"}.f:status',
                    "f:status.f:phase",
                    "f:status.f:podIP",
                    "f:status.f:startTime",
                ),
                "subresource": "status",
            },
        ],
    )
    spec = obj["spec"]
    mount = {"name": "kube-api-access", "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
    spec["containers"][0].update(
        volumeMounts=[mount],
        terminationMessagePath="/dev/termination-log",
        terminationMessagePolicy="File",
        imagePullPolicy="Always",
    )
    spec.update(
        volumes=[{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
        restartPolicy="Always",
        dnsPolicy="ClusterFirst",
        serviceAccountName="default",
        nodeName=node_name,
        schedulerName="default-scheduler",
        tolerations=[
            {"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute"}
            for taint in ("not-ready", "unreachable")
        ],
        priority=0,
        enableServiceLinks=True,
        preemptionPolicy="PreemptLowerPriority",
    )
    kinds = ("PodScheduled",) if phase == "Pending" else ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    conditions = [{"type": kind, "status": "True", "lastTransitionTime": stamp} for kind in kinds]
    obj["status"] = {"phase": phase, "conditions": conditions, "qosClass": "Burstable"}
    if phase == "Running":
        obj["status"].update(
            hostIP="10.255.0.1",
            podIP="10.244.0.7",
            podIPs=[{"ip": "10.244.0.7"}],
            startTime=stamp,
            containerStatuses=[
                {
                    "name": "c",
                    "ready": True,
                    "restartCount": 0,
                    "image": "busybox",
                    "started": True,
                    "state": {"running": {"startedAt": stamp}},
                }
            ],
        )
    return obj


class _NoSource:
    """The cache's source: never listed or watched here, the events are applied directly."""

    async def list_page(self, limit: int, continue_token: str | None) -> Any:
        raise NotImplementedError

    def watch(self, resource_version: str, timeout_seconds: int) -> Any:
        raise NotImplementedError


def pod_cache(state: ExtenderState) -> WatchCache:
    """The extender's pod cache, wired to ``state`` as ``kq extender`` wires it (never listed or watched here:
    :func:`applier` hands it the events)."""
    return sources.pod_cache(_NoSource(), state)


def passes(pods: int, repeat: int) -> tuple[list[float], list[float]]:
    """CPU seconds of each pass: (filter requests, watch events). Logs go where logging is set up to send them."""
    rng = random.Random(1)
    requests_s: list[float] = []
    events_s: list[float] = []
    for round_index in range(repeat):
        state = build_state()
        app = make_app(state)
        cache = pod_cache(state)
        names = regular_names()
        bodies: list[bytes] = []
        lines: list[bytes] = []
        for index in range(pods):
            name = f"p-{round_index}-{index:05d}"
            pending = _pod_manifest(name, NAMESPACE)
            pending["metadata"]["uid"] = str(uuid.uuid4())
            bodies.append(orjson.dumps({"Pod": pending, "Nodes": None, "NodeNames": rng.sample(names, len(names))}))
            for phase in ("Pending", "Running"):
                obj = api_pod(name, names[index % NODES], phase)
                obj["metadata"]["uid"] = pending["metadata"]["uid"]
                lines.append(orjson.dumps({"type": "ADDED" if phase == "Pending" else "MODIFIED", "object": obj}))
        gc.collect()
        gc.freeze()  # as `kq extender` does once its watches have listed
        requests_s.append(_timed(bodies, _server(app)))
        events_s.append(_timed(lines, applier(cache)))
        gc.unfreeze()
    return requests_s, events_s


def _server(app: ExtenderApp) -> Callable[[bytes], None]:
    def serve(body: bytes) -> None:
        reply = app.filter(body)
        if reply.then is not None:
            reply.then()

    return serve


def applier(cache: WatchCache) -> Callable[[bytes], None]:
    """Applies one line of a pod watch stream as the watch does: decode, slim, into the cache."""

    def apply(line: bytes) -> None:
        event = orjson.loads(line)  # what the watch stream hands on, line by line
        event["object"] = pod_essentials(event["object"])  # SlimListWatch
        cache._apply(event)

    return apply


def _timed(items: Sequence[bytes], one: Callable[[bytes], None]) -> float:
    started = time.process_time()
    for item in items:
        one(item)
    return time.process_time() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=3000, help="pods per pass (default 3000)")
    parser.add_argument("--repeat", type=int, default=5, help="passes; the best is reported (default 5)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kq-extender-cpu-") as tmp, (Path(tmp) / "extender.log").open("w") as log:
        configure_logging(False, log)  # as `kq extender` logs, to a file instead of its stderr
        requests_s, events_s = passes(args.pods, args.repeat)
        logging.shutdown()
    request_us = min(requests_s) / args.pods * 1e6
    event_us = min(events_s) / (2 * args.pods) * 1e6
    print(f"kq extender CPU in process: {NODES} nodes and a virtual one, policy [ecs, eci max 50], {BOUND} pods bound;")
    print(f"best of {args.repeat} passes of {args.pods} pods")
    print(f"  filter request (decode, decide, answer, record, log, metrics)  {request_us:7.1f} us")
    print(f"  pod watch event (decode, slim, apply), 2 a pod                  {event_us:7.1f} us")
    print(f"  per pod                                                         {request_us + 2 * event_us:7.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
