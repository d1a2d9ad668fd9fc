"""The peer's shape (Kueue's scheduler performance baseline) as a scenario: the shipped file is the generator's
output, and a scaled-down replay runs every job to completion."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml

from webhook.api.names import PERF_CLASS_LABEL
from webhook.api.objects import labels_of
from webhook.cli.simulate import run_scenario
from webhook.sim.engine import State
from webhook.sim.peer import CLASSES, peer_shape
from webhook.sim.scenario import load_scenario, scenario_from_objects

SHIPPED = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "peer-shape.yaml"


def test_the_shipped_peer_scenario_is_the_generators_output() -> None:
    assert list(yaml.safe_load_all(SHIPPED.read_text())) == peer_shape()


def test_the_peer_shape_has_15000_jobs_in_30_queues_of_5_departments() -> None:
    scenario = load_scenario(SHIPPED)
    assert len(scenario.submissions) == 15_000
    departments = scenario.tree.root.children
    assert len(departments) == 5
    assert all(len(department.children) == 6 for department in departments)
    assert Counter(labels_of(s.obj)[PERF_CLASS_LABEL] for s in scenario.submissions) == {
        "small": 10_500, "medium": 3_000, "large": 1_500}
    first = [s for s in scenario.submissions if s.namespace == "cq-0-0"][:3]
    assert [(s.name, s.at, s.run_for) for s in first] == [
        ("small-00001", 100_000, 200_000), ("small-00002", 200_000, 200_000), ("small-00003", 300_000, 200_000)]
    assert scenario.oversell_rate == 1


def test_a_scaled_down_peer_replay_admits_and_finishes_every_job() -> None:
    scenario = scenario_from_objects(peer_shape(cohorts=2, queues_per_cohort=2, scale=0.02))
    result = run_scenario(scenario, record_timeline=False)
    assert len(result.jobs) == 2 * 2 * sum(max(1, round(c.count * 0.02)) for c in CLASSES)
    assert all(job.state is State.FINISHED for job in result.jobs)
    assert all(job.wait is not None for job in result.jobs)
    assert result.timeline == []
