"""``kq simulate --fair-sharing on|off`` (docs/fair-sharing.md): the scenario examples/scenarios/fair-sharing.yaml
shows Department-b settling at its fair part of the spare while Department-a's queue is deep, and staying at its
min without fair sharing."""

from __future__ import annotations

from pathlib import Path

from webhook.cli.simulate import run_scenario
from webhook.core.fairshare import fair_parents
from webhook.sim.report import to_text, use_over_time
from webhook.sim.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "fair-sharing.yaml"


def _used_at(lines: list[str], time: str) -> list[str]:
    (row,) = [line for line in lines if line.split()[:1] == [time]]
    return row.split()


def test_with_fair_sharing_department_b_settles_at_its_fair_part_while_a_waits() -> None:
    scenario = load_scenario(SCENARIO)
    assert fair_parents(scenario.tree)
    result = run_scenario(scenario)
    lines = use_over_time(result)
    assert "(fair sharing under the root)" in lines[1]
    assert _used_at(lines, "45s")[1:] == ["60", "(share", "1.00)", "40", "(share", "1.00)"]
    assert "cpu used over time" in to_text(result)


def test_without_it_the_oldest_jobs_take_the_spare_and_department_b_stays_at_its_min() -> None:
    scenario = load_scenario(SCENARIO).with_settings(fair_sharing=False)
    assert not fair_parents(scenario.tree)
    lines = use_over_time(run_scenario(scenario))
    assert _used_at(lines, "45s")[1:] == ["80", "20"]
    on_again = load_scenario(SCENARIO).with_settings(fair_sharing=False).with_settings(fair_sharing=True)
    assert fair_parents(on_again.tree)
