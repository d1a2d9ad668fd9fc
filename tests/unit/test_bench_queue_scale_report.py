"""The queue-scale bench's section (issue 38): its figures come from what the run measured, a step not reached
prints no number, and a run that did not finish says so."""

from __future__ import annotations

from bench.burst_stats import latency, parse_samples
from bench.queue_scale import tree
from bench.queue_scale_report import Figures, report

SERVICE = """\
# TYPE kube_queue_webhook_request_duration_seconds histogram
kube_queue_webhook_request_duration_seconds_bucket{endpoint="mutate",le="0.001"} 90
kube_queue_webhook_request_duration_seconds_bucket{endpoint="mutate",le="0.005"} 100
kube_queue_webhook_request_duration_seconds_bucket{endpoint="mutate",le="+Inf"} 100
kube_queue_webhook_request_duration_seconds_count{endpoint="mutate"} 100
"""


def test_memory_per_queued_job_is_what_the_full_queue_added_over_the_queued_jobs() -> None:
    figures = Figures(jobs=1000, created=1000, queued=1024, baseline_rss_mib=100.0, full_rss_mib=106.0,
                      fill_s=10.0, fill_latency=latency([0.1, 0.2]))
    text = report(figures, "cmd", "")
    assert "| `kq serve` KiB per queued Job (full less before, over the queued Jobs) | 6.0 | < 6 |" in text
    assert "| fill: creates per second (64 in flight) | 100.0 |  |" in text
    assert "**The run did not finish**" not in text


def test_a_step_not_reached_prints_a_dash_and_a_failed_run_says_why() -> None:
    text = report(Figures(jobs=50_000), "cmd", "TimeoutError: timed out")
    assert "| leader change: first admission, s after the Lease was taken | - | < 5 |" in text
    assert "| `kq serve` KiB per queued Job (full less before, over the queued Jobs) | - | < 6 |" in text
    assert "**The run did not finish**: TimeoutError: timed out" in text


def test_the_estimates_refresh_cpu_is_a_mean_over_the_refreshes_seen() -> None:
    text = report(Figures(jobs=10, refreshes=4, refreshes_cpu_s=10.0), "cmd", "")
    assert "| the start estimates' refreshes with the queue full: count / CPU s each (mean) | 4 / 2.50 |  |" in text
    assert "count / CPU s each (mean) | 0 / - |" in report(Figures(jobs=10), "cmd", "")


def test_the_handler_p99_comes_from_the_services_histogram() -> None:
    figures = Figures(jobs=10, more_service=parse_samples(SERVICE, ("kube_queue_webhook_",)))
    text = report(figures, "cmd", "")
    assert "| our handler p50 / p99, ms (every call) | 0.6 / 4.6 | p99 < 10 |" in text


def test_the_tree_gives_every_team_one_namespace_and_sums_to_the_root() -> None:
    root = tree()["spec"]["root"]
    teams = [team for department in root["children"] for team in department["children"]]
    assert len({team["namespaces"][0] for team in teams}) == 100
    assert sum(int(department["min"]["cpu"]) for department in root["children"]) == int(root["min"]["cpu"])
