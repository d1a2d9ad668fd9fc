"""The seed's three scenarios, shipped in examples/scenarios/, give the seed's outcomes through
``kq simulate -o json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from webhook.cli.main import main
from webhook.sim.report import outcome
from webhook.sim.report_shape import Report

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def simulate_json(capsys: pytest.CaptureFixture[str], scenario: str, *flags: str) -> dict[str, Any]:
    assert main(["simulate", str(SCENARIOS / scenario), "-o", "json", *flags]) == 0
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def jobs_by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{job['namespace']}/{job['name']}": job for job in data["jobs"]}


def test_scenario_1_the_first_job_runs_and_the_second_waits_at_position_1(capsys: pytest.CaptureFixture[str]) -> None:
    data = simulate_json(capsys, "seed-1-round.yaml")
    jobs = jobs_by_name(data)
    first, second = jobs["user-a/pi-00001"], jobs["user-a/pi-00002"]
    assert first["state"] == "Running"
    assert first["request"] == {"cpu": "60", "memory": "60Gi"}
    assert second["state"] == "Queued"
    assert second["position"] == 1
    assert "quota root/Department-a: cpu request 60 + used 60 > limit 100" in second["reason"]
    department = data["quotas"]["root/Department-a"]
    assert department["policy"] == "Round"
    assert (department["admissions"], department["waiting"], department["evictions"]) == (1, 1, 0)
    assert department["resources"]["cpu"]["used_peak"] == 60.0


def test_scenario_2_strict_priority_puts_the_priority_2_job_at_position_1(capsys: pytest.CaptureFixture[str]) -> None:
    data = simulate_json(capsys, "seed-2-strict-priority.yaml")
    jobs = jobs_by_name(data)
    assert jobs["user-a/pi-00001"]["state"] == "Running"
    urgent, second = jobs["user-a/pi-00003"], jobs["user-a/pi-00002"]
    assert (urgent["priority"], urgent["state"], urgent["position"]) == (2, "Queued", 1)
    assert (second["priority"], second["state"], second["position"]) == (0, "Queued", 2)
    assert "blocked behind Job/user-a/pi-00003 (queue policy Block)" in second["reason"]
    assert data["quotas"]["root/Department-a"]["policy"] == "Block"
    assert data["quotas"]["root/Department-b"]["policy"] == "Block"


def test_scenario_3_a_department_a_job_is_evicted_and_user_c_runs(capsys: pytest.CaptureFixture[str]) -> None:
    data = simulate_json(capsys, "seed-3-reclaim.yaml", "--timeline")
    jobs = jobs_by_name(data)
    assert jobs["user-a/pi-00001"]["state"] == "Running", "Department-a keeps its guaranteed 60 CPU"
    borrower, reclaimer = jobs["user-b/pi-00001"], jobs["user-c/pi-00001"]
    assert (borrower["state"], borrower["position"], borrower["evictions"]) == ("Queued", 1, 1)
    assert (reclaimer["state"], reclaimer["priority"], reclaimer["admitted"]) == ("Running", 3, 2.0)
    evictions = [entry for entry in data["timeline"] if entry["decision"] == "evict"]
    assert [(entry["time"], entry["job"]) for entry in evictions] == [(2.0, "Job/user-b/pi-00001")]
    assert evictions[0]["reason"].startswith("root/Department-b reclaims cpu=40, memory=40Gi from root/Department-a")
    assert data["quotas"]["root/Department-a"]["evictions"] == 1
    assert data["quotas"]["root/Department-a"]["resources"]["cpu"]["borrowed_peak"] == 40.0


def test_the_outcome_shape_the_cluster_comparison_reads(capsys: pytest.CaptureFixture[str]) -> None:
    assert outcome(cast(Report, simulate_json(capsys, "seed-3-reclaim.yaml"))) == {
        "user-a/pi-00001": {"state": "admitted", "position": None, "evicted": False},
        "user-b/pi-00001": {"state": "queued", "position": 1, "evicted": True},
        "user-c/pi-00001": {"state": "admitted", "position": None, "evicted": False},
    }


def test_the_text_report_and_timeline_name_time_job_quota_decision_and_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["simulate", str(SCENARIOS / "seed-3-reclaim.yaml"), "--timeline"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("scenario seed-3-reclaim: 3 jobs, oversellrate 1, StrictPriority false, nodes 4;")
    assert "waiting at the end (1):" in out
    lines = out.split("timeline:\n", 1)[1].splitlines()
    assert lines[0].split() == ["0.000s", "Job/user-a/pi-00001", "root/Department-a", "admit", "fits", "its", "quota",
                                "at", "every", "level"]
    assert any(line.split()[:4] == ["2.000s", "Job/user-b/pi-00001", "root/Department-a", "evict"] for line in lines)
    assert any(line.split()[:4] == ["2.000s", "Job/user-b/pi-00001", "root/Department-a", "queue"]
               and "position 1:" in line for line in lines)


def test_command_line_settings_override_the_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    # With StrictPriority off, scenario 2's queue is Round: the priority-2 job still goes first.
    data = simulate_json(capsys, "seed-2-strict-priority.yaml", "--no-strict-priority", "--until", "5s")
    assert data["quotas"]["root/Department-a"]["policy"] == "Round"
    assert data["end"] == 5.0
    assert jobs_by_name(data)["user-a/pi-00003"]["position"] == 1
    # With oversellrate 2, both 60-CPU jobs are admitted; the second waits as pending pods (pod-level quota).
    data = simulate_json(capsys, "seed-1-round.yaml", "--oversellrate", "2")
    second = jobs_by_name(data)["user-a/pi-00002"]
    assert second["state"] == "Pending"
    assert second["reason"].startswith("pod-level quota root/Department-a: cpu running 60 + request 60 > max 100")


def test_a_bad_scenario_is_refused_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    assert main(["simulate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "kind 'ConfigMap' (core) is neither a supported job kind nor a scenario object" in err
