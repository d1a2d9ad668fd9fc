"""The queue-scale bench's section (issue 38): its figures come from what the run measured, a step not reached
prints no number, and a run that did not finish says so."""

from __future__ import annotations

from bench.burst_stats import latency, parse_samples
from bench.queue_scale_report import Figures, report
from bench.queue_scale_run import tree

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
    assert ("| controller KiB per queued Job (full less before, over the queued Jobs) | 6.0 |  |  "
            "| < 6, and below Kueue's |") in text
    assert "| fill: creates per second (64 in flight) | 100.0 |  |  |  |" in text
    assert "did not finish**" not in text


def test_a_step_not_reached_prints_a_dash_and_a_failed_run_says_why() -> None:
    text = report(Figures(jobs=50_000), "cmd", "TimeoutError: timed out")
    assert "| leader change: first admission, s after the Lease was taken | - |  |  | < 5 |" in text
    assert "| controller KiB per queued Job (full less before, over the queued Jobs) | - |  |  |" in text
    assert "**Our run did not finish**: TimeoutError: timed out" in text


def test_the_estimates_refresh_cpu_is_a_mean_over_the_refreshes_seen() -> None:
    text = report(Figures(jobs=10, refreshes=4, refreshes_cpu_s=10.0), "cmd", "")
    assert "| the start estimates' refreshes with the queue full: count / CPU s each (mean) | 4 / 2.50 |" in text
    assert "count / CPU s each (mean)" not in report(Figures(jobs=10), "cmd", "")


def test_the_handler_p99_comes_from_the_services_histogram() -> None:
    figures = Figures(jobs=10, more_service=parse_samples(SERVICE, ("kube_queue_webhook_",)))
    text = report(figures, "cmd", "")
    assert "| our handler p50 / p99, ms (every call) | 0.6 / 4.6 |  |  | p99 < 10 |" in text


def test_the_tree_gives_every_team_one_namespace_and_sums_to_the_root() -> None:
    root = tree()["spec"]["root"]
    teams = [team for department in root["children"] for team in department["children"]]
    assert len({team["namespaces"][0] for team in teams}) == 100
    assert sum(int(department["min"]["cpu"]) for department in root["children"]) == int(root["min"]["cpu"])


KUEUE_WAIT = """\
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mjob.kb.io",le="0.005"} 50
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mjob.kb.io",le="0.025"} 100
apiserver_admission_webhook_admission_duration_seconds_bucket{name="mjob.kb.io",le="+Inf"} 100
apiserver_admission_webhook_admission_duration_seconds_count{name="mjob.kb.io"} 100
"""


def test_kueue_stands_beside_ours_row_by_row_with_the_ratio_where_both_are_one_number() -> None:
    ours = Figures(jobs=1000, queued=1000, baseline_rss_mib=100.0, full_rss_mib=105.0,
                   reads={"list-all": [3.0, 2.0, 9.0]})
    kueue = Figures(jobs=1000, queued=1000, baseline_rss_mib=50.0, full_rss_mib=70.0,
                    reads={"list-all": [1.0, 1.0, 1.0]}, passes=[(0.0, 0.0, 0.02)] * 5,
                    more_api=parse_samples(KUEUE_WAIT, ("apiserver_admission_webhook_",)))
    text = report(ours, "cmd", "", kueue, "")
    assert ("| controller KiB per queued Job (full less before, over the queued Jobs) | 5.1 | 20.5 | 0.25 "
            "| < 6, and below Kueue's |") in text
    assert "| `kq list -A` / `kubectl get workloads -A`: s, median of 3 | 3.00 | 1.00 | 3.00 | < 2 |" in text
    # a row only Kueue has: its webhook, with a dash for ours; its CPU after a create, though it has no pass
    assert "| `mjob.kb.io`: the API server's wait p50 / p99, ms | - | 5.0 / 24.6 |  |  |" in text
    assert ("| controller CPU ms in the 4 s after one create, median of 5 (ours less the estimates and warm-ups) "
            "| - | 20 |") in text
    assert "one pass over the full queue" not in text
    lines = text.splitlines()
    assert lines.index(next(line for line in lines if "`mjob.kb.io`" in line)) > lines.index(
        next(line for line in lines if line.startswith("| controller CPU ms in the 4 s")))


def test_a_kueue_run_that_failed_says_so_apart_from_ours() -> None:
    text = report(Figures(jobs=10), "cmd", "", Figures(jobs=10), "RuntimeError: kueue exited at start")
    assert "**Kueue's run did not finish**: RuntimeError: kueue exited at start" in text
    assert "**Our run did not finish**" not in text
