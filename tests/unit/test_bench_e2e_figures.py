"""The end-to-end bench's arithmetic (issue 23): the writes per job and rates BENCHMARKS.md quotes come from it."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import pytest

from bench.e2e_bench import controller_log
from bench.e2e_metrics import Delta, Scrape, cpu_seconds, delta, parse_requests, resident_mib, writes_table
from bench.e2e_rounds import leaf_index
from bench.e2e_rounds import namespace as round_namespace
from bench.e2e_rounds import namespaces as round_namespaces
from bench.e2e_rounds import order as round_order
from bench.e2e_rounds import report_lines as round_lines
from bench.e2e_shapes import percentile, rates
from webhook.devcluster.config import ClusterConfig

APISERVER = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",group="batch",resource="jobs",subresource="",verb="PATCH",version="v1"} 7
apiserver_request_total{code="409",group="batch",resource="jobs",subresource="",verb="PATCH",version="v1"} 3
apiserver_request_total{code="200",group="batch",resource="jobs",subresource="status",verb="PUT",version="v1"} 4
apiserver_request_total{code="200",group="",resource="pods",subresource="",verb="LIST",version="v1"} 9
"""


def test_requests_are_summed_over_codes_by_verb_resource_and_subresource() -> None:
    parsed = parse_requests(APISERVER)
    assert parsed == {("PATCH", "jobs", ""): 10.0, ("PUT", "jobs", "status"): 4.0, ("LIST", "pods", ""): 9.0}


def test_writes_per_job_are_the_difference_of_two_scrapes_over_the_jobs() -> None:
    before = Scrape({("PATCH", "jobs", ""): 10.0, ("LIST", "pods", ""): 1.0}, {"kube_queue_admissions_total": 2.0})
    after = Scrape({("PATCH", "jobs", ""): 30.0, ("POST", "events", ""): 40.0, ("LIST", "pods", ""): 5.0},
                   {"kube_queue_admissions_total": 22.0})
    change = delta(before, after)
    assert change.writes() == {("PATCH", "jobs", ""): 20.0, ("POST", "events", ""): 40.0}
    assert change.reads() == 4.0
    assert change.get("kube_queue_admissions_total") == 20.0
    table = writes_table({"ours": (change, 20), "none": (Delta({}), 20)})
    assert "| `POST events` | 2.00 | 0.00 |" in table
    assert "| `PATCH jobs` | 1.00 | 0.00 |" in table
    assert "| all writes | 3.00 | 0.00 |" in table


def test_rates_count_intervals_between_releases() -> None:
    figures = rates([1.0, 1.5, 2.0, 3.0], started=0.5)
    assert figures["sustained_per_second"] == pytest.approx(1.5)  # 3 intervals in 2 s
    assert figures["end_to_end_per_second"] == pytest.approx(4 / 2.5)
    assert figures["first_after_start"] == pytest.approx(0.5)
    assert percentile([5.0, 1.0, 3.0], 0.5) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 100.0], 0.99) == 100.0


def test_the_controller_log_is_read_by_decision_within_the_window(tmp_path: Path) -> None:
    def stamp(second: int) -> str:
        return datetime.datetime.fromtimestamp(1_000_000 + second).strftime("%Y-%m-%d %H:%M:%S,000")

    log = tmp_path / "kq-serve.log"
    log.write_text("\n".join([
        f"{stamp(0)} INFO webhook.controller component=controller decision=admit job=Job/ns-a/j1 quota=root.a",
        f"{stamp(5)} INFO webhook.controller component=controller decision=admit job=Job/ns-a/j2 quota=root.a",
        f"{stamp(6)} INFO webhook.controller component=controller event=stale action=admit job=Job/ns-a/j3",
        f"{stamp(7)} INFO webhook.admission something else",
        f"{stamp(99)} INFO webhook.controller component=controller decision=admit job=Job/ns-a/j4 quota=root.a",
    ]) + "\n")
    found = controller_log(log, 1_000_000 + 1, 1_000_000 + 10)
    assert found == {"decision=admit ns-a": [1_000_005.0], "event=stale": [1_000_006.0]}


WEBHOOKS = """\
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="pods.mutate",type="admit",le="+Inf"} 4
apiserver_admission_webhook_admission_duration_seconds_sum{name="pods.mutate",type="admit"} 0.2
apiserver_admission_webhook_admission_duration_seconds_count{name="pods.mutate",type="admit"} 4
"""


def test_the_webhook_waits_are_read_apart_from_the_requests() -> None:
    before = Scrape(parse_requests(APISERVER), {})
    after = Scrape(parse_requests(APISERVER + WEBHOOKS), {})
    change = delta(before, after)
    assert change.webhooks() == {"pods.mutate": (4.0, 0.2)}
    assert change.writes() == {}
    assert change.reads() == 0.0


def test_rounds_rotate_their_order_and_the_report_splits_the_ratio_into_admission_path_and_controller() -> None:
    assert [round_order(index) for index in (1, 2, 3, 4)] == [
        ("held", "replay", "raw"), ("replay", "raw", "held"), ("raw", "held", "replay"), ("held", "replay", "raw")]

    def one(index: int, held: float, replay: float, raw: float) -> dict[str, object]:
        return {"order": round_order(index), "held": {"sustained_per_second": held},
                "replay": {"sustained_per_second": replay}, "raw": {"sustained_per_second": raw}}

    rounds = [one(1, 90.0, 100.0, 100.0), one(2, 120.0, 150.0, 100.0), one(3, 80.0, 100.0, 200.0)]
    lines = round_lines(rounds)
    assert "| 1 | held, replay, raw | 90.0 /s | 100.0 /s | 100.0 /s | 90 % | 100 % | 90 % |" in lines
    assert "| 2 | replay, raw, held | 120.0 /s | 150.0 /s | 100.0 /s | 120 % | 150 % | 80 % |" in lines
    assert "| 3 | raw, held, replay | 80.0 /s | 100.0 /s | 200.0 /s | 40 % | 50 % | 80 % |" in lines
    assert "| **median** | | | | | **90 %** | 100 % | 80 % |" in lines
    assert any("Median of held / raw: **90 %**" in line and "the controller 80 %" in line for line in lines)
    assert not any(line.startswith("CPU ms per release") for line in lines)  # no CPU figures given
    for one_round in rounds:
        for shape in ("held", "replay", "raw"):
            one_round[shape]["cpu_ms"] = {"kq-serve": 2.0, "kube-apiserver": 4.0}  # type: ignore[index]
    lines = round_lines(rounds)
    assert "| 1 | held | 2.0 | 4.0 | nan | - |" in lines
    assert "| 3 | raw | 2.0 | 4.0 | nan | - |" in lines
    assert not any("What each guarantee" in line for line in lines)  # no split shapes ran
    assert round_lines([]) == []
    assert round_namespaces(2) == ("bench-round-2", "bench-replay-2", "bench-round-raw-2")


def test_split_rounds_rotate_five_shapes_and_show_each_webhook_beside_the_full_replay() -> None:
    assert round_order(1, split=True) == ("held", "replay", "raw", "no_check", "no_pod_hook")
    assert round_order(2, split=True) == ("replay", "raw", "no_check", "no_pod_hook", "held")
    # Round i's held leaf follows the two base leaves and the four leaves (held + three replays) of each round before.
    assert [leaf_index(index, split=True) for index in (1, 2, 3)] == [2, 6, 10]
    assert [leaf_index(index) for index in (1, 2, 3)] == [2, 4, 6]
    assert {round_namespace(shape, 3) for shape in ("held", "replay", "raw", "no_check", "no_pod_hook")} == {
        "bench-round-3", "bench-replay-3", "bench-round-raw-3", "bench-no-check-3", "bench-no-pod-hook-3"}

    def one(index: int, replay: float, no_check: float, no_pod_hook: float, cpu: float) -> dict[str, object]:
        figures = {"held": 100.0, "replay": replay, "raw": 200.0, "no_check": no_check, "no_pod_hook": no_pod_hook}
        return {"order": round_order(index, split=True),
                **{shape: {"sustained_per_second": value,
                           "cpu_ms": {"kq-serve": 1.0, "kube-apiserver": 2.0, "all": cpu + (shape == "replay")}}
                   for shape, value in figures.items()}}

    rounds = [one(1, 100.0, 110.0, 120.0, 30.0), one(2, 100.0, 130.0, 100.0, 32.0), one(3, 200.0, 200.0, 300.0, 34.0)]
    lines = round_lines(rounds)
    order = "replay, raw, no update check, no pod webhook, held"
    assert f"| 2 | {order} | 100.0 /s | 100.0 /s | 200.0 /s | 50 % | 50 % | 100 % |" in lines
    assert "| 1 | 100.0 /s | 110.0 /s | 120.0 /s | 200.0 /s | 110 % | 120 % |" in lines
    assert "| **median** | | | | | 110 % | 120 % |" in lines
    assert any("replay 33.0 ms, no update check 32.0 ms, no pod webhook 32.0 ms, raw release 32.0 ms" in line
               for line in lines)
    assert "| 2 | no pod webhook | 1.0 | 2.0 | 32.0 | - |" in lines
    rounds[1]["held"]["rss_mib"] = {"kq-serve": 312.4}  # type: ignore[index]
    assert "| 2 | held | 1.0 | 2.0 | 32.0 | 312 |" in round_lines(rounds)
    assert sum(line.startswith("| 3 | ") for line in lines) == 2 + 5  # both tables of rates, and five shapes' CPU


def test_cpu_and_memory_are_read_for_each_component_with_a_live_pid(tmp_path: Path) -> None:
    config = ClusterConfig(state_dir=tmp_path)
    config.run.mkdir(parents=True)
    (config.run / "kq-serve.pid").write_text(f"{os.getpid()}\n")
    (config.run / "etcd.pid").write_text("not a pid\n")  # unreadable: left out, no crash
    (config.run / "kwok.pid").write_text("999999999\n")  # gone: left out
    assert set(resident_mib(config)) == {"kq-serve"} and resident_mib(config)["kq-serve"] > 1
    assert set(cpu_seconds(config)) == {"kq-serve"} and cpu_seconds(config)["kq-serve"] > 0
