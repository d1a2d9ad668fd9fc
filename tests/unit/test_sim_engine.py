"""The virtual clock: completions free quota, evictions re-queue and re-run, the node model, the figures."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import pytest

import webhook.sim.engine as sim_engine
from webhook.cli.simulate import run_scenario
from webhook.core.decide import decide as core_decide
from webhook.core.decisions import Decisions, PlainJob
from webhook.core.ledger import build_ledger
from webhook.core.quota import QuotaTree
from webhook.sim.engine import CorePath, SimJob, State, simulate
from webhook.sim.report import percentile, to_dict, to_json, wait_stats
from webhook.sim.report_shape import Report
from webhook.sim.scenario import scenario_from_text

TREE = """
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: elasticquotatree, namespace: kube-system}
spec:
  root:
    name: root
    min: {cpu: 100}
    max: {cpu: 100}
    children:
      - {name: Department-a, min: {cpu: 60}, max: {cpu: 100}, namespaces: [user-a]}
      - {name: Department-b, min: {cpu: 40}, max: {cpu: 100}, namespaces: [user-c]}
"""


def job(name: str, cpu: int, at: str, run_for: str = "forever", namespace: str = "user-a", pods: int = 1,
        priority: int | None = None) -> str:
    prio = f"\n      priority: {priority}" if priority is not None else ""
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {namespace}
  annotations: {{sim.kube-queue.io/submit-at: "{at}", sim.kube-queue.io/run-for: "{run_for}"}}
spec:
  parallelism: {pods}
  template:
    spec:{prio}
      containers:
        - name: c
          resources: {{requests: {{cpu: {cpu}}}}}
"""


def run(*docs: str, settings: str = "oversellrate: 1") -> Report:
    text = "\n---\n".join([f"apiVersion: sim.kube-queue.io/v1alpha1\nkind: Scenario\nspec: {{{settings}}}", TREE,
                           *docs])
    return to_dict(run_scenario(scenario_from_text(text)), timeline=True)


def jobs(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {job["name"]: job for job in data["jobs"]}


def decisions(data: Mapping[str, Any]) -> list[tuple[float, str, str]]:
    return [(entry["time"], entry["job"].rsplit("/", 1)[1], entry["decision"]) for entry in data["timeline"]]


def test_a_finished_job_frees_its_quota_and_the_waiting_job_is_admitted_then() -> None:
    data = run(job("a1", 60, "0s", "30s"), job("a2", 60, "5s", "10s"))
    assert decisions(data) == [
        (0.0, "a1", "admit"), (5.0, "a2", "queue"), (30.0, "a1", "finish"), (30.0, "a2", "admit"),
        (40.0, "a2", "finish")]
    a2 = jobs(data)["a2"]
    assert (a2["state"], a2["wait"], a2["admitted"], a2["finished"]) == ("Finished", 25.0, 30.0, 40.0)
    assert data["end"] == 40.0
    wait = data["quotas"]["root/Department-a"]["wait"]
    assert (wait["count"], wait["p50"], wait["max"]) == (2, 0.0, 25.0)


def test_an_evicted_job_returns_to_its_place_and_runs_its_whole_time_again() -> None:
    data = run(job("a1", 60, "0s", "100s"), job("a2", 40, "1s", "10s"), job("c1", 10, "2s", "5s", "user-c"))
    assert decisions(data) == [
        (0.0, "a1", "admit"), (1.0, "a2", "admit"),
        (2.0, "a2", "evict"), (2.0, "c1", "admit"), (2.0, "a2", "queue"),
        (7.0, "c1", "finish"), (7.0, "a2", "admit"),
        (17.0, "a2", "finish"),  # not 11s: the completion planned before the eviction is void
        (100.0, "a1", "finish")]
    a2 = jobs(data)["a2"]
    assert (a2["admissions"], a2["evictions"], a2["started"], a2["finished"]) == (2, 1, 7.0, 17.0)
    assert a2["wait"] == 0.0, "the wait is the time to the first admission"
    assert data["quotas"]["root"]["evictions"] == 1


def test_evicted_jobs_keep_their_original_place_in_the_queue() -> None:
    # a2 (older) is evicted after a3 queued behind it: it goes back ahead of a3.
    data = run(job("a1", 60, "0s"), job("a2", 40, "1s"), job("a3", 40, "2s"), job("c1", 40, "3s", "forever", "user-c"))
    final = jobs(data)
    assert (final["a2"]["state"], final["a2"]["position"]) == ("Queued", 1)
    assert (final["a3"]["state"], final["a3"]["position"]) == ("Queued", 2)


def test_nodes_keep_admitted_jobs_pending_until_their_pods_fit() -> None:
    nodes = "oversellrate: 1, nodes: [{name: small, count: 1, cpu: 8, pods: 10}]"
    data = run(job("a1", 6, "0s", "10s"), job("a2", 6, "0s", "10s"), settings=nodes)
    assert decisions(data) == [
        (0.0, "a1", "admit"), (0.0, "a2", "admit"), (0.0, "a2", "pending"),
        (10.0, "a1", "finish"), (10.0, "a2", "start"), (20.0, "a2", "finish")]
    pending = next(entry for entry in data["timeline"] if entry["decision"] == "pending")
    assert pending["reason"] == (
        "no node has cpu=6, pods=1 free for a pod of pod set 'main' (0 of the job's pods placed)")
    assert jobs(data)["a2"]["wait"] == 0.0, "admitted at once; it waited as pending pods"


def test_a_gang_of_pods_spreads_over_nodes_first_fit() -> None:
    nodes = "oversellrate: 1, nodes: [{name: n, count: 3, cpu: 4}]"
    data = run(job("a1", 2, "0s", "5s", pods=5), job("a2", 4, "0s", "5s", pods=1), settings=nodes)
    assert decisions(data)[:3] == [(0.0, "a1", "admit"), (0.0, "a2", "admit"), (0.0, "a2", "pending")]
    assert jobs(data)["a2"]["started"] == 5.0


def test_oversold_jobs_wait_as_pending_pods_under_the_pod_level_quota() -> None:
    data = run(job("a1", 70, "0s", "10s"), job("a2", 70, "1s", "10s"), settings="oversellrate: 2")
    assert decisions(data) == [
        (0.0, "a1", "admit"), (1.0, "a2", "admit"), (1.0, "a2", "pending"),
        (10.0, "a1", "finish"), (10.0, "a2", "start"), (20.0, "a2", "finish")]
    a2 = jobs(data)["a2"]
    assert (a2["admitted"], a2["started"]) == (1.0, 10.0)
    cpu = data["quotas"]["root/Department-a"]["resources"]["cpu"]
    assert cpu["used_peak"] == 140.0, "admitted beyond max, as the queue allows with oversellrate 2"


def test_utilisation_and_borrowing_are_time_weighted() -> None:
    data = run(job("a1", 70, "0s", "30s"), settings="oversellrate: 1, until: 60s")
    cpu = data["quotas"]["root/Department-a"]["resources"]["cpu"]
    assert cpu["used_mean"] == pytest.approx(35.0)
    assert cpu["min_utilisation"] == pytest.approx(35 / 60)
    assert cpu["max_utilisation"] == pytest.approx(0.35)
    assert cpu["borrowed_mean"] == pytest.approx(5.0)  # 10 over min for half the time
    assert cpu["borrowed_peak"] == 10.0
    assert cpu["running_mean"] == pytest.approx(35.0)
    assert data["quotas"]["root/Department-b"]["resources"]["cpu"]["used_mean"] == 0.0


def test_until_stops_the_clock_and_later_submissions_never_happen() -> None:
    data = run(job("a1", 10, "0s"), job("a2", 10, "2m"), settings="oversellrate: 1, until: 1m")
    assert [job["name"] for job in data["jobs"]] == ["a1"]
    assert data["end"] == 60.0


def test_priority_orders_the_queue_and_block_holds_the_rest() -> None:
    data = run(job("a1", 60, "0s"), job("big", 60, "1s", priority=5), job("small", 10, "2s"),
               settings="oversellrate: 1, queuePolicy: Block")
    final = jobs(data)
    assert (final["big"]["position"], final["small"]["position"]) == (1, 2)
    assert final["small"]["state"] == "Queued", "under Block the small job waits behind big though it fits"
    data = run(job("a1", 60, "0s"), job("big", 60, "1s", priority=5), job("small", 10, "2s"))
    assert jobs(data)["small"]["state"] == "Running", "under Round it is admitted"


def test_the_run_is_deterministic() -> None:
    docs = (job("a1", 60, "0s", "30s"), job("a2", 40, "1s", "10s"), job("c1", 10, "2s", "5s", "user-c"))
    text = "\n---\n".join(["apiVersion: sim.kube-queue.io/v1alpha1\nkind: Scenario\nspec: {oversellrate: 1}", TREE,
                           *docs])
    first = to_json(run_scenario(scenario_from_text(text)), timeline=True)
    assert to_json(run_scenario(scenario_from_text(text)), timeline=True) == first
    assert json.loads(first)["passes"] >= 4


def test_every_pass_is_the_cores_decide(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = core_decide

    def spy(tree: QuotaTree, jobs: Sequence[Any], policies: Mapping[str, Any], **kwargs: Any) -> Any:
        calls.append(len(jobs))
        return real(tree, jobs, policies, **kwargs)

    monkeypatch.setattr(sim_engine, "decide", spy)
    text = "\n---\n".join([TREE, job("a1", 60, "0s", "5s"), job("a2", 60, "1s", "5s")])
    result = simulate(scenario_from_text(text), CorePath())
    assert calls == [1, 2, 1, 0]  # unfinished jobs at 0s, 1s, 5s (a1 done), 10s (a2 done)
    assert result.passes == 4
    assert [job.state for job in result.jobs] == [State.FINISHED, State.FINISHED]


class _AdmitNothing(CorePath):
    """A stand-in decision path: the engine carries out whatever the path decides, nothing more."""

    def decide(self, tree: QuotaTree, jobs: Sequence[SimJob], queues: Mapping[str, Mapping[str, Any]], *,
               oversell_rate: Fraction, strict_priority: bool) -> Decisions[PlainJob]:
        positions = {job.key: index for index, job in enumerate(jobs, start=1)}
        return Decisions((), (), (), positions, {}, (), (), build_ledger(tree, ()), {})


def test_the_engine_only_carries_out_the_paths_decisions() -> None:
    text = "\n---\n".join([TREE, job("a1", 1, "0s", "5s"), job("a2", 1, "1s", "5s")])
    result = simulate(scenario_from_text(text), _AdmitNothing())
    assert [(job.state, result.positions[job.key]) for job in result.jobs] == [(State.QUEUED, 1), (State.QUEUED, 2)]


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [([], 0.5, None), ([3.0], 0.95, 3.0), ([float(i) for i in range(1, 21)], 0.95, 19.0),
     ([float(i) for i in range(1, 21)], 0.5, 10.0), ([5.0, 1.0, 3.0], 0.5, 3.0)],
)
def test_nearest_rank_percentiles(values: list[float], fraction: float, expected: float | None) -> None:
    assert percentile(values, fraction) == expected


def test_wait_stats_of_nothing_are_empty() -> None:
    assert wait_stats([]) == {"count": 0, "mean": None, "p50": None, "p95": None, "max": None}
