"""End to end on a dev cluster of its own: our admissions per second beside the physical limit (a report).

    .venv/bin/python -m bench.e2e_bench [--jobs 500] [--port-base 56400] [--rounds 0] [--split]

One dev cluster (``webhook.cli.devsystem.up``, the service with ``--oversellrate=1``), five shapes of JOBS small
Jobs (1 pod, 10m CPU, 16Mi) each in its own namespace, measured in this order (:mod:`bench.e2e_shapes`):

1. raw release: suspended Jobs outside the quota tree, each released by one ``spec.suspend: false`` merge patch,
   with the controller's own number of writes in flight: what the API server allows (issue 23);
2. held, then released (issue 7): Jobs wait in a quota capped at ``kube-queue/max-jobs: 0``, then the cap is
   lifted and the controller releases them;
3. raw open: Jobs created suspended outside the tree and released by one patch each as soon as they exist;
4. raw open through webhooks: the same, each create going through a mutating and a validating call to a
   do-nothing webhook (:mod:`bench.noop_webhook`): the least a job submitted open costs in a system that
   holds jobs with admission webhooks;
5. open: Jobs created into a quota that fits them all, released by the controller as they come.

A release is the moment a watch on the namespace sees ``spec.suspend`` false (ours: with the admission
annotation). Each burst ends when every pod of the shape runs and, for ours, when the Queue's and the tree's
status say the final state; the API server's and the controller's Prometheus metrics are scraped around it
(:mod:`bench.e2e_metrics`), and the controller's log gives its side of the timing. The sustained rate is
``(N - 1) / (last - first release)``. Goal (issue 7): at least 100 jobs/s; issue 23: at least 90 % of the raw
rate (held: raw release; open: raw open through webhooks). ``--rounds N`` repeats the held and raw release shapes
N more times, with a third shape between them, the controller's patches replayed by the bench (the admission
path's cost without the controller), in rotating order (:mod:`bench.e2e_rounds`): one run of a shape swings by
tens of percent on a shared machine; the median of several rounds swings less. ``--split`` adds two more
replays to each round, each skipping one webhook of the admission path: what each guarantee costs.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import re
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import devrun, e2e_metrics, e2e_rounds, e2e_shapes, noop_webhook
from bench.e2e_report import report
from webhook.api.kinds import (
    ELASTIC_QUOTA_TREE,
    MUTATING_WEBHOOK_CONFIGURATION,
    QUEUE,
    VALIDATING_WEBHOOK_CONFIGURATION,
)
from webhook.api.names import CONTROLLER_COMPONENT, QUEUE_NAMESPACE, TREE_NAMESPACE
from webhook.api.objects import annotations_of, mapping, mappings, status_of
from webhook.cli import devsystem
from webhook.controller.settings import ControllerSettings
from webhook.core.quota import queue_name
from webhook.core.resources import Resources
from webhook.devcluster.config import ClusterConfig, NodeSpec, Ports, default_nodes
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef

COMMAND = ".venv/bin/python -m bench.e2e_bench"
HELD, OPEN, RAW, RAW_OPEN = "bench-admit", "bench-open", "bench-raw", "bench-raw-open"
RAW_HOOKED = "bench-raw-hooked"
SHAPES = 5
"""Shapes measured, each with its own JOBS pods left running."""
HELD_LEAF, OPEN_LEAF = "bench", "open"
TREES = ResourceRef.of(ELASTIC_QUOTA_TREE, TREE_NAMESPACE)
QUEUES = ResourceRef.of(QUEUE, QUEUE_NAMESPACE)
NAMESPACES = ResourceRef("", "v1", "namespaces")
WEBHOOK_CONFIGURATIONS = {kind.kind: ResourceRef.of(kind)
                          for kind in (MUTATING_WEBHOOK_CONFIGURATION, VALIDATING_WEBHOOK_CONFIGURATION)}
WRITES_IN_FLIGHT = ControllerSettings().write_concurrency
"""The controller's own number of release patches in flight: the raw shapes use the same."""


def nodes(jobs: int, rounds: int = 0, split: bool = False) -> tuple[NodeSpec, ...]:
    """Four regular nodes with room for every pod of the five shapes and the rounds (so no pod of a later shape
    waits for a node an earlier one filled), and the virtual node."""
    room = max(110, -(-(SHAPES + len(e2e_rounds.shapes(split)) * rounds) * jobs // 4) + 50)
    regular = tuple(NodeSpec(f"ecs-{i}", "64", "256Gi", 4, pods=room) for i in range(4))
    return regular + tuple(spec for spec in default_nodes() if spec.virtual)


TOTAL = {"cpu": "1000", "memory": "1000Gi"}


def tree(cap: int) -> dict[str, Any]:
    total = TOTAL
    return {
        "apiVersion": ELASTIC_QUOTA_TREE.api_version,
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": TREE_NAMESPACE},
        "spec": {"root": {"name": "root", "min": total, "max": total, "children": [
            {"name": HELD_LEAF, "min": total, "max": {**total, "kube-queue/max-jobs": cap}, "namespaces": [HELD]},
            {"name": OPEN_LEAF, "min": {"cpu": "0", "memory": "0"}, "max": total, "namespaces": [OPEN]},
        ]}},
    }


async def _prepare(client: KubeClient) -> None:
    await client.create(TREES, tree(0))
    for namespace in (HELD, OPEN, RAW, RAW_OPEN, RAW_HOOKED):
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    await e2e_shapes.namespaces_ready(client, (HELD, OPEN), (RAW, RAW_OPEN, RAW_HOOKED))


async def _noop_webhooks(config: ClusterConfig, client: KubeClient) -> None:
    """Start the do-nothing webhook, register it for the Jobs of :data:`RAW_HOOKED`, and wait until the API
    server calls it (a dry-run create comes back with its annotation)."""
    await asyncio.to_thread(noop_webhook.start, config)
    for item in noop_webhook.configurations(config, RAW_HOOKED):
        await client.create(WEBHOOK_CONFIGURATIONS[item["kind"]], item)
    probe = e2e_shapes.job(0, RAW_HOOKED, suspend=True)

    async def called() -> bool:
        try:
            made = await client.request("POST", e2e_shapes.jobs_ref(RAW_HOOKED).path(None, None), [("dryRun", "All")],
                                        body=probe)
        except KubeApiError:  # configured before the API server's informer saw the server up: try again
            return False
        return noop_webhook.ANNOTATION in annotations_of(made)

    await e2e_shapes.wait_for(called, 60, "the do-nothing webhook to be called")


async def _status_settled(client: KubeClient, leaf: str, namespace: str, count: int, timeout: float = 60) -> float:
    """Wait until the Queue of ``namespace`` lists no waiting job and the tree's status shows the ``count``
    jobs used in ``leaf``; the seconds waited (the burst is over when the status says so)."""
    started = time.perf_counter()
    expected = Resources.parse({"cpu": f"{10 * count}m", "memory": f"{16 * count}Mi"})

    async def check() -> bool:
        queue = await client.get(QUEUES, queue_name(leaf, namespace))
        details = mapping(status_of(queue).get("queueItemDetails"))
        if details.get("active") or details.get("activeOmitted"):
            return False
        status = status_of(await client.get(TREES, "elasticquotatree"))
        children = mappings(mapping(status.get("root")).get("children"))
        node = next((child for child in children if child.get("name") == leaf), None)
        if node is None:
            return False
        used = Resources.parse(mapping(node.get("used")))
        return all(used.get_or_zero(name) == expected.get_or_zero(name) for name in ("cpu", "memory"))

    await e2e_shapes.wait_for(check, timeout, f"the status of queue {queue_name(leaf, namespace)} and the tree")
    return time.perf_counter() - started


async def _admitted_events(client: KubeClient, namespace: str, count: int, timeout: float = 120) -> float:
    """Wait until the controller's ``Admitted`` Event of each of the ``count`` jobs exists; the seconds waited
    (Events are sent in the background, after the release)."""
    started = time.perf_counter()
    events = ResourceRef("", "v1", "events", namespace)

    async def check() -> bool:
        page = await client.list_page(events, limit=count + 50, field_selector="reason=Admitted")
        return len(mappings(page.get("items"))) >= count

    await e2e_shapes.wait_for(check, timeout, f"{count} Admitted events in {namespace}")
    return time.perf_counter() - started


LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \S+ webhook\.controller (.*)$")


def controller_log(log: Path, since: float, until: float) -> dict[str, list[float]]:
    """Wall-clock times of the controller's log lines between ``since`` and ``until`` (epoch seconds), by what
    they say (``decision=admit``, ``decision=queue``, ``event=stale``...)."""
    out: dict[str, list[float]] = {}
    if not log.exists():
        return out
    for line in log.read_text(errors="replace").splitlines():
        found = LOG_LINE.match(line)
        if found is None:
            continue
        stamp = datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone().timestamp()
        if not since - 0.001 <= stamp <= until:
            continue
        fields = dict(part.split("=", 1) for part in found.group(2).split() if "=" in part)
        what = next((f"{key}={fields[key]}" for key in ("decision", "event") if key in fields), "other")
        if what == "decision=admit":
            what += f" {fields.get('job', '').split('/')[1] if '/' in fields.get('job', '') else ''}"
        out.setdefault(what, []).append(stamp)
    return out


Measured = dict[str, Any]


async def _burst(config: ClusterConfig, client: KubeClient, name: str, namespace: str, *, count: int,
                 run: Callable[[], Awaitable[Measured]], leaf: str | None) -> Measured:
    """One shape: wait for a quiet machine, scrape, run, wait for the end of the burst (pods running; ours:
    status settled), scrape."""
    quiet = await e2e_shapes.settled()
    print(f"e2e bench: {name} (machine quiet after {quiet:.1f} s) ...", file=sys.stderr)
    before = await e2e_metrics.scrape(config)
    wall = time.time()
    figures = await run()
    figures["releases_delta"] = e2e_metrics.delta(before, await e2e_metrics.scrape(config))
    if leaf is not None:
        figures["status_settled_s"] = await _status_settled(client, leaf, namespace, count)
        figures["events_sent_s"] = await _admitted_events(client, namespace, count)
    figures["pods_running_s"] = await e2e_shapes.pods_running(client, namespace, count)
    after = await e2e_metrics.scrape(config)
    figures["window_s"] = time.time() - wall
    figures["delta"] = e2e_metrics.delta(before, after)
    figures["log"] = controller_log(config.logs / "kq-serve.log", wall, time.time())
    figures["wall_start"] = wall
    return figures


async def measure(config: ClusterConfig, count: int, rounds: int = 0, split: bool = False) -> dict[str, Any]:
    async with await KubeClient.connect(str(config.kubeconfig)) as client:
        await _prepare(client)
        started = time.perf_counter()
        await e2e_shapes.create_all(client, [e2e_shapes.job(index, HELD) for index in range(count)], HELD)
        created = time.perf_counter() - started
        await e2e_shapes.all_suspended(client, HELD, count)
        await e2e_shapes.raw_prepare(client, RAW, count)
        out: dict[str, Any] = {}
        out["raw"] = await _burst(config, client, "raw release", RAW, count=count, leaf=None,
                                  run=lambda: e2e_shapes.raw_release(client, RAW, count, WRITES_IN_FLIGHT))

        async def lift() -> None:
            patch = [{"op": "replace", "path": "/spec/root/children/0/max/kube-queue~1max-jobs", "value": count * 2}]
            await client.json_patch(TREES, "elasticquotatree", patch)

        out["held"] = await _burst(config, client, "held, then released", HELD, count=count, leaf=HELD_LEAF,
                                   run=lambda: e2e_shapes.held_release(client, HELD, count, lift))
        out["held"]["created_per_second"] = count / created
        out["raw_open"] = await _burst(config, client, "raw open", RAW_OPEN, count=count, leaf=None,
                                       run=lambda: e2e_shapes.raw_open(client, RAW_OPEN, count, WRITES_IN_FLIGHT))
        await _noop_webhooks(config, client)
        out["raw_hooked"] = await _burst(
            config, client, "raw open through webhooks", RAW_HOOKED, count=count, leaf=None,
            run=lambda: e2e_shapes.raw_open(client, RAW_HOOKED, count, WRITES_IN_FLIGHT))
        await asyncio.to_thread(noop_webhook.stop, config)
        out["open"] = await _burst(config, client, "open", OPEN, count=count, leaf=OPEN_LEAF,
                                   run=lambda: e2e_shapes.open_submit(client, OPEN, count))
        if rounds and split:
            await e2e_rounds.skip_webhooks(client)
        async with await KubeClient.connect(str(config.controller_kubeconfig),
                                            user_agent=CONTROLLER_COMPONENT) as controller:
            out["rounds"] = [await e2e_rounds.run_round(client, controller, index, trees=TREES,
                                                        tree_name="elasticquotatree", count=count,
                                                        in_flight=WRITES_IN_FLIGHT, total=TOTAL,
                                                        cpu=lambda: e2e_metrics.cpu_seconds(config), split=split,
                                                        memory=lambda: e2e_metrics.resident_mib(config))
                             for index in range(1, rounds + 1)]
        return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--port-base", type=int, default=56400)
    parser.add_argument("--rounds", type=int, default=0,
                        help="after the five shapes, this many more rounds of held, replayed and raw release, in "
                             "rotating order (bench/e2e_rounds.py)")
    parser.add_argument("--split", action="store_true",
                        help="each round also replays in a namespace jobs.validate skips and in one pods.mutate skips: "
                             "what each guarantee of the admission path costs (bench/e2e_rounds.py)")
    parser.add_argument("--service-arg", action="append", default=[], metavar="ARG",
                        help="one more argument for kq serve (e.g. --service-arg=--status-interval=2)")
    args = parser.parse_args(argv)
    given = (args.jobs, args.port_base, args.rounds, args.split, args.service_arg)
    command = COMMAND if given == (500, 56400, 0, False, []) else (
        " ".join([COMMAND, f"--jobs {args.jobs}", f"--port-base {args.port_base}",
                  *([f"--rounds {args.rounds}"] if args.rounds else []), *(["--split"] if args.split else []),
                  *(f"--service-arg={arg}" for arg in args.service_arg)]))
    if not devsystem.service_available():
        sys.stdout.write(report(None, command, WRITES_IN_FLIGHT, "the service (kq serve) is not in this build"))
        return 0
    config = ClusterConfig(state_dir=devrun.state_dir("e2e"), ports=Ports(args.port_base),
                           nodes=nodes(args.jobs, args.rounds, args.split),
                           service_args=("--oversellrate=1", *args.service_arg))

    def work() -> dict[str, Any]:
        figures = asyncio.run(measure(config, args.jobs, args.rounds, args.split))
        skip = ("delta", "releases_delta", "log")
        print(json.dumps({name: {key: value for key, value in shape.items() if key not in skip}
                          for name, shape in figures.items() if name != "rounds"}), file=sys.stderr)
        print(json.dumps({"rounds": figures["rounds"]}), file=sys.stderr)
        return figures

    figures, problem = devrun.run("e2e", config, work)
    sys.stdout.write(report(figures, command, WRITES_IN_FLIGHT, problem))
    return 0


if __name__ == "__main__":
    sys.exit(main())
