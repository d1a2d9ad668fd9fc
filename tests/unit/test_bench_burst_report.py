"""The burst bench's section (issue 21): every figure it prints comes from the bursts it is given."""

from __future__ import annotations

from collections import Counter

from bench.burst_bench import Burst
from bench.burst_report import report
from bench.burst_stats import parse_samples

API = """\
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="jobs.mutate.x.io",rejected="false",le="0.1"} 3
apiserver_admission_webhook_admission_duration_seconds_bucket{name="jobs.mutate.x.io",rejected="false",le="+Inf"} 3
apiserver_admission_webhook_admission_duration_seconds_count{name="jobs.mutate.x.io",rejected="false"} 3
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",resource="jobs",verb="POST"} 3
apiserver_request_total{code="500",resource="jobs",verb="POST"} 1
"""


def bursts() -> list[Burst]:
    raw = Burst("no webhook", "raw", 64, False, 4, sent=4, created=["a", "b", "c", "d"], seconds=[0.1] * 4,
                wall_s=2.0)
    raw.check = {"exist": 4, "lost": 0, "admitted": 0, "queued": 4, "neither": 0}
    ours = Burst("ours", "ours", 64, True, 4, sent=4, created=["a", "b", "c"],
                 failures=Counter({"webhook timeout": 1}), examples={"webhook timeout": "context deadline exceeded"},
                 seconds=[0.2, 0.2, 0.2, 5.0], wall_s=4.0,
                 api=parse_samples(API, ("apiserver_admission_webhook_", "apiserver_request_total")))
    ours.check = {"exist": 3, "lost": 0, "admitted": 1, "queued": 2, "neither": 0, "queue_status_waiting": 2,
                  "settled": 1}
    return [raw, ours]


def test_the_section_has_the_failures_the_ratio_and_the_check() -> None:
    text = report(bursts(), "cmd", 50, 123.0, "")
    assert "| failed by our webhook (timeout, unreachable, denied) | 0 | 1 |" in text
    assert "| creates per second | 2 | 1 |" in text
    assert "| webhook timeout | 0 | 1 | context deadline exceeded |" in text
    assert "| `POST jobs` answers by code (API server) | 0 | 201: 3, 500: 1 |" in text
    assert "| `jobs.mutate.x.io`: calls (API server) | 0 | 3 |" in text
    assert "64 in flight, ours / no webhook: creates per second 0.38" in text
    assert "Failed creates through our webhooks: 25.00 % with 64 in flight" in text
    assert "| waiting in the Queue's status | - | 2 |" in text
    assert "whole life (start, caches, all bursts): 123 MiB" in text


def test_a_failed_run_says_so_and_invents_nothing() -> None:
    text = report([], "cmd", 50, 0.0, "TimeoutError: no cluster")
    assert "not measured: TimeoutError: no cluster" in text
    assert "creates per second" not in text
