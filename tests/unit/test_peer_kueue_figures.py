"""The peer benchmark's arithmetic: writes from two API server readings, a process's CPU and peak RSS from
/proc, admissions and evictions from Job events, and the ratio table (bench/peer_kueue_report.py,
bench/peer_kueue_workloads.py)."""

from __future__ import annotations

from typing import Any, cast

from bench.e2e_metrics import parse_requests
from bench.peer_kueue_report import SystemRun, cpu_seconds, peak_rss_mib, settled, table, write_counts
from bench.peer_kueue_workloads import JobWatch, mixed
from webhook.kube.client import KubeClient

BEFORE = """\
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",group="batch",resource="jobs",subresource="",verb="POST",version="v1"} 10
apiserver_request_total{code="200",group="batch",resource="jobs",subresource="",verb="PATCH",version="v1"} 5
apiserver_request_total{code="201",group="",resource="events",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",group="",resource="pods",subresource="",verb="LIST",version="v1"} 100
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_sum{name="mjob.kb.io"} 1
apiserver_admission_webhook_admission_duration_seconds_count{name="mjob.kb.io"} 10
"""
AFTER = """\
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",group="batch",resource="jobs",subresource="",verb="POST",version="v1"} 30
apiserver_request_total{code="200",group="batch",resource="jobs",subresource="",verb="PATCH",version="v1"} 25
apiserver_request_total{code="409",group="batch",resource="jobs",subresource="",verb="PATCH",version="v1"} 3
apiserver_request_total{code="200",group="kueue.x-k8s.io",resource="workloads",subresource="status",verb="APPLY"} 20
apiserver_request_total{code="201",group="",resource="events",subresource="",verb="POST",version="v1"} 12
apiserver_request_total{code="201",group="events.k8s.io",resource="events",subresource="",verb="PATCH",version="v1"} 4
apiserver_request_total{code="200",group="",resource="pods",subresource="",verb="LIST",version="v1"} 900
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_sum{name="mjob.kb.io"} 9
apiserver_admission_webhook_admission_duration_seconds_count{name="mjob.kb.io"} 30
"""


def test_writes_are_the_growth_of_mutating_requests_events_counted_apart() -> None:
    total, events = write_counts(parse_requests(BEFORE), parse_requests(AFTER))
    # jobs POST +20, jobs PATCH +20 (+3 refused still reached the server), workloads/status APPLY +20,
    # events POST +10, events PATCH +4; the LIST and the webhook's timings are not writes
    assert (total, events) == (77.0, 14.0)


def test_a_series_that_vanished_or_shrank_counts_no_writes() -> None:
    assert write_counts({("PATCH", "jobs", ""): 9.0}, {}) == (0.0, 0.0)
    assert write_counts({("POST", "jobs", ""): 9.0}, {("POST", "jobs", ""): 4.0}) == (0.0, 0.0)


def test_a_workload_has_settled_when_the_cluster_writes_at_its_idle_rate() -> None:
    # The tail of 500 released Jobs: the job controller still creating pods, Admitted Events still queued.
    assert not settled(writes=180, seconds=2.0)
    assert settled(writes=3, seconds=2.0)  # leases and the odd Event: an idle cluster
    assert not settled(writes=0, seconds=0.0)


def test_cpu_is_user_plus_system_ticks_even_when_the_command_holds_parentheses() -> None:
    fields = ["S", *["0"] * 10, "250", "150", *["0"] * 30]
    stat = "4242 (kueue (a) b) " + " ".join(fields)
    assert cpu_seconds(stat, 100) == 4.0


def test_peak_rss_is_vmhwm_in_mib() -> None:
    assert peak_rss_mib("Name:\tkueue\nVmRSS:\t  1024 kB\nVmHWM:\t  204800 kB\n") == 200.0


def _job(namespace: str, name: str, cpu: str, suspend: bool) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {"suspend": suspend, "template": {
        "spec": {"containers": [{"resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}}}


def test_an_admitted_job_suspended_again_is_one_eviction_and_leaves_the_admitted_cpu() -> None:
    watch = JobWatch(cast(KubeClient, None))
    watch.seen(_job("user-a", "j1", "4", suspend=True))  # held: not admitted
    watch.seen(_job("user-a", "j1", "4", suspend=False))
    watch.seen(_job("user-a", "j1", "4", suspend=False))  # a status update: still the same admission
    watch.seen(_job("user-b", "j2", "2", suspend=False))
    watch.seen(_job("user-c", "j3", "500m", suspend=False))
    assert watch.cpu(("user-a", "user-b")) == 6.0
    watch.seen(_job("user-a", "j1", "4", suspend=True))  # evicted
    watch.seen(_job("user-a", "j1", "4", suspend=True))  # and seen again: still one eviction
    assert watch.evictions == {"user-a": 1}
    assert watch.cpu(("user-a", "user-b")) == 2.0
    assert watch.cpu(("user-c",)) == 0.5
    watch.seen(_job("user-a", "j1", "4", suspend=False))  # admitted again
    assert watch.cpu(("user-a",)) == 4.0
    assert set(watch.first) == {"user-a/j1", "user-b/j2", "user-c/j3"}


def test_the_mixed_jobs_take_turns_over_namespaces_and_sizes() -> None:
    jobs = mixed(6, ("user-a", "user-b"), kueue=False, prefix="borrow")
    assert [(ns, job["metadata"]["name"]) for ns, job in jobs][:2] == [("user-a", "borrow-0000"),
                                                                       ("user-b", "borrow-0001")]
    sizes = [job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] for _, job in jobs]
    assert sizes == ["1", "2", "4", "1", "2", "4"]


def test_the_table_divides_ours_by_each_peer_and_says_what_was_not_measured() -> None:
    ours = SystemRun("ours", {"held": {"sustained_per_second": 150.0, "admissions": 500, "writes_per_job": 2.0,
                                       "events_per_job": 0.5}}, cpu_s=5.0, rss_mib=100.0)
    peer = SystemRun("Kueue as shipped", {"held": {"sustained_per_second": 15.0, "admissions": 500,
                                                   "writes_per_job": 4.0, "events_per_job": 1.0}},
                     cpu_s=10.0, rss_mib=50.0)
    broken = SystemRun("Kueue unlimited", problem="kueue exited at start")
    lines = table([ours, peer, broken])
    assert lines[0] == ("| figure | better | ours | Kueue as shipped | Kueue unlimited | ours / Kueue as shipped "
                        "| ours / Kueue unlimited |")
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in lines[2:]}
    rate = rows["a) held Jobs released: sustained admissions/s"]
    assert rate[2:] == ["150", "15.00", "not measured", "10.00", "- |"]
    assert rows["a) API writes per admitted Job (of which Events)"][2:5] == ["2.00 (0.50)", "4.00 (1.00)",
                                                                            "not measured"]
    assert rows["controller CPU per admission, ms"][2:4] == ["10.00", "20.00"]
    assert rows["controller peak RSS, MiB"][5] == "2.00"


def test_the_load_at_the_end_is_read_when_the_report_is_written(monkeypatch: Any, capsys: Any) -> None:
    # The page's header gives the machine's load at the bench's start and at its end: the end is after the runs.
    from bench import peer_kueue  # noqa: PLC0415 - the bench's entry point, only for this test

    monkeypatch.setattr("os.getloadavg", lambda: (0.5, 0.5, 0.5))

    def run(name: str, *_: object, **__: object) -> SystemRun:
        monkeypatch.setattr("os.getloadavg", lambda: (7.77, 1.0, 1.0))  # the runs load the machine
        return SystemRun(name, problem="not run in this test")

    monkeypatch.setattr(peer_kueue, "run_system", run)
    monkeypatch.setattr("webhook.cli.devsystem.service_available", lambda: True)
    assert peer_kueue.main(["--systems", "ours"]) == 0
    assert "7.77 (1 min) at the end" in capsys.readouterr().out
