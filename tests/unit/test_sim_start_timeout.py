"""The simulator models the start timeout (docs/start-timeout.md): a job marked as never starting is held
again after the timeout, the job behind it gets the quota, and it retries with exponential backoff."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.cli.simulate import run_scenario
from webhook.sim.engine import State
from webhook.sim.model import ScenarioError
from webhook.sim.scenario import load_scenario, scenario_from_text

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "start-timeout.yaml"


def test_the_example_hands_the_quota_to_the_job_behind_after_the_timeout() -> None:
    result = run_scenario(load_scenario(EXAMPLE))
    decisions = [(entry.time // 1_000_000, entry.job.rsplit("/", 1)[1], entry.decision) for entry in result.timeline
                 if entry.decision in ("admit", "backoff", "retry", "finish")]
    assert decisions == [
        (0, "pi-00001", "admit"),
        (300, "pi-00001", "backoff"),
        (300, "pi-00002", "admit"),
        (360, "pi-00001", "retry"),
        (780, "pi-00002", "finish"),
        (780, "pi-00001", "admit"),
        (1080, "pi-00001", "backoff"),
        (1200, "pi-00001", "retry"),
        (1200, "pi-00001", "admit"),
    ]
    stuck = next(job for job in result.jobs if job.key.name == "pi-00001")
    assert stuck.failed_starts == 2


SCENARIO = """
apiVersion: sim.kube-queue.x-k8s.io/v1alpha1
kind: Scenario
spec:
  oversellrate: 1
  startTimeout: 10s
  backoffBase: 5s
  backoffLimit: 2
  until: 5m
---
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: t, namespace: kube-system}
spec:
  root: {name: root, min: {cpu: 10}, max: {cpu: 10}, children: [{name: a, min: {cpu: 10}, max: {cpu: 10},
         namespaces: [ns]}]}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: never
  namespace: ns
  annotations: {sim.kube-queue.x-k8s.io/never-starts: "true"}
spec:
  template: {spec: {containers: [{name: c, resources: {requests: {cpu: "10"}}}]}}
"""


def test_a_job_gives_up_after_the_backoff_limit() -> None:
    result = run_scenario(scenario_from_text(SCENARIO))
    (job,) = result.jobs
    assert job.state is State.BACKOFF
    assert job.failed_starts == 2
    assert [entry.time // 1_000_000 for entry in result.timeline if entry.decision == "backoff"] == [10, 25]
    assert "gave up after 2" in result.timeline[-1].reason


def test_a_bad_never_starts_value_is_refused_with_where() -> None:
    with pytest.raises(ScenarioError, match="never-starts: expected true or false"):
        scenario_from_text(SCENARIO.replace('"true"', '"maybe"'))
