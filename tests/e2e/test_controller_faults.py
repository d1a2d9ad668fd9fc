"""The controller survives being killed at random points while jobs stream in and out.

Controller replicas run in the test process (see :mod:`tests.e2e.test_controller_harness`); a chaos loop
starts one, lets it work for a random moment and cancels it wherever it is (mid-list, mid-pass, mid-write),
at least 20 times, then lets a last one finish the work. Meanwhile the test submits jobs of random shapes
(whose pods succeed after a few seconds) into two quotas and deletes some of them, and an observer watches
every version of every job in the order the apiserver committed them.

Afterwards: every job that was not deleted completed (none lost), no job was ever admitted twice (one
admission record id, one release), and - with oversellrate 1 - at no point did the admitted jobs of any
quota level request more than its ``max``.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import job_manifest
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import (
    LoopThread,
    Replica,
    create_namespaces,
    installed_tree,
    loop_thread,
    replica_settings,
    service_without_controller,
    unique,
    wait_managed,
)
from webhook.api.names import ADMISSION_ANNOTATION, SUCCEED_AFTER_ANNOTATION
from webhook.kube.cache import ApiListWatch, CacheEvent, WatchCache
from webhook.kube.client import KubeClient, ResourceRef

pytestmark = pytest.mark.e2e
__all__ = ["loop_thread", "service_without_controller"]  # fixtures used here

KILLS = 24
JOBS = 36
ROOT_CPU = 24
SMALL_CPU = 12
SEED = 20260509


def _finished(obj: Mapping[str, Any]) -> bool:
    conditions = obj.get("status", {}).get("conditions") or []
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in conditions)


def _usage(obj: Mapping[str, Any]) -> int:
    """CPU (whole units) an admitted Job holds: its per-pod CPU times the pods it still needs."""
    spec = obj["spec"]
    if spec.get("suspend") or _finished(obj):
        return 0
    cpu = int(spec["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"])
    parallelism = int(spec.get("parallelism", 1))
    completions = int(spec.get("completions", parallelism))
    succeeded = int(obj.get("status", {}).get("succeeded") or 0)
    return cpu * max(0, min(parallelism, completions - succeeded))


@dataclass
class Observer:
    """Replays every job version in commit order and checks the quota levels at each step."""

    namespaces: Mapping[str, str]
    """Namespace -> leaf name."""
    limits: Mapping[str, int]
    """Level (leaf names and ``root``) -> max CPU."""
    usage: dict[str, int] = field(default_factory=dict)
    """Job key -> CPU it holds now."""
    records: dict[str, set[str]] = field(default_factory=dict)
    releases: dict[str, int] = field(default_factory=dict)
    suspended: dict[str, bool] = field(default_factory=dict)
    peak: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    events: int = 0

    def __call__(self, cache: WatchCache, event: CacheEvent) -> None:
        if event.type == "RELIST":
            for obj in cache.items():
                self._apply("MODIFIED", obj)
            return
        if event.obj is not None:
            self._apply(event.type, event.obj)

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        namespace = obj["metadata"]["namespace"]
        if namespace not in self.namespaces:
            return
        self.events += 1
        key = f"{namespace}/{obj['metadata']['name']}"
        if kind == "DELETED":
            self.usage.pop(key, None)
            return
        suspended = bool(obj["spec"].get("suspend"))
        if self.suspended.get(key, True) and not suspended:
            self.releases[key] = self.releases.get(key, 0) + 1
        self.suspended[key] = suspended
        raw = (obj["metadata"].get("annotations") or {}).get(ADMISSION_ANNOTATION)
        if raw:
            self.records.setdefault(key, set()).add(json.loads(raw)["id"])
        self.usage[key] = _usage(obj)
        totals = dict.fromkeys(self.limits, 0)
        for job, cpu in self.usage.items():
            totals[self.namespaces[job.split("/")[0]]] += cpu
            totals["root"] += cpu
        for level, used in totals.items():
            self.peak[level] = max(self.peak.get(level, 0), used)
            if used > self.limits[level]:
                self.violations.append(f"{level} used {used} > max {self.limits[level]} after {kind} {key}")


def _random_job(name: str, namespace: str, rng: random.Random) -> dict[str, Any]:
    """A held Job of 1-3 pods at once (1 or 2 rounds) of 1-4 CPU that succeed after 1-3 s."""
    parallelism = rng.randint(1, 3)
    completions = parallelism * rng.choice((1, 1, 2))
    cpu = rng.randint(1, 4)
    return job_manifest(name, namespace=namespace, pods=parallelism, completions=completions, cpu=cpu,
                        memory="64Mi", suspend=True, container="work", grace_seconds=None,
                        template_annotations={SUCCEED_AFTER_ANNOTATION: f"{rng.randint(1, 3)}s"})


async def _chaos(replicas: list[Replica], make: Callable[[], Replica], rng: random.Random, kills: int) -> None:
    """Start a replica, cancel it after a random moment, ``kills`` times (runs in the replicas' loop)."""
    for _ in range(kills):
        replica = await make().astart()
        replicas.append(replica)
        await asyncio.sleep(rng.uniform(0.3, 2.0))
        await replica.akill()
        await asyncio.sleep(rng.uniform(0.1, 0.4))


def test_killing_the_controller_at_random_points_loses_and_double_admits_nothing(
    service_without_controller: DevCluster, loop_thread: LoopThread
) -> None:
    dev = service_without_controller
    rng = random.Random(SEED)
    suffix = unique("f")
    small, big = f"{suffix}-small", f"{suffix}-big"
    leaves = {small: SMALL_CPU, big: ROOT_CPU}
    namespaces = {f"{small}-ns": small, f"{big}-ns": big}
    spec = {
        "root": {
            "name": "root",
            "min": {"cpu": ROOT_CPU},
            "max": {"cpu": ROOT_CPU},
            "children": [
                {"name": leaf, "max": {"cpu": cap}, "namespaces": [f"{leaf}-ns"]} for leaf, cap in leaves.items()
            ],
        }
    }
    observer = Observer(namespaces, {"root": ROOT_CPU, **leaves})
    kubeconfig = dev.config.state_dir / "controller.kubeconfig"
    settings = replica_settings(identity=f"fault-{suffix}", resync_period=1.0)
    replicas: list[Replica] = []

    watching: list[Any] = []

    async def observe() -> None:
        client = await KubeClient.connect(str(dev.config.kubeconfig))
        cache = WatchCache("observer", ApiListWatch(client, ResourceRef("batch", "v1", "jobs")))
        cache.add_listener(observer)
        watching.extend([client, asyncio.ensure_future(cache.run())])
        await cache.synced.wait()

    async def stop_observing() -> None:
        client, task = watching
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()

    create_namespaces(dev, *namespaces)
    with installed_tree(dev, spec):
        first = Replica(loop_thread, kubeconfig, settings).start()
        replicas.append(first)
        wait_managed(dev, *namespaces)
        first.kill()
        loop_thread.run(observe())
        future = asyncio.run_coroutine_threadsafe(
            _chaos(replicas, lambda: Replica(loop_thread, kubeconfig, settings), rng, KILLS),
            loop_thread.loop,
        )
        created: list[tuple[str, str]] = []
        deleted: set[tuple[str, str]] = set()
        for index in range(JOBS):
            namespace = rng.choice(sorted(namespaces))
            name = f"j{index:02d}"
            dev.apply(_random_job(name, namespace, rng))
            created.append((namespace, name))
            if index % 7 == 6:
                victim = rng.choice(created[:-1])
                if victim not in deleted:
                    dev.kubectl("delete", "job", victim[1], "-n", victim[0], "--wait=false")
                    deleted.add(victim)
            time.sleep(rng.uniform(0.2, 0.8))
        future.result(timeout=300)
        last = Replica(loop_thread, kubeconfig, settings).start()
        replicas.append(last)
        remaining = [job for job in created if job not in deleted]

        def all_done() -> bool:
            items = {
                (obj["metadata"]["namespace"], obj["metadata"]["name"]): obj
                for namespace in namespaces
                for obj in dev.get_json("jobs", "-n", namespace)["items"]
            }
            return all(job in items and _finished(items[job]) for job in remaining)

        try:
            dev.wait_until(all_done, 300, f"all {len(remaining)} remaining jobs to complete")
        finally:
            last.stop()
            loop_thread.run(stop_observing())
            for namespace in namespaces:
                dev.kubectl("delete", "namespace", namespace, "--wait=false")

    assert sum(1 for replica in replicas[:-1] if not replica.running) >= KILLS
    assert observer.violations == []
    twice = {job: ids for job, ids in observer.records.items() if len(ids) > 1}
    assert twice == {}, "a job got more than one admission record"
    released_twice = {job: count for job, count in observer.releases.items() if count > 1}
    assert released_twice == {}, "a job was released more than once"
    print(f"kills={len(replicas) - 1} events={observer.events} peak={observer.peak} "
          f"admitted={sum(r.admitted() for r in replicas)} deleted={len(deleted)}")
    assert observer.peak["root"] > 0
    lost = [f"{ns}/{name}" for ns, name in remaining if f"{ns}/{name}" not in observer.records]
    assert lost == [], "every job that was not deleted was admitted"
